"""``import tensorflow`` without its C++ start-up INFO lines.

TensorFlow >= 2.18 logs, while its shared libraries load and before absl's logging is
initialised, a banner ("All log messages before absl::InitializeLog() ...") and INFO lines
(oneDNN, CUDA drivers, CPU features), once per library: twice on every import, whatever
``TF_CPP_MIN_LOG_LEVEL`` says; and when its devices are first listed (by the first op, an
export) an ERROR line "failed call to cuInit" on a machine without a GPU, which says no
more than the "Could not find cuda drivers" INFO line before it. tf_bridge imports
TensorFlow and lists its physical devices (which sets up nothing: devices can still be
configured after) with the process's stderr (file descriptor 2) sent to a temporary file,
and writes back every line but those; other warnings and errors still reach stderr, in
order.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# absl's INFO prefix ("I0000 00:00:...") and the pre-InitializeLog banner; the line after
# cpu_feature_guard's INFO line continues it.
_INFO = re.compile(rb"^I\d{4} \d\d:\d\d:\d\d")
_BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_CONTINUATION = b"To enable the following instructions:"
# The CUDA platform's probe on a machine without a GPU (tensorflow-cpu has it too).
_NO_GPU = re.compile(rb"^E\d{4} \d\d:\d\d:\d\d\S* +\d+ cuda_\w+\.cc:\d+\] failed call to cuInit")


def drop_start_up_lines(text: bytes) -> bytes:
    """``text`` (stderr output) without absl's INFO lines, their continuation lines, the
    InitializeLog banner and the CUDA probe's "failed call to cuInit" line."""
    kept = []
    for line in text.splitlines(keepends=True):
        if _INFO.match(line) or line.startswith(_BANNER) or line.startswith(_CONTINUATION):
            continue
        if _NO_GPU.match(line):
            continue
        kept.append(line)
    return b"".join(kept)


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Inside: fd 2 goes to a temporary file; after: its content, filtered by
    ``drop_start_up_lines``, is written to the real fd 2."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 (some embedded interpreters): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            rest = drop_start_up_lines(capture.read())
            if rest:
                os.write(2, rest)


def import_tensorflow() -> None:
    """Import TensorFlow (once) with its start-up INFO lines dropped; a TensorFlow the
    process already imported is left as it is.

    ``TF_CPP_MIN_LOG_LEVEL`` is set to ``'1'`` (no C++ INFO lines after start-up, as
    when kernels or devices load later) only when the user has not set it; a value the
    user set is never changed."""
    if "tensorflow" in sys.modules:
        return
    if sys.argv[:1] == ["-m"]:  # perhaps python -m tf_bridge: Keras 2 for a TF 2.15 script
        from tf_bridge._keras_choice import choose_for_launcher

        choose_for_launcher()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    with quiet_native_stderr():
        import tensorflow

        tensorflow.config.list_physical_devices()  # the CUDA probe, now rather than at export
