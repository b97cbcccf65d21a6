"""Integrity records: CRC-32C per piece and per process; the earlier formats (1: SHA-256,
2: zlib CRC-32) still read, and damage to any kind of file of an old checkpoint still
detected."""

from __future__ import annotations

import json
import logging
import os
import shutil

import jax
import numpy as np
import pytest
from tensorboardX import crc32c as table_crc32c

from jaxspec.errors import DataLossError
from jaxspec.store import checkpoint_integrity as integrity
from jaxspec.store.checkpoints import CheckpointStore
from tools.old_format_checkpoints import old_format_state

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.fixture(params=[1, 2])
def old_model_dir(tmp_path, request):
    """A model_dir written by an earlier jaxspec, with records of format 1 or 2."""
    model_dir = str(tmp_path / "old")
    shutil.copytree(os.path.join(DATA, f"checkpoints_format{request.param}"), model_dir)
    with open(os.path.join(model_dir, "checkpoints", "7", integrity.DIGEST_FILE)) as f:
        assert json.load(f).get("format", 1) == request.param  # what that jaxspec wrote
    return model_dir


def _target(step: int):
    return jax.tree.map(jax.numpy.asarray, old_format_state(step))


def _assert_equal_state(restored, step: int) -> None:
    want = old_format_state(step)
    np.testing.assert_array_equal(np.asarray(restored["params"]["w"]), want["params"]["w"])
    np.testing.assert_array_equal(np.asarray(restored["params"]["b"]), want["params"]["b"])
    assert int(restored["step"]) == step


def test_a_checkpoint_with_an_earlier_format_record_restores(old_model_dir):
    store = CheckpointStore(old_model_dir)
    assert store.all_steps() == [3, 7] and store.latest_step() == 7
    _assert_equal_state(store.restore(7, _target(7)), 7)
    _assert_equal_state(store.restore_path(store.path(3), _target(3)), 3)


def _flip(path: str) -> None:
    data = bytearray(open(path, "rb").read())
    data[len(data) // 3] ^= 0xFF
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("how", ["corrupt", "truncate", "delete"])
def test_earlier_format_records_still_find_damage_in_every_file(old_model_dir, caplog, how):
    """Every file an old record lists, damaged in turn: step 7 is named and step 3 used."""
    step_dir = os.path.join(old_model_dir, "checkpoints", "7")
    with open(os.path.join(step_dir, integrity.DIGEST_FILE)) as f:
        listed = sorted(json.load(f)["files"])
    assert len(listed) >= 8
    pristine = {rel: open(os.path.join(step_dir, rel), "rb").read() for rel in listed}
    for rel in listed:
        path = os.path.join(step_dir, rel)
        if how == "corrupt":
            _flip(path)
        elif how == "truncate":
            open(path, "wb").write(pristine[rel][: len(pristine[rel]) // 2])
        else:
            os.remove(path)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jaxspec"):
            assert CheckpointStore(old_model_dir).latest_step() == 3, rel
        assert any(rel in r.getMessage() and step_dir in r.getMessage() for r in caplog.records), rel
        open(path, "wb").write(pristine[rel])
    assert CheckpointStore(old_model_dir).latest_step() == 7


def _crc32c_by_table(data: bytes) -> str:
    """CRC-32C of ``data`` by tensorboardX's byte-at-a-time table (pure Python)."""
    return f"{table_crc32c.crc_finalize(table_crc32c.crc_update(table_crc32c.CRC_INIT, data)):08x}"


@pytest.mark.parametrize("piece_bytes", [integrity.PIECE_BYTES, 1000])
def test_a_new_record_holds_the_crc32c_of_every_piece_of_every_file(tmp_path, monkeypatch, piece_bytes):
    monkeypatch.setattr(integrity, "PIECE_BYTES", piece_bytes)
    store = CheckpointStore(str(tmp_path))
    w = jax.random.normal(jax.random.key(0), (3000,))  # about 12 KB on disk: several small pieces
    store.save(1, {"w": w, "n": jax.numpy.int32(4)})
    store.wait()
    step_dir = store.path(1)
    with open(os.path.join(step_dir, integrity.DIGEST_FILE)) as f:
        record = json.load(f)
    assert record["format"] == 3 and record["checksum"] == "crc32c" and record["process"] == 0
    assert record["piece_bytes"] == piece_bytes
    on_disk = {
        os.path.relpath(os.path.join(root, n), step_dir)
        for root, _, names in os.walk(step_dir)
        for n in names
    } - {integrity.DIGEST_FILE, "_CHECKPOINT_METADATA", "commit_success.txt"}
    assert set(record["files"]) == on_disk
    pieces = 0
    for rel, (size, sums) in record["files"].items():
        data = open(os.path.join(step_dir, rel), "rb").read()
        want = [_crc32c_by_table(data[i : i + piece_bytes]) for i in range(0, max(len(data), 1), piece_bytes)]
        assert size == len(data) and sums == want, rel
        pieces += len(sums)
    assert pieces > len(record["files"]) if piece_bytes == 1000 else pieces == len(record["files"])
    assert integrity.damage(step_dir) is None


def test_damage_in_any_piece_of_a_file_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(integrity, "PIECE_BYTES", 128)
    step_dir = _two_process_dir(str(tmp_path / "5"))
    path = os.path.join(step_dir, "default/d/aa")
    integrity.write_digest(step_dir, 0)
    monkeypatch.setattr(integrity, "PIECE_BYTES", 1 << 20)  # the record's own piece size is used
    pristine = open(path, "rb").read()
    assert len(pristine) == 500  # four pieces in the record
    for at in (0, 127, 128, 300, len(pristine) - 1):
        data = bytearray(pristine)
        data[at] ^= 0x01
        open(path, "wb").write(bytes(data))
        assert (
            integrity.damage(step_dir) == "default/d/aa does not hold the bytes that were written (corrupted)"
        )
    open(path, "wb").write(pristine)
    assert integrity.damage(step_dir) is None


def _two_process_dir(root: str) -> str:
    """A step directory shaped as two processes write it (files named by process)."""
    files = {
        "default/_METADATA": b'{"tree": 1}',
        "default/d/aa": b"root data " * 50,
        "default/ocdbt.process_0/d/bb": b"process 0 chunk " * 40,
        "default/ocdbt.process_1/d/cc": b"process 1 chunk " * 40,
        "default/ocdbt.process_1/manifest.ocdbt": b"manifest of 1",
        "data_position.process_0.json": b'{"kind": "x"}',
        "data_position.process_1.json": b'{"kind": "y"}',
        "_CHECKPOINT_METADATA": json.dumps({"item_handlers": {}}).encode(),
    }
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        open(os.path.join(root, rel), "wb").write(data)
    open(os.path.join(root, "commit_success.txt"), "w").write(f"Checkpoint commit was successful to {root}")
    return root


def test_each_process_records_only_its_own_files_and_every_record_is_checked(tmp_path):
    step_dir = _two_process_dir(str(tmp_path / "5"))
    integrity.write_digest(step_dir, 1)
    integrity.write_digest(step_dir, 0)
    records = {}
    for p in (0, 1):
        with open(os.path.join(step_dir, integrity.record_name(p))) as f:
            records[p] = set(json.load(f)["files"])
    assert records[1] == {
        "default/ocdbt.process_1/d/cc",
        "default/ocdbt.process_1/manifest.ocdbt",
        "data_position.process_1.json",
    }
    assert records[0] == {
        "default/_METADATA",
        "default/d/aa",
        "default/ocdbt.process_0/d/bb",
        "data_position.process_0.json",
    }
    assert integrity.damage(step_dir) is None
    _flip(os.path.join(step_dir, "default/ocdbt.process_1/d/cc"))
    assert "default/ocdbt.process_1/d/cc" in integrity.damage(step_dir)
    os.remove(os.path.join(step_dir, integrity.record_name(1)))  # without it, those files are unchecked
    assert integrity.damage(step_dir) is None


def test_an_explicit_damaged_earlier_format_checkpoint_is_a_data_loss_error(old_model_dir):
    step_dir = os.path.join(old_model_dir, "checkpoints", "3")
    data = [
        os.path.join(root, n)
        for root, _, names in os.walk(os.path.join(step_dir, "default", "ocdbt.process_0", "d"))
        for n in names
    ]
    _flip(max(data, key=os.path.getsize))
    with pytest.raises(DataLossError, match="corrupted"):
        CheckpointStore(old_model_dir).restore_path(step_dir, _target(3))


def test_a_lost_record_of_a_new_checkpoint_is_damage_and_the_older_one_is_used(tmp_path, caplog):
    """The step metadata says which records a save wrote: without its record a checkpoint
    is not trusted (its data may be damaged too, here a zeroed run of bytes)."""
    store = CheckpointStore(str(tmp_path))
    for step in (1, 2):
        store.save(step, {"w": jax.random.normal(jax.random.key(step), (4000,))})
        store.wait()
    step_dir = store.path(2)
    assert integrity.promised_records(step_dir) == 1
    os.remove(os.path.join(step_dir, integrity.DIGEST_FILE))
    data = [os.path.join(r, n) for r, _, names in os.walk(os.path.join(step_dir, "default")) for n in names]
    big = max(data, key=os.path.getsize)
    with open(big, "r+b") as f:
        f.seek(os.path.getsize(big) // 2)
        f.write(b"\0" * 64)
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        assert CheckpointStore(str(tmp_path)).latest_step() == 1
    assert any("jaxspec_digest.json is missing" in r.getMessage() for r in caplog.records)


def test_reading_a_damaged_checkpoint_without_records_is_a_data_loss_error(old_model_dir):
    step_dir = os.path.join(old_model_dir, "checkpoints", "7")
    os.remove(os.path.join(step_dir, integrity.DIGEST_FILE))  # judged by Orbax's metadata only
    metadata = os.path.join(step_dir, "default", "_METADATA")
    open(metadata, "wb").write(open(metadata, "rb").read()[:40])  # Orbax cannot parse it
    with pytest.raises(DataLossError, match="global step 7"):
        CheckpointStore(old_model_dir).read(7)


def test_processes_checking_together_share_the_records_of_every_writer(tmp_path):
    """A checkpoint written by 3 processes, checked by 2 together: process 0 checks the
    records of writers 0 and 2, process 1 that of writer 1; by 1: every record."""
    step_dir = _two_process_dir(str(tmp_path / "5"))
    for q in (0, 1):
        integrity.write_digest(step_dir, q)
    meta = json.load(open(os.path.join(step_dir, "_CHECKPOINT_METADATA")))
    meta["custom_metadata"] = integrity.records_metadata(3)
    json.dump(meta, open(os.path.join(step_dir, "_CHECKPOINT_METADATA"), "w"))
    missing = "its jaxspec_digest.process_2.json is missing (the checkpoint was written with it)"
    assert integrity.damage(step_dir, 0, 2) == missing
    assert integrity.damage(step_dir, 1, 2) is None
    assert integrity.damage(step_dir) == missing
    assert integrity.damage(step_dir, 1, 3) is None  # a process of a run as wide as the writers
