"""Sharded checkpoints restore onto any topology: 4x2 -> 8x1 -> one device -> 4x2."""

from __future__ import annotations

import numpy as np
from jax.sharding import PartitionSpec as P

import jaxspec
from tests.helpers import batches_input_fn, digits
from tests.model_parallel_models import MLP_RULES, Mlp, StateProbe, config, make_init_fn, make_model_fn


def _tpu(model_dir, cores):
    return jaxspec.TPUEstimator(
        make_model_fn(),
        config=config(model_dir, cores),
        train_batch_size=64,
        eval_batch_size=64,
        init_fn=make_init_fn(Mlp()),
        partition_rules=MLP_RULES,
    )


def _one_device(model_dir):
    return jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True),
        config=config(model_dir, None),
        params={},
        init_fn=make_init_fn(Mlp()),
        partition_rules=MLP_RULES,  # checked, no effect on one device
    )


def _values(est):
    return {n: est.get_variable_value(n) for n in est.get_variable_names()}


def _close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], atol=atol, rtol=0, err_msg=key)


def test_topology_round_trip_matches_one_device(tmp_path):
    x, y = digits(256)
    train = batches_input_fn(x, y, 64, repeat=True)
    evaluate = batches_input_fn(x[:128], y[:128], 64)
    shared, reference = str(tmp_path / "moving"), str(tmp_path / "reference")
    ref = _one_device(reference)

    _tpu(shared, 2).train(train, steps=10)  # 4 replicas x 2 cores
    ref.train(train, steps=10)
    metrics = [_tpu(shared, 2).evaluate(evaluate), _tpu(shared, None).evaluate(evaluate)]
    metrics.append(_one_device(shared).evaluate(evaluate))
    for m in metrics:
        _close(m, ref.evaluate(evaluate))

    _tpu(shared, None).train(train, steps=10)  # 8 x 1 resumes the 4x2 checkpoint
    ref.train(train, steps=10)
    _close(_values(_tpu(shared, None)), _values(ref))

    _one_device(shared).train(train, steps=10)  # one device resumes the 8x1 checkpoint
    ref.train(train, steps=10)
    _close(_values(_one_device(shared)), _values(ref))

    probe = StateProbe()
    back = _tpu(shared, 2)
    back.train(train, steps=10, hooks=[probe])  # and 4x2 again, restored sharded
    ref.train(train, steps=10)
    kernel = probe.created.params["params"]["Dense_0"]["kernel"]
    assert kernel.sharding.spec == P(None, "core")
    assert all(s.data.shape == (64, 16) for s in kernel.addressable_shards)
    _close(_values(back), _values(ref), atol=2e-5)
    assert back.get_variable_value("global_step") == 40
