"""Two processes (4 CPU devices each, gloo on 127.0.0.1): each writes the record of its
own files of a checkpoint and checks only those; a damaged file of either makes both
fall back to the same earlier checkpoint."""

from __future__ import annotations

import json
import os

from jaxspec.store import checkpoint_integrity as integrity
from tests.two_processes import run_two_processes

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "integrity_worker.py")


def _records(step_dir: str) -> dict[int, set[str]]:
    out = {}
    for p in (0, 1):
        with open(os.path.join(step_dir, integrity.record_name(p))) as f:
            record = json.load(f)
        assert record["format"] == 3 and record["process"] == p
        out[p] = set(record["files"])
    return out


def _flip_largest(step_dir: str, files: set[str]) -> str:
    rel = max(files, key=lambda r: os.path.getsize(os.path.join(step_dir, r)))
    path = os.path.join(step_dir, rel)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    return rel


def test_each_process_records_and_checks_its_own_files(tmp_path, monkeypatch):
    model_dir = str(tmp_path / "model")
    monkeypatch.setenv("JAXSPEC_TEST_PHASE", "train")
    run_two_processes(SCRIPT, model_dir, tmp_path, tag="train")
    step_dir = os.path.join(model_dir, "checkpoints", "4")
    records = _records(step_dir)
    on_disk = {
        os.path.relpath(os.path.join(root, n), step_dir)
        for root, _, names in os.walk(step_dir)
        for n in names
    }
    assert records[0] | records[1] == on_disk - {
        integrity.DIGEST_FILE,
        integrity.record_name(1),
        "_CHECKPOINT_METADATA",
        "commit_success.txt",
    }
    assert records[1] and all("process_1" in rel for rel in records[1])
    assert not any("process_1" in rel for rel in records[0])

    monkeypatch.setenv("JAXSPEC_TEST_PHASE", "check")
    intact = run_two_processes(SCRIPT, model_dir, tmp_path, tag="intact")
    for p, result in enumerate(intact):
        assert result["process"] == p and result["latest"] == 4 and result["evaluated_step"] == 4
        here = {rel.split("/", 1)[1] for rel in result["checked"] if rel.startswith("4/")}
        assert here == records[p]  # its own files, every one, and no other process's

    damaged = _flip_largest(step_dir, records[1])  # a file only process 1 checks
    after = run_two_processes(SCRIPT, model_dir, tmp_path, tag="damaged")
    assert [r["latest"] for r in after] == [0, 0]  # both agree on the step-0 checkpoint
    assert [r["evaluated_step"] for r in after] == [0, 0]
    assert "process_1" in damaged
