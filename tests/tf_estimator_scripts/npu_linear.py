"""An Ascend-style program (``from npu_bridge.npu_init import *``), left as Ascend's
documentation writes it: the same model and data as linear_tf215.py, through NPUEstimator,
NPURunConfig, NPUDistributedOptimizer and NPUOutputTensorHook.

tests/test_tf_bridge_install.py runs it with ``python -m tf_bridge`` where Ascend's adapter
is absent; on one rank it must compute what linear_tf215.py computes on TF 2.15.
Usage: npu_linear.py MODEL_DIR; prints one ``RESULT <json>`` line.
"""

import json
import sys

import tensorflow as tf
from linear_tf215 import eval_input_fn, train_input_fn
from npu_bridge.estimator.npu import npu_config
from npu_bridge.npu_init import *  # noqa: F403

LOGGED = []


def model_fn(features, labels, mode, params):
    w = tf.compat.v1.get_variable("w", initializer=tf.constant([[0.5], [-0.25], [0.1]]))
    b = tf.compat.v1.get_variable("b", initializer=tf.constant([0.05]))
    pred = tf.matmul(features["x"], w) + b
    if mode == tf.estimator.ModeKeys.PREDICT:
        return NPUEstimatorSpec(mode, predictions={"y": pred[:, 0]})  # noqa: F405
    loss = tf.reduce_mean(tf.square(pred - labels))
    optimizer = NPUDistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(params["learning_rate"]))  # noqa: F405
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    hook = NPUOutputTensorHook({"loss": loss}, output_fn=LOGGED.append, output_every_n_steps=4)  # noqa: F405
    metrics = {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, pred)}
    return NPUEstimatorSpec(  # noqa: F405
        mode, loss=loss, train_op=train_op, eval_metric_ops=metrics, training_hooks=[hook]
    )


def main(model_dir):
    session_config = tf.compat.v1.ConfigProto()
    session_config.graph_options.rewrite_options.remapping = RewriterConfig.OFF  # noqa: F405
    config = npu_config.NPURunConfig(
        model_dir=model_dir, tf_random_seed=7, save_checkpoints_steps=5, session_config=session_config
    )
    est = NPUEstimator(model_fn=model_fn, config=config, params={"learning_rate": 0.05})  # noqa: F405
    est.train(train_input_fn)
    metrics = est.evaluate(eval_input_fn)
    predictions = [p["y"] for p in est.predict(eval_input_fn)]
    result = {
        "global_step": int(est.get_variable_value("global_step")),
        "w": est.get_variable_value("w").ravel().tolist(),
        "loss": float(metrics["loss"]),
        "mae": float(metrics["mae"]),
        "predictions": [float(p) for p in predictions],
        "rank": [get_rank_size(), get_rank_id()],  # noqa: F405
        "logged_batches": [len(batch) for batch in LOGGED],
        "logged_first_loss": float(LOGGED[0][0]["loss"]),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
