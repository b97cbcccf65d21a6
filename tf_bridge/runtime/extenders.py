"""``tf.estimator.add_metrics`` for tf_bridge's Estimators (canned ones included)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.metric_fn import eval_metrics_with, verify_metric_fn_args
from jaxspec.spec.fn_types import PyTree
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator
from tf_bridge.runtime.spec import EstimatorSpec


def add_metrics(estimator: Estimator, metric_fn: Callable[..., Mapping[str, object]]) -> Estimator:
    """A new ``tf_bridge.Estimator`` whose eval metrics are ``estimator``'s and
    ``metric_fn``'s (``tf.estimator.add_metrics``, TF 2.15 behaviour).

    metric_fn takes any of ``features``, ``labels``, ``predictions`` (the EVAL spec's
    tensors) and ``config`` (the RunConfig) by name and returns a dict of metrics keyed
    by name: ``(value, update_op)`` pairs or graph-mode Keras metrics (``tf_keras``)
    whose ``update_state`` it has called. They join the spec's ``eval_metric_ops``; a
    name already there is replaced. The new Estimator runs ``estimator.model_fn`` (its
    params bound) with estimator's model_dir, config and warm start; TRAIN and PREDICT
    are unchanged.

    Args:
      estimator: a tf_bridge Estimator (a canned estimator, a TPUEstimator, ...).
      metric_fn: the function described above.

    Returns:
      A new ``tf_bridge.Estimator``.

    Raises:
      ValueError: metric_fn declares an argument other than the four above (named).
      TypeError: when evaluating, metric_fn returned something other than a dict.
    """
    verify_metric_fn_args(metric_fn)

    def model_fn(features: PyTree, labels: PyTree, mode: str, config: RunConfig) -> EstimatorSpec:
        spec = estimator.model_fn(features, labels, mode, config)
        if mode != ModeKeys.EVAL:
            return spec
        metrics = eval_metrics_with(
            metric_fn,
            spec.eval_metric_ops,
            features=features,
            labels=labels,
            predictions=spec.predictions,
            config=config,
        )
        return spec._replace(eval_metric_ops=metrics)

    return Estimator(
        model_fn=model_fn,
        model_dir=estimator.model_dir,
        config=estimator.config,
        warm_start_from=estimator._warm_start_settings,
    )
