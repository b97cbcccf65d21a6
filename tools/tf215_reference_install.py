"""Regenerate tests/data/tf215_install_reference.json: what the unmodified tf.estimator
programs tests/tf_estimator_scripts/linear_tf215.py and heads_canned_tf215.py print on
TensorFlow 2.15.

Run with TF 2.15's interpreter (CI never does):
  /tmp/tf215venv/bin/python tools/tf215_reference_install.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "tf_estimator_scripts")
OUT = os.path.join(ROOT, "tests", "data", "tf215_install_reference.json")


def run_script(name: str, args: list[str]) -> dict:
    """The RESULT line of ``name`` run with TF 2.15's interpreter."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, name), *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as tmp:
        linear = run_script("linear_tf215.py", [os.path.join(tmp, "model"), os.path.join(tmp, "export")])
        heads_canned = run_script("heads_canned_tf215.py", [os.path.join(tmp, "heads_canned")])
    with open(OUT, "w") as f:
        reference = {"tensorflow": tf.__version__, "linear_tf215": linear, "heads_canned_tf215": heads_canned}
        json.dump(reference, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
