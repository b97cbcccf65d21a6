"""The contract layer: ModeKeys, the three specs, Scaffold and the hook protocol."""

from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.estimator_spec import EstimatorSpec
from jaxspec.spec.hooks import Session, SessionRunArgs, SessionRunContext, SessionRunHook, SessionRunValues
from jaxspec.spec.npu_estimator_spec import NPUEstimatorSpec
from jaxspec.spec.scaffold import Scaffold
from jaxspec.spec.tpu_estimator_spec import TPUEstimatorSpec

__all__ = [
    "EstimatorSpec",
    "ModeKeys",
    "NPUEstimatorSpec",
    "Scaffold",
    "Session",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunHook",
    "SessionRunValues",
    "TPUEstimatorSpec",
]
