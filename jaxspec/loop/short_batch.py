"""tf.estimator's eval loss for a short last batch on the mesh, without changing model_fn.

tf.estimator's eval loss is the mean over batches of each batch's loss, every batch
counting once and a short batch's loss taken over its real rows. On the mesh every
replica runs model_fn on ``b`` rows, so a short batch padded to full size would put
padding rows into some replica's mean. Instead the short batch runs as steps of the same
shape in which every replica is either *full* (``b`` distinct real rows), *one row*
(a real row repeated ``b`` times: its mean is that row's loss) or *empty* (a repeated row,
masked out). Only the first copy of a repeated row is marked real, so metrics count every
example once.

Real rows of these steps are marked ``SPLIT`` (2.0) in the mask instead of 1 (the engine
binarises the mask for metrics and model_fn), and the feeder gives them a loop of their
own. The compiled eval loop then weighs each replica of those steps by ``n_r * R / G``
(``n_r`` distinct real rows, ``R`` replicas, ``G`` real rows of the whole short batch, over
every process): the short batch weighs ``R`` in all, as the ``R`` replicas of a full
batch do, and within it each replica counts by its real rows. For a model_fn whose loss
is the mean over its rows this is exactly tf.estimator's number.
"""

from __future__ import annotations

import logging

import jax
import numpy as np

from jaxspec.loop.inputs import Batch

_log = logging.getLogger("jaxspec")
SPLIT = 2.0  # the mask value of a real row in the steps of a short batch


def exact_loss_steps(batch: Batch, rows: int, full: int, replicas: int) -> list[tuple[Batch, np.ndarray]]:
    """The steps ``(batch, mask)`` that replace one short EVAL step.

    Args:
      batch: the step's host batch, padded to ``full`` rows (its first ``rows`` are real).
      rows: real rows, ``0 < rows < full``.
      full: rows of a full step, ``replicas * b``.
      replicas: replicas of the mesh.

    Returns:
      One or more steps shaped as ``batch``, each with a float32 ``[full]`` mask
      (``SPLIT`` on real rows, 0 elsewhere).
    """
    b = full // replicas
    whole = rows // b  # replicas holding b distinct real rows
    singles = list(range(whole * b, rows))  # real rows left: one replica each
    steps = []
    first = True
    while first or singles:
        index = np.zeros(full, np.int64)  # empty replicas repeat row 0, masked out
        mask = np.zeros(full, np.float32)
        used = 0
        if first:
            index[: whole * b] = np.arange(whole * b)
            mask[: whole * b] = SPLIT
            used, first = whole, False
        while singles and used < replicas:
            row = singles.pop(0)
            index[used * b : (used + 1) * b] = row
            mask[used * b] = SPLIT
            used += 1
        steps.append((jax.tree.map(lambda x, i=index: x[i], batch), mask))
    return steps


class UnweightedPadding:
    """One warning per evaluate call when padding rows reach the eval loss unweighted.

    With batches split over replicas (PER_HOST_V1/V2, PER_SHARD_V1) a short batch runs as
    ``exact_loss_steps``, where no replica that counts holds padding but copies of one
    real row: a loss that is a mean over its rows is exact without reading the mask.
    BROADCAST gives every replica the whole batch, padded: there the padding rows enter
    every replica's loss unless model_fn weights its rows by
    ``jaxspec.metrics.current_padding_mask()`` (each padded step then counts once, with
    its real rows' loss, as tf.estimator's short batch).

    Args:
      on: whether padding can reach the loss (BROADCAST on the mesh).
      reads_mask: whether model_fn read ``current_padding_mask()`` in its EVAL trace.
    """

    def __init__(self, on: bool, reads_mask: bool) -> None:
        self._on = on and not reads_mask
        self._seen = 0

    def check(self, mask: np.ndarray) -> None:
        """``mask`` ``[N, B]``: the steps about to run."""
        if not self._on:
            return
        real = (np.asarray(mask) > 0).sum(axis=-1)
        padded = np.flatnonzero((real > 0) & (real < mask.shape[-1]))
        if len(padded):
            self._on = False
            _log.warning(
                "Evaluation batch index %d holds %d real rows of %d; the rest is padding, and model_fn's "
                "loss does not read jaxspec.metrics.current_padding_mask(), so the padding rows count in "
                "the eval loss (BROADCAST gives every replica the whole padded batch). Weight the rows: "
                "mask = jaxspec.metrics.current_padding_mask(); loss = jnp.sum(per_row * mask) / "
                "jnp.maximum(jnp.sum(mask), 1.0).",
                self._seen + int(padded[0]),
                int(real[padded[0]]),
                mask.shape[-1],
            )
        self._seen += len(real)
