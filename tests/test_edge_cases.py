"""Cases a new user found: event files kept, 'loss' as a metric name, number leaves in
train_op, unbatched predictions, train_and_evaluate evaluating each checkpoint once."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec.estimators.training import EvalSpec, TrainSpec, train_and_evaluate
from tests.helpers import digits, fast_config, init_fn, make_model_fn


def _data(n=16):
    x, y = digits(n)
    return x, y, (lambda: ({"x": x}, y))


def _steps_in(logdir, tag):
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    mux = EventMultiplexer({"run": logdir})
    mux.Reload()
    return sorted(e.step for e in mux.Scalars("run", tag)) if tag in mux.Runs()["run"]["scalars"] else []


def test_event_files_of_quick_successive_calls_are_all_kept(tmp_path):
    _, _, input_fn = _data()
    config = fast_config(str(tmp_path), save_summary_steps=1)
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    for _ in range(3):  # several writers open within the same second
        est.train(input_fn, steps=1)
        est.evaluate(input_fn)
    assert _steps_in(str(tmp_path), "loss") == [1, 2, 3]
    assert _steps_in(str(tmp_path / "eval"), "accuracy") == [1, 2, 3]


@pytest.mark.parametrize("use_tpu", [False, True])
def test_a_metric_named_loss_is_refused(tmp_path, use_tpu):
    x, y, _ = _data()

    def model_fn(features, labels, mode, state, params):
        logits = state.apply_fn(state.params, features["x"])
        loss = jnp.mean(logits)
        if use_tpu:
            return jaxspec.TPUEstimatorSpec(
                mode, loss=loss, eval_metrics=(lambda lg: {"loss": jaxspec.metrics.mean(lg)}, [logits])
            )
        return jaxspec.EstimatorSpec(mode, loss=loss, eval_metric_ops={"loss": jaxspec.metrics.mean(logits)})

    est = jaxspec.TPUEstimator(
        model_fn,
        config=fast_config(str(tmp_path)),
        use_tpu=use_tpu,
        train_batch_size=16,
        eval_batch_size=16,
        init_fn=init_fn,
    )
    with pytest.raises(ValueError, match="'loss'"):
        est.evaluate(lambda params: ({"x": x}, y))


def test_python_number_leaves_in_train_op(tmp_path):
    _, _, input_fn = _data()

    def model_fn(features, labels, mode, state):
        loss = jnp.mean(features["x"]) * state["w"]
        return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"w": state["w"] * 0.5, "b": 0.25})

    est = jaxspec.Estimator(
        model_fn,
        config=fast_config(str(tmp_path)),
        init_fn=lambda: {"w": jnp.float32(2.0), "b": jnp.float32(0.0)},
    )
    est.train(input_fn, steps=2)
    assert est.get_variable_value("w") == 0.5 and est.get_variable_value("b") == 0.25

    def bad(features, labels, mode, state):
        return jaxspec.EstimatorSpec(mode, loss=jnp.mean(features["x"]), train_op={"w": state["w"], "b": 1})

    with pytest.raises(ValueError, match=r"\['b'\]"):  # an int where the state holds a float
        jaxspec.Estimator(
            bad,
            config=fast_config(str(tmp_path / "bad")),
            init_fn=lambda: {"w": jnp.float32(2.0), "b": jnp.float32(0.0)},
        ).train(input_fn, steps=1)


def test_predictions_not_batched_on_axis_0(tmp_path):
    x, _, _ = _data(12)

    def model_fn(features, mode, state):
        logits = state.apply_fn(state.params, features["x"])
        return jaxspec.EstimatorSpec(mode, predictions={"logits": logits, "total": jnp.sum(logits)})

    est = jaxspec.Estimator(model_fn, config=fast_config(str(tmp_path)), init_fn=init_fn)
    batches = list(
        est.predict(lambda: ({"x": x[s : s + 4]} for s in range(0, 12, 4)), yield_single_examples=False)
    )
    assert len(batches) == 3 and batches[0]["total"].shape == () and batches[0]["logits"].shape == (4, 10)
    # The sum is near zero: its rounding error scales with the sum of magnitudes.
    logits = batches[0]["logits"]
    np.testing.assert_allclose(batches[0]["total"], logits.sum(), rtol=1e-5, atol=1e-6 * np.abs(logits).sum())
    with pytest.raises(ValueError, match="'total'"):
        next(est.predict(lambda: ({"x": x[s : s + 4]} for s in range(0, 12, 4))))


def test_train_and_evaluate_evaluates_each_checkpoint_once(tmp_path):
    x, y, input_fn = _data(32)
    seen = []

    class Recorder(jaxspec.Exporter):
        name = "recorder"

        def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
            seen.append((eval_result["global_step"], is_the_final_export))

    config = jaxspec.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=2, log_step_count_steps=None)
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    train_and_evaluate(
        est,
        TrainSpec(input_fn, max_steps=6),
        EvalSpec(input_fn, steps=1, throttle_secs=0, exporters=[Recorder()]),
    )
    assert seen == [(2, False), (4, False), (6, True)]


def test_short_training_batches_on_the_mesh(tmp_path, caplog):
    x, y = digits(80)
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path), 2), train_batch_size=32, init_fn=init_fn
    )
    batches = lambda: (({"x": x[s : s + 32]}, y[s : s + 32]) for s in range(0, 80, 32))  # noqa: E731 - 32, 32, 16
    with caplog.at_level("WARNING", logger="jaxspec"):
        est.train(batches, steps=10)
    assert est.get_variable_value("step") == 2  # the two full steps trained, the short one skipped
    assert "16 rows" in caplog.text
    short_first = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path / "b")), train_batch_size=32, init_fn=init_fn
    )
    with pytest.raises(ValueError, match="batch_size"):
        short_first.train(lambda: ({"x": x[:16]}, y[:16]), steps=1)


@pytest.mark.parametrize("iterations_per_loop", [1, 2, 10])
def test_a_short_training_batch_is_skipped_for_every_loop_size(tmp_path, iterations_per_loop):
    """Full, full, full, short, full...: the short batch is skipped whatever the loop size,
    and the batches after it are trained on."""
    x, y = digits(64)

    def batches():
        for n in (32, 32, 32, 8, 32, 32, 32):
            yield {"x": x[:n]}, y[:n]

    est = jaxspec.TPUEstimator(
        make_model_fn(),
        config=fast_config(str(tmp_path), iterations_per_loop),
        train_batch_size=32,
        init_fn=init_fn,
    )
    est.train(batches, max_steps=20)
    assert est.get_variable_value("step") == 6


def test_string_features_are_named(tmp_path):
    x, y = digits(8)
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path)), init_fn=init_fn
    )
    with pytest.raises(TypeError, match=r"features\['name'\]"):
        est.train(lambda: ({"x": x, "name": np.array(["a"] * 8)}, y), steps=1)


def test_input_fn_tuples_other_than_pairs(tmp_path):
    """As tf.estimator: a tuple from input_fn is (features, labels); any other length,
    one included, is a ValueError."""
    x, y = digits(8)
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path)), init_fn=init_fn
    )
    for bad in (lambda: iter([({"x": x},)]), lambda: iter([({"x": x}, y, y)])):
        with pytest.raises(ValueError, match="features, labels"):
            est.train(bad, steps=1)


def test_bfloat16_and_big_endian_features_are_accepted(tmp_path):
    """bfloat16 (a JAX dtype numpy calls 'V') is fed as it is; big-endian arrays are put
    in the machine's byte order (XLA has none). Both predict as the same values given as
    native float32 do."""
    import ml_dtypes

    x, _ = digits(8)
    as_bf16 = x.astype(ml_dtypes.bfloat16)
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path)), init_fn=init_fn
    )

    def logits(features):
        return np.stack([p["logits"] for p in est.predict(lambda: {"x": features})])

    np.testing.assert_array_equal(logits(as_bf16), logits(as_bf16.astype(np.float32)))
    np.testing.assert_array_equal(logits(x.astype(">f4")), logits(x.astype(np.float32)))
