"""tf_bridge's baseline estimators continue model_dirs written by TF 2.15's.

``tools/tf215_baseline_reference.py`` trained each case of its ``CASES`` with TF 2.15's
``tf.estimator.BaselineClassifier`` / ``BaselineRegressor`` / ``BaselineEstimator`` for 3
steps and kept the model_dir (``tests/data/tf215_baseline/<case>``); from that model_dir it
recorded ``evaluate()``, ``predict()`` and every checkpoint variable after 4 more steps, the
exception type of each bad input, and an exported SavedModel's signatures and serving
outputs (``tests/data/tf215_baseline.json``). tf_bridge must give the same: evaluate keys
and values and every prediction (1e-5), the continued checkpoint's names and values
(1e-4), from an empty model_dir the fixture itself, the same exception types, and the
same SavedModel.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

tf_keras = pytest.importorskip("tf_keras")

import tf_bridge.estimator as tf_estimator  # noqa: E402
from tools import tf215_baseline_reference as ref  # noqa: E402
from tools import tf215_canned_reference as canned  # noqa: E402

with open(ref.JSON_PATH) as _f:
    REFERENCE = json.load(_f)
LEGACY = tf_keras.optimizers.legacy
VALUE_ATOL = 1e-5
CONTINUE_ATOL = 1e-4


def _assert_close(got: list[Any], expected: list[Any], atol: float, what: str) -> None:
    assert len(got) == len(expected), what
    if expected and isinstance(expected[0], str):
        assert got == expected, what
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol, err_msg=what)


def _assert_variables(got: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    assert sorted(got) == sorted(expected), what
    for var, value in expected.items():
        _assert_close(got[var], value, CONTINUE_ATOL, f"{what}: {var}")


@pytest.fixture(scope="module", params=sorted(ref.CASES))
def run(request: Any, tmp_path_factory: Any) -> tuple[str, dict[str, Any]]:
    """One case, run by tf_bridge from a copy of TF 2.15's model_dir: evaluate, predict,
    then 4 training steps."""
    name = request.param
    label_key, keys = ref.CASES[name][1], ref.FEATURES[name]
    work = str(tmp_path_factory.mktemp(name) / "model")
    shutil.copytree(os.path.join(ref.FIXTURES, name), work)
    est = ref.build(name, tf_estimator, LEGACY, work)
    evaluation = est.evaluate(ref.input_fn(tf, label_key, False, keys))
    predictions = list(est.predict(ref.input_fn(tf, "", False, keys)))
    est.train(ref.input_fn(tf, label_key, True, keys), steps=ref.CONTINUE_STEPS)
    return name, {
        "evaluate": {k: canned.jsonable(v) for k, v in evaluation.items()},
        "predict": [{k: canned.jsonable(v) for k, v in p.items()} for p in predictions],
        "after_continue": canned.checkpoint_variables(tf, work),
    }


def test_evaluate_and_predict_equal_tf215(run: tuple[str, dict[str, Any]]) -> None:
    name, got = run
    expected = REFERENCE["cases"][name]
    assert sorted(got["evaluate"]) == sorted(expected["evaluate"])
    for key, value in expected["evaluate"].items():
        _assert_close(got["evaluate"][key], value, VALUE_ATOL, f"{name}: evaluate[{key!r}]")
    assert len(got["predict"]) == len(expected["predict"]) == canned.N
    for i, (row, want) in enumerate(zip(got["predict"], expected["predict"], strict=True)):
        assert sorted(row) == sorted(want), f"{name}: prediction keys of example {i}"
        for key, value in want.items():
            _assert_close(row[key], value, VALUE_ATOL, f"{name}: predict[{i}][{key!r}]")


def test_training_continues_as_tf215(run: tuple[str, dict[str, Any]]) -> None:
    name, got = run
    expected = REFERENCE["cases"][name]["after_continue"]
    assert got["after_continue"]["global_step"] == [ref.FIXTURE_STEPS + ref.CONTINUE_STEPS]
    _assert_variables(got["after_continue"], expected, name)


@pytest.mark.parametrize("name", sorted(ref.CASES))
def test_training_from_scratch_writes_tf215_fixture(name: str, tmp_path: Any) -> None:
    """3 steps from an empty model_dir give the checkpoint TF 2.15 wrote (the fixture)."""
    est = ref.build(name, tf_estimator, LEGACY, str(tmp_path))
    est.train(ref.input_fn(tf, ref.CASES[name][1], True, ref.FEATURES[name]), steps=ref.FIXTURE_STEPS)
    expected = canned.checkpoint_variables(tf, os.path.join(ref.FIXTURES, name))
    _assert_variables(canned.checkpoint_variables(tf, str(tmp_path)), expected, name)


# Where tf_bridge deliberately differs from TF 2.15 (docs/decisions.md): it trains.
WORKS_HERE = ("two_features_from_scratch", "weight_numeric_column")


@pytest.mark.parametrize("name", sorted(set(ref.BAD_INPUTS) - set(WORKS_HERE)))
def test_bad_input_raises_what_tf215_raised(name: str, tmp_path: Any) -> None:
    got = ref.bad_input_error(name, tf_estimator, tf.feature_column, tf, str(tmp_path))
    assert got == REFERENCE["bad_inputs"][name]


def test_what_tf215_refused_trains_to_tf215s_numbers(tmp_path: Any) -> None:
    """TF 2.15 failed from scratch with two features (its bias initialiser read the input)
    and with a ``numeric_column`` weight (TypeError); here both train, and as the features
    are ignored and the numeric column is its key, to the checkpoints TF 2.15 wrote from
    one feature and a str weight."""
    assert REFERENCE["bad_inputs"]["two_features_from_scratch"] == "FailedPreconditionError"
    assert REFERENCE["bad_inputs"]["weight_numeric_column"] == "TypeError"
    two = str(tmp_path / "two")
    est = ref.build("baseline_classifier", tf_estimator, LEGACY, two)
    est.train(ref.input_fn(tf, "binary", True, ("x", "c", "t")), steps=ref.FIXTURE_STEPS)
    fixture = os.path.join(ref.FIXTURES, "baseline_classifier")
    _assert_variables(canned.checkpoint_variables(tf, two), canned.checkpoint_variables(tf, fixture), "two")
    numeric = str(tmp_path / "numeric")
    config = tf_estimator.RunConfig(tf_random_seed=7, save_summary_steps=1000, log_step_count_steps=1000)
    est = tf_estimator.BaselineClassifier(
        numeric,
        n_classes=3,
        weight_column=tf.feature_column.numeric_column("w"),
        label_vocabulary=canned.LABEL_VOCAB,
        optimizer="Adagrad",
        config=config,
    )
    est.train(ref.input_fn(tf, "multi_vocab", True, ("x", "w")), steps=ref.FIXTURE_STEPS)
    fixture = os.path.join(ref.FIXTURES, "baseline_classifier_multi")
    expected = canned.checkpoint_variables(tf, fixture)
    _assert_variables(canned.checkpoint_variables(tf, numeric), expected, "numeric")


def test_export_equals_tf215(tmp_path: Any) -> None:
    got = ref.export(tf_estimator, LEGACY, tf.feature_column, tf, str(tmp_path))
    expected = REFERENCE["export"]
    assert got["signatures"] == expected["signatures"]
    assert sorted(got["serving"]) == sorted(expected["serving"])
    for key, outputs in expected["serving"].items():
        assert sorted(got["serving"][key]) == sorted(outputs), key
        for out, value in outputs.items():
            _assert_close(got["serving"][key][out], value, VALUE_ATOL, f"{key}/{out}")
