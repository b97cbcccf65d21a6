"""Early stopping hooks (tf.estimator.experimental's), in train and train_and_evaluate,
reading what evaluate writes to est.eval_dir()."""

from __future__ import annotations

import glob
import os
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec.hooks import early_stopping as es
from jaxspec.store import summaries
from tests.two_processes import run_two_processes

X = np.linspace(-1, 1, 64, dtype=np.float32)[:, None]
Y = 3 * X[:, 0] + 0.5


def model_fn(features, labels, mode, state):
    w = state["w"]
    pred = features["x"][:, 0] * w[0] + w[1]
    loss = jnp.mean((pred - labels) ** 2)
    new = {
        "w": w
        - 0.1
        * jnp.stack([jnp.mean(2 * (pred - labels) * features["x"][:, 0]), jnp.mean(2 * (pred - labels))])
    }
    return jaxspec.EstimatorSpec(
        mode,
        loss=loss,
        train_op=new,
        eval_metric_ops={"mae": jaxspec.metrics.mean_absolute_error(labels, pred)},
    )


def init_fn():
    return {"w": jnp.zeros(2, jnp.float32)}


def input_fn(repeat: bool = True) -> Any:
    def fn():
        def gen():
            while True:
                for s in range(0, 64, 16):
                    yield {"x": X[s : s + 16]}, Y[s : s + 16]
                if not repeat:
                    return

        return gen()

    return fn


def estimator(model_dir: str, **config: Any) -> jaxspec.Estimator:
    settings = dict(save_checkpoints_steps=None, save_checkpoints_secs=None, log_step_count_steps=None)
    settings.update(config)
    return jaxspec.Estimator(model_fn, model_dir, jaxspec.RunConfig(**settings), init_fn=init_fn)


def test_eval_dir_and_event_files_as_tf(tmp_path: Any) -> None:
    import tensorflow as tf

    est = estimator(str(tmp_path))
    assert est.eval_dir() == os.path.join(str(tmp_path), "eval")
    assert est.eval_dir("holdout") == os.path.join(str(tmp_path), "eval_holdout")
    results = {}
    for steps in (2, 5):
        est.train(input_fn(), steps=steps)
        results[est.evaluate(input_fn(False))["global_step"]] = est.evaluate(input_fn(False), name="holdout")
    ours = es.read_eval_metrics(est.eval_dir("holdout"))
    theirs: dict[int, dict[str, float]] = {}
    for path in glob.glob(os.path.join(est.eval_dir("holdout"), "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for v in event.summary.value:
                theirs.setdefault(event.step, {})[v.tag] = v.simple_value
    assert list(ours) == [2, 7] and ours == theirs
    for step, values in ours.items():
        assert set(values) == {"loss", "mae"}  # tf.estimator writes no global_step scalar
        assert values["loss"] == pytest.approx(results[step]["loss"], rel=1e-6)
        assert values["mae"] == pytest.approx(results[step]["mae"], rel=1e-6)


TABLE = {10: 0.5, 20: 0.4, 30: 0.45, 40: 0.41}  # loss by global step


@pytest.mark.parametrize(
    "make, stops",
    [
        (
            lambda est, d: es.stop_if_no_decrease_hook(
                est, "loss", 20, d, run_every_secs=None, run_every_steps=1
            ),
            True,
        ),  # best 20, last 40
        (
            lambda est, d: es.stop_if_no_decrease_hook(
                est, "loss", 21, d, run_every_secs=None, run_every_steps=1
            ),
            False,
        ),
        (
            lambda est, d: es.stop_if_no_decrease_hook(
                est, "loss", 10, d, min_steps=25, run_every_secs=None, run_every_steps=1
            ),
            False,
        ),
        (
            lambda est, d: es.stop_if_no_increase_hook(
                est, "loss", 30, d, run_every_secs=None, run_every_steps=1
            ),
            True,
        ),  # best 10
        (
            lambda est, d: es.stop_if_no_increase_hook(
                est, "loss", 10, d, min_steps=15, run_every_secs=None, run_every_steps=1
            ),
            True,
        ),
        (
            lambda est, d: es.stop_if_lower_hook(
                est, "loss", 0.41, d, run_every_secs=None, run_every_steps=1
            ),
            True,
        ),  # 0.4 < 0.41
        (
            lambda est, d: es.stop_if_lower_hook(est, "loss", 0.4, d, run_every_secs=None, run_every_steps=1),
            False,
        ),  # strictly
        (
            lambda est, d: es.stop_if_higher_hook(
                est, "loss", 0.44, d, run_every_secs=None, run_every_steps=1
            ),
            True,
        ),
        (
            lambda est, d: es.stop_if_higher_hook(
                est, "loss", 0.44, d, min_steps=35, run_every_secs=None, run_every_steps=1
            ),
            False,
        ),
        (
            lambda est, d: es.stop_if_higher_hook(
                est, "loss", 0.44, d, min_steps=30, run_every_secs=None, run_every_steps=1
            ),
            True,
        ),
    ],
)
def test_rules_in_train(tmp_path: Any, make: Any, stops: bool) -> None:
    eval_dir = str(tmp_path / "results")
    for step, loss in TABLE.items():
        summaries.write_scalars(eval_dir, step, {"loss": loss})
    summaries.close(eval_dir)
    est = estimator(str(tmp_path / "model"))
    est.train(input_fn(), steps=4, hooks=[make(est, eval_dir)])
    # The first step is always checked; a stop ends training there.
    assert est._checkpoint_store().latest_step() == (1 if stops else 4)


def test_checked_every_run_every_steps_and_default_eval_dir(tmp_path: Any) -> None:
    est = estimator(str(tmp_path))
    calls = []

    def should_stop() -> bool:
        calls.append(len(calls))
        return len(calls) == 3

    est.train(input_fn(), steps=20, hooks=[es.make_early_stopping_hook(est, should_stop, None, 4)])
    assert est._checkpoint_store().latest_step() == 9  # checked after steps 1, 5, 9
    summaries.write_scalars(est.eval_dir(), 9, {"loss": 0.0})
    summaries.close(est.eval_dir())
    est.train(
        input_fn(),
        steps=5,
        hooks=[es.stop_if_lower_hook(est, "loss", 1.0, run_every_secs=None, run_every_steps=1)],
    )
    assert est._checkpoint_store().latest_step() == 10
    with pytest.raises(KeyError, match="accuracy"):
        est.train(input_fn(), steps=1, hooks=[es.stop_if_lower_hook(est, "accuracy", 1.0)])


def test_bad_arguments(tmp_path: Any) -> None:
    est = estimator(str(tmp_path))
    with pytest.raises(ValueError, match="run_every_secs or run_every_steps"):
        es.stop_if_lower_hook(est, "loss", 1.0, run_every_secs=1, run_every_steps=1)
    with pytest.raises(TypeError, match="Estimator"):
        es.make_early_stopping_hook(object(), lambda: True)
    with pytest.raises(TypeError, match="callable"):
        es.make_early_stopping_hook(est, 3)


def test_in_train_and_evaluate(tmp_path: Any) -> None:
    est = estimator(str(tmp_path), save_checkpoints_steps=10)
    hook = jaxspec.hooks.stop_if_lower_hook(est, "loss", 100.0, run_every_secs=None, run_every_steps=1)
    train = jaxspec.TrainSpec(input_fn(), max_steps=1000, hooks=[hook])
    evals = jaxspec.EvalSpec(input_fn(False), steps=None, throttle_secs=0, start_delay_secs=0)
    metrics, _ = jaxspec.train_and_evaluate(est, train, evals)
    # Step 10 saves and is evaluated; at step 11 the hook reads that result and stops.
    assert metrics["global_step"] == 11
    assert list(es.read_eval_metrics(est.eval_dir())) == [10, 11]


def test_global_step_is_not_a_metric_name(tmp_path: Any) -> None:
    def bad(features, labels, mode, state):
        loss = jnp.mean(labels)
        return jaxspec.EstimatorSpec(
            mode, loss=loss, train_op=state, eval_metric_ops={"global_step": jaxspec.metrics.mean(labels)}
        )

    est = jaxspec.Estimator(bad, str(tmp_path), init_fn=init_fn)
    with pytest.raises(ValueError, match="global_step"):
        est.evaluate(input_fn(False))


def test_state_without_init_fn_is_a_value_error(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="init_fn"):
        jaxspec.Estimator(model_fn, str(tmp_path))
    with pytest.raises(ValueError, match="init_fn"):
        jaxspec.TPUEstimator(
            lambda features, labels, mode, params, state: None,
            str(tmp_path),
            config=jaxspec.RunConfig(),
            train_batch_size=8,
        )


def test_two_processes_stop_at_the_same_step(tmp_path: Any) -> None:
    """Process 0 decides (after steps 1, 3, 5: stop at the third check); both stop at 5."""

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "early_stopping_worker.py")
    results = run_two_processes(script, str(tmp_path / "model"), tmp_path, timeout=300)
    chief, worker = results
    assert chief["steps"] == worker["steps"] == [1, 2, 3, 4, 5]
    assert (chief["calls"], worker["calls"]) == (3, 0)  # only process 0 is asked
