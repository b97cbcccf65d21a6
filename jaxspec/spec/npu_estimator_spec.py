"""NPUEstimatorSpec: Ascend's ``npu_bridge`` EstimatorSpec with a ``host_call``."""

from __future__ import annotations

from typing import Any

from jaxspec.spec.estimator_spec import EstimatorSpec
from jaxspec.spec.host_call import validate_fn_tensors_pair


class NPUEstimatorSpec(EstimatorSpec):
    """An EstimatorSpec plus ``host_call``, as Ascend's ``NPUEstimatorSpec``.

    ``host_call`` is ``(host_fn, tensors)``, validated like TPUEstimatorSpec's but with
    no rank rule (each replica's tensors are not concatenated on NPU); it runs once per
    step in TRAIN and EVAL and is ignored in PREDICT. Unlike the adapter, whose
    ``_replace`` drops ``host_call``, ``_replace`` here keeps it.

    Raises:
      As EstimatorSpec, and as TPUEstimatorSpec for a malformed ``host_call``.
    """

    def __new__(cls, mode: str, *args: Any, host_call: Any = None, **kwargs: Any) -> NPUEstimatorSpec:
        if host_call is not None:
            host_call = validate_fn_tensors_pair(host_call, "host_call", cls.__name__)
        spec = super().__new__(cls, mode, *args, **kwargs)
        spec.__dict__["host_call"] = host_call
        return spec

    def _replace(self, **kwds: Any) -> NPUEstimatorSpec:
        """Return a copy with fields replaced; keeps ``host_call`` unless replaced."""
        kwds.setdefault("host_call", self.__dict__.get("host_call"))
        if "mode" in kwds and kwds["mode"] != self.mode:
            raise ValueError(f"{type(self).__name__}: mode is fixed once the spec is built.")
        fields = self._asdict()
        fields.update(kwds)
        return type(self)(**fields)
