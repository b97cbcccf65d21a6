"""Assemble input batches into per-step global host batches and N-step groups."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxspec.config.run_config import InputPipelineConfig
from jaxspec.loop.inputs import Batch, _concat, _pad_rows, batch_rows
from jaxspec.loop.short_batch import SPLIT, exact_loss_steps
from jaxspec.mode_keys import ModeKeys

_log = logging.getLogger("jaxspec")


class StepGroup(NamedTuple):
    """Consecutive steps of one shape, stacked on a new axis 0.

    Attributes:
      batch: ``(features, labels)``, arrays ``[N, B, ...]`` (host, numpy).
      mask: ``[N, B]``: 1 for a real row, 0 for padding (> 1: a short batch's loss weight).
      steps: N.
    """

    batch: Batch
    mask: np.ndarray
    steps: int

    @property
    def batches(self) -> int:
        """The input steps the group stands for, as ``evaluate(steps=...)`` counts them:
        one for the steps of a short batch split for an exact eval loss (such a batch is
        a group of its own), else ``steps``."""
        return 1 if self.steps and self.mask.size and bool(self.mask.max() >= SPLIT) else self.steps


class _ShortTrainingBatch(Exception):
    """A training batch shorter than a full one, on the mesh: the input ends there."""

    def __init__(self, rows: int) -> None:
        super().__init__(rows)
        self.rows = rows


def _own(step: tuple[Batch, np.ndarray]) -> tuple[Batch, np.ndarray]:
    """A copy of a step's arrays. An input may hand out the same buffers for every batch
    (a generator filling one preallocated array): a step kept while the next one is read
    must be copied first."""
    return jax.tree.map(np.array, step)


def _is_split(step: tuple[Batch, np.ndarray]) -> bool:
    return bool(step[1].max(initial=0.0) >= SPLIT)


def _leaf_paths(batch: Batch) -> set[str]:
    """The key paths of a ``(features, labels)`` batch's leaves (``"features['x']"``), to
    name keys in messages."""
    names = {"[0]": "features", "[1]": "labels"}
    out = set()
    for path, _ in jax.tree_util.tree_flatten_with_path(batch)[0]:
        text = jax.tree_util.keystr(path)
        out.add(names.get(text[:3], text[:3]) + text[3:])
    return out


class StepFeeder:
    """Turns a stream of input batches into steps ``(features, labels, mask)``.

    Args:
      batches: iterator of ``(features, labels)`` numpy batches.
      mode: the ModeKeys value; EVAL and PREDICT pad a final partial step.
      num_replicas: replicas of the mesh (1 off the mesh).
      pipeline: PER_HOST_V1 (one input batch per step, split over replicas) or
        PER_HOST_V2 (one input batch per replica per step).
      batch_size: rows of a full input batch (``params['batch_size']`` of input_fn);
        None takes the first batch's rows.

    The mask is float32 ``[global_batch]``: 1 for real rows (``SPLIT`` in the steps of a
    short EVAL batch on the mesh, see ``jaxspec.loop.short_batch``), 0 for padding. Off the mesh
    a batch of any size runs at its own shape (one more compilation each), so nothing is
    padded, as tf.estimator takes batches of varying size. On
    the mesh, EVAL and PREDICT pad a short final step and mask it; in TRAIN (padding
    would change the loss) a short first batch raises ValueError, and a later short batch
    is skipped and training goes on with the batches after it (one warning per call
    naming its rows; ``skipped_batches`` counts them, for the saved input position).
    With PER_HOST_V2, an input ending part-way through a step ends the input there; in
    EVAL that step's real rows run as a short batch's steps (``jaxspec.loop.short_batch``),
    so the loss is tf.estimator's whichever pipeline feeds the mesh.
    """

    def __init__(
        self,
        batches: Iterator[Batch],
        mode: str,
        num_replicas: int,
        pipeline: InputPipelineConfig,
        batch_size: int | None = None,
        on_mesh: bool | None = None,
    ) -> None:
        self._it = batches
        self.skipped_batches = 0  # short training batches skipped on the mesh, this call
        self.skipped_rows = 0
        self._mode = mode
        on_mesh = num_replicas > 1 if on_mesh is None else on_mesh
        # BROADCAST hands every replica the whole batch: nothing to split.
        self._replicas = 1 if pipeline == InputPipelineConfig.BROADCAST else num_replicas
        self._per_replica_input = (
            pipeline in (InputPipelineConfig.PER_HOST_V2, InputPipelineConfig.PER_SHARD_V1)
            and self._replicas > 1
        )
        # One device runs a short batch at its own shape (exactly tf.estimator's numbers);
        # a mesh needs equal rows per replica, so EVAL and PREDICT pad and mask there.
        self._pad = mode != ModeKeys.TRAIN and on_mesh
        self._on_mesh = on_mesh
        self._last: tuple[Batch, np.ndarray] | None = None  # the last group's (batch, mask)
        self._ones: np.ndarray | None = None  # the mask of a full step (read-only)
        self._rows: int | None = None  # rows of a full input batch
        if batch_size is not None:
            self._full_rows(batch_size)
        self._pending: tuple[Batch, np.ndarray] | None = None
        self.examples_seen = 0
        # EVAL on the mesh, batches split over replicas (one per step, or one per replica):
        # a short step runs as steps that give tf.estimator's loss
        # (jaxspec.loop.short_batch), in a loop of their own. A mesh of one replica too:
        # padded, model_fn's mean would count the padding rows. BROADCAST hands each
        # replica the whole padded batch: its loss reads the mask (warned otherwise).
        self._exact_loss = self._pad and mode == ModeKeys.EVAL and pipeline != InputPipelineConfig.BROADCAST
        self._queued: list[tuple[Batch, np.ndarray]] = []
        self._raw: Batch | None = None  # an input batch read by _stack_full, not yet a step
        self._structure: Any = None  # the first batch's pytree structure
        self._structures_warned: set[Any] = set()
        self._batches_read = 0

    def _pull(self) -> Batch | None:
        if self._raw is not None:
            batch, self._raw = self._raw, None
            return batch
        try:
            batch = next(self._it)
        except StopIteration:
            return None
        self._batches_read += 1
        return batch

    def _full_rows(self, rows: int) -> int:
        if self._rows is None:
            self._rows = rows
            if not self._per_replica_input and rows % self._replicas:
                raise ValueError(
                    f"the batch size ({rows}) must be divisible by the number of replicas ({self._replicas})."
                )
        return self._rows

    def _check_structure(self, batch: Batch) -> None:
        """Warn once per new structure when a batch's features/labels differ from the
        first batch's (a key missing or new): JAX traces and compiles the step again for
        it, where tf.estimator's input pipeline keeps one structure."""
        structure = jax.tree.structure(batch)
        if self._structure is None:
            self._structure, self._first_paths = structure, _leaf_paths(batch)
        elif structure != self._structure and structure not in self._structures_warned:
            self._structures_warned.add(structure)
            first, now = self._first_paths, _leaf_paths(batch)
            _log.warning(
                "input_fn's batch index %d has another structure than the first batch (missing: %s; new: %s): "
                "its step is traced and compiled again. Give every batch the same feature and label keys.",
                self._batches_read - 1,
                ", ".join(sorted(first - now)) or "none",
                ", ".join(sorted(now - first)) or "none",
            )

    def _padded(self, batch: Batch) -> tuple[Batch, np.ndarray]:
        self._check_structure(batch)
        rows = batch_rows(batch)
        full = self._full_rows(rows)
        if rows == full:  # the common case: no padding, a shared all-ones mask
            self.examples_seen += rows
            if self._ones is None or len(self._ones) != full:
                self._ones = np.ones(full, np.float32)
                self._ones.flags.writeable = False
            return batch, self._ones
        if not self._on_mesh:
            full = rows  # one device: a batch of another size runs as it is (one more compilation)
        elif rows > full:
            raise ValueError(f"an input batch has {rows} rows, more than a full batch ({full}).")
        elif not self._pad:
            if self.examples_seen == 0:
                raise ValueError(
                    f"the first training batch has {rows} rows but a full one has {full} "
                    "(params['batch_size']); on the mesh every step needs full batches."
                )
            raise _ShortTrainingBatch(rows)
        mask = np.zeros(full, np.float32)
        mask[:rows] = 1.0
        self.examples_seen += rows
        return _pad_rows(batch, full), mask

    def push_back(self, step: tuple[Batch, np.ndarray]) -> None:
        """Return a step read with ``next_step`` so the next call yields it again."""
        self._pending = step

    def peek_step(self) -> tuple[Batch, np.ndarray] | None:
        """The step ``push_back`` returned, still unread (None when there is none)."""
        return self._pending

    def next_step(self) -> tuple[Batch, np.ndarray] | None:
        """The next step's global host batch and mask, or None when the input is done."""
        if self._pending is not None:
            step, self._pending = self._pending, None
            return step
        if self._queued:
            return self._queued.pop(0)
        while True:
            try:
                return self._next_step()
            except _ShortTrainingBatch as short:
                self._skip(short.rows)

    def _skip(self, rows: int) -> None:
        """A short training batch on the mesh: not trained on, training goes on with the
        next batch; the first of a call is named in a warning."""
        self.skipped_batches += 1
        self.skipped_rows += rows
        if self.skipped_batches == 1:
            _log.warning(
                "Skipped a training batch of %d rows, shorter than a full one (%d rows): on the mesh "
                "every step needs full batches, so its %d rows are not trained on and training goes on "
                "with the next batch. Later short batches of this call are skipped too, without another "
                "warning. Batch with drop_remainder=True to drop them on purpose.",
                rows,
                self._rows,
                rows,
            )

    def _next_step(self) -> tuple[Batch, np.ndarray] | None:
        if not self._per_replica_input:
            batch = self._pull()
            if batch is None:
                return None
            step = self._padded(batch)
            rows = int(step[1].sum()) if self._exact_loss else 0
            if self._exact_loss and rows < len(step[1]):
                first, *self._queued = exact_loss_steps(step[0], rows, len(step[1]), self._replicas)
                return first
            return step
        parts: list[tuple[Batch, np.ndarray]] = []
        while len(parts) < self._replicas:
            batch = self._pull()
            if batch is None:
                break
            try:
                parts.append(_own(self._padded(batch)))  # kept while the next part is read
            except _ShortTrainingBatch as short:
                self._skip(short.rows)
        if not parts:
            return None
        if len(parts) < self._replicas:
            if not self._pad:
                _log.warning(
                    "Input ended after %d of the %d per-replica batches of a training step; those rows "
                    "were not trained on.",
                    len(parts),
                    self._replicas,
                )
                return None
            template = jax.tree.map(np.zeros_like, parts[0][0])
            parts += [(template, np.zeros_like(parts[0][1]))] * (self._replicas - len(parts))
        step = _concat([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        return self._exact_per_replica(step) if self._exact_loss else step

    def _exact_per_replica(self, step: tuple[Batch, np.ndarray]) -> tuple[Batch, np.ndarray]:
        """A per-replica EVAL step (PER_HOST_V2, PER_SHARD_V1) with padding: its real rows,
        in order, run as the steps of one short batch (``exact_loss_steps``), so that the
        eval loss is tf.estimator's, as with PER_HOST_V1 (a replica's padding rows would
        otherwise count in its mean)."""
        batch, mask = step
        real = np.flatnonzero(mask > 0)
        if len(real) == len(mask):
            return step
        compact = _pad_rows(jax.tree.map(lambda x: x[real], batch), len(mask))
        first, *self._queued = exact_loss_steps(compact, len(real), len(mask), self._replicas)
        return first

    def next_group(self, max_steps: int, stop: Callable[[], bool] | None = None) -> StepGroup | None:
        """Up to ``max_steps`` consecutive steps of one shape, stacked on a new axis 0;
        fewer when ``stop()`` (checked before each further step is read) turns True.

        Returns ``((features, labels) [N, B, ...], mask [N, B], N)`` or None at the end.
        """
        first = self.next_step()
        if first is None:
            return None
        if self._exact_loss and _is_split(first):
            group = self._split_group(first)
        else:
            group = self._stacked_group(first, max_steps, stop)
        self._last = (group.batch, group.mask)
        return group

    def _stacked_group(
        self, first: tuple[Batch, np.ndarray], max_steps: int, stop: Callable[[], bool] | None = None
    ) -> StepGroup:
        """``first`` and up to ``max_steps - 1`` following steps of its shape, each copied
        into the stacked arrays as soon as it is read (the input may reuse its buffers for
        the next batch). The arrays are allocated for ``max_steps`` (untouched pages cost
        nothing when the input ends early) and cut to the steps read. Copies also matter
        for the last step: on the CPU a numpy argument may be read by the device after
        the call that received it has returned."""
        leaves, treedef = jax.tree.flatten(first)
        out = [np.empty((max_steps,) + np.shape(x), np.asarray(x).dtype) for x in leaves]
        for o, x in zip(out, leaves, strict=True):
            o[0] = x
        n, ended = 1, False
        # Full batches only: a short one goes back to next_step (padded, or split for an
        # exact eval loss), so this holds in EVAL on the mesh too.
        if first[1] is self._ones and not self._per_replica_input:
            n, ended = self._stack_full(first[0], out, max_steps, stop)
        while n < max_steps and not ended and not (stop is not None and stop()):
            step = self.next_step()
            if step is None:
                break
            leaves, same = jax.tree.flatten(step)
            if (
                same != treedef  # type: ignore[operator]  # jaxlib has no stub for PyTreeDef
                or any(x.shape != o.shape[1:] or x.dtype != o.dtype for x, o in zip(leaves, out, strict=True))
                or (self._exact_loss and _is_split(step))
            ):
                self._pending = step  # another shape: the next group starts with it
                break
            for o, x in zip(out, leaves, strict=True):
                o[n] = x
            n += 1
        batch, mask = jax.tree.unflatten(treedef, [o[:n] for o in out])
        return StepGroup(batch, mask, n)

    def _stack_full(
        self, first: Batch, out: list[np.ndarray], max_steps: int, stop: Callable[[], bool] | None = None
    ) -> tuple[int, bool]:
        """The common case of ``_stacked_group``: full input batches of ``first``'s
        structure, shapes and dtypes are its steps as they are (mask all ones), so they
        are copied into ``out`` (the batch's leaves, then the mask) with no per-step
        padding or checks. The first other batch is kept for ``next_step``. Returns the
        steps now in ``out`` and whether the input ended."""
        treedef = jax.tree.structure(first)
        signature = [(o.shape[1:], o.dtype) for o in out[:-1]]
        rows, n, ended = self._rows, 1, False
        assert rows is not None  # set by the full step ``first``
        while n < max_steps and not (stop is not None and stop()):
            batch = self._pull()
            if batch is None:
                ended = True
                break
            leaves, same = jax.tree.flatten(batch)
            if same != treedef or [(x.shape, x.dtype) for x in leaves] != signature:  # type: ignore[operator]  # jaxlib has no stub for PyTreeDef
                self._raw = batch  # the general path pads, checks or skips it
                break
            for o, x in zip(out, leaves, strict=False):  # out ends with the mask
                o[n] = x
            n += 1
        out[-1][1:n] = 1.0
        self.examples_seen += rows * (n - 1)
        return n, ended

    def _split_group(self, first: tuple[Batch, np.ndarray]) -> StepGroup:
        """The steps of one short batch split for an exact eval loss (``first`` and the
        queued ones, which ``exact_loss_steps`` made as new arrays): a loop of their own."""
        group = [first]
        while self._queued:
            step = self.next_step()
            assert step is not None  # a queued step
            group.append(step)
        batch = jax.tree.map(lambda *xs: np.stack(xs), *[g[0] for g in group])
        return StepGroup(batch, np.stack([g[1] for g in group]), len(group))

    def _template(self) -> tuple[Batch, np.ndarray]:
        """One all-zero step shaped like the last group's (for padding)."""
        return jax.tree.map(lambda x: np.zeros_like(x[:1]), self._last)

    def pad_group(self, batch: Batch, mask: np.ndarray, steps: int) -> tuple[Batch, np.ndarray]:
        """Extend a stacked group to ``steps`` steps with fully masked (all padding) ones."""
        tb, tm = self._template()
        extra = steps - mask.shape[0]
        grow = lambda x, t: np.concatenate([x, np.repeat(t, extra, axis=0)])  # noqa: E731
        return jax.tree.map(grow, batch, tb), grow(mask, tm)

    def empty_group(self, steps: int) -> StepGroup:
        """A group of zero steps shaped like the last one (to be padded by pad_group)."""
        tb, tm = self._template()
        return StepGroup(jax.tree.map(lambda x: x[:0], tb), tm[:0], steps)
