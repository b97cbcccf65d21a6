"""Metric states streamed by the Estimators: the same evaluation split into 1, 3 or 8
replicas and into per-replica batches of 1, 7 or 64 gives identical results; pairs,
user-defined metrics, nested and vector values reach evaluate() and the event file.

The data are dyadic (multiples of 1/64, weights of 1/4), so every weighted sum is exact
in float32 whatever the batch split: "identical" is tested with ==, not a tolerance.
"""

from __future__ import annotations

import functools
import glob
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec import metrics
from tests.helpers import batches_input_fn, fast_config

N, C = 100, 4


def _data() -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.RandomState(7)
    labels = rng.randint(0, C, N).astype(np.int32)
    p = rng.randint(0, 65, (N, C)).astype(np.float32) / 64  # ties, 0 and 1 included
    p[np.arange(N), labels] = np.minimum(1.0, p[np.arange(N), labels] + 0.25 * (rng.rand(N) < 0.6))
    features = {
        "p": p,
        "v": (rng.randint(-64, 65, N) / 64).astype(np.float32),
        "w": (rng.randint(0, 9, N) / 4).astype(np.float32),
    }
    return features, labels


class MaxAbs(metrics.Metric):
    """A user-defined metric that is not a sum: the largest |value| (merge = max)."""

    value: jax.Array

    @classmethod
    def init(cls) -> MaxAbs:
        return cls(value=jnp.zeros(()))

    def update(self, values: Any) -> MaxAbs:
        real = metrics.apply_padding_mask(values, None) > 0
        return MaxAbs(jnp.maximum(self.value, jnp.max(jnp.where(real, jnp.abs(values), 0.0), initial=0.0)))

    def merge(self, other: MaxAbs) -> MaxAbs:
        return MaxAbs(jnp.maximum(self.value, other.value))

    def compute(self) -> jax.Array:
        return self.value


class Moments(metrics.Metric):
    """A user-defined sum metric built with ``from_batch``; its value is nested."""

    n: jax.Array
    s: jax.Array
    s2: jax.Array

    @classmethod
    def from_batch(cls, values: Any) -> Moments:
        w = metrics.apply_padding_mask(values, None)
        x = metrics.drop_padding(values)
        return cls(n=jnp.sum(w), s=jnp.sum(w * x), s2=jnp.sum(w * x * x))

    def compute(self) -> dict[str, Any]:
        m = self.s / self.n
        return {"mean": m, "moments": {"second": self.s2 / self.n, "count": self.n}}


def metric_fn(labels: Any, p: Any, v: Any, w: Any) -> dict[str, Any]:
    pred = jnp.argmax(p, -1)
    onehot = jax.nn.one_hot(labels, C)
    binary = (labels == 1).astype(jnp.int32)
    return {
        "accuracy": metrics.accuracy(labels, pred, weights=w),
        "mean": metrics.mean(v, w),
        "rmse": metrics.root_mean_squared_error(p[:, 0], p[:, 1]),
        "cosine": metrics.mean_cosine_distance(onehot, p, dim=1),
        "auc": metrics.auc(onehot, p, w[:, None]),
        "pr_auc": metrics.auc(
            onehot, p, curve="PR", summation_method="careful_interpolation", num_thresholds=50
        ),
        "sens": metrics.sensitivity_at_specificity(binary, p[:, 1], 0.7),
        "spec": metrics.specificity_at_sensitivity(binary, p[:, 1], 0.7, w),
        "tp_at": metrics.true_positives_at_thresholds(binary, p[:, 1], [0.25, 0.5, 0.75]),
        "precision": metrics.precision(binary, pred == 1, w),
        "mpca": metrics.mean_per_class_accuracy(labels, pred, C, w),
        "miou": metrics.mean_iou(labels, pred, C),
        "r_at_2_c1": metrics.recall_at_k(labels, p, 2, class_id=1, weights=w),
        "ap_at_2": metrics.average_precision_at_k(labels, p, 2),
        "pair_fn": (lambda s: {"total": s.total, "count": s.count}, metrics.mean(v, w)),
        "max_abs": MaxAbs.init().update(v),
        "moments": Moments.from_batch(v),
    }


def model_fn(features, labels, mode, params, state):
    loss = jnp.mean(features["v"]) + state["b"]
    tensors = {"labels": labels, "p": features["p"], "v": features["v"], "w": features["w"]}
    return jaxspec.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, tensors))


def _input_fn(features: dict[str, np.ndarray], labels: np.ndarray) -> Any:
    def input_fn(params):
        b = params["batch_size"]
        return (({k: x[s : s + b] for k, x in features.items()}, labels[s : s + b]) for s in range(0, N, b))

    return input_fn


def _evaluate(tmp_path: Any, shards: int | None, per_replica: int) -> dict[str, Any]:
    features, labels = _data()
    replicas = shards or 1
    steps = -(-N // (per_replica * replicas))
    # Each loop executable compiles in seconds (tens on CI), and loops of one step share
    # one: batches of 1 and 64 run one step per loop (totals carried across loops), batches
    # of 7 all in one loop (merged within it); both ways pad where the split pads.
    ipl = steps if per_replica == 7 else 1
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path / f"{shards}_{per_replica}"),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        tpu_config=jaxspec.TPUConfig(
            iterations_per_loop=ipl,
            num_shards=shards,
            per_host_input_for_training=jaxspec.InputPipelineConfig.PER_HOST_V2,
        ),
    )
    est = jaxspec.TPUEstimator(
        model_fn,
        config=config,
        use_tpu=shards is not None,
        train_batch_size=replicas,
        eval_batch_size=per_replica * replicas,
        init_fn=lambda: {"b": jnp.zeros((), jnp.float32)},
    )
    return est.evaluate(_input_fn(features, labels))


@functools.cache
def _reference() -> dict[str, Any]:
    """Every metric on the whole data as one batch, no estimator: states from one jit,
    values computed eagerly as evaluate() computes them."""
    features, labels = _data()

    @jax.jit
    def states(labels: Any, p: Any, v: Any, w: Any) -> dict[str, Any]:
        return {k: metrics.as_metric_state(s, k) for k, s in metric_fn(labels, p, v, w).items()}

    batch = states(labels, *(features[k] for k in ("p", "v", "w")))
    return {k: jax.tree.map(np.asarray, s.compute()) for k, s in batch.items()}


def _assert_identical(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    for key, value in want.items():
        flat_got, tree_got = jax.tree.flatten(got[key])
        flat_want, tree_want = jax.tree.flatten(value)
        assert tree_got == tree_want, (where, key)
        for g, w in zip(flat_got, flat_want, strict=True):
            np.testing.assert_array_equal(np.asarray(g), w, err_msg=f"{where}: {key}")


@pytest.mark.parametrize("shards", [1, 3, 8])
def test_replicas_and_batch_sizes_give_identical_results(tmp_path, shards):
    want = _reference()
    assert 0.3 < want["accuracy"] < 1 and 0.5 < want["auc"] < 1 and want["max_abs"] == 1.0  # real values
    assert 0 < want["sens"] < 1 and 0 < want["spec"] < 1 and 0 < want["ap_at_2"] < 1
    for per_replica in (1, 7, 64):
        _assert_identical(_evaluate(tmp_path, shards, per_replica), want, f"{shards} shards x {per_replica}")


def test_one_device_and_value_types(tmp_path):
    results = _evaluate(tmp_path, None, 64)  # off the mesh: a short final batch at its own shape
    _assert_identical(results, _reference(), "one device")
    assert isinstance(results["auc"], float) and isinstance(results["accuracy"], float)
    assert isinstance(results["tp_at"], np.ndarray) and results["tp_at"].shape == (3,)
    assert isinstance(results["moments"]["moments"]["count"], float)
    assert results["moments"]["moments"]["count"] == N
    assert set(results["pair_fn"]) == {"total", "count"}
    events = glob.glob(str(tmp_path / "None_64" / "eval" / "events.out.tfevents.*"))
    assert events
    tags = _event_tags(events)
    assert {"auc", "tp_at/0", "tp_at/2", "moments/mean", "moments/moments/second", "pair_fn/total"} <= tags


def _event_tags(paths: list[str]) -> set[str]:
    """Scalar tags in TensorBoard event files (TFRecord framing read by hand)."""
    from tensorboardX.proto.event_pb2 import Event

    tags: set[str] = set()
    for path in paths:
        data = open(path, "rb").read()
        pos = 0
        while pos < len(data):
            length = int.from_bytes(data[pos : pos + 8], "little")
            event = Event.FromString(data[pos + 12 : pos + 12 + length])
            tags |= {v.tag for v in event.summary.value}
            pos += 12 + length + 4
    return tags


def test_init_update_conveniences():
    l0, p0 = np.array([0, 1, 1, 0]), np.array([0.1, 0.8, 0.4, 0.3], np.float32)
    l1, p1 = np.array([1, 0]), np.array([0.9, 0.6], np.float32)
    state = metrics.auc(l0, p0, num_thresholds=5).update(l1, p1)
    assert state.num_thresholds == 5
    whole = metrics.auc(np.concatenate([l0, l1]), np.concatenate([p0, p1]), num_thresholds=5)
    assert float(state.compute()) == float(whole.compute())
    empty = metrics.AUC.init(l0, p0, num_thresholds=5)
    assert float(jnp.sum(empty.tp + empty.fp)) == 0 and empty.num_thresholds == 5
    acc = metrics.Accuracy.init(l0, l0).update(l0, (p0 > 0.5).astype(int)).update(l1, (p1 > 0.5).astype(int))
    assert float(acc.compute()) == pytest.approx(4 / 6)
    assert float(MaxAbs.init().update(jnp.array([-3.0, 2.0])).merge(MaxAbs(jnp.array(1.0))).compute()) == 3.0
    with pytest.raises(NotImplementedError, match="from_batch"):
        MaxAbs.from_batch(jnp.ones(2))


def test_pairs_and_rejections():
    mean = metrics.mean(jnp.array([1.0, 3.0]))
    assert metrics.as_metric_state((None, mean)) is mean
    assert metrics.as_metric_state((mean, mean)) is mean
    wrapped = metrics.as_metric_state((lambda s: s.total * 10, mean))
    assert float(wrapped.merge(wrapped).compute()) == 80.0
    with pytest.raises(TypeError, match="value must be None"):
        metrics.as_metric_state((jnp.array(2.0), mean), "m")
    with pytest.raises(TypeError, match="update must be a metric state"):
        metrics.as_metric_state((jnp.array(2.0), jnp.array(1.0)), "m")
    with pytest.raises(TypeError, match="metric state"):
        metrics.as_metric_state(jnp.array(1.0), "m")


def test_padding_rows_never_count_even_when_nan():
    from jaxspec.metrics.base import padding_mask_scope

    v = jnp.array([1.0, 3.0, jnp.nan, jnp.nan])
    with padding_mask_scope(jnp.array([1.0, 1.0, 0.0, 0.0])):
        assert float(metrics.mean(v).compute()) == 2.0
        assert float(metrics.mean_tensor(v).compute()[1]) == 3.0
        assert float(metrics.auc(jnp.array([0, 1, 1, 0]), jnp.array([0.2, 0.9, 7.0, -1.0])).compute()) > 0.99
        labels = jnp.array([[0], [1], [-1], [-1]])  # padded rows' AP would be 0/0
        assert float(metrics.average_precision_at_k(labels, jnp.eye(4)[:, :3], 1).compute()) == 1.0


class RealValues(metrics.Metric):
    """A user-defined metric whose merge concatenates: every batch's values with their
    padding weights, the median of the real ones computed at the end."""

    values: jax.Array
    weights: jax.Array

    @classmethod
    def from_batch(cls, values: Any) -> RealValues:
        return cls(values=jnp.ravel(values), weights=jnp.ravel(metrics.apply_padding_mask(values, None)))

    def merge(self, other: RealValues) -> RealValues:
        return RealValues(
            jnp.concatenate([self.values, other.values]), jnp.concatenate([self.weights, other.weights])
        )

    def compute(self) -> jax.Array:
        return jnp.nanmedian(jnp.where(self.weights > 0, self.values, jnp.nan))


@pytest.mark.parametrize(("use_tpu", "ipl"), [(False, 1), (False, 3), (True, 1), (True, 3)])
def test_a_state_whose_merge_concatenates(tmp_path, use_tpu, ipl):
    """A merge that changes the state's shapes (it concatenates) cannot be a scan's carry:
    the steps of a loop are merged one by one instead, and the loops on the host. Before,
    evaluate raised TypeError from lax.scan. 88 rows: five batches of 16 and one of 8."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(88, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5, 0.0], np.float32) + rng.normal(size=88)).astype(np.float32)

    def model_fn(features, labels, mode, params, state):
        pred = features["x"] @ state["w"]

        def metric_fn(labels, pred):
            return {"median_abs_error": RealValues.from_batch(jnp.abs(pred - labels))}

        return jaxspec.TPUEstimatorSpec(
            mode, loss=jnp.mean((pred - labels) ** 2), eval_metrics=(metric_fn, [labels, pred])
        )

    est = jaxspec.TPUEstimator(
        model_fn,
        config=fast_config(str(tmp_path), iterations_per_loop=ipl),
        use_tpu=use_tpu,
        train_batch_size=16,
        eval_batch_size=16,
        params={},
        init_fn=lambda: {"w": jnp.full(4, 0.5, jnp.float32)},
    )
    result = est.evaluate(batches_input_fn(x, y, 16))
    expected = np.median(np.abs(x @ np.full(4, 0.5, np.float32) - y))
    assert result["median_abs_error"] == pytest.approx(float(expected), rel=1e-6)
