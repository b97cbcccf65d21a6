"""Dynamic loss scaling on the JAX side: the managers' rule against a hand recurrence in
numpy, LossScaleOptimizer's finite and non-finite steps, the flag reduced over
TPUEstimator's replicas, the ``loss_scale`` summary, and NPUEstimator's precision policy.
(tests/test_tf_loss_scale.py runs the same history through tf_bridge's managers.)"""

from __future__ import annotations

import logging
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

import jaxspec
from jaxspec.train_utils.loss_scale import LossScaleState

#: (init_loss_scale, incr_every_n_steps, decr_every_n_nan_or_inf, incr_ratio, decr_ratio)
CASES = [(2.0**15, 3, 2, 2.0, 0.5), (1.5, 2, 1, 3.0, 0.8), (3e38, 1, 2, 2.0, 0.8), (100.0, 4, 3, 2.0, 0.8)]


def history(n: int = 60, seed: int = 0) -> list[bool]:
    """Finite (True) / non-finite (False) steps: runs of both, to reach every branch."""
    rng = np.random.default_rng(seed)
    return [bool(v) for v in rng.random(n) < 0.7]


def hand_scales(
    case: tuple[float, int, int, float, float], flags: list[bool]
) -> list[tuple[float, int, int]]:
    """(scale, good, bad) after each step, by the adapter's rule written out in numpy."""
    init, incr_n, decr_n, incr_ratio, decr_ratio = case
    scale, good, bad, out = np.float32(init), 0, 0, []
    for finite in flags:
        if finite and good + 1 >= incr_n:
            if scale < np.float32(3.4e38 / incr_ratio):
                scale = np.float32(scale * np.float32(incr_ratio))
            good = bad = 0
        elif finite:
            good += 1
        elif bad + 1 >= decr_n:
            scale, good, bad = max(np.float32(1.0), np.float32(scale * np.float32(decr_ratio))), 0, 0
        else:
            good, bad = 0, bad + 1
        out.append((float(scale), good, bad))
    return out


def jax_scales(manager: Any, flags: list[bool]) -> list[tuple[float, int, int]]:
    def body(state: LossScaleState, finite: Any) -> Any:
        state = manager.update_loss_scale(state, finite)
        return state, state

    _, states = jax.jit(lambda f: jax.lax.scan(body, manager.init(), f))(jnp.asarray(flags))
    return [(float(s), int(g), int(b)) for s, g, b in zip(*states, strict=True)]


@pytest.mark.parametrize("case", CASES)
def test_exponential_manager_equals_the_hand_recurrence(case: Any) -> None:
    flags = history() + [True] * 9 + [False] * 8  # long runs: growth and the floor of 1
    got = jax_scales(jaxspec.ExponentialUpdateLossScaleManager(*case), flags)
    assert got == hand_scales(case, flags)


def test_fixed_manager_and_argument_checks() -> None:
    assert {s for s, _, _ in jax_scales(jaxspec.FixedLossScaleManager(8.0), history(10))} == {8.0}
    with pytest.raises(ValueError, match="loss_scale"):
        jaxspec.FixedLossScaleManager(0.5)
    with pytest.raises(ValueError, match="incr_every_n_steps"):
        jaxspec.ExponentialUpdateLossScaleManager(8.0, 0)
    for bad in (float("nan"), float("inf")):  # a NaN scale would skip every step, for ever
        with pytest.raises(ValueError, match="loss_scale"):
            jaxspec.FixedLossScaleManager(bad)
    for bad in (0.0, -4.0, float("nan")):
        with pytest.raises(ValueError, match="init_loss_scale"):
            jaxspec.ExponentialUpdateLossScaleManager(bad, 2)
    with pytest.raises(ValueError, match="decr_ratio"):
        jaxspec.ExponentialUpdateLossScaleManager(8.0, 2, decr_ratio=float("nan"))
    with pytest.raises(TypeError, match="decr_every_n_nan_or_inf"):
        jaxspec.ExponentialUpdateLossScaleManager(8.0, 2, decr_every_n_nan_or_inf=1.5)
    with pytest.raises(TypeError, match="inner"):
        jaxspec.LossScaleOptimizer(object(), jaxspec.FixedLossScaleManager(2.0))
    with pytest.raises(ValueError, match="holds no LossScaleOptimizer"):
        jaxspec.current_loss_scale(optax.adam(0.1).init({"w": jnp.zeros(2)}))


def test_optimizer_unscales_skips_non_finite_steps_and_follows_the_rule() -> None:
    manager = jaxspec.ExponentialUpdateLossScaleManager(64.0, incr_every_n_steps=2, decr_ratio=0.5)
    tx = jaxspec.LossScaleOptimizer(optax.adam(0.1), manager)
    assert isinstance(tx, optax.GradientTransformation)
    params = {"w": jnp.array([1.0, -2.0]), "b": jnp.float32(0.5)}
    state = tx.init(params)
    ref = optax.adam(0.1)
    ref_state = ref.init(params)
    update = jax.jit(tx.update)
    grads_seq = [
        {"w": np.array([0.3, -0.1]), "b": np.float32(0.2)},
        {"w": np.array([np.inf, 0.0]), "b": np.float32(0.1)},
        {"w": np.array([0.5, 0.2]), "b": np.float32(-0.3)},
        {"w": np.array([0.1, np.nan]), "b": np.float32(0.0)},
        {"w": np.array([0.2, 0.2]), "b": np.float32(0.1)},
    ]
    flags = [bool(np.isfinite(g["w"]).all()) for g in grads_seq]
    want_scales = [s for s, _, _ in hand_scales((64.0, 2, 2, 2.0, 0.5), flags)]
    for grads, finite, want_scale in zip(grads_seq, flags, want_scales, strict=True):
        scale = float(jaxspec.current_loss_scale(state))
        assert float(tx.scale_loss(jnp.float32(3.0), state)) == 3.0 * scale
        scaled = jax.tree.map(lambda g, k=scale: jnp.asarray(g, jnp.float32) * k, grads)  # d(scale * loss)
        updates, state = update(scaled, state, params)
        if finite:
            want, ref_state = ref.update(jax.tree.map(jnp.asarray, grads), ref_state, params)
            for k in params:
                np.testing.assert_allclose(updates[k], want[k], rtol=1e-6)
        else:
            assert all(float(jnp.abs(u).max()) == 0.0 for u in jax.tree.leaves(updates))
        # the inner state is adam's after the finite steps only
        assert int(state.inner_state[0].count) == int(ref_state[0].count)
        params = optax.apply_updates(params, updates)
        assert float(jaxspec.current_loss_scale(state)) == want_scale
    assert want_scales == [64.0, 64.0, 64.0, 32.0, 32.0]  # the history reaches growth's count reset


# -- under TPUEstimator: one replica's overflow skips the step everywhere ------------------------
def _model_fn(features, labels, mode, params, state):
    def loss_fn(p):
        return jnp.mean(features["x"] @ p["w"])

    tx = state.tx
    grads = jax.grad(lambda p: tx.scale_loss(loss_fn(p), state.opt_state))(state.params)
    return jaxspec.TPUEstimatorSpec(
        mode, loss=loss_fn(state.params), train_op=state.apply_gradients(grads=grads)
    )


def _init_fn() -> Any:
    manager = jaxspec.ExponentialUpdateLossScaleManager(
        1024.0, incr_every_n_steps=2, decr_every_n_nan_or_inf=1
    )
    tx = jaxspec.LossScaleOptimizer(jaxspec.CrossShardOptimizer(optax.sgd(0.5)), manager)
    return train_state.TrainState.create(apply_fn=None, params={"w": jnp.ones((3,), jnp.float32)}, tx=tx)


def read_scalars(logdir: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of ``tag`` in logdir's event files, read as TFRecords of Event
    protos (without TensorBoard's loader, which imports TensorFlow)."""
    import glob
    import struct

    from tensorboard.compat.proto import event_pb2

    out = []
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        data, at = open(path, "rb").read(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
            at += 16 + length
            out += [(event.step, v.simple_value) for v in event.summary.value if v.tag == tag]
    return sorted(out)


def test_tpu_estimator_skips_an_overflow_on_any_replica_and_writes_loss_scale(tmp_path: Any) -> None:
    x = np.full((4, 16, 3), 0.25, np.float32)  # 4 steps of 16 rows: 2 per replica
    x[1, 5, 0] = np.inf  # step 2: one row of replica 2 overflows
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path), save_summary_steps=1, log_step_count_steps=None, save_checkpoints_steps=None
    )
    est = jaxspec.TPUEstimator(_model_fn, config=config, train_batch_size=16, init_fn=_init_fn)
    est.train(lambda params: iter([({"x": x[i]}, None) for i in range(4)]), max_steps=4)
    # finite steps 1, 3, 4 apply sgd on the mean gradient 0.25; step 2 changes nothing
    np.testing.assert_allclose(est.get_variable_value("params/w"), 1.0 - 3 * 0.5 * 0.25, rtol=1e-6)
    got = read_scalars(str(tmp_path), "loss_scale")
    # grow every 2 finite steps, shrink (x 0.8) at each overflow: the scale after each step
    assert got == [
        (s, pytest.approx(v)) for s, v in zip([1, 2, 3, 4], [1024.0, 819.2, 819.2, 1638.4], strict=True)
    ]
    assert [step for step, _ in read_scalars(str(tmp_path), "loss")] == [1, 2, 3, 4]


# -- NPUEstimator: precision_mode gives model_fn a Policy ------------------------------------
def _npu_model_fn(cast: bool, seen: list[Any]):
    def model_fn(features, labels, mode, params, config, state):
        policy = params.get("precision_policy")
        seen.append((policy, config.precision_policy))

        def loss_fn(p):
            x, w = features["x"], p["w"]
            if cast and policy is not None:
                x, w = policy.cast_to_compute((x, w))
            return jnp.mean((x @ w).astype(jnp.float32) - labels) ** 2

        loss, grads = jax.value_and_grad(loss_fn)(state["params"])
        new = {"params": jax.tree.map(lambda p, g: p - 0.1 * g, state["params"], grads)}
        return jaxspec.EstimatorSpec(mode, loss=loss, train_op=new)

    return model_fn


def _npu_train(tmp_path: Any, name: str, precision_mode: str | None, cast: bool) -> list[Any]:
    seen: list[Any] = []
    config = jaxspec.NPURunConfig(
        model_dir=os.path.join(str(tmp_path), name), precision_mode=precision_mode, log_step_count_steps=None
    )
    est = jaxspec.NPUEstimator(
        _npu_model_fn(cast, seen),
        config=config,
        params={},
        init_fn=lambda: {"params": {"w": jnp.ones((3, 1), jnp.float32)}},
    )
    data = [({"x": np.ones((4, 3), np.float32)}, np.zeros((4, 1), np.float32))] * 2
    est.train(lambda: iter(data), max_steps=2)
    assert est.get_variable_value("params/w").dtype == np.float32  # parameters stay float32
    return seen


def test_npu_precision_mode_gives_a_policy_and_warns_once_without_a_cast(tmp_path: Any, caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="jaxspec")
    seen = _npu_train(tmp_path, "uncast", "allow_mix_precision_bf16", cast=False)
    policy, from_config = seen[0]
    assert policy == from_config == jaxspec.train_utils.mixed_precision.Policy(jnp.bfloat16)
    assert policy.param_dtype == jnp.float32
    warned = [r for r in caplog.records if "cannot cast a model by itself" in r.getMessage()]
    assert len(warned) == 1 and "bfloat16" in warned[0].getMessage()
    caplog.clear()
    _npu_train(tmp_path, "cast", "allow_mix_precision", cast=True)  # float16, and cast: silent
    assert not [r for r in caplog.records if "cannot cast" in r.getMessage()]
    seen = _npu_train(tmp_path, "fp32", "force_fp32", cast=False)
    assert seen[0] == (None, None)
