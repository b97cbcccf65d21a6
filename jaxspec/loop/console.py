"""The console scope of an Estimator's call: where train, evaluate and predict's progress
goes (a bar on a terminal, tf.estimator's log lines elsewhere), and the libraries' own
chatter kept out of it. The Estimator's public-method wrapper
(``jaxspec.estimators.estimator.quiet_public_methods``) enters it, once per call; the
loop never does. What is drawn is the progress hooks' (``jaxspec.hooks.progress_render``
and the hooks that own a renderer); this module only routes.

Where the output goes is decided once per call, from the ``jaxspec`` logger, and handed
to the hooks' renderers as the call's ``Route``:

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
A driver's own INFO lines (``Saving dict for global step N``) are such records.

While a call runs, loggers of the libraries jaxspec calls (``absl``, which Orbax logs
through, and ``tensorflow``) that the program left at NOTSET are raised to WARNING, and a
stand-in for logging's last-resort handler sits on the root logger when it has none, so
absl's ``logging.basicConfig()`` on its first record never configures the program's root
logger. Both are undone when the call ends.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any

from jaxspec.hooks.call_progress import EvalProgressHook
from jaxspec.hooks.progress_render import (
    BAR,
    LINES,
    LINES_HANDLER,
    OFF,
    RECORDS,
    ConsoleRenderer,
    Route,
    current_route,
    enter_route,
    exit_route,
)

_log = logging.getLogger("jaxspec")
QUIETED_LOGGERS = ("absl", "jax", "tensorflow", "fsspec", "gcsfs")  # Orbax logs through absl
__all__ = ["BAR", "LINES", "OFF", "RECORDS", "call_output", "mode", "quiet_libraries", "undo_basic_config"]

_lines = LINES_HANDLER
_last_resort = type(LINES_HANDLER)(
    logging.WARNING, logging.BASIC_FORMAT
)  # WARNING:jaxspec:..., as the INFO lines


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
    goes (only installed while no logging is configured): above the bars on a terminal
    (the route's console), else as a line in logging's basic format. WARNING and above
    are left to logging."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.addFilter(lambda record: record.levelno < logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        route = current_route()
        if route.where == BAR:
            route.terminal.print(record.getMessage(), markup=False, highlight=False)
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


@contextlib.contextmanager
def call_output() -> Iterator[Route]:
    """The output of one train/evaluate/predict call, decided once (``mode()``): its
    ``Route`` current for the progress hooks' renderers, and (for the outermost call
    shown as a bar or lines) the ``jaxspec`` logger's INFO records shown on it. At exit,
    after an exception too, the bars still drawn stop and everything is undone."""
    route = Route(mode())
    enter_route(route)
    _Shown.enter(route.where)
    try:
        yield route
    finally:
        _Shown.exit()
        exit_route(route)


@contextlib.contextmanager
def call_scope() -> Iterator[Route]:
    """``quiet_libraries()`` and ``call_output()`` together: a call's whole scope."""
    with quiet_libraries(), call_output() as route:
        yield route


# The names below keep code written against the console's earlier drawing functions
# working (the bar now belongs to the progress hooks' renderers): a renderer on the
# running call's route, or one on an explicit terminal.


class Progress(ConsoleRenderer):
    """A ``ConsoleRenderer`` of ``what`` in ``unit`` (``total``: None unknown), begun,
    drawn on ``terminal`` (a ``rich.console.Console``) when given, else where
    ``mode()`` says; ``close()`` ends it."""

    def __init__(self, what: str, total: int | None, unit: str, terminal: Any = None) -> None:
        super().__init__(what, unit, Route(BAR, terminal) if terminal is not None else Route(mode()))
        self.begin(total)

    def close(self) -> None:
        """End it (``end``)."""
        self.end()


_current: list[ConsoleRenderer] = []


@contextlib.contextmanager
def running(what: str, total: int | None = None, unit: str = "steps") -> Iterator[ConsoleRenderer]:
    """A call's scope (``call_scope``) with a begun ``ConsoleRenderer`` of ``what``
    that ``eval_progress`` reaches until the scope ends."""
    with call_scope():
        renderer = ConsoleRenderer(what, unit)
        renderer.begin(total)
        _current.append(renderer)
        try:
            yield renderer
        finally:
            _current.remove(renderer)
            renderer.end()


def eval_progress(before: int, done: int, steps: int | None) -> None:
    """``EvalProgressHook.after_batches`` on the renderer of the innermost ``running``
    (nothing outside one)."""
    if _current:
        EvalProgressHook(steps, renderer=_current[-1]).after_batches(before, done)
