"""``verify_model_fn_args``: tf.estimator's check of a model_fn's declared arguments, at
Estimator construction (``Estimator._verify_model_fn_args`` in TF 2.15), for the JAX
Estimators and tf_bridge's."""

from __future__ import annotations

import logging

from jaxspec._fn_args import fn_arg_names


def verify_model_fn_args(
    model_fn: object, params: object, allowed: tuple[str, ...], log: logging.Logger
) -> tuple[str, ...]:
    """Check model_fn's declared arguments against ``allowed`` and ``params``.

    ``self`` of a bound method is not counted; a ``functools.partial``'s bound arguments
    are not either; ``*args``/``**kwargs`` are ignored. A model_fn that takes ``params``
    while ``params`` is None gets a warning on ``log`` (TF 2.15 logs one too).

    Args:
      model_fn: the Estimator's model_fn.
      params: the Estimator's ``params`` (None when not given).
      allowed: the argument names the Estimator passes (``features`` among them).
      log: the side's logger (``jaxspec`` or ``tf_bridge``).

    Returns:
      The argument names model_fn declares.

    Raises:
      ValueError: model_fn is not callable; it has no ``features`` argument; ``params``
        is given (not None) but model_fn has no ``params`` argument; or it declares
        arguments outside ``allowed`` (all of them are named).
    """
    if not callable(model_fn):
        raise ValueError(f"model_fn must be callable, got {type(model_fn).__name__}.")
    names = fn_arg_names(model_fn)
    if "features" not in names:
        raise ValueError(f"model_fn must take an argument named 'features'; it takes {names}.")
    if params is not None and "params" not in names:
        raise ValueError(
            f"params were given to the Estimator, but model_fn takes no 'params' argument (it takes {names})."
        )
    if params is None and "params" in names:  # tf.estimator logs the same warning
        log.warning(
            "model_fn takes params, but no params were given to the Estimator: model_fn gets {} (on "
            "TPUEstimator only its batch_size and use_tpu). Pass params={} if none are meant."
        )
    unexpected = [n for n in names if n not in allowed and n != "self"]
    if unexpected:
        raise ValueError(
            f"model_fn takes arguments {unexpected} that no Estimator passes; allowed names are {allowed}."
        )
    return names
