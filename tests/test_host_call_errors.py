"""A host_call function that raises: its own exception, with a note naming the function, the
mode and the global step; the checkpoint on disk is the last complete one; the next train()
works."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest

import jaxspec
from tests.helpers import digits, fast_config, init_fn


class Flaky:
    """A host function that raises at one global step while ``armed``."""

    def __init__(self, at: int) -> None:
        self.at, self.armed, self.seen = at, True, []

    def record_loss(self, global_step, loss):
        step = int(global_step[0])
        if self.armed and step == self.at:
            raise KeyError(f"no slot for step {step}")
        self.seen.append(step)


def test_host_call_error_keeps_type_notes_and_checkpoint(tmp_path):
    x, y = digits(32)
    flaky = Flaky(at=5)

    def model_fn(features, labels, mode, params, state, global_step):
        def loss_fn(p):
            logits = state.apply_fn(p, features["x"])
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return jaxspec.TPUEstimatorSpec(
            mode,
            loss=loss,
            train_op=state.apply_gradients(grads=grads),
            host_call=(flaky.record_loss, [global_step[None], loss[None]]),
        )

    est = jaxspec.TPUEstimator(
        model_fn,
        config=fast_config(str(tmp_path), 1, save_checkpoints_steps=2),
        use_tpu=False,
        train_batch_size=32,
        init_fn=init_fn,
    )
    with pytest.raises(KeyError) as err:
        est.train(lambda params: ({"x": x}, y), steps=10)
    notes = " ".join(getattr(err.value, "__notes__", []))
    assert "Flaky.record_loss" in notes and "'train'" in notes and "global step 5" in notes, notes
    store = est._checkpoint_store()
    assert store.latest_step() == 4 and store.all_steps() == [0, 2, 4]  # 0: saved when training started
    assert int(store.read()["step"]) == 4  # complete and readable
    assert flaky.seen == [0, 1, 2, 3, 4]

    flaky.armed = False
    est.train(lambda params: ({"x": x}, y), steps=3)  # the same Estimator trains on from 4
    assert store.latest_step() == 7 and int(store.read()["step"]) == 7
    assert flaky.seen == [0, 1, 2, 3, 4, 4, 5, 6]


def test_host_call_error_in_evaluate_names_eval_mode(tmp_path):
    x, y = digits(32)

    def broken(loss):
        raise ValueError("host side failure")

    def model_fn(features, labels, mode, params, state):
        loss = jnp.mean(state.apply_fn(state.params, features["x"]))
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, host_call=(broken, [loss[None]]))

    est = jaxspec.TPUEstimator(
        model_fn, config=fast_config(str(tmp_path)), use_tpu=False, eval_batch_size=32, init_fn=init_fn
    )
    with pytest.raises(ValueError, match="host side failure") as err:
        est.evaluate(lambda params: ({"x": x}, y), steps=1)
    notes = " ".join(getattr(err.value, "__notes__", []))
    assert "broken" in notes and "'eval'" in notes and "global step 0" in notes, notes
