"""At num_cores_per_replica=2: warm start into a sharded state, train_and_evaluate, and an export of the
gathered state that TensorFlow serves with the predictions of the mesh."""

from __future__ import annotations

import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxspec
from tests.helpers import batches_input_fn, digits
from tests.model_parallel_models import MLP_RULES, Mlp, StateProbe, config, make_init_fn, make_model_fn


def _est(model_dir, cores, **kwargs):
    return jaxspec.TPUEstimator(
        make_model_fn(),
        config=config(model_dir, cores),
        train_batch_size=64,
        predict_batch_size=64,
        init_fn=make_init_fn(Mlp()),
        partition_rules=MLP_RULES,
        **kwargs,
    )


def test_warm_start_into_a_sharded_state(tmp_path):
    x, y = digits(256)
    source = _est(str(tmp_path / "source"), None)
    source.train(batches_input_fn(x, y, 64, repeat=True), steps=5)
    settings = jaxspec.WarmStartSettings(str(tmp_path / "source"), vars_to_warm_start="params/.*")
    probe = StateProbe()
    target = _est(str(tmp_path / "target"), 2, warm_start_from=settings)
    target.train(batches_input_fn(x, y, 64, repeat=True), steps=1, hooks=[probe])
    kernel = probe.created.params["params"]["Dense_0"]["kernel"]
    assert kernel.sharding.spec == P(None, "core")
    np.testing.assert_array_equal(
        np.asarray(kernel), source.get_variable_value("params/params/Dense_0/kernel")
    )
    mu = probe.created.opt_state[0].mu["params"]["Dense_0"]["kernel"]
    assert not np.asarray(mu).any()  # not warm-started: the optimizer starts afresh


def test_export_of_the_gathered_state_serves_the_mesh_predictions(tmp_path):
    tf = pytest.importorskip("tensorflow")
    import tf_bridge

    x, y = digits(256)
    est = _est(str(tmp_path), 2)
    est.train(batches_input_fn(x, y, 64, repeat=True), steps=10)
    predictions = np.stack([p["logits"] for p in est.predict(batches_input_fn(x[:100], None, 64))])
    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})
    export_dir = est.export_saved_model(str(tmp_path / "export"), receiver).decode()
    served = tf.saved_model.load(export_dir).signatures["serving_default"](x=tf.constant(x[:100]))
    np.testing.assert_allclose(served["logits"].numpy(), predictions, atol=1e-5, rtol=0)


def test_train_and_evaluate_at_4x2_matches_8x1(tmp_path):
    x, y = digits(256)
    results = {}
    for cores in (2, None):
        est = _est(str(tmp_path / str(cores)), cores, eval_batch_size=64)
        train = jaxspec.TrainSpec(batches_input_fn(x, y, 64, repeat=True), max_steps=10)
        evaluate = jaxspec.EvalSpec(batches_input_fn(x[:128], y[:128], 64), steps=None, every_n_steps=5)
        results[cores], _ = jaxspec.train_and_evaluate(est, train, evaluate)
    assert results[2]["global_step"] == results[None]["global_step"] == 10
    for key, value in results[None].items():
        np.testing.assert_allclose(results[2][key], value, atol=1e-5, rtol=0, err_msg=key)
