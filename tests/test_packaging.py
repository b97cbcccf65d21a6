"""import jaxspec stays free of TensorFlow; the public names exist."""

from __future__ import annotations

import subprocess
import sys


def test_import_jaxspec_does_not_import_tensorflow():
    code = "import sys, jaxspec; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_public_api():
    import jaxspec

    for name in [
        "ModeKeys",
        "EstimatorSpec",
        "TPUEstimatorSpec",
        "NPUEstimatorSpec",
        "Estimator",
        "TPUEstimator",
        "RunConfig",
        "TPUConfig",
        "Scaffold",
        "SessionRunHook",
        "SessionRunArgs",
        "CrossShardOptimizer",
    ]:
        assert hasattr(jaxspec, name), name
    assert (jaxspec.ModeKeys.TRAIN, jaxspec.ModeKeys.EVAL, jaxspec.ModeKeys.PREDICT) == (
        "train",
        "eval",
        "infer",
    )
    from jaxspec.export import ClassificationOutput, PredictOutput, RegressionOutput  # noqa: F401

    config = jaxspec.RunConfig(tpu_config=jaxspec.TPUConfig(iterations_per_loop=7))
    assert config.tpu_config.iterations_per_loop == 7
    assert config.save_checkpoints_secs == 600 and config.save_checkpoints_steps is None
