"""Reference behaviour of TF 2.15's tf.estimator for tf_bridge's train_and_evaluate,
RunConfig/TF_CONFIG and supervised receivers (issue 16).

Run under TensorFlow 2.15 with tensorflow-estimator (see ``tools/tf215_reference.py``
for making that environment)::

    /tmp/tf215venv/bin/python tools/tf215_reference_bridge.py

It writes ``tests/data/tf215_bridge_reference.json``. The tests import this module
under the pinned TensorFlow and run the same functions with ``api = tf_bridge`` (only
TensorFlow, numpy and the reference models are imported here), then compare.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tf215_reference_models as models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "tf215_bridge_reference.json")

CLUSTER = {
    "chief": ["host0:2222"],
    "worker": ["host1:2222", "host2:2222"],
    "ps": ["host3:2222", "host4:2222"],
}
MASTER_CLUSTER = {"master": ["host0:2222"], "worker": ["host1:2222"], "ps": ["host3:2222"]}

# (name, TF_CONFIG or None, RunConfig keyword arguments)
RUN_CONFIG_CASES: list[tuple[str, Any, dict[str, Any]]] = [
    ("no_tf_config", None, {}),
    ("empty", {}, {}),
    ("chief", {"cluster": CLUSTER, "task": {"type": "chief", "index": 0}}, {}),
    ("worker1", {"cluster": CLUSTER, "task": {"type": "worker", "index": 1}}, {}),
    ("ps1", {"cluster": CLUSTER, "task": {"type": "ps", "index": 1}}, {}),
    (
        "evaluator",
        {"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}, "eval_session_master": "e:1"},
        {},
    ),
    (
        "session_master",
        {"cluster": CLUSTER, "task": {"type": "worker", "index": 0}, "session_master": "s:1"},
        {},
    ),
    ("one_node", {"cluster": {"chief": ["host0:2222"]}, "task": {"type": "chief", "index": 0}}, {}),
    ("legacy_master", {"cluster": MASTER_CLUSTER, "task": {"type": "master", "index": 0}}, {}),
    ("legacy_worker", {"cluster": MASTER_CLUSTER, "task": {"type": "worker", "index": 0}}, {}),
    ("custom_job", {"cluster": {**CLUSTER, "extra": ["h:9"]}, "task": {"type": "extra", "index": 0}}, {}),
    ("model_dir_env", {"model_dir": "/tmp/from_env"}, {}),
    ("model_dir_both_same", {"model_dir": "/tmp/same"}, {"model_dir": "/tmp/same"}),
    ("model_dir_conflict", {"model_dir": "/tmp/a"}, {"model_dir": "/tmp/b"}),
    ("model_dir_env_empty", {"model_dir": ""}, {}),
    ("service", {"service": {"name": "x"}}, {}),
    ("service_not_dict", {"service": "x"}, {}),
    (
        "given_session_config",
        {"cluster": CLUSTER, "task": {"type": "worker", "index": 0}},
        {"session_config": "proto"},
    ),
    ("no_cluster_task_ps", {"task": {"type": "ps", "index": 0}}, {}),
    ("no_cluster_index1", {"task": {"type": "worker", "index": 1}}, {}),
    ("no_cluster_session_master", {"session_master": "s:1", "eval_session_master": "e:1"}, {}),
    ("no_chief", {"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}, {}),
    ("two_chiefs", {"cluster": {"chief": ["h:1", "h:2"]}, "task": {"type": "chief", "index": 0}}, {}),
    ("no_task_type", {"cluster": CLUSTER, "task": {"index": 0}}, {}),
    ("no_task_index", {"cluster": CLUSTER, "task": {"type": "worker"}}, {}),
    ("negative_index", {"cluster": CLUSTER, "task": {"type": "worker", "index": -1}}, {}),
    ("unknown_type", {"cluster": CLUSTER, "task": {"type": "nope", "index": 0}}, {}),
    ("index_out_of_range", {"cluster": CLUSTER, "task": {"type": "worker", "index": 2}}, {}),
    (
        "master_and_chief",
        {"cluster": {**MASTER_CLUSTER, "chief": ["h:7"]}, "task": {"type": "master", "index": 0}},
        {},
    ),
    ("master_evaluator", {"cluster": MASTER_CLUSTER, "task": {"type": "evaluator", "index": 0}}, {}),
    ("bad_session_config", None, {"session_config": "not a proto"}),
]


def run_config_properties(api: Any, tf_config: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The cluster properties of ``api.RunConfig(**kwargs)`` under ``tf_config``, or the
    exception type's name."""
    kwargs = dict(kwargs)
    if kwargs.get("session_config") == "proto":
        kwargs["session_config"] = tf.compat.v1.ConfigProto(log_device_placement=True)
    old = os.environ.pop("TF_CONFIG", None)
    if tf_config is not None:
        os.environ["TF_CONFIG"] = json.dumps(tf_config)
    try:
        config = api.RunConfig(**kwargs)
    except Exception as err:  # the type is what is compared
        return {"error": type(err).__name__}
    finally:
        os.environ.pop("TF_CONFIG", None)
        if old is not None:
            os.environ["TF_CONFIG"] = old
    session = config.session_config
    return {
        "task_type": config.task_type,
        "task_id": config.task_id,
        "is_chief": config.is_chief,
        "master": config.master,
        "evaluation_master": config.evaluation_master,
        "num_ps_replicas": config.num_ps_replicas,
        "num_worker_replicas": config.num_worker_replicas,
        "global_id_in_cluster": config.global_id_in_cluster,
        "cluster_spec": config.cluster_spec.as_dict(),
        "service": config.service,
        "model_dir": config.model_dir,
        "device_filters": None if session is None else list(session.device_filters),
        "log_device_placement": None if session is None else session.log_device_placement,
    }


def _recorder(api: Any, calls: list[Any]) -> Any:
    class Recorder(api.Exporter):
        @property
        def name(self) -> str:
            return "recorder"

        def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
            calls.append(
                [
                    os.path.basename(checkpoint_path),
                    int(eval_result["global_step"]),
                    bool(is_the_final_export),
                ]
            )
            return None

    return Recorder()


def _six_batches() -> Any:
    x, y = models.train_data()
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(4)


# (name, save_checkpoints_steps, max_steps, throttle_secs, finite training input)
TRAIN_AND_EVALUATE_CASES = [
    ("every_checkpoint", 3, 9, 0, False),
    ("throttled", 2, 7, 3600, False),
    ("input_ends", 4, None, 0, True),
]


def train_and_evaluate_run(api: Any, save_steps: int, max_steps: Any, throttle: float, finite: bool) -> dict:
    """Exporter calls and the returned metrics of one train_and_evaluate."""
    calls: list[Any] = []
    with tempfile.TemporaryDirectory() as model_dir:
        config = api.RunConfig(tf_random_seed=1, save_checkpoints_steps=save_steps, log_step_count_steps=None)
        est = api.Estimator(models.make_linear_model_fn(api, []), model_dir, config=config)
        result, exports = api.train_and_evaluate(
            est,
            api.TrainSpec(_six_batches if finite else models.train_input_fn, max_steps=max_steps),
            api.EvalSpec(
                models.eval_input_fn, steps=None, throttle_secs=throttle, exporters=_recorder(api, calls)
            ),
        )
    metrics = {k: float(v) for k, v in result.items()}
    return {"calls": calls, "metrics": metrics, "exports": [e is None for e in exports]}


def _tensors_input_fn() -> Any:
    x, y = models.eval_data()
    return {"x": tf.constant(x)}, tf.constant(y)


def _dataset_input_fn() -> Any:
    return models.eval_input_fn()


RECEIVER_CASES = {"tensors": _tensors_input_fn, "dataset": _dataset_input_fn}


def receiver_and_eval_export(api: Any, build_receiver_fn: Any, input_fn: Any) -> dict[str, Any]:
    """The receiver tensors of ``build_supervised_input_receiver_fn_from_input_fn`` and the
    EVAL signature of a TRAIN+EVAL export that uses it, with its loss on the eval data."""
    receiver_fn = build_receiver_fn(input_fn)
    with tf.Graph().as_default():
        receiver = receiver_fn()
        tensors = {
            k: [v.name, v.dtype.name, v.shape.as_list()] for k, v in sorted(receiver.receiver_tensors.items())
        }
    with tempfile.TemporaryDirectory() as model_dir:
        config = api.RunConfig(tf_random_seed=1, log_step_count_steps=None)
        est = api.Estimator(models.make_linear_model_fn(api, []), model_dir, config=config)
        est.train(models.train_input_fn, steps=3)
        path = est.experimental_export_all_saved_models(
            os.path.join(model_dir, "export"), {"train": receiver_fn, "eval": receiver_fn}
        )
        x, y = models.eval_data()
        with tf.Graph().as_default(), tf.compat.v1.Session() as session:
            meta = tf.compat.v1.saved_model.loader.load(session, ["eval"], path.decode())
            sig = meta.signature_def["eval"]
            feed = {sig.inputs["x"].name: x, sig.inputs["label"].name: y}
            loss = float(session.run(sig.outputs["loss"].name, feed))
            tags = sorted(",".join(sorted(m.meta_info_def.tags)) for m in _meta_graphs(path.decode()))
    return {
        "receiver_tensors": tensors,
        "eval_inputs": {k: v.name for k, v in sorted(sig.inputs.items())},
        "eval_outputs": sorted(sig.outputs),
        "eval_loss": loss,
        "tags": tags,
    }


def _meta_graphs(path: str) -> list[Any]:
    model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        model.ParseFromString(f.read())
    return list(model.meta_graphs)


def main() -> None:
    import tensorflow_estimator  # noqa: F401  (only under TF 2.15; the tests import this module without it)

    api = models.tf215_api()
    api.RunConfig = tf.estimator.RunConfig
    api.Estimator = tf.estimator.Estimator
    api.Exporter = tf.estimator.Exporter
    api.TrainSpec, api.EvalSpec = tf.estimator.TrainSpec, tf.estimator.EvalSpec
    api.train_and_evaluate = tf.estimator.train_and_evaluate
    out: dict[str, Any] = {"tensorflow": tf.__version__}
    out["run_config"] = {name: run_config_properties(api, env, kw) for name, env, kw in RUN_CONFIG_CASES}
    out["train_and_evaluate"] = {
        name: train_and_evaluate_run(api, *case) for name, *case in TRAIN_AND_EVALUATE_CASES
    }
    from tensorflow_estimator.python.estimator.export import export as tf_export

    from_input_fn = tf_export.build_supervised_input_receiver_fn_from_input_fn
    out["receivers"] = {
        name: receiver_and_eval_export(api, from_input_fn, fn) for name, fn in RECEIVER_CASES.items()
    }
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    np.set_printoptions(precision=8)
    main()
