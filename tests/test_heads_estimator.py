"""Heads through jaxspec.Estimator and TPUEstimator(use_tpu=True): the TF 2.15 Estimator
runs of tests/data/tf215_heads.json (the losses of 3 training steps, evaluate, predict), and the 8-replica
mesh against one device (training with the head's 1/num_replicas scaling, eval metrics)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state

import jaxspec
from jaxspec import heads
from tests.test_heads_reference import build_head

REF = json.loads((pathlib.Path(__file__).parent / "data" / "tf215_heads.json").read_text())
RUNS = {c["name"]: c for c in REF["estimator"]}


def config(model_dir: str) -> jaxspec.RunConfig:
    return jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
    )


def label_ids(case: dict[str, Any]) -> Any:
    """The labels as arrays; string labels become their vocabulary ids (JAX arrays hold
    no strings)."""
    vocab = case["head"]["kwargs"].get("label_vocabulary")
    labels = case["labels"]
    if isinstance(labels, dict):
        return {k: np.asarray(v, np.int32 if k == "m" else np.float32) for k, v in labels.items()}
    if vocab:
        return np.asarray([[vocab.index(v[0])] for v in labels], np.int32)
    kind = case["head"]["class"]
    return np.asarray(labels, np.float32 if kind == "RegressionHead" else np.int32)


def input_fn(features: dict[str, np.ndarray], labels: Any, batch: int, repeat: bool) -> Any:
    n = len(features["x"])

    def fn():
        def gen():
            while True:
                for s in range(0, n, batch):
                    f = {k: v[s : s + batch] for k, v in features.items()}
                    if labels is None:
                        yield f
                    elif isinstance(labels, dict):
                        yield f, {k: v[s : s + batch] for k, v in labels.items()}
                    else:
                        yield f, labels[s : s + batch]
                if not repeat:
                    return

        return gen()

    return fn


def linear_model_fn(head: heads.Head, use_optimizer: bool, tpu: bool = False) -> Any:
    """A linear model (``logits = x @ w``, no bias) trained by SGD through the head."""

    def model_fn(features, labels, mode, params, state):
        create = head.create_tpu_estimator_spec if tpu else head.create_estimator_spec
        if mode != jaxspec.ModeKeys.TRAIN:
            return create(
                features=features, mode=mode, logits=features["x"] @ state.params["w"], labels=labels
            )
        train = (
            {"optimizer": state.tx}
            if use_optimizer
            else {"train_op_fn": lambda g: state.apply_gradients(grads=g)}
        )
        return create(
            features=features,
            mode=mode,
            logits=lambda p: features["x"] @ p["w"],
            labels=labels,
            trainable_variables=state,
            **train,
        )

    return model_fn


def init_for(w0: Any, learning_rate: float) -> Any:
    def init_fn():
        return train_state.TrainState.create(
            apply_fn=None, params={"w": jnp.asarray(w0, jnp.float32)}, tx=optax.sgd(learning_rate)
        )

    return init_fn


class LossRecorder(jaxspec.SessionRunHook):
    """Records each training step's loss, as the reference's hook does in TF."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def before_run(self, run_context: Any) -> jaxspec.SessionRunArgs:
        return jaxspec.SessionRunArgs("loss")

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.values.append(float(run_values.results))


def flat(key: Any) -> str:
    return "/".join(key) if isinstance(key, tuple) else key


@pytest.mark.parametrize("name", sorted(RUNS))
def test_estimator_matches_tf215(tmp_path, name):
    case = RUNS[name]
    head = build_head(case["head"])
    features = {"x": np.asarray(case["x"], np.float32)}
    features.update({k: np.asarray(v, np.float32) for k, v in case["features"].items()})
    labels = label_ids(case)
    est = jaxspec.Estimator(
        linear_model_fn(head, case["optimizer"] == "sgd"),
        config=config(str(tmp_path)),
        init_fn=init_for(case["w0"], case["learning_rate"]),
    )
    batch = case["batch_size"]
    losses = LossRecorder()
    est.train(input_fn(features, labels, batch, repeat=True), steps=case["train_steps"], hooks=[losses])
    np.testing.assert_allclose(losses.values, case["train_losses"], atol=1e-5, rtol=1e-5)
    result = est.evaluate(input_fn(features, labels, batch, repeat=False))
    assert sorted(result) == sorted(case["evaluate"])
    for key, want in case["evaluate"].items():
        np.testing.assert_allclose(float(result[key]), want, atol=1e-5, rtol=1e-5, err_msg=key)
    predicted = list(est.predict(input_fn(features, None, batch, repeat=False)))
    assert len(predicted) == len(case["predictions"])
    subs = {h.name: h for h in head._heads} if isinstance(head, heads.MultiHead) else {None: head}
    for got, want in zip(predicted, case["predictions"], strict=True):
        got = {flat(k): (k[0] if isinstance(k, tuple) else None, np.asarray(v)) for k, v in got.items()}
        assert sorted(got) == sorted(want)
        for key, value in want.items():
            sub, array = got[key]
            if key.split("/")[-1] in ("classes", "all_classes"):
                np.testing.assert_array_equal(subs[sub].class_names()[array], value, err_msg=key)
            else:
                np.testing.assert_allclose(array, value, atol=1e-5, rtol=1e-5, err_msg=key)


MESH_HEADS = {
    "binary_weighted": lambda: heads.BinaryClassHead(weight_column="w", thresholds=[0.4]),
    "multihead": lambda: heads.MultiHead(
        [heads.MultiClassHead(3, name="m"), heads.RegressionHead(name="r", weight_column="w")],
        head_weights=[1.0, 0.5],
    ),
}


def _mesh_data(name: str) -> tuple[dict[str, np.ndarray], Any, np.ndarray]:
    rng = np.random.default_rng(7)
    n = 20  # eval batches of 16: the last one is short, padded on the mesh
    features = {
        "x": rng.normal(size=(n, 3)).astype(np.float32),
        "w": rng.uniform(0.2, 2, (n, 1)).astype(np.float32),
    }
    if name == "binary_weighted":
        return (
            features,
            rng.integers(0, 2, (n, 1)).astype(np.int32),
            rng.normal(size=(3, 1)).astype(np.float32),
        )
    labels = {
        "m": rng.integers(0, 3, (n, 1)).astype(np.int32),
        "r": rng.normal(size=(n, 1)).astype(np.float32),
    }
    return features, labels, rng.normal(size=(3, 4)).astype(np.float32)


def _first(features: dict[str, np.ndarray], labels: Any, n: int) -> tuple[dict[str, np.ndarray], Any]:
    """The first ``n`` rows: training batches are all full (the mesh stops at a short one)."""
    cut = {k: v[:n] for k, v in features.items()}
    return cut, ({k: v[:n] for k, v in labels.items()} if isinstance(labels, dict) else labels[:n])


def _short_batch_head_losses(head: heads.Head, w: np.ndarray, features: Any, labels: Any) -> dict[str, float]:
    """A MultiHead's ``loss/<name>`` on the mesh: the eval batches are 16 rows and a short
    one of 4, which counts by its share of real rows there (4/16) where one device (and
    TF) weighs every batch 1. Computed here from the per-batch losses of the trained model."""
    if not isinstance(head, heads.MultiHead):
        return {}
    logits = head._split_logits(features["x"] @ w)
    out = {}
    for sub in head._heads:

        def batch_loss(rows: slice, sub=sub) -> float:
            f = {k: v[rows] for k, v in features.items()}
            return float(sub.loss(labels[sub.name][rows], logits[sub.name][rows], f))

        out[f"loss/{sub.name}"] = (batch_loss(slice(0, 16)) + 0.25 * batch_loss(slice(16, 20))) / 1.25
    return out


@pytest.mark.parametrize("name", sorted(MESH_HEADS))
def test_mesh_matches_one_device(tmp_path, name):
    features, labels, w0 = _mesh_data(name)
    results = {}
    for where in ("one", "mesh"):
        head = MESH_HEADS[name]()
        if where == "one":
            est = jaxspec.Estimator(
                linear_model_fn(head, use_optimizer=True),
                config=config(str(tmp_path / where)),
                init_fn=init_for(w0, 0.5),
            )
        else:
            est = jaxspec.TPUEstimator(
                linear_model_fn(head, use_optimizer=True, tpu=True),
                config=config(str(tmp_path / where)),
                use_tpu=True,
                train_batch_size=16,
                eval_batch_size=16,
                predict_batch_size=16,
                init_fn=init_for(w0, 0.5),
            )
        est.train(input_fn(*_first(features, labels, 16), 16, repeat=True), steps=4)
        evaluated = est.evaluate(input_fn(features, labels, 16, repeat=False))
        predicted = list(est.predict(input_fn(features, None, 16, repeat=False)))
        results[where] = (evaluated, predicted)
        if where == "one":
            results["w"] = est.get_variable_value("params/w")
    (one_eval, one_pred), (mesh_eval, mesh_pred) = results["one"], results["mesh"]
    assert sorted(mesh_eval) == sorted(one_eval)
    assert len(one_eval) > 5
    head_losses = _short_batch_head_losses(MESH_HEADS[name](), results["w"], features, labels)
    for key in one_eval:
        want = head_losses.get(key, float(one_eval[key]))
        np.testing.assert_allclose(float(mesh_eval[key]), want, atol=1e-5, rtol=1e-5, err_msg=key)
    assert len(mesh_pred) == len(one_pred) == 20
    for a, b in zip(mesh_pred, one_pred, strict=True):
        assert sorted(map(flat, a)) == sorted(map(flat, b))
        for key in a:
            np.testing.assert_allclose(np.asarray(a[key]), np.asarray(b[key]), atol=1e-5, err_msg=flat(key))
    # Training moved the weights (the evaluation is not of the initial model).
    assert np.abs(results["w"] - w0).max() > 1e-3
