"""Reference numbers for ``tf_bridge.runtime.canned.baseline``, written by TensorFlow 2.15's
baseline estimators (``tf.estimator.BaselineClassifier``, ``BaselineRegressor``,
``BaselineEstimator``; v2 forms).

As ``tools/tf215_canned_reference.py`` (whose data, input_fns and recording helpers it
uses): every case of ``CASES`` is trained by TF 2.15 for ``FIXTURE_STEPS`` steps and its
model_dir kept (``tests/data/tf215_baseline/<case>/``); from a copy it records
``evaluate()``, ``predict()`` and every checkpoint variable after ``CONTINUE_STEPS`` more
steps, into ``tests/data/tf215_baseline.json``, with the exception type of each of
``BAD_INPUTS`` and, for ``EXPORT``, an exported SavedModel's signatures and serving outputs.
``tests/test_tf_canned_baseline.py`` asks tf_bridge for the same things.

Run it in a TF 2.15 virtual environment (CI never does)::

    /tmp/tf215venv/bin/python tools/tf215_baseline_reference.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tf215_canned_reference as canned  # noqa: E402

FIXTURES = os.path.join(canned.ROOT, "tests", "data", "tf215_baseline")
JSON_PATH = os.path.join(canned.ROOT, "tests", "data", "tf215_baseline.json")
FIXTURE_STEPS = canned.FIXTURE_STEPS
CONTINUE_STEPS = canned.CONTINUE_STEPS
EXPORT = "baseline_classifier_multi"


def _cases() -> dict[str, tuple[str, str, Callable[[Any, Any], dict[str, Any]]]]:
    """name -> (estimator class, label key, kwargs builder(estimators, opt))."""
    return {
        "baseline_classifier": ("BaselineClassifier", "binary", lambda e, opt: {}),
        "baseline_classifier_multi": (
            "BaselineClassifier",
            "multi_vocab",
            lambda e, opt: {
                "n_classes": 3,
                "label_vocabulary": canned.LABEL_VOCAB,
                "weight_column": "w",
                "optimizer": "Adagrad",
            },
        ),
        "baseline_regressor": (
            "BaselineRegressor",
            "reg2",
            lambda e, opt: {
                "label_dimension": 2,
                "optimizer": opt.SGD(learning_rate=0.1),
                "loss_reduction": "sum",
            },
        ),
        "baseline_regressor_weighted": ("BaselineRegressor", "reg1", lambda e, opt: {"weight_column": "w"}),
        "baseline_estimator": (
            "BaselineEstimator",
            "multi",
            lambda e, opt: {"head": e.MultiClassHead(3, weight_column="w"), "optimizer": "RMSProp"},
        ),
    }


CASES = _cases()
# The features of each case's input: one besides the classifier's weight column (the
# regressor and BaselineEstimator size the batch from the weight feature too).
FEATURES = {
    "baseline_classifier": ("x",),
    "baseline_classifier_multi": ("x", "w"),
    "baseline_regressor": ("x",),
    "baseline_regressor_weighted": ("w",),
    "baseline_estimator": ("w",),
}


def input_fn(tf: Any, label_key: str, train: bool, keys: tuple[str, ...] = ("x",)) -> Callable[[], Any]:
    """An input_fn over ``canned.data()`` with the features ``keys``: batches of 8 in order,
    repeated for training. (TF 2.15's v2 baseline estimators fail from scratch with more
    than one feature besides the weight: its bias initialiser waits for the input; see
    ``BAD_INPUTS['two_features_from_scratch']``.)"""

    def fn() -> Any:
        d = canned.data()
        features = {k: d[k] for k in keys}
        labels = d[label_key] if label_key else None
        ds = tf.data.Dataset.from_tensor_slices((features, labels) if label_key else features)
        return (ds.repeat() if train else ds).batch(canned.BATCH)

    return fn


def build(name: str, estimators: Any, opt: Any, model_dir: str) -> Any:
    """Case ``name`` as an estimator of ``estimators`` (tf.estimator or tf_bridge.estimator)."""
    cls, _, kwargs_fn = CASES[name]
    config = estimators.RunConfig(tf_random_seed=7, save_summary_steps=1000, log_step_count_steps=1000)
    return getattr(estimators, cls)(model_dir=model_dir, config=config, **kwargs_fn(estimators, opt))


def _bad_inputs() -> dict[str, Callable[[Any, Any, Any, str], Any]]:
    """name -> fn(estimators, fc, tf, model_dir) that builds an estimator from a bad input
    and, when the mistake shows only then, trains it for a step."""

    def train(est: Any, tf: Any, fn: Any = None) -> None:
        est.train(fn or input_fn(tf, "binary", True), steps=1)

    def bare(tf: Any) -> Callable[[], Any]:
        def fn() -> Any:
            d = canned.data()
            return tf.data.Dataset.from_tensor_slices((d["x"], d["binary"])).batch(canned.BATCH)

        return fn

    return {
        "n_classes_1": lambda e, fc, tf, md: e.BaselineClassifier(md, n_classes=1),
        "loss_reduction_none": lambda e, fc, tf, md: e.BaselineRegressor(md, loss_reduction="none"),
        "optimizer_unknown_name": lambda e, fc, tf, md: train(
            e.BaselineClassifier(md, optimizer="Nadam"), tf
        ),
        "features_not_dict": lambda e, fc, tf, md: train(e.BaselineClassifier(md), tf, fn=bare(tf)),
        "only_the_weight": lambda e, fc, tf, md: train(
            e.BaselineClassifier(md, weight_column="w"), tf, fn=input_fn(tf, "binary", True, ("w",))
        ),
        "two_features_from_scratch": lambda e, fc, tf, md: train(
            e.BaselineClassifier(md), tf, fn=input_fn(tf, "binary", True, ("x", "c"))
        ),
        "weight_column_not_a_column": lambda e, fc, tf, md: train(
            e.BaselineClassifier(md, weight_column=fc.categorical_column_with_identity("w", 3)), tf
        ),
        "weight_numeric_column": lambda e, fc, tf, md: train(
            e.BaselineClassifier(md, weight_column=fc.numeric_column("w")), tf
        ),
    }


BAD_INPUTS = _bad_inputs()


def bad_input_error(name: str, estimators: Any, fc: Any, tf: Any, model_dir: str) -> str:
    """The exception type name bad input ``name`` raises (``'none'`` if it raises nothing)."""
    try:
        BAD_INPUTS[name](estimators, fc, tf, model_dir)
    except Exception as e:  # noqa: BLE001 - the type is what is recorded
        return type(e).__name__
    return "none"


def export(estimators: Any, opt: Any, fc: Any, tf: Any, tmp: str) -> dict[str, Any]:
    """Export ``EXPORT`` from (a copy of) its fixture with a tf.Example parsing receiver of
    the feature ``x`` (the model reads no feature value; ``x`` sizes the batch)."""
    model_dir = os.path.join(tmp, "model")
    shutil.copytree(os.path.join(FIXTURES, EXPORT), model_dir)
    est = build(EXPORT, estimators, opt, model_dir)
    spec = fc.make_parse_example_spec([fc.numeric_column("x", shape=(2,))])
    receiver = estimators.export.build_parsing_serving_input_receiver_fn(spec)
    path = est.export_saved_model(os.path.join(tmp, "export"), receiver)
    return {"signatures": canned.signatures(tf, path), "serving": canned.serve(tf, path)}


def run_case(tf: Any, name: str) -> dict[str, Any]:
    label_key, keys = CASES[name][1], FEATURES[name]
    opt = tf.keras.optimizers.legacy
    with tempfile.TemporaryDirectory() as tmp:
        first = os.path.join(tmp, "first")
        build(name, tf.estimator, opt, first).train(input_fn(tf, label_key, True, keys), steps=FIXTURE_STEPS)
        fixture = os.path.join(FIXTURES, name)
        canned._copy_fixture(tf, first, fixture)
        work = os.path.join(tmp, "work")
        shutil.copytree(fixture, work)
        est = build(name, tf.estimator, opt, work)
        evaluation = est.evaluate(input_fn(tf, label_key, False, keys))
        predictions = list(est.predict(input_fn(tf, "", False, keys)))
        est.train(input_fn(tf, label_key, True, keys), steps=CONTINUE_STEPS)
        return {
            "fixture_variables": {n: list(s) for n, s in tf.train.list_variables(fixture)},
            "evaluate": {k: canned.jsonable(v) for k, v in sorted(evaluation.items())},
            "predict": [{k: canned.jsonable(v) for k, v in sorted(p.items())} for p in predictions],
            "after_continue": canned.checkpoint_variables(tf, work),
        }


def main() -> None:
    import tensorflow as tf

    os.makedirs(FIXTURES, exist_ok=True)
    out: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "fixture_steps": FIXTURE_STEPS,
        "continue_steps": CONTINUE_STEPS,
    }
    out["cases"] = {name: run_case(tf, name) for name in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        out["bad_inputs"] = {
            name: bad_input_error(name, tf.estimator, tf.feature_column, tf, os.path.join(tmp, name))
            for name in BAD_INPUTS
        }
        os.makedirs(os.path.join(tmp, "export"))
        out["export"] = export(
            tf.estimator, tf.keras.optimizers.legacy, tf.feature_column, tf, os.path.join(tmp, "export")
        )
    with open(JSON_PATH, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
