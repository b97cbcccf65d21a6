"""tf.estimator's eval loss on the mesh: the mean over input batches of each batch's loss,
a short last batch's loss over its real rows (load_breast_cancer: 569 rows)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from tests.helpers import batches_input_fn, fast_config


def _data() -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
    w = np.random.default_rng(0).normal(0, 0.3, (30,)).astype(np.float32)
    return x, y.astype(np.float32), {"w": w, "b": np.float32(0.2)}


X, Y, PARAMS = _data()


def model_fn(features, labels, mode, params, state):
    logits = features["x"] @ state["w"] + state["b"]
    if mode == jaxspec.ModeKeys.PREDICT:
        return jaxspec.TPUEstimatorSpec(mode, predictions={"logits": logits})
    per_row = jnp.logaddexp(0.0, logits) - labels * logits  # sigmoid cross-entropy
    loss = jnp.mean(per_row)

    def metric_fn(labels, logits):
        return {
            "accuracy": jaxspec.metrics.accuracy(labels, (logits > 0).astype(jnp.float32)),
            "masked_loss": jaxspec.metrics.mean(per_row_of(labels, logits)),
        }

    return jaxspec.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))


def per_row_of(labels, logits):
    return jnp.logaddexp(0.0, logits) - labels * logits


def init_fn():
    return jax.tree.map(jnp.asarray, PARAMS)


def _numpy(batch: int) -> tuple[float, float]:
    logits = X.astype(np.float64) @ PARAMS["w"] + PARAMS["b"]
    per_row = np.logaddexp(0.0, logits) - Y * logits
    batch_losses = [per_row[s : s + batch].mean() for s in range(0, len(X), batch)]
    return float(np.mean(batch_losses)), float(np.mean((logits > 0) == (Y > 0.5)))


@pytest.mark.parametrize("batch", [64, 128])  # short batch: 57 rows (one step, two with b=16)
def test_mesh_loss_is_tf_estimators(tmp_path: Any, batch: int) -> None:
    results = {}
    for use_tpu in (True, False):
        est = jaxspec.TPUEstimator(
            model_fn,
            config=fast_config(str(tmp_path / str(use_tpu))),
            use_tpu=use_tpu,
            train_batch_size=batch,
            eval_batch_size=batch,
            init_fn=init_fn,
        )
        results[use_tpu] = est.evaluate(batches_input_fn(X, Y, batch))
        # the short last batch's extra step runs even past steps: the batch is never cut
        limited = est.evaluate(batches_input_fn(X, Y, batch), steps=-(-len(X) // batch))
        assert limited["loss"] == pytest.approx(results[use_tpu]["loss"], rel=1e-6)
    loss, accuracy = _numpy(batch)
    row_mean = float(
        np.mean(np.logaddexp(0.0, X @ PARAMS["w"] + PARAMS["b"]) - Y * (X @ PARAMS["w"] + PARAMS["b"]))
    )
    assert abs(loss - row_mean) > 1e-4  # the two definitions differ here: the test can tell
    for use_tpu in (True, False):
        assert results[use_tpu]["loss"] == pytest.approx(loss, rel=1e-5), use_tpu
        assert results[use_tpu]["accuracy"] == pytest.approx(accuracy, abs=1e-6), use_tpu
        assert results[use_tpu]["masked_loss"] == pytest.approx(row_mean, rel=1e-5), use_tpu
    assert results[True]["loss"] == pytest.approx(results[False]["loss"], rel=1e-5)


def test_model_fn_reads_the_padding_mask(tmp_path: Any) -> None:
    """A loss that is not a plain mean (here a sum) weights its rows by the mask."""

    def summed(features, labels, mode, params, state):
        logits = features["x"] @ state["w"] + state["b"]
        per_row = per_row_of(labels, logits)
        mask = jaxspec.metrics.current_padding_mask()
        return jaxspec.TPUEstimatorSpec(mode, loss=jnp.sum(per_row * mask) / jnp.maximum(jnp.sum(mask), 1.0))

    est = jaxspec.TPUEstimator(
        summed, config=fast_config(str(tmp_path)), train_batch_size=64, eval_batch_size=64, init_fn=init_fn
    )
    assert est.evaluate(batches_input_fn(X, Y, 64))["loss"] == pytest.approx(_numpy(64)[0], rel=1e-5)


@pytest.mark.parametrize("cores", [2, 4, 8])  # 8: a mesh of one replica
def test_mesh_loss_with_model_parallel_replicas(tmp_path: Any, cores: int) -> None:
    """With num_cores_per_replica > 1 (fewer, wider replicas) the eval loss is still
    tf.estimator's: the replicas of the short batch are weighted the same way."""
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path),
        log_step_count_steps=None,
        save_summary_steps=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=1, num_cores_per_replica=cores),
    )
    est = jaxspec.TPUEstimator(
        model_fn, config=config, train_batch_size=64, eval_batch_size=64, init_fn=init_fn
    )
    result = est.evaluate(batches_input_fn(X, Y, 64))
    loss, accuracy = _numpy(64)
    assert result["loss"] == pytest.approx(loss, rel=1e-5)
    assert result["accuracy"] == pytest.approx(accuracy, abs=1e-6)


def masked_mean_fn(features, labels, mode, params, state):
    """The README's advice: the mean over the real rows of the batch, by the mask."""
    per_row = per_row_of(labels, features["x"] @ state["w"] + state["b"])
    mask = jaxspec.metrics.current_padding_mask()
    return jaxspec.TPUEstimatorSpec(mode, loss=jnp.sum(per_row * mask) / jnp.maximum(jnp.sum(mask), 1.0))


def _pipeline_estimator(path: Any, fn: Any, pipeline: Any) -> jaxspec.TPUEstimator:
    config = fast_config(str(path)).replace(
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=1, per_host_input_for_training=pipeline)
    )
    return jaxspec.TPUEstimator(
        fn, config=config, params={}, train_batch_size=64, eval_batch_size=64, init_fn=init_fn
    )


def test_per_replica_input_loss_is_tf_estimators(tmp_path: Any, caplog: Any) -> None:
    """Issue 35, item 6: PER_HOST_V2 (one batch per replica, 8 rows each) gives the same
    eval loss as PER_HOST_V1 and tf.estimator (the mean of the 64-row batches' losses, the
    short last one's over its 57 real rows), for a plain mean loss and for the README's
    masked mean alike; before, its padding rows counted."""
    import logging

    v2 = jaxspec.InputPipelineConfig.PER_HOST_V2
    loss, _ = _numpy(64)
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        for fn in (model_fn, masked_mean_fn):
            est = _pipeline_estimator(tmp_path / fn.__name__, fn, v2)
            assert est.evaluate(batches_input_fn(X, Y, 8))["loss"] == pytest.approx(loss, rel=1e-5)
    assert not [r for r in caplog.records if "padding" in r.getMessage()]  # nothing to warn about


def test_broadcast_padding_warns_once_unless_the_loss_reads_the_mask(tmp_path: Any, caplog: Any) -> None:
    """BROADCAST hands every replica the whole padded batch: a loss that ignores the mask
    counts the padding rows, which is named once; one that reads it gets tf.estimator's."""
    import logging

    broadcast = jaxspec.InputPipelineConfig.BROADCAST
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        est = _pipeline_estimator(tmp_path / "masked", masked_mean_fn, broadcast)
        assert est.evaluate(batches_input_fn(X, Y, 64))["loss"] == pytest.approx(_numpy(64)[0], rel=1e-5)
        assert not caplog.records
        _pipeline_estimator(tmp_path / "plain", model_fn, broadcast).evaluate(batches_input_fn(X, Y, 64))
    (warned,) = [r.getMessage() for r in caplog.records]
    assert "batch index 8 holds 57 real rows of 64" in warned and "current_padding_mask()" in warned, warned


def _sized_input_fn(sizes: list[int]) -> Any:
    """input_fn yielding consecutive batches of X, Y of the given row counts."""
    starts = np.cumsum([0, *sizes])

    def input_fn(params: Any = None) -> Any:
        return iter([({"x": X[a:b]}, Y[a:b]) for a, b in zip(starts[:-1], starts[1:], strict=True)])

    return input_fn


@pytest.mark.parametrize("ipl", [1, 3])
def test_steps_counts_input_batches_past_a_split_short_batch(tmp_path: Any, ipl: int) -> None:
    """``evaluate(steps=k)`` reads k input batches, as tf.estimator, also when a short
    batch before the end runs as several device steps on the mesh (63 rows of 64 over 8
    replicas: two steps); before, those steps counted as batches and the last batch asked
    for was not evaluated."""
    sizes = [64, 63, 64, 64, 57]
    logits = X.astype(np.float64) @ PARAMS["w"] + PARAMS["b"]
    per_row = np.logaddexp(0.0, logits) - Y * logits
    right = (logits > 0) == (Y > 0.5)
    starts = np.cumsum([0, *sizes])
    config = fast_config(str(tmp_path)).replace(tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl))
    est = jaxspec.TPUEstimator(
        model_fn, config=config, train_batch_size=64, eval_batch_size=64, init_fn=init_fn
    )
    for steps in (1, 2, 3, 4, 5, None):
        k = len(sizes) if steps is None else steps
        loss = np.mean([per_row[a:b].mean() for a, b in zip(starts[:k], starts[1 : k + 1], strict=True)])
        result = est.evaluate(_sized_input_fn(sizes), steps=steps)
        assert result["loss"] == pytest.approx(float(loss), rel=1e-5), steps
        assert result["accuracy"] == pytest.approx(float(right[: starts[k]].mean()), abs=1e-6), steps


@pytest.mark.parametrize("closes_over", ["states", "values"])
def test_metric_fn_closing_over_model_fn_values_is_named(tmp_path: Any, closes_over: str) -> None:
    """On the mesh metric_fn runs on the tensors it is given, gathered over the replicas,
    as TPUEstimator's runs on the host: one that uses model_fn's own values (a closure)
    gets a ValueError naming eval_metrics and the variable, not JAX's mesh mismatch. A
    closure over host constants stays fine."""

    def closing(features, labels, mode, params, state):
        logits = features["x"] @ state["w"] + state["b"]
        per_row = per_row_of(labels, logits)
        ops = {"masked_loss": jaxspec.metrics.mean(per_row)}
        fn = (
            (lambda: ops)
            if closes_over == "states"
            else (lambda: {"masked_loss": jaxspec.metrics.mean(per_row)})
        )
        return jaxspec.TPUEstimatorSpec(mode, loss=jnp.mean(per_row), eval_metrics=(fn, []))

    est = jaxspec.TPUEstimator(
        closing, config=fast_config(str(tmp_path)), train_batch_size=64, eval_batch_size=64, init_fn=init_fn
    )
    name = "ops" if closes_over == "states" else "per_row"
    with pytest.raises(ValueError, match=rf"eval_metrics: metric_fn uses \['{name}'\] from model_fn"):
        est.evaluate(batches_input_fn(X, Y, 64))

    scale, offset = np.float32(2.0), 0.25  # host constants: nothing traced

    def constants(features, labels, mode, params, state):
        logits = features["x"] @ state["w"] + state["b"]

        def fn(labels, logits):
            return {"scaled": jaxspec.metrics.mean(per_row_of(labels, logits) * scale + offset)}

        return jaxspec.TPUEstimatorSpec(
            mode, loss=jnp.mean(per_row_of(labels, logits)), eval_metrics=(fn, [labels, logits])
        )

    est = jaxspec.TPUEstimator(
        constants,
        config=fast_config(str(tmp_path / "c")),
        train_batch_size=64,
        eval_batch_size=64,
        init_fn=init_fn,
    )
    logits = X.astype(np.float64) @ PARAMS["w"] + PARAMS["b"]
    row_mean = float(np.mean(np.logaddexp(0.0, logits) - Y * logits))
    assert est.evaluate(batches_input_fn(X, Y, 64))["scaled"] == pytest.approx(row_mean * 2 + 0.25, rel=1e-5)
