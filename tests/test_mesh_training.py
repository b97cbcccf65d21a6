"""TPUEstimator on 8 replicas versus one device; host_call once per step, in order."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxspec
from tests.helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn


def _final_params(est):
    store = est._checkpoint_store()
    meta = store._manager.item_metadata(store.latest_step())
    from jaxspec._trees import named_leaves

    restored = store._manager.restore(store.latest_step())
    return dict(named_leaves(restored)), [n for n, _ in named_leaves(meta)]


def test_eight_replicas_match_one_device(tmp_path):
    x, y = digits(64 * 4)
    tpu_calls, cpu_calls = [], []
    tpu = jaxspec.TPUEstimator(
        make_model_fn(tpu_calls),
        config=fast_config(str(tmp_path / "tpu"), 3),
        train_batch_size=64,
        init_fn=init_fn,
    )
    one = jaxspec.Estimator(
        make_model_fn(cpu_calls, as_estimator_spec=True),
        config=fast_config(str(tmp_path / "one")),
        init_fn=init_fn,
    )
    tpu.train(batches_input_fn(x, y, 64, repeat=True), steps=10)
    one.train(batches_input_fn(x, y, 64, repeat=True), steps=10)

    tpu_params, names = _final_params(tpu)
    one_params, _ = _final_params(one)
    assert any("kernel" in n for n in names)
    for name in names:
        np.testing.assert_allclose(tpu_params[name], one_params[name], atol=1e-5, rtol=0, err_msg=name)

    assert len(tpu_calls) == len(cpu_calls) == 10
    for (tpu_step, tpu_loss), (one_step, one_loss) in zip(tpu_calls, cpu_calls, strict=True):
        assert tpu_loss.shape == (8,) and tpu_step.shape == (8,)
        assert (tpu_step == one_step[0]).all()
        np.testing.assert_allclose(tpu_loss.mean(), one_loss[0], atol=1e-5)
    # The per-replica losses differ (each replica has its own rows), so the mean is real.
    assert np.ptp(tpu_calls[0][1]) > 0


@pytest.mark.parametrize("iterations_per_loop", [1, 3, 50])
def test_host_call_once_per_step_in_order(tmp_path, iterations_per_loop):
    x, y = digits(64)
    calls = []
    est = jaxspec.TPUEstimator(
        make_model_fn(calls),
        config=fast_config(str(tmp_path), iterations_per_loop),
        train_batch_size=32,
        init_fn=init_fn,
    )
    est.train(batches_input_fn(x, y, 32, repeat=True), steps=7)  # ends mid-loop for 3 and 50
    est.train(batches_input_fn(x, y, 32, repeat=True), max_steps=11)
    steps = [int(step[0]) for step, _ in calls]
    assert steps == list(range(11))
    assert all((step == step[0]).all() for step, _ in calls)


def test_state_on_the_mesh_is_replicated(tmp_path):
    x, y = digits(32)
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path), 2), train_batch_size=32, init_fn=init_fn
    )
    est.train(batches_input_fn(x, y, 32, repeat=True), steps=2)
    assert len(jax.devices()) == 8
    assert est._mesh().size == 8


def test_batch_size_not_divisible_by_replicas(tmp_path):
    x, y = digits(36)
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path)), train_batch_size=36, init_fn=init_fn
    )
    with pytest.raises(ValueError, match="divisible"):  # checked when the batch size is used, as TF
        est.train(batches_input_fn(x, y, 36, repeat=True), steps=1)


def test_params_must_not_hold_batch_size(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        jaxspec.TPUEstimator(
            lambda features, params: None,
            params={"batch_size": 8},
            config=fast_config(str(tmp_path)),
            train_batch_size=8,
        )


def test_host_call_every_n_steps(tmp_path):
    x, y = digits(64)
    calls = []
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=4, experimental_host_call_every_n_steps=3),
    )
    est = jaxspec.TPUEstimator(make_model_fn(calls), config=config, train_batch_size=32, init_fn=init_fn)
    est.train(batches_input_fn(x, y, 32, repeat=True), steps=10)
    assert [int(step[0]) for step, _ in calls] == [0, 3, 6, 9]
