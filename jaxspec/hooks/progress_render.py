"""How a progress hook's output is drawn: a ``rich`` bar on a terminal, tf.estimator's
INFO lines elsewhere.

A progress hook (``ProgressHook``, ``EvalProgressHook``, ``PredictProgressHook``) owns a
``Renderer``: it begins it when the call's hooks begin, moves it as the loop feeds the
hook, prints its lines through it and ends it at the hook's ``end``. The default is a
``ConsoleRenderer``, which draws where the running call's ``Route`` says: the call's
console scope (``jaxspec.loop.console``, entered by the Estimator's public methods)
decides once per call whether its output is off, log records, a bar or plain lines, and
pushes that ``Route`` here; outside any call a renderer writes log records.

Lines come in two kinds, as in tf.estimator's output: ``cadence`` lines (the periodic
``loss = ...``, ``global_step/sec``, ``Evaluation [k/n]``, the remaining time), which
the bar replaces on a terminal, and result lines, printed in every mode but ``off``.
"""

from __future__ import annotations

import datetime
import logging
import sys
import time
from typing import Any, Protocol, runtime_checkable

_log = logging.getLogger("jaxspec")

OFF, RECORDS, BAR, LINES = "off", "records", "bar", "lines"

BAR_WIDTH = 40  # the bar's width (characters) where the terminal has room
MIN_BAR_WIDTH = 10  # what it shrinks to before the remaining time goes


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


LINES_HANDLER = _Stderr()  # the ``lines`` route: logging's basic format on stderr


class Route:
    """Where one call's output goes: ``where`` is ``off``, ``records``, ``bar`` or
    ``lines``; with ``bar``, ``terminal`` is the ``rich.console.Console`` that the call's
    bars and the lines above them share (default: one on stderr). The call's console
    scope stops the bars still drawn on it when the call ends (``close``), after an
    exception too."""

    def __init__(self, where: str, terminal: Any = None) -> None:
        self.where = where
        if where == BAR and terminal is None:
            from rich.console import Console

            terminal = Console(file=sys.stderr)
        self.terminal = terminal
        self.drawn: list[ConsoleRenderer] = []

    def emit(self, msg: str, args: tuple[Any, ...], cadence: bool) -> None:
        """One INFO line: a record (``records``), a basic-format line on stderr
        (``lines``), printed above the bars (``bar``; a ``cadence`` line is left to the
        bar), or nothing (``off``)."""
        if self.where == RECORDS:
            _log.info(msg, *args)
        elif self.where == LINES:
            LINES_HANDLER.handle(_log.makeRecord(_log.name, logging.INFO, "(console)", 0, msg, args, None))
        elif self.where == BAR and not cadence:
            self.terminal.print(msg % args if args else msg, markup=False, highlight=False)

    def close(self) -> None:
        """End the renderers still drawing on this route (their last frame stays)."""
        for renderer in list(self.drawn):
            renderer.end()


_routes: list[Route] = []
_OUTSIDE = Route(RECORDS)  # no call running: plain log records


def current_route() -> Route:
    """The innermost running call's Route, or one of log records outside any call."""
    return _routes[-1] if _routes else _OUTSIDE


def enter_route(route: Route) -> None:
    """Make ``route`` the running call's (a call's console scope does this)."""
    _routes.append(route)


def exit_route(route: Route) -> None:
    """The call of ``route`` ended: its bars stop and it is no longer current."""
    route.close()
    if route in _routes:
        _routes.remove(route)


@runtime_checkable
class Renderer(Protocol):
    """What a progress hook draws on. ``begin(total)`` when the call's hooks begin
    (``total`` in the hook's unit, None while unknown), ``update(completed, **info)``
    as the loop feeds the hook (``info``: e.g. ``loss=0.3, global_step_per_sec=12.5``),
    ``line(msg, *args, cadence=)`` for its INFO lines, ``end()`` at the hook's end."""

    def begin(self, total: int | None) -> None: ...

    def set_total(self, total: int | None) -> None: ...

    def update(self, completed: int, **info: float) -> None: ...

    def leave_out(self, seconds: float) -> None: ...

    def line(self, msg: str, *args: Any, cadence: bool = True) -> None: ...

    def remaining_line(self, done: int | None = None) -> None: ...

    @property
    def drawing(self) -> bool: ...

    def end(self) -> None: ...


def _counter(completed: int, total: int | None) -> str:
    """The bar's ``completed/total`` as rich's MofNCompleteColumn writes it."""
    of = "?" if total is None else str(int(total))
    return f"{completed:{len(of)}d}/{of}"


def clock(secs: float) -> str:
    """``H:MM:SS``, as the bar's elapsed time."""
    return str(datetime.timedelta(seconds=round(secs)))


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


class ConsoleRenderer:
    """The default Renderer: a ``rich`` bar (``what``, the bar, ``completed/total``,
    ``unit``, elapsed time, remaining time, info) where the route is ``bar``, else the
    lines alone. ``route``: where it draws (default: the running call's, read at
    ``begin``; see ``current_route``).

    It also keeps the rate since its first update (units per second, compiles left
    out through ``leave_out``), for the bar's remaining time and ``remaining_line``.
    """

    def __init__(self, what: str, unit: str, route: Route | None = None) -> None:
        self.what, self.unit = what, unit
        self.total: int | None = None
        self._route = route
        self._bar: Any = None
        self._task: Any = None
        self._started = time.perf_counter()
        self._first: tuple[float, int] | None = None  # (time, done) at the first update
        self.done, self._rate = 0, 0.0

    @property
    def route(self) -> Route:
        """Where this renderer draws: the route it was given, else the running call's."""
        return self._route if self._route is not None else current_route()

    @property
    def drawing(self) -> bool:
        """Whether a bar is on screen (so that a hook skips work for it elsewhere)."""
        return self._bar is not None

    def begin(self, total: int | None) -> None:
        """Start: ``total`` units (None: unknown); the bar appears where the route is ``bar``."""
        self._route = self.route
        self.total, self._started, self._first = total, time.perf_counter(), None
        self.done, self._rate = 0, 0.0
        if self._route.where == BAR and self._bar is None:
            self._start_bar(self._route.terminal)
            self._route.drawn.append(self)

    def _start_bar(self, terminal: Any) -> None:
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
            console=terminal,
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
        eta = "" if left is None else f"eta {clock(left)}"
        fixed = (self.what, _counter(completed, self.total), self.unit, clock(now - self._started))
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
            self.line("About %s remaining: %d of %d %s done.", clock(left), done, self.total, self.unit)

    def set_total(self, total: int | None) -> None:
        """The bar's total, once known (None: unknown)."""
        self.total = total
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def line(self, msg: str, *args: Any, cadence: bool = True) -> None:
        """One of tf.estimator's INFO lines, where the route sends it (``Route.emit``):
        ``cadence`` lines (the periodic ones) are left to the bar on a terminal."""
        self.route.emit(msg, args, cadence)

    def end(self) -> None:
        """Stop the bar (its last frame stays on screen)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if self._route is not None and self in self._route.drawn:
            self._route.drawn.remove(self)
