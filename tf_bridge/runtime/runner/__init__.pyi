from .estimator import Estimator as Estimator
from .estimator import WarmStartSettings as WarmStartSettings
from .tpu_estimator import TPUEstimator as TPUEstimator
