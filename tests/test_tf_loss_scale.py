"""tf_bridge's NPU loss scale managers (TensorFlow, ``tf_bridge.npu``) and jaxspec's give
the same scale sequence on the same history of finite and non-finite steps, and both
equal the hand recurrence of tests/test_loss_scale.py."""

from __future__ import annotations

from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")

import jaxspec  # noqa: E402
from tests.test_loss_scale import CASES, hand_scales, history, jax_scales  # noqa: E402
from tf_bridge import npu  # noqa: E402


def _tf_scales(manager_fn: Any, flags: list[bool]) -> list[tuple[float, int, int]]:
    """(scale, good, bad) after each update, run in a TF1 graph."""
    with tf.Graph().as_default():
        manager = manager_fn()
        flag = tf.compat.v1.placeholder(tf.bool, [])
        update = manager.update_loss_scale(flag)
        counts = [getattr(manager, a, tf.constant(0)) for a in ("_num_good_steps", "_num_bad_steps")]
        state = [manager.get_loss_scale(), *counts]
        out = []
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for finite in flags:
                session.run(update, {flag: finite})
                scale, good, bad = session.run(state)
                out.append((float(scale), int(good), int(bad)))
    return out


@pytest.mark.parametrize("case", CASES)
def test_both_sides_give_the_same_sequence(case: Any) -> None:
    flags = history(40, seed=3) + [True] * 5 + [False] * 5
    got_tf = _tf_scales(lambda: npu.ExponentialUpdateLossScaleManager(*case), flags)
    got_jax = jax_scales(jaxspec.ExponentialUpdateLossScaleManager(*case), flags)
    assert got_tf == got_jax == hand_scales(case, flags)


def test_fixed_managers_agree() -> None:
    flags = history(6)
    tf_scales = [s for s, _, _ in _tf_scales(lambda: npu.FixedLossScaleManager(128.0), flags)]
    jax_fixed = [s for s, _, _ in jax_scales(jaxspec.FixedLossScaleManager(128.0), flags)]
    assert tf_scales == jax_fixed == [128.0] * 6
