"""``tf.compat.v1.estimator``'s namespace on tf_bridge: ``tf_bridge.estimator``'s names, with
TF 2.15's v1 classes where it had two (``tf_bridge.runtime.runner.v1_forms``):
``Estimator`` and the canned estimators have ``export_savedmodel``, and the canned
estimators default to ``loss_reduction=SUM``. ``tf_bridge.install()`` (and ``python -m
tf_bridge``) make ``tf.compat.v1.estimator`` this module. Every other name is
``tf_bridge.estimator``'s, looked up there when first read.
"""

from typing import Any

import tf_bridge.estimator as _v2
from tf_bridge.estimator import experimental as experimental
from tf_bridge.estimator import export as export
from tf_bridge.estimator import tpu as tpu
from tf_bridge.runtime.canned.v1 import BaselineClassifier as BaselineClassifier
from tf_bridge.runtime.canned.v1 import BaselineEstimator as BaselineEstimator
from tf_bridge.runtime.canned.v1 import BaselineRegressor as BaselineRegressor
from tf_bridge.runtime.canned.v1 import DNNClassifier as DNNClassifier
from tf_bridge.runtime.canned.v1 import DNNEstimator as DNNEstimator
from tf_bridge.runtime.canned.v1 import DNNLinearCombinedClassifier as DNNLinearCombinedClassifier
from tf_bridge.runtime.canned.v1 import DNNLinearCombinedEstimator as DNNLinearCombinedEstimator
from tf_bridge.runtime.canned.v1 import DNNLinearCombinedRegressor as DNNLinearCombinedRegressor
from tf_bridge.runtime.canned.v1 import DNNRegressor as DNNRegressor
from tf_bridge.runtime.canned.v1 import LinearClassifier as LinearClassifier
from tf_bridge.runtime.canned.v1 import LinearEstimator as LinearEstimator
from tf_bridge.runtime.canned.v1 import LinearRegressor as LinearRegressor
from tf_bridge.runtime.runner.v1_forms import Estimator as Estimator

_V1 = [
    "BaselineClassifier",
    "BaselineEstimator",
    "BaselineRegressor",
    "DNNClassifier",
    "DNNEstimator",
    "DNNLinearCombinedClassifier",
    "DNNLinearCombinedEstimator",
    "DNNLinearCombinedRegressor",
    "DNNRegressor",
    "Estimator",
    "LinearClassifier",
    "LinearEstimator",
    "LinearRegressor",
]


def __getattr__(name: str) -> Any:
    """The names this module does not redefine: ``tf_bridge.estimator``'s."""
    return getattr(_v2, name)


def __dir__() -> list[str]:
    return sorted(set(_v2.__all__) | set(_V1))


__all__ = sorted(set(_v2.__all__) | set(_V1))
