"""jaxspec.heads against TF 2.15's tf.estimator heads on the same logits and labels
(tests/data/tf215_heads.json, written by tools/tf215_heads_reference.py): losses, eval
metric keys and values, prediction keys and values, export outputs, exception types."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.experimental import sparse

import jaxspec
from jaxspec import heads
from jaxspec.export import ClassificationOutput, PredictOutput, RegressionOutput

REF = json.loads((pathlib.Path(__file__).parent / "data" / "tf215_heads.json").read_text())
# "more_cases" with a TF feature column as weight_column or sparse string labels have no
# JAX form (feature columns are TF objects; JAX has no strings): not run here. Sparse
# integer labels are a jax.experimental.sparse.BCOO.
_TF_ONLY = {"binary_numeric_column_normalizer", "multilabel_sparse_names"}
CASES = {c["name"]: c for c in REF["cases"] + REF.get("more_cases", []) if c["name"] not in _TF_ONLY}
TOL = 1e-5

# The named functions of the reference ("loss_fns"), written for JAX.
NAMED_FNS = {
    "abs_error": lambda labels, logits: jnp.abs(labels - logits),
    "weighted_sigmoid": lambda labels, logits, features: (
        optax.sigmoid_binary_cross_entropy(logits, labels) * (1.0 + features["w"])
    ),
    "exp": jnp.exp,
    "no_logits": lambda labels, predictions: labels,
}


def build_head(spec: dict[str, Any]) -> heads.Head:
    kwargs = dict(spec["kwargs"])
    if spec["class"] == "MultiHead":
        kwargs["heads"] = [build_head(h) for h in kwargs["heads"]]
    for key in ("loss_fn", "inverse_link_fn"):
        if isinstance(kwargs.get(key), str):
            kwargs[key] = NAMED_FNS[kwargs[key]]
    return getattr(heads, spec["class"])(**kwargs)


def as_array(value: Any) -> Any:
    """JSON inputs as arrays: strings stay numpy strings, ints int32, floats float32."""
    if value is None:
        return None
    if isinstance(value, dict) and "__sparse__" in value:
        sp = value["__sparse__"]
        indices, values = jnp.asarray(sp["indices"], jnp.int32), jnp.asarray(sp["values"], jnp.int32)
        return sparse.BCOO((values, indices), shape=tuple(sp["dense_shape"]))
    if isinstance(value, dict):
        return {k: as_array(v) for k, v in value.items()}
    a = np.asarray(value)
    if a.dtype.kind in "US":
        return a
    return a.astype(np.int32 if a.dtype.kind in "iu" else np.float32)


def inputs(case: dict[str, Any]) -> dict[str, Any]:
    i = case["inputs"]
    reg = i["regularization_losses"]
    return {
        "features": as_array(i["features"]),
        "logits": as_array(i["logits"]),
        "labels": as_array(i["labels"]),
        "regularization_losses": None if reg is None else [jnp.float32(r) for r in reg],
    }


def sub_heads(head: heads.Head) -> dict[str | None, heads.Head]:
    return {h.name: h for h in head._heads} if isinstance(head, heads.MultiHead) else {None: head}


def flat_key(key: Any) -> str:
    return "/".join(key) if isinstance(key, tuple) else key


def comparable_predictions(head: heads.Head, predictions: dict[Any, Any]) -> dict[str, Any]:
    """Predictions as TF writes them: ``classes``/``all_classes`` (ids in jaxspec) as the
    head's class strings."""
    out = {}
    subs = sub_heads(head)
    for key, value in predictions.items():
        name, leaf = key if isinstance(key, tuple) else (None, key)
        value = np.asarray(value)
        if leaf in ("classes", "all_classes"):
            value = subs[name].class_names()[value]
        out[flat_key(key)] = value
    return out


def assert_close_tree(actual: dict[str, Any], expected: dict[str, Any], what: str) -> None:
    assert sorted(actual) == sorted(expected), what
    for key, want in expected.items():
        got = actual[key]
        if isinstance(want, list) and np.asarray(want).dtype.kind in "US":
            np.testing.assert_array_equal(
                np.asarray(got).astype(str), np.asarray(want), err_msg=f"{what} {key}"
            )
        else:
            np.testing.assert_allclose(
                np.asarray(got, np.float64), want, atol=TOL, rtol=TOL, err_msg=f"{what} {key}"
            )


@pytest.mark.parametrize("name", sorted(CASES))
def test_eval_loss_and_metrics(name):
    case = CASES[name]
    head = build_head(case["head"])
    spec = head.create_estimator_spec(mode=jaxspec.ModeKeys.EVAL, **inputs(case))
    assert isinstance(spec, jaxspec.EstimatorSpec)
    np.testing.assert_allclose(float(spec.loss), case["eval"]["loss"], atol=TOL, rtol=TOL)
    np.testing.assert_allclose(float(head.loss(**_loss_args(case))), case["loss"], atol=TOL, rtol=TOL)
    values = {k: float(v.compute()) for k, v in spec.eval_metric_ops.items()}
    assert_close_tree(values, case["eval"]["metrics"], name)


def _loss_args(case: dict[str, Any]) -> dict[str, Any]:
    i = inputs(case)
    return {k: i[k] for k in ("labels", "logits", "features", "regularization_losses")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_predictions_and_export_outputs(name):
    case = CASES[name]
    head = build_head(case["head"])
    i = inputs(case)
    spec = head.create_estimator_spec(
        features=i["features"], mode=jaxspec.ModeKeys.PREDICT, logits=i["logits"]
    )
    assert_close_tree(comparable_predictions(head, spec.predictions), case["predictions"], name)
    # TF's class names: a head's own PredictOutput subclass counts as a PredictOutput
    types = {
        k: "PredictOutput" if isinstance(v, PredictOutput) else type(v).__name__
        for k, v in spec.export_outputs.items()
    }
    assert types == case["export_outputs"]
    predict_keys = {
        k: sorted(v.outputs) for k, v in spec.export_outputs.items() if isinstance(v, PredictOutput)
    }
    assert predict_keys == case["predict_output_keys"]
    for key, out in spec.export_outputs.items():
        if isinstance(out, ClassificationOutput):  # scores are the probabilities; classes TF's strings
            name_ = key.split("/")[0] if "/" in key or key in sub_heads(head) else None
            sub = sub_heads(head).get(name_, next(iter(sub_heads(head).values())))
            np.testing.assert_array_equal(out.classes, sub.class_names())
            assert out.scores.shape[-1] == len(sub.class_names())
        if isinstance(out, RegressionOutput):
            assert out.value.dtype == jnp.float32


@pytest.mark.parametrize("name", sorted(CASES))
def test_train_loss_and_tpu_spec(name):
    case = CASES[name]
    head = build_head(case["head"])
    i = inputs(case)
    params = i["logits"]
    spec = head.create_estimator_spec(
        features=i["features"],
        mode=jaxspec.ModeKeys.TRAIN,
        logits=lambda p: p,
        labels=i["labels"],
        trainable_variables=params,
        train_op_fn=lambda grads: jax.tree.map(lambda p, g: p - 0.1 * g, params, grads),
        regularization_losses=i["regularization_losses"],
    )
    np.testing.assert_allclose(float(spec.loss), case["train"]["loss"], atol=TOL, rtol=TOL)
    # The new "state" moved against the gradient of the loss: the loss went down.
    assert float(head.loss(i["labels"], spec.train_op, i["features"])) < float(
        head.loss(i["labels"], params, i["features"])
    )
    tpu = head.create_tpu_estimator_spec(mode=jaxspec.ModeKeys.EVAL, **i)
    assert isinstance(tpu, jaxspec.TPUEstimatorSpec)
    metric_fn, tensors = tpu.eval_metrics
    assert all(np.ndim(t) >= 1 for t in tensors.values())  # every tensor gathers on axis 0
    values = {k: float(v.compute()) for k, v in metric_fn(**tensors).items()}
    assert_close_tree(values, case["eval"]["metrics"], name)


# -- bad input ----------------------------------------------------------------------------
# TF raises tf.errors.InvalidArgumentError / UnimplementedError only when a graph runs; on
# eager tensors it raises ValueError, and so does jaxspec on concrete arrays. jaxspec reads
# integer labels with a vocabulary as ids (JAX arrays hold no strings).
ACCEPTED_DIFFERENCES = {"multiclass_int_labels_with_vocab"}
EAGER_ERRORS = [e for e in REF["errors"] if e["mode"] == "eager" and e["name"] not in ACCEPTED_DIFFERENCES]
BUILD_ERRORS = [e for e in REF["errors"] if e["mode"] == "graph" and e["call"] not in ("loss", "predictions")]


def _raise_for(case: dict[str, Any]) -> None:
    head = build_head(case["head"])
    i = case["inputs"] and {**inputs(case)}
    call = case["call"]
    if call == "init":
        return
    if call == "loss":
        head.loss(**{k: i[k] for k in ("labels", "logits", "features", "regularization_losses")})
    elif call == "predictions":
        head.predictions(i["logits"])
    elif call == "predictions_bad_key":
        head.predictions(i["logits"], keys=["probabilities", "no_such_key"])
    elif call == "eval_spec":
        head.create_estimator_spec(features=i["features"], mode="eval", logits=i["logits"], labels=None)
    elif call == "loss_reduction":
        _ = head.loss_reduction
    else:
        _train_call(head, call, i)


def _train_call(head: heads.Head, call: str, i: dict[str, Any]) -> None:
    params = i["logits"]
    state = _sgd_state(params)
    kwargs = dict(features=i["features"], mode="train", logits=lambda p: p, labels=i["labels"])
    step = lambda g: state.apply_gradients(grads=g)  # noqa: E731
    if call == "train_spec":
        head.create_estimator_spec(**kwargs, trainable_variables=state)
    elif call == "train_spec_update_ops":
        head.create_estimator_spec(
            **kwargs, trainable_variables=state, train_op_fn=step, update_ops=lambda s: s
        )
    elif call == "train_spec_both":
        head.create_estimator_spec(
            **kwargs, trainable_variables=state, train_op_fn=step, optimizer=optax.sgd(0.1)
        )
    elif call == "train_spec_v1_optimizer":  # not an optax transformation
        head.create_estimator_spec(**kwargs, trainable_variables=state, optimizer=object())
    elif call == "train_spec_no_variables":
        head.create_estimator_spec(**kwargs, optimizer=optax.sgd(0.1))
    else:
        raise AssertionError(f"unknown call {call}")


def _sgd_state(params: Any) -> Any:
    from flax.training import train_state

    return train_state.TrainState.create(apply_fn=None, params=params, tx=optax.sgd(0.1))


@pytest.mark.parametrize("case", EAGER_ERRORS + BUILD_ERRORS, ids=lambda c: f"{c['name']}-{c['mode']}")
def test_bad_input_raises_tf_exception_type(case):
    expected = {"InvalidArgumentError": ValueError, "UnimplementedError": ValueError}.get(case["error"])
    expected = expected or {"ValueError": ValueError, "TypeError": TypeError}[case["error"]]
    with pytest.raises(expected):
        if case["call"] == "init":
            build_head(case["head"])
        else:
            _raise_for(case)


def test_int_labels_with_vocabulary_are_ids():
    case = next(e for e in REF["errors"] if e["name"] == "multiclass_int_labels_with_vocab")
    head = build_head(case["head"])
    i = inputs(case)
    plain = heads.MultiClassHead(n_classes=3)
    assert float(head.loss(i["labels"], i["logits"])) == pytest.approx(
        float(plain.loss(i["labels"], i["logits"]))
    )


def test_messages_name_the_argument_and_shapes():
    head = heads.BinaryClassHead()
    with pytest.raises(ValueError, match=r"labels shape .*\(6, 1\).*\(4, 1\)"):
        head.loss(np.zeros((4, 1), np.int32), np.zeros((6, 1), np.float32))
    with pytest.raises(ValueError, match=r"logits shape .*\(6, 2\)"):
        head.loss(np.zeros((6, 1), np.int32), np.zeros((6, 2), np.float32))
    with pytest.raises(ValueError, match=r"weights shape .*\(6, 1\).*\(4, 1\)"):
        heads.BinaryClassHead(weight_column="w").loss(
            np.zeros((6, 1), np.int32), np.zeros((6, 1), np.float32), {"w": np.ones((4, 1), np.float32)}
        )
    with pytest.raises(ValueError, match=r"labels \['maybe'\] are not in label_vocabulary \['neg', 'pos'\]"):
        heads.BinaryClassHead(label_vocabulary=["neg", "pos"]).loss(
            np.array([["neg"], ["maybe"]]), np.zeros((2, 1), np.float32)
        )
    with pytest.raises(ValueError, match=r"cannot split logits of shape \(6, 3\).*\[3, 1\]"):
        heads.MultiHead([heads.MultiClassHead(3, name="m"), heads.BinaryClassHead(name="b")]).predictions(
            np.zeros((6, 3), np.float32)
        )


def test_out_of_range_labels_in_a_trace_give_nan_loss():
    head = heads.MultiClassHead(n_classes=3)
    logits = jnp.zeros((2, 3))
    loss = jax.jit(head.loss)(jnp.array([[0], [3]], jnp.int32), logits)
    assert np.isnan(float(loss))
    assert np.isfinite(float(jax.jit(head.loss)(jnp.array([[0], [2]], jnp.int32), logits)))


def test_exported_from_jaxspec():
    for name in (
        "Head",
        "BinaryClassHead",
        "MultiClassHead",
        "RegressionHead",
        "MultiLabelHead",
        "MultiHead",
    ):
        assert getattr(jaxspec, name) is getattr(heads, name)
    assert (
        heads.BinaryClassHead().loss_reduction == heads.Reduction.SUM_OVER_BATCH_SIZE == "sum_over_batch_size"
    )
