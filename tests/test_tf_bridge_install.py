"""tf_bridge.install() and ``python -m tf_bridge``: unmodified tf.estimator programs (and an
Ascend-style one) run on TensorFlow >= 2.16 and compute what TF 2.15 computed.

Every check runs in a subprocess, so the import paths install() adds never reach this one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "tf_estimator_scripts")
with open(os.path.join(ROOT, "tests", "data", "tf215_install_reference.json")) as _f:
    REFERENCE = json.load(_f)["linear_tf215"]


def _run(args: list[str], cwd: str = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the start-up lines must be dropped by tf_bridge itself
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _result(run: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def _assert_same_numbers(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["global_step"] == want["global_step"]
    for key in ("w", "loss", "mae", "predictions"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, err_msg=key)


def test_launcher_runs_an_unmodified_tf215_program_as_tf215_did(tmp_path: Any) -> None:
    run = _run(
        [
            "-m",
            "tf_bridge",
            os.path.join(SCRIPTS, "linear_tf215.py"),
            str(tmp_path / "m"),
            str(tmp_path / "e"),
        ]
    )
    got = _result(run)
    _assert_same_numbers(got, REFERENCE)
    np.testing.assert_allclose(got["served"], REFERENCE["served"], rtol=1e-6)  # export_savedmodel
    assert got["tensorflow_estimator_module"]
    assert "absl::InitializeLog" not in run.stderr


def test_launcher_runs_an_ascend_style_program_on_cpu(tmp_path: Any) -> None:
    got = _result(_run(["-m", "tf_bridge", "npu_linear.py", str(tmp_path / "m")], cwd=SCRIPTS))
    _assert_same_numbers(got, REFERENCE)  # one rank: the plain Estimator's numbers
    assert got["rank"] == [1, 0]
    assert got["logged_batches"] == [4, 4, 2]  # 10 steps, output_fn every 4 and at the end
    x = (np.arange(24, dtype=np.float32).reshape(8, 3) - 12.0) / 10.0
    y = x @ np.array([[1.0], [2.0], [-1.0]], np.float32) + 0.3
    pred = x[:4] @ np.array([[0.5], [-0.25], [0.1]], np.float32) + 0.05
    np.testing.assert_allclose(got["logged_first_loss"], np.mean((pred - y[:4]) ** 2), rtol=1e-6)


def test_install_adds_the_estimator_paths_and_changes_nothing_else_in_tensorflow() -> None:
    code = textwrap.dedent(
        """
        import sys, tensorflow as tf
        before = {"tf": set(dir(tf)), "v1": set(dir(tf.compat.v1)), "v2": set(dir(tf.compat.v2))}
        import tf_bridge
        tf_bridge.install()
        tf_bridge.install()  # a second call does nothing
        import tensorflow.estimator, tensorflow_estimator
        from tensorflow import estimator as tf_estimator
        from tensorflow_estimator.python.estimator import estimator, model_fn, run_config, training, exporter
        from tensorflow_estimator.python.estimator.export import export_output
        from tensorflow_estimator.python.estimator.tpu import tpu_estimator
        from npu_bridge.estimator.npu import npu_config, npu_estimator, npu_optimizer, npu_loss_scale_manager
        checks = {
            "tf.estimator": tf.estimator is tf_bridge.estimator is tf_estimator is tensorflow.estimator,
            "v1": tf.compat.v1.estimator is tf_bridge.estimator.v1,
            "v1 names": tf.compat.v1.estimator.RunConfig is tf_bridge.RunConfig,
            "Estimator": estimator.EstimatorV2 is tf_bridge.Estimator is tf.estimator.Estimator,
            "v1 Estimator": estimator.Estimator is tf.compat.v1.estimator.Estimator is not tf_bridge.Estimator,
            "EstimatorSpec": model_fn.EstimatorSpec is tf_bridge.EstimatorSpec,
            "RunConfig": run_config.RunConfig is tf_bridge.RunConfig,
            "TaskType": (run_config.TaskType.CHIEF, run_config.TaskType.EVALUATOR) == ("chief", "evaluator"),
            "train_and_evaluate": training.train_and_evaluate is tf_bridge.train_and_evaluate,
            "BestExporter": exporter.BestExporter is tf_bridge.BestExporter,
            "PredictOutput": export_output.PredictOutput is tf_bridge.PredictOutput,
            "TPUEstimator": tpu_estimator.TPUEstimator is tf_bridge.TPUEstimator,
            "TPUEstimatorSpec": tpu_estimator.TPUEstimatorSpec is tf_bridge.TPUEstimatorSpec,
            "tfe.estimator": tensorflow_estimator.estimator is tf_bridge.estimator,
            "NPURunConfig": npu_config.NPURunConfig is tf_bridge.NPURunConfig,
            "NPUEstimator": npu_estimator.NPUEstimator is tf_bridge.NPUEstimator,
            "NPUEstimatorSpec": npu_estimator.NPUEstimatorSpec is tf_bridge.NPUEstimatorSpec,
            "NPUDistributedOptimizer": npu_optimizer.NPUDistributedOptimizer is tf_bridge.NPUDistributedOptimizer,
            "FixedLossScaleManager": npu_loss_scale_manager.FixedLossScaleManager is tf_bridge.FixedLossScaleManager,
        }
        import tf_keras  # imports tensorflow.compat.v1 / v2, which put new objects at tf.compat.*
        checks["v1 after tf_keras"] = tf.compat.v1.estimator is tf_bridge.estimator.v1
        checks["v2 after tf_keras"] = tf.compat.v2.estimator is tf_bridge.estimator
        try:
            import tensorflow_estimator.python.estimator.no_such_module
        except ModuleNotFoundError:
            checks["missing path"] = True
        added = {
            "tf": sorted(set(dir(tf)) - before["tf"]),
            "v1": sorted(set(dir(tf.compat.v1)) - before["v1"]),
            "v2": sorted(set(dir(tf.compat.v2)) - before["v2"]),
        }
        print("RESULT", __import__("json").dumps({"checks": checks, "added": added}))
        """
    )
    got = _result(_run(["-c", code]))
    assert got["checks"] == dict.fromkeys(got["checks"], True) and "missing path" in got["checks"]
    assert got["added"] == {"tf": ["estimator"], "v1": ["estimator"], "v2": ["estimator"]}


def test_install_refuses_old_tensorflow_and_the_real_tensorflow_estimator(tmp_path: Any) -> None:
    fake = tmp_path / "site" / "tensorflow_estimator"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    code = textwrap.dedent(
        f"""
        import sys, tensorflow as tf, tf_bridge
        errors = []
        real = tf.__version__
        tf.__version__ = "2.15.1"
        try:
            tf_bridge.install()
        except RuntimeError as err:
            errors.append(str(err))
        tf.__version__ = real
        sys.path.insert(0, {str(tmp_path / "site")!r})
        try:
            tf_bridge.install()
        except RuntimeError as err:
            errors.append(str(err))
        print("RESULT", __import__("json").dumps({{"errors": errors, "estimator": hasattr(tf, "estimator")}}))
        """
    )
    got = _result(_run(["-c", code]))
    assert len(got["errors"]) == 2 and not got["estimator"]
    assert "2.15.1" in got["errors"][0] and ">= 2.16" in got["errors"][0]
    assert "tensorflow_estimator package is installed" in got["errors"][1]


def test_launcher_usage_and_a_missing_script() -> None:
    run = _run(["-m", "tf_bridge", "/nonexistent/script.py"])
    assert run.returncode == 2 and "usage: python -m tf_bridge [--keras3] SCRIPT" in run.stderr
    assert "TF_USE_LEGACY_KERAS" not in run.stderr  # the Keras line only when a script runs


def test_this_process_has_no_tensorflow_estimator() -> None:
    """The subprocesses above installed nothing here."""
    with pytest.raises(ModuleNotFoundError):
        __import__("tensorflow_estimator")
