"""Reference for TF 2.15's canned ``...Estimator`` classes, which take a head of your own
(issue 48, item 5): ``tf.estimator.DNNEstimator``, ``LinearEstimator`` and
``DNNLinearCombinedEstimator`` (v2, v2 heads) and ``tf.compat.v1.estimator``'s
``DNNEstimator``, ``LinearEstimator``, ``DNNLinearCombinedEstimator`` and
``BaselineEstimator`` (v1, over the private v1 head factories of ``canned/head.py``).

Each case of ``CASES`` is trained 2 steps from scratch (``tf_random_seed=48``); that model_dir
is kept as a fixture (``tests/data/tf215_canned_estimators/<case>``: the step-2 checkpoint
only). From a copy of it, 2 more steps are trained and recorded: the ``loss`` summary at steps
3 and 4, the step-4 checkpoint's names, shapes and values (``values.npz``), ``evaluate()``
and one prediction key of ``predict()``. ``V2_HEAD_IN_V1`` records what a v2 head does in
each v1 class: TF 2.15's v1 DNN and linear model_fns give the head a ``tf.compat.v1.train``
optimizer, which a v2 head refuses at train time (the exception type is recorded); the
combined and baseline ones give it a ``train_op_fn`` and train (the linear-only combined
model and the baseline start from zeros, so their losses and metrics are recorded from
scratch).

Run in the TF 2.15 virtual environment (CI never runs it)::

    /tmp/tf215venv/bin/python tools/tf215_canned_estimators_reference.py

It writes ``tests/data/tf215_canned_estimators.json`` and
``tests/data/tf215_canned_estimators/``, read by ``tests/test_tf_canned_estimators.py``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
FIXTURES = os.path.join(DATA, "tf215_canned_estimators")
JSON_PATH = os.path.join(DATA, "tf215_canned_estimators.json")
VOCAB = ["a", "b", "c"]
ROWS, BATCH = 16, 8


class Api:
    """Where a program finds the classes and heads: TF 2.15's namespaces, or tf_bridge's."""

    def __init__(self, v2: Any, v1: Any, v1_heads: Any) -> None:
        self.v2, self.v1, self.v1_heads = v2, v1, v1_heads


def tf215_api() -> Api:
    import tensorflow as tf
    from tensorflow_estimator.python.estimator.canned import head as v1_heads

    return Api(tf.estimator, tf.compat.v1.estimator, v1_heads)


def rows() -> dict[str, np.ndarray]:
    """16 deterministic rows: features ``x`` (float32 [16, 2]) and ``c`` (a string of VOCAB,
    [16, 1]), and the labels each head reads."""
    rng = np.random.RandomState(48)
    x = rng.uniform(-1, 1, size=(ROWS, 2)).astype(np.float32)
    c = np.array(VOCAB)[rng.randint(0, 3, size=ROWS)].reshape(ROWS, 1)
    score = x[:, 0] - x[:, 1] + (c[:, 0] == "a")
    return {
        "x": x,
        "c": c,
        "binary": (score > 0.3).astype(np.int64).reshape(ROWS, 1),
        "classes": np.digitize(score, [-0.5, 0.7]).astype(np.int64).reshape(ROWS, 1),
        "multi_hot": np.stack([score > 0, x[:, 0] > 0, c[:, 0] == "b"], axis=1).astype(np.int64),
        "targets": np.stack([score, x[:, 1] * 2], axis=1).astype(np.float32),
    }


def input_fn(tf: Any, label: str, epochs: int | None = None) -> Callable[[], Any]:
    data = rows()
    features = {"x": data["x"], "c": data["c"]}

    def fn() -> Any:
        return tf.data.Dataset.from_tensor_slices((features, data[label])).repeat(epochs).batch(BATCH)

    return fn


def columns(tf: Any) -> tuple[list[Any], list[Any]]:
    """(linear columns, DNN columns)."""
    fc = tf.feature_column
    c = fc.categorical_column_with_vocabulary_list("c", VOCAB)
    x = fc.numeric_column("x", shape=(2,))
    return [x, c], [x, fc.embedding_column(c, dimension=2)]


def build(case: str, tf: Any, api: Api, model_dir: str) -> Any:
    """The estimator of ``case`` (``CASES``) in ``model_dir``."""
    linear, dnn = columns(tf)
    config = api.v2.RunConfig(tf_random_seed=48, save_summary_steps=1)
    v2, v1, h1 = api.v2, api.v1, api.v1_heads
    makers: dict[str, Callable[[], Any]] = {
        "dnn_v2_multi_label": lambda: v2.DNNEstimator(
            v2.MultiLabelHead(3), [4], dnn, model_dir=model_dir, config=config
        ),
        "linear_v2_regression": lambda: v2.LinearEstimator(
            v2.RegressionHead(label_dimension=2), linear, model_dir=model_dir, config=config
        ),
        "combined_v2_multi_class": lambda: v2.DNNLinearCombinedEstimator(
            v2.MultiClassHead(3),
            model_dir=model_dir,
            linear_feature_columns=linear,
            dnn_feature_columns=dnn,
            dnn_hidden_units=[4],
            config=config,
        ),
        "dnn_v1_regression": lambda: v1.DNNEstimator(
            h1._regression_head(label_dimension=2), [4], dnn, model_dir=model_dir, config=config
        ),
        "linear_v1_multi_class": lambda: v1.LinearEstimator(
            h1._multi_class_head_with_softmax_cross_entropy_loss(3),
            linear,
            model_dir=model_dir,
            config=config,
        ),
        "combined_v1_binary": lambda: v1.DNNLinearCombinedEstimator(
            h1._binary_logistic_head_with_sigmoid_cross_entropy_loss(),
            model_dir=model_dir,
            linear_feature_columns=linear,
            dnn_feature_columns=dnn,
            dnn_hidden_units=[4],
            config=config,
        ),
        "baseline_v1_classifier": lambda: v1.BaselineEstimator(
            h1._binary_logistic_or_multi_class_head(3, None, None, tf.compat.v1.losses.Reduction.SUM),
            model_dir=model_dir,
            config=config,
        ),
    }
    makers.update(_v2_heads_in_v1_classes(api, linear, dnn, config, model_dir))
    return makers[case]()


def _v2_heads_in_v1_classes(api: Api, linear: Any, dnn: Any, config: Any, model_dir: str) -> dict[str, Any]:
    """The ``V2_HEAD_IN_V1`` cases' makers: a v2 head in each v1 class."""
    v2, v1 = api.v2, api.v1
    return {
        "dnn_v1_v2_head": lambda: v1.DNNEstimator(
            v2.RegressionHead(label_dimension=2), [4], dnn, model_dir=model_dir, config=config
        ),
        "linear_v1_v2_head": lambda: v1.LinearEstimator(
            v2.RegressionHead(label_dimension=2), linear, model_dir=model_dir, config=config
        ),
        "combined_v1_v2_head": lambda: v1.DNNLinearCombinedEstimator(
            v2.RegressionHead(label_dimension=2),
            model_dir=model_dir,
            linear_feature_columns=linear,
            config=config,
        ),
        "baseline_v1_v2_head": lambda: v1.BaselineEstimator(
            v2.MultiLabelHead(3), model_dir=model_dir, config=config
        ),
    }


# case -> (the label it reads, the prediction key recorded)
CASES = {
    "dnn_v2_multi_label": ("multi_hot", "probabilities"),
    "linear_v2_regression": ("targets", "predictions"),
    "combined_v2_multi_class": ("classes", "probabilities"),
    "dnn_v1_regression": ("targets", "predictions"),
    "linear_v1_multi_class": ("classes", "probabilities"),
    "combined_v1_binary": ("binary", "logistic"),
    "baseline_v1_classifier": ("classes", "probabilities"),
}
V2_HEAD_IN_V1 = {
    "dnn_v1_v2_head": ("targets", "predictions"),
    "linear_v1_v2_head": ("targets", "predictions"),
    "combined_v1_v2_head": ("targets", "predictions"),
    "baseline_v1_v2_head": ("multi_hot", "probabilities"),
}


def losses(tf: Any, model_dir: str) -> dict[str, float]:
    """step -> the ``loss`` summary of ``model_dir``'s event files."""
    found: dict[str, float] = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "loss" and value.HasField("simple_value"):
                    found[str(event.step)] = float(value.simple_value)
    return found


def checkpoint(tf: Any, model_dir: str) -> dict[str, Any]:
    """name -> [shape, dtype] of the latest checkpoint's tensors."""
    reader = tf.train.load_checkpoint(model_dir)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    return {name: [list(shapes[name]), dtypes[name].name] for name in sorted(shapes)}


def outcome(tf: Any, api: Api, case: str, label: str, key: str, model_dir: str) -> dict[str, Any]:
    """What 2 steps from ``model_dir``'s checkpoint (or from scratch) give: losses, checkpoint,
    evaluate() and predict()'s ``key``; the values are returned under ``values``."""
    est = build(case, tf, api, model_dir)
    est.train(input_fn(tf, label), steps=2)
    metrics = est.evaluate(input_fn(tf, label, 1))
    predicted = [p[key].tolist() for p in est.predict(input_fn(tf, label, 1))]
    reader = tf.train.load_checkpoint(model_dir)
    names = checkpoint(tf, model_dir)
    return {
        "losses": losses(tf, model_dir),
        "checkpoint": names,
        "evaluate": {k: float(v) for k, v in metrics.items()},
        "predict": predicted,
        "values": {n: reader.get_tensor(n) for n in names if names[n][1].startswith("float")},
    }


def keep_only_last_checkpoint(tf: Any, model_dir: str) -> None:
    """Leave the newest checkpoint's data, index and ``checkpoint`` file (a few KiB)."""
    last = os.path.basename(tf.train.latest_checkpoint(model_dir))
    for name in os.listdir(model_dir):
        if not (name.startswith(last + ".data") or name == last + ".index"):
            os.remove(os.path.join(model_dir, name))
    with open(os.path.join(model_dir, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "{last}"\nall_model_checkpoint_paths: "{last}"\n')


def main() -> None:
    import tensorflow as tf

    api = tf215_api()
    shutil.rmtree(FIXTURES, ignore_errors=True)
    os.makedirs(FIXTURES)
    result: dict[str, Any] = {"tensorflow": tf.__version__, "cases": {}, "v2_head_in_v1": {}}
    values: dict[str, np.ndarray] = {}
    for case, (label, key) in CASES.items():
        fixture = os.path.join(FIXTURES, case)
        build(case, tf, api, fixture).train(input_fn(tf, label), steps=2)
        keep_only_last_checkpoint(tf, fixture)
        work = os.path.join(tempfile.mkdtemp(), case)
        shutil.copytree(fixture, work)
        got = outcome(tf, api, case, label, key, work)
        values.update({f"{case}|{n.replace('/', '|')}": v for n, v in got.pop("values").items()})
        result["cases"][case] = got
    for case, (label, key) in V2_HEAD_IN_V1.items():
        try:
            got = outcome(tf, api, case, label, key, tempfile.mkdtemp())
        except Exception as exc:  # recorded: TF 2.15's exception type
            result["v2_head_in_v1"][case] = {"raises": type(exc).__name__}
            continue
        values.update({f"{case}|{n.replace('/', '|')}": v for n, v in got.pop("values").items()})
        result["v2_head_in_v1"][case] = got
    np.savez_compressed(os.path.join(FIXTURES, "values.npz"), **values)
    with open(JSON_PATH, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", JSON_PATH, FIXTURES, file=sys.stderr)


if __name__ == "__main__":
    main()
