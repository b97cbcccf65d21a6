"""TPUConfig(replica_axis_name=...): a flax-style train step that names its data-parallel
axis itself (``lax.pmean(grads, 'batch')``, ``BatchNorm(axis_name='batch')``) runs in a
TPUEstimator model_fn unchanged, and trains what the default ``'replica'`` run and a
one-device run over the whole batch train."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

import jaxspec
from tests.helpers import batches_input_fn, digits


class _BNNet(nn.Module):
    axis_name: str | None

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        x = nn.Dense(16)(x)
        x = nn.BatchNorm(use_running_average=not train, axis_name=self.axis_name, momentum=0.5)(x)
        return nn.Dense(10)(nn.tanh(x))


class _State(train_state.TrainState):
    batch_stats: Any = None


def _init_fn(features: Any) -> _State:
    variables = _BNNet(None).init(jax.random.PRNGKey(0), jnp.asarray(features["x"][:1]), train=False)
    return _State.create(
        apply_fn=None, params=variables["params"], batch_stats=variables["batch_stats"], tx=optax.sgd(0.3)
    )


def _cross_shard_init_fn(features: Any) -> _State:
    state = _init_fn(features)
    return state.replace(tx=jaxspec.CrossShardOptimizer(optax.sgd(0.3)), opt_state=state.opt_state)


def _model_fn(axis: str | None, reduce_grads: bool):
    """Flax's own pattern: BatchNorm over ``axis`` and (``reduce_grads``) a pmean of the
    gradients over it; ``axis`` None is the one-device step."""

    def model_fn(features, labels, mode, params, state):
        def loss_fn(p):
            logits, updates = _BNNet(axis).apply(
                {"params": p, "batch_stats": state.batch_stats},
                features["x"],
                train=True,
                mutable=["batch_stats"],
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, updates

        (loss, updates), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        if axis is not None:
            loss = jax.lax.pmean(loss, axis_name=axis)
            if reduce_grads:
                grads = jax.lax.pmean(grads, axis_name=axis)
        new = state.apply_gradients(grads=grads).replace(batch_stats=updates["batch_stats"])
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=new)

    return model_fn


def _config(model_dir: str, **tpu: Any) -> jaxspec.RunConfig:
    return jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=2, **tpu),
    )


def _train(est, x, y, batch: int) -> dict[str, np.ndarray]:
    """Six steps of ``batch``-row input batches; the checkpoint's leaves by name."""
    est.train(batches_input_fn(x, y, batch, repeat=True), steps=6)
    store = est._checkpoint_store()
    restored = store._manager.restore(store.latest_step())
    from jaxspec._trees import named_leaves

    return {name: np.asarray(v) for name, v in named_leaves(restored)}


@pytest.mark.parametrize("cross_shard", [False, True])
def test_batch_axis_matches_replica_axis_and_one_device(tmp_path, cross_shard):
    x, y = digits(32 * 6)
    init = _cross_shard_init_fn if cross_shard else _init_fn
    runs = {}
    for axis in ("batch", "replica"):
        tpu = {} if axis == "replica" else {"replica_axis_name": axis}
        est = jaxspec.TPUEstimator(
            _model_fn(axis, reduce_grads=not cross_shard),
            config=_config(str(tmp_path / axis), **tpu),
            train_batch_size=32,
            init_fn=init,
        )
        runs[axis] = _train(est, x, y, 32)
        assert est._mesh().axis_names == (axis,) and est._mesh().size == 8
    one = jaxspec.TPUEstimator(
        _model_fn(None, reduce_grads=False),
        config=_config(str(tmp_path / "one")),
        use_tpu=False,
        train_batch_size=32,
        init_fn=_init_fn,
    )
    runs["one"] = _train(one, x, y, 32)

    names = [n for n in runs["one"] if "params" in n or "batch_stats" in n]
    assert any("batch_stats" in n and "mean" in n for n in names)
    for name in names:
        np.testing.assert_allclose(runs["batch"][name], runs["replica"][name], atol=1e-6, err_msg=name)
        # BatchNorm's pmean of 8 replicas' statistics is the statistics of the whole batch.
        np.testing.assert_allclose(runs["batch"][name], runs["one"][name], atol=2e-5, err_msg=name)
    assert np.ptp(runs["one"]["params/Dense_0/kernel"]) > 0


def test_replica_axis_name_is_checked():
    assert jaxspec.TPUConfig().replica_axis_name == "replica"
    for bad in ("", "core", 3):
        with pytest.raises(ValueError, match="replica_axis_name"):
            jaxspec.TPUConfig(replica_axis_name=bad)


def test_batch_axis_with_model_parallelism_and_partitioned_input(tmp_path):
    """On a ('batch', 'core') mesh the input is split over 'batch' and, with
    input_partition_dims, over 'core': the step still sees its rows."""
    x, y = digits(16 * 4)
    seen = []

    def model_fn(features, labels, mode, params, state):
        seen.append(jax.lax.axis_size("batch"))
        return _model_fn("batch", reduce_grads=True)(features, labels, mode, params, state)

    est = jaxspec.TPUEstimator(
        model_fn,
        config=_config(
            str(tmp_path),
            replica_axis_name="batch",
            num_cores_per_replica=2,
            per_host_input_for_training=jaxspec.InputPipelineConfig.PER_HOST_V2,
            input_partition_dims=[{"x": [1, 2]}, None],
        ),
        train_batch_size=16,
        init_fn=_init_fn,
    )
    out = _train(est, x, y, 4)  # PER_HOST_V2: input_fn gives one replica's rows
    assert est._mesh().axis_names == ("batch", "core") and seen == [4]
    assert all(np.isfinite(v).all() for v in out.values() if v.dtype.kind == "f")
