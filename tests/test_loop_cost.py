"""XLA's cost of each compiled training loop in model_dir's event file: a step's FLOPs
(``perf/flops_per_step``, checked against a single step compiled here and 6 x params x
batch for an MLP), ``memory/*`` (the compiled loops' ``memory_analysis()``), ``perf/mfu``
with ``RunConfig(peak_flops_per_device=)``, and the device table."""

from __future__ import annotations

import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import jaxspec
from jaxspec.hooks.estimator_hooks import ProgressHook
from jaxspec.loop_cost import LoopCost, read_cost, table_peak_flops

SIZES, BATCH = (64, 256, 256, 8), 32
TX = optax.sgd(0.01)


def _params():
    keys = jax.random.split(jax.random.PRNGKey(0), len(SIZES) - 1)
    return [
        (jax.random.normal(k, (a, b), jnp.float32) / np.sqrt(a), jnp.zeros(b, jnp.float32))
        for k, a, b in zip(keys, SIZES[:-1], SIZES[1:], strict=True)
    ]


def _loss(params, x, y):
    for i, (w, b) in enumerate(params):
        x = x @ w + b
        x = jax.nn.relu(x) if i < len(params) - 1 else x
    return jnp.mean((x - y) ** 2)


def _step(state, x, y):
    """One training step, as model_fn's: the loss, its gradient and the sgd update."""
    loss, grads = jax.value_and_grad(_loss)(state["params"], x, y)
    updates, opt = TX.update(grads, state["opt"], state["params"])
    return {"params": optax.apply_updates(state["params"], updates), "opt": opt}, loss


def init_fn():
    params = _params()
    return {"params": params, "opt": TX.init(params)}


def model_fn(features, labels, mode, state, params):
    new, loss = _step(state, features["x"], labels)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op=new)


def input_fn(params=None):
    rng = np.random.default_rng(0)
    batch = (params or {}).get("batch_size", BATCH)
    x = rng.normal(size=(batch, SIZES[0])).astype(np.float32)
    y = rng.normal(size=(batch, SIZES[-1])).astype(np.float32)
    return ((({"x": x}, y)) for _ in range(1000))


def _events(logdir):
    acc = EventAccumulator(logdir)
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def _single_step_flops(batch):
    state = init_fn()
    x = jnp.zeros((batch, SIZES[0]), jnp.float32)
    y = jnp.zeros((batch, SIZES[-1]), jnp.float32)
    return jax.jit(_step).lower(state, x, y).compile().cost_analysis()["flops"]


def test_flops_memory_and_mfu_of_a_grouped_estimator(tmp_path, caplog):
    peak = 1e12
    config = jaxspec.RunConfig(
        save_summary_steps=5, log_step_count_steps=5, peak_flops_per_device=peak, save_checkpoints_secs=None
    )
    est = jaxspec.Estimator(model_fn, str(tmp_path), config=config, init_fn=init_fn)
    with caplog.at_level(logging.INFO, logger="jaxspec"):
        est.train(input_fn, steps=12)
    events = _events(str(tmp_path))
    single = _single_step_flops(BATCH)
    flops = events["perf/flops_per_step"]
    params = sum(w.size + b.size for w, b in _params())
    for _, value in flops:
        assert value == pytest.approx(single, rel=0.01)  # a scan's body counted once: one step
        assert 0.5 < value / (6 * params * BATCH) < 2
    # every compiled loop's memory_analysis() (one: the block loop), once, at a summary step
    cache = est._compile_cache.modes["train"]
    compiled = [*cache.compiled.values(), *cache.compiled_keep.values(), *cache.compiled_block.values()]
    assert len(compiled) == 1 and [s for s, _ in flops] == [1]
    want = sorted(
        tuple(
            getattr(c.memory_analysis(), f"{n}_size_in_bytes")
            for n in ("argument", "output", "temp", "alias")
        )
        for c in compiled
    )
    got = sorted(
        tuple(dict(events[f"memory/{n}_bytes"])[s] for n in ("argument", "output", "temp", "alias"))
        for s, _ in flops
    )
    assert len(flops) == len(compiled) and got == want
    assert len(re.findall(r"^Compiled a training loop", "\n".join(caplog.messages), re.M)) == len(compiled)
    rates, mfu = events["global_step/sec"], events["perf/mfu"]
    assert [s for s, _ in mfu] == [s for s, _ in rates] == [6, 11]
    for (_, rate), (_, m) in zip(rates, mfu, strict=True):
        assert m == pytest.approx(flops[-1][1] * rate / peak, rel=1e-6)
    # a later call compiles nothing: no perf/ or memory/ summaries, the MFU from the first's cost
    est.train(input_fn, steps=12)
    later = _events(str(tmp_path))
    assert [s for s, _ in later["perf/flops_per_step"]] == [s for s, _ in flops]
    assert [s for s, _ in later["perf/mfu"]] == [6, 11, 18, 23]


def test_a_mesh_loop_counts_every_device_and_cpu_has_no_mfu(tmp_path):
    config = jaxspec.RunConfig(
        save_summary_steps=3,
        log_step_count_steps=3,
        save_checkpoints_secs=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=3),
    )
    est = jaxspec.TPUEstimator(
        model_fn, str(tmp_path), config=config, train_batch_size=8 * 8, init_fn=init_fn, use_tpu=True
    )
    est.train(input_fn, steps=9)
    events = _events(str(tmp_path))
    ((step, flops),) = events["perf/flops_per_step"]
    # 8 devices x 8 rows: one device's FLOPs x 8, so the update each replica repeats on
    # its copy of the parameters counts 8 times (~4% of this step)
    single = _single_step_flops(64)
    assert step == 1 and single < flops < 1.05 * single
    assert "perf/mfu" not in events  # CPU: no table peak
    rates, examples = events["global_step/sec"], events["examples/sec"]
    assert [s for s, _ in rates] == [s for s, _ in examples] == [6, 9]
    for (_, r), (_, e) in zip(rates, examples, strict=True):
        assert e == pytest.approx(64 * r, rel=1e-6)


class _NoAnalysis:
    def cost_analysis(self):
        raise NotImplementedError("no cost analysis here")

    def memory_analysis(self):
        return None


def test_a_backend_without_analysis_is_named_once(tmp_path):
    device = type("D", (), {"device_kind": "Fancy", "platform": "fancy"})()
    cost = read_cost(_NoAnalysis(), 4, [device, device])
    assert cost == LoopCost(4, None, None, None, None, None, 2, "Fancy", "fancy") and not cost.analysed
    lines = []
    hook = ProgressHook(str(tmp_path), 1, None, None, lambda msg, *a, **k: lines.append(msg % a))
    hook.after_compile(cost, 0)
    hook.after_compile(cost, 4)
    assert len(lines) == 1 and "fancy" in lines[0]


def test_peak_table_and_the_config_field():
    assert table_peak_flops("TPU v5 lite", "tpu") == 197e12
    assert table_peak_flops("TPU v4", "tpu") == 275e12
    assert table_peak_flops("NVIDIA H100 80GB HBM3", "gpu") == 989e12
    assert table_peak_flops("NVIDIA H100 PCIe", "gpu") == 756e12
    assert table_peak_flops("NVIDIA A100-SXM4-40GB", "gpu") == 312e12
    assert table_peak_flops("cpu", "cpu") is None and table_peak_flops("Tesla T4", "gpu") is None
    assert jaxspec.RunConfig().peak_flops_per_device is None
    assert jaxspec.RunConfig().replace(peak_flops_per_device=2e14).peak_flops_per_device == 2e14
    with pytest.raises(ValueError, match="peak_flops_per_device"):
        jaxspec.RunConfig(peak_flops_per_device=0)
    with pytest.raises(TypeError, match="peak_flops_per_device"):
        jaxspec.RunConfig(peak_flops_per_device="fast")
