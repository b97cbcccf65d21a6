"""The checks tf.estimator made that tf_bridge now makes too: session_config's type,
the TF2 ParameterServerStrategy, subclasses overriding Estimator members, Keras metric
objects built in another graph (and a same-graph one evaluated like TF's metric), and
predict's no-dataset warning through TensorFlow's logger."""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tf_bridge
from tools import tf215_reference_models as models


def test_session_config_must_be_a_config_proto() -> None:
    with pytest.raises(ValueError, match="session_config"):
        tf_bridge.RunConfig(session_config={"allow_soft_placement": True})
    config = tf_bridge.RunConfig(session_config=tf.compat.v1.ConfigProto(log_device_placement=True))
    with pytest.raises(ValueError, match="session_config"):
        config.replace(session_config="not a proto")
    assert config.replace(session_config=None).session_config is None


def test_tf2_parameter_server_strategy_is_refused() -> None:
    v2 = tf.distribute.experimental.ParameterServerStrategy
    strategy = v2.__new__(v2)  # the check is on the type; building one needs a live cluster
    for field in ("train_distribute", "eval_distribute"):
        with pytest.raises(ValueError, match=field):
            tf_bridge.RunConfig(**{field: strategy})


def test_subclass_overriding_members_is_refused(tmp_path: Any) -> None:
    fn = models.make_linear_model_fn(tf_bridge, [])

    class OwnTrain(tf_bridge.Estimator):
        def train(self, *args, **kwargs):
            return self

    class OwnPrivate(tf_bridge.Estimator):
        def _call_model_fn(self, *args, **kwargs):
            return None

    class Allowed(tf_bridge.Estimator):
        def latest_checkpoint(self):
            return super().latest_checkpoint()

        def extra(self) -> int:
            return 1

    for cls, name in ((OwnTrain, "train"), (OwnPrivate, "_call_model_fn")):
        with pytest.raises(ValueError, match=name):
            cls(fn, str(tmp_path))
    assert Allowed(fn, str(tmp_path)).extra() == 1

    class OwnEvaluate(tf_bridge.TPUEstimator):
        def evaluate(self, *args, **kwargs):
            return {}

    with pytest.raises(ValueError, match="evaluate"):
        OwnEvaluate(fn, str(tmp_path), config=tf_bridge.RunConfig(), train_batch_size=4)


def test_keras_metric_from_another_graph_is_refused() -> None:
    tf_keras = pytest.importorskip("tf_keras")
    other = tf.Graph()
    with other.as_default():
        stale = tf_keras.metrics.Mean()
        stale.update_state(tf.constant([1.0, 2.0]))
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="eval_metric_ops"):
            tf_bridge.EstimatorSpec("eval", loss=tf.constant(1.0), eval_metric_ops={"m": stale})


def test_keras_metric_of_this_graph_is_evaluated(tmp_path: Any) -> None:
    tf_keras = pytest.importorskip("tf_keras")

    def model_fn(features, labels, mode):
        if mode != "eval":
            return models.make_linear_model_fn(tf_bridge, [])(features, labels, mode, {})
        pred = models.linear(features)
        metric = tf_keras.metrics.MeanAbsoluteError()
        metric.update_state(labels, pred)
        ops = {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, pred), "keras_mae": metric}
        loss = tf.compat.v1.losses.mean_squared_error(labels, pred)
        return tf_bridge.EstimatorSpec(mode, loss=loss, eval_metric_ops=ops)

    est = tf_bridge.Estimator(model_fn, str(tmp_path), config=tf_bridge.RunConfig(tf_random_seed=1))
    est.train(models.train_input_fn, steps=3)
    result = est.evaluate(models.eval_input_fn)
    np.testing.assert_allclose(result["keras_mae"], result["mae"], rtol=1e-6)  # TF's own metric op agrees


def test_predict_without_dataset_warns_through_tensorflows_logger(tmp_path: Any, caplog) -> None:
    est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(tmp_path))
    x = models.predict_data()
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        first = next(est.predict(lambda: {"x": tf.constant(x)}))
    # worded so that tf.estimator's own test (estimator_test's no-queue-runner check) recognises it
    pattern = re.compile("Input graph does not.*contain a QueueRunner.")
    assert any(r.name == "tensorflow" and pattern.search(r.getMessage()) for r in caplog.records)
    np.testing.assert_allclose(first["pred"], (x @ np.array(models.W0) + models.B0)[0, 0], rtol=1e-6)
