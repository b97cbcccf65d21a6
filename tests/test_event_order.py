"""Event files sort in write order, so TensorBoard's reader sees steps ascending."""

from __future__ import annotations

import os
import time

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import jaxspec
from jaxspec.store import summaries
from tests.helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn


def _steps(logdir: str, tag: str) -> list[int]:
    acc = EventAccumulator(logdir)
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def test_many_files_in_one_second_read_back_in_write_order(tmp_path, monkeypatch):
    """Twelve eval-style files written within one (frozen) second: tensorboardX's name
    starts with that second, so only jaxspec's suffix orders them."""
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.25)
    logdir = str(tmp_path / "eval")
    steps = [100 * (i + 1) for i in range(12)]
    for step in steps:
        summaries.write_scalars(logdir, step, {"accuracy": step / 1000.0})
        summaries.close(logdir)
    names = sorted(os.listdir(logdir))
    assert len(names) == 12 and len({n.split(".")[3] for n in names}) == 1  # one second
    assert _steps(logdir, "accuracy") == steps
    acc = EventAccumulator(logdir)
    acc.Reload()
    np.testing.assert_allclose([e.value for e in acc.Scalars("accuracy")], np.array(steps) / 1000.0)


def test_train_and_evaluate_event_files_ascend(tmp_path):
    """Alternating train and evaluate calls: model_dir's loss and eval/'s accuracy events
    come back from TensorBoard's reader with steps ascending, one per call or step."""
    x, y = digits(32)
    model_dir = str(tmp_path)
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True),
        config=fast_config(model_dir, save_summary_steps=1),
        init_fn=init_fn,
    )
    for _ in range(11):
        est.train(batches_input_fn(x, y, 16, repeat=True), steps=1)
        est.evaluate(batches_input_fn(x, y, 16))
    assert _steps(os.path.join(model_dir, "eval"), "accuracy") == list(range(1, 12))
    assert _steps(model_dir, "loss") == list(range(1, 12))
