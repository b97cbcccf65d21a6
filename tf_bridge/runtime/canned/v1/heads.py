"""The heads of TF 2.15's v1 canned estimators, as forms of tf_bridge's heads.

TF 2.15's v1 classes used the v1 heads (``canned/head.py``). Where they differ from the v2
heads tf_bridge has, a v1 head here follows them:

- TRAIN with an optimizer runs ``optimizer.minimize(loss, global_step=...)`` (a
  ``tf.compat.v1.train.Optimizer``) in the caller's variable scope, so that TF1's slot
  names come out as TF 2.15 wrote them, and groups the graph's ``UPDATE_OPS``; the train
  op is built in the head's name scope (an optimizer's non-slot variables are named there);
- TRAIN writes ``average_loss`` (the loss over the summed example weights) next to
  ``loss`` when ``loss_reduction`` is SUM (the v1 default);
- the binary head's ``auc`` and ``auc_precision_recall`` sum the trapezoids between the
  200 thresholds' points as ``tf.compat.v1.metrics.auc`` does (Keras' AUC, which the v2
  heads use, interpolates the precision-recall curve: 0.40648 vs 0.40584 on the census
  sample).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from jaxspec.rules.head_keys import MetricKeys, Reduction
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.heads import BinaryClassHead, MultiClassHead, RegressionHead
from tf_bridge.runtime.spec import EstimatorSpec, ModeKeys

_EPSILON = 1e-7  # tf.compat.v1.metrics.auc's guard against empty denominators


def trapezoidal_auc(tp: Any, fp: Any, tn: Any, fn: Any, curve: str) -> Any:
    """The area under the ROC or PR curve through the thresholds' points, summed as
    trapezoids (``tf.compat.v1.metrics.auc``'s ``summation_method='trapezoidal'``).

    Args:
      tp, fp, tn, fn: float ``[num_thresholds]`` confusion counts, thresholds ascending.
      curve: ``'ROC'`` or ``'PR'``.

    Returns:
      float32 scalar tensor.
    """
    recall = tf.math.divide(tp + _EPSILON, tp + fn + _EPSILON)
    if curve == "ROC":
        x, y = tf.math.divide(fp, fp + tn + _EPSILON), recall
    else:
        x, y = recall, tf.math.divide(tp + _EPSILON, tp + fp + _EPSILON)
    return tf.math.reduce_sum((x[:-1] - x[1:]) * (y[:-1] + y[1:]) / 2.0)


def v1_auc(curve: str, name: str) -> Any:
    """A ``tf_keras.metrics.AUC`` (200 thresholds: the same confusion counts as
    ``tf.compat.v1.metrics.auc``) whose ``result`` is ``trapezoidal_auc``: TF 2.15's v1 head
    metric as a Keras metric object. (The instance's ``result`` is replaced: a subclass
    outside tf_keras would have its ``update_state`` traced as a ``tf.function``, which
    the heads' graph-mode updates cannot return.)"""
    import tf_keras

    metric = tf_keras.metrics.AUC(curve=curve, name=name)

    def result() -> Any:
        return trapezoidal_auc(
            metric.true_positives,
            metric.false_positives,
            metric.true_negatives,
            metric.false_negatives,
            curve,
        )

    metric.result = result
    return metric


class _V1Head:
    """What the v1 heads add to a tf_bridge head (see the module docstring)."""

    loss_reduction: str
    _summary_key: Callable[[str], str]
    _batch: Callable[..., Any]

    def create_estimator_spec(
        self,
        features: PyTree,
        mode: str,
        logits: Any,
        labels: Any = None,
        optimizer: Any = None,
        trainable_variables: Sequence[Any] | None = None,
        train_op_fn: Callable[[Any], Any] | None = None,
        update_ops: Sequence[Any] | None = None,
        regularization_losses: Sequence[Any] | None = None,
    ) -> EstimatorSpec:
        """The spec for ``mode`` (TF 2.15's v1 ``_Head.create_estimator_spec``).

        Args:
          optimizer: TRAIN: a ``tf.compat.v1.train.Optimizer``; it minimizes the loss over the
            graph's trainable variables (or ``trainable_variables``) and adds one to the
            global step.
          the rest: as ``tf_bridge.estimator.Head.create_estimator_spec``.

        Raises:
          ValueError: both optimizer and train_op_fn (as TF); as the v2 head.
        """
        if optimizer is not None:
            if train_op_fn is not None:
                raise ValueError("give optimizer or train_op_fn to the head, not both.")
            train_op_fn = _minimize_fn(optimizer, trainable_variables)
        if train_op_fn is not None:
            train_op_fn = _in_head_scope(train_op_fn, self.name or "head")
        if mode == ModeKeys.TRAIN:
            update_ops = list(update_ops or []) + tf.compat.v1.get_collection(
                tf.compat.v1.GraphKeys.UPDATE_OPS
            )
        spec = super().create_estimator_spec(  # type: ignore[misc]
            features=features,
            mode=mode,
            logits=logits,
            labels=labels,
            train_op_fn=train_op_fn,
            update_ops=update_ops or None,
            regularization_losses=regularization_losses,
        )
        if mode == ModeKeys.TRAIN and self.loss_reduction == Reduction.SUM:
            _, _, unweighted, weights = self._batch(logits, labels, features)
            total = tf.math.reduce_sum(weights * tf.ones_like(unweighted))
            with tf.compat.v1.get_default_graph().name_scope(None):
                tf.compat.v1.summary.scalar(self._summary_key(MetricKeys.LOSS_MEAN), spec.loss / total)
        return spec


def _in_head_scope(train_op_fn: Callable[[Any], Any], head_name: str) -> Callable[[Any], Any]:
    """``train_op_fn`` run in the head's name scope under the caller's (``dnn/head/``,
    ``head/``), where TF 2.15's v1 heads ran it: an optimizer's non-slot variables are
    named there (Adam's ``dnn/head/beta1_power``)."""
    graph = tf.compat.v1.get_default_graph()
    outer = graph.get_name_scope()
    scope = f"{outer}/{head_name}/" if outer else f"{head_name}/"

    def run(loss: Any) -> Any:
        with graph.name_scope(scope):
            return train_op_fn(loss)

    return run


def _minimize_fn(optimizer: Any, variables: Sequence[Any] | None) -> Callable[[Any], Any]:
    def minimize(loss: Any) -> Any:
        step = tf.compat.v1.train.get_global_step()
        if variables is None:  # the graph's trainable variables, as TF 2.15's v1 heads
            return optimizer.minimize(loss, global_step=step)
        return optimizer.minimize(loss, global_step=step, var_list=list(variables))

    return minimize


class BinaryClassHeadV1(_V1Head, BinaryClassHead):
    """TF 2.15's v1 binary head (``_BinaryLogisticHeadWithSigmoidCrossEntropyLoss``):
    ``BinaryClassHead`` with the v1 TRAIN and the v1 AUCs (module docstring)."""

    def metrics(self, regularization_losses: Sequence[tf.Tensor] | None = None) -> dict[str, Any]:
        out = super().metrics(regularization_losses)
        k, key = MetricKeys, self._summary_key
        out[key(k.AUC)] = v1_auc("ROC", k.AUC)
        out[key(k.AUC_PR)] = v1_auc("PR", k.AUC_PR)
        return out


class MultiClassHeadV1(_V1Head, MultiClassHead):
    """TF 2.15's v1 multi-class head: ``MultiClassHead`` with the v1 TRAIN."""


class RegressionHeadV1(_V1Head, RegressionHead):
    """TF 2.15's v1 regression head: ``RegressionHead`` with the v1 TRAIN."""


def binary_or_multi_class_head(
    n_classes: int, weight_column: Any, label_vocabulary: Sequence[str] | None, loss_reduction: str
) -> Any:
    """The v1 classifiers' head: binary for ``n_classes == 2``, multi-class otherwise
    (which refuses ``n_classes`` < 2). ``loss_reduction`` is the head's (``'sum'``, ...)."""
    if n_classes == 2:
        return BinaryClassHeadV1(
            weight_column=weight_column, label_vocabulary=label_vocabulary, loss_reduction=loss_reduction
        )
    return MultiClassHeadV1(
        n_classes,
        weight_column=weight_column,
        label_vocabulary=label_vocabulary,
        loss_reduction=loss_reduction,
    )


def regression_head(label_dimension: int, weight_column: Any, loss_reduction: str) -> Any:
    """The v1 regressors' head."""
    return RegressionHeadV1(
        label_dimension=label_dimension, weight_column=weight_column, loss_reduction=loss_reduction
    )


# ---- TF 2.15's private v1 head factories (``canned/head.py``), which programs and TF's own
# tests called to build a head for the v1 ``...Estimator`` classes. ``loss_reduction`` is a
# ``tf.compat.v1.losses.Reduction`` value (SUM by default), as there.

_V1_SUM = tf.compat.v1.losses.Reduction.SUM


def _v1_reduction(loss_reduction: str) -> str:
    from tf_bridge.runtime.runner.v1_forms import v1_loss_reduction

    return v1_loss_reduction(loss_reduction)


def _regression_head(
    weight_column: Any = None,
    label_dimension: int = 1,
    loss_reduction: str = _V1_SUM,
    loss_fn: Callable[..., Any] | None = None,
    inverse_link_fn: Callable[[Any], Any] | None = None,
    name: str | None = None,
) -> RegressionHeadV1:
    """TF 2.15's v1 regression head (``canned.head._regression_head``): squared error (or
    ``loss_fn``) over ``label_dimension`` values per example, predictions
    ``inverse_link_fn(logits)`` (identity by default).

    Raises:
      ValueError: ``label_dimension`` < 1, a ``loss_reduction`` that is NONE, MEAN,
        SUM_BY_NONZERO_WEIGHTS or not a v1 Reduction (see ``v1_loss_reduction``), a bad loss_fn.
    """
    return RegressionHeadV1(
        label_dimension=label_dimension,
        weight_column=weight_column,
        loss_reduction=_v1_reduction(loss_reduction),
        loss_fn=loss_fn,
        inverse_link_fn=inverse_link_fn,
        name=name,
    )


def _binary_logistic_head_with_sigmoid_cross_entropy_loss(
    weight_column: Any = None,
    thresholds: Sequence[float] | None = None,
    label_vocabulary: Sequence[str] | None = None,
    loss_reduction: str = _V1_SUM,
    loss_fn: Callable[..., Any] | None = None,
    name: str | None = None,
) -> BinaryClassHeadV1:
    """TF 2.15's v1 binary head (``canned.head._binary_logistic_head_with_sigmoid_cross_entropy_loss``):
    one logit, sigmoid cross entropy, the v1 AUCs.

    Raises:
      ValueError: a threshold outside (0, 1), a bad label_vocabulary, loss_reduction (as
        ``_regression_head``) or loss_fn.
    """
    return BinaryClassHeadV1(
        weight_column=weight_column,
        thresholds=thresholds,
        label_vocabulary=label_vocabulary,
        loss_reduction=_v1_reduction(loss_reduction),
        loss_fn=loss_fn,
        name=name,
    )


def _multi_class_head_with_softmax_cross_entropy_loss(
    n_classes: int,
    weight_column: Any = None,
    label_vocabulary: Sequence[str] | None = None,
    loss_reduction: str = _V1_SUM,
    loss_fn: Callable[..., Any] | None = None,
    name: str | None = None,
) -> MultiClassHeadV1:
    """TF 2.15's v1 multi-class head (``canned.head._multi_class_head_with_softmax_cross_entropy_loss``):
    ``n_classes`` logits, softmax cross entropy.

    Raises:
      ValueError: ``n_classes`` < 3, a bad label_vocabulary, loss_reduction (as
        ``_regression_head``) or loss_fn.
    """
    return MultiClassHeadV1(
        n_classes,
        weight_column=weight_column,
        label_vocabulary=label_vocabulary,
        loss_reduction=_v1_reduction(loss_reduction),
        loss_fn=loss_fn,
        name=name,
    )


def _binary_logistic_or_multi_class_head(
    n_classes: int, weight_column: Any, label_vocabulary: Sequence[str] | None, loss_reduction: str
) -> Any:
    """TF 2.15's v1 classifiers' head chooser (``canned.head._binary_logistic_or_multi_class_head``):
    the binary head for ``n_classes == 2``, the multi-class one otherwise.

    Raises:
      ValueError: ``n_classes`` < 2, as the heads above.
    """
    return binary_or_multi_class_head(
        n_classes, weight_column, label_vocabulary, _v1_reduction(loss_reduction)
    )
