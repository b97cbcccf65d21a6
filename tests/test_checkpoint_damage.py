"""A damaged checkpoint (any file truncated, corrupted or deleted) is named in a warning and
skipped: train, evaluate and predict use the newest intact one; with none intact, one
DataLossError. No traceback from a background thread reaches the console."""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil

import numpy as np
import pytest

import jaxspec
from jaxspec._trees import named_leaves
from jaxspec.store import checkpoint_integrity as integrity
from jaxspec.store.checkpoint_integrity import DIGEST_FILE
from jaxspec.store.checkpoints import restore_on_host
from tests.helpers import batches_input_fn, digits, init_fn, make_model_fn

X, Y = digits(64)
TRAIN_INPUT = batches_input_fn(X, Y, 16, repeat=True)
EVAL_INPUT = batches_input_fn(X, Y, 16)
PREDICT_INPUT = batches_input_fn(X, None, 16)


def _estimator(model_dir: str) -> jaxspec.Estimator:
    config = jaxspec.RunConfig(model_dir=model_dir, save_checkpoints_steps=2, log_step_count_steps=None)
    return jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)


def _leaves(path: str) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in named_leaves(restore_on_host(path))}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A model_dir with intact checkpoints at steps 2 and 4, and what step 2 gives."""
    model_dir = str(tmp_path_factory.mktemp("pristine"))
    est = _estimator(model_dir)
    est.train(TRAIN_INPUT, steps=4)
    assert est._checkpoint_store().all_steps() == [0, 2, 4]
    shutil.rmtree(os.path.join(model_dir, "checkpoints", "0"))  # the step-0 save: not under test here
    ckpt2 = os.path.join(model_dir, "checkpoints", "2")
    return {
        "dir": model_dir,
        "leaves2": _leaves(ckpt2),
        "eval2": est.evaluate(EVAL_INPUT, checkpoint_path=ckpt2),
        "pred2": np.stack([p["logits"] for p in est.predict(PREDICT_INPUT, checkpoint_path=ckpt2)]),
        "files2": {
            f: open(f, "rb").read() for f in glob.glob(ckpt2 + "/**", recursive=True) if os.path.isfile(f)
        },
    }


def _kinds(step_dir: str) -> list[str]:
    """One file of each kind Orbax (and jaxspec) writes in a step directory; of the
    array-data files, the largest (the kernels) and the smallest."""
    files = sorted(
        os.path.relpath(f, step_dir) for f in glob.glob(step_dir + "/**", recursive=True) if os.path.isfile(f)
    )
    kinds: dict[str, list[str]] = {}
    for f in files:  # files of a d/ directory (content-addressed names) are one kind
        kinds.setdefault(os.path.dirname(f) if os.path.basename(os.path.dirname(f)) == "d" else f, []).append(
            f
        )
    chosen = []
    for group in kinds.values():
        by_size = sorted(group, key=lambda f: os.path.getsize(os.path.join(step_dir, f)))
        chosen += sorted({by_size[0], by_size[-1]})
    return chosen


def _damage(path: str, how: str) -> None:
    if how == "delete":
        os.remove(path)
        return
    data = bytearray(open(path, "rb").read())
    if how == "truncate":
        data = data[: len(data) // 2]
    else:  # corrupt: flip 8 bytes a third of the way in
        start = min(len(data) // 3, max(len(data) - 8, 0))
        for i in range(start, min(start + 8, len(data))):
            data[i] ^= 0xFF
    open(path, "wb").write(bytes(data))


def _copy(pristine, tmp_path) -> str:
    model_dir = str(tmp_path / "m")
    shutil.copytree(pristine["dir"], model_dir)
    return model_dir


def test_every_kind_of_file_damaged_falls_back_to_the_intact_one(pristine, tmp_path, caplog, capfd):
    """Each kind of file truncated, corrupted and deleted in turn: the store names the
    step and path in a warning and uses step 2, whose values are exactly step 2's."""
    step_dir4 = os.path.join(pristine["dir"], "checkpoints", "4")
    kinds = _kinds(step_dir4)
    assert {"_CHECKPOINT_METADATA", "commit_success.txt", DIGEST_FILE, "default/_METADATA"} <= set(kinds)
    assert len(kinds) >= 10
    tried = 0
    for rel in kinds:
        for how in ("truncate", "corrupt", "delete"):
            model_dir = str(tmp_path / f"{tried}")
            shutil.copytree(pristine["dir"], model_dir)
            _damage(os.path.join(model_dir, "checkpoints", "4", rel), how)
            caplog.clear()
            store = _estimator(model_dir)._checkpoint_store()
            with caplog.at_level(logging.WARNING, logger="jaxspec"):
                latest = store.latest_step()
            tried += 1
            # A deleted record too: the step metadata says it was written (its data may
            # be damaged as well, unseen).
            assert latest == 2, (rel, how)
            warning = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
            assert "global step 4" in warning and os.path.join(model_dir, "checkpoints", "4") in warning, (
                warning
            )
            restored = _leaves(store.path(latest))
            for name, value in pristine["leaves2"].items():
                np.testing.assert_array_equal(restored[name], value, err_msg=f"{rel} {how} {name}")
    assert tried == 3 * len(kinds)
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "rel_glob, how",
    [
        ("default/ocdbt.process_0/d/*", "corrupt"),  # array bytes: restores silently wrong without a digest
        ("default/_METADATA", "truncate"),
        ("default/manifest.ocdbt", "delete"),
    ],
)
def test_train_evaluate_predict_use_the_intact_one(pristine, tmp_path, caplog, capfd, rel_glob, how):
    model_dir = _copy(pristine, tmp_path)
    step_dir4 = os.path.join(model_dir, "checkpoints", "4")
    target = max(glob.glob(os.path.join(step_dir4, rel_glob)), key=os.path.getsize)
    _damage(target, how)
    est = _estimator(model_dir)
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        results = est.evaluate(EVAL_INPUT)
        preds = np.stack([p["logits"] for p in est.predict(PREDICT_INPUT)])
    assert results == pristine["eval2"]
    np.testing.assert_array_equal(preds, pristine["pred2"])
    assert any("global step 4" in r.getMessage() and step_dir4 in r.getMessage() for r in caplog.records)

    est.train(TRAIN_INPUT, steps=1)  # continues from step 2
    store = est._checkpoint_store()
    assert store.all_steps() == [2, 3]
    assert int(store.read(3)["step"]) == 3
    for path, data in pristine["files2"].items():  # the intact checkpoint is untouched
        rel = os.path.relpath(path, pristine["dir"])
        assert open(os.path.join(model_dir, rel), "rb").read() == data, rel
    assert os.path.isdir(os.path.join(model_dir, "checkpoints_damaged", "4"))  # kept, not deleted
    est.train(TRAIN_INPUT, steps=1)  # step 4 can be written again
    assert store.all_steps() == [2, 3, 4] and store.latest_step() == 4
    assert "Traceback" not in capfd.readouterr().err


def test_none_intact_is_one_data_loss_error(pristine, tmp_path, capfd):
    model_dir = _copy(pristine, tmp_path)
    for step in (2, 4):
        data = glob.glob(os.path.join(model_dir, "checkpoints", str(step), "default/ocdbt.process_0/d/*"))
        _damage(max(data, key=os.path.getsize), "truncate")
    est = _estimator(model_dir)
    with pytest.raises(jaxspec.DataLossError, match=r"global steps \[2, 4\]"):
        est.evaluate(EVAL_INPUT)
    with pytest.raises(jaxspec.DataLossError, match=r"global steps \[2, 4\]"):
        next(est.predict(PREDICT_INPUT))
    with pytest.raises(jaxspec.DataLossError, match=r"global steps \[2, 4\]"):
        est.train(TRAIN_INPUT, steps=1)
    assert sorted(os.listdir(os.path.join(model_dir, "checkpoints"))) == ["2", "4"]  # nothing moved
    with pytest.raises(
        jaxspec.DataLossError, match="checkpoints/2"
    ):  # an explicit checkpoint_path: no fallback
        est.evaluate(EVAL_INPUT, checkpoint_path=os.path.join(model_dir, "checkpoints", "2"))
    assert "Traceback" not in capfd.readouterr().err


def test_without_digest_a_damaged_restore_is_a_data_loss_error(pristine, tmp_path, capfd):
    """A checkpoint written before digests existed: Orbax's read error arrives as one
    DataLossError naming the step and path (not TensorStore's message)."""
    model_dir = _copy(pristine, tmp_path)
    step_dir4 = os.path.join(model_dir, "checkpoints", "4")
    os.remove(os.path.join(step_dir4, DIGEST_FILE))
    meta_path = os.path.join(step_dir4, "_CHECKPOINT_METADATA")  # as such a jaxspec wrote it:
    meta = json.load(open(meta_path))  # no promise of records in Orbax's step metadata
    meta["custom_metadata"].pop(integrity.RECORDS_KEY)
    json.dump(meta, open(meta_path, "w"))
    data = glob.glob(os.path.join(step_dir4, "default/ocdbt.process_0/d/*"))
    _damage(max(data, key=os.path.getsize), "truncate")
    est = _estimator(model_dir)
    with pytest.raises(jaxspec.DataLossError, match="global step 4") as err:
        est.evaluate(EVAL_INPUT)
    assert step_dir4 in str(err.value)
    assert "Traceback" not in capfd.readouterr().err
