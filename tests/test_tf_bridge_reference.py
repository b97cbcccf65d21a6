"""tf_bridge against TF 2.15's tf.estimator on what issue 16 added: RunConfig under
TF_CONFIG (every cluster property, the validation errors' types), train_and_evaluate's
schedule, exporter calls and returned metrics, and supervised receivers built from
input_fns (placeholder names, the EVAL signature and its loss). The numbers come from
``tools/tf215_reference_bridge.py`` run under TF 2.15 (tests/data/tf215_bridge_reference.json);
here the same functions of that tool run with ``api = tf_bridge``."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

import tf_bridge
from tools import tf215_reference_bridge as ref

with open(os.path.join(os.path.dirname(__file__), "data", "tf215_bridge_reference.json")) as _f:
    EXPECTED: dict[str, Any] = json.load(_f)


@pytest.mark.parametrize(
    "name,tf_config,kwargs", ref.RUN_CONFIG_CASES, ids=[c[0] for c in ref.RUN_CONFIG_CASES]
)
def test_run_config_reads_tf_config_as_tf215(name: str, tf_config: Any, kwargs: dict[str, Any]) -> None:
    assert ref.run_config_properties(tf_bridge, tf_config, kwargs) == EXPECTED["run_config"][name]


@pytest.mark.parametrize(
    "case", ref.TRAIN_AND_EVALUATE_CASES, ids=[c[0] for c in ref.TRAIN_AND_EVALUATE_CASES]
)
def test_train_and_evaluate_as_tf215(case: tuple[Any, ...]) -> None:
    name, *args = case
    got = ref.train_and_evaluate_run(tf_bridge, *args)
    expected = EXPECTED["train_and_evaluate"][name]
    assert got["calls"] == expected["calls"] and got["exports"] == expected["exports"]
    assert got["metrics"] == pytest.approx(expected["metrics"], rel=1e-6)


@pytest.mark.parametrize("name", sorted(ref.RECEIVER_CASES))
def test_supervised_receiver_from_input_fn_as_tf215(name: str) -> None:
    got = ref.receiver_and_eval_export(
        tf_bridge, tf_bridge.build_supervised_input_receiver_fn_from_input_fn, ref.RECEIVER_CASES[name]
    )
    expected = EXPECTED["receivers"][name]
    assert got.pop("eval_loss") == pytest.approx(expected.pop("eval_loss"), rel=1e-6)
    assert got == expected
