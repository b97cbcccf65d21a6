"""Per-call cost: model_fn traced once per mode and input signature; the state kept in
memory between calls gives the same numbers as a restore, and the disk is read again
whenever the checkpoint is not the one in memory."""

from __future__ import annotations

import collections
import shutil

import jax
import numpy as np
import pytest
from helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn

import jaxspec
from jaxspec.store.checkpoints import CheckpointStore

X, Y = digits(96)


def counting(model_fn):
    calls = collections.Counter()

    def wrapped(features, labels, mode, params, state, global_step):
        calls[mode] += 1
        return model_fn(features, labels, mode, params, state, global_step)

    return wrapped, calls


def _estimator(model_dir, model_fn, use_tpu=False):
    return jaxspec.TPUEstimator(
        model_fn,
        config=fast_config(str(model_dir), iterations_per_loop=2),
        use_tpu=use_tpu,
        train_batch_size=16,
        eval_batch_size=16,
        predict_batch_size=16,
        init_fn=init_fn,
    )


@pytest.mark.parametrize("use_tpu", [False, True])
def test_model_fn_traced_once_per_mode_and_signature(tmp_path, use_tpu):
    model_fn, calls = counting(make_model_fn())
    est = _estimator(tmp_path, model_fn, use_tpu)
    train_input = batches_input_fn(X, Y, 16, repeat=True)
    after_first = None
    for _ in range(3):
        est.train(train_input, steps=4)
        est.evaluate(batches_input_fn(X[:40], Y[:40], 16), name="short")  # 16, 16, then 8 rows
        list(est.predict(batches_input_fn(X[:20], None, 16)))
        after_first = after_first or dict(calls)
    assert est.latest_checkpoint().endswith("/12")
    # Later calls trace nothing: every signature was seen by the first call of its mode.
    assert dict(calls) == after_first
    assert calls["train"] == 1
    if use_tpu:  # padded batches: eval runs loops of 2 and 1 steps, predict one loop of 2
        assert calls == {"train": 1, "eval": 2, "infer": 1}


def _eval(est):
    return est.evaluate(batches_input_fn(X[:48], Y[:48], 16))


def test_in_memory_state_equals_a_restore_and_skips_the_disk(tmp_path, monkeypatch):
    est = _estimator(tmp_path, make_model_fn())
    est.train(batches_input_fn(X, Y, 16, repeat=True), steps=6)
    restored = _estimator(tmp_path, make_model_fn())  # a new Estimator must read the disk
    reads = []
    original = CheckpointStore.restore

    def counting_restore(self, step, target):
        reads.append(step)
        return original(self, step, target)

    monkeypatch.setattr(CheckpointStore, "restore", counting_restore)
    from_memory = _eval(est)
    assert reads == []  # the state train ended with, not read back
    from_disk = _eval(restored)
    assert reads == [6]
    assert from_memory == from_disk
    preds_memory = [p["logits"] for p in est.predict(batches_input_fn(X[:8], None, 16))]
    preds_disk = [p["logits"] for p in restored.predict(batches_input_fn(X[:8], None, 16))]
    np.testing.assert_array_equal(np.stack(preds_memory), np.stack(preds_disk))
    assert reads == [6]  # restored's evaluate already holds step 6 in memory too


def test_another_writer_forces_a_read(tmp_path):
    est = _estimator(tmp_path, make_model_fn())
    est.train(batches_input_fn(X, Y, 16, repeat=True), steps=4)
    other = _estimator(tmp_path, make_model_fn())
    other.train(batches_input_fn(X[::-1], Y[::-1], 16, repeat=True), steps=2)  # now step 6 on disk
    assert _eval(est) == _eval(other)
    assert _eval(est)["global_step"] == 6


def test_a_rewritten_checkpoint_of_the_same_step_is_read_again(tmp_path):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    est = _estimator(a_dir, make_model_fn())
    est.train(batches_input_fn(X, Y, 16, repeat=True), steps=4)
    before = _eval(est)
    other = _estimator(b_dir, make_model_fn())
    other.train(batches_input_fn(X[::-1], Y[::-1], 16, repeat=True), steps=4)
    target = a_dir / "checkpoints" / "4"
    shutil.rmtree(target)
    shutil.copytree(b_dir / "checkpoints" / "4", target)
    after = _eval(est)
    assert after == _eval(other)
    assert after["loss"] != before["loss"]


def test_checkpoint_path_of_the_state_in_memory(tmp_path):
    est = _estimator(tmp_path, make_model_fn())
    est.train(batches_input_fn(X, Y, 16, repeat=True), steps=2)
    est.train(batches_input_fn(X, Y, 16, repeat=True), steps=2)
    at_2 = est.evaluate(
        batches_input_fn(X[:48], Y[:48], 16), checkpoint_path=str(tmp_path / "checkpoints" / "2")
    )
    latest = _eval(est)
    assert at_2["global_step"] == 2 and latest["global_step"] == 4
    assert at_2["loss"] != latest["loss"]
    fresh = _estimator(tmp_path, make_model_fn())
    assert (
        fresh.evaluate(
            batches_input_fn(X[:48], Y[:48], 16), checkpoint_path=str(tmp_path / "checkpoints" / "2")
        )
        == at_2
    )


def test_state_in_memory_is_the_saved_one_when_replicas_diverge(tmp_path):
    """Without CrossShardOptimizer each replica trains on its own rows and the replicas'
    copies differ; the checkpoint holds replica 0's. The next call on the same Estimator
    must see exactly what a restore gives."""
    import optax
    from flax.training import train_state
    from helpers import Net

    def own_optimizer_init(features):
        model = Net()
        params = model.init(jax.random.PRNGKey(0), features["x"][:1])
        return train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.sgd(0.5))

    def make(model_dir):
        return jaxspec.TPUEstimator(
            make_model_fn(),
            config=fast_config(str(model_dir), iterations_per_loop=5),
            train_batch_size=48,
            eval_batch_size=48,
            predict_batch_size=48,
            init_fn=own_optimizer_init,
        )

    est = make(tmp_path)
    est.train(batches_input_fn(X, Y, 48, repeat=True), steps=10)
    fresh = make(tmp_path)
    evaluated = [e.evaluate(batches_input_fn(X, Y, 48)) for e in (est, fresh)]
    assert evaluated[0] == evaluated[1]
    preds = [np.stack([p["logits"] for p in e.predict(batches_input_fn(X, None, 48))]) for e in (est, fresh)]
    np.testing.assert_array_equal(preds[0], preds[1])


@pytest.mark.parametrize("iterations_per_loop, per_host_v2", [(1, False), (3, False), (1, True)])
def test_an_input_that_reuses_its_buffers_trains_as_fresh_arrays(tmp_path, iterations_per_loop, per_host_v2):
    """One-step loops hand the input's own arrays to the devices (no copy) while the
    next step is being read; an input_fn that overwrites one buffer for every batch must
    still train on each batch as it was when yielded."""

    rows = 2 if per_host_v2 else 16  # PER_HOST_V2 on 8 replicas: 8 input batches per step

    def fresh():
        return (({"x": X[s : s + rows]}, Y[s : s + rows]) for s in range(0, 96, rows))

    def reused():
        bx, by = np.empty_like(X[:rows]), np.empty_like(Y[:rows])
        for s in range(0, 96, rows):
            bx[...], by[...] = X[s : s + rows], Y[s : s + rows]
            yield {"x": bx}, by

    kernels = []
    for name, input_fn in (("fresh", fresh), ("reused", reused)):
        est = jaxspec.TPUEstimator(
            make_model_fn(),
            config=fast_config(str(tmp_path / name)).replace(
                tpu_config=jaxspec.TPUConfig(
                    iterations_per_loop=iterations_per_loop,
                    per_host_input_for_training=jaxspec.InputPipelineConfig.PER_HOST_V2
                    if per_host_v2
                    else True,
                )
            ),
            use_tpu=per_host_v2,
            train_batch_size=16,
            init_fn=init_fn,
        )
        est.train(input_fn, steps=96 // 16)
        kernels.append(est.get_variable_value("params/params/Dense_0/kernel"))
    assert not np.array_equal(kernels[0], init_fn(None, {"x": X[:1]}).params["params"]["Dense_0"]["kernel"])
    np.testing.assert_array_equal(kernels[0], kernels[1])
