"""jaxspec.metrics.mean / accuracy equal tf.compat.v1.metrics over several batches."""

from __future__ import annotations

import numpy as np
import pytest

from jaxspec import metrics

tf = pytest.importorskip("tensorflow")


def _tf_streaming(fn, batches):
    """Run a tf.compat.v1.metrics function over batches in graph mode; return its value."""
    with tf.Graph().as_default():
        placeholders = [tf.compat.v1.placeholder(tf.as_dtype(a.dtype), a.shape) for a in batches[0]]
        value, update = fn(*placeholders)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.local_variables_initializer())
            for batch in batches:
                sess.run(update, dict(zip(placeholders, batch, strict=True)))
            return sess.run(value)


def _ours(fn, batches):
    state = None
    for batch in batches:
        new = fn(*batch)
        state = new if state is None else state.merge(new)
    return np.asarray(state.compute())


@pytest.mark.parametrize("weighted", [False, True])
def test_mean_matches_tf(weighted):
    rng = np.random.RandomState(0)
    batches = [(rng.randn(7, 3).astype(np.float32),) + ((rng.rand(7, 1).astype(np.float32),) if weighted else ())
               for _ in range(4)]
    want = _tf_streaming(lambda *a: tf.compat.v1.metrics.mean(*a), batches)
    got = _ours(metrics.mean, batches)
    assert abs(got - want) <= 1e-6


@pytest.mark.parametrize("weighted", [False, True])
def test_accuracy_matches_tf(weighted):
    rng = np.random.RandomState(1)
    batches = []
    for _ in range(5):
        labels = rng.randint(0, 4, 9).astype(np.int64)
        preds = np.where(rng.rand(9) < 0.6, labels, rng.randint(0, 4, 9)).astype(np.int64)
        batches.append((labels, preds) + ((rng.rand(9).astype(np.float32),) if weighted else ()))
    want = _tf_streaming(lambda *a: tf.compat.v1.metrics.accuracy(*a), batches)
    got = _ours(metrics.accuracy, batches)
    assert abs(got - want) <= 1e-6
    assert 0 < want < 1


def test_empty_weights_give_zero_like_tf():
    batch = (np.ones(4, np.float32), np.zeros(4, np.float32))
    assert _ours(metrics.mean, [batch]) == _tf_streaming(lambda *a: tf.compat.v1.metrics.mean(*a), [batch]) == 0.0


def test_accuracy_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        metrics.accuracy(np.zeros(3), np.zeros(4))
