"""``python -m tf_bridge SCRIPT [ARGS]``: run an unmodified tf.estimator script on
TensorFlow >= 2.16, after ``tf_bridge.install()``.

The script runs as ``python SCRIPT [ARGS]`` would run it: as ``__main__``, with
``sys.argv == [SCRIPT, *ARGS]`` and its directory first on ``sys.path``; its exit status
is the process's.
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m tf_bridge SCRIPT [ARGS...]"


def main(argv: list[str]) -> None:
    """Install tf_bridge's import paths, then run ``argv[0]`` with ``argv[1:]``.

    Raises:
      SystemExit: 2 without a script or when it does not exist (with the usage line);
        whatever status the script exits with.
      RuntimeError: as ``tf_bridge.install()``.
    """
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        raise SystemExit(0 if argv else 2)
    script = argv[0]
    if not os.path.exists(script):
        print(f"{USAGE}\ntf_bridge: can't open file {script!r}: no such file", file=sys.stderr)
        raise SystemExit(2)
    import tf_bridge

    tf_bridge.install()
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
