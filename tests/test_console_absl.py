"""A library that logs through absl before the program configures logging (grain,
Orbax, any absl user) leaves absl's implicit ``logging.basicConfig()`` on the root
logger; jaxspec's INFO lines must not vanish behind it, and the program's own
``basicConfig(level=INFO)`` must still take effect (issue 35, item 3). Programs in
tests/absl_first_program.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROGRAM = str(Path(__file__).with_name("absl_first_program.py"))
CASES = ("before", "after", "before+basic")


def _run(model_dir: str, how: str) -> str:
    env = dict(os.environ)
    env.pop("PYTEST_CURRENT_TEST", None)
    done = subprocess.run(
        [sys.executable, PROGRAM, model_dir, how], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def test_absl_before_or_after_jaxspec_does_not_silence_it(tmp_path):
    with ThreadPoolExecutor(len(CASES)) as pool:
        out = dict(zip(CASES, pool.map(lambda how: _run(str(tmp_path / how), how), CASES), strict=True))
    for how in ("before", "after"):
        text = out[how]
        # each line once: shown by jaxspec, not also by the library's root handler
        assert len(re.findall(r"^INFO:jaxspec:Saving checkpoints for 0 into", text, re.M)) == 1, text
        assert len(re.findall(r"^INFO:jaxspec:loss = ", text, re.M)) == 1, text
        assert len(re.findall(r"^INFO:jaxspec:Loss for final step", text, re.M)) == 1, text
    text = out["before+basic"]  # the program's own configuration, taken as written
    assert len(re.findall(r"^USER INFO jaxspec: Saving checkpoints for 0 into", text, re.M)) == 1, text
    assert len(re.findall(r"^USER INFO jaxspec: Loss for final step", text, re.M)) == 1, text
    assert "INFO:jaxspec" not in text, text
    for text in out.values():
        assert "a library's first absl record" not in text  # absl's INFO, below WARNING
