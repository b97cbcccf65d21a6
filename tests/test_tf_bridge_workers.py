"""TF_CONFIG clusters of workers only: tf_bridge.RunConfig reports what TF 2.15's did
(tests/data/tf215_workers_reference.json, from tools/tf215_reference_workers.py)."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

import tf_bridge
from tools import tf215_reference_workers as ref

with open(os.path.join(os.path.dirname(__file__), "data", "tf215_workers_reference.json")) as _f:
    EXPECTED = json.load(_f)["run_config"]


@pytest.mark.parametrize("name,tf_config,strategy_arg", ref.CASES, ids=[c[0] for c in ref.CASES])
def test_workers_only_clusters_as_tf215(name: str, tf_config: Any, strategy_arg: str | None) -> None:
    assert ref.properties(tf_bridge, tf_config, strategy_arg) == EXPECTED[name]


def test_workers_only_without_a_strategy_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": ref.WORKERS, "task": {"type": "worker", "index": 0}})
    )
    with pytest.raises(ValueError, match="train_distribute"):
        tf_bridge.RunConfig()
