"""The NPU adapter's optimizer wrappers, for the CPU path.

``NPUDistributedOptimizer`` averages gradients over the HCCL ranks (``RANK_SIZE``); one
process has one rank, so there the average is the gradient itself, as in the adapter
with ``RANK_SIZE`` unset or 1. ``NPULossScaleOptimizer`` and ``NPUOptimizer`` scale the
loss, unscale the gradients and skip the update on overflow, updating a loss scale
manager; the NPU's float-status registers are replaced by ``tf.math.is_finite`` over
every gradient, which answers the same question. All are ``tf.compat.v1.train.Optimizer``s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias

import tensorflow as tf

from tf_bridge.runtime.npu.loss_scale import LossScaleManager

_Optimizer: TypeAlias = tf.compat.v1.train.Optimizer

# A gradient as tf.compat.v1 optimizers give it: dense, or IndexedSlices for gathers.
Gradient: TypeAlias = tf.Tensor | tf.IndexedSlices
# compute_gradients' result and apply_gradients' argument: (gradient or None, variable).
GradsAndVars: TypeAlias = list[tuple[Gradient | None, tf.Variable]]


def rank_size() -> int:
    """``RANK_SIZE`` from the environment (the adapter's number of HCCL ranks), 1 if unset."""
    raw = os.environ.get("RANK_SIZE", "").strip()
    return int(raw) if raw.isdigit() else 1


def allreduce(tensor: Gradient, average: bool = True) -> Gradient:
    """The adapter's ``allreduce`` over one rank: the tensor itself (dense or IndexedSlices).

    Raises:
      RuntimeError: ``RANK_SIZE`` > 1: several ranks need the NPU's HCCL.
    """
    if rank_size() > 1:
        raise RuntimeError(
            f"RANK_SIZE={rank_size()}: the CPU path of tf_bridge runs one process; averaging over several "
            "ranks needs npu_bridge's HCCL (or jaxspec's mesh)."
        )
    return tensor


def _all_finite(grads: list[Gradient]) -> tf.Tensor:
    """A bool scalar: every value of every gradient is finite."""
    checks = []
    for grad in grads:
        values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
        checks.append(tf.reduce_all(tf.math.is_finite(values)))
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


class NPUDistributedOptimizer(_Optimizer):
    """Wraps an optimizer; gradients are averaged over the ranks before they are applied
    (the adapter's ``NPUDistributedOptimizer``).

    Args:
      optimizer: a ``tf.compat.v1.train.Optimizer``.
      is_weight_update_sharding: the adapter's sharded update; one rank owns every weight.
      name: defaults to ``'Distributed' + type(optimizer).__name__``.

    Raises:
      RuntimeError: (compute_gradients) ``RANK_SIZE`` > 1.
    """

    def __init__(
        self,
        optimizer: tf.compat.v1.train.Optimizer,
        is_weight_update_sharding: bool = False,
        name: str | None = None,
    ) -> None:
        self._optimizer = optimizer
        self._is_weight_update_sharding = is_weight_update_sharding
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}", use_locking=False)

    def compute_gradients(self, *args: Any, **kwargs: Any) -> GradsAndVars:
        """The wrapped optimizer's gradients, averaged over the ranks."""
        grads_and_vars = self._optimizer.compute_gradients(*args, **kwargs)
        return [(None if g is None else allreduce(g), v) for g, v in grads_and_vars]

    def apply_gradients(
        self,
        grads_and_vars: Iterable[tuple[Gradient | None, tf.Variable]],
        global_step: tf.Variable | None = None,
        name: str | None = None,
    ) -> tf.Operation:
        """The wrapped optimizer's apply_gradients."""
        return self._optimizer.apply_gradients(grads_and_vars, global_step, name)

    def get_slot(self, *args: Any, **kwargs: Any) -> tf.Variable | None:
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args: Any, **kwargs: Any) -> list[tf.Variable]:
        return self._optimizer.variables(*args, **kwargs)


class NPUOptimizer(_Optimizer):
    """The adapter's ``NPUOptimizer``: optional loss scaling, optional averaging over ranks.

    With ``is_loss_scale``: ``compute_gradients`` multiplies the loss by the manager's scale
    and divides the gradients by it; ``apply_gradients`` applies them only if all are
    finite (otherwise nothing changes, the global step included, as in the adapter) and
    updates the manager. With ``is_distributed``: gradients are averaged over the ranks.

    Args:
      opt: a ``tf.compat.v1.train.Optimizer``.
      loss_scale_manager: a LossScaleManager (required with is_loss_scale).
      is_distributed, is_loss_scale, is_tailing_optimization: the adapter's switches
        (tailing optimization only reorders NPU communication: no effect here).
      name: defaults to ``'NPUOptimizer' + type(opt).__name__``.

    Raises:
      ValueError: is_loss_scale without a loss_scale_manager.
      TypeError: loss_scale_manager is not a LossScaleManager.
    """

    def __init__(
        self,
        opt: tf.compat.v1.train.Optimizer,
        loss_scale_manager: LossScaleManager | None = None,
        is_distributed: bool = False,
        is_loss_scale: bool = False,
        is_tailing_optimization: bool = False,
        name: str | None = None,
    ) -> None:
        if is_loss_scale and loss_scale_manager is None:
            raise ValueError("NPUOptimizer: is_loss_scale=True needs a loss_scale_manager.")
        if loss_scale_manager is not None and not isinstance(loss_scale_manager, LossScaleManager):
            raise TypeError(
                f"NPUOptimizer: loss_scale_manager must be a LossScaleManager, got {type(loss_scale_manager).__name__}."
            )
        self._opt = opt
        self._loss_scale_manager = loss_scale_manager
        self._is_distributed = is_distributed
        self._is_loss_scale = is_loss_scale
        self._is_tailing_optimization = is_tailing_optimization
        super().__init__(name=name or f"NPUOptimizer{type(opt).__name__}", use_locking=False)

    def compute_gradients(
        self,
        loss: tf.Tensor | Callable[[], tf.Tensor],
        var_list: Sequence[tf.Variable] | None = None,
        gate_gradients: int = _Optimizer.GATE_OP,
        aggregation_method: int | None = None,
        colocate_gradients_with_ops: bool = False,
        grad_loss: tf.Tensor | None = None,
    ) -> GradsAndVars:
        """Gradients of the (scaled) loss, unscaled, averaged over ranks when distributed."""
        loss_value = loss() if callable(loss) else loss
        scale = None
        if self._is_loss_scale:
            scale = self._loss_scale_manager.get_loss_scale()
            loss_value = loss_value * tf.cast(scale, loss_value.dtype.base_dtype)
        grads_and_vars = self._opt.compute_gradients(
            loss_value,
            var_list=var_list,
            gate_gradients=gate_gradients,
            aggregation_method=aggregation_method,
            colocate_gradients_with_ops=colocate_gradients_with_ops,
            grad_loss=grad_loss,
        )
        if self._is_distributed:
            grads_and_vars = [(None if g is None else allreduce(g), v) for g, v in grads_and_vars]
        if scale is not None:
            inverse = tf.math.reciprocal(scale)
            grads_and_vars = [
                (None if g is None else g * tf.cast(inverse, g.dtype.base_dtype), v)
                for g, v in grads_and_vars
            ]
        return grads_and_vars

    def apply_gradients(
        self,
        grads_and_vars: Iterable[tuple[Gradient | None, tf.Variable]],
        global_step: tf.Variable | None = None,
        name: str | None = None,
    ) -> tf.Operation:
        """Apply; with loss scaling only when every gradient is finite, then update the
        manager with that verdict."""
        grads_and_vars = list(grads_and_vars)
        if not self._is_loss_scale:
            return self._opt.apply_gradients(grads_and_vars, global_step, name)
        finite = _all_finite([g for g, _ in grads_and_vars if g is not None])
        update = tf.cond(
            finite, lambda: tf.group(self._opt.apply_gradients(grads_and_vars, global_step, name)), tf.no_op
        )
        return tf.group(update, self._loss_scale_manager.update_loss_scale(finite))

    def get_slot(self, *args: Any, **kwargs: Any) -> tf.Variable | None:
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self, *args: Any, **kwargs: Any) -> list[tf.Variable]:
        return self._opt.variables(*args, **kwargs)


class NPULossScaleOptimizer(NPUOptimizer):
    """The adapter's ``NPULossScaleOptimizer``: ``NPUOptimizer`` with loss scaling always on.

    Args:
      opt: a ``tf.compat.v1.train.Optimizer``.
      loss_scale_manager: a LossScaleManager.
      is_distributed: average gradients over ranks (one rank here).

    Raises:
      ValueError / TypeError: as NPUOptimizer.
    """

    def __init__(
        self,
        opt: tf.compat.v1.train.Optimizer,
        loss_scale_manager: LossScaleManager,
        is_distributed: bool = False,
    ) -> None:
        super().__init__(
            opt,
            loss_scale_manager=loss_scale_manager,
            is_distributed=is_distributed,
            is_loss_scale=True,
            name=f"NPULossScaleOptimizer{type(opt).__name__}",
        )


__all__ = ["NPUDistributedOptimizer", "NPULossScaleOptimizer", "NPUOptimizer", "allreduce", "rank_size"]
