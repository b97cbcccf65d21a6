"""Regenerate tests/data/tf215_install_reference.json: what the unmodified tf.estimator
program tests/tf_estimator_scripts/linear_tf215.py prints on TensorFlow 2.15.

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
SCRIPT = os.path.join(ROOT, "tests", "tf_estimator_scripts", "linear_tf215.py")
OUT = os.path.join(ROOT, "tests", "data", "tf215_install_reference.json")


def main() -> None:
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        run = subprocess.run(
            [sys.executable, SCRIPT, os.path.join(tmp, "model"), os.path.join(tmp, "export")],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    with open(OUT, "w") as f:
        json.dump({"tensorflow": tf.__version__, "linear_tf215": result}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
