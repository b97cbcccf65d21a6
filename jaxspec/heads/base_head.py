"""``Head``: the base of tf.estimator's heads (``tf.estimator.Head``), on JAX arrays.

A head turns logits into predictions, a loss, eval metric states, export outputs and, in
TRAIN, the new state; ``create_estimator_spec`` packs them into a jaxspec spec.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxspec.export import ExportOutput
from jaxspec.heads import _checks, _metrics
from jaxspec.mesh_axes import traced_replica_axis
from jaxspec.metrics import Metric
from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.head_args import HeadInterface
from jaxspec.rules.head_keys import MetricKeys, Reduction
from jaxspec.spec import EstimatorSpec, TPUEstimatorSpec
from jaxspec.spec.fn_types import Array, ArrayLike, PyTree

# EVAL and PREDICT take the logits as an array (a MultiHead: or a dict of them by head
# name); TRAIN as a function of the params returning that.
Logits: TypeAlias = ArrayLike | dict[str, ArrayLike] | Callable[[PyTree], PyTree]
# A regularization loss: a scalar, or in TRAIN a function params -> scalar.
Regularizer: TypeAlias = ArrayLike | Callable[[PyTree], Array]

REPLICA_AXIS = "replica"  # the mesh axis TPUEstimator(use_tpu=True) runs model_fn over, by default


def num_replicas_in_sync() -> int:
    """Replicas of the ``'replica'`` mesh axis being traced (1 off the mesh): what
    ``tf.distribute``'s ``num_replicas_in_sync`` is to TF's heads."""
    try:
        return int(jax.lax.axis_size(traced_replica_axis()))
    except NameError:
        return 1


def _is_leaf_array(x: object) -> bool:
    return isinstance(x, jax.Array) or (isinstance(x, np.ndarray) and x.dtype.kind in "biuf")


class Head(HeadInterface[PyTree, Array, Metric]):
    """The interface of a head (``tf.estimator.Head``); subclass it for your own head.

    A subclass defines ``name``, ``logits_dimension``, ``loss_reduction``, ``loss``,
    ``predictions``, ``metrics``, ``update_metrics`` (``jaxspec.rules.head_args.
    HeadInterface``, the interface tf_bridge's heads share) and ``_export_outputs``;
    ``create_estimator_spec`` / ``create_tpu_estimator_spec`` come from this class.
    JAX differences: ``loss`` returns a float32 scalar array and ``predictions`` arrays;
    metrics are jaxspec metric states (``metrics()`` gives the empty states,
    ``update_metrics(eval_metrics, features, logits, labels, mode=None,
    regularization_losses=None)``, TF's signature, returns them merged with a batch, as a
    new dict), and TRAIN takes the logits as a function of the parameters (see
    ``create_estimator_spec``). The library's single heads build on ``HeadTemplate``,
    which writes ``loss``, ``metrics`` and ``update_metrics`` once.
    """

    def _export_outputs(self, predictions: dict[str, Array]) -> dict[str, ExportOutput]:
        """The PREDICT export outputs (jaxspec ExportOutputs by signature key)."""
        raise NotImplementedError(f"{type(self).__name__} defines no export outputs.")

    # -- specs -----------------------------------------------------------------------------
    def create_estimator_spec(
        self,
        features: PyTree,
        mode: str,
        logits: Logits,
        labels: PyTree = None,
        optimizer: optax.GradientTransformation | None = None,
        trainable_variables: PyTree = None,
        train_op_fn: Callable[[PyTree], PyTree] | None = None,
        update_ops: Sequence[Callable[[PyTree], PyTree]] | None = None,
        regularization_losses: Sequence[Regularizer] | None = None,
    ) -> EstimatorSpec:
        """The ``jaxspec.EstimatorSpec`` for ``mode``, as tf.estimator's head builds it.

        EVAL and PREDICT are called as in TF. In TRAIN, since JAX differentiates functions
        rather than tensors, ``logits`` is a function ``params -> logits`` and
        ``trainable_variables`` the state (a ``flax.training.train_state.TrainState`` or
        any pytree with ``params`` and ``opt_state``; for ``train_op_fn`` it may be the
        params themselves), and ``train_op`` is the new state.

        Args:
          features: dict of arrays ``[batch, ...]`` (the weight column and ``loss_fn``'s
            ``features`` come from it).
          mode: a ``ModeKeys`` value.
          logits: float array ``[batch, logits_dimension]`` (EVAL, PREDICT), or in TRAIN a
            function of the params returning it.
          labels: array ``[batch]`` or ``[batch, label_dimension]`` (EVAL, TRAIN).
          optimizer: TRAIN: an optax ``GradientTransformation``; the new state is the
            state with its params updated by it from the gradients of the loss and its
            ``opt_state`` (and ``step``, if it has one) advanced. On the mesh the
            gradients are summed over replicas and, with SUM_OVER_BATCH_SIZE, the loss
            is first scaled by 1/num_replicas, as TF's heads do under a distribution
            strategy (so do not also wrap it in a summing CrossShardOptimizer).
          trainable_variables: TRAIN: the state whose ``params`` are differentiated.
          train_op_fn: TRAIN, instead of ``optimizer``: ``grads -> new state``, given the
            gradients of the unscaled regularized loss with respect to the params (TF
            gives the loss; on the mesh these are per-replica gradients, so reduce them,
            e.g. with ``jaxspec.CrossShardOptimizer``, as TF leaves that to you here).
          update_ops: TRAIN: functions ``state -> state`` applied in order to the new
            state (TF's update ops, e.g. batch norm statistics).
          regularization_losses: scalars added to the loss; in TRAIN an entry may also be
            a function ``params -> scalar`` (say an L2 penalty), differentiated with the
            loss (TF differentiates its regularization tensors; a JAX array is a constant).

        Returns:
          ``jaxspec.EstimatorSpec``.

        Raises:
          ValueError: bad logits, labels or weights (shapes named); in TRAIN neither or
            both of optimizer and train_op_fn, a missing trainable_variables, an optimizer
            that is not an optax transformation, update_ops not a list or tuple.
          TypeError: in TRAIN, logits that is not callable; in EVAL and PREDICT, logits
            that is, or (EVAL) a regularization loss that is.
        """
        return self.create_tpu_estimator_spec(
            features=features,
            mode=mode,
            logits=logits,
            labels=labels,
            optimizer=optimizer,
            trainable_variables=trainable_variables,
            train_op_fn=train_op_fn,
            update_ops=update_ops,
            regularization_losses=regularization_losses,
        ).as_estimator_spec()

    def create_tpu_estimator_spec(
        self,
        features: PyTree,
        mode: str,
        logits: Logits,
        labels: PyTree = None,
        optimizer: optax.GradientTransformation | None = None,
        trainable_variables: PyTree = None,
        train_op_fn: Callable[[PyTree], PyTree] | None = None,
        update_ops: Sequence[Callable[[PyTree], PyTree]] | None = None,
        regularization_losses: Sequence[Regularizer] | None = None,
    ) -> TPUEstimatorSpec:
        """The ``jaxspec.TPUEstimatorSpec`` for ``mode`` (TF's private
        ``_create_tpu_estimator_spec``, public here): arguments as
        ``create_estimator_spec``. In EVAL, ``eval_metrics`` is ``(metric_fn, tensors)``
        whose tensors all keep the batch on axis 0 (features' arrays, logits, labels,
        the regularization loss repeated per row), so on the mesh ``metric_fn`` runs on
        the batch gathered from all replicas and gives the one-device values.
        """
        if mode == ModeKeys.TRAIN:
            return self._train_spec(
                features,
                logits,
                labels,
                optimizer,
                trainable_variables,
                train_op_fn,
                update_ops,
                regularization_losses,
            )
        logits = array_logits(logits, mode)
        predictions = self.predictions(logits)
        if mode == ModeKeys.PREDICT:
            return TPUEstimatorSpec(
                mode=ModeKeys.PREDICT,
                predictions=predictions,
                export_outputs=self._export_outputs(predictions),
            )
        if mode != ModeKeys.EVAL:
            raise ValueError(f"mode must be one of ModeKeys TRAIN, EVAL, PREDICT, got {mode!r}.")
        regularization = _regularization_arrays(regularization_losses, mode)
        loss = self.loss(labels, logits, features, mode, regularization)
        return TPUEstimatorSpec(
            mode=ModeKeys.EVAL,
            predictions=predictions,
            loss=loss,
            eval_metrics=self._eval_metrics_pair(features, logits, labels, regularization),
        )

    def _eval_metrics_pair(
        self,
        features: PyTree,
        logits: ArrayLike | dict[str, ArrayLike],
        labels: PyTree,
        regularization_losses: Sequence[ArrayLike] | None,
    ) -> tuple[Callable[..., dict[str, Metric]], dict[str, Array]]:
        """``(metric_fn, tensors)``: the batch arrays as a flat dict, everything else static."""
        rows = None
        if regularization_losses is not None:
            batch = np.shape(jax.tree.leaves(logits)[0])[0]  # a MultiHead's may be a dict
            rows = jnp.broadcast_to(_checks.sum_regularization(regularization_losses), (batch,))
        tree = (features, logits, labels, rows)
        leaves, treedef = jax.tree.flatten(tree)
        tensors = {f"t{i}": x for i, x in enumerate(leaves) if _is_leaf_array(x) and np.ndim(x) >= 1}
        static = {i: x for i, x in enumerate(leaves) if f"t{i}" not in tensors}
        with_reg = regularization_losses is not None

        def metric_fn(**arrays: Array) -> dict[str, Metric]:
            restored = [arrays[f"t{i}"] if i not in static else static[i] for i in range(len(leaves))]
            f, lg, lb, reg = jax.tree.unflatten(treedef, restored)
            reg_list = [reg] if with_reg else None
            return self.update_metrics(self.metrics(reg_list), f, lg, lb, regularization_losses=reg_list)

        return (metric_fn, tensors)

    def _train_spec(
        self,
        features: PyTree,
        logits: Logits,
        labels: PyTree,
        optimizer: optax.GradientTransformation | None,
        trainable_variables: PyTree,
        train_op_fn: Callable[[PyTree], PyTree] | None,
        update_ops: Sequence[Callable[[PyTree], PyTree]] | None,
        regularization_losses: Sequence[Regularizer] | None,
    ) -> TPUEstimatorSpec:
        if not callable(logits):
            raise TypeError(
                "in TRAIN, logits must be a function params -> logits (JAX differentiates "
                f"functions), got {type(logits).__name__}."
            )
        if update_ops is not None and not isinstance(update_ops, (list, tuple)):
            raise ValueError(f"update_ops must be a list or a tuple, got {type(update_ops).__name__}.")
        if optimizer is not None and train_op_fn is not None:
            raise ValueError("train_op_fn and optimizer cannot both be set.")
        if optimizer is None and train_op_fn is None:
            raise ValueError("in TRAIN one of optimizer and train_op_fn is required; both are None.")
        if trainable_variables is None:
            raise ValueError(
                "in TRAIN trainable_variables (the state holding the params) is required, got None."
            )
        if optimizer is not None:
            _check_optimizer(optimizer, trainable_variables)
        params = getattr(trainable_variables, "params", trainable_variables)
        replicas = num_replicas_in_sync() if optimizer is not None else 1
        scale = (
            1.0 / replicas if replicas > 1 and self.loss_reduction == Reduction.SUM_OVER_BATCH_SIZE else 1.0
        )

        def objective(p: PyTree) -> tuple[Array, tuple[Array, Array]]:
            lg = logits(p)
            reg = (
                None
                if regularization_losses is None
                else [r(p) if callable(r) else r for r in regularization_losses]
            )
            loss = self.loss(labels, lg, features, ModeKeys.TRAIN, reg)
            return loss * scale, (loss, lg)

        (_, (loss, lg)), grads = jax.value_and_grad(objective, has_aux=True)(params)
        if optimizer is not None:
            if replicas > 1:
                grads = _sum_over_replicas(grads, loss)
            new_state = _apply_optimizer(optimizer, trainable_variables, grads)
        elif train_op_fn is not None:
            new_state = train_op_fn(grads)
        for op in update_ops or ():
            new_state = op(new_state)
        return TPUEstimatorSpec(
            mode=ModeKeys.TRAIN, predictions=self.predictions(lg), loss=loss, train_op=new_state
        )


class HeadTemplate(Head):
    """What the concrete heads share, written once: ``loss``, ``metrics`` and
    ``update_metrics`` (and MultiHead's ``_weighted_losses``) as templates. A head built on
    it supplies what differs:

    - ``_processed_labels(logits, labels) -> (labels, ok)``: the labels as its loss takes
      them (checked; vocabulary strings turned into ids) and a traced range check
      (``ok``: a bool array, or None when nothing is checked at run time);
    - ``_unweighted_loss_and_weights(logits, labels, features)``: the per-example losses
      ``[batch, ...]`` (its loss function, or ``loss_fn``) and the weights broadcastable
      to them (the weight column, or 1.0);
    - ``_head_metrics(logits, labels, weights)``: its metric states of one batch, keyed
      as TF's, besides ``average_loss`` and ``regularization_loss`` (added here);
    - ``_metric_placeholders()``: logits, labels and per-example losses of one row (zeros),
      from which ``metrics()`` takes the shapes of the empty states;
    - ``predictions`` and ``_export_outputs``.

    Logits are checked against ``logits_dimension`` (ValueError naming the shape), as TF.
    """

    def _processed_labels(self, logits: Array, labels: PyTree) -> tuple[Array, Array | None]:
        raise NotImplementedError(f"{type(self).__name__} defines no _processed_labels.")

    def _unweighted_loss_and_weights(
        self, logits: Array, labels: Array, features: PyTree
    ) -> tuple[Array, ArrayLike]:
        raise NotImplementedError(f"{type(self).__name__} defines no _unweighted_loss_and_weights.")

    def _head_metrics(self, logits: Array, labels: Array, weights: ArrayLike) -> dict[str, Metric]:
        raise NotImplementedError(f"{type(self).__name__} defines no _head_metrics.")

    def _metric_placeholders(self) -> tuple[Array, Array, Array]:
        raise NotImplementedError(f"{type(self).__name__} defines no _metric_placeholders.")

    def _losses_of_batch(
        self, logits: ArrayLike, labels: PyTree, features: PyTree
    ) -> tuple[Array, Array, Array, ArrayLike, Array | None]:
        """Checked logits and labels, the per-example losses, the weights and ``ok``."""
        checked = _checks.check_logits(logits, self.logits_dimension)
        ready, ok = self._processed_labels(checked, labels)
        unweighted, weights = self._unweighted_loss_and_weights(checked, ready, features)
        return checked, ready, unweighted, weights, ok

    def loss(
        self,
        labels: PyTree,
        logits: ArrayLike,
        features: PyTree = None,
        mode: str | None = None,
        regularization_losses: Sequence[ArrayLike] | None = None,
    ) -> Array:
        """The training loss: the head's per-example losses (see the class docstring), or
        ``loss_fn``'s, weighted by the weight column and reduced by ``loss_reduction``, plus
        the regularization losses; a float32 scalar (NaN for labels out of range inside a
        compiled step, where they cannot raise).

        Args:
          labels: ``[batch]`` or ``[batch, label_dimension]`` (class ids, vocabulary strings,
            an indicator or values, as the head takes them).
          logits: float ``[batch, logits_dimension]``.
          features: dict holding the weight column, if any (and ``loss_fn``'s features).
          mode: unused (TF's heads take it too).
          regularization_losses: scalars added to the loss, or None.

        Raises:
          ValueError: bad logits, labels or weights shapes or dtypes; labels out of range
            (on the host); labels None.
        """
        _, _, unweighted, weights, ok = self._losses_of_batch(logits, labels, features)
        loss = _checks.reduce_weighted_loss(unweighted, weights, self.loss_reduction)
        return _checks.nan_unless(ok, _checks.add_regularization(loss, regularization_losses))

    def _weighted_losses(self, labels: PyTree, logits: ArrayLike, features: PyTree = None) -> Array:
        """The per-element ``loss * weight`` before reduction (NaN for traced labels out of
        range), what a MultiHead's ``loss/<name>`` reduces over the real rows on the mesh."""
        _, _, unweighted, weights, ok = self._losses_of_batch(logits, labels, features)
        return _checks.nan_unless(
            ok, jnp.asarray(unweighted, jnp.float32) * jnp.asarray(weights, jnp.float32)
        )

    def metrics(self, regularization_losses: Sequence[ArrayLike] | None = None) -> dict[str, Metric]:
        """The empty metric states, keyed as TF's (see the class docstring); with
        ``regularization_losses``, ``regularization_loss`` too."""
        logits, labels, unweighted = self._metric_placeholders()
        return _metrics.empty_states(
            lambda: self._batch_metrics(logits, labels, unweighted, 1.0, regularization_losses, None)
        )

    def update_metrics(
        self,
        eval_metrics: dict[str, Metric],
        features: PyTree,
        logits: ArrayLike,
        labels: PyTree,
        mode: str | None = None,
        regularization_losses: Sequence[ArrayLike] | None = None,
    ) -> dict[str, Metric]:
        """``eval_metrics`` (``metrics()``'s states) merged with the states of this batch,
        as a new dict (TF updates its Keras metrics in place; states are values here).

        Raises:
          ValueError: as ``loss``; KeyError: ``eval_metrics`` lacks one of the keys.
        """
        logits, labels, unweighted, weights, ok = self._losses_of_batch(logits, labels, features)
        batch = self._batch_metrics(logits, labels, unweighted, weights, regularization_losses, ok)
        return {key: eval_metrics[key].merge(state) for key, state in batch.items()}

    def _batch_metrics(
        self,
        logits: Array,
        labels: Array,
        unweighted: Array,
        weights: ArrayLike,
        regularization_losses: Sequence[ArrayLike] | None,
        ok: Array | None,
    ) -> dict[str, Metric]:
        loss_mean = _metrics.broadcast_mean(unweighted, weights)
        out: dict[str, Metric] = {
            self._summary_key(MetricKeys.LOSS_MEAN): loss_mean.replace(
                total=_checks.nan_unless(ok, loss_mean.total)
            )
        }
        out.update(self._head_metrics(logits, labels, weights))
        if regularization_losses is not None:
            reg = _checks.sum_regularization(regularization_losses)
            out[self._summary_key(MetricKeys.LOSS_REGULARIZATION)] = _metrics.regularization_mean(reg)
        return out


def array_logits(logits: Logits, mode: str) -> ArrayLike | dict[str, ArrayLike]:
    """``logits`` of EVAL or PREDICT: TypeError for a function of the params (TRAIN's form)."""
    if callable(logits):
        raise TypeError(
            f"in {mode}, logits must be an array [batch, logits_dimension]; a function of the "
            "params is for TRAIN only."
        )
    return logits


def _regularization_arrays(
    regularization_losses: Sequence[Regularizer] | None, mode: str
) -> list[ArrayLike] | None:
    """The regularization losses of EVAL: scalars (TypeError for a function of the params,
    which only TRAIN differentiates)."""
    if regularization_losses is None:
        return None
    out: list[ArrayLike] = []
    for i, r in enumerate(regularization_losses):
        if callable(r):
            raise TypeError(
                f"in {mode}, regularization_losses[{i}] must be a scalar; a function of the params "
                "is for TRAIN only."
            )
        out.append(r)
    return out


def _varies(x: Array) -> bool:
    """Whether shard_map records ``x`` as varying over replicas (never, without check_vma)."""
    aval = jax.typeof(x)
    manual = getattr(aval, "manual_axis_type", None)
    varying = getattr(manual, "varying", None) if manual is not None else getattr(aval, "vma", None)
    return traced_replica_axis() in (varying or ())


def _sum_over_replicas(grads: PyTree, loss: Array) -> PyTree:
    """The gradients summed over the replica axis, as a distribution strategy sums them.
    Where shard_map tracks what varies over replicas (``check_vma``), the gradient of a
    replicated parameter is already that sum (JAX's transpose of the broadcast) and is
    left as it is; otherwise (TPUEstimator's shard_map) the head sums it."""
    tracked = _varies(loss)
    return jax.tree.map(
        lambda g: g if tracked and not _varies(g) else jax.lax.psum(g, traced_replica_axis()), grads
    )


def _check_optimizer(optimizer: object, state: PyTree) -> None:
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise ValueError(
            f"optimizer must be an optax GradientTransformation, got {type(optimizer).__name__}."
        )
    missing = [f for f in ("params", "opt_state") if not hasattr(state, f)]
    if missing:
        raise ValueError(
            f"with an optimizer, trainable_variables must be a state with params and opt_state "
            f"(e.g. a flax TrainState); {type(state).__name__} has no {missing}."
        )


def _apply_optimizer(optimizer: optax.GradientTransformation, state: PyTree, grads: PyTree) -> PyTree:
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    fields = {"params": optax.apply_updates(state.params, updates), "opt_state": opt_state}
    if hasattr(state, "step"):
        fields["step"] = state.step + 1
    return state.replace(**fields)
