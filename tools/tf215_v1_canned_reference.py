"""Reference for TF 2.15's v1 canned estimators (``tf.compat.v1.estimator.*``; issue 48 item 1).

A census-shaped program (the cloudml-samples census trainer's shape): a v1
``DNNLinearCombinedClassifier`` over vocabulary, hash-bucket, crossed, indicator, embedding
and numeric columns, trained 4 steps in TF 2.15 (the model_dir is kept as a reference
checkpoint), evaluated, then trained 4 more steps from that model_dir and predicted. Recorded: the
checkpoint's names, shapes and dtypes (optimizer slots included), the summary tags of the
train and eval event files (and the train scalars per step), the eval metrics at step 4 and
8, the probabilities of class 1 at step 8, the variables' values at step 8 (``values8.npz``). For each other v1 canned class, the checkpoint names/shapes after one
step and its train summary tags. And the names TF 2.15 gives partitioned variables when the
cluster has parameter servers (graph only: the model_fn's variables and the checkpoint keys
a Saver writes).

Run in the TF 2.15 virtual environment (CI never runs it)::

    /tmp/tf215venv/bin/python tools/tf215_v1_canned_reference.py

It writes ``tests/data/tf215_v1_canned.json`` and ``tests/data/tf215_v1_canned/``, read by
``tests/test_tf_v1_canned.py``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np

DATA = os.path.join(os.path.dirname(__file__), "..", "tests", "data")
EDUCATION = ["Bachelors", "HS-grad", "Masters", "Doctorate", "Some-college"]
OCCUPATION = ["Tech-support", "Craft-repair", "Sales", "Exec-managerial", "Adm-clerical", "Farming"]
ROWS = 64
BATCH = 16


def census_rows() -> tuple[dict[str, np.ndarray], np.ndarray]:
    """64 deterministic census-like rows and their 0/1 labels."""
    rng = np.random.RandomState(48)
    age = rng.uniform(17, 90, size=(ROWS, 1)).astype(np.float32)
    education = np.array(EDUCATION)[rng.randint(0, len(EDUCATION), size=ROWS)].reshape(ROWS, 1)
    occupation = np.array(OCCUPATION)[rng.randint(0, len(OCCUPATION), size=ROWS)].reshape(ROWS, 1)
    score = (age[:, 0] - 40) / 20 + (education[:, 0] == "Masters") - (occupation[:, 0] == "Farming")
    labels = (score + rng.normal(0, 0.5, ROWS) > 0).astype(np.int64).reshape(ROWS, 1)
    return {"age": age, "education": education, "occupation": occupation}, labels


def columns(tf: Any) -> tuple[list[Any], list[Any]]:
    """(linear columns, dnn columns) as the census trainer builds them (smaller buckets)."""
    fc = tf.feature_column
    age = fc.numeric_column("age")
    education = fc.categorical_column_with_vocabulary_list("education", EDUCATION)
    occupation = fc.categorical_column_with_hash_bucket("occupation", hash_bucket_size=50)
    crossed = fc.crossed_column(["education", "occupation"], hash_bucket_size=1000)
    buckets = fc.bucketized_column(age, boundaries=[25, 40, 60])
    linear = [education, occupation, crossed, buckets]
    dnn = [fc.indicator_column(education), fc.embedding_column(occupation, dimension=4), age]
    return linear, dnn


def input_fn(tf: Any, epochs: int | None = None) -> Any:
    features, labels = census_rows()

    def fn() -> Any:
        return tf.data.Dataset.from_tensor_slices((features, labels)).repeat(epochs).batch(BATCH)

    return fn


def checkpoint_names(tf: Any, model_dir: str) -> dict[str, Any]:
    reader = tf.train.load_checkpoint(model_dir)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    return {name: [list(shapes[name]), dtypes[name].name] for name in sorted(shapes)}


def tags(tf: Any, directory: str) -> list[str]:
    found = set()
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.add(value.tag)
    return sorted(found)


def scalars(tf: Any, directory: str) -> dict[str, dict[str, float]]:
    """tag -> {step: value} of the scalar summaries in ``directory``'s event files."""
    found: dict[str, dict[str, float]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    found.setdefault(value.tag, {})[str(event.step)] = float(value.simple_value)
    return found


def keep_only_last_checkpoint(model_dir: str) -> None:
    """Leave the newest checkpoint's data and index (and the ``checkpoint`` file naming it):
    a few KiB instead of the graph's meta files and event files."""
    import tensorflow as tf

    last = os.path.basename(tf.train.latest_checkpoint(model_dir))
    for name in os.listdir(model_dir):
        if not (name.startswith(last + ".data") or name == last + ".index"):
            os.remove(os.path.join(model_dir, name))
    with open(os.path.join(model_dir, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "{last}"\nall_model_checkpoint_paths: "{last}"\n')


def plain(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()}


def census(tf: Any, out_dir: str) -> dict[str, Any]:
    linear, dnn = columns(tf)
    model_dir = os.path.join(out_dir, "model_dir")
    config = tf.estimator.RunConfig(tf_random_seed=48, save_summary_steps=1)

    def make(directory: str) -> Any:
        return tf.compat.v1.estimator.DNNLinearCombinedClassifier(
            model_dir=directory,
            linear_feature_columns=linear,
            dnn_feature_columns=dnn,
            dnn_hidden_units=[8, 4],
            config=config,
        )

    make(model_dir).train(input_fn(tf), steps=4)
    result: dict[str, Any] = {"checkpoint": checkpoint_names(tf, model_dir)}
    result["train_tags"] = tags(tf, model_dir)
    resumed = os.path.join(tempfile.mkdtemp(), "resumed")
    shutil.copytree(model_dir, resumed)
    result["eval4"] = plain(make(resumed).evaluate(input_fn(tf, 1), name="census"))
    result["eval_tags"] = tags(tf, os.path.join(resumed, "eval_census"))
    make(resumed).train(input_fn(tf), steps=4)
    result["eval8"] = plain(make(resumed).evaluate(input_fn(tf, 1)))
    result["probabilities8"] = [
        float(p["probabilities"][1])
        for p in make(resumed).predict(input_fn(tf, 1), yield_single_examples=True)
    ]
    reader = tf.train.load_checkpoint(resumed)
    np.savez_compressed(
        os.path.join(out_dir, "values8.npz"),
        **{name.replace("/", "|"): reader.get_tensor(name) for name in result["checkpoint"]},
    )
    result["train_scalars"] = scalars(tf, model_dir)
    keep_only_last_checkpoint(model_dir)
    return result


def other_classes(tf: Any) -> dict[str, Any]:
    linear, dnn = columns(tf)
    v1 = tf.compat.v1.estimator
    makers = {
        "DNNClassifier": lambda d: v1.DNNClassifier([8, 4], dnn, model_dir=d),
        "DNNRegressor": lambda d: v1.DNNRegressor([8, 4], dnn, model_dir=d),
        "LinearClassifier": lambda d: v1.LinearClassifier(linear, model_dir=d),
        "LinearRegressor": lambda d: v1.LinearRegressor(linear, model_dir=d),
        "DNNLinearCombinedRegressor": lambda d: v1.DNNLinearCombinedRegressor(
            d, linear, dnn_feature_columns=dnn, dnn_hidden_units=[8, 4]
        ),
        "DNNClassifier_3_batch_norm_adam": lambda d: v1.DNNClassifier(
            [8, 4], dnn, model_dir=d, n_classes=3, optimizer="Adam", batch_norm=True, dropout=0.1
        ),
        "DNNLinearCombinedClassifier_adam_sgd": lambda d: v1.DNNLinearCombinedClassifier(
            d, linear, "SGD", dnn, "Adam", dnn_hidden_units=[8, 4]
        ),
        "BaselineClassifier": lambda d: v1.BaselineClassifier(model_dir=d),
        "BaselineRegressor": lambda d: v1.BaselineRegressor(model_dir=d),
    }
    out = {}
    for name, make in makers.items():
        directory = tempfile.mkdtemp()
        est = make(directory)
        est.train(input_fn(tf), steps=2)
        out[name] = {
            "checkpoint": checkpoint_names(tf, directory),
            "train_tags": tags(tf, directory),
            "eval": plain(est.evaluate(input_fn(tf, 1))),
        }
    return out


def partitioned(tf: Any) -> dict[str, Any]:
    """With 2 parameter servers: the graph's variables and the checkpoint keys of a DNN whose
    hidden layer is over the 256 KiB slice of the ``dnn`` scope's partitioner, and of the
    census classifier."""
    cluster = {"chief": ["localhost:0"], "ps": ["localhost:1", "localhost:2"], "worker": ["localhost:3"]}
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    try:
        with_ps = tf.estimator.RunConfig()
    finally:
        del os.environ["TF_CONFIG"]
    out: dict[str, Any] = {"num_ps_replicas": with_ps.num_ps_replicas}
    for key, config in (("ps", with_ps), ("no_ps", tf.estimator.RunConfig())):
        out[key] = partitioned_graphs(tf, config)
    return out


def partitioned_graphs(tf: Any, config: Any) -> dict[str, Any]:
    linear, dnn = columns(tf)
    features, labels = census_rows()
    features["wide"] = np.ones((ROWS, 256), np.float32)
    wide = tf.feature_column.numeric_column("wide", shape=(256,))
    dnn = dnn + [wide]
    v1 = tf.compat.v1.estimator
    out = {}
    for name, est in (
        ("DNNClassifier", v1.DNNClassifier([300, 4], dnn, config=config)),
        (
            "DNNLinearCombinedClassifier",
            v1.DNNLinearCombinedClassifier(
                linear_feature_columns=linear,
                dnn_feature_columns=dnn,
                dnn_hidden_units=[300, 4],
                config=config,
            ),
        ),
    ):
        with tf.Graph().as_default():
            tf.compat.v1.train.create_global_step()
            feats = {k: tf.constant(v) for k, v in features.items()}
            est.model_fn(feats, tf.constant(labels), tf.estimator.ModeKeys.TRAIN, config)
            graph_vars = {v.name: v.shape.as_list() for v in tf.compat.v1.global_variables()}
            saver = tf.compat.v1.train.Saver()
            directory = tempfile.mkdtemp()
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(tf.compat.v1.tables_initializer())
                saver.save(session, os.path.join(directory, "model.ckpt"))
            out[name] = {"graph": graph_vars, "checkpoint": checkpoint_names(tf, directory)}
    return out


def main() -> None:
    import tensorflow as tf

    out_dir = os.path.join(DATA, "tf215_v1_canned")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    result = {
        "tensorflow": tf.__version__,
        "census": census(tf, out_dir),
        "classes": other_classes(tf),
        "partitioned": partitioned(tf),
    }
    with open(os.path.join(DATA, "tf215_v1_canned.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", out_dir, file=sys.stderr)


if __name__ == "__main__":
    main()
