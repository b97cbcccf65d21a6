"""The three spec classes reject a missing loss / train_op / predictions per mode."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec import EstimatorSpec, ModeKeys, NPUEstimatorSpec, TPUEstimatorSpec

SPECS = [EstimatorSpec, TPUEstimatorSpec, NPUEstimatorSpec]
LOSS = jnp.float32(1.5)
STATE = {"w": jnp.ones(3)}
PREDS = {"y": jnp.ones((4, 2))}


@pytest.mark.parametrize("cls", SPECS)
def test_minimal_spec_per_mode(cls):
    train = cls(ModeKeys.TRAIN, loss=LOSS, train_op=STATE)
    assert train.loss is LOSS and train.train_op is STATE
    assert cls(ModeKeys.EVAL, loss=LOSS).predictions == {}
    predict = cls(ModeKeys.PREDICT, predictions=PREDS)
    assert predict.loss is None
    assert isinstance(predict.export_outputs["serving_default"], jaxspec.export.PredictOutput)
    assert predict.export_outputs["serving_default"].outputs == PREDS


@pytest.mark.parametrize("cls", SPECS)
@pytest.mark.parametrize("mode", [ModeKeys.TRAIN, ModeKeys.EVAL])
def test_missing_loss(cls, mode):
    with pytest.raises(ValueError, match="loss"):
        cls(mode, train_op=STATE)


@pytest.mark.parametrize("cls", SPECS)
def test_missing_train_op(cls):
    with pytest.raises(ValueError, match="train_op"):
        cls(ModeKeys.TRAIN, loss=LOSS)


@pytest.mark.parametrize("cls", SPECS)
def test_missing_predictions(cls):
    with pytest.raises(ValueError, match="predictions"):
        cls(ModeKeys.PREDICT, loss=LOSS)


@pytest.mark.parametrize("cls", SPECS)
def test_loss_shape_one_is_a_scalar_and_two_is_not(cls):
    assert cls(ModeKeys.EVAL, loss=np.array([2.0], np.float32)).loss.shape == ()
    with pytest.raises(ValueError, match="loss"):
        cls(ModeKeys.EVAL, loss=jnp.ones(2))
    with pytest.raises(TypeError, match="loss"):
        cls(ModeKeys.EVAL, loss=1.0)


def test_hooks_are_checked_and_stored_as_tuples():
    spec = EstimatorSpec(ModeKeys.EVAL, loss=LOSS, evaluation_hooks=[jaxspec.SessionRunHook()])
    assert isinstance(spec.evaluation_hooks, tuple) and len(spec.evaluation_hooks) == 1
    with pytest.raises(TypeError, match="training_hooks"):
        EstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, training_hooks=[object()])


def test_tpu_host_call_validation():
    def host_fn(a, b):
        return None

    with pytest.raises(RuntimeError, match="host_call"):
        TPUEstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, host_call=(host_fn, [LOSS[None]]))
    with pytest.raises(TypeError, match="host_call"):
        TPUEstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, host_call=("not callable", []))
    with pytest.raises(ValueError, match="eval_metrics"):
        TPUEstimatorSpec(ModeKeys.EVAL, loss=LOSS, eval_metrics=(host_fn,))


def test_npu_spec_keeps_host_call_through_replace():
    host_call = (lambda loss: None, [LOSS[None]])
    spec = NPUEstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, host_call=host_call)
    again = spec._replace(loss=jnp.float32(2.0))
    assert again.host_call is not None and again.host_call[0] is host_call[0]
    with pytest.raises(ValueError, match="mode"):
        spec._replace(mode=ModeKeys.EVAL)


def test_as_estimator_spec_applies_metric_fn_and_host_call():
    def metric_fn(labels, predictions):
        return {"accuracy": jaxspec.metrics.accuracy(labels, predictions)}

    labels = jnp.array([1, 2, 3, 4])
    spec = TPUEstimatorSpec(
        ModeKeys.EVAL,
        loss=LOSS,
        eval_metrics=(metric_fn, [labels, jnp.array([1, 2, 0, 4])]),
        host_call=(lambda loss: None, [LOSS[None]]),
    )
    cpu = spec.as_estimator_spec()
    assert isinstance(cpu, EstimatorSpec)
    assert float(cpu.eval_metric_ops["accuracy"].compute()) == pytest.approx(0.75)
    assert len(cpu.evaluation_hooks) == 1
