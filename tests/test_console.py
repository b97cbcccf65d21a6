"""The console of a program that configures no logging (tests/console_program.py): a
progress bar in a pseudo-terminal, tf.estimator's log lines through a pipe, the user's
own logging configuration honoured, one switch to turn it off, and nothing from
Orbax/absl below WARNING in any of them."""

from __future__ import annotations

import logging
import os
import pty
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jaxspec.loop import console

PROGRAM = str(Path(__file__).with_name("console_program.py"))
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env() -> dict[str, str]:
    env = dict(os.environ, COLUMNS="160", TERM="xterm")
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


def _through_pipe(model_dir: str, how: str = "") -> str:
    done = subprocess.run(
        [sys.executable, PROGRAM, model_dir, how], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _in_terminal(model_dir: str) -> str:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, PROGRAM, model_dir], stdin=slave, stdout=slave, stderr=slave, env=_env()
    )
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0, out[-3000:]
    return ANSI.sub("", out.decode("utf-8", "replace")).replace("\r", "\n")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("console")
    runs = {
        "pipe": lambda: _through_pipe(str(root / "pipe")),
        "basic": lambda: _through_pipe(str(root / "basic"), "basic"),
        "off": lambda: _through_pipe(str(root / "off"), "off"),
        "pty": lambda: _in_terminal(str(root / "pty")),
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {k: pool.submit(fn) for k, fn in runs.items()}
        return {k: f.result() for k, f in futures.items()}


def _no_library_chatter(text: str) -> None:
    for word in ("absl", "orbax", "Orbax", "_CHECKPOINT_METADATA", "async_save", "tensorstore"):
        assert word not in text, word
    assert "ROOT_HANDLERS_AT_END 0" in text or "ROOT_HANDLERS_AT_END 1" in text


def test_pipe_prints_tf_estimator_lines_at_its_cadence(outputs: dict[str, str]) -> None:
    text = outputs["pipe"]
    _no_library_chatter(text)
    steps = [int(s) for s in re.findall(r"^INFO:jaxspec:loss = [0-9.e-]+, step = (\d+)\b", text, re.M)]
    # TF 2.15's steps (log_step_count_steps=10): runs 1, 11, 21, 31, each line showing the
    # global step its run started from; the rate from the second on
    assert steps == [0, 10, 20, 30]
    assert len(re.findall(r"^INFO:jaxspec:global_step/sec: ", text, re.M)) == 3
    evals = re.findall(r"^INFO:jaxspec:Evaluation \[(\d+)/(\d+)\]$", text, re.M)
    # steps=25: every 25 // 10 = 2 batches, and the last; steps=None: none; steps=3: each.
    assert evals == [(str(k), "25") for k in [*range(2, 25, 2), 25]] + [("1", "3"), ("2", "3"), ("3", "3")]
    saved = re.findall(r"^INFO:jaxspec:Saving dict for global step (\d+): ", text, re.M)
    assert saved == ["40", "40", "20"]
    # Issue 36, item 4: the remaining time, once a loop after the compiling one gave a rate.
    left = re.findall(
        r"^INFO:jaxspec:About \d+:\d\d:\d\d remaining: (\d+) of (\d+) (\w+) done\.$", text, re.M
    )
    train = [(int(d), int(t)) for d, t, unit in left if unit == "steps"]
    assert train[-2:] == [(21, 40), (31, 40)] and set(train) <= {(11, 40), (21, 40), (31, 40)}, left
    evals = [(int(d), int(t)) for d, t, unit in left if unit == "batches"]  # one loop of 3: no rate
    assert evals and all(t == 25 and 1 < d < t for d, t in evals), left
    assert all(t == 25 and d % 2 == 0 for d, t in evals if t == 25), left
    # Issue 48: the remaining line counts what the Evaluation line just above it showed.
    lines = [ln for ln in text.splitlines() if ln.startswith("INFO:jaxspec:")]
    for i, ln in enumerate(lines):
        found = re.match(r"INFO:jaxspec:About \S+ remaining: (\d+) of (\d+) batches done\.$", ln)
        if found:
            assert lines[i - 1] == f"INFO:jaxspec:Evaluation [{found[1]}/{found[2]}]", lines[i - 1 : i + 1]
    assert "ROOT_HANDLERS_AFTER_IMPORT 0" in text and "ROOT_HANDLERS_AT_END 0" in text
    assert "PREDICTED 512" in text
    _hook_and_checkpoint_lines(text, "INFO:jaxspec:")


def _hook_and_checkpoint_lines(text: str, prefix: str) -> None:
    """Issue 25, item 7: with no logging configured, the hooks' lines and the checkpoint
    and restore notices appear where jaxspec's progress does; the logger is left as it
    was found."""
    assert re.findall(rf"^{prefix}the_step = (\d+)", text, re.M) == ["1", "21"]  # LoggingTensorHook
    saved = re.findall(rf"^{prefix}Saving checkpoints for (\d+) into ", text, re.M)
    assert saved == ["0", "20", "40"]
    assert re.search(rf"^{prefix}Restored state from checkpoint at global step 40", text, re.M)
    assert "JAXSPEC_LOGGER_AT_END 0 0" in text


def test_a_warning_at_construction_goes_through_the_same_handler(outputs: dict[str, str]) -> None:
    """Issue 35, item 8: the Estimator's constructor warns (model_fn takes params, none
    given, as TF 2.15 does) in logging's basic format, as every other jaxspec line, not
    bare through logging's last resort."""
    for how in ("pipe", "pty"):
        lines = [ln for ln in outputs[how].splitlines() if "model_fn takes params" in ln]
        assert len(lines) == 1 and lines[0].startswith("WARNING:jaxspec:model_fn takes params"), lines


def test_terminal_shows_progress_bars(outputs: dict[str, str]) -> None:
    text = outputs["pty"]
    _no_library_chatter(text)
    assert re.search(r"train .*40/40 steps.*loss = [0-9.]+, global_step/sec = [0-9.e+]+", text)
    assert re.search(r"train .*/40 steps.*eta \d+:\d\d:\d\d", text)  # issue 36, item 4
    assert re.search(r"evaluate .*/25 batches.*eta \d+:\d\d:\d\d", text)
    assert re.search(r"evaluate .*25/25 batches", text)
    assert re.search(r"evaluate .*8/\? batches", text)  # steps=None: total unknown
    assert re.search(r"predict .*512/\? examples", text)
    assert "INFO:jaxspec:loss =" not in text and "Evaluation [" not in text  # the bar replaces them
    assert len(re.findall(r"Saving dict for global step \d+: ", text)) == 3  # results still shown
    assert "ROOT_HANDLERS_AT_END 0" in text and "PREDICTED 512" in text
    _hook_and_checkpoint_lines(text, "")


def test_user_logging_configuration_is_honoured(outputs: dict[str, str]) -> None:
    text = outputs["basic"]
    _no_library_chatter(text)  # Orbax's INFO lines (async save, throughput) are not shown
    assert len(re.findall(r"^USER INFO jaxspec: loss = ", text, re.M)) == 4
    assert len(re.findall(r"^USER INFO jaxspec: Saving dict for global step", text, re.M)) == 3
    assert "INFO:jaxspec" not in text
    assert "ROOT_HANDLERS_AT_END 1" in text


def test_one_switch_turns_the_console_off(outputs: dict[str, str]) -> None:
    text = outputs["off"]
    _no_library_chatter(text)
    shown = [ln for ln in text.splitlines() if "jaxspec" in ln]
    assert all(ln.startswith("WARNING:jaxspec:") for ln in shown), shown  # warnings still shown
    assert "Evaluation" not in text and "Saving dict" not in text
    assert "PREDICTED 512" in text


def test_import_leaves_the_root_logger_alone() -> None:
    code = (
        "import logging, jaxspec; assert logging.root.handlers == [], logging.root.handlers;"
        "logging.basicConfig(level=logging.INFO); assert logging.root.level == logging.INFO"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(), cwd=str(Path(__file__).parents[1]))


@pytest.mark.parametrize("done,total", [(30000, 30000), (29999, 1_000_000), (123_456_789, None), (3, 40)])
def test_the_bar_at_80_columns_never_cuts_the_step_counter(done: int, total: int | None) -> None:
    """Issue 46 item 5: at 80 columns the counter stays whole; the loss/rate text is
    shortened first (to ``loss 0.123, 1.23e+04 steps/s`` or ``loss 0.123``), never the
    counter; where there is room the full tf.estimator words stay."""
    import io

    from rich.console import Console

    from jaxspec.loop import console

    for width in (80, 120):
        out = io.StringIO()
        progress = console.Progress("train", total, "steps", terminal=Console(file=out, width=width))
        progress.update(1)
        progress.update(done, loss=0.123456789, global_step_per_sec=12345.678)
        progress.close()
        last = ANSI.sub("", out.getvalue()).replace("\r", "\n").splitlines()[-1]
        counter = f"{done}/{'?' if total is None else total}"
        assert len(last) <= width and re.search(
            rf"train .* {re.escape(counter)} steps \d:\d\d:\d\d ", last
        ), last
        assert "loss 0.123" in last or "loss = 0.1235, global_step/sec = 1.235e+04" in last, last
        if width == 120:
            assert last.endswith("loss = 0.1235, global_step/sec = 1.235e+04"), last


def test_eval_remaining_line_counts_what_the_evaluation_line_showed(caplog) -> None:
    """Issue 48: a loop that ends between cadence points (batches 3..16 of 30, lines every
    3) used to print "16 of 30 batches done" under "Evaluation [15/30]"."""
    caplog.set_level(logging.INFO, logger="jaxspec")
    with console.running("evaluate", total=30, unit="batches"):
        console.eval_progress(0, 2, 30)  # the first update: no rate yet, no remaining line
        time.sleep(0.01)
        console.eval_progress(2, 16, 30)
    msgs = [r.getMessage() for r in caplog.records]
    assert [m for m in msgs if m.startswith("Evaluation")] == [
        f"Evaluation [{k}/30]" for k in (3, 6, 9, 12, 15)
    ]
    left = [i for i, m in enumerate(msgs) if "remaining" in m]
    assert len(left) == 1 and msgs[left[0]].endswith(": 15 of 30 batches done."), msgs
    assert msgs[left[0] - 1] == "Evaluation [15/30]"
