"""The training loop donates its state: one state on the devices, and the same numbers.

Every expected value here is computed by hand in numpy: least squares ``mean((x @ w + b -
y)**2)`` trained by SGD with momentum (the optimizer state is replaced each step too).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state
from jax.sharding import PartitionSpec as P

import jaxspec
from jaxspec.hooks.checkpoint import CheckpointSaverHook
from jaxspec.loop import donated_state
from jaxspec.store.checkpoints import CheckpointStore

LR, MOMENTUM, WIDTH, BATCH = 0.05, 0.9, 8, 16
RNG = np.random.RandomState(0)
X = RNG.standard_normal((40 * BATCH, WIDTH)).astype(np.float32)
Y = (X @ np.linspace(-1.0, 1.0, WIDTH) + 0.3).astype(np.float32)


def _expected(steps: int | list[int]) -> list[tuple[np.ndarray, float]]:
    """(w, b) after each of ``steps`` SGD-momentum steps on consecutive batches of BATCH
    (or on the batches of the given indices, in order)."""
    w, b = np.zeros(WIDTH, np.float64), 0.0
    mw, mb = np.zeros(WIDTH), 0.0
    out = []
    for s in range(steps) if isinstance(steps, int) else steps:
        x, y = X[s * BATCH : (s + 1) * BATCH].astype(np.float64), Y[s * BATCH : (s + 1) * BATCH]
        r = x @ w + b - y
        gw, gb = 2 * x.T @ r / BATCH, 2 * r.mean()
        mw, mb = MOMENTUM * mw + gw, MOMENTUM * mb + gb
        w, b = w - LR * mw, b - LR * mb
        out.append((w.copy(), b))
    return out


def _init_fn(cross_shard: bool):
    def init_fn(features):
        tx = optax.sgd(LR, momentum=MOMENTUM)
        params = {"w": jnp.zeros(WIDTH, jnp.float32), "b": jnp.zeros((), jnp.float32)}
        return train_state.TrainState.create(
            apply_fn=None, params=params, tx=jaxspec.CrossShardOptimizer(tx) if cross_shard else tx
        )

    return init_fn


def _model_fn(features, labels, mode, params, state):
    spec = jaxspec.TPUEstimatorSpec if "batch_size" in params else jaxspec.EstimatorSpec

    def loss_of(p):
        return jnp.mean((features["x"] @ p["w"] + p["b"] - labels) ** 2)

    if mode == jaxspec.ModeKeys.PREDICT:
        return spec(mode, predictions={"y": features["x"] @ state.params["w"]})
    loss, grads = jax.value_and_grad(loss_of)(state.params)
    if mode == jaxspec.ModeKeys.EVAL:
        return spec(mode, loss=loss)
    return spec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))


def _input_fn():
    def gen():
        for s in range(0, len(X), BATCH):
            yield {"x": X[s : s + BATCH]}, Y[s : s + BATCH]

    return gen()


def _estimator(model_dir: str, kind: str, iterations_per_loop: int = 1, **config: object):
    settings = dict(log_step_count_steps=None, save_summary_steps=0, save_checkpoints_steps=None)
    settings.update(config)
    if kind == "one device":
        cfg = jaxspec.RunConfig(model_dir=model_dir, **settings)
        return jaxspec.Estimator(_model_fn, config=cfg, init_fn=_init_fn(False))
    cores = {"1-D mesh": None, "2-D mesh": 2}[kind]
    tpu = jaxspec.TPUConfig(iterations_per_loop=iterations_per_loop, num_cores_per_replica=cores)
    cfg = jaxspec.RunConfig(model_dir=model_dir, tpu_config=tpu, **settings)
    return jaxspec.TPUEstimator(
        _model_fn,
        config=cfg,
        train_batch_size=BATCH,
        eval_batch_size=BATCH,
        predict_batch_size=BATCH,
        init_fn=_init_fn(True),
        partition_rules=[(r"w", P("core"))] if cores else None,
    )


def _compiled_train_loop(est) -> jax.stages.Compiled:
    cache = est._compile_cache.modes["train"]
    (compiled,) = [*cache.compiled.values(), *cache.compiled_block.values()]  # one device: the block loop
    return compiled


KINDS = ["one device", "1-D mesh", "2-D mesh"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_compiled_train_loop_aliases_the_state_it_replaces(tmp_path, kind):
    est = _estimator(str(tmp_path), kind, iterations_per_loop=2)
    est.train(_input_fn, steps=2)
    memory = _compiled_train_loop(est).memory_analysis()
    state = est._compile_cache.live.state
    # Per device: every leaf's shard, the TrainState's step included.
    per_device = sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(state))
    assert memory.alias_size_in_bytes >= per_device > 0
    if kind == "2-D mesh":  # w is split over the 2 cores: half of it per device
        w = state.params["w"]
        assert w.addressable_shards[0].data.shape == (WIDTH // 2,)


@pytest.mark.parametrize("kind", KINDS)
def test_donation_changes_no_number_and_saves_the_right_states(tmp_path, kind):
    """Loops of 1 step dispatched ahead (a generator input, one device) or of 2 steps on
    the mesh, a checkpoint every 3 steps: each checkpoint and the final state equal the
    hand-computed trajectory, so no save read a donated buffer and no dispatch ahead took
    a state a save needed."""
    ipl = 1 if kind == "one device" else 2
    est = _estimator(str(tmp_path), kind, iterations_per_loop=ipl, save_checkpoints_steps=3)
    est.train(_input_fn, steps=12)
    expected = _expected(12)
    store = CheckpointStore(str(tmp_path))
    live = est._compile_cache.live
    assert live is not None and live.step == 12
    target = live.state
    saved = sorted(store.all_steps())
    # every 3 steps, checked where a loop ends (tf.estimator's timer over loops of 2)
    # and the state training starts from (step 0), as tf.estimator's saver
    assert saved == ([0, 3, 6, 9, 12] if ipl == 1 else [0, 4, 8, 12])
    for step in saved:
        restored = store.restore(step, target)
        w, b = expected[step - 1] if step else (np.zeros(WIDTH), 0.0)
        np.testing.assert_allclose(np.asarray(restored.params["w"]), w, rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(float(restored.params["b"]), b, rtol=2e-5, atol=2e-6)
        assert int(restored.step) == step
    np.testing.assert_allclose(est.get_variable_value("params/w"), expected[-1][0], rtol=2e-5, atol=2e-6)


class _StateReader(jaxspec.SessionRunHook):
    """A user's hook that reads ``session.state`` after every loop (and keeps copies)."""

    def __init__(self):
        self.seen: list[tuple[int, np.ndarray]] = []

    def after_run(self, run_context, run_values):
        session = run_context.session
        self.seen.append((int(session.global_step), np.array(session.state.params["w"])))


@pytest.mark.parametrize("second_state", ["affordable", "too large"])
@pytest.mark.parametrize("kind", ["one device", "2-D mesh"])
def test_a_hook_reading_session_state_after_every_loop_sees_valid_values(
    tmp_path, monkeypatch, kind, second_state
):
    """Ahead of a user's hook the loop keeps its state (a non-donating executable) while
    a second state is small; a larger one is not dispatched ahead (only the donating
    executable runs). The hook reads the right values either way."""
    if second_state == "too large":
        monkeypatch.setattr(donated_state, "KEEP_AHEAD_MAX_BYTES", 0)
    ipl = 1 if kind == "one device" else 2
    reader = _StateReader()
    est = _estimator(str(tmp_path), kind, iterations_per_loop=ipl)
    est.train(_input_fn, steps=6, hooks=[reader])
    expected = _expected(6)
    assert [s for s, _ in reader.seen] == list(range(ipl, 7, ipl))
    for step, w in reader.seen:
        np.testing.assert_allclose(w, expected[step - 1][0], rtol=2e-5, atol=2e-6)
    keeping = est._compile_cache.modes["train"].compiled_keep
    assert bool(keeping) == (second_state == "affordable")


def test_state_bytes_per_device_counts_the_most_loaded_device():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("replica", "core"))
    split = jax.device_put(np.zeros((8, 6), np.float32), jax.sharding.NamedSharding(mesh, P(None, "core")))
    whole = jax.device_put(np.zeros(10, np.float32), jax.sharding.NamedSharding(mesh, P()))
    assert donated_state.state_bytes_per_device({"a": split, "b": whole, "c": 3}) == 8 * 3 * 4 + 10 * 4


@pytest.mark.parametrize("kind", ["one device", "2-D mesh"])
def test_the_state_kept_between_calls_survives_donation(tmp_path, kind):
    """train, evaluate (from the state in memory), train on (which donates that state),
    evaluate and predict again: equal to a fresh Estimator restoring from disk and to
    the hand-computed values."""
    ipl = 1 if kind == "one device" else 2
    est = _estimator(str(tmp_path), kind, iterations_per_loop=ipl)
    est.train(_input_fn, steps=4)
    first = est.evaluate(_input_fn, steps=2)
    est.train(_input_fn, steps=4)  # resumes at step 4, from memory: the kept state is donated
    second = est.evaluate(_input_fn, steps=2)
    predicted = np.stack([p["y"] for p in est.predict(_input_fn, yield_single_examples=True)][:BATCH])

    w, b = _expected(8)[-1]
    # The second train call starts its input again: steps 5-8 train on batches 0-3.
    w4, b4 = _expected(4)[-1]
    assert first["global_step"] == 4 and second["global_step"] == 8
    mse = lambda w, b: np.mean((X[: 2 * BATCH] @ w + b - Y[: 2 * BATCH]) ** 2)  # noqa: E731
    np.testing.assert_allclose(first["loss"], mse(w4, b4), rtol=1e-4)

    fresh = _estimator(str(tmp_path), kind, iterations_per_loop=ipl)
    again = fresh.evaluate(_input_fn, steps=2)
    np.testing.assert_allclose(again["loss"], second["loss"], rtol=1e-6)
    restored_w = fresh.get_variable_value("params/w")
    np.testing.assert_allclose(est.get_variable_value("params/w"), restored_w, rtol=0, atol=0)
    np.testing.assert_allclose(predicted, X[:BATCH] @ restored_w, rtol=1e-5, atol=1e-5)
    assert np.isfinite(w).all() and np.isfinite(b)


def test_the_saver_defers_a_save_while_the_state_is_with_the_loop_ahead(tmp_path):
    store = CheckpointStore(str(tmp_path))
    hook = CheckpointSaverHook(str(tmp_path), save_steps=2, store=store)

    class Session:
        state, global_step = None, 0

    class Context:
        session = Session()

        def request_stop(self):
            raise AssertionError("no stop expected")

    class Values:
        results = 2

    Context.session.state = {"w": jnp.arange(3.0)}
    hook.after_create_session(Context.session, None)  # saves step 0, as tf.estimator's
    store.wait()
    assert store.all_steps() == [0]
    assert hook.due_at(2) and not hook.due_at(1)
    Context.session.state = None
    hook.after_run(Context(), Values())  # due, but the state went to the loop ahead
    store.wait()
    assert store.all_steps() == [0] and hook.due_at(2)  # nothing saved, still due
    Context.session.state = {"w": jnp.arange(3.0) + 3}
    Values.results = 3
    hook.after_run(Context(), Values())  # the next loop's state: saved at its step
    store.wait()
    assert store.all_steps() == [0, 3]


@pytest.mark.parametrize("kind", ["one device", "2-D mesh"])
def test_an_open_predict_generator_survives_a_train_call(tmp_path, kind):
    """tf.estimator's predict generator keeps its own variables: a train call on the same
    Estimator while it is open (which starts from the state predict holds) must not
    donate that state from under it."""
    est = _estimator(str(tmp_path), kind)
    est.train(_input_fn, steps=2)
    w2 = est.get_variable_value("params/w")
    predictions = est.predict(_input_fn, yield_single_examples=False)
    first = next(predictions)["y"]
    est.train(_input_fn, steps=3)  # from the state kept in memory; its input starts again
    rest = np.concatenate([p["y"] for p in predictions])
    np.testing.assert_allclose(first, X[:BATCH] @ w2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rest, X[BATCH:] @ w2, rtol=1e-5, atol=1e-5)  # still step 2's
    np.testing.assert_allclose(
        est.get_variable_value("params/w"), _expected([0, 1, 0, 1, 2])[-1][0], rtol=2e-5, atol=2e-6
    )
