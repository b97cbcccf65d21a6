"""``add_metrics``' rules (``tf.estimator.add_metrics``, TF 2.15), for jaxspec's and
tf_bridge's: which arguments a metric_fn may declare, how it is called, and how its
metrics join the spec's."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from jaxspec._fn_args import call_with_declared, fn_arg_names

#: The arguments a metric_fn may take, by name and in any order (all optional).
METRIC_FN_ARGS = ("features", "labels", "predictions", "config")


def verify_metric_fn_args(metric_fn: Callable[..., object]) -> tuple[str, ...]:
    """The names metric_fn declares, checked against ``METRIC_FN_ARGS``.

    Raises:
      ValueError: metric_fn declares other arguments (all of them are named).
    """
    names = fn_arg_names(metric_fn)
    unknown = [name for name in names if name not in METRIC_FN_ARGS]
    if unknown:
        raise ValueError(
            f"metric_fn {metric_fn!r} takes arguments {unknown}; a metric_fn may only take "
            f"{list(METRIC_FN_ARGS)} (by name, in any order)."
        )
    return names


def eval_metrics_with(
    metric_fn: Callable[..., object], existing: Mapping[str, object] | None, **available: object
) -> dict[str, object]:
    """The spec's eval metrics and metric_fn's, called with the ``available`` arguments
    it declares: the union, metric_fn's winning where a name is in both.

    Raises:
      TypeError: metric_fn returned something other than a dict.
    """
    added = call_with_declared(metric_fn, available)
    if not isinstance(added, Mapping):
        raise TypeError(
            f"metric_fn must return a dict of metrics keyed by name; it returned a {type(added).__name__}."
        )
    merged = dict(existing or {})
    merged.update(added)
    return merged
