"""Progress is the hooks' channel (issue 44, item 7): ProgressHook, EvalProgressHook and
PredictProgressHook own a renderer and print tf.estimator's lines through it; the loop
feeds them and never draws, and the Estimator's public methods enter the console scope.

Expected lines are written out by hand from tf.estimator's cadence (every batch below 20
eval steps, every ``steps // 10`` from 20 on, and the last; a predict line every
``log_step_count_steps`` batches; a train line at the first measured step and every
``log_step_count_steps`` after)."""

from __future__ import annotations

import ast
import io
import logging
import pathlib
import re
import time
import types

import numpy as np
import pytest
from rich.console import Console

import jaxspec
from jaxspec.hooks.call_progress import EvalProgressHook, PredictProgressHook
from jaxspec.hooks.estimator_hooks import ProgressHook
from jaxspec.hooks.progress_render import BAR, LINES, RECORDS, ConsoleRenderer, Renderer, Route
from tests.helpers import digits, init_fn, make_model_fn

ROOT = pathlib.Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "jaxspec"]


def test_eval_progress_lines_at_tf_estimators_cadence(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jaxspec")
    hook = EvalProgressHook(25, renderer=ConsoleRenderer("evaluate", "batches", Route(RECORDS)))
    assert isinstance(hook.renderer, Renderer)
    hook.begin()
    hook.after_batches(0, 8)  # the first update: no rate yet, so no remaining time
    time.sleep(0.01)
    hook.after_batches(8, 16)
    hook.after_batches(16, 27)  # a short batch's extra steps count once: cut at 25
    hook.end(None)
    msgs = _messages(caplog)
    evals = [m for m in msgs if m.startswith("Evaluation")]
    assert evals == [f"Evaluation [{k}/25]" for k in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 25)]
    left = [m for m in msgs if "remaining" in m]
    # after the second group only: the third reaches 25 of 25 (nothing left)
    assert len(left) == 1 and re.fullmatch(r"About \d+:\d\d:\d\d remaining: 16 of 25 batches done\.", left[0])
    assert msgs.index(left[0]) == msgs.index("Evaluation [16/25]") + 1


def test_eval_progress_with_steps_none_shows_no_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jaxspec")
    hook = EvalProgressHook(None, renderer=ConsoleRenderer("evaluate", "batches", Route(RECORDS)))
    hook.begin()
    hook.after_batches(0, 8)
    hook.after_batches(8, 11)
    hook.end(None)
    assert _messages(caplog) == []
    assert hook.renderer.done == 11  # type: ignore[attr-defined]


def test_predict_progress_lines_every_log_step_count_steps(capsys: pytest.CaptureFixture[str]) -> None:
    hook = PredictProgressHook(2, renderer=ConsoleRenderer("predict", "examples", Route(LINES)))
    hook.begin()
    for batches, examples in [(1, 8), (2, 16), (3, 24), (4, 30), (5, 30)]:
        hook.after_batches(batches, examples)
    hook.end(None)
    assert capsys.readouterr().err.splitlines() == [
        "INFO:jaxspec:Prediction: 2 batches, 16 examples so far.",
        "INFO:jaxspec:Prediction: 4 batches, 30 examples so far.",
    ]


def test_the_bar_replaces_cadence_lines_and_shows_results() -> None:
    out = io.StringIO()
    terminal = Console(file=out, width=120, force_terminal=True)
    hook = EvalProgressHook(3, renderer=ConsoleRenderer("evaluate", "batches", Route(BAR, terminal)))
    hook.begin()
    assert hook.renderer.drawing
    hook.after_batches(0, 2)
    hook.renderer.line("Saving dict for global step %d: %s", 7, "loss = 0.5", cadence=False)
    hook.after_batches(2, 3)
    hook.end(None)
    assert not hook.renderer.drawing
    text = ANSI.sub("", out.getvalue()).replace("\r", "\n")
    assert "Evaluation [" not in text  # the bar replaces the cadence lines
    assert "Saving dict for global step 7: loss = 0.5" in text
    assert re.search(r"evaluate .* 3/3 batches \d:\d\d:\d\d", text), text


def test_train_progress_hook_lines_and_final_loss(caplog: pytest.LogCaptureFixture, tmp_path) -> None:
    caplog.set_level(logging.INFO, logger="jaxspec")
    hook = ProgressHook(
        str(tmp_path), None, 2, None, renderer=ConsoleRenderer("train", "steps", Route(RECORDS))
    )
    hook.begin()
    hook.after_create_session(types.SimpleNamespace(global_step=10), None)
    hook.set_total(4)
    for first, loss in [(10, 0.5), (11, 0.25), (12, 0.125), (13, 0.0625)]:
        hook.after_loop(first, np.array([loss]))
        time.sleep(0.002)
    hook.end(types.SimpleNamespace(global_step=14))
    msgs = _messages(caplog)
    losses = [m for m in msgs if m.startswith("loss = ")]
    # measured at step 11 (the call's first: the clock starts) and 13: the run's start step shown
    assert [re.sub(r" \(.*", "", m) for m in losses] == ["loss = 0.5, step = 10", "loss = 0.125, step = 12"]
    rate = [m for m in msgs if m.startswith("global_step/sec: ")]
    assert len(rate) == 1 and msgs.index(rate[0]) == msgs.index(losses[1]) - 1
    left = [m for m in msgs if "remaining" in m]
    assert len(left) == 1 and left[0].endswith("remaining: 3 of 4 steps done.")
    assert msgs[-1] == "Loss for final step: 0.0625."


def test_the_estimators_progress_hook_runs_after_its_savers(tmp_path) -> None:
    from jaxspec.hooks.checkpoint import CheckpointSaverHook
    from jaxspec.hooks.estimator_hooks import estimator_hooks
    from jaxspec.store.checkpoints import CheckpointStore

    config = jaxspec.RunConfig(model_dir=str(tmp_path), save_checkpoints_steps=5)
    own = estimator_hooks([], config, str(tmp_path), [], CheckpointStore(str(tmp_path)), None, 8)
    assert [type(h) for h in own.all] == [CheckpointSaverHook, ProgressHook] and own.all[-1] is own.progress
    assert isinstance(own.progress.renderer, ConsoleRenderer)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_for_a_train_call_that_trains_nothing(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the console a bar (as on a terminal with no logging configured), a train
    call draws its bar once steps run; one that finds max_steps reached prints its line
    and no bar."""
    from jaxspec.loop import console

    x, y = digits(32)
    config = jaxspec.RunConfig(model_dir=str(tmp_path))  # the final checkpoint: max_steps reached on disk
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn, params={})
    monkeypatch.setattr(console, "mode", lambda: BAR)
    for max_steps, drawn in [(2, True), (2, False)]:
        tty = _Tty()
        monkeypatch.setattr("sys.stderr", tty)
        est.train(lambda: ({"x": x}, y), max_steps=max_steps)
        text = ANSI.sub("", tty.getvalue())
        assert bool(re.search(r"train .*2/2 steps", text)) is drawn, text
        assert ("Skipping training: global step 2 already reached max_steps=2." in text) is not drawn, text


def _imports(path: pathlib.Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_the_loop_never_draws() -> None:
    """No module under jaxspec/loop but the console scope itself imports the console or
    the renderers; the console imports no drawing library; the Estimator enters the scope."""
    drawing = {"jaxspec.loop.console", "jaxspec.hooks.progress_render", "rich"}
    for path in sorted((ROOT / "jaxspec" / "loop").rglob("*.py")):
        if path.name == "console.py":
            continue
        hits = {m for m in _imports(path) if any(m == d or m.startswith(d + ".") for d in drawing)}
        assert not hits, f"{path.relative_to(ROOT)} imports {sorted(hits)}"
    console = _imports(ROOT / "jaxspec" / "loop" / "console.py")
    assert not {m for m in console if m == "rich" or m.startswith("rich.")}
    assert "jaxspec.loop.console.call_output" in _imports(ROOT / "jaxspec" / "estimators" / "estimator.py")


def test_the_walk_sees_a_drawing_import(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f():\n    from jaxspec.loop import console\n    return console\n")
    assert "jaxspec.loop.console" in _imports(path)
