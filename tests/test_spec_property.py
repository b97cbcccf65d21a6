"""Property test: random spec arguments (wrong types, shapes, nesting, modes) either build
a valid spec or raise TypeError / ValueError / RuntimeError; never anything else, never a
hang (hypothesis' deadline)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jax.experimental import sparse

import jaxspec
from jaxspec import EstimatorSpec, ModeKeys, NPUEstimatorSpec, TPUEstimatorSpec
from jaxspec.export import ClassificationOutput, ExportOutput, PredictOutput, RegressionOutput

EXPECTED = (TypeError, ValueError, RuntimeError)
SPARSE = sparse.BCOO.fromdense(jnp.eye(2))

shapes = st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple)
dtypes = st.sampled_from([np.float32, np.int32, np.bool_, np.float16, np.str_])


@st.composite
def arrays(draw):
    shape, dtype = draw(shapes), draw(dtypes)
    value = np.zeros(shape, dtype)
    return jnp.asarray(value) if dtype is not np.str_ and draw(st.booleans()) else value


junk = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.just(SPARSE),
    st.just(object()),
    st.lists(st.integers(), max_size=2),
    st.just(jaxspec.SessionRunHook()),
)
values = st.one_of(arrays(), junk)
keys = st.one_of(st.text(max_size=4), st.integers(0, 3))


def mostly(valid, invalid):
    """``valid`` 19 times in 20, else ``invalid``: with a dozen fields, about half the
    drawn argument sets still build a spec, the rest exercise the errors."""
    return st.integers(0, 19).flatmap(lambda i: valid if i else invalid)


float_arrays = st.builds(
    lambda shape: jnp.zeros(shape, jnp.float32), st.sampled_from([(), (1,), (3,), (2, 2)])
)
scalars = st.builds(lambda shape: np.zeros(shape, np.float32), st.sampled_from([(), (1,), (1, 1)]))
modes = mostly(
    st.sampled_from([*ModeKeys.all(), None]),
    st.one_of(st.sampled_from(["predict", "training", ""]), st.integers(0, 2)),
)


def _fn(arity):
    return [lambda: 0, lambda a: 0, lambda a, b: 0, lambda *a: 0, lambda a, b=1, *, c: 0][arity]


def _metric_fn(a, b):
    return {"m": jaxspec.metrics.mean(a)}


valid_pairs = st.one_of(
    st.none(),
    st.tuples(st.just(_metric_fn), st.lists(float_arrays, min_size=2, max_size=2)),
    st.tuples(st.just(_metric_fn), st.fixed_dictionaries({"a": float_arrays, "b": float_arrays})),
    st.tuples(st.just(_fn(3)), st.lists(float_arrays, max_size=3)),
)
pairs = mostly(
    valid_pairs,
    st.one_of(
        junk,
        st.tuples(st.integers(0, 4).map(_fn), st.lists(arrays(), max_size=3)),
        st.tuples(st.integers(0, 4).map(_fn), st.dictionaries(st.sampled_from("abc"), arrays(), max_size=2)),
        st.tuples(junk, st.lists(arrays(), max_size=2)),
        st.lists(st.one_of(st.integers(0, 4).map(_fn), st.lists(arrays(), max_size=2)), max_size=3),
    ),
)
heads = mostly(
    st.one_of(
        st.dictionaries(st.text(min_size=1, max_size=3), float_arrays, min_size=1, max_size=2).map(
            PredictOutput
        ),
        st.just(RegressionOutput(np.zeros(3, np.float32))),
        st.just(ClassificationOutput(scores=np.zeros((3, 2), np.float32))),
    ),
    junk,
)
head_keys = st.sampled_from(["serving_default", "head", "other", 7])
hooks = mostly(
    st.one_of(st.none(), st.lists(st.just(jaxspec.SessionRunHook()), max_size=2)),
    st.one_of(junk, st.lists(st.one_of(st.just(jaxspec.SessionRunHook()), junk), max_size=3)),
)
common = dict(
    mode=modes,
    predictions=mostly(
        st.one_of(st.none(), float_arrays, st.dictionaries(st.text(max_size=3), float_arrays, max_size=3)),
        st.one_of(
            values, st.dictionaries(keys, st.one_of(values, st.dictionaries(keys, values)), max_size=3)
        ),
    ),
    loss=mostly(st.one_of(st.none(), scalars), values),
    train_op=mostly(
        st.one_of(st.none(), st.dictionaries(st.text(max_size=3), float_arrays, max_size=3)),
        st.one_of(values, st.dictionaries(keys, st.one_of(values, st.lists(values, max_size=2)), max_size=3)),
    ),
    export_outputs=mostly(st.one_of(st.none(), st.dictionaries(head_keys, heads, max_size=3)), junk),
    training_hooks=hooks,
    evaluation_hooks=hooks,
    prediction_hooks=hooks,
)
estimator_args = st.fixed_dictionaries(
    {
        **common,
        "eval_metric_ops": mostly(
            st.one_of(
                st.none(),
                st.dictionaries(
                    st.text(max_size=3),
                    st.one_of(
                        st.tuples(float_arrays, float_arrays), st.just(jaxspec.metrics.mean(jnp.ones(2)))
                    ),
                    max_size=2,
                ),
            ),
            st.one_of(junk, st.dictionaries(keys, values, max_size=2)),
        ),
        "training_chief_hooks": hooks,
        "scaffold": mostly(st.one_of(st.none(), st.just(jaxspec.Scaffold())), junk),
    }
)
tpu_args = st.fixed_dictionaries(
    {
        **common,
        "eval_metrics": pairs,
        "host_call": pairs,
        "scaffold_fn": mostly(
            st.one_of(st.none(), st.just(lambda: jaxspec.Scaffold())), st.one_of(junk, st.just(lambda: None))
        ),
    }
)

# deadline: a generous per-example bound that still catches a hang (first examples may compile).
# JAXSPEC_FUZZ_EXAMPLES sets the examples per spec class (120 by default; `./dev fuzz`: 10,000).
EXAMPLES = int(os.environ.get("JAXSPEC_FUZZ_EXAMPLES") or 120)
SETTINGS = settings(max_examples=EXAMPLES, deadline=10_000, suppress_health_check=[HealthCheck.too_slow])


def _check_valid(spec, args, hook_fields):
    assert spec.mode == args["mode"] and spec.mode in (*ModeKeys.all(), None)
    if spec.loss is not None:
        assert spec.loss.shape == ()
    if spec.mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
        assert spec.loss is not None
    if spec.mode == ModeKeys.TRAIN:
        assert spec.train_op is not None
    for field in hook_fields:
        assert isinstance(getattr(spec, field), tuple)
        assert all(isinstance(h, jaxspec.SessionRunHook) for h in getattr(spec, field))
    if spec.mode == ModeKeys.PREDICT:
        assert spec.predictions is not None
        outputs = spec.export_outputs
        assert all(isinstance(v, ExportOutput) for v in outputs.values())
        assert not outputs or "serving_default" in outputs
    jax.tree.leaves(spec)  # a pytree of its arrays


def _build(cls, args):
    try:
        spec = cls(**args)
    except EXPECTED:
        event("rejected")
        return None
    event(f"built in mode {spec.mode}")
    return spec


@pytest.mark.parametrize("cls", [EstimatorSpec, NPUEstimatorSpec])
@SETTINGS
@given(estimator_args, pairs)
def test_estimator_spec_builds_valid_or_raises_expected(cls, args, host_call):
    if cls is NPUEstimatorSpec:
        args = {**args, "host_call": host_call}
    spec = _build(cls, args)
    if spec is not None:
        _check_valid(
            spec, args, ("training_chief_hooks", "training_hooks", "evaluation_hooks", "prediction_hooks")
        )
        assert isinstance(spec.scaffold, jaxspec.Scaffold) and isinstance(spec.eval_metric_ops, dict)
        assert _build(
            cls, {**spec._asdict(), **({"host_call": spec.host_call} if cls is NPUEstimatorSpec else {})}
        )


@SETTINGS
@given(tpu_args)
def test_tpu_estimator_spec_builds_valid_or_raises_expected(args):
    spec = _build(TPUEstimatorSpec, args)
    if spec is None:
        return
    _check_valid(spec, args, ("training_hooks", "evaluation_hooks", "prediction_hooks"))
    for field in ("eval_metrics", "host_call"):
        pair = getattr(spec, field)
        assert pair is None or (isinstance(pair, tuple) and len(pair) == 2 and callable(pair[0]))
    try:
        cpu = spec.as_estimator_spec()
    except EXPECTED:
        return
    assert isinstance(cpu, EstimatorSpec) and cpu.mode == spec.mode
