"""Every jaxspec.metrics function equals tf.compat.v1.metrics (graph mode) on the same batches.

Each case streams a few random batches (sizes 6, 9, 1, sometimes an empty one) through
TensorFlow's ``update_op`` in one graph and session, and through jaxspec's states merged
batch by batch; the final values must agree to 1e-6 (NaN where TF gives NaN). Cases run
with and without weights and cover the edge cases: one class only, all-zero weights, an
empty batch, predictions exactly on thresholds, ties in top-k, k larger than the classes,
padding ids in labels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from jaxspec import metrics

tf = pytest.importorskip("tensorflow")
tf1 = tf.compat.v1

SIZES = (8, 8, 8)
Batch = tuple[tuple[np.ndarray, ...], np.ndarray | None]


WEIGHTINGS = ("none", "random", "zero")
# Grappler's rewrites cost more than these tiny graphs take to run; values are unaffected.
_SESSION_CONFIG = tf1.ConfigProto(inter_op_parallelism_threads=1, intra_op_parallelism_threads=1)
_SESSION_CONFIG.graph_options.rewrite_options.disable_meta_optimizer = True


def _tf_values(name: str, kwargs: dict[str, Any], variants: list[list[Batch]]) -> list[np.ndarray]:
    """Stream each variant's batches through ``tf.compat.v1.metrics.<name>``, all variants
    in one graph and one session (same argument shapes; weights present or not)."""
    # Static shapes when every batch has the same ones: TF then checks shapes while
    # building instead of adding run-time conditionals (much faster to build).
    static = len({tuple(a.shape for a in args) for batches in variants for args, _ in batches}) == 1
    with tf.Graph().as_default():

        def ph(a: np.ndarray) -> Any:
            shape = a.shape if static or kwargs.get("_static") else (None,) + a.shape[1:]
            return tf1.placeholder(tf.as_dtype(a.dtype), shape)

        call = {k: v for k, v in kwargs.items() if not k.startswith("_")}
        ops, feeds = [], []
        for batches in variants:
            args0, w0 = batches[0]
            arg_phs = [ph(a) for a in args0]
            w_ph = None if w0 is None else ph(w0)
            ops.append(getattr(tf1.metrics, name)(*arg_phs, weights=w_ph, **call))
            feeds.append(
                [
                    {**dict(zip(arg_phs, args, strict=True)), **({} if w is None else {w_ph: w})}
                    for args, w in batches
                ]
            )
        with tf1.Session(config=_SESSION_CONFIG) as sess:
            sess.run(tf1.local_variables_initializer())
            for step in range(len(feeds[0])):
                sess.run([update for _, update in ops], {k: v for f in feeds for k, v in f[step].items()})
            return [np.asarray(v) for v in sess.run([value for value, _ in ops])]


def _ours(name: str, kwargs: dict[str, Any], batches: list[Batch]) -> np.ndarray:
    call = {k: v for k, v in kwargs.items() if not k.startswith("_")}
    state = None
    for args, w in batches:
        new = getattr(metrics, name)(*args, weights=w, **call)
        state = new if state is None else state.merge(new)
    return np.asarray(state.compute())


def _check(
    name: str,
    kwargs: dict[str, Any],
    gen: Any,
    weightings: tuple[str, ...] = WEIGHTINGS,
    sizes: tuple[int, ...] = SIZES,
) -> list[np.ndarray]:
    """TF and jaxspec agree to 1e-6 (NaN where TF gives NaN) for each weighting."""
    variants = [_make(gen, w, sizes) for w in weightings]
    wants = _tf_values(name, kwargs, variants)
    for weighting, batches, want in zip(weightings, variants, wants, strict=True):
        got = _ours(name, kwargs, batches)
        assert got.shape == want.shape, (weighting, got.shape, want.shape)
        np.testing.assert_allclose(
            got, want, rtol=0, atol=1e-6, equal_nan=True, err_msg=f"weights: {weighting}"
        )
    return wants


# -- data ------------------------------------------------------------------------------------
def _weights(rng: np.random.RandomState, shape: tuple[int, ...], mode: str) -> np.ndarray | None:
    if mode == "none":
        return None
    if mode == "zero":
        return np.zeros(shape, np.float32)
    # Multiples of 1/256 in [0, 2]: weighted counts are then exact in float32 whatever the
    # summation order, so raw counts (up to ~20 here) can be held to 1e-6 as well.
    return (np.round(rng.rand(*shape) * 512) / 256).astype(np.float32)


def _make(
    gen: Callable[[np.random.RandomState, int], tuple[tuple[np.ndarray, ...], tuple[int, ...]]],
    weights: str,
    sizes: tuple[int, ...] = SIZES,
    seed: int = 0,
) -> list[Batch]:
    """Batches from ``gen(rng, n) -> (args, weights_shape)``."""
    rng = np.random.RandomState(seed)
    out = []
    for n in sizes:
        args, wshape = gen(rng, n)
        out.append((args, _weights(rng, wshape, weights)))
    return out


def _binary(rng, n, one_class=None):
    labels = (
        rng.randint(0, 2, (n, 3)).astype(np.int64)
        if one_class is None
        else np.full((n, 3), one_class, np.int64)
    )
    preds = rng.rand(n, 3).astype(np.float32)
    preds[preds < 0.4] = 0.0
    return (labels, preds), (n, 3)


def _scores(rng, n, one_class=None, grid=None):
    """labels {0,1} [n, 2]; predictions in [0, 1], some exactly on ``grid`` and at 0 / 1."""
    labels = rng.randint(0, 2, (n, 2)) if one_class is None else np.full((n, 2), one_class)
    preds = rng.rand(n, 2).astype(np.float32)
    if grid is not None and n:
        flat = preds.reshape(-1)
        pick = rng.rand(flat.size) < 0.5
        flat[pick] = np.asarray(grid, np.float32)[rng.randint(0, len(grid), pick.sum())]
        flat[0] = 1.0
        flat[-1] = 0.0
    return (labels.astype(np.int64), preds), (n, 2)


def _classes(rng, n, c=4):
    labels = rng.randint(0, c, n).astype(np.int64)
    preds = np.where(rng.rand(n) < 0.5, labels, rng.randint(0, c, n)).astype(np.int64)
    return (labels, preds), (n,)


def _top_scores(rng, n, c=5, multi=False, oob=False):
    scores = np.round(rng.rand(n, c) * 4).astype(np.float32) / 4  # many ties
    if multi:
        labels = rng.randint(-1, c, (n, 3))
        if oob and n:
            labels[0, 0] = c + 2
    else:
        labels = rng.randint(0, c, n)
        if oob and n:
            labels[0] = c + 2
    return (labels.astype(np.int64), scores), (n,)


def _top_ids(rng, n, c=5, k=4):
    ids = rng.randint(-1, c, (n, k)).astype(np.int64)  # repeats and -1 included
    labels = rng.randint(-1, c, (n, 2)).astype(np.int64)
    return (labels, ids), (n,)


# -- cases -----------------------------------------------------------------------------------
MEANS = [
    ("mean", {}, lambda r, n: ((r.randn(n, 3).astype(np.float32),), (n, 1))),
    ("mean", {}, lambda r, n: ((r.randn(n, 3).astype(np.float32),), (n,))),
    ("mean_tensor", {"_static": True}, lambda r, n: ((r.randn(4, 3).astype(np.float32),), (4, 3))),
    ("accuracy", {}, lambda r, n: _classes(r, n)),
    ("accuracy", {}, lambda r, n: ((r.randint(0, 3, (n, 1)), r.randint(0, 3, n)), (n,))),
    (
        "mean_absolute_error",
        {},
        lambda r, n: ((r.randn(n, 2).astype(np.float32), r.randn(n, 2).astype(np.float32)), (n, 2)),
    ),
    (
        "mean_squared_error",
        {},
        lambda r, n: ((r.randn(n, 2).astype(np.float32), r.randn(n, 2).astype(np.float32)), (n, 1)),
    ),
    (
        "root_mean_squared_error",
        {},
        lambda r, n: ((r.randn(n).astype(np.float32), r.randn(n).astype(np.float32)), (n,)),
    ),
    (
        "mean_relative_error",
        {},
        lambda r, n: (
            (
                r.randn(n, 2).astype(np.float32),
                r.randn(n, 2).astype(np.float32),
                np.where(r.rand(n, 2) < 0.3, 0, r.rand(n, 2) + 0.5).astype(np.float32),
            ),
            (n, 2),
        ),
    ),
    ("percentage_below", {"threshold": 0.2}, lambda r, n: ((r.randn(n, 2).astype(np.float32),), (n, 2))),
]


def _unit(r, n):
    v = r.randn(n, 3).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


MEANS.append(("mean_cosine_distance", {"dim": 1}, lambda r, n: ((_unit(r, n), _unit(r, n)), (n, 1))))

CONFUSION = [
    (name, {}, _binary)
    for name in (
        "true_positives",
        "false_positives",
        "true_negatives",
        "false_negatives",
        "precision",
        "recall",
    )
] + [
    ("mean_per_class_accuracy", {"num_classes": 4}, _classes),
    ("mean_per_class_accuracy", {"num_classes": 6}, _classes),  # classes 4, 5 never seen: count as 0
    ("mean_iou", {"num_classes": 4}, _classes),
    ("mean_iou", {"num_classes": 6}, _classes),
]

GRID = [0.0, 0.25, 0.5, 0.75, 1.0]
THRESHOLDS = [
    (name, {"thresholds": [0.0, 0.25, 0.5, 0.75, 1.0, 0.3, 0.5]}, lambda r, n: _scores(r, n, grid=GRID))
    for name in (
        "true_positives_at_thresholds",
        "false_positives_at_thresholds",
        "true_negatives_at_thresholds",
        "false_negatives_at_thresholds",
        "precision_at_thresholds",
        "recall_at_thresholds",
    )
]
AUC_GRID = [i / 199 for i in range(200)]  # every default threshold: ties at each of them
CURVES = (
    [
        ("auc", {"curve": curve, "summation_method": how}, lambda r, n: _scores(r, n, grid=AUC_GRID))
        for curve in ("ROC", "PR")
        for how in ("trapezoidal", "careful_interpolation", "minoring", "majoring")
    ]
    + [
        ("auc", {"num_thresholds": 7}, lambda r, n: _scores(r, n, grid=[i / 6 for i in range(7)])),
        (
            "auc",
            {"thresholds": [0.7, 0.1, 0.5], "curve": "PR", "summation_method": "careful_interpolation"},
            lambda r, n: _scores(r, n, grid=[0.1, 0.5, 0.7]),
        ),
    ]
    + [
        (
            "sensitivity_at_specificity",
            {"specificity": s, "num_thresholds": 11},
            lambda r, n: _scores(r, n, grid=[i / 10 for i in range(11)]),
        )
        for s in (0.0, 0.5, 0.8, 1.0)
    ]
    + [
        (
            "specificity_at_sensitivity",
            {"sensitivity": s, "num_thresholds": 11},
            lambda r, n: _scores(r, n, grid=[i / 10 for i in range(11)]),
        )
        for s in (0.0, 0.5, 0.8, 1.0)
    ]
    + [
        ("sensitivity_at_specificity", {"specificity": 0.7}, lambda r, n: _scores(r, n, grid=AUC_GRID)),
        ("specificity_at_sensitivity", {"sensitivity": 0.7}, lambda r, n: _scores(r, n, grid=AUC_GRID)),
    ]
)
TOP_K = (
    [
        (name, {"k": k, "class_id": cid}, gen)
        for name in ("precision_at_k", "recall_at_k", "sparse_precision_at_k")
        for k, cid, gen in (
            (1, None, _top_scores),
            (3, None, lambda r, n: _top_scores(r, n, multi=True)),
            (5, 2, lambda r, n: _top_scores(r, n, multi=True)),
            (2, 7, _top_scores),
        )
    ]
    + [
        (name, {"k": 4, "class_id": cid}, _top_ids)
        for name in ("precision_at_top_k", "recall_at_top_k")
        for cid in (None, 3)
    ]
    + [
        (name, {"k": k}, gen)
        for name in ("average_precision_at_k", "sparse_average_precision_at_k")
        for k, gen in (
            (1, _top_scores),
            (3, lambda r, n: _top_scores(r, n, multi=True, oob=True)),
            (5, lambda r, n: _top_scores(r, n, oob=True)),
        )
    ]
)

CASES = [
    pytest.param(n, kw, g, id=f"{n}-{i}")
    for i, (n, kw, g) in enumerate(MEANS + CONFUSION + THRESHOLDS + CURVES + TOP_K)
]


ZERO_WEIGHTS = {
    "mean",
    "mean_tensor",
    "accuracy",
    "auc",
    "precision",
    "mean_per_class_accuracy",
    "mean_iou",
    "average_precision_at_k",
    "precision_at_k",
    "recall_at_top_k",
    "sensitivity_at_specificity",
    "precision_at_thresholds",
}


@pytest.mark.parametrize(("name", "kwargs", "gen"), CASES)
def test_matches_tf(name, kwargs, gen):
    """Unweighted and randomly weighted (and, for some, all-zero weights), in one TF graph."""
    _check(name, kwargs, gen, WEIGHTINGS if name in ZERO_WEIGHTS else WEIGHTINGS[:2])


def test_every_tf_function_is_covered():
    tested = {c.values[0] for c in CASES}
    assert set(metrics.TF_METRIC_FUNCTIONS) == {n for n in dir(tf1.metrics) if not n.startswith("_")}
    assert tested == set(metrics.TF_METRIC_FUNCTIONS)
    for name in metrics.TF_METRIC_FUNCTIONS:  # same argument names, order and defaults
        import inspect

        ours = inspect.signature(getattr(metrics, name)).parameters
        theirs = inspect.signature(getattr(tf1.metrics, name)).parameters
        assert [(p.name, p.default) for p in ours.values()] == [
            (p.name, p.default) for p in theirs.values()
        ], name


# -- edge cases ------------------------------------------------------------------------------
EDGE = {
    "one_class_pos": lambda r, n: _scores(r, n, one_class=1, grid=GRID),
    "one_class_neg": lambda r, n: _scores(r, n, one_class=0, grid=GRID),
}
EDGE_NAMES = [
    "auc",
    "precision",
    "recall",
    "sensitivity_at_specificity",
    "specificity_at_sensitivity",
    "precision_at_thresholds",
    "recall_at_thresholds",
    "true_negatives",
    "false_positives",
]


def _edge_kwargs(name: str) -> dict[str, Any]:
    return {
        "sensitivity_at_specificity": {"specificity": 0.5},
        "specificity_at_sensitivity": {"sensitivity": 0.5},
        "precision_at_thresholds": {"thresholds": GRID},
        "recall_at_thresholds": {"thresholds": GRID},
    }.get(name, {})


@pytest.mark.parametrize("which", sorted(EDGE))
@pytest.mark.parametrize("name", EDGE_NAMES)
def test_one_class_only(name, which):
    gen = EDGE[which]
    if name in ("precision", "recall", "true_negatives", "false_positives"):
        gen = (lambda g: lambda r, n: ((g(r, n)[0][0], (g(r, n)[0][1] > 0.5).astype(np.int64)), (n, 2)))(gen)
    _check(name, _edge_kwargs(name), gen, ("none", "random"))


@pytest.mark.parametrize(
    "name",
    [
        "mean",
        "accuracy",
        "auc",
        "recall",
        "mean_iou",
        "average_precision_at_k",
        "recall_at_k",
        "specificity_at_sensitivity",
        "false_negatives_at_thresholds",
    ],
)
def test_with_an_empty_batch(name):
    table = {c.values[0]: c.values for c in reversed(CASES)}
    _, kwargs, gen = table[name]
    _check(name, kwargs, gen, ("none", "random"), sizes=(8, 0, 8))


@pytest.mark.parametrize("name", ["precision_at_k", "recall_at_k", "average_precision_at_k"])
def test_k_larger_than_classes_raises_like_tf(name):
    labels, scores = np.array([1, 0], np.int64), np.random.RandomState(0).rand(2, 4).astype(np.float32)
    with tf.Graph().as_default(), pytest.raises(ValueError):
        getattr(tf1.metrics, name)(tf.constant(labels), tf.constant(scores), k=5)
    with pytest.raises(ValueError, match="k must be"):
        getattr(metrics, name)(labels, scores, k=5)


def test_top_k_ids_wider_than_classes():
    """precision/recall_at_top_k take any ids: k only names the metric in TF."""

    def gen(r, n):
        return (r.randint(0, 3, n).astype(np.int64), r.randint(-1, 3, (n, 6)).astype(np.int64)), (n,)

    for name in ("precision_at_top_k", "recall_at_top_k"):
        _check(name, {"k": 6}, gen, ("random",))


def test_argument_errors_match_tf_types():
    lab, p = np.array([0, 1], np.int64), np.array([0.2, 0.6], np.float32)
    for fn, kwargs in (
        ("auc", {"curve": "XY"}),
        ("auc", {"summation_method": "simpson"}),
        ("sensitivity_at_specificity", {"specificity": 1.5}),
        ("specificity_at_sensitivity", {"sensitivity": -0.1}),
    ):
        with tf.Graph().as_default(), pytest.raises(ValueError):
            getattr(tf1.metrics, fn)(tf.constant(lab), tf.constant(p), **kwargs)
        with pytest.raises(ValueError):
            getattr(metrics, fn)(lab, p, **kwargs)
    with pytest.raises(ValueError, match="incompatible"):
        metrics.accuracy(np.zeros(3), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="broadcast"):
        metrics.mean(np.ones((2, 3, 4)), np.ones(2))


def test_invalid_predictions_raise_eagerly_and_give_nan_when_traced():
    import jax

    lab, p = np.array([0, 1], np.int64), np.array([0.2, 1.5], np.float32)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        metrics.auc(lab, p)
    assert np.isnan(np.asarray(jax.jit(metrics.auc)(lab, p).compute()))
    assert np.isnan(
        np.asarray(jax.jit(metrics.mean_iou, static_argnums=2)(lab, np.array([0, 5]), 3).compute())
    )
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        metrics.mean_per_class_accuracy(np.array([0, -1]), np.array([0, 1]), 3)


def test_jit_and_eager_agree():
    """The engine traces metric functions: the jitted path gives the eager values."""
    import jax

    for name, kwargs, gen in (CONFUSION[-1], CURVES[5], TOP_K[-1]):
        call = {k: v for k, v in kwargs.items() if not k.startswith("_")}
        ((args, w),) = _make(gen, "random", sizes=(9,))
        eager = np.asarray(getattr(metrics, name)(*args, weights=w, **call).compute())
        jitted = jax.jit(lambda a, w, name=name, call=call: getattr(metrics, name)(*a, weights=w, **call))(
            args, w
        )
        np.testing.assert_allclose(np.asarray(jitted.compute()), eager, rtol=1e-6, atol=1e-7)
