"""Ascend's CPU-runnable modules on tf_bridge's path (issue 48, item 2): ``npu_ops``,
``npu_unary_ops``, ``npu_scope`` and ``hccl_ops``, checked against numpy, and a
ModelZoo-style DeepFM script run unmodified through ``python -m tf_bridge``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from tf_bridge.runtime.npu import hccl_ops, npu_ops, npu_scope, npu_unary_ops
from tf_bridge.runtime.npu.npu_init import npu_rnn, util

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "tests", "tf_estimator_scripts")


def _np_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _np_fast_gelu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-1.702 * x))


def _central_difference(f: Any, x: np.ndarray, h: float = 1e-5) -> np.ndarray:
    return (f(x + h) - f(x - h)) / (2 * h)


def _kept_fraction_bound(n: int, keep: float) -> float:
    """Five standard deviations of the kept fraction of n independent draws."""
    return 5 * math.sqrt(keep * (1 - keep) / n)


def test_dropout_keeps_keep_prob_and_scales_by_its_inverse() -> None:
    x = np.random.RandomState(0).uniform(0.5, 2.0, size=(400, 50))
    for keep in (0.8, 0.3):
        y = npu_ops.dropout(tf.constant(x), keep_prob=keep, seed=5).numpy()
        kept = y != 0
        assert abs(kept.mean() - keep) < _kept_fraction_bound(x.size, keep)
        np.testing.assert_allclose(y[kept], x[kept] / keep, rtol=1e-12)
    # keep_prob as a tensor, as ModelZoo's placeholders feed it
    y = npu_ops.dropout(tf.constant(x, tf.float32), keep_prob=tf.constant(0.5), seed=1).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.5) < _kept_fraction_bound(x.size, 0.5)
    np.testing.assert_allclose(y[kept], x.astype(np.float32)[kept] * 2, rtol=1e-6)


def test_dropout_noise_shape_seed_and_keep_prob_one() -> None:
    x = tf.ones((300, 20), tf.float64)
    y = npu_ops.dropout(x, 0.6, noise_shape=[300, 1], seed=2).numpy()
    row_kept = y[:, 0] != 0
    np.testing.assert_array_equal(
        y, np.broadcast_to(np.where(row_kept[:, None], 1 / 0.6, 0.0), y.shape)
    )  # whole rows
    assert abs(row_kept.mean() - 0.6) < _kept_fraction_bound(300, 0.6)
    # the same global and op seeds give the same mask, as TensorFlow's random ops
    tf.random.set_seed(11)
    first = npu_ops.dropout(x, 0.5, seed=4).numpy()
    tf.random.set_seed(11)
    np.testing.assert_array_equal(npu_ops.dropout(x, 0.5, seed=4).numpy(), first)
    assert npu_ops.dropout(x, 1.0) is x  # the adapter returns x itself


def test_dropout_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="keep_prob"):
        npu_ops.dropout(tf.ones(3), 0.0)
    with pytest.raises(ValueError, match="keep_prob"):
        npu_ops.dropout(tf.ones(3), 1.5)
    with pytest.raises(ValueError, match="floating"):
        npu_ops.dropout(tf.ones(3, tf.int32), 0.5)


def test_dropout_gradient_uses_the_forward_mask() -> None:
    with tf.Graph().as_default():
        x = tf.constant(np.linspace(-1.0, 1.0, 200))
        y = npu_ops.dropout(x, 0.7, seed=3)
        (grad,) = tf.gradients(tf.reduce_sum(y), [x])
        with tf.compat.v1.Session() as sess:
            y_val, grad_val = sess.run([y, grad])
    np.testing.assert_allclose(grad_val, np.where(y_val != 0, 1 / 0.7, 0.0), rtol=1e-12)


def test_gelu_and_fast_gelu_and_their_backprops_match_numpy() -> None:
    x = np.linspace(-6.0, 6.0, 241)
    dy = np.random.RandomState(1).normal(size=x.shape)
    np.testing.assert_allclose(
        npu_unary_ops.gelu(tf.constant(x)).numpy(), _np_gelu(x), rtol=1e-9, atol=1e-8
    )  # 1 + tanh cancels in the tail
    got = npu_unary_ops.gelu_grad(tf.constant(dy), tf.constant(x), tf.constant(_np_gelu(x))).numpy()
    np.testing.assert_allclose(got, dy * _central_difference(_np_gelu, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(npu_unary_ops.fast_gelu(tf.constant(x)).numpy(), _np_fast_gelu(x), rtol=1e-12)
    got = npu_unary_ops.fast_gelu_grad(tf.constant(dy), tf.constant(x)).numpy()
    np.testing.assert_allclose(got, dy * _central_difference(_np_fast_gelu, x), rtol=1e-6, atol=1e-8)
    # the adapter's module holds its op library under the name npu_unary_ops
    assert npu_unary_ops.npu_unary_ops.gelu is npu_unary_ops.gelu


def test_npu_scopes_build_their_body_unchanged() -> None:
    with tf.Graph().as_default() as graph:
        with npu_scope.without_npu_compile_scope(), npu_scope.keep_dtype_scope():
            with npu_scope.npu_variable_scope(npu_scope.NpuExecutePlacement.VECTOR):
                with npu_scope.npu_stage_scope(1):
                    out = tf.constant(2.0) * 3.0
        assert all(not op.node_def.attr.get("_without_npu_compile") for op in graph.get_operations())
        with tf.compat.v1.Session() as sess:
            assert sess.run(out) == 6.0
    with pytest.raises(ValueError, match="placement"):
        with npu_scope.npu_variable_scope("all"):
            pass
    with pytest.raises(TypeError, match="stage"):
        with npu_scope.npu_stage_scope("1"):
            pass


def test_hccl_collectives_over_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK_SIZE", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    x = np.arange(12.0).reshape(4, 3)
    for reduction in hccl_ops.REDUCTIONS:  # sum, prod, min, max over one rank: x
        np.testing.assert_array_equal(hccl_ops.allreduce(tf.constant(x), reduction).numpy(), x)
        np.testing.assert_array_equal(hccl_ops.reduce(tf.constant(x), reduction, root_rank=0).numpy(), x)
        np.testing.assert_array_equal(
            hccl_ops.reduce_scatter(tf.constant(x), reduction, rank_size=1).numpy(), x
        )
    np.testing.assert_array_equal(hccl_ops.allgather(tf.constant(x), rank_size=1).numpy(), x)
    out = hccl_ops.broadcast([tf.constant(x), tf.constant([7])], root_rank=0)
    assert isinstance(out, list) and out[1].numpy().tolist() == [7]
    sparse = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([2]), tf.constant([3, 2]))
    np.testing.assert_array_equal(hccl_ops.allreduce(sparse, "sum").numpy(), [[0, 0], [0, 0], [1, 2]])
    with pytest.raises(ValueError, match="reduction"):
        hccl_ops.allreduce(tf.constant(x), "mean")
    with pytest.raises(ValueError, match="rank_size"):
        hccl_ops.allgather(tf.constant(x), rank_size=2)
    with pytest.raises(ValueError, match="root_rank"):
        hccl_ops.broadcast([tf.constant(x)], root_rank=1)
    with pytest.raises(ValueError, match="group"):
        hccl_ops.allreduce(tf.constant(x), "sum", group="my_group")
    with pytest.raises(ValueError, match="rank >= 1"):
        hccl_ops.allgather(tf.constant(1.0), rank_size=1)


def test_hccl_refuses_several_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"hccl_ops\.allreduce.*2 ranks"):
        hccl_ops.allreduce(tf.constant(1.0), "sum")
    monkeypatch.delenv("RANK_SIZE")
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}))
    assert hccl_ops.world_size() == 2  # the training tasks: chief and worker, not ps
    with pytest.raises(RuntimeError, match=r"hccl_ops\.broadcast"):
        hccl_ops.broadcast([tf.constant(1.0)], root_rank=0)


def test_npu_only_names_import_and_raise_when_called() -> None:
    for fn, name in (
        (npu_ops.LARSV2, "npu_ops.LARSV2"),
        (npu_unary_ops.drop_out_gen_mask, "npu_unary_ops.drop_out_gen_mask"),
        (hccl_ops.send, "hccl_ops.send"),
        (util.set_iteration_per_loop, "util.set_iteration_per_loop"),
        (npu_rnn.npu_dynamic_rnn, "npu_rnn.npu_dynamic_rnn"),
    ):
        with pytest.raises(NotImplementedError, match=name.replace(".", r"\.")):
            fn(1, 2)
    with pytest.raises(AttributeError):
        npu_unary_ops.no_such_op  # noqa: B018
    with tf.Graph().as_default():
        assert npu_ops.initialize_system().type == "NoOp"
        assert npu_ops.shutdown_system().type == "NoOp"


def test_a_modelzoo_style_deepfm_runs_unmodified_through_the_launcher(tmp_path: Any) -> None:
    out = tmp_path / "steps.npz"
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("RANK_SIZE", None)
    env.pop("TF_CONFIG", None)
    run = subprocess.run(
        [sys.executable, "-m", "tf_bridge", "npu_deepfm.py", str(tmp_path / "m"), str(out)],
        cwd=SCRIPTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert result["global_step"] == 4 and result["rank_size"] == 1 and result["logged_steps"] == 4
    assert np.isfinite(result["eval_loss"])
    steps = np.load(out)
    pre, act, dropped, rows = (steps[k] for k in ("pre", "act", "dropped", "rows"))
    np.testing.assert_allclose(act, _np_gelu(pre.astype(np.float64)), rtol=1e-5, atol=1e-6)
    kept = dropped != 0
    assert abs(kept.mean() - 0.8) < _kept_fraction_bound(kept.size, 0.8)
    np.testing.assert_allclose(dropped[kept], act[kept] / 0.8, rtol=1e-6)
    row_kept = (rows != 0).any(axis=-1)
    np.testing.assert_allclose(rows, np.where(row_kept[..., None], act / 0.5, 0.0), rtol=1e-6)
    assert abs(row_kept.mean() - 0.5) < _kept_fraction_bound(row_kept.size, 0.5)
    assert "Traceback" not in run.stderr
