"""Which Keras ``python -m tf_bridge`` gives a script (see ``tf_bridge.__main__``).

TensorFlow reads ``TF_USE_LEGACY_KERAS`` once, while it is imported, and ``python -m
tf_bridge`` imports the package (and so TensorFlow) before ``tf_bridge.__main__`` runs:
the choice is made here, from ``tf_bridge._quiet.import_tensorflow``, while Python still
locates the module to run (``sys.argv[0] == '-m'``). Pure Python: no TensorFlow.
"""

from __future__ import annotations

import importlib.util
import os
import sys

LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
KERAS3_FLAG = "--keras3"


def choose_keras(keras3: bool) -> str | None:
    """Set ``TF_USE_LEGACY_KERAS=1`` unless ``keras3``, the variable is already set (a
    value the user chose is kept), or ``tf_keras`` is not installed. Returns the line
    that tells so, or None when nothing was set."""
    if keras3 or LEGACY_KERAS in os.environ or importlib.util.find_spec("tf_keras") is None:
        return None
    os.environ[LEGACY_KERAS] = "1"
    return (
        f"tf_bridge: {LEGACY_KERAS}=1 (tf_keras is installed): tf.keras is Keras 2, as in TensorFlow "
        f"2.15; run with {KERAS3_FLAG} (or set the variable yourself) for Keras 3."
    )


def launched() -> bool:
    """Whether this process is ``python -m tf_bridge ...`` still importing the package."""
    orig = list(getattr(sys, "orig_argv", ()))
    if sys.argv[:1] != ["-m"] or "-m" not in orig:
        return False
    return orig[orig.index("-m") + 1 : orig.index("-m") + 2] == ["tf_bridge"]


SAID: list[str] = []  # the launcher's line, printed by tf_bridge.__main__ once it runs the script


def choose_for_launcher() -> None:
    """Under ``python -m tf_bridge``, before TensorFlow is imported: ``choose_keras``
    with ``--keras3`` read from the command line; its line kept in ``SAID``."""
    if launched():
        said = choose_keras(keras3=sys.argv[1:2] == [KERAS3_FLAG])
        SAID.extend([said] if said else [])
