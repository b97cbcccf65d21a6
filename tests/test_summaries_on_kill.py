"""Issue 25, item 6: the training curve survives SIGKILL. Every summary of a step up to the
last checkpoint is in model_dir's event files after a kill, read with TensorFlow's own
event reader (a partly written last record is where TensorBoard stops too)."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_subprocess.py")


def _loss_steps(model_dir: str) -> set[int]:
    import tensorflow as tf

    steps = set()
    for path in glob.glob(os.path.join(model_dir, "events.out.tfevents.*")):
        try:
            for event in tf.compat.v1.train.summary_iterator(path):
                if any(v.tag == "loss" for v in event.summary.value):
                    steps.add(int(event.step))
        except tf.errors.DataLossError:
            pass  # a record cut by the kill: the ones before it count
    return steps


def test_sigkill_loses_no_summary_older_than_the_last_checkpoint(tmp_path):
    model_dir = str(tmp_path / "killed")
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, model_dir, "1000", "0.05", "summaries"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    done, deadline = 0, time.time() + 120
    while done < 10 and time.time() < deadline:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, "the training process ended early"
        done += line.startswith("step done")
    assert done == 10
    time.sleep(0.5)  # checkpoints of steps 3, 6, 9 are complete by now
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    ckpts = [int(d) for d in os.listdir(os.path.join(model_dir, "checkpoints")) if d.isdigit()]
    last = max(ckpts)
    assert last >= 9
    assert set(range(1, last + 1)) <= _loss_steps(model_dir)
