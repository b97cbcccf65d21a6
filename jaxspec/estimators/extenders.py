"""``jaxspec.add_metrics``: an Estimator with more eval metrics (``tf.estimator.add_metrics``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from jaxspec._fn_args import fn_arg_names
from jaxspec.estimators._model_fn import ModelFnSpec
from jaxspec.estimators.estimator import Estimator
from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.metric_fn import eval_metrics_with, verify_metric_fn_args

# What the new model_fn always takes, and what it takes when the original model_fn does
# (so that, as there, ``state`` still needs an init_fn and ``params`` params).
_ALWAYS = ("features", "labels", "mode", "config")
_IF_DECLARED = ("params", "state", "rng", "global_step")


def add_metrics(estimator: Estimator, metric_fn: Callable[..., Mapping[str, object]]) -> Estimator:
    """A new Estimator whose eval metrics are ``estimator``'s and ``metric_fn``'s, as
    ``tf.estimator.add_metrics``.

    metric_fn takes any of ``features``, ``labels``, ``predictions`` (the EVAL spec's)
    and ``config`` (the RunConfig) by name, and returns a dict of metrics as
    ``eval_metric_ops`` holds them (``jaxspec.metrics`` states, Keras-style metrics or
    ``(value, update)`` pairs), keyed by name; a name the Estimator already reports is
    replaced by metric_fn's. It is called inside the compiled EVAL step, on the batch's
    arrays (padding rows of a short batch masked as for model_fn's metrics). The new
    Estimator shares the model_dir (its checkpoints), config, params, init_fn, partition
    rules and warm start of ``estimator``; TRAIN and PREDICT are unchanged. As in TF it
    is a plain ``Estimator``: a TPUEstimator's model_fn returns TPUEstimatorSpecs, which
    a plain Estimator refuses (ValueError when the model_fn is traced).

    Args:
      estimator: a jaxspec Estimator.
      metric_fn: the function described above.

    Returns:
      A new ``jaxspec.Estimator``.

    Raises:
      ValueError: metric_fn declares an argument other than the four above (named).
      TypeError: estimator is not a jaxspec Estimator; when evaluating, metric_fn
        returned something other than a dict.
    """
    if not isinstance(estimator, Estimator):
        raise TypeError(f"estimator must be a jaxspec Estimator, got {type(estimator).__name__}.")
    verify_metric_fn_args(metric_fn)
    original = estimator.model_fn
    declared = fn_arg_names(getattr(original, "user_model_fn", original))
    names = _ALWAYS + tuple(n for n in _IF_DECLARED if n in declared)

    def model_fn(**kwargs: Any) -> ModelFnSpec:
        args = {name: kwargs.get(name) for name in _ALWAYS + _IF_DECLARED}
        spec = original(**args)
        if kwargs["mode"] != ModeKeys.EVAL:
            return spec
        metrics = eval_metrics_with(
            metric_fn,
            spec.eval_metric_ops,
            features=args["features"],
            labels=args["labels"],
            predictions=spec.predictions,
            config=args["config"],
        )
        return spec._replace(eval_metric_ops=metrics)

    model_fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    )
    return Estimator(
        model_fn=model_fn,
        model_dir=estimator.model_dir,
        config=estimator.config,
        params=estimator.params if "params" in names else None,
        warm_start_from=estimator._warm_start_settings,
        init_fn=estimator._init_fn,
        partition_rules=estimator._partition_rules,
    )
