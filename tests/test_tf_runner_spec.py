"""tf_bridge's specs for TF tensors: the same field rules and exception types as jaxspec's
(and tf.estimator's), checked inside a graph as model_fn would build them. No sessions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tensorflow as tf

import tf_bridge
from tf_bridge.runtime.runner_hooks import HostCallFetchHook

M = tf_bridge.ModeKeys


@pytest.fixture(autouse=True)
def graph() -> Iterator[tf.Graph]:
    with tf.Graph().as_default() as g:
        yield g


def _train_op() -> tf.Operation:
    return tf.no_op(name="train")


def test_per_mode_required_fields_and_defaults() -> None:
    loss = tf.constant(1.0)
    spec = tf_bridge.EstimatorSpec(M.TRAIN, loss=loss, train_op=_train_op())
    assert isinstance(spec.scaffold, tf.compat.v1.train.Scaffold)
    assert spec.predictions == {} and spec.eval_metric_ops == {} and spec.training_hooks == ()
    with pytest.raises(ValueError, match="loss"):
        tf_bridge.EstimatorSpec(M.EVAL)
    with pytest.raises(ValueError, match="train_op"):
        tf_bridge.EstimatorSpec(M.TRAIN, loss=loss)
    with pytest.raises(ValueError, match="predictions"):
        tf_bridge.EstimatorSpec(M.PREDICT)
    spec = tf_bridge.EstimatorSpec(None, loss=loss)  # tf.estimator accepts mode=None
    assert spec.mode is None
    with pytest.raises(ValueError, match="mode"):
        tf_bridge.EstimatorSpec("predict", predictions=loss)


def test_loss_rules() -> None:
    spec = tf_bridge.EstimatorSpec(M.EVAL, loss=tf.constant([2.0]))
    assert spec.loss.shape == tf.TensorShape([])
    with pytest.raises(ValueError, match="loss"):
        tf_bridge.EstimatorSpec(M.EVAL, loss=tf.constant([1.0, 2.0]))
    with pytest.raises(TypeError, match="loss"):
        tf_bridge.EstimatorSpec(M.EVAL, loss=1.0)
    with pytest.raises(TypeError, match="loss"):
        tf_bridge.EstimatorSpec(M.EVAL, loss=tf.sparse.from_dense(tf.constant([1.0])))
    with tf.Graph().as_default():
        foreign = tf.constant(1.0)
    with pytest.raises(ValueError, match="default graph"):
        tf_bridge.EstimatorSpec(M.EVAL, loss=foreign)


def test_train_op_predictions_hooks_scaffold_types() -> None:
    loss = tf.constant(1.0)
    var = tf.compat.v1.get_variable("v", [], initializer=tf.compat.v1.zeros_initializer())
    assert isinstance(tf_bridge.EstimatorSpec(M.TRAIN, loss=loss, train_op=var).train_op, tf.Operation)
    with pytest.raises(TypeError, match="train_op"):
        tf_bridge.EstimatorSpec(M.TRAIN, loss=loss, train_op="op")
    with pytest.raises(TypeError, match=r"predictions\['n'\]"):
        tf_bridge.EstimatorSpec(M.PREDICT, predictions={"n": 1.0})
    with pytest.raises(TypeError, match="training_hooks"):
        tf_bridge.EstimatorSpec(M.EVAL, loss=loss, training_hooks=["hook"])
    with pytest.raises(TypeError, match="evaluation_hooks"):
        # a jaxspec hook is not a TF SessionRunHook
        import jaxspec

        tf_bridge.EstimatorSpec(M.EVAL, loss=loss, evaluation_hooks=[jaxspec.SessionRunHook()])
    with pytest.raises(TypeError, match="scaffold"):
        tf_bridge.EstimatorSpec(M.EVAL, loss=loss, scaffold=object())


def test_eval_metric_ops_rules() -> None:
    loss = tf.constant(1.0)
    pair = tf.compat.v1.metrics.mean(loss)
    spec = tf_bridge.EstimatorSpec(M.EVAL, loss=loss, eval_metric_ops={"m": pair})
    assert spec.eval_metric_ops["m"] == pair
    with pytest.raises(TypeError, match="eval_metric_ops"):
        tf_bridge.EstimatorSpec(M.EVAL, loss=loss, eval_metric_ops=pair)
    with pytest.raises(TypeError, match="'m'"):
        tf_bridge.EstimatorSpec(M.EVAL, loss=loss, eval_metric_ops={"m": loss})


def test_export_outputs_defaulting_and_aliasing() -> None:
    pred = tf.constant([[1.0]])
    spec = tf_bridge.EstimatorSpec(M.PREDICT, predictions=pred)
    assert isinstance(spec.export_outputs["serving_default"], tf_bridge.PredictOutput)
    head = tf_bridge.RegressionOutput(tf.constant([1.0]))
    spec = tf_bridge.EstimatorSpec(M.PREDICT, predictions=pred, export_outputs={"head-1": head})
    assert spec.export_outputs == {"head-1": head, "serving_default": head}
    heads = {"a": head, "b": tf_bridge.PredictOutput(pred)}
    with pytest.raises(ValueError, match="serving_default"):
        tf_bridge.EstimatorSpec(M.PREDICT, predictions=pred, export_outputs=heads)
    with pytest.raises(TypeError, match="export_outputs"):
        tf_bridge.EstimatorSpec(M.PREDICT, predictions=pred, export_outputs=head)
    with pytest.raises(TypeError, match="'a'"):
        tf_bridge.EstimatorSpec(M.PREDICT, predictions=pred, export_outputs={"a": {"x": pred}})


def test_replace_revalidates_and_keeps_mode() -> None:
    spec = tf_bridge.EstimatorSpec(M.EVAL, loss=tf.constant(1.0))
    with pytest.raises(ValueError, match="loss"):
        spec._replace(loss=tf.constant([1.0, 2.0]))
    with pytest.raises(ValueError, match="mode"):
        spec._replace(mode=M.TRAIN)


def test_tpu_spec_pairs_and_as_estimator_spec() -> None:
    loss = tf.constant(1.0)
    labels = tf.constant([1.0, 2.0])

    def metric_fn(labels: tf.Tensor, predictions: tf.Tensor) -> dict:
        return {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, predictions)}

    with pytest.raises(ValueError, match="eval_metrics"):
        tf_bridge.TPUEstimatorSpec(M.EVAL, loss=loss, eval_metrics=metric_fn)
    with pytest.raises(TypeError, match="host_call"):
        tf_bridge.TPUEstimatorSpec(M.EVAL, loss=loss, host_call=("fn", []))
    with pytest.raises(RuntimeError, match="host_call"):
        tf_bridge.TPUEstimatorSpec(M.EVAL, loss=loss, host_call=(lambda a, b: a, [loss]))
    with pytest.raises(TypeError, match="scaffold_fn"):
        tf_bridge.TPUEstimatorSpec(M.EVAL, loss=loss, scaffold_fn=1)
    scaffold = tf.compat.v1.train.Scaffold()
    spec = tf_bridge.TPUEstimatorSpec(
        M.EVAL,
        loss=loss,
        eval_metrics=(metric_fn, {"labels": labels, "predictions": labels * 2}),
        host_call=(lambda x: tf.identity(x), [labels]),
        scaffold_fn=lambda: scaffold,
    )
    cpu = spec.as_estimator_spec()
    assert isinstance(cpu, tf_bridge.EstimatorSpec) and cpu.scaffold is scaffold
    assert set(cpu.eval_metric_ops) == {"mae"}
    hooks = [h for h in cpu.evaluation_hooks if isinstance(h, HostCallFetchHook)]
    assert len(hooks) == 1 and hooks[0].fetches.op.type == "Identity"
    assert hooks[0] in cpu.training_hooks and hooks[0] in cpu.prediction_hooks  # TF adds it to all three


def test_npu_spec_host_call_validation_and_replace() -> None:
    loss = tf.constant(1.0)
    spec = tf_bridge.NPUEstimatorSpec(M.EVAL, loss=loss, host_call=(lambda x: x, [loss]))
    assert spec.host_call[1] == [loss]
    assert spec._replace(loss=tf.constant(2.0)).host_call == spec.host_call
    with pytest.raises(ValueError, match="host_call"):
        tf_bridge.NPUEstimatorSpec(M.EVAL, loss=loss, host_call=(lambda x: x,))
    with pytest.raises(ValueError, match="host_call"):
        tf_bridge.NPUEstimatorSpec(M.EVAL, loss=loss, host_call=(lambda x: x, loss))
    with pytest.raises(RuntimeError, match="host_call"):
        tf_bridge.NPUEstimatorSpec(M.EVAL, loss=loss, host_call=(lambda: loss, [loss]))
