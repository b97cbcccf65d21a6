"""An export whose only signature cannot be built names the signature and the reason at
WARNING (issue 35, item 8): TensorFlow's ``build_all_signature_defs`` gave the reason at
INFO only, and then "Export includes no signatures!"."""

from __future__ import annotations

import logging
from typing import Any

import tensorflow as tf

import tf_bridge
from tools import tf215_reference_models as models


def _regression_only(features: Any, labels: Any, mode: str) -> Any:
    pred = tf.squeeze(models.linear(features), 1)
    if mode == tf_bridge.ModeKeys.PREDICT:
        outputs = {"serving_default": tf_bridge.RegressionOutput(pred)}
        return tf_bridge.EstimatorSpec(mode, predictions={"pred": pred}, export_outputs=outputs)
    loss = tf.reduce_mean(tf.square(pred - tf.squeeze(labels, 1)))
    step = tf.compat.v1.train.get_global_step()
    return tf_bridge.EstimatorSpec(mode, loss=loss, train_op=tf.compat.v1.assign_add(step, 1))


def test_a_regression_output_behind_a_raw_receiver_is_named_with_its_reason(
    tmp_path: Any, caplog: Any
) -> None:
    est = tf_bridge.Estimator(_regression_only, str(tmp_path / "m"))
    est.train(models.train_input_fn, steps=1)
    with caplog.at_level(logging.WARNING):
        est.export_saved_model(str(tmp_path / "export"), models.serving_input_receiver_fn(tf_bridge))
    warned = [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == "tf_bridge"
    ]
    reason = [w for w in warned if "'serving_default' left out" in w]
    assert len(reason) == 1 and "string" in reason[0], warned  # a regress signature takes serialized Examples
