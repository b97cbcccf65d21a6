#!/usr/bin/env bash
# Regenerate tests/data/tf215_heads.json with TF 2.15's tf.estimator heads, in a virtual
# environment of its own (TF >= 2.16 has no tf.estimator; CI never runs this).
#   tools/tf215_heads_reference.sh [VENV_DIR]    (default /tmp/tf215venv; Python 3.9-3.11)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-/tmp/tf215venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet "tensorflow-cpu==2.15.*" "tensorflow-estimator==2.15.*"
TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/python" tools/tf215_heads_reference.py 2>&1 | grep -v '^ERROR:tensorflow' | tail -n 1
