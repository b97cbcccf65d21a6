"""``import tf_bridge``: TensorFlow and little else (the rest loads on first use), every
public name where it was, and none of TensorFlow's C++ start-up INFO lines."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import tf_bridge
from tf_bridge._quiet import drop_start_up_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# tf_bridge.__all__ before its submodules became lazy.
PUBLIC_BEFORE = (
    "BestExporter ClassificationOutput Estimator EstimatorSpec EvalSpec ExponentialUpdateLossScaleManager "
    "ExportCompatibilityError ExportOutput Exporter FinalExporter FixedLossScaleManager InputPipelineConfig "
    "LatestExporter ModeExport ModeKeys NPUDistributedOptimizer NPUEstimator NPUEstimatorSpec "
    "NPULossScaleOptimizer NPUOptimizer NPURunConfig PredictOutput RegressionOutput RunConfig "
    "ServingInputReceiver SupervisedInputReceiver TPUConfig TPUEstimator TPUEstimatorSpec "
    "TensorServingInputReceiver TrainSpec UnsupervisedInputReceiver WarmStartSettings "
    "build_parsing_serving_input_receiver_fn build_raw_serving_input_receiver_fn "
    "build_raw_supervised_input_receiver_fn build_supervised_input_receiver_fn_from_input_fn estimator "
    "export_all_saved_models export_outputs_from_tf export_outputs_to_tf export_saved_model train_and_evaluate"
).split()


def test_import_loads_tensorflow_only_and_prints_no_start_up_lines() -> None:
    code = (
        "import sys, json, tf_bridge\n"
        "import tensorflow as tf; tf.constant(1.0) + 1  # devices set up, as by an export\n"
        "print('RESULT', json.dumps({'ours': sorted(m for m in sys.modules if m.startswith('tf_bridge')),"
        " 'jaxspec': 'jaxspec' in sys.modules, 'tf': 'tensorflow' in sys.modules}))\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert got == {
        "ours": ["tf_bridge", "tf_bridge._quiet"],
        "jaxspec": False,
        "tf": True,
    }
    assert "absl::InitializeLog" not in run.stderr
    assert not [ln for ln in run.stderr.splitlines() if ln.startswith("I0000")], run.stderr
    assert "cuInit" not in run.stderr, run.stderr  # issue 35, item 8: the CUDA probe's line


def test_public_names_are_where_they_were() -> None:
    assert set(PUBLIC_BEFORE) <= set(tf_bridge.__all__)
    for name in tf_bridge.__all__:
        assert getattr(tf_bridge, name) is not None
    from tf_bridge.runtime.runner.estimator import Estimator

    assert tf_bridge.Estimator is Estimator and tf_bridge.runtime.runner.Estimator is Estimator


def test_only_start_up_info_lines_are_dropped() -> None:
    text = (
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        b"I0000 00:00:1796205853.494057   11317 port.cc:153] oneDNN custom operations are on.\n"
        b"I0000 00:00:1796205853.693649   11317 cpu_feature_guard.cc:227] This TensorFlow binary is optimized.\n"
        b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow.\n"
        b"W0000 00:00:1796205853.7 11317 some.cc:1] a warning\n"
        b"E0000 00:00:1796295244.086613   12419 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
        b"CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n"
        b"E0000 00:00:1796205853.8 11317 other.cc:2] an error\n"
        b"a Python warning\n"
    )
    assert drop_start_up_lines(text) == (
        b"W0000 00:00:1796205853.7 11317 some.cc:1] a warning\n"
        b"E0000 00:00:1796205853.8 11317 other.cc:2] an error\n"
        b"a Python warning\n"
    )


def test_old_module_paths_are_gone() -> None:
    """The modules renamed before the first release answer at their new homes only: no
    import finder aliases old paths (docs/decisions.md, "tf_bridge in two wings")."""
    for old in ("tf_bridge.config", "tf_bridge.session_hooks", "tf_bridge.runner", "tf_bridge.saved_model"):
        try:
            module = importlib.import_module(old)
        except ModuleNotFoundError:
            continue
        # (an editable install of another checkout may still serve it: not from this tree)
        assert not (module.__file__ or "").startswith(ROOT + os.sep), f"{old} still imports"
