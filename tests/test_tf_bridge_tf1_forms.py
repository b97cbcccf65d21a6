"""TF1 names and forms TF 2.15 still accepted: ``export_savedmodel`` on the v1 Estimator
(not the v2 one) and TPUEstimator, and CrossShardOptimizer on TPUEstimator's CPU path (an error there, as in
TF 2.15, but at graph build and naming ``params['use_tpu']``)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import tf_bridge
import tf_bridge.estimator.v1
from tools import tf215_reference_models as models


def _attr_count(export_dir: bytes) -> int:
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir.decode(), "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return sum(len(node.attr) for node in proto.meta_graphs[0].graph_def.node)


def test_export_savedmodel_is_tf1s_export_saved_model(tmp_path: Any) -> None:
    """The v1 Estimator has it; the v2 one raises AttributeError, as TF 2.15's."""
    model_fn = models.make_linear_model_fn(tf_bridge, [])
    with pytest.raises(AttributeError):
        _ = tf_bridge.Estimator(model_fn, str(tmp_path / "m")).export_savedmodel
    est = tf_bridge.estimator.v1.Estimator(model_fn, str(tmp_path / "m"))
    est.train(models.train_input_fn, steps=3)
    receiver_fn = models.serving_input_receiver_fn(tf_bridge)
    old = est.export_savedmodel(str(tmp_path / "old"), receiver_fn)
    new = est.export_saved_model(str(tmp_path / "new"), receiver_fn)
    x = models.predict_data()
    want = [p["pred"] for p in est.predict(models.predict_input_fn)]
    for path in (old, new):
        served = tf.saved_model.load(path.decode()).signatures["all"](x=tf.constant(x))["pred"]
        np.testing.assert_allclose(served.numpy()[:, 0], want, rtol=1e-6)
    # TF1's default keeps default-valued attributes; export_saved_model strips them
    assert _attr_count(old) > _attr_count(new)
    with pytest.raises(ValueError, match="serving_input_receiver_fn"):
        est.export_savedmodel(str(tmp_path / "none"), None)


def _cross_shard_model_fn(features: Any, labels: Any, mode: str, params: Any) -> Any:
    loss = tf.compat.v1.losses.mean_squared_error(labels, models.linear(features))
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    return tf_bridge.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def test_tpu_estimator_cross_shard_optimizer_on_the_cpu_path(tmp_path: Any) -> None:
    config = tf_bridge.RunConfig(
        model_dir=str(tmp_path), tpu_config=tf_bridge.TPUConfig(iterations_per_loop=1)
    )
    est = tf_bridge.TPUEstimator(_cross_shard_model_fn, config=config, use_tpu=False, train_batch_size=4)
    # TF 2.15 (use_tpu=False) raised InvalidArgumentError at the first step (no CPU kernel
    # for CrossReplicaSum); tf_bridge raises the same type before any session exists.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"params\['use_tpu'\]"):
        est.train(models.train_input_fn, steps=1)
    assert est.latest_checkpoint() is None
    # the model_fn that wraps only when params['use_tpu'] trains

    def guarded(features: Any, labels: Any, mode: str, params: Any) -> Any:
        pred = models.linear(features)
        if mode == tf_bridge.ModeKeys.PREDICT:
            return tf_bridge.TPUEstimatorSpec(mode, predictions={"pred": pred})
        loss = tf.compat.v1.losses.mean_squared_error(labels, pred)
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        if params["use_tpu"]:
            optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
        train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return tf_bridge.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    est = tf_bridge.TPUEstimator(guarded, config=config, use_tpu=False, train_batch_size=4)
    est.train(models.train_input_fn, steps=2)
    assert est.get_variable_value("global_step") == 2
    path = est.export_savedmodel(str(tmp_path / "export"), models.serving_input_receiver_fn(tf_bridge))
    assert os.path.isdir(path.decode())
