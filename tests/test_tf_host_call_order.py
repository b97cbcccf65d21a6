"""A host_call passed the global step gets its own step's values, in order, under load.

``tools/tf215_host_call_order.py`` ran a program whose host_call is ``(host_fn,
[global_step, loss])`` on TF 2.15's ``TPUEstimator(use_tpu=False)``: host_fn saw the global
step each step started from (0, 1, ..., 11) with that step's loss
(``tests/data/tf215_host_call_order.json``). tf_bridge's NPUEstimator and TPUEstimator
must hand host_fn the same pairs, the step given as the variable or as a tensor read in
model_fn; and with CPU burners running beside it, 100 steps must still be 0..99 (the read
was once unordered against the step's increment: about two runs in three recorded some
step twice, e.g. ``[.., 6, 8, 8, ..]``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tf_bridge
from tf_bridge.runtime.host_call_order import order_before_update
from tools import tf215_host_call_order as ref

with open(ref.JSON_PATH) as _f:
    REFERENCE = json.load(_f)


def _npu_records(variant: str, model_dir: str, steps: int, iterations_per_loop: int = 1) -> list[Any]:
    records: list[Any] = []
    config = tf_bridge.NPURunConfig(
        model_dir=model_dir,
        iterations_per_loop=iterations_per_loop,
        save_checkpoints_steps=None,
        log_step_count_steps=None,
    )
    est = tf_bridge.NPUEstimator(
        ref.model_fn(tf, tf_bridge.NPUEstimatorSpec, variant, records), config=config
    )
    est.train(ref.input_fn(tf), steps=steps)
    return records


def _assert_as_tf215(records: list[Any], variant: str) -> None:
    expected = REFERENCE["host_call"][variant]
    assert [s for s, _ in records] == [s for s, _ in expected] == list(range(ref.STEPS))
    np.testing.assert_allclose([v for _, v in records], [v for _, v in expected], rtol=0, atol=1e-6)


@pytest.mark.parametrize("variant", ref.VARIANTS)
def test_npu_host_call_gets_each_steps_values_as_tf215(variant: str, tmp_path: Any) -> None:
    _assert_as_tf215(_npu_records(variant, str(tmp_path / "one"), ref.STEPS), variant)
    # loops of 4 steps: the same pairs
    _assert_as_tf215(_npu_records(variant, str(tmp_path / "four"), ref.STEPS, 4), variant)


def test_tpu_host_call_gets_each_steps_values_as_tf215(tmp_path: Any) -> None:
    tpu = tf_bridge.estimator.tpu
    for variant in ref.VARIANTS:
        records: list[Any] = []
        config = tpu.RunConfig(
            model_dir=str(tmp_path / variant), tpu_config=tpu.TPUConfig(iterations_per_loop=1)
        )
        est = tpu.TPUEstimator(
            ref.model_fn(tf, tpu.TPUEstimatorSpec, variant, records),
            config=config,
            use_tpu=False,
            train_batch_size=ref.BATCH,
        )
        est.train(ref.input_fn(tf), steps=ref.STEPS)
        _assert_as_tf215(records, variant)


def test_npu_host_call_in_order_under_load(tmp_path: Any) -> None:
    burn = "import time\nt = time.time()\nwhile time.time() - t < 20: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(3)]
    try:
        records = _npu_records("reshape", str(tmp_path), 100)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert [s for s, _ in records] == list(range(100))


def test_order_before_update_edges() -> None:
    """Each variable write of the train op waits for the host tensors; a tensor the user
    computed after the update is left where it is (an edge would be a cycle) and still
    sees the updated value."""
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable(
            "v", [], initializer=tf.compat.v1.zeros_initializer(), use_resource=True
        )
        read = tf.reshape(v, [1])
        train_op = v.assign_add(1.0).op
        with tf.control_dependencies([train_op]):
            after = tf.identity(v)
        got_read, got_var, got_after = order_before_update([read, v, after], train_op)
        assert got_read is read and got_after is after
        assert read.op in train_op.control_inputs and got_var.op in train_op.control_inputs
        assert after.op not in train_op.control_inputs
        with tf.compat.v1.Session() as session:
            session.run(v.initializer)
            for step in range(3):
                r, var, a, _ = session.run([got_read, got_var, got_after, train_op])
                assert (r.tolist(), float(var), float(a)) == ([float(step)], float(step), float(step + 1))
