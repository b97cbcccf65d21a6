# tf_bridge's public names and where each is defined: read by type checkers and IDEs, and
# by ``lazy_loader.attach_stub`` in ``__init__.py``, which loads each name on first use.
# Export wing (``tf_bridge.export``): what jaxspec imports. Runtime wing
# (``tf_bridge.runtime``): tf.estimator for TF model_fns. ``tf_bridge.estimator``: the
# tf.estimator face.

from . import estimator as estimator
from .export.compat import ExportCompatibilityError as ExportCompatibilityError
from .export.modes import ModeExport as ModeExport
from .export.outputs import export_outputs_from_tf as export_outputs_from_tf
from .export.outputs import export_outputs_to_tf as export_outputs_to_tf
from .export.receivers import ServingInputReceiver as ServingInputReceiver
from .export.receivers import SupervisedInputReceiver as SupervisedInputReceiver
from .export.receivers import TensorServingInputReceiver as TensorServingInputReceiver
from .export.receivers import UnsupervisedInputReceiver as UnsupervisedInputReceiver
from .export.receivers import (
    build_parsing_serving_input_receiver_fn as build_parsing_serving_input_receiver_fn,
)
from .export.receivers import build_raw_serving_input_receiver_fn as build_raw_serving_input_receiver_fn
from .export.receivers import build_raw_supervised_input_receiver_fn as build_raw_supervised_input_receiver_fn
from .export.receivers import (
    build_supervised_input_receiver_fn_from_input_fn as build_supervised_input_receiver_fn_from_input_fn,
)
from .export.saved_model import export_all_saved_models as export_all_saved_models
from .export.saved_model import export_saved_model as export_saved_model
from .export.validation import ExportValidationError as ExportValidationError
from .runtime import canned as canned
from .runtime import heads as heads
from .runtime import hooks as hooks
from .runtime import npu as npu
from .runtime.extenders import add_metrics as add_metrics
from .runtime.import_compat import install as install
from .runtime.npu import ExponentialUpdateLossScaleManager as ExponentialUpdateLossScaleManager
from .runtime.npu import FixedLossScaleManager as FixedLossScaleManager
from .runtime.npu import NPUDistributedOptimizer as NPUDistributedOptimizer
from .runtime.npu import NPUEstimator as NPUEstimator
from .runtime.npu import NPULossScaleOptimizer as NPULossScaleOptimizer
from .runtime.npu import NPUOptimizer as NPUOptimizer
from .runtime.npu import NPURunConfig as NPURunConfig
from .runtime.run_config import InputPipelineConfig as InputPipelineConfig
from .runtime.run_config import RunConfig as RunConfig
from .runtime.run_config import TPUConfig as TPUConfig
from .runtime.runner.estimator import Estimator as Estimator
from .runtime.runner.estimator import WarmStartSettings as WarmStartSettings
from .runtime.runner.tpu_estimator import TPUEstimator as TPUEstimator
from .runtime.spec import ClassificationOutput as ClassificationOutput
from .runtime.spec import EstimatorSpec as EstimatorSpec
from .runtime.spec import ExportOutput as ExportOutput
from .runtime.spec import ModeKeys as ModeKeys
from .runtime.spec import NPUEstimatorSpec as NPUEstimatorSpec
from .runtime.spec import PredictOutput as PredictOutput
from .runtime.spec import RegressionOutput as RegressionOutput
from .runtime.spec import TPUEstimatorSpec as TPUEstimatorSpec
from .runtime.training import BestExporter as BestExporter
from .runtime.training import EvalSpec as EvalSpec
from .runtime.training import Exporter as Exporter
from .runtime.training import FinalExporter as FinalExporter
from .runtime.training import LatestExporter as LatestExporter
from .runtime.training import TrainSpec as TrainSpec
from .runtime.training import train_and_evaluate as train_and_evaluate
