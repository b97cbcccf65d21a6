"""A final partial batch is padded and masked: every example counts once."""

from __future__ import annotations

import numpy as np
import pytest

import jaxspec
from tests.helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn


def _numpy_reference(est, x, y):
    """Accuracy and mean label over all examples, from predict's logits, by numpy."""
    preds = list(est.predict(batches_input_fn(x, None, 8)))
    ids = np.array([p["class_ids"] for p in preds])
    return preds, float(np.mean(ids == y)), float(np.mean(y))


def _estimator(path, ipl: int, use_tpu: bool, batch: int) -> jaxspec.TPUEstimator:
    """A TPUEstimator of the helpers' model, one batch size for train, eval and predict."""
    return jaxspec.TPUEstimator(
        make_model_fn(),
        config=fast_config(str(path), ipl),
        use_tpu=use_tpu,
        train_batch_size=batch,
        eval_batch_size=batch,
        predict_batch_size=batch,
        init_fn=init_fn,
    )


@pytest.mark.parametrize("use_tpu", [True, False])
def test_eval_over_37_examples_batch_8(tmp_path, use_tpu):
    x, y = digits(37)
    est = _estimator(tmp_path, 2, use_tpu, 8)
    est.train(batches_input_fn(x, y, 8, repeat=True), steps=3)
    results = est.evaluate(batches_input_fn(x, y, 8))
    preds, accuracy, mean_label = _numpy_reference(est, x, y)
    assert len(preds) == 37
    assert results["global_step"] == 3
    assert results["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert results["mean_label"] == pytest.approx(mean_label, abs=1e-6)
    assert 0.0 < accuracy < 1.0  # trained a little: a real value, not a trivial one


def test_mesh_and_one_device_agree(tmp_path):
    x, y = digits(37)
    results = {}
    for use_tpu in (True, False):
        est = jaxspec.TPUEstimator(
            make_model_fn(),
            config=fast_config(str(tmp_path / str(use_tpu))),
            use_tpu=use_tpu,
            train_batch_size=8,
            eval_batch_size=16,
            predict_batch_size=16,
            init_fn=init_fn,
        )
        results[use_tpu] = (
            est.evaluate(batches_input_fn(x, y, 16)),
            est.evaluate(batches_input_fn(x[:32], y[:32], 16)),
        )
    for key in ("accuracy", "mean_label"):
        assert results[True][0][key] == pytest.approx(results[False][0][key], abs=1e-6)
    # With full batches the mean of batch losses is the same on the mesh and off it.
    assert results[True][1]["loss"] == pytest.approx(results[False][1]["loss"], rel=1e-5)


def test_one_device_loss_is_mean_of_batch_losses(tmp_path):
    """tf.estimator's eval loss: the mean over batches of model_fn's loss; the short last
    batch (5 of 16 rows) runs at its own shape, so its loss covers real rows only."""
    x, y = digits(37)
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path)), init_fn=init_fn
    )
    est.train(batches_input_fn(x, y, 16, repeat=True), steps=2)
    results = est.evaluate(batches_input_fn(x, y, 16))
    logits = np.stack([p["logits"] for p in est.predict(batches_input_fn(x, None, 16))]).astype(np.float64)
    log_probs = logits - logits.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    per_example = -log_probs[np.arange(37), y]
    batch_losses = [per_example[s : s + 16].mean() for s in range(0, 37, 16)]
    assert results["loss"] == pytest.approx(np.mean(batch_losses), rel=1e-5)


@pytest.mark.parametrize("n", [1, 7, 37, 64])
def test_predict_yields_exactly_n_in_order(tmp_path, n):
    x, y = digits(n)
    est = jaxspec.TPUEstimator(
        make_model_fn(),
        config=fast_config(str(tmp_path), 3),
        train_batch_size=8,
        predict_batch_size=16,
        init_fn=init_fn,
    )
    preds = list(est.predict(batches_input_fn(x, None, 16)))
    assert len(preds) == n
    one = jaxspec.TPUEstimator(
        make_model_fn(),
        config=fast_config(str(tmp_path)),
        use_tpu=False,
        train_batch_size=8,
        predict_batch_size=n,
        init_fn=init_fn,
    )
    ref = list(one.predict(batches_input_fn(x, None, n)))
    np.testing.assert_allclose(
        np.stack([p["logits"] for p in preds]), np.stack([p["logits"] for p in ref]), atol=1e-5
    )


def test_predict_batches_and_keys(tmp_path):
    x, _ = digits(20)
    est = jaxspec.TPUEstimator(
        make_model_fn(),
        config=fast_config(str(tmp_path)),
        train_batch_size=8,
        predict_batch_size=8,
        init_fn=init_fn,
    )
    batches = list(
        est.predict(batches_input_fn(x, None, 8), predict_keys=["class_ids"], yield_single_examples=False)
    )
    assert [b["class_ids"].shape[0] for b in batches] == [8, 8, 4]
    assert all(set(b) == {"class_ids"} for b in batches)
    with pytest.raises(ValueError, match="nope"):
        next(est.predict(batches_input_fn(x, None, 8), predict_keys=["nope"]))


def test_evaluate_needs_eval_batch_size_on_the_mesh(tmp_path):
    x, y = digits(16)
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=fast_config(str(tmp_path)), train_batch_size=8, init_fn=init_fn
    )
    with pytest.raises(ValueError, match="eval_batch_size"):
        est.evaluate(batches_input_fn(x, y, 8))


def _sized_input_fn(x, y, sizes):
    """input_fn yielding consecutive batches of the given row counts (labels when y)."""
    starts = np.cumsum([0, *sizes])

    def input_fn():
        for a, b in zip(starts[:-1], starts[1:], strict=True):
            yield ({"x": x[a:b]}, y[a:b]) if y is not None else {"x": x[a:b]}

    return input_fn


@pytest.mark.parametrize("estimator", ["Estimator", "TPUEstimator"])
def test_one_device_runs_batches_of_any_size(tmp_path, estimator):
    """Off the mesh, as in tf.estimator, batches may have any number of rows: a first batch
    shorter than later ones (bucketed input) is no full batch to hold the others to; each
    size runs at its own shape. Before, a batch longer than the first raised ValueError."""
    sizes = [13, 16, 16, 5, 16, 16, 16]
    x, y = digits(sum(sizes))
    if estimator == "Estimator":
        est = jaxspec.Estimator(
            make_model_fn(as_estimator_spec=True), config=fast_config(str(tmp_path)), init_fn=init_fn
        )
    else:  # loops of 3 steps, grouping the batches of one size
        est = _estimator(tmp_path, 3, False, 16)
    est.train(_sized_input_fn(x, y, sizes))
    assert est.get_variable_value("global_step") == len(sizes)
    results = est.evaluate(_sized_input_fn(x, y, sizes))
    batches = list(est.predict(_sized_input_fn(x, None, sizes), yield_single_examples=False))
    assert [len(b["logits"]) for b in batches] == sizes
    logits = np.concatenate([b["logits"] for b in batches]).astype(np.float64)
    log_probs = logits - logits.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    per_example = -log_probs[np.arange(len(y)), y]
    starts = np.cumsum([0, *sizes])
    batch_losses = [per_example[a:b].mean() for a, b in zip(starts[:-1], starts[1:], strict=True)]
    assert results["loss"] == pytest.approx(np.mean(batch_losses), rel=1e-5)
    assert results["global_step"] == len(sizes)


def test_mesh_rejects_a_batch_longer_than_its_batch_size(tmp_path):
    """On the mesh every step has params['batch_size'] rows: a longer input batch is a
    ValueError naming both sizes (a shorter one is padded, as above)."""
    x, y = digits(40)
    est = _estimator(tmp_path, 1, True, 16)
    with pytest.raises(ValueError, match="24 rows, more than a full batch \\(16\\)"):
        est.evaluate(_sized_input_fn(x, y, [16, 24]))
