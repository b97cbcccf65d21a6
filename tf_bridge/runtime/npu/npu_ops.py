"""``npu_bridge.estimator.npu_ops`` on tf_bridge's CPU path (``python -m tf_bridge`` or
``tf_bridge.install()``, where Ascend's adapter is not installed).

- ``dropout(x, keep_prob, noise_shape=None, seed=None, name=None)``: the adapter's
  dropout, which keeps each element with probability ``keep_prob`` and scales the kept
  ones by ``1 / keep_prob``: here TensorFlow's ``tf.nn.dropout(x, rate=1 - keep_prob)``,
  whose mask is drawn the same way (``noise_shape`` broadcasts it; ``seed`` with the
  graph's seed as ``tf.random``'s ops use it).
- ``initialize_system`` / ``shutdown_system`` (and ``NPUInit`` / ``NPUShutdown``): there
  is no device to open or close on a CPU: a ``tf.no_op`` (None when executing eagerly).
- The NPU's fused kernels and its outfeed (``LARS``, ``LARSV2``, ``basic_lstm_cell``,
  ``adam_apply_one_assign``, ``adam_apply_one_with_decay_assign``, ``outfeed_*``,
  ``npu_test``) import and raise ``NotImplementedError`` when called.
"""

from __future__ import annotations

import numbers
from typing import TypeAlias

import tensorflow as tf

from tf_bridge.runtime.npu.npu_only import npu_only

# What the ops accept: a tf.Tensor, or anything tf.convert_to_tensor takes.
TensorLike: TypeAlias = tf.types.experimental.TensorLike

__all__ = [
    "LARS",
    "LARSV2",
    "NPUInit",
    "NPUShutdown",
    "adam_apply_one_assign",
    "adam_apply_one_with_decay_assign",
    "basic_lstm_cell",
    "dropout",
    "initialize_system",
    "npu_test",
    "outfeed_dequeue_op",
    "outfeed_enqueue_op",
    "shutdown_system",
    "stop_outfeed_dequeue_op",
]


def dropout(
    x: TensorLike,
    keep_prob: float | tf.Tensor,
    noise_shape: TensorLike | None = None,
    seed: int | None = None,
    name: str | None = None,
) -> tf.Tensor:
    """Keeps each element of ``x`` with probability ``keep_prob``, scaled by ``1 / keep_prob``;
    the others are 0 (the adapter's ``npu_ops.dropout``).

    Args:
      x: a floating-point tensor, any shape.
      keep_prob: the probability of keeping an element: a Python float in (0, 1] or a
        scalar float tensor. ``1.0`` (a Python float) returns ``x`` itself, as the adapter.
      noise_shape: the shape of the keep/drop mask (1-D int32), broadcast against ``x``'s
        shape as ``tf.nn.dropout``'s; None: ``x``'s shape.
      seed: the op's seed, combined with the graph's (``tf.compat.v1.set_random_seed``)
        as TensorFlow's random ops combine them.
      name: the op's name scope.

    Returns:
      A tensor of ``x``'s shape and dtype.

    Raises:
      ValueError: ``x`` is not floating point, or ``keep_prob`` is a number outside (0, 1].

    Unlike the adapter (which refuses eager execution with a RuntimeError), this also runs
    eagerly.
    """
    x = tf.convert_to_tensor(x, name="x")
    if not x.dtype.is_floating:
        raise ValueError(
            f"npu_ops.dropout: x must be a floating-point tensor (it is scaled); got {x.dtype.name}."
        )
    if isinstance(keep_prob, numbers.Real) and not 0 < keep_prob <= 1:  # type: ignore[operator]  # mypy: numbers.Real has no order
        raise ValueError(f"npu_ops.dropout: keep_prob must be in (0, 1]; got {keep_prob}.")
    if isinstance(keep_prob, float) and keep_prob == 1:
        return x
    with tf.name_scope(name or "dropout"):
        rate = 1 - tf.convert_to_tensor(keep_prob, dtype=x.dtype, name="keep_prob")
        return tf.nn.dropout(x, rate=rate, noise_shape=noise_shape, seed=seed)


def initialize_system(name: str | None = None) -> tf.Operation | None:
    """The adapter opens the NPU system here; a CPU has nothing to open: a ``tf.no_op``
    named ``name`` (None when executing eagerly)."""
    return tf.no_op(name=name or "npu_init")


def shutdown_system(name: str | None = None) -> tf.Operation | None:
    """The adapter closes the NPU system here: a ``tf.no_op`` on CPU (None when eager)."""
    return tf.no_op(name=name or "npu_shutdown")


NPUInit = initialize_system
NPUShutdown = shutdown_system

LARS = npu_only("npu_ops.LARS", "the NPU's fused layer-wise adaptive rate scaling kernel")
LARSV2 = npu_only("npu_ops.LARSV2", "the NPU's fused layer-wise adaptive rate scaling kernel")
basic_lstm_cell = npu_only("npu_ops.basic_lstm_cell", "the NPU's fused LSTM cell kernel")
adam_apply_one_assign = npu_only("npu_ops.adam_apply_one_assign", "the NPU's fused Adam update kernel")
adam_apply_one_with_decay_assign = npu_only(
    "npu_ops.adam_apply_one_with_decay_assign", "the NPU's fused Adam update kernel"
)
outfeed_enqueue_op = npu_only("npu_ops.outfeed_enqueue_op", "the NPU's outfeed channel")
outfeed_dequeue_op = npu_only("npu_ops.outfeed_dequeue_op", "the NPU's outfeed channel")
stop_outfeed_dequeue_op = npu_only("npu_ops.stop_outfeed_dequeue_op", "the NPU's outfeed channel")
npu_test = npu_only("npu_ops.npu_test", "an NPU device test op")
