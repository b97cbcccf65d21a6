"""Keras 3 metrics as jaxspec states (stateless API on the JAX backend).

The Keras backend is fixed when keras is first imported, and other test modules import it
with the TensorFlow backend, so the JAX-backend checks run in a fresh interpreter with
``KERAS_BACKEND=jax``; in this process we check the clear TypeError for other backends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from jaxspec import metrics

keras = pytest.importorskip("keras")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import os, tempfile
    import jax, jax.numpy as jnp, keras, numpy as np
    import jaxspec
    from jaxspec import metrics
    from jaxspec.metrics.base import padding_mask_scope
    assert keras.backend.backend() == "jax"

    rng = np.random.RandomState(0)
    N, C = 37, 3
    x = rng.rand(N, C).astype(np.float32)
    y = rng.randint(0, C, N).astype(np.int32)
    probs = x / x.sum(1, keepdims=True)

    def keras_value(metric, *args):
        metric.update_state(*args)
        return float(metric.result())

    want_auc = keras_value(keras.metrics.AUC(num_thresholds=50), jax.nn.one_hot(y, C), probs)
    want_acc = keras_value(keras.metrics.SparseCategoricalAccuracy(), y, probs)

    # 1. keras_metric states merged batch by batch equal Keras on the whole data.
    state = None
    for s in range(0, N, 10):
        new = metrics.keras_metric(keras.metrics.AUC(num_thresholds=50), jax.nn.one_hot(y[s:s + 10], C), probs[s:s + 10])
        state = new if state is None else state.merge(new)
    assert abs(float(state.compute()) - want_auc) < 1e-6, (float(state.compute()), want_auc)

    # 2. Through the Estimators: on the mesh (8 replicas, padded final step) and off it.
    def make_model_fn(raw):
        def metric_fn(labels, probs):
            out = {"auc": metrics.keras_metric(keras.metrics.AUC(num_thresholds=50), jax.nn.one_hot(labels, C), probs),
                   "acc": metrics.keras_metric(keras.metrics.SparseCategoricalAccuracy(), labels, probs)}
            if raw:  # a Keras object updated by metric_fn itself
                m = keras.metrics.SparseCategoricalAccuracy()
                m.update_state(labels, probs)
                out["raw_acc"] = m
            return out

        def model_fn(features, labels, mode, params, state):
            p = features["x"] / jnp.sum(features["x"], 1, keepdims=True) + state["b"]
            return jaxspec.TPUEstimatorSpec(mode, loss=jnp.mean(p), eval_metrics=(metric_fn, [labels, p]))
        return model_fn

    def evaluate(use_tpu, raw, batch):
        config = jaxspec.RunConfig(model_dir=tempfile.mkdtemp(), save_checkpoints_steps=None,
                                   save_checkpoints_secs=None, log_step_count_steps=None, save_summary_steps=0)
        est = jaxspec.TPUEstimator(make_model_fn(raw), config=config, use_tpu=use_tpu, train_batch_size=8,
                                   eval_batch_size=batch, init_fn=lambda: {"b": jnp.zeros(())})
        return est.evaluate(lambda params: (({"x": x[s:s + params["batch_size"]]}, y[s:s + params["batch_size"]])
                                            for s in range(0, N, params["batch_size"])))

    for use_tpu, raw in ((True, False), (False, True)):
        r = evaluate(use_tpu, raw, 16)
        assert abs(r["auc"] - want_auc) < 1e-6 and abs(r["acc"] - want_acc) < 1e-6, (r, want_auc, want_acc)
        if raw:
            assert abs(r["raw_acc"] - want_acc) < 1e-6

    # ... but on the mesh its padded final step counted padding rows: refused by name, not NaN
    # (the values computed inside the eval loops cannot raise; the host checks the totals).
    try:
        r = evaluate(True, True, 16)
        raise AssertionError(f"padded rows were not refused on the mesh: {r}")
    except ValueError as e:
        assert "padded rows" in str(e) and "keras_metric" in str(e), e

    @jax.jit
    def updated_on_padded_batch(labels, probs):
        with padding_mask_scope(jnp.array([1.0, 1.0, 0.0])):
            m = keras.metrics.SparseCategoricalAccuracy()
            m.update_state(labels, probs)
            return metrics.as_metric_state(m, "raw")

    try:  # a metric_fn-updated object counted the padded rows of its batch: refused
        updated_on_padded_batch(y[:3], probs[:3]).compute()
        raise AssertionError("padded rows were not refused")
    except ValueError as e:
        assert "padded rows" in str(e) and "keras_metric" in str(e), e

    # 3. Objects the adapter cannot stream: not updated in the trace; non-zero start.
    try:
        metrics.as_metric_state(keras.metrics.Mean(), "m")
        raise AssertionError("an un-updated Keras metric was accepted")
    except TypeError as e:
        assert "not updated inside" in str(e), e

    class StartsAtOne(keras.metrics.Metric):
        def __init__(self, name="starts_at_one", **kw):
            super().__init__(name=name, **kw)
            self.v = self.add_variable(shape=(), initializer="ones", name="v")
        def update_state(self, y, sample_weight=None):
            self.v.assign(self.v + jnp.sum(y))
        def result(self):
            return self.v

    try:
        metrics.keras_metric(StartsAtOne(), jnp.ones(3))
        raise AssertionError("a non-additive Keras metric was accepted")
    except TypeError as e:
        assert "non-zero" in str(e), e
    print("KERAS_OK")
""")


def test_keras_metrics_stream_on_the_jax_backend():
    env = dict(
        os.environ,
        KERAS_BACKEND="jax",
        PYTHONPATH=ROOT,
        TF_CPP_MIN_LOG_LEVEL="3",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
    )
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    assert out.returncode == 0 and "KERAS_OK" in out.stdout, out.stderr[-4000:]


def test_other_backends_and_keras_style_objects_raise_type_error():
    class KerasStyle:  # update_state/result, but no stateless API
        def update_state(self, *args): ...
        def result(self): ...

    with pytest.raises(TypeError):
        metrics.as_metric_state(KerasStyle(), "k")
    if keras.backend.backend() != "jax":
        with pytest.raises(TypeError, match="JAX backend"):
            metrics.keras_metric(keras.metrics.Mean(), np.ones(3))
        with pytest.raises(TypeError, match="JAX backend"):
            metrics.as_metric_state(keras.metrics.Mean(), "m")
