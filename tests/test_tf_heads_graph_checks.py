"""When tf_bridge's heads check shapes, against TF 2.15's heads (issue 37, item 1).

``tools/tf215_heads_graph_checks.py`` ran each case with TF 2.15's heads and wrote where it
failed (while building the graph, when it ran, or not at all), the exception type and the
values computed; here the same cases run with tf_bridge's heads. Float32 values are
compared bit for bit (the binary head's ``average_loss`` included).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import tensorflow as tf

from tf_bridge.runtime import heads
from tools import tf215_heads_graph_checks as ref

with open(os.path.join(os.path.dirname(__file__), "data", "tf215_heads_graph_checks.json")) as _f:
    DATA = json.load(_f)


def _close(got: Any, want: Any) -> None:
    if isinstance(want, dict) and "bits" in want:
        assert got["bits"] == want["bits"], (got["float32"], want["float32"])
    else:
        assert got == want


@pytest.mark.parametrize("key", sorted(DATA["cases"]))
def test_head_checks_where_tf215_checks(key: str) -> None:
    want = DATA["cases"][key]
    got = ref.run_case(key.split("[")[0], want["mode"], heads)
    assert (got["stage"], got["error"]) == (want["stage"], want["error"])
    if want["values"] is not None:
        assert sorted(got["values"]) == sorted(want["values"])
        for name, value in want["values"].items():
            _close(got["values"][name], value)


def test_tensor_n_classes_is_the_logits_dimension() -> None:
    """TF 2.15 gave the tensor back as logits_dimension (the same object)."""
    with tf.Graph().as_default():
        n = tf.constant(3)
        assert heads.MultiClassHead(n_classes=n).logits_dimension is n
        with pytest.raises(ValueError, match="n_classes"):
            heads.MultiClassHead(n_classes=tf.compat.v1.placeholder(tf.int32, []))
