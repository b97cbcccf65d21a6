"""The heads' written-once template (HeadTemplate): values against numpy by hand, and the
errors of the spec assembly for arguments only TRAIN takes."""

from __future__ import annotations

import numpy as np
import pytest

import jaxspec
from jaxspec import heads


def _sigmoid_xent(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))


def _regression_and_binary() -> tuple[heads.MultiHead, dict, dict, dict]:
    head = heads.MultiHead([heads.RegressionHead(name="r"), heads.BinaryClassHead(name="b")])
    logits = {
        "r": np.array([[0.5], [1.5], [-1.0]], np.float32),
        "b": np.array([[2.0], [-1.0], [0.3]], np.float32),
    }
    labels = {
        "r": np.array([[1.0], [1.0], [0.0]], np.float32),
        "b": np.array([[1], [0], [0]], np.int32),
    }
    return head, logits, labels, {"x": np.zeros((3, 1), np.float32)}


def test_multi_head_dict_logits_with_regularization_in_eval() -> None:
    """A MultiHead's logits as a dict by head name, with a regularization loss: the EVAL
    spec's loss and metrics equal the ones computed by hand."""
    head, logits, labels, features = _regression_and_binary()
    reg = np.float32(0.25)
    spec = head.create_tpu_estimator_spec(
        features, jaxspec.ModeKeys.EVAL, logits, labels, regularization_losses=[reg]
    )
    mse = np.mean((logits["r"] - labels["r"]) ** 2)
    xent = _sigmoid_xent(logits["b"], labels["b"].astype(np.float32))
    np.testing.assert_allclose(float(spec.loss), mse + np.mean(xent) + reg, rtol=1e-5)
    metric_fn, tensors = spec.eval_metrics
    values = {k: float(v.compute()) for k, v in metric_fn(**tensors).items()}
    np.testing.assert_allclose(
        values["regularization_loss/r_b"], reg, rtol=1e-6
    )  # the MultiHead is named r_b
    np.testing.assert_allclose(values["loss/r"], mse, rtol=1e-5)
    np.testing.assert_allclose(values["average_loss/b"], np.mean(xent), rtol=1e-5)
    np.testing.assert_allclose(values["accuracy/b"], np.mean((logits["b"] > 0) == labels["b"]), rtol=1e-6)
    np.testing.assert_allclose(values["label/mean/r"], np.mean(labels["r"]), rtol=1e-6)


def test_update_metrics_takes_tf_argument_order() -> None:
    """update_metrics(eval_metrics, features, logits, labels, mode, regularization_losses),
    as tf.estimator.Head: the sixth positional argument is the regularization losses."""
    head = heads.RegressionHead()
    logits = np.array([[1.0], [3.0]], np.float32)
    labels = np.array([[0.0], [1.0]], np.float32)
    reg = [np.float32(0.5), np.float32(0.25)]
    states = head.update_metrics(head.metrics(reg), {}, logits, labels, jaxspec.ModeKeys.EVAL, reg)
    values = {k: float(v.compute()) for k, v in states.items()}
    np.testing.assert_allclose(values["average_loss"], np.mean((logits - labels) ** 2), rtol=1e-6)
    np.testing.assert_allclose(values["regularization_loss"], 0.75, rtol=1e-6)
    np.testing.assert_allclose(values["prediction/mean"], 2.0, rtol=1e-6)


@pytest.mark.parametrize("mode", [jaxspec.ModeKeys.EVAL, jaxspec.ModeKeys.PREDICT])
def test_function_logits_outside_train_is_a_type_error(mode: str) -> None:
    head = heads.BinaryClassHead()
    with pytest.raises(TypeError, match="logits"):
        head.create_tpu_estimator_spec(
            {}, mode, lambda p: p, np.array([[1.0]], np.float32) if mode == jaxspec.ModeKeys.EVAL else None
        )


def test_function_regularization_loss_in_eval_is_a_type_error() -> None:
    head = heads.RegressionHead()
    with pytest.raises(TypeError, match=r"regularization_losses\[1\]"):
        head.create_tpu_estimator_spec(
            {},
            jaxspec.ModeKeys.EVAL,
            np.array([[1.0]], np.float32),
            np.array([[0.0]], np.float32),
            regularization_losses=[np.float32(0.1), lambda p: 0.0],
        )
