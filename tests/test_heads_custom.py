"""A user's own head: subclass jaxspec.heads.Head, get create_estimator_spec and
create_tpu_estimator_spec for every mode (as tf.estimator.Head's subclasses do)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec.export import PredictOutput, RegressionOutput


class AbsoluteErrorHead(jaxspec.Head):
    """Regression on the mean absolute error, with one metric."""

    name = "abs"
    logits_dimension = 1
    loss_reduction = jaxspec.heads.Reduction.SUM_OVER_BATCH_SIZE

    def loss(self, labels, logits, features=None, mode=None, regularization_losses=None):
        return jnp.mean(jnp.abs(jnp.asarray(logits) - jnp.asarray(labels, jnp.float32)))

    def predictions(self, logits, keys=None):
        return {"predictions": jnp.asarray(logits)}

    def metrics(self, regularization_losses=None):
        return {"mae": jaxspec.metrics.MeanAbsoluteError(total=jnp.zeros(()), count=jnp.zeros(()))}

    def update_metrics(self, eval_metrics, features, logits, labels, regularization_losses=None, mode=None):
        mae = jaxspec.metrics.mean_absolute_error(jnp.asarray(labels, jnp.float32), jnp.asarray(logits))
        return {"mae": eval_metrics["mae"].merge(mae)}

    def _export_outputs(self, predictions: dict[str, Any]) -> dict[str, Any]:
        out = RegressionOutput(predictions["predictions"])
        return {"serving_default": out, "predict": PredictOutput(predictions)}


LOGITS = np.array([[0.5], [2.0], [-1.0], [0.0]], np.float32)
LABELS = np.array([[1.0], [1.0], [1.0], [1.0]], np.float32)


def test_custom_head_builds_every_spec():
    head = AbsoluteErrorHead()
    spec = head.create_estimator_spec(features={}, mode=jaxspec.ModeKeys.EVAL, logits=LOGITS, labels=LABELS)
    want = np.mean(np.abs(LOGITS - LABELS))
    assert float(spec.loss) == pytest.approx(want)
    assert float(spec.eval_metric_ops["mae"].compute()) == pytest.approx(want)
    tpu = head.create_tpu_estimator_spec(
        features={}, mode=jaxspec.ModeKeys.EVAL, logits=LOGITS, labels=LABELS
    )
    metric_fn, tensors = tpu.eval_metrics
    assert float(metric_fn(**tensors)["mae"].compute()) == pytest.approx(want)
    predict = head.create_estimator_spec(features={}, mode=jaxspec.ModeKeys.PREDICT, logits=LOGITS)
    assert sorted(predict.export_outputs) == ["predict", "serving_default"]
    np.testing.assert_array_equal(np.asarray(predict.predictions["predictions"]), LOGITS)
    params = jnp.asarray(LOGITS)
    train = head.create_estimator_spec(
        features={},
        mode=jaxspec.ModeKeys.TRAIN,
        logits=lambda p: p,
        labels=LABELS,
        trainable_variables=params,
        train_op_fn=lambda grads: params - grads,
    )
    # d/dp mean|p - y| = sign(p - y) / n
    np.testing.assert_allclose(np.asarray(train.train_op), LOGITS - np.sign(LOGITS - LABELS) / 4, rtol=1e-6)


def test_head_is_abstract():
    with pytest.raises(TypeError):
        jaxspec.Head()
