"""Export outputs (``tf.estimator.export``): the heads of a SavedModel.

They are pure data; ``tf_bridge`` turns each one into a signature def.
"""

from jaxspec.export.export_output import (
    ClassificationOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
)

__all__ = ["ClassificationOutput", "ExportOutput", "PredictOutput", "RegressionOutput"]
