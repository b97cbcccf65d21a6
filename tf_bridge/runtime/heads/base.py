"""``Head``: the interface of tf.estimator's heads (``tf.estimator.Head``, TF <= 2.15), and
what the concrete heads share: the train op, the TRAIN summaries, the EVAL metric pair of
a TPUEstimatorSpec, class id/name tensors and vocabulary lookups.

A head turns logits (and labels) into the spec a model_fn returns: loss, predictions,
eval metrics and export outputs. ``create_estimator_spec`` returns a
``tf_bridge.EstimatorSpec`` and works inside ``tf_bridge.Estimator``'s model_fn;
``_create_tpu_estimator_spec`` returns a ``tf_bridge.TPUEstimatorSpec`` (its EVAL
``eval_metrics`` is ``(update_metrics, tensors)``), as TF's heads do.

Eval metrics are graph-mode Keras metrics from ``tf_keras`` (Keras 2, the metrics TF 2.15's
heads used), so ``tf_keras`` must be installed for ``metrics`` and EVAL; ``loss`` and
``predictions`` need only TensorFlow.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import tensorflow as tf

from jaxspec.rules.head_args import HeadInterface
from jaxspec.rules.head_keys import MetricKeys
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.heads._checks import REDUCTION_SUM_OVER_BATCH_SIZE
from tf_bridge.runtime.spec import ClassificationOutput, EstimatorSpec, ModeKeys, TPUEstimatorSpec

if TYPE_CHECKING:
    from tf_keras.metrics import Metric as KerasMetric
    from tf_keras.optimizers.legacy import Optimizer as KerasOptimizer

TensorLike: TypeAlias = tf.types.experimental.TensorLike


def keras_metrics() -> types.ModuleType:
    """``tf_keras.metrics`` (ImportError naming the package if it is missing)."""
    try:
        import tf_keras
    except ImportError as exc:  # pragma: no cover - tf_keras is installed with tf_bridge's tests
        raise ImportError(
            "tf_bridge's heads compute eval metrics with tf_keras (Keras 2's graph-mode metrics, "
            "as tf.estimator did): pip install tf-keras"
        ) from exc
    return tf_keras.metrics


class Head(HeadInterface["TensorLike", "tf.Tensor", "KerasMetric"]):
    """Interface for a head (``tf.estimator.Head``): subclass it for your own head.

    Subclasses implement the properties ``name``, ``logits_dimension``, ``loss_reduction``
    and the methods ``loss``, ``predictions``, ``metrics``, ``update_metrics``
    (``jaxspec.rules.head_args.HeadInterface``, the interface jaxspec's heads share), and
    either ``_create_tpu_estimator_spec`` (then ``create_estimator_spec`` returns its
    ``as_estimator_spec()``) or ``create_estimator_spec`` itself. Here ``loss`` returns a
    scalar tensor, ``predictions`` tensors, and ``metrics`` fresh (not updated) tf_keras
    metric objects.
    """

    def create_estimator_spec(
        self,
        features: PyTree,
        mode: str,
        logits: tf.types.experimental.TensorLike,
        labels: tf.types.experimental.TensorLike | None = None,
        optimizer: KerasOptimizer | None = None,
        trainable_variables: Sequence[tf.Variable] | None = None,
        train_op_fn: Callable[[tf.Tensor], tf.Operation] | None = None,
        update_ops: Sequence[tf.Operation] | None = None,
        regularization_losses: Sequence[tf.Tensor] | None = None,
    ) -> EstimatorSpec:
        """The ``tf_bridge.EstimatorSpec`` for ``mode`` (``tf.estimator.Head.create_estimator_spec``).

        Args:
          features: dict of feature tensors (weight columns are read from it).
          mode: a ``tf_bridge.ModeKeys`` value.
          logits: float tensor ``[D0, ..., DN, logits_dimension]``.
          labels: tensor (or, for a MultiHead, dict of head name to tensor); TRAIN/EVAL.
          optimizer: TRAIN: a ``tf_keras.optimizers.legacy`` optimizer (its
            ``get_updates``), with ``trainable_variables``; or give ``train_op_fn``.
          trainable_variables: list/tuple of the variables ``optimizer`` updates.
          train_op_fn: TRAIN: ``loss -> train_op``.
          update_ops: list/tuple of ops grouped with the train op (e.g. batch norm's).
          regularization_losses: list of scalar tensors added to the loss.

        Raises:
          NotImplementedError: the subclass implements neither this nor
            ``_create_tpu_estimator_spec``.
          ValueError / tf.errors.InvalidArgumentError: bad logits, labels, weights or train
            arguments, as each head says.
        """
        try:
            spec = self._create_tpu_estimator_spec(
                **{
                    "features": features,
                    "mode": mode,
                    "logits": logits,
                    "labels": labels,
                    "optimizer": optimizer,
                    "trainable_variables": trainable_variables,
                    "train_op_fn": train_op_fn,
                    "update_ops": update_ops,
                    "regularization_losses": regularization_losses,
                }
            )
        except NotImplementedError:
            raise NotImplementedError(
                f"{type(self).__name__} implements neither create_estimator_spec() nor "
                "_create_tpu_estimator_spec()."
            ) from None
        return spec.as_estimator_spec()

    def _create_tpu_estimator_spec(
        self,
        features: PyTree,
        mode: str,
        logits: tf.types.experimental.TensorLike,
        labels: tf.types.experimental.TensorLike | None = None,
        optimizer: KerasOptimizer | None = None,
        trainable_variables: Sequence[tf.Variable] | None = None,
        train_op_fn: Callable[[tf.Tensor], tf.Operation] | None = None,
        update_ops: Sequence[tf.Operation] | None = None,
        regularization_losses: Sequence[tf.Tensor] | None = None,
    ) -> TPUEstimatorSpec:
        """The ``tf_bridge.TPUEstimatorSpec`` for ``mode``; subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} has no TPUEstimatorSpec.")


def regularization_total(regularization_losses: Sequence[tf.Tensor] | None) -> tf.Tensor | None:
    """The sum of ``regularization_losses`` (scalar float tensors), or None when it is None.

    Raises:
      ValueError: (from ``tf.math.add_n``) an empty list, or tensors whose dtypes or shapes
        differ; TF 2.15's heads summed them the same way and raised the same.
    """
    return tf.math.add_n(list(regularization_losses)) if regularization_losses is not None else None


def add_regularization(loss: tf.Tensor, regularization_losses: Sequence[tf.Tensor] | None) -> tf.Tensor:
    """``loss`` (a scalar float tensor, already reduced) plus the sum of
    ``regularization_losses``: the training loss tf.estimator's heads minimise and report
    as ``loss``. ``loss`` itself when ``regularization_losses`` is None.
    """
    total = regularization_total(regularization_losses)
    return loss if total is None else loss + total


def _check_list(value: object, what: str) -> None:
    if value is not None and not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} must be a list or tuple; got {type(value).__name__}.")


def _check_optimizer(
    optimizer: KerasOptimizer | None, trainable_variables: Sequence[tf.Variable] | None
) -> None:
    if not callable(getattr(optimizer, "get_updates", None)):
        raise ValueError(
            "optimizer must be a tf_keras.optimizers.legacy optimizer (the Keras optimizers "
            f"tf.estimator's heads took, with get_updates()); got {type(optimizer).__name__}. "
            "For another optimizer give train_op_fn instead."
        )
    if trainable_variables is None:
        raise ValueError("trainable_variables is required with optimizer; got None.")
    _check_list(trainable_variables, "trainable_variables")


def train_op(
    optimizer: KerasOptimizer | None,
    trainable_variables: Sequence[tf.Variable] | None,
    train_op_fn: Callable[[tf.Tensor], tf.Operation] | None,
    update_ops: Sequence[tf.Operation] | None,
    loss: tf.Tensor,
    loss_reduction: str,
) -> tf.Operation:
    """TRAIN's train op, in the graph's root name scope ``training``: ``train_op_fn(loss)``
    or ``optimizer.get_updates(loss, trainable_variables)[0]`` (the loss scaled by
    1/num_replicas under a distribution strategy with SUM_OVER_BATCH_SIZE), grouped with
    ``update_ops``.

    Raises:
      ValueError: both or neither of optimizer and train_op_fn; update_ops or
        trainable_variables not a list/tuple; an optimizer without ``get_updates``.
    """
    _check_list(update_ops, "update_ops")
    with tf.compat.v1.get_default_graph().name_scope(None), tf.name_scope("training"):
        if optimizer is not None:
            if train_op_fn is not None:
                raise ValueError("give optimizer or train_op_fn, not both.")
            _check_optimizer(optimizer, trainable_variables)
            if loss_reduction == REDUCTION_SUM_OVER_BATCH_SIZE:
                replicas = tf.distribute.get_strategy().num_replicas_in_sync
                if replicas > 1:
                    loss = loss * (1.0 / replicas)
            op = optimizer.get_updates(loss, list(trainable_variables))[0]
        elif train_op_fn is not None:
            op = train_op_fn(loss)
        else:
            raise ValueError("TRAIN needs optimizer or train_op_fn; both are None.")
        if update_ops is not None:
            op = tf.group(op, *update_ops)
    return op


def train_summaries(
    loss: tf.Tensor,
    regularization_losses: Sequence[tf.Tensor] | None,
    summary_key: Callable[[str], str] | None = None,
) -> None:
    """tf.estimator's TRAIN summaries: the loss and the regularization loss, at the root."""
    key = summary_key or (lambda k: k)
    with tf.compat.v1.get_default_graph().name_scope(None):
        tf.compat.v1.summary.scalar(key(MetricKeys.LOSS), loss)
        total = regularization_total(regularization_losses)
        if total is not None:
            tf.compat.v1.summary.scalar(key(MetricKeys.LOSS_REGULARIZATION), total)


def eval_metrics_pair(
    fn: Callable[..., Any], kwargs: dict[str, Any]
) -> tuple[Callable[..., Any], dict[str, tf.Tensor]]:
    """A TPUEstimatorSpec ``eval_metrics`` pair: the tensor arguments travel as tensors,
    the others are bound into the function."""
    tensors = {k: v for k, v in kwargs.items() if tf.is_tensor(v)}
    fixed = {k: v for k, v in kwargs.items() if not tf.is_tensor(v)}

    def metric_fn(**given: tf.Tensor) -> Any:
        return fn(**fixed, **given)

    return metric_fn, tensors


def broadcast_weights(weights: tf.Tensor | float | None, values: tf.Tensor) -> tf.Tensor | None:
    """``weights`` (a scalar or a tensor broadcastable to ``values``) as float32 of ``values``' shape."""
    if weights is None:
        return None
    return tf.broadcast_to(tf.cast(weights, tf.float32), tf.shape(values))


def update_mean(metric: KerasMetric, values: tf.Tensor, weights: tf.Tensor | float | None) -> None:
    """A Keras Mean over ``values`` with ``weights`` broadcast to them."""
    values = tf.cast(values, tf.float32)
    metric.update_state(values=values, sample_weight=broadcast_weights(weights, values))


def all_class_ids(logits: tf.Tensor, n_classes: int) -> tf.Tensor:
    """int32 ``[batch, n_classes]``: 0..n_classes-1 on every row."""
    return tf.tile(tf.range(n_classes)[tf.newaxis, :], [tf.shape(logits)[0], 1])


def all_classes(
    logits: tf.Tensor, n_classes: int, label_vocabulary: Sequence[str] | None = None
) -> tf.Tensor:
    """string ``[batch, n_classes]``: the vocabulary (or the class ids as strings) on every row."""
    if label_vocabulary:
        row = tf.constant([list(label_vocabulary)])
    else:
        row = tf.strings.as_string(tf.range(n_classes)[tf.newaxis, :])
    return tf.tile(row, [tf.shape(logits)[0], 1])


def classification_output(
    scores: tf.Tensor, n_classes: int, label_vocabulary: Sequence[str] | None = None
) -> ClassificationOutput:
    """The ``ClassificationOutput`` of a classification head, as tf.estimator 2.15's:
    ``scores`` (float ``[batch, n_classes]``, the probabilities) and ``classes``, a string
    tensor ``[batch, n_classes]`` repeating the class names in every row (the
    ``label_vocabulary``, or ``'0'``, ``'1'``, ... without one).
    """
    return ClassificationOutput(scores=scores, classes=all_classes(scores, n_classes, label_vocabulary))


def class_id_lookup(label_vocabulary: Sequence[str], labels: tf.Tensor) -> tf.Tensor:
    """int64 ids of string ``labels`` in the vocabulary; -1 for a string not in it."""
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(label_vocabulary)), tf.range(len(label_vocabulary), dtype=tf.int64)
        ),
        default_value=-1,
        name="class_id_lookup",
    )
    return table.lookup(labels)


def class_name_lookup(label_vocabulary: Sequence[str], class_ids: tf.Tensor) -> tf.Tensor:
    """The vocabulary's string for each int64 class id (``'UNK'`` outside it)."""
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.range(len(label_vocabulary), dtype=tf.int64), tf.constant(list(label_vocabulary))
        ),
        default_value="UNK",
        name="class_string_lookup",
    )
    return table.lookup(tf.cast(class_ids, tf.int64))


def string_labels(labels: tf.Tensor, label_vocabulary: Sequence[str]) -> tf.Tensor:
    """Class ids of string labels (ValueError for labels of another dtype)."""
    if labels.dtype != tf.string:
        raise ValueError(
            f"labels must be strings when the head has a label_vocabulary; got dtype {labels.dtype.name}."
        )
    return class_id_lookup(label_vocabulary, labels)


def train_or_eval_spec(
    head: Head,
    features: PyTree,
    mode: str,
    logits: tf.types.experimental.TensorLike,
    labels: tf.types.experimental.TensorLike,
    predictions: dict[str, tf.Tensor],
    optimizer: KerasOptimizer | None,
    trainable_variables: Sequence[tf.Variable] | None,
    train_op_fn: Callable[[tf.Tensor], tf.Operation] | None,
    update_ops: Sequence[tf.Operation] | None,
    regularization_losses: Sequence[tf.Tensor] | None,
) -> TPUEstimatorSpec:
    """EVAL: loss and ``eval_metrics = (head.update_metrics, tensors)`` on fresh
    ``head.metrics()``; TRAIN: loss, train op and the loss summaries. Shared by the heads."""
    loss = head.loss(
        labels=labels,
        logits=logits,
        features=features,
        mode=mode,
        regularization_losses=regularization_losses,
    )
    if mode == ModeKeys.EVAL:
        eval_metrics = head.metrics(regularization_losses=regularization_losses)
        pair = eval_metrics_pair(
            head.update_metrics,
            {
                "eval_metrics": eval_metrics,
                "features": features,
                "logits": logits,
                "labels": labels,
                "regularization_losses": regularization_losses,
            },
        )
        return TPUEstimatorSpec(mode=ModeKeys.EVAL, predictions=predictions, loss=loss, eval_metrics=pair)
    op = train_op(optimizer, trainable_variables, train_op_fn, update_ops, loss, head.loss_reduction)
    train_summaries(loss, regularization_losses, head._summary_key)
    return TPUEstimatorSpec(mode=ModeKeys.TRAIN, predictions=predictions, loss=loss, train_op=op)
