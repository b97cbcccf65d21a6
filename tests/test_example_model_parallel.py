"""examples/model_parallel.py: trains at 4x2, resumes at 8x1 and on one device, exports."""

from __future__ import annotations

import pytest

from examples import model_parallel


def test_example_runs_on_every_topology(tmp_path):
    pytest.importorskip("tensorflow")
    result = model_parallel.main(str(tmp_path), steps=20)
    metrics = result["metrics"]
    assert [m["global_step"] for m in metrics.values()] == [20, 20, 40]
    assert metrics["8x1"]["accuracy"] == pytest.approx(metrics["4x2"]["accuracy"], abs=1e-6)
    # (not the loss: its final batch is padded, and a replica's model_fn loss averages its
    # padding rows too, so the loss depends on how rows fall on replicas)
    assert metrics["one device"]["accuracy"] > 0.5
    assert result["serving_gap"] < 1e-5
