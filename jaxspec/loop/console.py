"""What train, evaluate and predict show: a progress bar on a terminal, tf.estimator's
log lines elsewhere, and the libraries' own chatter kept out of both.

Where the output goes is decided once per call, from the ``jaxspec`` logger:

- its level set explicitly above INFO (``logging.getLogger("jaxspec").setLevel(
  logging.WARNING)``, as ``tf.get_logger().setLevel`` silences TensorFlow): nothing;
- logging configured by the program (a handler on ``jaxspec`` or an ancestor, e.g.
  ``logging.basicConfig(level=INFO)``): INFO records of the ``jaxspec`` logger at
  tf.estimator's cadence, handled as the program configured. A root logger left at
  WARNING whose handlers are all absl's or an argument-less ``basicConfig()``'s (what
  ``absl.logging`` leaves when grain, Orbax or any absl user logs before the program
  configured anything) counts as no configuration (``library_handlers``): the INFO
  lines would vanish there;
- no logging configured and stderr a terminal: a ``rich`` progress bar on stderr;
- no logging configured, stderr not a terminal (pipes, CI): the same lines as records
  would give, written to stderr in logging's basic format (``INFO:jaxspec:...``).

With no logging configured, the ``jaxspec`` logger's other INFO records (hooks' lines
such as a tensor-logging hook's, "Saving checkpoints for N", the restore and input-position
notices) go where the progress goes while a call runs: above the bar, or as lines.

While a call runs, loggers of the libraries jaxspec calls (``absl``, which Orbax logs
through, and ``tensorflow``) that the program left at NOTSET are raised to WARNING, and a
stand-in for logging's last-resort handler sits on the root logger when it has none, so
absl's ``logging.basicConfig()`` on its first record never configures the program's root
logger. Both are undone when the call ends.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

_log = logging.getLogger("jaxspec")
QUIETED_LOGGERS = ("absl", "jax", "tensorflow", "fsspec", "gcsfs")  # Orbax logs through absl

OFF, RECORDS, BAR, LINES = "off", "records", "bar", "lines"


class _Stderr(logging.StreamHandler):
    """A StreamHandler on whatever ``sys.stderr`` is at emit time."""

    def __init__(self, level: int = logging.NOTSET, fmt: str = logging.BASIC_FORMAT) -> None:
        super().__init__()
        self.setLevel(level)
        self.setFormatter(logging.Formatter(fmt))

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


_lines = _Stderr()
_last_resort = _Stderr(logging.WARNING, logging.BASIC_FORMAT)  # WARNING:jaxspec:..., as the INFO lines


def mode() -> str:
    """Where this call's progress goes: ``off``, ``records``, ``bar`` or ``lines``."""
    if logging.INFO < _log.level:
        return OFF
    if _configured():
        return RECORDS
    return BAR if _isatty(sys.stderr) else LINES


def _configured() -> bool:
    """Whether the program configured logging for the ``jaxspec`` logger: a handler of
    its own on it, or on the root logger one that no library's implicit
    ``basicConfig()`` could have left (``library_handlers``)."""
    if any(h is not _records for h in _log.handlers):
        return True
    if not _log.propagate:
        return False
    root = [h for h in logging.root.handlers if h is not _last_resort]
    return bool(root) and not library_handlers()


def _is_library_handler(handler: logging.Handler) -> bool:
    """absl's handler, or the handler of a ``logging.basicConfig()`` called without
    arguments (what ``absl.logging`` calls on its first record when the root has none):
    a plain StreamHandler on stderr, logging's basic format, no level, no filter."""
    kind = type(handler)
    if kind.__name__ == "ABSLHandler" and kind.__module__.startswith("absl."):
        return True
    return (
        isinstance(handler, logging.StreamHandler)
        and kind is logging.StreamHandler
        and handler.stream in (sys.stderr, sys.__stderr__)
        and handler.level == logging.NOTSET
        and all(f is _drop_shown for f in handler.filters)
        and getattr(handler.formatter, "_fmt", None) == logging.BASIC_FORMAT
    )


def library_handlers() -> list[logging.Handler]:
    """The root logger's handlers when they are all a library's doing: the root left at
    logging's default WARNING and each handler absl's or an argument-less
    ``basicConfig()``'s (``_is_library_handler``). A program that configures logging
    sets a level (``basicConfig(level=INFO)``), a format, a stream or a handler of its
    own, so its configuration is never taken for a library's; [] otherwise."""
    handlers = [h for h in logging.root.handlers if h is not _last_resort]
    if not handlers or logging.root.level != logging.WARNING:
        return []
    return handlers if all(_is_library_handler(h) for h in handlers) else []


def _only_stand_in() -> bool:
    return logging.root.handlers == [_last_resort] and all(h is _records for h in _log.handlers)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _ShownRecords(logging.Handler):
    """INFO records of the ``jaxspec`` logger, shown where the running call's progress
    goes (only installed while no logging is configured): above the bar on a terminal,
    else as a line in logging's basic format. WARNING and above are left to logging."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.addFilter(lambda record: record.levelno < logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        bar = _current[-1]._bar if _current else None
        if bar is not None:
            bar.console.print(record.getMessage(), markup=False, highlight=False)
        else:
            _lines.handle(record)


_records = _ShownRecords()


def _drop_shown(record: logging.LogRecord) -> bool:
    """False for the ``jaxspec`` INFO records ``_records`` shows (put on a library's root
    handlers during a call, so that no line is printed twice)."""
    return not (record.levelno < logging.WARNING and record.name.split(".")[0] == "jaxspec")


class _Shown:
    """The ``jaxspec`` logger opened to INFO (when left at NOTSET) with ``_records`` on it,
    for the outermost call whose console is a bar or lines."""

    depth = 0
    raised = False
    filtered: list[logging.Handler] = []

    @classmethod
    def enter(cls, where: str) -> None:
        cls.depth += 1
        if cls.depth > 1 or where not in (BAR, LINES):
            return
        _log.addHandler(_records)
        cls.filtered = library_handlers()
        for handler in cls.filtered:
            handler.addFilter(_drop_shown)
        cls.raised = _log.level == logging.NOTSET
        if cls.raised:
            _log.setLevel(logging.INFO)

    @classmethod
    def exit(cls) -> None:
        cls.depth -= 1
        if cls.depth:
            return
        if _records in _log.handlers:
            _log.removeHandler(_records)
        for handler in cls.filtered:
            handler.removeFilter(_drop_shown)
        cls.filtered = []
        if cls.raised and _log.level == logging.INFO:
            _log.setLevel(logging.NOTSET)
        cls.raised = False


def _orbax_pacing(record: logging.LogRecord) -> bool:
    """False for Orbax's advice to checkpoint less often (a save waited for the one
    before it): the cadence is RunConfig's, as in tf.estimator, not Orbax's to judge."""
    return not str(record.msg).startswith("Waiting for previous save to complete")


class _Quiet:
    """Library loggers raised to WARNING and the root stand-in, for the outermost call."""

    depth = 0
    raised: list[logging.Logger] = []

    @classmethod
    def enter(cls) -> None:
        cls.depth += 1
        if cls.depth > 1:
            return
        cls.raised = [logging.getLogger(n) for n in QUIETED_LOGGERS]
        cls.raised = [lg for lg in cls.raised if lg.level == logging.NOTSET]
        for lg in cls.raised:
            lg.setLevel(logging.WARNING)
        logging.getLogger("absl").addFilter(_orbax_pacing)
        if not logging.root.handlers:
            logging.root.addHandler(_last_resort)

    @classmethod
    def exit(cls) -> None:
        cls.depth -= 1
        if cls.depth:
            return
        for lg in cls.raised:
            if lg.level == logging.WARNING:
                lg.setLevel(logging.NOTSET)
        cls.raised = []
        logging.getLogger("absl").removeFilter(_orbax_pacing)
        if _last_resort in logging.root.handlers:
            logging.root.removeHandler(_last_resort)


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Within: absl/TensorFlow records below WARNING hidden, the root logger untouched."""
    _Quiet.enter()
    try:
        yield
    finally:
        _Quiet.exit()


def undo_basic_config(handlers_before: list[logging.Handler]) -> None:
    """Remove the root handlers that libraries' ``logging.basicConfig()`` left: those
    added since ``handlers_before`` was taken when the root had none then (jaxspec's own
    imports), and, when the root's handlers are all a library's (``library_handlers``:
    e.g. grain or another absl user imported before jaxspec), those too, so that the
    program's own ``basicConfig(level=...)`` still takes effect."""
    for handler in list(logging.root.handlers) if not handlers_before else library_handlers():
        logging.root.removeHandler(handler)


BAR_WIDTH = 40  # the bar's width (characters) where the terminal has room
MIN_BAR_WIDTH = 10  # what it shrinks to before the remaining time goes


def _counter(completed: int, total: int | None) -> str:
    """The bar's ``completed/total`` as rich's MofNCompleteColumn writes it."""
    of = "?" if total is None else str(int(total))
    return f"{completed:{len(of)}d}/{of}"


def info_texts(info: dict[str, float], unit: str) -> list[str]:
    """The bar's ``info`` (``loss=0.3, global_step_per_sec=12.5``) from longest to
    shortest: ``loss = 0.3, global_step/sec = 12.5`` (tf.estimator's words), ``loss 0.3,
    12.5 steps/s``, the first value alone (``loss 0.3``), nothing."""
    if not info:
        return [""]
    full = ", ".join(f"{k.replace('_per_', '/')} = {v:.4g}" for k, v in info.items())

    def short(key: str, value: float) -> str:
        return f"{value:.3g} {unit}/s" if key.endswith("_per_sec") else f"{key} {value:.3g}"

    brief = ", ".join(short(k, v) for k, v in info.items())
    first = short(*next(iter(info.items())))
    return list(dict.fromkeys([full, brief, first, ""]))


def fit(
    width: int, fixed: tuple[str, ...], eta: str, info: dict[str, float], unit: str
) -> tuple[int, str, str]:
    """What the bar shows in ``width`` columns beside the ``fixed`` texts (description,
    ``completed/total``, unit, elapsed time), which are never cut: ``(bar width, eta,
    info text)``. Room is made by shortening the info (``info_texts``: the full text,
    then the brief one, with the bar at least half its width), then shrinking the bar to
    MIN_BAR_WIDTH, shortening the info further, dropping it, then the remaining time,
    then the bar itself."""
    texts = info_texts(info, unit)
    base = sum(len(t) for t in fixed) + len(fixed) + 2  # one space after each column, bar's included
    tries = [(t, eta, BAR_WIDTH // 2) for t in texts[:2]] + [(t, eta, MIN_BAR_WIDTH) for t in texts[1:]]
    tries += [("", "", MIN_BAR_WIDTH), ("", "", 0)]
    for text, shown_eta, least in tries:
        room = width - 1 - base - len(shown_eta) - len(text)  # rich leaves the last column free
        if room >= least:
            return min(BAR_WIDTH, room), shown_eta, text
    return 0, "", ""


class Progress:
    """One call's progress: ``line()`` for tf.estimator's log lines, ``update()`` for the
    bar. Built by ``running``; also usable with no call running (lines only).
    ``terminal``: a ``rich.console.Console`` to draw the bar on, whatever ``mode()``
    says (default: a bar on stderr where ``mode()`` is ``bar``)."""

    def __init__(self, what: str, total: int | None, unit: str, terminal: Any = None) -> None:
        self.mode = BAR if terminal is not None else mode()
        self.what, self.total, self.unit = what, total, unit
        self._bar: Any = None
        self._task: Any = None
        self._started = time.perf_counter()
        self._first: tuple[float, int] | None = None  # (time, done) at the first update
        self.done, self._rate = 0, 0.0
        if self.mode == BAR:
            self._start_bar(terminal)

    def _start_bar(self, terminal: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress
        from rich.table import Column

        def whole() -> Column:  # never wrapped (an overlong line is cut, but fit() avoids it)
            return Column(no_wrap=True)

        self._bar_column = BarColumn(bar_width=BAR_WIDTH, table_column=whole())
        self._bar = RichProgress(
            TextColumn("{task.description}", table_column=whole()),
            self._bar_column,
            MofNCompleteColumn(table_column=whole()),
            TextColumn(self.unit, table_column=whole()),
            TimeElapsedColumn(table_column=whole()),
            TextColumn("{task.fields[eta]}", table_column=whole()),
            TextColumn("{task.fields[info]}", table_column=whole()),
            console=terminal if terminal is not None else Console(file=sys.stderr),
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._bar.add_task(self.what, total=self.total, info="", eta="")
        self._bar.start()

    def update(self, completed: int, **info: float) -> None:
        """Record ``completed`` (of ``total``; in every mode, for ``remaining``) and set
        the bar to it, with the remaining time and ``info`` beside it (e.g.
        ``loss=0.3``), shortened to fit the terminal's width (``fit``): the step counter
        is never cut."""
        now = time.perf_counter()
        if self._first is None:
            self._first = (now, completed)
        elif completed > self._first[1]:
            self._rate = (completed - self._first[1]) / max(now - self._first[0], 1e-9)
        self.done = completed
        if self._bar is None:
            return
        left = self.remaining()
        eta = "" if left is None else f"eta {_clock(left)}"
        fixed = (
            self.what,
            _counter(completed, self.total),
            self.unit,
            _clock(now - self._started),
        )
        width, eta, text = fit(self._bar.console.width, fixed, eta, info, self.unit)
        self._bar_column.bar_width = width
        self._bar.update(self._task, completed=completed, info=text, eta=eta)

    def leave_out(self, seconds: float) -> None:
        """Leave ``seconds`` (a compile's) out of the rate and the remaining time: the
        clock they are measured on, started at the first update, moves on by them."""
        if self._first is not None:
            self._first = (self._first[0] + seconds, self._first[1])

    def remaining(self, done: int | None = None) -> float | None:
        """Seconds left to ``total`` from ``done`` (default: the units done so far), at
        the rate since the first update (so a first loop's compilation does not count, nor
        a later one: ``leave_out``); None while the total or a rate is unknown."""
        if self.total is None or not self._rate:
            return None
        return max(self.total - (self.done if done is None else done), 0) / self._rate

    def remaining_line(self, done: int | None = None) -> None:
        """A cadence line with the remaining time from ``done`` units (default: those
        done so far; an evaluation passes the count its last ``Evaluation [k/n]`` line
        showed, so the two lines agree); none while it is unknown or 0."""
        done = self.done if done is None else done
        left = self.remaining(done)
        if left is not None and done < (self.total or 0):
            self.line("About %s remaining: %d of %d %s done.", _clock(left), done, self.total, self.unit)

    def set_total(self, total: int | None) -> None:
        """The bar's total, once known (None: unknown)."""
        self.total = total
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def line(self, msg: str, *args: Any, cadence: bool = True) -> None:
        """One of tf.estimator's INFO lines. ``cadence`` lines (the periodic ones) are
        left to the bar on a terminal; the others (results) are printed there too."""
        if self.mode != BAR:
            _emit(self.mode, msg, args)
        elif not cadence:
            self._bar.console.print(msg % args if args else msg, markup=False, highlight=False)

    def close(self) -> None:
        """Stop the bar (its last state stays on screen)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


_current: list[Progress] = []


@contextlib.contextmanager
def running(what: str, total: int | None = None, unit: str = "steps") -> Iterator[Progress]:
    """The console of one train/evaluate/predict call: quiet libraries, and a Progress
    that ``line``/``update``/``set_total`` reach until the call ends."""
    with quiet_libraries():
        progress = Progress(what, total, unit)
        _current.append(progress)
        _Shown.enter(progress.mode)
        try:
            yield progress
        finally:
            _Shown.exit()
            _current.remove(progress)
            progress.close()


def line(msg: str, *args: Any, cadence: bool = False) -> None:
    """A tf.estimator INFO line: through the running call's Progress, else (no call
    running) as that call would print it off the bar."""
    if _current:
        _current[-1].line(msg, *args, cadence=cadence)
        return
    where = mode()
    _emit(LINES if where == BAR else where, msg, args)


def _clock(secs: float) -> str:
    """``H:MM:SS``, as the bar's elapsed time."""
    return str(datetime.timedelta(seconds=round(secs)))


def remaining_line(done: int | None = None) -> None:
    """The running call's remaining-time line (``About 0:01:05 remaining: 200 of 1000
    steps done.``), at a cadence point, when the total and a rate are known; ``done``
    as ``Progress.remaining_line``."""
    if _current:
        _current[-1].remaining_line(done)


def leave_out(seconds: float) -> None:
    """Leave ``seconds`` spent compiling out of the running call's rate and remaining
    time (``Progress.leave_out``; nothing with no call running)."""
    if _current:
        _current[-1].leave_out(seconds)


def has_bar() -> bool:
    """Whether the running call shows a progress bar (so that callers skip work for it)."""
    return bool(_current) and _current[-1]._bar is not None


def update(completed: int, **info: float) -> None:
    """Move the running call's bar (a no-op with none, or off a terminal)."""
    if _current:
        _current[-1].update(completed, **info)


def set_total(total: int | None) -> None:
    """Set the running call's total, once known (None: unknown)."""
    if _current:
        _current[-1].set_total(total)


def eval_progress(before: int, done: int, steps: int | None) -> None:
    """After evaluation batches ``before+1 .. done``: the bar, and tf.estimator's
    ``Evaluation [k/steps]`` line for each k in that range at its cadence: every batch
    below 20 steps, every ``steps // 10`` from 20 on, and the last; none when ``steps``
    is None. After them, the remaining time (``remaining_line``) once it is known."""
    if steps is not None:  # a short batch's extra steps (jaxspec.loop.short_batch) count once
        before, done = min(before, steps), min(done, steps)
    update(done)
    if steps is None:
        return
    every = 1 if steps < 20 else steps // 10
    shown = [k for k in range(before + 1, done + 1) if k % every == 0 or k == steps]
    for k in shown:
        line("Evaluation [%d/%d]", k, steps, cadence=True)
    if shown:
        remaining_line(shown[-1])  # the count the Evaluation line above showed


def _emit(where: str, msg: str, args: tuple[Any, ...]) -> None:
    if where == RECORDS:
        _log.info(msg, *args)
    elif where == LINES:
        _lines.handle(_log.makeRecord(_log.name, logging.INFO, "(console)", 0, msg, args, None))
