"""The bucket of a prediction among sorted thresholds (metrics/thresholds.py ``_buckets``):
on TF's evenly spaced grid a guess from ``p * (n - 1)`` corrected against the float32
thresholds; elsewhere a binary search. Both must equal numpy's ``searchsorted`` (side
left: thresholds strictly below p) for every float32, the thresholds themselves and
their neighbours included."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxspec import metrics
from jaxspec.metrics.thresholds import KEPSILON, _buckets, _is_tf_grid, even_thresholds


def _grid(n: int) -> np.ndarray:
    return np.asarray([0.0 - KEPSILON] + even_thresholds(n) + [1.0 + KEPSILON], np.float32)


def _hard_values(ts: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """Each threshold, the float32 just below and just above it, the ends of [0, 1] and
    beyond, infinities, and uniform values."""
    near = np.concatenate(
        [ts, np.nextafter(ts, np.float32(-np.inf)), np.nextafter(ts, np.float32(np.inf))]
    ).astype(np.float32)
    ends = np.asarray([0.0, -0.0, 1.0, 1e-30, -1e-30, 1.5, -0.5, 3.0, -3.0, np.inf, -np.inf], np.float32)
    return np.concatenate([near, ends, rng.rand(20_000).astype(np.float32)])


@pytest.mark.parametrize("n", [3, 4, 7, 200, 1001, 20_000])
def test_grid_guess_equals_searchsorted(n):
    ts = _grid(n)
    assert _is_tf_grid(ts)
    p = _hard_values(ts, np.random.RandomState(n))
    got = np.asarray(jax.jit(lambda x: _buckets(ts, x))(p))
    np.testing.assert_array_equal(got, np.searchsorted(ts, p, side="left"))


def test_other_thresholds_take_the_binary_search_and_agree():
    ts = np.sort(np.asarray([0.1, 0.25, 0.5, 0.5000001, 0.9], np.float32))
    assert not _is_tf_grid(ts)
    assert not _is_tf_grid(_grid(200) + np.float32(1e-3))
    p = _hard_values(ts, np.random.RandomState(0))
    np.testing.assert_array_equal(np.asarray(_buckets(ts, p)), np.searchsorted(ts, p, side="left"))


def test_auc_counts_on_the_grid_equal_a_direct_count():
    """tp/fp at each of the 200 default thresholds, counted by comparing every
    prediction with every threshold in numpy (TF's ``p > t``), predictions put on and
    next to the thresholds."""
    rng = np.random.RandomState(1)
    ts = _grid(200)
    p = np.clip(rng.choice(_hard_values(ts, rng), 4000), 0.0, 1.0).astype(np.float32)
    labels = rng.rand(4000) < 0.3
    state = metrics.auc(labels, p)
    above = p[None, :] > ts[:, None]
    np.testing.assert_array_equal(np.asarray(state.tp), (above & labels).sum(1).astype(np.float32))
    np.testing.assert_array_equal(np.asarray(state.fp), (above & ~labels).sum(1).astype(np.float32))
