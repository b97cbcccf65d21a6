"""flax.nnx as the state: typed PRNG keys in the state export (they stay out of the
serving graph), nnx sharding metadata lays the state out over 'core' as linen's boxes do,
and examples/nnx_digits.py runs end to end, small."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

import jaxspec
from jaxspec._trees import named_leaves

tf = pytest.importorskip("tensorflow")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _saved_variables(export_dir: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(f"{export_dir}/variables/variables")
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_nnx_example_trains_exports_and_serves(tmp_path):
    """Run as a user runs it (a fresh process, TF_CPP_MIN_LOG_LEVEL unset): it trains,
    exports and serves; its stderr holds none of TensorFlow's C++ start-up lines."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    run = subprocess.run(
        [sys.executable, "examples/nnx_digits.py", "--model_dir", str(tmp_path), "--steps", "20"]
        + ["--examples", "300"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert out["gap"] <= 1e-5  # TF serving the SavedModel == jaxspec's predict
    assert out["metrics"]["global_step"] == 20 and out["metrics"]["accuracy"] > 0.5
    assert "absl::InitializeLog" not in run.stderr
    assert "is deprecated" not in run.stderr  # TF's notices about tf_bridge's own TF1 calls
    assert not [ln for ln in run.stderr.splitlines() if ln.startswith("I0000")], run.stderr[-3000:]
    names = set(_saved_variables(out["export_dir"]))
    # PREDICT (deterministic Dropout) reads the model's parameters only: the Dropout's
    # key and counter and the optimizer's state hold no variable of the serving export.
    params = {f"model/{layer}/{p}/value" for layer in ("hidden", "out") for p in ("kernel", "bias")}
    assert names == params | {"global_step"}


def test_typed_key_leaf_in_any_state_exports(tmp_path):
    """A plain state with a ``jax.random.key`` leaf: the serving function still gets the
    key (as a constant) and the SavedModel serves what JAX computes."""
    import jax
    import jax.numpy as jnp

    import tf_bridge
    from jaxspec.export import PredictOutput

    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    state = {"w": jnp.asarray(w), "rng": jax.random.key(7)}

    def serving_fn(st, features):
        noise = jax.random.uniform(st["rng"], (2,))  # uses the key: it must arrive intact
        return {"out": {"y": features["x"] @ st["w"] + noise}}

    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 3], tf.float32)})
    path = tf_bridge.export_saved_model(
        str(tmp_path), receiver, serving_fn, state, {"out": PredictOutput({"y": jnp.zeros((1, 2))})}
    ).decode()
    assert set(_saved_variables(path)) == {"w"}
    x = np.ones((4, 3), np.float32)
    served = tf.saved_model.load(path).signatures["out"](x=tf.constant(x))["y"].numpy()
    expected = x @ w + np.asarray(jax.random.uniform(jax.random.key(7), (2,)))
    np.testing.assert_allclose(served, expected, rtol=1e-6)


class _Sharded(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), (None, "core"))
        self.lin = nnx.Linear(64, 32, kernel_init=init, rngs=rngs)
        self.out = nnx.Linear(32, 10, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.lin(x)))


def _sharded_init():
    model = _Sharded(nnx.Rngs(0))
    return {"model": model, "opt": nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)}


def _sharded_model_fn(features, labels, mode, params, state):
    model, opt = state["model"], state["opt"]

    def loss_of(m):
        return optax.softmax_cross_entropy_with_integer_labels(m(features["x"]), labels).mean()

    loss, grads = nnx.value_and_grad(loss_of)(model)
    opt.update(model, grads)
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op={"model": model, "opt": opt})


def test_nnx_sharding_metadata_lays_the_state_out_over_core(tmp_path):
    x = np.random.RandomState(0).rand(64, 64).astype(np.float32)
    y = (np.arange(64) % 10).astype(np.int32)
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path),
        log_step_count_steps=None,
        save_summary_steps=0,
        tpu_config=jaxspec.TPUConfig(num_cores_per_replica=2),
    )
    est = jaxspec.TPUEstimator(_sharded_model_fn, config=config, train_batch_size=16, init_fn=_sharded_init)

    def input_fn(params):
        b = params["batch_size"]
        return iter([({"x": x[i : i + b]}, y[i : i + b]) for i in range(0, 64, b)] * 2)

    est.train(input_fn, steps=3)
    specs = {n: v.sharding.spec for n, v in named_leaves(est._compile_cache.live.state)}
    kernel = [n for n in specs if n.startswith("model/lin/kernel")]
    assert kernel and all(specs[n] == P(None, "core") for n in kernel)
    # Adam's slots of the kernel follow it (their Variables carry the same metadata).
    slots = [n for n in specs if n.startswith("opt/") and "lin/kernel" in n]
    assert len(slots) == 2 and all(specs[n] == P(None, "core") for n in slots)
    assert all(specs[n] == P() for n in specs if "out/kernel" in n)
    # Each device holds half of the kernel's columns.
    live = dict(named_leaves(est._compile_cache.live.state))[kernel[0]]
    assert {s.data.shape for s in live.addressable_shards} == {(64, 16)}
