"""Regenerate tf_bridge's reference numbers with TensorFlow 2.15's real tf.estimator.

tf_bridge's runner must compute what ``tf.estimator`` computed. This script runs the
models of ``tools/tf215_reference_models.py`` with TF 2.15's ``tf.estimator.Estimator``
and ``TPUEstimator(use_tpu=False)`` and records per-step losses, evaluate results,
predictions, the exported signatures and serving outputs, and host_call calls. It
writes:

- ``tests/data/tf215_linear/``: the model_dir after 6 training steps (the ``checkpoint``
  file and the ``model.ckpt-*`` index/data files; a few KB), which tf_bridge must resume;
- the block between ``# BEGIN TF215 EXPECTED`` and ``# END TF215 EXPECTED`` in
  ``tests/test_tf_runner_reference.py``.

It needs a TF 2.15 virtual environment (CI does not run it)::

    python3 -m venv /tmp/tf215venv
    /tmp/tf215venv/bin/pip install "tensorflow-cpu==2.15.*" "tensorflow-estimator==2.15.*"
    /tmp/tf215venv/bin/python tools/tf215_reference.py
"""

from __future__ import annotations

import os
import pprint
import shutil
import sys
import tempfile
from collections import defaultdict
from typing import Any

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tf215_reference_models as models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "data", "tf215_linear")
TEST_FILE = os.path.join(ROOT, "tests", "test_tf_runner_reference.py")
BEGIN, END = "# BEGIN TF215 EXPECTED", "# END TF215 EXPECTED"
FIXTURE_STEP = 6


def _floats(values: Any) -> Any:
    return [float(v) for v in np.asarray(values).reshape(-1)]


def _results(results: dict[str, Any]) -> dict[str, Any]:
    return {k: (int(v) if k == "global_step" else float(v)) for k, v in sorted(results.items())}


def _copy_fixture(model_dir: str) -> None:
    """The checkpoint bookkeeping and index/data files; no metagraphs or events."""
    shutil.rmtree(FIXTURE, ignore_errors=True)
    os.makedirs(FIXTURE)
    for name in sorted(os.listdir(model_dir)):
        if name == "checkpoint" or (name.startswith("model.ckpt-") and not name.endswith(".meta")):
            shutil.copy(os.path.join(model_dir, name), FIXTURE)


def _export(est: Any, api: Any, base: str) -> dict[str, Any]:
    path = est.export_saved_model(base, models.serving_input_receiver_fn(api)).decode()
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        sig = meta.signature_def["all"]
        fetch = sig.outputs["pred"].name
        feed = {sig.inputs["x"].name: models.predict_data()}
        served = session.run(fetch, feed)
    return {"signatures": models.signature_summary(meta), "served_pred": _floats(served)}


def linear_reference(work: str) -> dict[str, Any]:
    api = models.tf215_api()
    losses: list[float] = []
    config = tf.estimator.RunConfig(tf_random_seed=42)
    est = tf.estimator.Estimator(
        models.make_linear_model_fn(api, losses), os.path.join(work, "linear"), config=config, params={}
    )
    est.train(models.train_input_fn, steps=FIXTURE_STEP)
    first = list(losses)
    _copy_fixture(est.model_dir)
    losses.clear()
    est.train(models.train_input_fn, steps=4)
    out = {
        "train_losses_first": first,
        "train_losses_resumed": list(losses),
        "evaluate": _results(est.evaluate(models.eval_input_fn)),
        "evaluate_two_steps": _results(est.evaluate(models.eval_input_fn, steps=2, name="two")),
        "predictions": [float(p["pred"]) for p in est.predict(models.predict_input_fn)],
        "prediction_batches": [
            len(b["pred"]) for b in est.predict(models.predict_input_fn, yield_single_examples=False)
        ],
        "variables": {n: _floats(est.get_variable_value(n)) for n in ("w", "b", "w/Adam", "beta1_power")},
        "variable_names": sorted(est.get_variable_names()),
        "export": _export(est, api, os.path.join(work, "export")),
    }
    long_losses: list[float] = []
    long_run = tf.estimator.Estimator(
        models.make_linear_model_fn(api, long_losses), os.path.join(work, "long"), config=config, params={}
    )
    long_run.train(models.train_input_fn, steps=20)
    out["train_losses_20"] = long_losses
    return out


def tpu_reference(work: str) -> dict[str, Any]:
    api = models.tf215_api()
    records: dict[str, list[Any]] = defaultdict(list)
    config = tf.compat.v1.estimator.tpu.RunConfig(
        model_dir=os.path.join(work, "tpu"),
        tf_random_seed=42,
        tpu_config=tf.compat.v1.estimator.tpu.TPUConfig(iterations_per_loop=2),
    )
    est = tf.compat.v1.estimator.tpu.TPUEstimator(
        models.make_tpu_model_fn(api, records),
        config=config,
        use_tpu=False,
        train_batch_size=models.TRAIN_BATCH,
        eval_batch_size=models.EVAL_BATCH,
        predict_batch_size=models.PREDICT_BATCH,
    )
    est.train(models.recording_input_fn(models.train_input_fn, records), steps=3)
    evaluation = _results(est.evaluate(models.recording_input_fn(models.eval_input_fn, records)))
    preds = [
        float(p["pred"]) for p in est.predict(models.recording_input_fn(models.predict_input_fn, records))
    ]
    return {
        "evaluate": evaluation,
        "predictions": preds,
        "host_call": [list(r) for r in records["host_call"]],
        "model_fn_params": [list(r) for r in records["model_fn_params"]],
        "input_fn_batch_size": records["input_fn_batch_size"],
    }


def write_expected(expected: dict[str, Any]) -> None:
    with open(TEST_FILE) as f:
        text = f.read()
    start, stop = text.index(BEGIN), text.index(END)
    body = f"{BEGIN}\n# Written by tools/tf215_reference.py with TensorFlow {tf.__version__}.\nEXPECTED = "
    body += pprint.pformat(expected, width=100, sort_dicts=True) + "\n"
    with open(TEST_FILE, "w") as f:
        f.write(text[:start] + body + text[stop:])


def main() -> None:
    if not tf.__version__.startswith("2.15"):
        sys.exit(f"run this with TensorFlow 2.15 and tensorflow-estimator (found {tf.__version__}).")
    with tempfile.TemporaryDirectory() as work:
        expected = {
            "tensorflow": tf.__version__,
            "linear": linear_reference(work),
            "tpu": tpu_reference(work),
        }
    write_expected(expected)
    print(f"wrote {FIXTURE} and the EXPECTED block of {TEST_FILE}")


if __name__ == "__main__":
    main()
