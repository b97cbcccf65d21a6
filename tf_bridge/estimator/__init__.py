"""``tf.estimator``'s namespace on tf_bridge: ``import tf_bridge.estimator as tf_estimator``
and code written against ``tf.estimator`` (TF <= 2.15) finds its names where it looked for
them. Each name is tf_bridge's implementation, or TensorFlow's own where
``tf.compat.v1.train`` still has it (the session hooks and CheckpointSaverListener).
"""

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from tf_bridge.estimator import experimental, export, inputs, tpu
from tf_bridge.runtime.canned import (
    BaselineClassifier,
    BaselineEstimator,
    BaselineRegressor,
    DNNClassifier,
    DNNEstimator,
    DNNLinearCombinedClassifier,
    DNNLinearCombinedEstimator,
    DNNLinearCombinedRegressor,
    DNNRegressor,
    LinearClassifier,
    LinearEstimator,
    LinearRegressor,
)
from tf_bridge.runtime.canned.parsing_utils import classifier_parse_example_spec, regressor_parse_example_spec
from tf_bridge.runtime.extenders import add_metrics
from tf_bridge.runtime.heads import (
    BinaryClassHead,
    Head,
    LogisticRegressionHead,
    MultiClassHead,
    MultiHead,
    MultiLabelHead,
    PoissonRegressionHead,
    RegressionHead,
)
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner.estimator import Estimator, WarmStartSettings
from tf_bridge.runtime.spec import EstimatorSpec
from tf_bridge.runtime.training import (
    BestExporter,
    EvalSpec,
    Exporter,
    FinalExporter,
    LatestExporter,
    TrainSpec,
    train_and_evaluate,
)

_train = tf.compat.v1.train
CheckpointSaverHook = _train.CheckpointSaverHook
CheckpointSaverListener = _train.CheckpointSaverListener
FeedFnHook = _train.FeedFnHook
FinalOpsHook = _train.FinalOpsHook
GlobalStepWaiterHook = _train.GlobalStepWaiterHook
LoggingTensorHook = _train.LoggingTensorHook
NanLossDuringTrainingError = _train.NanLossDuringTrainingError
NanTensorHook = _train.NanTensorHook
ProfilerHook = _train.ProfilerHook
SecondOrStepTimer = _train.SecondOrStepTimer
SessionRunArgs = _train.SessionRunArgs
SessionRunContext = _train.SessionRunContext
SessionRunHook = _train.SessionRunHook
SessionRunValues = _train.SessionRunValues
StepCounterHook = _train.StepCounterHook
StopAtStepHook = _train.StopAtStepHook
SummarySaverHook = _train.SummarySaverHook
VocabInfo = _train.VocabInfo

__all__ = [
    "BaselineClassifier",
    "BaselineEstimator",
    "BaselineRegressor",
    "BestExporter",
    "BinaryClassHead",
    "Head",
    "LogisticRegressionHead",
    "MultiClassHead",
    "MultiHead",
    "MultiLabelHead",
    "PoissonRegressionHead",
    "RegressionHead",
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "DNNClassifier",
    "DNNEstimator",
    "DNNLinearCombinedClassifier",
    "DNNLinearCombinedEstimator",
    "DNNLinearCombinedRegressor",
    "DNNRegressor",
    "Estimator",
    "EstimatorSpec",
    "EvalSpec",
    "Exporter",
    "FeedFnHook",
    "FinalExporter",
    "FinalOpsHook",
    "GlobalStepWaiterHook",
    "LatestExporter",
    "LinearClassifier",
    "LinearEstimator",
    "LinearRegressor",
    "LoggingTensorHook",
    "ModeKeys",
    "NanLossDuringTrainingError",
    "NanTensorHook",
    "ProfilerHook",
    "RunConfig",
    "SecondOrStepTimer",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunHook",
    "SessionRunValues",
    "StepCounterHook",
    "StopAtStepHook",
    "SummarySaverHook",
    "TrainSpec",
    "WarmStartSettings",
    "experimental",
    "export",
    "tpu",
    "train_and_evaluate",
    "VocabInfo",
    "classifier_parse_example_spec",
    "regressor_parse_example_spec",
    "add_metrics",
    "inputs",
]
