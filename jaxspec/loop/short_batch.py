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

import jax
import numpy as np

from jaxspec.loop.inputs import Batch

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
