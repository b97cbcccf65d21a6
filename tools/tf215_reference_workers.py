"""Regenerate tests/data/tf215_workers_reference.json: TF 2.15's RunConfig for TF_CONFIG
clusters of workers only (MultiWorkerMirroredStrategy's layout), with and without a
distribution strategy. The tests import this module for the cases and the reader.

  /tmp/tf215venv/bin/python tools/tf215_reference_workers.py      (CI never runs it)
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf215_reference_bridge import run_config_properties  # noqa: E402

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "tests",
    "data",
    "tf215_workers_reference.json",
)

WORKERS = {"worker": ["host0:2222", "host1:2222"]}
WORKERS_PS = {"worker": ["host0:2222", "host1:2222"], "ps": ["host2:2222"]}
MASTER = {"master": ["host0:2222"], "worker": ["host1:2222"]}

# (name, TF_CONFIG, strategy argument: None, "train_distribute" or "eval_distribute")
CASES: list[tuple[str, Any, str | None]] = [
    ("workers_w0", {"cluster": WORKERS, "task": {"type": "worker", "index": 0}}, None),
    ("workers_w0_strategy", {"cluster": WORKERS, "task": {"type": "worker", "index": 0}}, "train_distribute"),
    ("workers_w1_strategy", {"cluster": WORKERS, "task": {"type": "worker", "index": 1}}, "train_distribute"),
    (
        "workers_ps_w1_strategy",
        {"cluster": WORKERS_PS, "task": {"type": "worker", "index": 1}},
        "train_distribute",
    ),
    (
        "workers_w1_eval_strategy",
        {"cluster": WORKERS, "task": {"type": "worker", "index": 1}},
        "eval_distribute",
    ),
    ("master_strategy", {"cluster": MASTER, "task": {"type": "worker", "index": 0}}, "train_distribute"),
    ("local_strategy", None, "train_distribute"),
]


def properties(api: Any, tf_config: Any, strategy_arg: str | None) -> dict[str, Any]:
    """``run_config_properties`` with a MirroredStrategy (any strategy but a TPU one
    takes the same path in TF 2.15's RunConfig) as ``strategy_arg``."""
    kwargs = {} if strategy_arg is None else {strategy_arg: tf.distribute.MirroredStrategy(["/cpu:0"])}
    return run_config_properties(api, tf_config, kwargs)


def main() -> None:
    import tensorflow_estimator.python.estimator.api._v2.estimator as api

    out = {name: properties(api, env, arg) for name, env, arg in CASES}
    with open(OUT, "w") as f:
        json.dump({"tensorflow": tf.__version__, "run_config": out}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
