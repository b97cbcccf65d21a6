"""A tf.estimator program written for TensorFlow 2.15, left as it was.

tests/test_tf_bridge_install.py runs it with ``python -m tf_bridge`` on TensorFlow >= 2.16;
tools/tf215_reference_install.py runs it with plain ``python`` on TF 2.15 for the reference.
Usage: linear_tf215.py MODEL_DIR EXPORT_DIR; prints one ``RESULT <json>`` line.
"""

import json
import sys

import numpy as np
import tensorflow as tf
import tensorflow.estimator
import tensorflow_estimator.python.estimator.estimator as estimator_lib
from tensorflow import estimator as tf_estimator
from tensorflow_estimator.python.estimator import model_fn as model_fn_lib
from tensorflow_estimator.python.estimator import run_config as run_config_lib
from tensorflow_estimator.python.estimator.export import export_output


def model_fn(features, labels, mode, params):
    w = tf.compat.v1.get_variable("w", initializer=tf.constant([[0.5], [-0.25], [0.1]]))
    b = tf.compat.v1.get_variable("b", initializer=tf.constant([0.05]))
    pred = tf.matmul(features["x"], w) + b
    if mode == tf_estimator.ModeKeys.PREDICT:
        outputs = {"serving_default": export_output.PredictOutput({"y": pred})}
        return tf.estimator.EstimatorSpec(mode, predictions={"y": pred[:, 0]}, export_outputs=outputs)
    loss = tf.reduce_mean(tf.square(pred - labels))
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(params["learning_rate"])
    train_op = optimizer.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
    metrics = {"mae": tf.compat.v1.metrics.mean_absolute_error(labels, pred)}
    return model_fn_lib.EstimatorSpec(mode, loss=loss, train_op=train_op, eval_metric_ops=metrics)


def data():
    x = (np.arange(24, dtype=np.float32).reshape(8, 3) - 12.0) / 10.0
    y = x @ np.array([[1.0], [2.0], [-1.0]], np.float32) + 0.3
    return x, y


def train_input_fn():
    x, y = data()
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(4).repeat(5)


def eval_input_fn():
    x, y = data()
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(4)


def serving_input_receiver_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    return tf.estimator.export.ServingInputReceiver({"x": x}, {"x": x})


def main(model_dir, export_dir):
    config = run_config_lib.RunConfig(tf_random_seed=7, save_checkpoints_steps=5)
    est = estimator_lib.Estimator(model_fn, model_dir, config=config, params={"learning_rate": 0.05})
    est.train(train_input_fn)
    metrics = est.evaluate(eval_input_fn)
    predictions = [p["y"] for p in est.predict(eval_input_fn)]
    v1 = tf.compat.v1.estimator.Estimator(model_fn, model_dir, config=config, params={"learning_rate": 0.05})
    path = v1.export_savedmodel(export_dir, serving_input_receiver_fn)
    served = tf.saved_model.load(path.decode()).signatures["serving_default"]
    x, _ = data()
    result = {
        "global_step": int(est.get_variable_value("global_step")),
        "w": est.get_variable_value("w").ravel().tolist(),
        "loss": float(metrics["loss"]),
        "mae": float(metrics["mae"]),
        "predictions": [float(p) for p in predictions],
        "served": served(x=tf.constant(x))["y"].numpy().ravel().tolist(),
        "tensorflow_estimator_module": tensorflow.estimator.Estimator is tf_estimator.Estimator,
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
