"""Reference for TF 2.15's v1 and v2 estimator classes (issue 37, items 2 and 6).

TF 2.15 kept two classes per estimator: ``tf.compat.v1.estimator.X`` (v1; the plain names
of ``tensorflow_estimator``'s modules) and ``tf.estimator.X`` (v2; the ``...V2`` names).
This records, for each pair, the constructor's parameters and defaults and whether the
class has ``export_savedmodel``; which class each module path gives; the ``loss`` and
``average_loss`` that ``evaluate`` reports for the two forms of two canned estimators
(zero-initialised weights, so the numbers show the loss reduction alone); and the
MonitoredTrainingSession arguments of a train call in a cluster with a collective
strategy (``estimator_test``'s case, with the session mocked); and what the v1
LinearRegressor does with each ``loss_reduction`` value (the error type, or the loss).

Run in the TF 2.15 virtual environment (CI never runs it)::

    /tmp/tf215venv/bin/python tools/tf215_v1_forms_reference.py

It writes ``tests/data/tf215_v1_forms.json``, read by ``tests/test_tf_v1_forms.py``.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

PAIRS = (
    "Estimator",
    "LinearClassifier",
    "LinearRegressor",
    "DNNClassifier",
    "DNNRegressor",
    "DNNLinearCombinedClassifier",
    "DNNLinearCombinedRegressor",
    "BaselineClassifier",
    "BaselineRegressor",
)
MODULES = {  # tensorflow_estimator module -> the classes it named (plain: v1, ...V2: v2)
    "estimator": ("Estimator",),
    "canned.linear": ("LinearClassifier", "LinearRegressor"),
    "canned.dnn": ("DNNClassifier", "DNNRegressor"),
    "canned.dnn_linear_combined": ("DNNLinearCombinedClassifier", "DNNLinearCombinedRegressor"),
    "canned.baseline": ("BaselineClassifier", "BaselineRegressor"),
}
X = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
Y_REGRESSION = np.array([[1.0], [3.0], [2.0], [5.0]], np.float32)
Y_CLASSES = np.array([[0], [1], [1], [0]], np.int64)
# the collective-strategy train call: RunConfig arguments, and the strategy's cluster
MTS_CONFIG = {"save_summary_steps": 1000, "save_checkpoints_steps": 500}
MTS_CLUSTER = {"worker": ["localhost:1", "localhost:2"]}


def _default(value: Any) -> Any:
    if value is inspect.Parameter.empty:
        return "<required>"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_default(v) for v in value]
    return f"<{type(value).__name__}>"


def signature(cls: type) -> list[list[Any]]:
    """[[name, default], ...] of ``cls.__init__`` without self."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return [[p.name, _default(p.default)] for p in params if p.kind is not p.VAR_KEYWORD]


def input_fn(y: np.ndarray) -> Any:
    import tensorflow as tf

    def fn() -> Any:
        return tf.data.Dataset.from_tensors(({"x": X}, y))

    return fn


def evaluate_losses(estimator_ns: Any, columns: Any) -> dict[str, Any]:
    """``loss`` and ``average_loss`` of evaluate() with zero weights, both forms."""
    out = {}
    for name, y in (("LinearRegressor", Y_REGRESSION), ("LinearClassifier", Y_CLASSES)):
        for form, ns in estimator_ns.items():
            est = getattr(ns, name)(columns, model_dir=tempfile.mkdtemp())
            result = est.evaluate(input_fn(y), steps=1)
            out[f"{name}[{form}]"] = {k: float(result[k]) for k in ("loss", "average_loss")}
    return out


def mts_arguments() -> dict[str, Any]:
    """The MonitoredTrainingSession keyword arguments of estimator_test's collective case
    (TF2 behaviour disabled, as that test runs), hooks by class name."""
    import tensorflow.compat.v1 as tf
    from tensorflow.python.training import training
    from tensorflow_estimator.python.estimator import estimator, run_config

    tf.disable_v2_behavior()
    strategy = tf.distribute.experimental.MultiWorkerMirroredStrategy()
    strategy.configure(cluster_spec=MTS_CLUSTER, task_type="worker", task_id=0)
    tf_config = json.dumps({"cluster": MTS_CLUSTER, "task": {"type": "worker", "index": 0}})
    with tf.test.mock.patch.dict("os.environ", {"TF_CONFIG": tf_config}):
        config = run_config.RunConfig(train_distribute=strategy, **MTS_CONFIG)
        config._distribute_coordinator_mode = None
        est = estimator.EstimatorV2(model_fn=step_model_fn, config=config)
    with tf.test.mock.patch.object(training, "MonitoredTrainingSession") as session:
        est.train(lambda: tf.data.Dataset.from_tensors(({"x": X}, Y_REGRESSION)), steps=1)
    return plain_kwargs(session.call_args[1])


def step_model_fn(features: Any, labels: Any, mode: Any) -> Any:
    """A model_fn whose train op increments the global step."""
    import tensorflow.compat.v1 as tf

    try:  # tf_bridge's side (tests/test_tf_v1_forms.py), or TF 2.15's
        from tf_bridge import EstimatorSpec
    except ImportError:
        from tensorflow_estimator.python.estimator.model_fn import EstimatorSpec

    del features, labels
    step = tf.train.get_global_step()
    return EstimatorSpec(mode, loss=tf.constant(1.0), train_op=tf.assign_add(step, 1))


def plain_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Numbers and None as they are; hooks as sorted class names; other values omitted."""
    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if value is None or isinstance(value, (bool, int, float)):
            out[key] = value
        elif key in ("hooks", "chief_only_hooks"):
            out[key] = sorted(type(h).__name__ for h in value)
    return out


def main() -> None:
    if sys.argv[1:] == ["--mts"]:
        print("MTS", json.dumps(mts_arguments()))
        return
    import importlib

    import tensorflow as tf

    namespaces = {"v1": tf.compat.v1.estimator, "v2": tf.estimator}
    pairs = {
        name: {
            form: {
                "signature": signature(getattr(ns, name)),
                "export_savedmodel": hasattr(getattr(ns, name), "export_savedmodel"),
            }
            for form, ns in namespaces.items()
        }
        for name in PAIRS
    }
    tfe = "tensorflow_estimator.python.estimator."
    paths = {}
    for module, names in MODULES.items():
        mod = importlib.import_module(tfe + module)
        for name in names:
            paths[f"{module}.{name}"] = (
                "v1" if getattr(mod, name) is getattr(tf.compat.v1.estimator, name) else "?"
            )
            paths[f"{module}.{name}V2"] = (
                "v2" if getattr(mod, name + "V2") is getattr(tf.estimator, name) else "?"
            )
    columns = [tf.feature_column.numeric_column("x")]
    for form, ns in namespaces.items():  # reading export_savedmodel on an instance
        for name, est in (
            ("Estimator", ns.Estimator(step_model_fn)),
            ("LinearRegressor", ns.LinearRegressor(columns)),
        ):
            pairs[name][form]["instance_export_savedmodel"] = hasattr(est, "export_savedmodel")
    reductions = {}  # what the v1 LinearRegressor makes of each loss_reduction value
    for value in ("weighted_sum_over_batch_size", "weighted_mean", "sum", "sum_over_batch_size", "none"):
        try:
            est = tf.compat.v1.estimator.LinearRegressor(
                columns, loss_reduction=value, model_dir=tempfile.mkdtemp()
            )
            reductions[value] = {
                "error": None,
                "loss": float(est.evaluate(input_fn(Y_REGRESSION), steps=1)["loss"]),
            }
        except Exception as exc:  # noqa: BLE001 - the type is what is recorded
            reductions[value] = {"error": type(exc).__name__, "loss": None}
    run = subprocess.run([sys.executable, __file__, "--mts"], capture_output=True, text=True, check=True)
    mts = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("MTS "))[4:])
    out = {
        "tensorflow": tf.__version__,
        "pairs": pairs,
        "paths": paths,
        "evaluate": evaluate_losses(namespaces, columns),
        "v1_loss_reduction": reductions,
        "collective_session_args": mts,
    }
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "tf215_v1_forms.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps(out["evaluate"]), json.dumps(mts), json.dumps(paths))


if __name__ == "__main__":
    main()
