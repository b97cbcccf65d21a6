"""tf_bridge's canned estimators continue model_dirs written by TF 2.15's.

``tools/tf215_canned_reference.py`` trained each case of its ``CASES`` with TF 2.15's own
canned estimator (``tf.estimator.DNNClassifier`` and the rest) for 3 steps and kept the
model_dir (``tests/data/tf215_canned/<case>``); from that model_dir it recorded
``evaluate()``, ``predict()`` and every checkpoint variable after 4 more training steps
(``tests/data/tf215_canned.json``). tf_bridge's canned estimator, built from the same case
on the pinned TensorFlow, must give the same evaluate keys and values (1e-5), the same
predictions (every key, 1e-5) and, after the same 4 steps, the same checkpoint: the same
variable names (weights, optimizer slots and hyperparameters, global_step) and values (1e-4).
Trained from an empty model_dir with the same seed, it writes the fixture itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

tf_keras = pytest.importorskip("tf_keras")

import tf_bridge.estimator as tf_estimator  # noqa: E402
from tools import tf215_canned_reference as ref  # noqa: E402

with open(ref.JSON_PATH) as _f:
    REFERENCE = json.load(_f)
VALUE_ATOL = 1e-5
CONTINUE_ATOL = 1e-4


def _assert_close(got: list[Any], expected: list[Any], atol: float, what: str) -> None:
    assert len(got) == len(expected), what
    if expected and isinstance(expected[0], str):
        assert got == expected, what
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol, err_msg=what)


@pytest.fixture(scope="module", params=sorted(ref.CASES))
def run(request: Any, tmp_path_factory: Any) -> tuple[str, dict[str, Any]]:
    """One case, run by tf_bridge from a copy of TF 2.15's model_dir: evaluate, predict,
    then 4 training steps."""
    name = request.param
    label_key = ref.CASES[name][1]
    work = str(tmp_path_factory.mktemp(name) / "model")
    shutil.copytree(os.path.join(ref.FIXTURES, name), work)
    est = ref.build(name, tf_estimator, tf_keras.optimizers.legacy, tf.feature_column, tf, work)
    evaluation = est.evaluate(ref.input_fn(tf, label_key, False))
    predictions = list(est.predict(ref.predict_input_fn(tf)))
    est.train(ref.input_fn(tf, label_key, True), steps=ref.CONTINUE_STEPS)
    return name, {
        "evaluate": {k: ref.jsonable(v) for k, v in evaluation.items()},
        "predict": [{k: ref.jsonable(v) for k, v in p.items()} for p in predictions],
        "after_continue": ref.checkpoint_variables(tf, work),
    }


def test_evaluate_equals_tf215(run: tuple[str, dict[str, Any]]) -> None:
    name, got = run
    expected = REFERENCE["cases"][name]["evaluate"]
    assert sorted(got["evaluate"]) == sorted(expected)
    for key, value in expected.items():
        _assert_close(got["evaluate"][key], value, VALUE_ATOL, f"{name}: evaluate[{key!r}]")


def test_predict_equals_tf215(run: tuple[str, dict[str, Any]]) -> None:
    name, got = run
    expected = REFERENCE["cases"][name]["predict"]
    assert len(got["predict"]) == len(expected) == ref.N
    for i, (row, want) in enumerate(zip(got["predict"], expected, strict=True)):
        assert sorted(row) == sorted(want), f"{name}: prediction keys of example {i}"
        for key, value in want.items():
            _assert_close(row[key], value, VALUE_ATOL, f"{name}: predict[{i}][{key!r}]")


def test_training_continues_as_tf215(run: tuple[str, dict[str, Any]]) -> None:
    name, got = run
    expected = REFERENCE["cases"][name]["after_continue"]
    assert sorted(got["after_continue"]) == sorted(expected)
    step = ref.FIXTURE_STEPS + ref.CONTINUE_STEPS
    assert got["after_continue"]["global_step"] == expected["global_step"] == [step]
    for var, value in expected.items():
        _assert_close(got["after_continue"][var], value, CONTINUE_ATOL, f"{name}: {var}")


def test_migration_guide_example_continues_tf215(tmp_path: Any) -> None:
    """docs/migration.md's DNNClassifier (a callable optimizer giving TF 2.15's default
    Adagrad) continues TF 2.15's ``dnn_classifier`` model_dir as TF 2.15 did."""
    guide = os.path.join(ref.ROOT, "docs", "migration.md")
    with open(guide) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    (code,) = [b for b in blocks if b.startswith("# migration: canned\n")]
    namespace: dict[str, Any] = {}
    exec(compile(code, "migration.md", "exec"), namespace)
    work = str(tmp_path / "model")
    shutil.copytree(os.path.join(ref.FIXTURES, "dnn_classifier"), work)
    est = namespace["make_dnn_classifier"](work)
    expected = REFERENCE["cases"]["dnn_classifier"]
    evaluation = est.evaluate(ref.input_fn(tf, "binary", False))
    assert sorted(evaluation) == sorted(expected["evaluate"])
    np.testing.assert_allclose(
        ref.jsonable(evaluation["loss"]), expected["evaluate"]["loss"], atol=VALUE_ATOL
    )
    est.train(ref.input_fn(tf, "binary", True), steps=ref.CONTINUE_STEPS)
    got = ref.checkpoint_variables(tf, work)
    assert sorted(got) == sorted(expected["after_continue"])
    for var, value in expected["after_continue"].items():
        _assert_close(got[var], value, CONTINUE_ATOL, var)


@pytest.mark.parametrize("name", sorted(ref.CASES))
def test_training_from_scratch_writes_tf215_fixture(name: str, tmp_path: Any) -> None:
    """With the same ``tf_random_seed``, 3 steps from an empty model_dir give the checkpoint
    TF 2.15 wrote (the fixture): the seeded initial values as well as the updates."""
    est = ref.build(name, tf_estimator, tf_keras.optimizers.legacy, tf.feature_column, tf, str(tmp_path))
    est.train(ref.input_fn(tf, ref.CASES[name][1], True), steps=ref.FIXTURE_STEPS)
    got = ref.checkpoint_variables(tf, str(tmp_path))
    expected = ref.checkpoint_variables(tf, os.path.join(ref.FIXTURES, name))
    assert sorted(got) == sorted(expected)
    for var, value in expected.items():
        _assert_close(got[var], value, CONTINUE_ATOL, f"{name}: {var}")
