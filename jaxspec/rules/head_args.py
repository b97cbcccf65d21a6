"""The heads' rules, for jaxspec's heads (JAX arrays) and tf_bridge's (TF tensors).

- ``HeadInterface``: the interface of ``tf.estimator.Head`` both sides' ``Head`` classes
  implement;
- ``HeadArgs``: the constructor arguments every concrete head takes, checked as TF 2.15's
  heads check them, and the properties they give;
- the static shape rules of logits, labels, weights and ``loss_fn`` outputs, on shapes as
  tuples (a dimension None where it is unknown until run time; the whole shape None for
  an unknown rank): each side checks what is known here, with one wording, and what is
  not known its own way (TF: an assertion in the graph; JAX: shapes are always known).

Wrong arguments raise the exception types TF raises (ValueError, TypeError), naming the
argument.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, cast

from jaxspec.rules.head_keys import Reduction

Shape = tuple[int | None, ...] | None

#: The reductions a head takes (tf.losses.Reduction's values; NONE refused, as in TF).
HEAD_REDUCTIONS = (Reduction.AUTO, Reduction.SUM, Reduction.SUM_OVER_BATCH_SIZE)
#: What a head's ``loss_fn`` may declare (it must declare ``labels`` and ``logits``).
LOSS_FN_ARGS = ("labels", "logits", "features", "loss_reduction")
#: tf.estimator's head classes, by the names both sides export.
HEAD_NAMES = (
    "BinaryClassHead",
    "Head",
    "LogisticRegressionHead",
    "MultiClassHead",
    "MultiHead",
    "MultiLabelHead",
    "PoissonRegressionHead",
    "RegressionHead",
)


# A side's kinds: what a head takes (JAX's ArrayLike, TF's TensorLike), what it gives
# (jax.Array, tf.Tensor) and its metric class (a jaxspec metric state, a tf_keras metric).
ArrayIn = TypeVar("ArrayIn")
ArrayOut = TypeVar("ArrayOut")
MetricT = TypeVar("MetricT")


class HeadInterface(abc.ABC, Generic[ArrayIn, ArrayOut, MetricT]):
    """The interface of a head (``tf.estimator.Head``): turns logits (and labels) into
    predictions, a loss and eval metrics. Each side's ``Head`` adds the spec builders
    (``create_estimator_spec``) and names its kinds: ``HeadInterface[PyTree, Array,
    Metric]`` in jaxspec (logits and labels: an array, or a MultiHead's dict of them),
    ``HeadInterface[TensorLike, tf.Tensor, KerasMetric]`` in tf_bridge."""

    @property
    @abc.abstractmethod
    def name(self) -> str | None:
        """The head's name, suffixed to its metric keys (``'accuracy/<name>'``); or None."""

    @property
    @abc.abstractmethod
    def logits_dimension(self) -> int:
        """The size of the logits' last dimension."""

    @property
    @abc.abstractmethod
    def loss_reduction(self) -> str:
        """How the per-example losses become the training loss (a ``Reduction`` value)."""

    @abc.abstractmethod
    def loss(
        self,
        labels: ArrayIn,
        logits: ArrayIn,
        features: object = None,
        mode: str | None = None,
        regularization_losses: Sequence[ArrayIn] | None = None,
    ) -> ArrayOut:
        """The scalar training loss (regularization included)."""

    @abc.abstractmethod
    def predictions(self, logits: ArrayIn, keys: Sequence[str] | None = None) -> dict[Any, ArrayOut]:
        """The predictions dict for ``logits`` (all keys, or ``keys``)."""

    @abc.abstractmethod
    def metrics(self, regularization_losses: Sequence[ArrayIn] | None = None) -> dict[str, MetricT]:
        """The fresh (not updated) eval metrics by metric key."""

    @abc.abstractmethod
    def update_metrics(
        self,
        eval_metrics: dict[str, MetricT],
        features: object,
        logits: ArrayIn,
        labels: ArrayIn,
        mode: str | None = None,
        regularization_losses: Sequence[ArrayIn] | None = None,
    ) -> dict[str, MetricT]:
        """``eval_metrics`` updated with one batch."""

    def _summary_key(self, key: str) -> str:
        return f"{key}/{self.name}" if self.name else key


class HeadArgs:
    """The arguments every concrete head takes, checked once for both sides (a mixin, put
    before the side's ``Head``): ``weight_column``, ``loss_reduction``, ``loss_fn``,
    ``name``, and where the head has them ``label_vocabulary`` and ``thresholds``."""

    _weight_column: Any  # the side's: a feature key (str), or TF's numeric column
    _loss_fn: Callable[..., Any] | None
    _label_vocabulary: Sequence[str] | None
    _thresholds: tuple[float, ...]

    def _set_head_args(
        self,
        logits_dimension: int,
        weight_column: object,
        loss_reduction: str,
        loss_fn: Callable[..., Any] | None,
        name: str | None,
        **more: Any,
    ) -> None:
        """Check and keep the common arguments; ``more`` may hold ``label_vocabulary``
        (with ``n_classes``, to check its length) and ``thresholds``.

        Raises:
          ValueError: a bad loss_reduction, loss_fn, label_vocabulary or threshold.
        """
        self._logits_dimension = logits_dimension
        self._weight_column = weight_column
        self._loss_reduction = check_loss_reduction(loss_reduction)
        if loss_fn:
            check_loss_fn(loss_fn)
        self._loss_fn = loss_fn
        self._label_vocabulary = check_vocabulary(more.get("label_vocabulary"), more.get("n_classes"))
        self._thresholds = check_thresholds(more.get("thresholds"))
        self._name = name

    @property
    def name(self) -> str | None:
        """The head's name (metric key suffix; required inside a MultiHead), or None."""
        return self._name

    @property
    def logits_dimension(self) -> int:
        """The size of the logits' last dimension."""
        return self._logits_dimension

    @property
    def loss_reduction(self) -> str:
        """The loss reduction (a ``Reduction`` value)."""
        return self._loss_reduction


def check_loss_reduction(loss_reduction: str) -> str:
    """ValueError unless ``loss_reduction`` is AUTO, SUM or SUM_OVER_BATCH_SIZE."""
    if loss_reduction not in HEAD_REDUCTIONS:
        raise ValueError(
            f"loss_reduction must be one of {list(HEAD_REDUCTIONS)} (tf.losses.Reduction, NONE excluded), "
            f"got {loss_reduction!r}."
        )
    return loss_reduction


def fn_args(fn: Callable[..., object]) -> tuple[str, ...]:
    """The names ``fn`` takes by position or keyword (``self`` of a bound method not counted)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds)


def check_loss_fn(loss_fn: Callable[..., object]) -> None:
    """ValueError unless ``loss_fn`` takes ``labels`` and ``logits`` and, besides them,
    only ``features`` and ``loss_reduction`` (as TF)."""
    names = fn_args(loss_fn)
    for required in ("labels", "logits"):
        if required not in names:
            raise ValueError(f"loss_fn must take an argument {required!r}; it takes {list(names)}.")
    extra = [n for n in names if n not in LOSS_FN_ARGS]
    if extra:
        raise ValueError(
            f"loss_fn takes arguments a head does not pass: {extra} (allowed: {list(LOSS_FN_ARGS)})."
        )


def check_vocabulary(
    label_vocabulary: Sequence[str] | None, n_classes: int | None = None
) -> Sequence[str] | None:
    """A head's ``label_vocabulary``: None, or a list or tuple (of ``n_classes`` items
    when ``n_classes`` is given).

    Raises:
      ValueError: another type (a set, a dict, a str, a tensor), naming it; or another
        number of items than n_classes.
    """
    if label_vocabulary is None:
        return None
    if not isinstance(label_vocabulary, (list, tuple)):
        raise ValueError(
            f"label_vocabulary must be a list or a tuple of str, got {type(label_vocabulary).__name__}."
        )
    if n_classes is not None and len(label_vocabulary) != n_classes:
        raise ValueError(
            f"label_vocabulary must have n_classes={n_classes} items, got {len(label_vocabulary)}: "
            f"{list(label_vocabulary)}."
        )
    return label_vocabulary


def check_thresholds(thresholds: Iterable[float] | None) -> tuple[float, ...]:
    """A head's ``thresholds`` (an iterable of floats, or None) as a tuple; ``()`` for
    None or empty.

    Raises:
      ValueError: a threshold not strictly between 0 and 1 (the thresholds are listed).
    """
    checked = tuple(thresholds) if thresholds else ()
    if any(not 0.0 < t < 1.0 for t in checked):
        raise ValueError(f"thresholds must lie strictly between 0 and 1, got {list(checked)}.")
    return checked


def check_n_classes(n_classes: object, minimum: int, head: str) -> int:
    """``n_classes`` of a classification head: an int >= ``minimum``.

    Raises:
      ValueError: None, not an int, or smaller (TF raises ValueError for each).
    """
    if (
        n_classes is None
        or isinstance(n_classes, bool)
        or not isinstance(n_classes, int)
        or n_classes < minimum
    ):
        hint = " (BinaryClassHead for 2 classes)" if head == "MultiClassHead" else ""
        raise ValueError(f"n_classes must be an int >= {minimum} for a {head}{hint}, got {n_classes!r}.")
    return n_classes


def check_label_dimension(label_dimension: int) -> int:
    """A regression head's ``label_dimension``: ValueError unless >= 1."""
    if label_dimension < 1:
        raise ValueError(f"label_dimension must be >= 1, got {label_dimension}.")
    return label_dimension


def class_ids_for_metrics(
    classes: Sequence[int] | Sequence[str] | None, n_classes: int, label_vocabulary: Sequence[str] | None
) -> tuple[int, ...]:
    """A MultiLabelHead's ``classes_for_class_based_metrics`` as class ids: ids are kept,
    names (str) are looked up in ``label_vocabulary``.

    Raises:
      ValueError: names without a vocabulary or not in it; ids outside [0, n_classes).
    """
    if not classes:
        return ()
    given: tuple[int | str, ...] = tuple(classes)
    if isinstance(given[0], str):
        names = cast("tuple[str, ...]", given)
        if not label_vocabulary:
            raise ValueError(
                "classes_for_class_based_metrics names classes by string: give label_vocabulary too."
            )
        missing = [c for c in names if c not in label_vocabulary]
        if missing:
            raise ValueError(
                f"classes_for_class_based_metrics: {missing} not in label_vocabulary {list(label_vocabulary)}."
            )
        return tuple(list(label_vocabulary).index(c) for c in names)
    ids = cast("tuple[int, ...]", given)
    bad = [c for c in ids if not 0 <= c < n_classes]
    if bad:
        raise ValueError(
            f"classes_for_class_based_metrics must be class ids in [0, {n_classes - 1}], got {bad}."
        )
    return ids


def check_multi_head_args(
    heads: Sequence[HeadInterface], head_weights: Sequence[float] | None
) -> tuple[float, ...]:
    """A MultiHead's ``heads`` and ``head_weights``; the weights as a tuple (``()`` for None).

    Raises:
      ValueError: no heads, a head without a name, or head_weights of another length.
    """
    if not heads:
        raise ValueError(f"heads must name at least one head, got {heads!r}.")
    if head_weights and len(head_weights) != len(heads):
        raise ValueError(
            f"head_weights must have one weight per head: {len(heads)} heads, {len(head_weights)} weights."
        )
    unnamed = [i for i, h in enumerate(heads) if h.name is None]
    if unnamed:
        raise ValueError(f"every head of a MultiHead needs a name; heads {unnamed} have none.")
    return tuple(head_weights) if head_weights else ()


def common_loss_reduction(heads: Sequence[HeadInterface]) -> str:
    """The heads' one loss reduction (a MultiHead's); ValueError if they differ."""
    reductions = [h.loss_reduction for h in heads]
    if len(set(reductions)) > 1:
        raise ValueError(f"the heads of a MultiHead must share one loss_reduction, got {reductions}.")
    return reductions[0]


# -- static shapes -----------------------------------------------------------------------
def _known(shape: Shape) -> bool:
    return shape is not None and None not in shape


def check_logits_shape(shape: Shape, logits_dimension: int) -> bool:
    """Logits must be ``[D0, ..., DN, logits_dimension]``, rank >= 2; True when the rank
    and the last dimension are known (checked), False when the rest is for run time.

    Raises:
      ValueError: a known rank < 2 or a known last dimension other than logits_dimension.
    """
    if shape is None:
        return False
    if len(shape) < 2:
        raise ValueError(
            f"logits must have rank >= 2, [D0, ..., DN, {logits_dimension}]; got rank {len(shape)}, shape {shape}."
        )
    if shape[-1] is None:
        return False
    if shape[-1] != logits_dimension:
        raise ValueError(
            f"logits shape must be [D0, ..., DN, {logits_dimension}] (the head's logits_dimension), got {shape}."
        )
    return True


def check_labels_present(labels: object, expected_dim: int, sparse: bool) -> None:
    """A head needs dense labels in TRAIN and EVAL.

    Raises:
      ValueError: labels is None, or sparse (``sparse`` True).
    """
    if labels is None:
        raise ValueError(
            "labels is required, got None: a head needs labels in TRAIN and EVAL (does input_fn return "
            "(features, labels)?)."
        )
    if sparse:
        raise ValueError(
            f"labels must be a dense array [D0, ..., DN, {expected_dim}], not a sparse one (densify it first)."
        )


def labels_need_last_axis(labels_shape: Shape, logits_shape: Shape) -> bool:
    """tf.estimator's rule: labels one rank below logits get a last dimension of 1."""
    return (
        labels_shape is not None and logits_shape is not None and len(labels_shape) == len(logits_shape) - 1
    )


def check_labels_rank_and_last_dim(shape: Shape, expected_dim: int) -> None:
    """What a labels shape alone decides: rank >= 2 and, when known, the last dimension
    ``expected_dim`` (what TF 2.15's heads refused while building a graph).

    Raises:
      ValueError: a known rank < 2 or a known last dimension other than expected_dim.
    """
    if shape is not None and len(shape) < 2:
        raise ValueError(f"labels must have rank >= 2, got rank {len(shape)}, shape {shape}.")
    if shape is not None and shape[-1] is not None and shape[-1] != expected_dim:
        raise ValueError(
            f"labels shape must be [D0, ..., DN, {expected_dim}] (check n_classes / label_dimension), "
            f"got {shape}."
        )


def check_labels_shape(shape: Shape, logits_shape: Shape, expected_dim: int) -> bool:
    """Labels (after ``labels_need_last_axis``) must be ``logits_shape[:-1] +
    (expected_dim,)``; True when both shapes are fully known (checked).

    Raises:
      ValueError: a known rank < 2, a known last dimension other than expected_dim, or
        (both known) other dimensions than logits' (both shapes named).
    """
    check_labels_rank_and_last_dim(shape, expected_dim)
    expected = None if logits_shape is None else tuple(logits_shape[:-1]) + (expected_dim,)
    if not (_known(shape) and _known(expected)):
        return False
    if tuple(shape) != expected:  # type: ignore[arg-type]
        raise ValueError(f"labels shape must be {expected} to match logits {logits_shape}, got {shape}.")
    return True


def check_weights_shape(shape: Shape, logits_shape: Shape, per_logit: bool) -> bool:
    """Example weights (after ``labels_need_last_axis``, which applies to them too) must
    be ``[D0, ..., DN, 1]``, or logits' shape with ``per_logit``; True when both shapes
    are fully known (checked).

    Raises:
      ValueError: (both known) another shape (both shapes named).
    """
    if not (_known(shape) and _known(logits_shape)):
        return False
    shape, logits_shape = tuple(shape), tuple(logits_shape)  # type: ignore[arg-type]
    if shape != logits_shape[:-1] + (1,) and not (per_logit and shape == logits_shape):
        allowed = "[D0, ..., DN] or [D0, ..., DN, 1]" + (", or logits' shape" if per_logit else "")
        raise ValueError(f"weights shape must be {allowed} for logits {logits_shape}, got {shape}.")
    return True


def check_loss_shape(shape: Shape, logits_shape: Shape, expected_dim: int) -> bool:
    """``loss_fn``'s output must be ``logits_shape[:-1] + (expected_dim,)``; True when both
    are fully known (checked).

    Raises:
      ValueError: (both known) another shape.
    """
    expected = None if logits_shape is None else tuple(logits_shape[:-1]) + (expected_dim,)
    if not (_known(shape) and _known(expected)):
        return False
    if tuple(shape) != expected:  # type: ignore[arg-type]
        raise ValueError(
            f"loss_fn must return an array of shape [D0, ..., DN, {expected_dim}]: expected {expected} for logits "
            f"{logits_shape}, got {shape}."
        )
    return True


def check_prediction_keys(keys: Sequence[str], valid: Sequence[str]) -> None:
    """ValueError for a requested prediction key the head does not have."""
    for key in keys:
        if key not in valid:
            raise ValueError(f"prediction key {key!r} is not one of this head's keys {list(valid)}.")
