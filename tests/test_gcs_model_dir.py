"""model_dir="gs://<bucket>/run" against a GCS emulator (fake-gcs-server on 127.0.0.1,
started by the ``gcs_emulator`` fixture): train, resume with the data position,
evaluate, predict, export and serve, warm start, and a damaged checkpoint set aside;
each result equals the same calls on a local model_dir. The bucket is inspected and
damaged through gcsfs, the storage client itself (no mocking)."""

from __future__ import annotations

import logging

import gcsfs
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import jaxspec  # noqa: E402
import tf_bridge  # noqa: E402
from jaxspec.hooks.early_stopping import read_eval_metrics  # noqa: E402
from jaxspec.loop.warm_start import warm_start  # noqa: E402
from tests.helpers import fast_config  # noqa: E402
from tests.test_export_support import linear_data, linear_init_fn, linear_model_fn  # noqa: E402

X, Y = linear_data(40)
BATCH = 4


class Rows:
    """Consecutive batches of (X, Y) with a position (get_state/set_state)."""

    def __init__(self) -> None:
        self.index = 0

    def __iter__(self) -> Rows:
        return self

    def __next__(self):
        s = (self.index * BATCH) % len(X)
        self.index += 1
        return {"x": X[s : s + BATCH]}, Y[s : s + BATCH]

    def get_state(self) -> dict:
        return {"index": self.index}

    def set_state(self, state: dict) -> None:
        self.index = int(state["index"])


def _estimator(model_dir: str, **config) -> jaxspec.Estimator:
    return jaxspec.Estimator(
        linear_model_fn, model_dir, config=fast_config(model_dir, **config), init_fn=linear_init_fn
    )


def _eval_input():
    return iter([({"x": X[:16]}, Y[:16])])


def _fs() -> gcsfs.GCSFileSystem:
    return gcsfs.GCSFileSystem(token="anon", use_listings_cache=False, skip_instance_cache=True)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The same calls on a local model_dir: 5 steps in one call."""
    est = _estimator(str(tmp_path_factory.mktemp("local") / "model"))
    est.train(Rows, steps=5)
    return est


def test_train_resume_evaluate_predict_export_serve(gcs_emulator, local_run, tmp_path):
    model_dir = f"gs://{gcs_emulator.bucket}/run"
    _estimator(model_dir).train(Rows, steps=3)
    est = _estimator(model_dir)  # a new Estimator: resumes from the bucket, data position included
    est.train(Rows, steps=2)
    fs = _fs()
    step_dir = f"{gcs_emulator.bucket}/run/checkpoints/5"
    names = {p.rsplit("/", 1)[-1] for p in fs.find(step_dir)}
    assert {"jaxspec_digest.json", "data_position.process_0.json", "commit_success.txt"} <= names
    assert est.latest_checkpoint() == f"{model_dir}/checkpoints/5"
    for name in ("params/w", "params/b"):
        np.testing.assert_allclose(
            est.get_variable_value(name), local_run.get_variable_value(name), rtol=1e-6
        )

    metrics = est.evaluate(_eval_input)
    want = local_run.evaluate(_eval_input)
    assert metrics["global_step"] == 5
    np.testing.assert_allclose(metrics["loss"], want["loss"], rtol=1e-6)
    assert fs.glob(f"{gcs_emulator.bucket}/run/eval/events.out.tfevents.*")
    read = read_eval_metrics(est.eval_dir())  # the event file, read back from the bucket
    np.testing.assert_allclose(read[5]["loss"], metrics["loss"], rtol=1e-6)

    preds = np.stack([p["predictions"] for p in est.predict(lambda: iter([{"x": X[:7]}]))]).reshape(-1)
    w, b = est.get_variable_value("params/w"), est.get_variable_value("params/b")
    np.testing.assert_allclose(preds, (X[:7] @ w + b).reshape(-1), rtol=1e-5)

    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 3], tf.float32)})
    exported = est.export_saved_model(f"{model_dir}/export", receiver).decode()
    assert exported.startswith(f"{model_dir}/export/") and exported.rsplit("/", 1)[-1].isdigit()
    local = tmp_path / "served"
    fs.get(exported.removeprefix("gs://") + "/", str(local), recursive=True)  # TF cannot read the emulator
    served = tf.saved_model.load(str(local), tags=["serve"])
    out = served.signatures["predict"](x=tf.constant(X[:7]))
    np.testing.assert_allclose(out["predictions"].numpy().reshape(-1), preds.reshape(-1), rtol=1e-5)

    zeros = {"params": {"w": np.zeros((3, 1), np.float32), "b": np.zeros((1,), np.float32)}}
    started = warm_start(zeros, jaxspec.WarmStartSettings(model_dir))
    np.testing.assert_allclose(np.asarray(started["params"]["w"]), est.get_variable_value("params/w"))


def test_a_truncated_object_is_found_and_set_aside(gcs_emulator, caplog):
    model_dir = f"gs://{gcs_emulator.bucket}/damaged"
    _estimator(model_dir, save_checkpoints_steps=1).train(Rows, steps=3)
    fs = _fs()
    step3 = f"{gcs_emulator.bucket}/damaged/checkpoints/3"
    largest = max((p for p in fs.find(step3) if "/d/" in p or "ocdbt.process" in p), key=fs.size)
    data = fs.cat_file(largest)
    fs.pipe_file(largest, data[: len(data) // 2])  # the object rewritten with half its bytes
    est = _estimator(model_dir)
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        assert est.latest_checkpoint() == f"{model_dir}/checkpoints/2"
    assert any("global step 3" in r.getMessage() and "bytes where" in r.getMessage() for r in caplog.records)
    est.train(Rows, steps=1)  # sets step 3 aside, then saves it again
    assert fs.exists(f"{gcs_emulator.bucket}/damaged/checkpoints_damaged/3/_CHECKPOINT_METADATA")
    assert est.latest_checkpoint() == f"{model_dir}/checkpoints/3"
    assert est._checkpoint_store().damage(3) is None


def test_a_missing_bucket_is_named_before_training(gcs_emulator):
    est = _estimator("gs://no-such-bucket-here/run")
    with pytest.raises(FileNotFoundError, match="gs://no-such-bucket-here"):
        est.train(Rows, steps=1)
