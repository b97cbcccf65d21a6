"""tf_bridge's canned ``...Estimator`` classes (a head of your own) give TF 2.15's numbers.

``tools/tf215_canned_estimators_reference.py`` trained each case of its ``CASES`` 2 steps
with TF 2.15 (``tf.estimator.DNNEstimator`` / ``LinearEstimator`` /
``DNNLinearCombinedEstimator`` over v2 heads; ``tf.compat.v1.estimator``'s four over TF's
private v1 head factories), kept the model_dir, and recorded what 2 more steps from it give
(``tests/data/tf215_canned_estimators.json``, values in ``.../values.npz``). Here tf_bridge
resumes a copy of each model_dir and must give the same ``loss`` at steps 3 and 4, the same
checkpoint keys, shapes, dtypes and values (optimizer slots included), the same
``evaluate()`` keys and values and the same predictions. A v2 head in a v1 class does what
it did in TF 2.15: the DNN and linear ones raise TF's exception type at train time, the
combined and baseline ones train from scratch to TF 2.15's numbers.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

pytest.importorskip("tf_keras")

import tf_bridge.estimator as tf_estimator  # noqa: E402
import tf_bridge.estimator.v1 as tf_estimator_v1  # noqa: E402
from tf_bridge.runtime.canned.v1 import heads as v1_heads  # noqa: E402
from tools import tf215_canned_estimators_reference as ref  # noqa: E402

with open(ref.JSON_PATH) as _f:
    REFERENCE = json.load(_f)
VALUES = np.load(os.path.join(ref.FIXTURES, "values.npz"))
API = ref.Api(tf_estimator, tf_estimator_v1, v1_heads)
RTOL, ATOL = 1e-4, 1e-5  # float32 steps of the same math


def _run(case: str, label: str, key: str, model_dir: str) -> dict[str, Any]:
    try:
        return ref.outcome(tf, API, case, label, key, model_dir)
    except Exception as exc:  # compared with TF 2.15's exception type
        return {"raises": type(exc).__name__}


@pytest.fixture(scope="module", params=sorted(ref.CASES))
def resumed(request: Any, tmp_path_factory: Any) -> tuple[str, dict[str, Any]]:
    """A case run by tf_bridge from a copy of TF 2.15's step-2 model_dir: 2 more steps,
    evaluate, predict."""
    case = request.param
    work = str(tmp_path_factory.mktemp(case) / "model")
    shutil.copytree(os.path.join(ref.FIXTURES, case), work)
    return case, _run(case, *ref.CASES[case], work)


@pytest.fixture(scope="module", params=sorted(ref.V2_HEAD_IN_V1))
def v2_head(request: Any, tmp_path_factory: Any) -> tuple[str, dict[str, Any]]:
    """A v1 class over a v2 head, run by tf_bridge from scratch."""
    case = request.param
    return case, _run(case, *ref.V2_HEAD_IN_V1[case], str(tmp_path_factory.mktemp(case)))


def _assert_same(case: str, got: dict[str, Any], want: dict[str, Any]) -> None:
    assert "raises" not in got, f"{case}: tf_bridge raised {got.get('raises')}"
    assert sorted(got["losses"]) == sorted(want["losses"]), case
    for step, loss in want["losses"].items():
        assert got["losses"][step] == pytest.approx(loss, rel=RTOL, abs=ATOL), f"{case} step {step}"
    assert got["checkpoint"] == want["checkpoint"], case
    prefix = case + "|"
    wanted = {k[len(prefix) :].replace("|", "/"): VALUES[k] for k in VALUES.files if k.startswith(prefix)}
    assert sorted(got["values"]) == sorted(wanted), case
    for name, value in wanted.items():
        np.testing.assert_allclose(
            got["values"][name], value, rtol=RTOL, atol=ATOL, err_msg=f"{case}: {name}"
        )
    assert sorted(got["evaluate"]) == sorted(want["evaluate"]), case
    for key, value in want["evaluate"].items():
        assert got["evaluate"][key] == pytest.approx(value, rel=RTOL, abs=ATOL), f"{case}: {key}"
    np.testing.assert_allclose(got["predict"], want["predict"], rtol=RTOL, atol=ATOL, err_msg=case)


def test_a_resumed_tf215_model_dir_gives_tf215s_steps(resumed: tuple[str, dict[str, Any]]) -> None:
    case, got = resumed
    _assert_same(case, got, REFERENCE["cases"][case])


def test_a_v2_head_in_a_v1_class_does_what_it_did_in_tf215(v2_head: tuple[str, dict[str, Any]]) -> None:
    case, got = v2_head
    want = REFERENCE["v2_head_in_v1"][case]
    if "raises" in want:
        assert got == want, case
    else:
        _assert_same(case, got, want)


def test_the_reference_covers_every_new_class() -> None:
    """Each ``...Estimator`` class, v2 and v1, has a resumed case (BaselineEstimator's v2 form
    has its own reference, tests/test_tf_canned_baseline.py)."""
    prefixes = {case.rsplit("_", 1)[0] for case in REFERENCE["cases"]}
    assert {"dnn_v2_multi", "linear_v2", "combined_v2_multi", "dnn_v1", "linear_v1_multi"} <= prefixes
    assert {"combined_v1", "baseline_v1"} <= prefixes
    assert REFERENCE["tensorflow"].startswith("2.15")
