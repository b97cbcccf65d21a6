"""A tf.estimator program written for TensorFlow 2.15 against tensorflow_estimator's deeper
module paths (heads, canned estimators, their key classes), left as it was.

tests/test_tf_bridge_install_paths.py runs it with ``python -m tf_bridge`` on TensorFlow
>= 2.16; tools/tf215_reference_install.py runs it with plain ``python`` on TF 2.15.
Usage: heads_canned_tf215.py WORK_DIR; prints one ``RESULT <json>`` line.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow_estimator.python.estimator import estimator as estimator_lib
from tensorflow_estimator.python.estimator import run_config
from tensorflow_estimator.python.estimator.canned import dnn, linear, metric_keys, prediction_keys
from tensorflow_estimator.python.estimator.export import export as export_lib
from tensorflow_estimator.python.estimator.head import base_head, binary_class_head, multi_class_head

VOCABULARY = ["ant", "bee", "cat"]


def data():
    x = np.stack([np.linspace(-1.0, 1.0, 12), np.cos(np.arange(12.0)), np.sin(np.arange(12.0) / 3)], 1)
    x = x.astype(np.float32)
    ids = (np.arange(12) * 7) % 3
    return x, ids


def input_fn(labels_as, repeat=1):
    def fn():
        x, ids = data()
        labels = np.array(VOCABULARY)[ids][:, None] if labels_as == "strings" else (ids % 2)[:, None]
        return tf.data.Dataset.from_tensor_slices(({"x": x}, labels)).batch(4).repeat(repeat)

    return fn


def model_fn(features, labels, mode, config):
    head = multi_class_head.MultiClassHead(n_classes=3, label_vocabulary=VOCABULARY)
    w = tf.compat.v1.get_variable(
        "w", initializer=tf.constant(np.full((3, 3), 0.1, np.float32) + np.eye(3, dtype=np.float32))
    )
    logits = tf.matmul(features["x"], w)

    def train_op_fn(loss):
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.3)
        return opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())

    return head.create_estimator_spec(features, mode, logits, labels=labels, train_op_fn=train_op_fn)


def serving_input_receiver_fn():
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    return export_lib.ServingInputReceiver({"x": x}, {"x": x})


def floats(metrics):
    return {k: float(v) for k, v in sorted(metrics.items())}


def signatures(path, x):
    loaded = tf.saved_model.load(path)
    out = {}
    for key in sorted(loaded.signatures):
        fn = loaded.signatures[key]
        inputs = sorted(fn.structured_input_signature[1])
        served = fn(**{name: tf.constant(x[:2]) for name in inputs if name == "x"}) if inputs == ["x"] else {}
        out[key] = {
            "outputs": {k: v.dtype.name for k, v in sorted(fn.structured_outputs.items())},
            "served": {
                k: np.asarray(v).tolist()
                if v.dtype != tf.string
                else [[s.decode() for s in row] for row in v.numpy().reshape(len(v), -1)]
                for k, v in served.items()
            },
        }
    return out


def parse_specs():
    columns = [
        tf.feature_column.numeric_column("x", shape=(3,)),
        tf.feature_column.categorical_column_with_vocabulary_list("kind", ["a", "b"]),
    ]
    specs = {
        "classifier": tf.estimator.classifier_parse_example_spec(columns, "label", weight_column="w"),
        "regressor": tf.estimator.regressor_parse_example_spec(
            columns,
            "y",
            label_dimension=2,
            weight_column=tf.feature_column.numeric_column("w", dtype=tf.float64),
        ),
    }
    out = {name: {k: repr(v) for k, v in sorted(spec.items())} for name, spec in specs.items()}
    for bad in (
        {"label_key": "x"},
        {"label_key": "label", "weight_column": "x"},
        {"label_key": "l", "weight_column": 3},
    ):
        try:
            tf.estimator.classifier_parse_example_spec(columns, **bad)
        except ValueError:
            out.setdefault("errors", []).append("ValueError")
    return out


def main(work_dir):
    x, _ = data()
    config = run_config.RunConfig(tf_random_seed=3)
    est = estimator_lib.Estimator(model_fn, os.path.join(work_dir, "head"), config=config)
    est.train(input_fn("strings", repeat=2))
    head_metrics = floats(est.evaluate(input_fn("strings")))
    predicted = list(est.predict(input_fn("strings")))
    export_path = est.export_saved_model(os.path.join(work_dir, "export"), serving_input_receiver_fn).decode()

    columns = [tf.feature_column.numeric_column("x", shape=(3,))]
    lin = linear.LinearClassifierV2(columns, model_dir=os.path.join(work_dir, "linear"), config=config)
    lin.train(input_fn("ids", repeat=3))
    deep = dnn.DNNClassifierV2([4], columns, model_dir=os.path.join(work_dir, "dnn"), config=config)
    deep.train(input_fn("ids", repeat=3))
    result = {
        "head_metrics": head_metrics,
        "head_probabilities": [p[prediction_keys.PredictionKeys.PROBABILITIES].tolist() for p in predicted],
        "head_classes": [[c.decode() for c in p[prediction_keys.PredictionKeys.CLASSES]] for p in predicted],
        "head_signatures": signatures(export_path, x),
        "linear_metrics": floats(lin.evaluate(input_fn("ids"))),
        "linear_bias": lin.get_variable_value("linear/linear_model/bias_weights").tolist(),
        "dnn_metrics": floats(deep.evaluate(input_fn("ids"))),
        "keys": [metric_keys.MetricKeys.ACCURACY, metric_keys.MetricKeys.AUC, base_head.DEFAULT_SERVING_KEY],
        "binary_head": binary_class_head.BinaryClassHead().logits_dimension,
        "parse_specs": parse_specs(),
        "vocab_info": tf.estimator.VocabInfo is tf.compat.v1.train.VocabInfo,
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
