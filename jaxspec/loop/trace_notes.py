"""Saying where a model_fn trace went wrong: the batch leaves that changed since the first.

model_fn is traced once per input shape signature. When a later batch has another shape
or dtype, the loop is traced again: a change beyond the batch's rows (a feature's width,
a dtype) is named in one warning per leaf and call, and an error raised while tracing
(or compiling) gets a note (PEP 678, as input errors get) naming the mode, the global
step, the step of the call and the leaves whose shapes or dtypes differ from the first
batch's. tf.estimator builds its graph once and a changed input fails inside a session
run; naming the leaf here is jaxspec's own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from jaxspec.mode_keys import ModeKeys

_log = logging.getLogger("jaxspec")
_ARG_NAMES = {
    ModeKeys.TRAIN: ("features", "labels"),
    ModeKeys.EVAL: ("features", "labels", "mask"),
    ModeKeys.PREDICT: ("features",),
}
Signature = dict[str, tuple[tuple[int, ...], np.dtype]]


def step_signature(mode: str, batch_args: tuple[Any, ...]) -> Signature:
    """``{leaf name: (per-step shape, dtype)}`` of a loop's batch arguments stacked
    ``[N, B, ...]`` (the leading steps axis left out), named as the user wrote them:
    ``features['x']``, ``labels``, ``mask``."""
    names = _ARG_NAMES.get(mode, ())
    out: Signature = {}
    for i, arg in enumerate(batch_args):
        root = names[i] if i < len(names) else f"argument {i}"
        for path, leaf in jax.tree_util.tree_flatten_with_path(arg)[0]:
            out[root + jax.tree_util.keystr(path)] = (tuple(np.shape(leaf))[1:], np.dtype(leaf.dtype))
    return out


def _show(sig: tuple[tuple[int, ...], np.dtype] | None) -> str:
    if sig is None:
        return "absent"
    shape, dtype = sig
    return f"{dtype}[{','.join(map(str, shape))}]"


class TraceNotes:
    """One call's first batch signature, and what a later trace is told about it.

    Args:
      mode: the ModeKeys value of the call.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._first: Signature | None = None
        self._warned: set[str] = set()
        self.steps_dispatched = 0  # steps of the loops dispatched in this call

    def first(self, batch_args: tuple[Any, ...]) -> None:
        """Record the first batch's signature (only the first call counts)."""
        if self._first is None:
            self._first = step_signature(self.mode, batch_args)

    def differences(self, batch_args: tuple[Any, ...], beyond_rows: bool = False) -> list[str]:
        """``"name: now (first batch: then)"`` for each leaf whose per-step shape or dtype
        differs from the first batch's (``beyond_rows``: a change of the rows alone, axis
        0 of a step, is not counted)."""
        if self._first is None:
            return []
        now = step_signature(self.mode, batch_args)
        out = []
        for name in list(self._first) + [n for n in now if n not in self._first]:
            a, b = self._first.get(name), now.get(name)
            if a == b:
                continue
            if beyond_rows and a is not None and b is not None and a[1] == b[1] and a[0][1:] == b[0][1:]:
                continue
            out.append(f"{name}: {_show(b)} (first batch: {_show(a)})")
        return out

    def retrace(self, batch_args: tuple[Any, ...], global_step: int | None) -> None:
        """A trace for a new signature: one warning per leaf (and call) whose shape beyond
        its rows, or dtype, differs from the first batch's."""
        for change in self.differences(batch_args, beyond_rows=True):
            name = change.split(":", 1)[0]
            if name in self._warned:
                continue
            self._warned.add(name)
            _log.warning(
                "model_fn is traced again (%s, global step %s, step %d of this call): the input's %s; "
                "each new shape or dtype costs a trace and a compilation.",
                self.mode,
                global_step,
                self.steps_dispatched,
                change,
            )

    @contextlib.contextmanager
    def noting(self, batch_args: tuple[Any, ...], global_step: int | None) -> Iterator[None]:
        """Within: an exception raised (a trace or compilation) leaves with ``note``'s note."""
        try:
            yield
        except Exception as err:
            self.note(err, batch_args, global_step)
            raise

    def note(self, err: BaseException, batch_args: tuple[Any, ...], global_step: int | None) -> None:
        """Add a note to an error raised while model_fn was traced or the loop compiled."""
        changed = self.differences(batch_args)
        where = (
            "; batch leaves that differ from the first batch's: " + "; ".join(changed)
            if changed
            else "; every batch leaf has the first batch's shape and dtype"
        )
        at = "" if global_step is None else f" at global step {global_step}"
        err.add_note(
            f"raised while tracing model_fn ({self.mode}) for the loop{at}, "
            f"step {self.steps_dispatched} of this call (counted from 0){where}"
        )
