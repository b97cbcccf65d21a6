"""NPUEstimatorSpec: Ascend's ``npu_bridge`` EstimatorSpec with a ``host_call``."""

from __future__ import annotations

from typing import Any

from jaxspec.rules.spec_classes import NPUEstimatorSpecBase
from jaxspec.spec._pytree import register_spec_pytree
from jaxspec.spec.estimator_spec import EstimatorSpec


class NPUEstimatorSpec(NPUEstimatorSpecBase, EstimatorSpec):  # type: ignore[misc]  # one namedtuple, twice
    """An EstimatorSpec plus ``host_call``, as Ascend's ``NPUEstimatorSpec``.

    ``host_call`` is ``(host_fn, tensors)``, validated as the adapter does (the rules of
    TPUEstimatorSpec's host_call, with the same exception types) but with no rank rule:
    the adapter sends each tensor as it is. It runs once per step in TRAIN and EVAL, on
    the host, with that step's tensors as numpy arrays, in step order; it is ignored in
    PREDICT. Differences from the adapter: ``_replace`` keeps ``host_call`` (the
    adapter's ``_replace`` returns a plain EstimatorSpec and loses it) and returns an
    NPUEstimatorSpec; ``host_call`` is also readable as ``spec.host_call`` (the adapter
    only has ``spec._host_call``). Immutable, like the other specs.

    Args:
      mode ... prediction_hooks: as EstimatorSpec (same order, so positional calls
        written for the adapter work).
      host_call: ``(host_fn, tensors)``, tensors a list/tuple (``host_fn(*tensors)``)
        or a dict (``host_fn(**tensors)``) of arrays.

    Raises:
      ValueError: host_call is not a tuple/list of two, or its tensors are not a list,
        tuple or dict; or as EstimatorSpec.
      TypeError: host_call[0] is not callable; or as EstimatorSpec.
      RuntimeError: the number of tensors does not match host_fn's arguments.
    """

    def _extra_fields(self) -> dict[str, Any]:
        return {"host_call": self.host_call}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), tuple(self), self.host_call))


def _rebuild(cls: type[NPUEstimatorSpec], values: tuple[Any, ...], host_call: Any) -> NPUEstimatorSpec:
    """Rebuild an NPUEstimatorSpec without validation (pickling, pytree unflattening)."""
    spec: NPUEstimatorSpec = tuple.__new__(cls, values)
    object.__setattr__(spec, "_host_call", host_call)
    return spec


def _build(cls: type[NPUEstimatorSpec], fields: dict[str, Any]) -> NPUEstimatorSpec:
    host_call = fields.pop("host_call")
    return _rebuild(cls, tuple(fields[f] for f in cls._fields), host_call)


register_spec_pytree(
    NPUEstimatorSpec, ("predictions", "loss", "train_op", "eval_metric_ops"), ("host_call",), build=_build
)
