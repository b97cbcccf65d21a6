"""model_dir="gs://<bucket>/run" against a GCS emulator (fake-gcs-server on 127.0.0.1,
started by the ``gcs_emulator`` fixture): train, resume with the data position,
evaluate, predict, export and serve, warm start, and a damaged checkpoint set aside;
each result equals the same calls on a local model_dir. The bucket is inspected and
damaged through gcsfs, the storage client itself (no mocking)."""

from __future__ import annotations

import logging
import os
import time

import gcsfs
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import jaxspec  # noqa: E402
import tf_bridge  # noqa: E402
from jaxspec.estimators.exporter import eval_results_from_events  # noqa: E402
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
    est = _estimator(model_dir, save_summary_steps=1)  # resumes from the bucket, data position too
    est.train(Rows, steps=2)
    fs = _fs()
    train_events = eval_results_from_events(f"{model_dir}/events.out.tfevents.*")  # train's, in the bucket
    assert [e["global_step"] for e in train_events] == [4, 5] and all("loss" in e for e in train_events)
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
    exporter = jaxspec.LatestExporter("latest", receiver, exports_to_keep=1)
    base, checkpoint = f"{model_dir}/export/latest", est.latest_checkpoint()
    first = exporter.export(est, base, checkpoint, metrics, False).decode()
    exported = exporter.export(est, base, checkpoint, metrics, True).decode()  # the first one goes
    assert exported.startswith(f"{base}/") and exported.rsplit("/", 1)[-1].isdigit() and exported != first
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(base.removeprefix("gs://"))] == [exported.rsplit("/", 1)[-1]]
    (earlier,) = eval_results_from_events(f"{model_dir}/eval/*.tfevents.*")  # BestExporter's reading
    assert earlier["global_step"] == 5 and np.isclose(earlier["loss"], metrics["loss"])
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


def test_two_processes_write_one_gs_model_dir_then_one_resumes(gcs_emulator, tmp_path, monkeypatch):
    from tests import multiprocess_worker as worker
    from tests.two_processes import run_two_processes

    model_dir = f"gs://{gcs_emulator.bucket}/two"
    monkeypatch.setenv("JAXSPEC_TEST_GCS_URL", gcs_emulator.url)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gcs_worker.py")
    results = run_two_processes(script, model_dir, tmp_path)
    assert [r["latest"] for r in results] == [4, 4]
    names = {p.rsplit("/", 1)[-1] for p in _fs().find(f"{gcs_emulator.bucket}/two/checkpoints/4")}
    assert {"jaxspec_digest.json", "jaxspec_digest.process_1.json"} <= names  # each process's record

    est = worker.make_estimator(model_dir, [])  # one process resumes the two processes' checkpoint
    assert est._checkpoint_store().damage(4) is None  # every process's record checked
    for r in results:  # what each worker read back alone equals what one process restores
        np.testing.assert_array_equal(est.get_variable_value(r["leaf"]), np.asarray(r["value"], np.float32))
    est.train(worker.train_input_fn, steps=2)
    assert est.latest_checkpoint() == f"{model_dir}/checkpoints/6"


@pytest.fixture
def fast_client_backoff(monkeypatch):
    """gcsfs waits 1, 2, 4, 8 and 16 s between its six tries of a request; here 10 ms, so
    that a stopped server fails a request in a fraction of a second (the tries, and the
    refused connections, are real)."""
    import asyncio
    import types

    import gcsfs.retry

    short = types.SimpleNamespace(sleep=lambda secs: asyncio.sleep(min(secs, 0.01)))
    monkeypatch.setattr(gcsfs.retry, "asyncio", short)  # gcsfs.retry's own name only


def test_an_unreachable_store_is_named_after_bounded_retries(gcs_emulator, monkeypatch):
    from jaxspec.store.checkpoints import CheckpointStore

    monkeypatch.setenv("JAXSPEC_STORE_CONNECT_TIMEOUT_SECS", "2")
    gcs_emulator.stop()
    try:
        started = time.monotonic()
        with pytest.raises(ConnectionError, match=f"gs://{gcs_emulator.bucket}/down"):
            CheckpointStore(f"gs://{gcs_emulator.bucket}/down")
        assert time.monotonic() - started < 10
    finally:
        gcs_emulator.start()


def test_server_stopped_during_a_save_then_restarted(gcs_emulator, fast_client_backoff, caplog):
    from jaxspec.store.checkpoints import CheckpointStore

    store = CheckpointStore(f"gs://{gcs_emulator.bucket}/outage")
    tree = {"w": np.arange(1000, dtype=np.float32)}
    store.save(1, tree)
    store.wait()
    gcs_emulator.stop()
    try:
        with caplog.at_level(logging.ERROR, logger="jaxspec"), pytest.raises(Exception) as failed:
            store.save(2, {"w": tree["w"] + 1})
            store.wait()
    finally:
        gcs_emulator.start()
    assert any("global step 2" in note for note in getattr(failed.value, "__notes__", []))
    assert any("global step 2" in r.getMessage() for r in caplog.records)
    store.refresh()
    assert store.all_steps() == [1] and store.damage(1) is None  # the earlier checkpoint is whole
    assert store.save(3, {"w": tree["w"] + 3}) is not None
    store.wait()
    assert store.latest_step() == 3
    np.testing.assert_array_equal(store.read(3)["w"], tree["w"] + 3)
    np.testing.assert_array_equal(store.read(1)["w"], tree["w"])


def test_tensorstore_and_gcsfs_pointed_at_different_stores_is_refused(gcs_emulator, monkeypatch):
    """The arrays (TensorStore) and the other files (gcsfs) would go to different stores,
    or TensorStore would retry for many minutes: both variables are named at once."""
    from jaxspec.store.checkpoints import CheckpointStore

    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", "http://127.0.0.1:9")
    with pytest.raises(ValueError, match="TENSORSTORE_GCS_HTTP_URL.*127.0.0.1:9"):
        CheckpointStore(f"gs://{gcs_emulator.bucket}/split")
    monkeypatch.delenv("TENSORSTORE_GCS_HTTP_URL")
    with pytest.raises(ValueError, match="storage.googleapis.com"):
        CheckpointStore(f"gs://{gcs_emulator.bucket}/split")


def test_gs_reads_leave_no_client_info_lines(gcs_emulator, caplog):
    """fsspec's per-object INFO lines are among the records jaxspec's calls hide."""
    import jax.numpy as jnp

    est = jaxspec.Estimator(
        lambda features, labels, mode, state: jaxspec.EstimatorSpec(
            mode, loss=jnp.mean(features["x"] @ state["w"]), train_op={"w": state["w"] - 0.1}
        ),
        model_dir=f"gs://{gcs_emulator.bucket}/quiet",
        init_fn=lambda: {"w": jnp.ones(2)},
    )
    est.train(lambda: iter([{"x": np.ones((2, 2), np.float32)}]), steps=1)
    with caplog.at_level(logging.INFO):
        np.testing.assert_allclose(est.get_variable_value("w"), [0.9, 0.9], rtol=1e-6)
    assert not [r for r in caplog.records if r.name.split(".")[0] in ("fsspec", "gcsfs")], caplog.records
