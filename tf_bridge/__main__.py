"""``python -m tf_bridge [--keras3] SCRIPT [ARGS]``: run an unmodified tf.estimator
script on TensorFlow >= 2.16, after ``tf_bridge.install()``.

The script runs as ``python SCRIPT [ARGS]`` would run it: as ``__main__``, with
``sys.argv == [SCRIPT, *ARGS]`` and its directory first on ``sys.path``; its exit status
is the process's.

Keras: a TF 2.15 script is a Keras 2 program (``tf.compat.v1.layers``,
``tf.keras.optimizers.legacy``, Keras optimizer objects given to canned estimators), and
TensorFlow >= 2.16 gives Keras 3 as ``tf.keras`` unless ``TF_USE_LEGACY_KERAS=1`` is set
before TensorFlow is imported. So when the ``tf_keras`` package is installed (tf_bridge's
``[tf]`` extra installs it) and the environment does not set ``TF_USE_LEGACY_KERAS``, the
launcher sets it to ``1`` and says so in one line on stderr; ``--keras3`` (before SCRIPT)
leaves it unset, and a value the user set is never changed
(``tf_bridge._keras_choice``: the choice is made when the package imports TensorFlow).
"""

from __future__ import annotations

import os
import runpy
import sys

from tf_bridge._keras_choice import KERAS3_FLAG, SAID

USAGE = f"usage: python -m tf_bridge [{KERAS3_FLAG}] SCRIPT [ARGS...]"


def main(argv: list[str]) -> None:
    """Install tf_bridge's import paths, then run ``argv[0]`` with ``argv[1:]``.

    Raises:
      SystemExit: 2 without a script or when it does not exist (with the usage line);
        whatever status the script exits with.
      RuntimeError: as ``tf_bridge.install()``.
    """
    if argv[:1] == [KERAS3_FLAG]:  # already read when the package imported TensorFlow
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        raise SystemExit(0 if argv else 2)
    script = argv[0]
    if not os.path.exists(script):
        print(f"{USAGE}\ntf_bridge: can't open file {script!r}: no such file", file=sys.stderr)
        raise SystemExit(2)
    for line in SAID:  # the Keras choice (tf_bridge._keras_choice), one line
        print(line, file=sys.stderr)
    import tf_bridge

    tf_bridge.install()
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
