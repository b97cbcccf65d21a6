"""Reference numbers for ``tf_bridge.runtime.canned``, written by TensorFlow 2.15's canned estimators.

For every case of ``CASES`` this trains TF 2.15's own canned estimator (``tf.estimator.DNNClassifier``
and the rest, v2 forms) for ``FIXTURE_STEPS`` steps and keeps its model_dir as a fixture
(``tests/data/tf215_canned/<case>/``: the ``checkpoint`` file and the last ``model.ckpt-*``
index/data files). From a copy of that model_dir it then records ``evaluate()`` (every key),
``predict()`` (every key of every example) and every checkpoint variable after
``CONTINUE_STEPS`` more training steps, into ``tests/data/tf215_canned.json``.
``tests/test_tf_canned_reference.py`` asks ``tf_bridge.runtime.canned`` for the same things from the
same fixtures.

The cases are built by functions of the estimator namespace, the Keras (legacy) optimizer
module and the feature column module, so that the tests build the same estimators on
TF >= 2.16 (``tf_bridge.runtime.canned``, ``tf_keras.optimizers.legacy``, ``tf.feature_column``).

Run it in a TF 2.15 virtual environment (CI never does)::

    /tmp/tf215venv/bin/python tools/tf215_canned_reference.py
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "data", "tf215_canned")
JSON_PATH = os.path.join(ROOT, "tests", "data", "tf215_canned.json")
FIXTURE_STEPS = 3
CONTINUE_STEPS = 4
BATCH = 8
N = 16
VOCAB = ["a", "b", "c"]
LABEL_VOCAB = ["p", "q", "r"]
TAGS = ["u", "v", "w"]


def data() -> dict[str, np.ndarray]:
    """The 16 examples every case uses (deterministic; no randomness)."""
    i = np.arange(N)
    x = np.stack([np.sin(i * 0.7), np.cos(i * 1.3) * 0.5], axis=1).astype(np.float32)
    # "z" is out of the vocabulary (the columns give it no weight).
    c = np.asarray([[(VOCAB[k] if k < 3 else "z").encode()] for k in (i * 7) % 5], dtype=object)
    # Two tag slots per example ("" is an empty slot): 0, 1 or 2 tags, some out of vocabulary.
    t = np.asarray([[(TAGS + ["", "y"])[k % 5].encode(), (TAGS + [""])[(k * 3) % 4].encode()] for k in i])
    w = (1.0 + (i % 4) * 0.25).reshape(N, 1).astype(np.float32)
    score = x[:, 0] - 0.5 * x[:, 1]
    return {
        "x": x,
        "c": c,
        "t": t,
        "w": w,
        "binary": (score > 0).astype(np.int64).reshape(N, 1),
        "multi": np.digitize(score, [-0.3, 0.3]).astype(np.int64).reshape(N, 1),
        "multi_vocab": np.asarray([[LABEL_VOCAB[k].encode()] for k in np.digitize(score, [-0.3, 0.3])]),
        "reg1": (score * 2.0 + 0.5).reshape(N, 1).astype(np.float32),
        "reg2": np.stack([score, x[:, 1] * 3.0], axis=1).astype(np.float32),
    }


def input_fn(tf: Any, label_key: str, train: bool) -> Callable[[], Any]:
    """An input_fn over ``data()``: batches of 8 in order; repeated for training."""

    def fn():
        d = data()
        features = {"x": d["x"], "c": d["c"].astype(bytes), "t": d["t"], "w": d["w"]}
        ds = tf.data.Dataset.from_tensor_slices((features, d[label_key]))
        if train:
            ds = ds.repeat()
        return ds.batch(BATCH)

    return fn


def predict_input_fn(tf: Any) -> Callable[[], Any]:
    def fn():
        d = data()
        features = {"x": d["x"], "c": d["c"].astype(bytes), "t": d["t"], "w": d["w"]}
        return tf.data.Dataset.from_tensor_slices(features).batch(BATCH)

    return fn


def _columns(fc: Any) -> dict[str, Any]:
    x = fc.numeric_column("x", shape=(2,))
    c = fc.categorical_column_with_vocabulary_list("c", VOCAB)
    t = fc.categorical_column_with_vocabulary_list("t", TAGS)
    return {
        "x": x,
        "c": c,
        "t": t,
        "emb": fc.embedding_column(c, dimension=2),
        "ind": fc.indicator_column(c),
        "t_emb": fc.embedding_column(t, dimension=3, combiner="sqrtn"),
    }


def _cases() -> dict[str, tuple[str, str, Callable[[Any, Any, Any], dict[str, Any]]]]:
    """name -> (estimator class, label key, kwargs builder(fc, opt, tf))."""

    def dnn_classifier(fc, opt, tf):
        cols = _columns(fc)
        return {"hidden_units": [4, 3], "feature_columns": [cols["x"], cols["emb"], cols["t_emb"]]}

    def dnn_classifier_multi(fc, opt, tf):
        cols = _columns(fc)
        return {
            "hidden_units": [3],
            "feature_columns": [cols["x"], cols["ind"]],
            "n_classes": 3,
            "label_vocabulary": LABEL_VOCAB,
            "weight_column": "w",
            "optimizer": "Adam",
            "batch_norm": True,
        }

    def dnn_regressor(fc, opt, tf):
        cols = _columns(fc)
        return {
            "hidden_units": [4],
            "feature_columns": [cols["x"], cols["emb"]],
            "label_dimension": 2,
            "optimizer": opt.SGD(learning_rate=0.1),
            "activation_fn": tf.nn.tanh,
            "dropout": 0.25,
            "loss_reduction": "sum",  # tf.losses.Reduction.SUM
        }

    def linear_classifier(fc, opt, tf):
        cols = _columns(fc)
        return {"feature_columns": [cols["x"], cols["c"]]}

    def linear_classifier_multi(fc, opt, tf):
        cols = _columns(fc)
        return {
            "feature_columns": [cols["x"], cols["c"], cols["t"]],
            "n_classes": 3,
            "optimizer": opt.Adagrad(learning_rate=0.3),
            "sparse_combiner": "mean",
            "weight_column": "w",
        }

    def linear_regressor(fc, opt, tf):
        cols = _columns(fc)
        return {
            "feature_columns": [cols["x"], cols["c"], cols["t"]],
            "optimizer": "SGD",
            "weight_column": "w",
            "sparse_combiner": "sqrtn",
        }

    def combined_classifier(fc, opt, tf):
        cols = _columns(fc)
        return {
            "linear_feature_columns": [cols["x"], cols["c"]],
            "dnn_feature_columns": [cols["x"], cols["emb"]],
            "dnn_hidden_units": [3],
        }

    def combined_regressor(fc, opt, tf):
        cols = _columns(fc)
        return {
            "linear_feature_columns": [cols["c"]],
            "dnn_feature_columns": [cols["x"]],
            "dnn_hidden_units": [4, 2],
            "dnn_optimizer": opt.RMSprop(learning_rate=0.01, momentum=0.5),
            "linear_optimizer": "Adagrad",
            "label_dimension": 2,
            "batch_norm": True,
        }

    return {
        "dnn_classifier": ("DNNClassifier", "binary", dnn_classifier),
        "dnn_classifier_multi": ("DNNClassifier", "multi_vocab", dnn_classifier_multi),
        "dnn_regressor": ("DNNRegressor", "reg2", dnn_regressor),
        "linear_classifier": ("LinearClassifier", "binary", linear_classifier),
        "linear_classifier_multi": ("LinearClassifier", "multi", linear_classifier_multi),
        "linear_regressor": ("LinearRegressor", "reg1", linear_regressor),
        "combined_classifier": ("DNNLinearCombinedClassifier", "binary", combined_classifier),
        "combined_regressor": ("DNNLinearCombinedRegressor", "reg2", combined_regressor),
    }


CASES = _cases()


def build(name: str, estimators: Any, opt: Any, fc: Any, tf: Any, model_dir: str, **extra: Any) -> Any:
    """Case ``name`` as an estimator of ``estimators`` (tf.estimator or tf_bridge.estimator)."""
    cls, _, kwargs_fn = CASES[name]
    config = estimators.RunConfig(tf_random_seed=7, save_summary_steps=1000, log_step_count_steps=1000)
    return getattr(estimators, cls)(model_dir=model_dir, config=config, **kwargs_fn(fc, opt, tf), **extra)


def case_columns(name: str, opt: Any, fc: Any, tf: Any) -> list[Any]:
    kwargs = CASES[name][2](fc, opt, tf)
    columns = list(kwargs.get("feature_columns", []))
    return (
        columns + list(kwargs.get("linear_feature_columns", [])) + list(kwargs.get("dnn_feature_columns", []))
    )


# Warm starts: name -> (case, warm_start_from(estimators, fixture dir)); a new model_dir
# warm-started from the case's fixture trains WARM_STEPS steps.
WARM_STARTS = {
    "dnn_classifier_from_path": ("dnn_classifier", lambda e, fixture: fixture),
    "dnn_regressor_first_layer": (
        "dnn_regressor",
        lambda e, fixture: e.WarmStartSettings(fixture, vars_to_warm_start="dnn/hiddenlayer_0/.*"),
    ),
    "linear_classifier_multi_weights": (
        "linear_classifier_multi",
        lambda e, fixture: e.WarmStartSettings(fixture, vars_to_warm_start=".*/weights"),
    ),
}
WARM_STEPS = 2
EXPORTS = ("dnn_classifier", "linear_classifier_multi", "combined_regressor")


def warm_start(name: str, estimators: Any, opt: Any, fc: Any, tf: Any, model_dir: str) -> dict[str, Any]:
    """Variables after WARM_STEPS steps of a new model_dir warm-started from a fixture."""
    case, warm_fn = WARM_STARTS[name]
    warm = warm_fn(estimators, os.path.join(FIXTURES, case))
    est = build(case, estimators, opt, fc, tf, model_dir, warm_start_from=warm)
    est.train(input_fn(tf, CASES[case][1], True), steps=WARM_STEPS)
    return checkpoint_variables(tf, model_dir)


def serving_examples(tf: Any) -> list[bytes]:
    """``data()`` as serialized tf.Examples (x, c, and the non-empty tags)."""
    d = data()
    out = []
    for x, (c,), t in zip(d["x"], d["c"], d["t"], strict=True):
        feature = {
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=x.tolist())),
            "c": tf.train.Feature(bytes_list=tf.train.BytesList(value=[c])),
            "t": tf.train.Feature(bytes_list=tf.train.BytesList(value=[v for v in t if v])),
        }
        out.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return out


def signatures(tf: Any, export_dir: Any) -> dict[str, Any]:
    """Each signature def of a SavedModel: method name, inputs and outputs (dtype, shape)."""
    from tensorflow.core.protobuf import saved_model_pb2

    model = saved_model_pb2.SavedModel()
    with open(os.path.join(os.fsdecode(export_dir), "saved_model.pb"), "rb") as f:
        model.ParseFromString(f.read())

    def tensors(infos: Any) -> dict[str, Any]:
        return {
            k: [tf.dtypes.as_dtype(v.dtype).name, [d.size for d in v.tensor_shape.dim]]
            for k, v in infos.items()
        }

    return {
        key: {"method_name": sig.method_name, "inputs": tensors(sig.inputs), "outputs": tensors(sig.outputs)}
        for key, sig in model.meta_graphs[0].signature_def.items()
    }


def serve(tf: Any, export_dir: Any) -> dict[str, Any]:
    """Every signature of the SavedModel run on ``serving_examples()``."""
    loaded = tf.saved_model.load(os.fsdecode(export_dir))
    out = {}
    for key in sorted(loaded.signatures):
        fn = loaded.signatures[key]
        (arg,) = fn.structured_input_signature[1]
        result = fn(**{arg: tf.constant(serving_examples(tf))})
        out[key] = {k: jsonable(v.numpy()) for k, v in sorted(result.items())}
    return out


def export(name: str, estimators: Any, opt: Any, fc: Any, tf: Any, tmp: str) -> dict[str, Any]:
    """Export case ``name`` from (a copy of) its fixture with a tf.Example parsing receiver."""
    model_dir = os.path.join(tmp, "model")
    shutil.copytree(os.path.join(FIXTURES, name), model_dir)
    est = build(name, estimators, opt, fc, tf, model_dir)
    receiver = estimators.export.build_parsing_serving_input_receiver_fn(
        fc.make_parse_example_spec(case_columns(name, opt, fc, tf))
    )
    path = est.export_saved_model(os.path.join(tmp, "export"), receiver)
    return {"signatures": signatures(tf, path), "serving": serve(tf, path)}


def _bad_inputs() -> dict[str, Callable[[Any, Any, Any, Any, str], Any]]:
    """name -> fn(estimators, keras, fc, tf, model_dir) that constructs (and, when the
    mistake shows only then, trains for a step) an estimator given a bad input."""

    def train(est, tf, label_key="binary", features_fn=None):
        fn = input_fn(tf, label_key, True)
        if features_fn is not None:
            fn = features_fn
        est.train(fn, steps=1)

    def cols(fc):
        return _columns(fc)

    def x_only(tf):  # features as a bare tensor, not a dict
        def fn():
            d = data()
            return tf.data.Dataset.from_tensor_slices((d["x"], d["binary"])).batch(BATCH)

        return fn

    return {
        "n_classes_1": lambda e, k, fc, tf, md: e.DNNClassifier([2], [cols(fc)["x"]], md, n_classes=1),
        "loss_reduction_none": lambda e, k, fc, tf, md: e.DNNClassifier(
            [2], [cols(fc)["x"]], md, loss_reduction="none"
        ),
        "loss_reduction_unknown": lambda e, k, fc, tf, md: e.LinearRegressor(
            [cols(fc)["x"]], md, loss_reduction="mean"
        ),
        "combined_no_columns": lambda e, k, fc, tf, md: e.DNNLinearCombinedClassifier(md),
        "combined_no_hidden_units": lambda e, k, fc, tf, md: train(
            e.DNNLinearCombinedRegressor(md, dnn_feature_columns=[cols(fc)["x"]]), tf, "reg1"
        ),
        "optimizer_unknown_name": lambda e, k, fc, tf, md: train(
            e.DNNClassifier([2], [cols(fc)["x"]], md, optimizer="Nadam"), tf
        ),
        "optimizer_not_an_optimizer": lambda e, k, fc, tf, md: train(
            e.LinearClassifier([cols(fc)["x"]], md, optimizer=object()), tf
        ),
        "optimizer_new_keras": lambda e, k, fc, tf, md: train(
            e.DNNClassifier([2], [cols(fc)["x"]], md, optimizer=k.optimizers.SGD()), tf
        ),
        "features_not_dict": lambda e, k, fc, tf, md: train(
            e.DNNClassifier([2], [cols(fc)["x"]], md), tf, features_fn=x_only(tf)
        ),
        "linear_column_not_a_column": lambda e, k, fc, tf, md: train(e.LinearClassifier(["x"], md), tf),
        "sparse_combiner_unknown": lambda e, k, fc, tf, md: train(
            e.LinearClassifier([cols(fc)["c"]], md, sparse_combiner="max"), tf
        ),
    }


BAD_INPUTS = _bad_inputs()


def bad_input_error(name: str, estimators: Any, keras: Any, fc: Any, tf: Any, model_dir: str) -> str:
    """The exception type name bad input ``name`` raises (``'none'`` if it raises nothing)."""
    try:
        BAD_INPUTS[name](estimators, keras, fc, tf, model_dir)
    except Exception as e:  # noqa: BLE001 - the type is what is recorded
        return type(e).__name__
    return "none"


def jsonable(value: Any) -> Any:
    array = np.asarray(value)
    if array.dtype.kind in "SO":
        return [v.decode() if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
    if array.dtype.kind in "iub":
        return array.reshape(-1).astype(np.int64).tolist()
    return array.reshape(-1).astype(np.float64).tolist()


def checkpoint_variables(tf: Any, model_dir: str) -> dict[str, Any]:
    path = tf.train.latest_checkpoint(model_dir)
    return {name: jsonable(tf.train.load_variable(path, name)) for name, _ in tf.train.list_variables(path)}


def _copy_fixture(tf: Any, model_dir: str, target: str) -> None:
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    prefix = os.path.basename(tf.train.latest_checkpoint(model_dir))
    for name in os.listdir(model_dir):
        if name.startswith(prefix + ".") and not name.endswith(".meta"):
            shutil.copy(os.path.join(model_dir, name), target)
    tf.compat.v1.train.update_checkpoint_state(target, prefix)


def run_case(tf: Any, name: str) -> dict[str, Any]:
    label_key = CASES[name][1]
    with tempfile.TemporaryDirectory() as tmp:
        first = os.path.join(tmp, "first")
        est = build(name, tf.estimator, tf.keras.optimizers.legacy, tf.feature_column, tf, first)
        est.train(input_fn(tf, label_key, True), steps=FIXTURE_STEPS)
        fixture = os.path.join(FIXTURES, name)
        _copy_fixture(tf, first, fixture)
        work = os.path.join(tmp, "work")
        shutil.copytree(fixture, work)
        est = build(name, tf.estimator, tf.keras.optimizers.legacy, tf.feature_column, tf, work)
        evaluation = est.evaluate(input_fn(tf, label_key, False))
        predictions = list(est.predict(predict_input_fn(tf)))
        est.train(input_fn(tf, label_key, True), steps=CONTINUE_STEPS)
        return {
            "fixture_variables": {n: list(s) for n, s in tf.train.list_variables(fixture)},
            "evaluate": {k: jsonable(v) for k, v in sorted(evaluation.items())},
            "predict": [{k: jsonable(v) for k, v in sorted(p.items())} for p in predictions],
            "after_continue": checkpoint_variables(tf, work),
        }


def main() -> None:
    import tensorflow as tf

    os.makedirs(FIXTURES, exist_ok=True)
    out = {"tensorflow": tf.__version__, "fixture_steps": FIXTURE_STEPS, "continue_steps": CONTINUE_STEPS}
    out["cases"] = {name: run_case(tf, name) for name in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        out["bad_inputs"] = {
            name: bad_input_error(
                name, tf.estimator, tf.keras, tf.feature_column, tf, os.path.join(tmp, name)
            )
            for name in BAD_INPUTS
        }
        legacy = tf.keras.optimizers.legacy
        out["warm_starts"] = {
            name: warm_start(
                name, tf.estimator, legacy, tf.feature_column, tf, os.path.join(tmp, "warm_" + name)
            )
            for name in WARM_STARTS
        }
        out["exports"] = {}
        for name in EXPORTS:
            os.makedirs(os.path.join(tmp, "export_" + name))
            out["exports"][name] = export(
                name, tf.estimator, legacy, tf.feature_column, tf, os.path.join(tmp, "export_" + name)
            )
    with open(JSON_PATH, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
