"""Export outputs (``tf.estimator.export``): the heads of a SavedModel, and the reader of
the TF-free serving artifact an export writes with ``jax_artifact=True``.

The export outputs are pure data; ``tf_bridge`` turns each one into a signature def.
``load_serving(export_dir)`` runs an export's ``jax/`` artifact with JAX alone.
"""

from jaxspec.export.export_output import (
    ClassificationOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
)
from jaxspec.export.serving import ServingFunction, load_serving

__all__ = [
    "ClassificationOutput",
    "ExportOutput",
    "PredictOutput",
    "RegressionOutput",
    "ServingFunction",
    "load_serving",
]
