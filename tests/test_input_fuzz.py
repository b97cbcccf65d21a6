"""Property test of what input_fn returns, through train, evaluate and predict.

Random nested dicts and tuples of float64/int64/bool/... arrays, empty inner dimensions, a
shorter last batch, returned as a list, a generator or one batch; into some a single
fault is injected (a string or object leaf, a scalar, a leaf with other rows, ragged
nested lists, a batch of zero rows, a tuple of three, a generator that raises part-way).
Valid input trains, evaluates and predicts (an array returned alone is a TypeError
naming it); a fault is a TypeError or ValueError naming
the offending key or batch (the user's own exception keeps its type, with a note naming
the batch); never another exception, a hang (hypothesis' deadline) or a crash.

Size: ``JAXSPEC_FUZZ_INPUT_EXAMPLES`` examples per mode (default 40, for CI; ``./dev fuzz``:
10,000).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import jaxspec

EXAMPLES = int(os.environ.get("JAXSPEC_FUZZ_INPUT_EXAMPLES") or 40)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=30_000,  # a hang fails; the first examples compile
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=EXAMPLES <= 200,  # CI sizes: the same examples every run
)
VALID_DTYPES = [np.float64, np.float32, np.int64, np.int32, np.bool_, np.uint8, np.float16]
KEYS = ["a", "b", "c", "d"]


class UserError(Exception):
    """What a user's generator raises part-way (any type of theirs)."""


def model_fn(features, labels, mode, state):
    """Works for any numeric structure: a weighted row sum of every leaf."""
    leaves = [jnp.asarray(x, jnp.float32) for x in jax.tree.leaves(features)]
    rows = (leaves or jax.tree.leaves(labels))[0].shape[0]
    row_sum = sum((x.reshape(rows, -1).sum(axis=1) for x in leaves), jnp.zeros(rows))
    target = sum(
        (jnp.asarray(x, jnp.float32).reshape(rows, -1).sum(axis=1) for x in jax.tree.leaves(labels)), 0.0
    )

    def loss_fn(w):
        return jnp.mean((w * row_sum * 1e-3 - target * 1e-3) ** 2)

    if mode == jaxspec.ModeKeys.PREDICT:
        return jaxspec.EstimatorSpec(mode, predictions={"out": state["w"] * row_sum})
    loss, grad = jax.value_and_grad(loss_fn)(state["w"])
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"w": state["w"] - 0.01 * grad})


def _estimator() -> jaxspec.Estimator:
    config = jaxspec.RunConfig(
        model_dir=tempfile.mkdtemp(prefix="jaxspec-input-fuzz-"),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
    )
    return jaxspec.Estimator(model_fn, config=config, init_fn=lambda: {"w": jnp.float32(1.0)})


ESTIMATOR: list[jaxspec.Estimator] = []  # one for the whole run: its compile cache is reused


# -- input structures -------------------------------------------------------------------
@st.composite
def structures(draw, depth=0):
    """A tree of dicts, tuples and leaf slots (``None``: an array goes there)."""
    if depth >= 2 or draw(st.integers(0, 3)) == 0:
        return None
    if depth == 0 or draw(st.booleans()):  # at the top a dict: a tuple is (features, labels)
        keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
        return {k: draw(structures(depth=depth + 1)) for k in keys}
    return tuple(draw(structures(depth=depth + 1)) for _ in range(draw(st.integers(1, 2))))


def _slots(tree, path=()) -> list[tuple]:
    if tree is None:
        return [path]
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    return [p for k, sub in items for p in _slots(sub, (*path, k))]


def _fill(tree, leaf, path=()):
    if tree is None:
        return leaf(path)
    if isinstance(tree, dict):
        return {k: _fill(v, leaf, (*path, k)) for k, v in tree.items()}
    return tuple(_fill(v, leaf, (*path, i)) for i, v in enumerate(tree))


@st.composite
def cases(draw):
    features = draw(structures())  # None: one array
    labels = draw(st.sampled_from(["none", "array", "dict"]))
    n_batches = draw(st.integers(1, 3))
    rows = draw(st.integers(1, 4))
    last_rows = draw(st.integers(1, rows))
    dtypes = {p: draw(st.sampled_from(VALID_DTYPES)) for p in _slots(features)}
    inner = {p: draw(st.sampled_from([(), (2,), (0,), (1, 3)])) for p in _slots(features)}
    form = draw(st.sampled_from(["list", "generator", "single"]))
    fault_kinds = ["string", "object", "scalar", "rows", "ragged", "empty", "tuple3", "raise"] + ["none"] * 3
    fault = draw(st.sampled_from(fault_kinds))
    leaves = len(_slots(features)) + (labels != "none")
    if (fault == "raise" and form == "single") or (fault == "rows" and leaves < 2):
        fault = "none"  # one batch cannot raise part-way; one leaf's rows are the batch's
    fault_batch = draw(st.integers(0, n_batches - 1)) if form != "single" else 0
    fault_slot = draw(st.sampled_from(_slots(features)))
    seed = draw(st.integers(0, 2**16))
    return dict(
        features=features, labels=labels, n_batches=1 if form == "single" else n_batches, rows=rows,
        last_rows=last_rows, dtypes=dtypes, inner=inner, form=form, fault=fault,
        fault_batch=fault_batch, fault_slot=fault_slot, seed=seed,
    )  # fmt: skip


def _key_text(slot: tuple) -> str:
    """How a leaf's key path appears in messages (``features['a'][0]``)."""
    return "features" + "".join(f"[{k!r}]" for k in slot)


def _batches(case: dict[str, Any]) -> list[Any]:
    rng = np.random.default_rng(case["seed"])
    out = []
    for b in range(case["n_batches"]):
        rows = case["last_rows"] if b == case["n_batches"] - 1 else case["rows"]
        faulty = case["fault"] if b == case["fault_batch"] else "none"
        if faulty == "empty":
            rows = 0

        def leaf(path, rows=rows, faulty=faulty):
            shape = (rows, *case["inner"][path])
            value = rng.integers(0, 5, shape).astype(case["dtypes"][path])
            if path != case["fault_slot"]:
                return value
            if faulty == "string":
                return np.full(shape, "x")
            if faulty == "object":
                return np.empty(shape, object)
            if faulty == "scalar":
                return case["dtypes"][path](1)
            if faulty == "rows":
                return rng.integers(0, 5, (rows + 1, *case["inner"][path])).astype(case["dtypes"][path])
            if faulty == "ragged":
                return [[1.0] * (i + 1) for i in range(max(rows, 2))]
            return value

        features = _fill(case["features"], leaf)
        labels = {
            "none": None,
            "array": rng.integers(0, 3, (rows,)).astype(np.int64),
            "dict": {"y": rng.random((rows, 2))},
        }[case["labels"]]
        element = features if labels is None else (features, labels)
        if faulty == "tuple3":
            element = (features, labels, features)
        out.append(element)
    return out


def _input_fn(case: dict[str, Any]):
    batches = _batches(case)

    def input_fn():
        if case["form"] == "single":
            return batches[0]
        if case["form"] == "list":
            return batches if case["fault"] != "raise" else _raising(batches, case["fault_batch"])
        return _raising(batches, case["fault_batch"] if case["fault"] == "raise" else None)

    return input_fn


def _raising(batches, at):
    for i, batch in enumerate(batches):
        if i == at:
            raise UserError(f"the user's data failed at {i}")
        yield batch


def _expected_token(case: dict[str, Any]) -> str | None:
    fault = case["fault"]
    if case["form"] == "single" and case["features"] is None and case["labels"] == "none":
        if fault not in ("tuple3", "ragged", "scalar"):  # those are no bare array
            return "returned a bare"  # one array alone: a TypeError naming it (issue 35)
    if fault == "none":
        return None
    if fault in ("empty", "tuple3", "raise"):
        return f"batch index {case['fault_batch']}"
    return _key_text(case["fault_slot"])


def _run(mode: str, input_fn) -> None:
    est = ESTIMATOR[0]
    if mode == "train":
        est.train(input_fn, steps=3)
    elif mode == "eval":
        est.evaluate(input_fn)
    else:
        for _ in est.predict(input_fn):
            pass


@pytest.mark.parametrize("mode", ["train", "eval", "predict"])
@SETTINGS
@given(cases())
def test_input_fn_outputs_give_results_or_named_errors(mode, case):
    if not ESTIMATOR:
        ESTIMATOR.append(_estimator())
    token = _expected_token(case)
    if token is not None and case["fault"] == "tuple3" and case["form"] == "single":
        token = "tuple of 3"  # the whole result is one bad tuple
    try:
        _run(mode, _input_fn(case))
    except UserError as err:
        assert case["fault"] == "raise", err
        notes = " ".join(getattr(err, "__notes__", []))
        assert f"batch index {case['fault_batch']}" in notes, notes
        event(f"{mode}: user error kept")
    except (TypeError, ValueError) as err:
        assert token is not None, f"valid input {case} raised {type(err).__name__}: {err}"
        assert token in str(err), f"{case['fault']}: {token!r} not in {err}"
        event(f"{mode}: {case['fault']} named")
    else:
        assert token is None, f"{case['fault']} at {token} was accepted in {mode}"
        event(f"{mode}: valid")
