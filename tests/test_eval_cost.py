"""What a warm ``evaluate`` call skips, and what it must still do exactly.

init_fn is traced once per Estimator (a model_dir without checkpoint re-initialises on
every call); loops are dispatched ahead of the host, yet hooks see each loop's exact loss,
in order, and a stop drops the loop dispatched ahead; the event file is on disk when
evaluate returns. Every number is checked against numpy computed here.
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import batches_input_fn, digits, fast_config

import jaxspec
from jaxspec import metrics
from jaxspec.hooks.early_stopping import read_eval_metrics

X, Y = digits(160)
BATCH = 16
C = 10


def _metric_fn(labels, logits):
    return {"accuracy": metrics.accuracy(labels, jnp.argmax(logits, -1))}


def _model_fn(features, labels, mode, params, state):
    logits = features["x"] @ state["w"] + state["b"]
    loss = jnp.mean(jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, labels[:, None], -1)[:, 0])
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(_metric_fn, [labels, logits]))


class _InitCounter:
    """init_fn from the key and the first batch's features; counts its Python calls (traces)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, rng, features):
        self.calls += 1
        w = 0.3 * jax.random.normal(rng, (64, C))
        return {"w": w, "b": jnp.zeros(C) + jnp.mean(features["x"])}  # b reads the batch's values


class _Recorder(jaxspec.SessionRunHook):
    """The initial state, the loss of each loop (when ``fetch``) and the order of calls;
    asks for a stop after ``stop_after`` loops."""

    def __init__(self, fetch: bool = True, stop_after: int | None = None) -> None:
        self.fetch, self.stop_after = fetch, stop_after

    def begin(self) -> None:
        self.events, self.losses, self.state = [], [], None

    def after_create_session(self, session, coord) -> None:
        self.state = jax.tree.map(np.asarray, session.state)

    def before_run(self, run_context):
        self.events.append("before")
        return jaxspec.SessionRunArgs("loss") if self.fetch else None

    def after_run(self, run_context, run_values) -> None:
        self.events.append("after")
        if self.fetch:
            self.losses.append(run_values.results)
        if self.stop_after is not None and self.events.count("after") == self.stop_after:
            run_context.request_stop()


def _estimator(model_dir, init, use_tpu: bool = False, ipl: int = 2) -> jaxspec.TPUEstimator:
    return jaxspec.TPUEstimator(
        _model_fn,
        config=fast_config(str(model_dir), iterations_per_loop=ipl),
        use_tpu=use_tpu,
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        init_fn=init,
    )


def _expected(state, x, y) -> tuple[float, float, list[float]]:
    """(loss: the mean of per-batch losses, accuracy, per-batch losses), in float64 numpy."""
    logits = x.astype(np.float64) @ state["w"].astype(np.float64) + state["b"].astype(np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    ce = np.log(np.exp(shifted).sum(-1)) - shifted[np.arange(len(y)), y]
    batch_losses = [float(ce[s : s + BATCH].mean()) for s in range(0, len(y), BATCH)]
    return float(np.mean(batch_losses)), float(np.mean(logits.argmax(-1) == y)), batch_losses


@pytest.mark.parametrize("use_tpu", [False, True])
def test_init_fn_traced_once_and_results_exact(tmp_path, use_tpu):
    init = _InitCounter()
    est = _estimator(tmp_path, init, use_tpu)
    hook = _Recorder()
    x, y = X[:96], Y[:96]
    results = [est.evaluate(batches_input_fn(x, y, BATCH), hooks=[hook]) for _ in range(3)]
    after_first = init.calls
    results.append(est.evaluate(batches_input_fn(x, y, BATCH), hooks=[hook]))
    assert init.calls == after_first  # later calls neither trace nor lower init_fn
    # The state is init_fn's of the key and the first batch: b is that batch's mean.
    np.testing.assert_allclose(hook.state["b"], np.full(C, X[:BATCH].mean()), rtol=1e-6)
    loss, accuracy, _ = _expected(hook.state, x, y)
    for r in results:
        assert r["global_step"] == 0
        np.testing.assert_allclose(r["loss"], loss, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(r["accuracy"], accuracy, rtol=1e-6, atol=1e-6)
        assert r == results[0]
    # Other data: the cached init reads the new first batch's values, not the first call's.
    shifted = est.evaluate(batches_input_fn(X[96:], Y[96:], BATCH), hooks=[hook])
    assert init.calls == after_first
    np.testing.assert_allclose(hook.state["b"], np.full(C, X[96 : 96 + BATCH].mean()), rtol=1e-6)
    np.testing.assert_allclose(shifted["loss"], _expected(hook.state, X[96:], Y[96:])[0], rtol=1e-6)


def test_init_fn_needing_concrete_features_still_runs_each_call(tmp_path):
    def host_init(rng, features):
        scale = float(np.asarray(features["x"]).max())  # host logic on the values: not traceable
        return {"w": jnp.full((64, C), 0.01 * scale), "b": jnp.arange(C, dtype=jnp.float32)}

    est = _estimator(tmp_path, host_init)
    hook = _Recorder()
    for lo in (0, 48):
        x, y = X[lo : lo + 48], Y[lo : lo + 48]
        r = est.evaluate(batches_input_fn(x, y, BATCH), hooks=[hook])
        np.testing.assert_allclose(hook.state["w"], 0.01 * x[:BATCH].max(), rtol=1e-6)
        np.testing.assert_allclose(r["loss"], _expected(hook.state, x, y)[0], rtol=1e-6)


@pytest.mark.parametrize("use_tpu", [False, True])
def test_hooks_see_each_loops_exact_loss_in_order(tmp_path, use_tpu):
    est = _estimator(tmp_path, _InitCounter(), use_tpu, ipl=2)
    asking, silent = _Recorder(fetch=True), _Recorder(fetch=False)
    x, y = X[:96], Y[:96]  # 6 batches: 3 loops of 2
    est.evaluate(batches_input_fn(x, y, BATCH), hooks=[asking, silent])
    _, _, batch_losses = _expected(asking.state, x, y)
    per_loop = [np.mean(batch_losses[i : i + 2]) for i in range(0, 6, 2)]
    np.testing.assert_allclose(np.asarray(asking.losses, np.float64), per_loop, rtol=1e-5)
    assert asking.events == silent.events == ["before", "after"] * 3


@pytest.mark.parametrize("use_tpu", [False, True])
def test_stop_requested_drops_the_loop_dispatched_ahead(tmp_path, use_tpu):
    est = _estimator(tmp_path, _InitCounter(), use_tpu, ipl=2)
    hook = _Recorder(stop_after=2)
    x, y = X[:160], Y[:160]  # 10 batches: 5 loops, stopped after 2
    r = est.evaluate(batches_input_fn(x, y, BATCH), hooks=[hook])
    assert hook.events == ["before", "after"] * 2
    loss, accuracy, _ = _expected(hook.state, x[:64], y[:64])  # the 4 batches of 2 loops
    np.testing.assert_allclose(r["loss"], loss, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r["accuracy"], accuracy, rtol=1e-6, atol=1e-6)


class _BadInput(Exception):
    pass


def test_input_error_after_some_loops_keeps_its_type(tmp_path):
    est = _estimator(tmp_path, _InitCounter(), ipl=2)
    hook = _Recorder()

    def input_fn():
        def gen():
            for s in range(0, 80, BATCH):
                yield {"x": X[s : s + BATCH]}, Y[s : s + BATCH]
            raise _BadInput("input broke after 5 batches")

        return gen()

    with pytest.raises(_BadInput, match="after 5 batches"):
        est.evaluate(input_fn, hooks=[hook])
    assert hook.events[:4] == ["before", "after"] * 2  # the loops before the error ran in order
    assert not [t for t in threading.enumerate() if t.name.startswith("jaxspec")]


def test_event_file_on_disk_when_evaluate_returns(tmp_path):
    est = _estimator(tmp_path, _InitCounter())
    r = est.evaluate(batches_input_fn(X[:48], Y[:48], BATCH))
    on_disk = read_eval_metrics(est.eval_dir())
    assert list(on_disk) == [0]
    assert on_disk[0]["loss"] == pytest.approx(r["loss"], rel=1e-6)
    assert on_disk[0]["accuracy"] == pytest.approx(r["accuracy"], rel=1e-6)
    assert "global_step" not in on_disk[0]  # as tf.estimator: no global_step scalar in eval/


def test_a_metric_fn_that_cannot_be_vectorised_runs_step_by_step_on_the_mesh(tmp_path):
    """On the mesh metric_fn runs vectorised over the steps of a loop; one calling
    ``jax.pure_callback`` (no vmap_method) cannot be, and runs one step at a time: the
    same values, compared with numpy."""
    x = np.random.RandomState(0).randn(64, 3).astype(np.float32)
    y = x.sum(1)

    def metric_fn(labels, preds):
        err = (preds - labels) ** 2
        host_max = jax.pure_callback(
            lambda v: np.asarray(v.max(), np.float32), jax.ShapeDtypeStruct((), jnp.float32), err
        )
        return {"max_err": metrics.mean(host_max), "mse": metrics.mean(err)}

    def model_fn(features, labels, mode, params, state):
        preds = features["x"] @ state["w"]
        loss = jnp.mean((preds - labels) ** 2)
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, preds]))

    est = jaxspec.TPUEstimator(
        model_fn,
        config=fast_config(str(tmp_path), iterations_per_loop=2),
        use_tpu=True,
        train_batch_size=16,
        eval_batch_size=16,
        init_fn=lambda: {"w": jnp.full(3, 0.5, jnp.float32)},
    )
    results = est.evaluate(
        lambda params: iter([({"x": x[s : s + 16]}, y[s : s + 16]) for s in range(0, 64, 16)])
    )
    err = (x @ np.full(3, 0.5, np.float32) - y) ** 2
    np.testing.assert_allclose(
        results["max_err"], np.mean([err[s : s + 16].max() for s in range(0, 64, 16)]), rtol=1e-6
    )
    np.testing.assert_allclose(results["mse"], err.mean(), rtol=1e-6)


def test_mesh_eval_loop_reduces_across_devices_once(tmp_path):
    """The loss's row counts and the metric states go through one all-reduce per loop (a
    reduction of their own would make every device wait for the others before the scan),
    and the loss stays each batch's mean, a short last batch weighing as a full one."""
    init = _InitCounter()
    est = _estimator(tmp_path, init, use_tpu=True)
    hook = _Recorder()
    x, y = X[:88], Y[:88]  # 5 full batches of 16 and one of 8
    result = est.evaluate(batches_input_fn(x, y, BATCH), hooks=[hook])
    loss, accuracy, _ = _expected(hook.state, x, y)
    np.testing.assert_allclose(result["loss"], loss, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(result["accuracy"], accuracy, rtol=1e-6, atol=1e-6)
    compiled = est._compile_cache.modes["eval"].compiled
    assert compiled
    for executable in compiled.values():
        assert executable.as_text().count(" all-reduce(") == 1


def test_mesh_eval_loss_is_float32_under_x64(tmp_path):
    """With jax_enable_x64 and a float64 loss, the mesh's eval loss is accumulated in
    float32, as ``metrics.mean`` and the loss off the mesh (TF's mean is float32 too)."""

    def model_fn(features, labels, mode, params, state):
        spec = _model_fn(features, labels, mode, params, state)
        return jaxspec.TPUEstimatorSpec(
            mode, loss=spec.loss.astype(jnp.float64), eval_metrics=spec.eval_metrics
        )

    with jax.enable_x64(True):
        est = jaxspec.TPUEstimator(
            model_fn,
            config=fast_config(str(tmp_path), iterations_per_loop=2),
            use_tpu=True,
            train_batch_size=BATCH,
            eval_batch_size=BATCH,
            init_fn=_InitCounter(),
        )
        hook = _Recorder()
        x, y = X[:72], Y[:72]
        result = est.evaluate(batches_input_fn(x, y, BATCH), hooks=[hook])
    _, _, batch_losses = _expected(hook.state, x, y)
    expected = np.float32(np.sum(np.float32(batch_losses))) / np.float32(len(batch_losses))
    assert result["loss"] == pytest.approx(float(expected), rel=1e-6)
    assert float(np.float32(result["loss"])) == result["loss"]  # a float32 value
