"""Warm starts and SavedModel exports of tf_bridge's canned estimators against TF 2.15's.

``tools/tf215_canned_reference.py`` recorded, with TF 2.15's canned estimators: the
variables after 2 training steps of a new model_dir warm-started from a fixture
(``WARM_STARTS``: a model_dir path, and ``WarmStartSettings`` restricted to some variables,
the rest initialised from the seeded graph), and for ``EXPORTS`` the signature defs of a
SavedModel exported from a fixture with a tf.Example parsing receiver and what each
signature returns for the 16 examples. tf_bridge must give the same (1e-4 / 1e-5).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

tf_keras = pytest.importorskip("tf_keras")

import tf_bridge.estimator as tf_estimator  # noqa: E402
from tools import tf215_canned_reference as ref  # noqa: E402

with open(ref.JSON_PATH) as _f:
    REFERENCE = json.load(_f)
LEGACY = tf_keras.optimizers.legacy


def _assert_close(got: list[Any], expected: list[Any], atol: float, what: str) -> None:
    if expected and isinstance(expected[0], str):
        assert got == expected, what
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol, err_msg=what)


@pytest.mark.parametrize("name", sorted(ref.WARM_STARTS))
def test_warm_start_equals_tf215(name: str, tmp_path: Any) -> None:
    got = ref.warm_start(name, tf_estimator, LEGACY, tf.feature_column, tf, str(tmp_path / "model"))
    expected = REFERENCE["warm_starts"][name]
    assert sorted(got) == sorted(expected)
    assert got["global_step"] == [ref.WARM_STEPS]
    for var, value in expected.items():
        _assert_close(got[var], value, 1e-4, f"{name}: {var}")


@pytest.mark.parametrize("name", ref.EXPORTS)
def test_export_equals_tf215(name: str, tmp_path: Any) -> None:
    got = ref.export(name, tf_estimator, LEGACY, tf.feature_column, tf, str(tmp_path))
    expected = REFERENCE["exports"][name]
    assert got["signatures"] == expected["signatures"]
    assert sorted(got["serving"]) == sorted(expected["serving"])
    for key, outputs in expected["serving"].items():
        assert sorted(got["serving"][key]) == sorted(outputs), key
        for out, value in outputs.items():
            _assert_close(got["serving"][key][out], value, 1e-5, f"{name}: {key}/{out}")
