"""The NPU path of tf_bridge on CPU: NPURunConfig, NPUEstimator with host_call and
iterations_per_loop, the loss scale managers' update rule, the optimizer wrappers, and the
hand-over to npu_bridge when it imports.

Per-step numbers are checked against TF 2.15's tf.estimator.Estimator (the 20-step run of
``EXPECTED`` in test_tf_runner_reference.py): a loop of N steps must compute exactly the
N single steps an Estimator computes."""

from __future__ import annotations

import logging
import sys
import types
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from test_tf_runner_reference import EXPECTED

import tf_bridge
from tf_bridge.runtime import npu
from tools import tf215_reference_models as models

M = tf_bridge.ModeKeys
LOSSES_20 = EXPECTED["linear"]["train_losses_20"]


class CountingHook(tf.compat.v1.train.SessionRunHook):
    def __init__(self) -> None:
        self.after_runs: list[int] = []

    def begin(self) -> None:
        self._step = tf.compat.v1.train.get_global_step()

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.after_runs.append(int(run_context.session.run(self._step)))


def npu_model_fn(records: list[tuple[str, float, int]]) -> Any:
    """The reference linear model as an NPUEstimatorSpec; host_fn records (mode, loss,
    batch size) per step through a py_func."""

    def record(mode: bytes, loss: np.ndarray, size: np.ndarray) -> np.int64:
        records.append((mode.decode(), float(loss), int(size)))
        return np.int64(len(records))

    def host_fn(mode: Any, loss: Any, size: Any) -> Any:
        return tf.compat.v1.py_func(record, [mode, loss, size], tf.int64, stateful=True)

    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        pred = models.linear(features)
        if mode == M.PREDICT:
            return tf_bridge.NPUEstimatorSpec(mode, predictions={"pred": tf.squeeze(pred, 1)})
        loss = tf.compat.v1.losses.mean_squared_error(labels, pred)
        host_call = (host_fn, {"mode": tf.constant(mode), "loss": loss, "size": tf.shape(labels)[0]})
        train_op = None
        if mode == M.TRAIN:
            opt = tf_bridge.NPUDistributedOptimizer(tf.compat.v1.train.AdamOptimizer(models.LEARNING_RATE))
            train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_global_step())
        return tf_bridge.NPUEstimatorSpec(mode, loss=loss, train_op=train_op, host_call=host_call)

    return model_fn


def test_npu_run_config_defaults_and_checks() -> None:
    config = tf_bridge.NPURunConfig()
    assert config.iterations_per_loop == 1 and config.save_summary_steps == 0
    assert config.save_checkpoints_steps == 100 and config.save_checkpoints_secs is None
    assert tf_bridge.NPURunConfig(save_checkpoints_secs=30).save_checkpoints_steps is None
    assert tf_bridge.NPURunConfig(precision_mode="allow_mix_precision").npu_only_settings() == {
        "precision_mode": "allow_mix_precision"
    }
    with pytest.raises(TypeError, match="iterations_per_loop"):
        tf_bridge.NPURunConfig(iterations_per_loop=2.0)
    with pytest.raises(ValueError, match="iterations_per_loop"):
        tf_bridge.NPURunConfig(iterations_per_loop=0)
    with pytest.raises(ValueError, match="mix_compile_mode"):
        tf_bridge.NPURunConfig(iterations_per_loop=2, mix_compile_mode=True)
    with pytest.raises(ValueError, match="graph_run_mode"):
        tf_bridge.NPURunConfig(graph_run_mode=2)
    with pytest.raises(ValueError, match="dump_config"):
        tf_bridge.NPURunConfig(dump_config={"enable_dump": True})
    assert tf_bridge.NPURunConfig(aoe_mode="2").aoe_mode == "2"  # a later adapter's option
    with pytest.raises(TypeError, match="not_an_option"):
        tf_bridge.NPURunConfig(not_an_option=1)
    with pytest.raises(ValueError, match="NPURunConfig"):
        npu.NPUEstimator(npu_model_fn([]), config=tf_bridge.RunConfig())


def test_iterations_per_loop_and_host_call_per_step(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    records: list[tuple[str, float, int]] = []
    config = tf_bridge.NPURunConfig(
        iterations_per_loop=10,
        model_dir=str(tmp_path),
        tf_random_seed=42,
        precision_mode="allow_mix_precision",
        save_checkpoints_steps=10,
    )
    with caplog.at_level(logging.INFO, logger="tf_bridge"):
        est = tf_bridge.NPUEstimator(npu_model_fn(records), config=config, job_start_file="/no/such/file")
    assert "precision_mode" in caplog.text
    counter = CountingHook()
    est.train(models.train_input_fn, steps=20, hooks=[counter])
    # two loops: hooks see global steps 10 and 20 only
    assert counter.after_runs == [10, 20]
    # host_call ran at every one of the 20 steps, with that step's loss: TF 2.15's per-step losses
    assert [r[0] for r in records] == ["train"] * 20 and {r[2] for r in records} == {models.TRAIN_BATCH}
    np.testing.assert_allclose([r[1] for r in records], LOSSES_20, rtol=0, atol=1e-6)
    state = tf.train.get_checkpoint_state(est.model_dir)
    assert [p.rsplit("-", 1)[1] for p in state.all_model_checkpoint_paths] == ["0", "10", "20"]
    # a loop is cut short to stop exactly at steps / max_steps
    est.train(models.train_input_fn, steps=3, hooks=[counter])
    assert counter.after_runs[-1] == 23 and int(est.get_variable_value("global_step")) == 23
    records.clear()
    result = est.evaluate(models.eval_input_fn)
    assert [(r[0], r[2]) for r in records] == [("eval", 4), ("eval", 4), ("eval", 2)]
    np.testing.assert_allclose(result["loss"], np.mean([r[1] for r in records]), rtol=1e-6)
    records.clear()
    assert len(list(est.predict(models.predict_input_fn))) == 7 and records == []  # ignored in PREDICT


def test_npu_host_call_writes_summaries(tmp_path: Any) -> None:
    logdir = str(tmp_path / "host")

    def host_fn(step: Any, loss: Any) -> Any:
        with tf.compat.v2.summary.create_file_writer(logdir).as_default():
            with tf.compat.v2.summary.record_if(True):
                tf.compat.v2.summary.scalar("host_loss", loss, step=step)
                return tf.compat.v1.summary.all_v2_summary_ops()

    def model_fn(features: Any, labels: Any, mode: str) -> Any:
        loss = tf.compat.v1.losses.mean_squared_error(labels, models.linear(features))
        step = tf.compat.v1.train.get_global_step()
        train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        return tf_bridge.NPUEstimatorSpec(
            mode, loss=loss, train_op=train_op, host_call=(host_fn, [step, loss])
        )

    config = tf_bridge.NPURunConfig(iterations_per_loop=2, model_dir=str(tmp_path / "model"))
    tf_bridge.NPUEstimator(model_fn, config=config).train(models.train_input_fn, steps=4)
    steps = []
    for path in tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            steps += [event.step for v in event.summary.value if v.tag == "host_loss"]
    assert sorted(steps) == [0, 1, 2, 3]  # the step each step started from, once per step


def test_wrong_spec_type_is_a_runtime_error_in_train(tmp_path: Any) -> None:
    config = tf_bridge.NPURunConfig(model_dir=str(tmp_path))
    est = tf_bridge.NPUEstimator(lambda features, labels: "spec", config=config)
    with pytest.raises(RuntimeError, match="NPUEstimatorSpec"):
        est.train(models.train_input_fn, steps=1)


def _run_manager(manager_fn: Any, finite_flags: list[bool]) -> list[tuple[float, int, int]]:
    """(loss scale, good steps, bad steps) after each update."""
    with tf.Graph().as_default():
        manager = manager_fn()
        flag = tf.compat.v1.placeholder(tf.bool, [])
        update = manager.update_loss_scale(flag)
        counts = [getattr(manager, a, tf.constant(0)) for a in ("_num_good_steps", "_num_bad_steps")]
        state = [manager.get_loss_scale()] + counts
        out = []
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for f in finite_flags:
                session.run(update, {flag: f})
                scale, good, bad = session.run(state)
                out.append((float(scale), int(good), int(bad)))
    return out


def test_exponential_update_loss_scale_rule() -> None:
    flags = [True, True, True, False, True, False, False, True, True]
    got = _run_manager(
        lambda: npu.ExponentialUpdateLossScaleManager(
            init_loss_scale=2.0**4,
            incr_every_n_steps=3,
            decr_every_n_nan_or_inf=2,
            incr_ratio=2,
            decr_ratio=0.5,
        ),
        flags,
    )
    # by hand: grow after 3 good in a row; shrink after 2 bad (not nec. consecutive); resets
    assert got == [
        (16.0, 1, 0),
        (16.0, 2, 0),
        (32.0, 0, 0),
        (32.0, 0, 1),
        (32.0, 1, 1),
        (16.0, 0, 0),
        (16.0, 0, 1),
        (16.0, 1, 1),
        (16.0, 2, 1),
    ]
    floor = _run_manager(
        lambda: npu.ExponentialUpdateLossScaleManager(1.5, 100, 1, decr_ratio=0.5), [False] * 2
    )
    assert floor == [(1.0, 0, 0), (1.0, 0, 0)]  # never below 1
    top = _run_manager(lambda: npu.ExponentialUpdateLossScaleManager(3e38, 1), [True])
    assert top[0][0] == pytest.approx(3e38, rel=1e-6)  # growth would overflow float32: kept
    assert _run_manager(lambda: npu.FixedLossScaleManager(8.0), [False])[0][0] == 8.0
    with pytest.raises(ValueError, match="loss_scale"):
        npu.FixedLossScaleManager(0.5)


def test_loss_scale_optimizer_skips_non_finite_steps() -> None:
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [])
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.constant_initializer(1.0))
        step = tf.compat.v1.train.create_global_step()
        manager = npu.ExponentialUpdateLossScaleManager(init_loss_scale=4.0, incr_every_n_steps=1000)
        opt = npu.NPULossScaleOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5), manager)
        train_op = opt.minimize(w * x, global_step=step)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(train_op, {x: 2.0})  # grad 2 (unscaled), w = 1 - 0.5 * 2
            assert session.run([w, step]) == [0.0, 1]
            session.run(train_op, {x: np.inf})  # overflow: no update, no step
            assert session.run([w, step]) == [0.0, 1]
    with pytest.raises(ValueError, match="loss_scale_manager"):
        npu.NPUOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), is_loss_scale=True)


def test_distributed_optimizer_is_the_identity_on_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", [2], initializer=tf.compat.v1.constant_initializer([1.0, 2.0]))
        loss = tf.reduce_sum(w * w)
        plain = tf.compat.v1.train.GradientDescentOptimizer(0.1)
        wrapped = tf_bridge.NPUDistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1))
        assert wrapped.get_name() == "DistributedGradientDescentOptimizer"
        grads = wrapped.compute_gradients(loss)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            np.testing.assert_array_equal(
                session.run(grads[0][0]), session.run(plain.compute_gradients(loss)[0][0])
            )
        monkeypatch.setenv("RANK_SIZE", "8")
        with pytest.raises(RuntimeError, match="RANK_SIZE"):
            wrapped.compute_gradients(loss)


def test_hands_over_to_npu_bridge_when_it_imports(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """With an ``npu_bridge`` importable, NPUEstimator returns the adapter's estimator,
    built from the translated config, whose model_fn yields the adapter's spec type."""
    made: dict[str, Any] = {}

    class AdapterSpec:
        def __init__(self, **fields: Any) -> None:
            self.fields = fields

    class AdapterConfig:
        def __init__(self, **kwargs: Any) -> None:
            made["config"] = kwargs

    class AdapterEstimator:
        def __init__(self, **kwargs: Any) -> None:
            made["estimator"] = kwargs

    estimator_mod = types.SimpleNamespace(NPUEstimator=AdapterEstimator, NPUEstimatorSpec=AdapterSpec)
    config_mod = types.SimpleNamespace(NPURunConfig=AdapterConfig)
    package = types.ModuleType("npu_bridge.estimator.npu")
    package.npu_estimator, package.npu_config = estimator_mod, config_mod
    for name, module in (
        ("npu_bridge", types.ModuleType("npu_bridge")),
        ("npu_bridge.estimator", types.ModuleType("npu_bridge.estimator")),
        ("npu_bridge.estimator.npu", package),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    config = tf_bridge.NPURunConfig(
        iterations_per_loop=5, model_dir=str(tmp_path), precision_mode="force_fp16"
    )
    est = tf_bridge.NPUEstimator(npu_model_fn([]), config=config, job_start_file="job.json")
    assert isinstance(est, AdapterEstimator)
    assert made["config"]["iterations_per_loop"] == 5 and made["config"]["precision_mode"] == "force_fp16"
    assert "jit_compile" not in made["config"]  # options not given stay the adapter's own defaults
    assert made["estimator"]["job_start_file"] == "job.json"
    with tf.Graph().as_default():
        tf.compat.v1.train.create_global_step()
        features, labels = {"x": tf.zeros([2, 3])}, tf.zeros([2, 1])
        spec = made["estimator"]["model_fn"](features, labels, M.EVAL, {}, None)
    assert isinstance(spec, AdapterSpec) and spec.fields["host_call"] is not None
    assert spec.fields["mode"] == M.EVAL
