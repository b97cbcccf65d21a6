"""Loss scale managers of the NPU adapter (``npu_bridge``'s npu_loss_scale_manager).

Same classes, arguments and update rule as the adapter (which follows TF 1's contrib
mixed-precision managers). They build graph ops: call them inside model_fn.
"""

from __future__ import annotations

import abc

import tensorflow as tf

_FLOAT32_MAX = 3.4e38


class LossScaleManager(abc.ABC):
    """Base class: ``get_loss_scale()`` (float32 scalar tensor) and
    ``update_loss_scale(finite_grads)`` (an op updating it from a bool scalar tensor)."""

    @abc.abstractmethod
    def get_loss_scale(self) -> tf.Tensor | tf.Variable:
        """The current loss scale, a float32 scalar tensor."""

    @abc.abstractmethod
    def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
        """An op that updates the scale after a step whose gradients were all finite
        (``finite_grads`` True) or not."""


class FixedLossScaleManager(LossScaleManager):
    """A constant loss scale.

    Args:
      loss_scale: Python number >= 1.

    Raises:
      ValueError: loss_scale < 1.
    """

    def __init__(self, loss_scale: float) -> None:
        if loss_scale < 1:
            raise ValueError(f"FixedLossScaleManager: loss_scale must be >= 1, got {loss_scale}.")
        self._loss_scale = tf.convert_to_tensor(loss_scale, dtype=tf.float32)

    def get_loss_scale(self) -> tf.Tensor | tf.Variable:
        return self._loss_scale

    def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
        """A no-op: the scale never changes."""
        return tf.no_op()


class ExponentialUpdateLossScaleManager(LossScaleManager):
    """A loss scale that grows after runs of finite steps and shrinks after overflows.

    The adapter's rule, per step: with finite gradients, the count of good steps grows;
    when it reaches ``incr_every_n_steps`` the scale is multiplied by ``incr_ratio``
    (unless that would exceed float32's range: the scale is kept) and both counts reset.
    With non-finite gradients, the good count resets and the bad count grows; when it
    reaches ``decr_every_n_nan_or_inf`` the scale becomes ``max(1, scale * decr_ratio)``
    and both counts reset. Bad steps need not be consecutive.

    State: three non-trainable variables, ``loss_scale`` (float32), ``good_steps`` and
    ``bad_steps`` (int32), saved in checkpoints like the adapter's.

    Args:
      init_loss_scale: initial scale (Python float).
      incr_every_n_steps: finite steps in a row before growing.
      decr_every_n_nan_or_inf: non-finite steps (accumulated) before shrinking; 2.
      incr_ratio: growth factor; 2.
      decr_ratio: shrink factor (< 1); 0.8.
    """

    def __init__(
        self,
        init_loss_scale: float,
        incr_every_n_steps: int,
        decr_every_n_nan_or_inf: int = 2,
        incr_ratio: float = 2,
        decr_ratio: float = 0.8,
    ) -> None:
        self._incr_every_n_steps = incr_every_n_steps
        self._decr_every_n_nan_or_inf = decr_every_n_nan_or_inf
        self._incr_ratio = incr_ratio
        self._decr_ratio = decr_ratio
        self._loss_scale = tf.compat.v1.Variable(
            tf.convert_to_tensor(init_loss_scale, tf.float32),
            name="loss_scale",
            dtype=tf.float32,
            trainable=False,
        )
        self._num_good_steps = tf.compat.v1.Variable(0, name="good_steps", dtype=tf.int32, trainable=False)
        self._num_bad_steps = tf.compat.v1.Variable(0, name="bad_steps", dtype=tf.int32, trainable=False)

    def get_loss_scale(self) -> tf.Tensor | tf.Variable:
        return self._loss_scale

    def _reset_counts(self) -> tf.Operation:
        return tf.group(self._num_good_steps.assign(0), self._num_bad_steps.assign(0))

    def _on_finite(self) -> tf.Operation:
        def grow() -> tf.Operation:
            limit = _FLOAT32_MAX / self._incr_ratio
            new_scale = tf.cond(
                self._loss_scale < limit,
                lambda: self._loss_scale * self._incr_ratio,
                lambda: tf.identity(self._loss_scale),
            )
            return tf.group(self._loss_scale.assign(new_scale), self._reset_counts())

        def count() -> tf.Operation:
            return tf.group(self._num_good_steps.assign_add(1))

        return tf.cond(self._num_good_steps + 1 >= self._incr_every_n_steps, grow, count)

    def _on_overflow(self) -> tf.Operation:
        def shrink() -> tf.Operation:
            new_scale = tf.maximum(1.0, self._loss_scale * self._decr_ratio)
            return tf.group(self._loss_scale.assign(new_scale), self._reset_counts())

        def count() -> tf.Operation:
            return tf.group(self._num_bad_steps.assign_add(1), self._num_good_steps.assign(0))

        return tf.cond(self._num_bad_steps + 1 >= self._decr_every_n_nan_or_inf, shrink, count)

    def update_loss_scale(self, finite_grads: tf.Tensor) -> tf.Operation:
        """The op applying the rule above for one step."""
        return tf.cond(finite_grads, self._on_finite, self._on_overflow)


__all__ = ["ExponentialUpdateLossScaleManager", "FixedLossScaleManager", "LossScaleManager"]
