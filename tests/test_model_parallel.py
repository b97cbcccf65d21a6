"""num_cores_per_replica: a ('replica', 'core') mesh, the state sharded by partition_rules;
4 replicas x 2 cores give the numbers of 8 replicas x 1 core."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxspec
from tests.helpers import batches_input_fn, digits
from tests.model_parallel_models import (
    ATTENTION_RULES,
    MLP_RULES,
    Attention,
    BoxedMlp,
    Mlp,
    StateProbe,
    config,
    make_init_fn,
    make_model_fn,
)


def _run(model_dir, module, rules, cores, steps=20):
    """Train ``steps`` steps (batch 64), evaluate 128 rows, predict 100 (a padded final
    batch); return what the run produced."""
    x, y = digits(256)
    losses, probe = [], StateProbe()
    est = jaxspec.TPUEstimator(
        make_model_fn(losses),
        config=config(model_dir, cores),
        train_batch_size=64,
        eval_batch_size=64,
        predict_batch_size=64,
        init_fn=make_init_fn(module),
        partition_rules=rules,
    )
    est.train(batches_input_fn(x, y, 64, repeat=True), steps=steps, hooks=[probe])
    metrics = est.evaluate(batches_input_fn(x[:128], y[:128], 64))
    predictions = np.stack([p["logits"] for p in est.predict(batches_input_fn(x[:100], None, 64))])
    values = {n: est.get_variable_value(n) for n in est.get_variable_names()}
    return dict(
        est=est, losses=np.stack(losses), metrics=metrics, predictions=predictions, values=values, probe=probe
    )


@pytest.mark.parametrize(
    ("module", "rules"), [(Mlp(), MLP_RULES), (Attention(), ATTENTION_RULES)], ids=["mlp", "attention"]
)
def test_four_by_two_matches_eight_by_one(tmp_path, module, rules):
    wide = _run(str(tmp_path / "8x1"), module, rules, cores=None)
    split = _run(str(tmp_path / "4x2"), module, rules, cores=2)
    assert split["est"]._mesh().shape == {"replica": 4, "core": 2}
    assert wide["est"]._mesh().shape == {"replica": 8}

    assert set(wide["values"]) == set(split["values"])
    assert any("mu" in n for n in wide["values"])  # optimizer state compared too
    for name, value in wide["values"].items():
        np.testing.assert_allclose(split["values"][name], value, atol=1e-5, rtol=0, err_msg=name)
    # host_call: 20 steps, the 64 per-example losses of each, concatenated over replicas.
    assert wide["losses"].shape == split["losses"].shape == (20, 64)
    np.testing.assert_allclose(split["losses"], wide["losses"], atol=1e-5, rtol=0)
    assert wide["losses"][-1].mean() < wide["losses"][0].mean()  # it trained
    assert (
        wide["metrics"].keys() == split["metrics"].keys() == {"loss", "accuracy", "mean_logit", "global_step"}
    )
    for key, value in wide["metrics"].items():
        np.testing.assert_allclose(split["metrics"][key], value, atol=1e-5, rtol=0, err_msg=key)
    assert wide["predictions"].shape == (100, 10)
    np.testing.assert_allclose(split["predictions"], wide["predictions"], atol=1e-5, rtol=0)


def _leaf(state, suffix):
    from jaxspec._trees import key_path_name

    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        if key_path_name(path).endswith(suffix):
            return leaf
    raise KeyError(suffix)


def test_rule_sharded_leaves_hold_one_kth_per_device(tmp_path):
    run = _run(str(tmp_path), Mlp(), MLP_RULES, cores=2, steps=5)
    probe = run["probe"]
    for state in (probe.created, probe.final):  # born sharded, and still so after training
        for suffix, spec in [
            ("params/params/Dense_0/kernel", P(None, "core")),
            ("opt_state/0/mu/params/Dense_0/kernel", P(None, "core")),
            ("opt_state/0/nu/params/Dense_1/kernel", P("core", None)),
            ("params/params/Dense_0/bias", P("core")),
        ]:
            leaf = _leaf(state, suffix)
            assert leaf.sharding.spec == spec, suffix
            assert len(leaf.addressable_shards) == 8
            for shard in leaf.addressable_shards:
                assert shard.data.size * 2 == leaf.size, suffix
        bias = _leaf(state, "params/params/Dense_1/bias")  # no rule: replicated
        assert all(s.data.size == bias.size for s in bias.addressable_shards)


def _train_bytes(model_dir, cores, rules):
    x, y = digits(64)
    est = jaxspec.TPUEstimator(
        make_model_fn(),
        config=config(model_dir, cores, iterations_per_loop=2),
        train_batch_size=8 * (8 // (cores or 1)),
        init_fn=make_init_fn(Mlp(hidden=512)),
        partition_rules=rules,
    )
    est.train(batches_input_fn(x, y, 8 * (8 // (cores or 1)), repeat=True), steps=2)
    (compiled,) = est._compile_cache.modes["train"].compiled.values()
    return compiled.memory_analysis().argument_size_in_bytes


def test_compiled_argument_bytes_halve_with_two_cores(tmp_path):
    rules = [(r"Dense_(0|1)/kernel", P(None, "core")), (r"Dense_0/bias", P("core"))]
    one = _train_bytes(str(tmp_path / "k1"), None, rules)
    two = _train_bytes(str(tmp_path / "k2"), 2, rules)
    assert two <= 0.55 * one, (two, one)


@pytest.mark.parametrize(
    ("rules", "match"),
    [
        (
            [(r"Dense_0/kernel", P(None, "replica"))],
            r"'params/params/Dense_0/kernel' \(shape \(64, 32\)\).*'replica'",
        ),
        (
            [(r"Dense_0/kernel", P(None, "model"))],
            r"'params/params/Dense_0/kernel' \(shape \(64, 32\)\).*unknown mesh axis 'model'",
        ),
        (
            [(r"Dense_1/bias", P("core"))],
            r"'params/params/Dense_1/bias' \(shape \(10,\)\), rule \('Dense_1/bias'.*not divisible by the 4 cores",
        ),
        (
            [(r"Dense_1/bias", P(None, "core"))],
            r"Dense_1/bias' \(shape \(10,\)\).*2 entries for a rank-1 leaf",
        ),
    ],
    ids=["replica", "unknown-axis", "indivisible", "too-long"],
)
def test_bad_rules_raise_naming_the_leaf(tmp_path, rules, match):
    x, y = digits(64)
    est = jaxspec.TPUEstimator(
        make_model_fn(),
        config=config(str(tmp_path), 4),
        train_batch_size=64,
        init_fn=make_init_fn(Mlp()),
        partition_rules=rules,
    )
    with pytest.raises(ValueError, match=match):
        est.train(batches_input_fn(x, y, 64, repeat=True), steps=1)
    assert est.latest_checkpoint() is None  # raised before anything ran


def test_malformed_rules_and_device_count():
    with pytest.raises(TypeError, match="partition_rules"):
        jaxspec.Estimator(make_model_fn(), init_fn=make_init_fn(Mlp()), partition_rules={"a": P()})
    with pytest.raises(TypeError, match=r"partition_rules\[0\].*PartitionSpec"):
        jaxspec.Estimator(make_model_fn(), init_fn=make_init_fn(Mlp()), partition_rules=[("a", ("core",))])
    with pytest.raises(ValueError, match="not a valid regex"):
        jaxspec.Estimator(make_model_fn(), init_fn=make_init_fn(Mlp()), partition_rules=[("(", P())])
    with pytest.raises(ValueError, match="num_shards=8 with num_cores_per_replica=2 needs 16 devices"):
        jaxspec.TPUEstimator(
            make_model_fn(),
            config=config(None, 2, num_shards=8),
            train_batch_size=64,
            init_fn=make_init_fn(Mlp()),
        )


def test_cross_shard_optimizer_reduces_over_replicas_only(tmp_path):
    """A 'sum' CrossShardOptimizer adds the 4 replicas' gradients, not the 8 devices':
    one SGD step at 4x2 equals 4 x the mean-gradient step at 4x1."""
    import optax
    from flax.training import train_state

    def init(reduction):
        def init_fn(features):
            module = Mlp()
            params = module.init(jax.random.PRNGKey(7), features["x"][:1])
            tx = jaxspec.CrossShardOptimizer(optax.sgd(0.1), reduction=reduction)
            return train_state.TrainState.create(apply_fn=module.apply, params=params, tx=tx)

        return init_fn

    x, y = digits(64)
    out = {}
    for cores, reduction, shards in [(2, "sum", None), (None, "mean", 4)]:
        est = jaxspec.TPUEstimator(
            make_model_fn(),
            config=config(str(tmp_path / f"{reduction}"), cores, num_shards=shards),
            train_batch_size=64,
            init_fn=init(reduction),
            partition_rules=MLP_RULES,
        )
        est.train(batches_input_fn(x, y, 64, repeat=True), steps=1)
        out[reduction] = est
    start = init("mean")({"x": x}).params
    for name in ("params/params/Dense_0/kernel", "params/params/Dense_1/bias"):
        first = np.asarray(_leaf(start, name.split("/", 1)[1]))
        summed = out["sum"].get_variable_value(name) - first
        mean = out["mean"].get_variable_value(name) - first
        np.testing.assert_allclose(summed, 4 * mean, atol=1e-5, rtol=1e-4, err_msg=name)


def test_flax_partitioning_metadata_lays_out_the_state(tmp_path):
    """nn.with_partitioning / with_logical_partitioning boxes give the layout (no rules):
    the same numbers as Mlp with MLP_RULES, the same shards."""
    boxed = _run(str(tmp_path / "boxed"), BoxedMlp(), None, cores=2, steps=10)
    ruled = _run(str(tmp_path / "ruled"), Mlp(), MLP_RULES, cores=2, steps=10)
    final = boxed["probe"].final
    for suffix, spec in [
        ("params/params/Dense_0/kernel/value", P(None, "core")),  # logical ('embed', 'mlp')
        ("opt_state/0/mu/params/Dense_0/bias/value", P("core")),
        ("opt_state/0/nu/params/Dense_1/kernel/value", P("core", None)),
        ("params/params/Dense_1/bias", P()),
    ]:
        leaf = _leaf(final, suffix)
        assert leaf.sharding.spec == spec, suffix
        split = 2 if "core" in spec else 1
        assert all(s.data.size * split == leaf.size for s in leaf.addressable_shards), suffix
    for name, value in ruled["values"].items():
        boxed_name = name if name.endswith(("Dense_1/bias", "count", "step")) else name + "/value"
        np.testing.assert_allclose(boxed["values"][boxed_name], value, atol=1e-5, rtol=0, err_msg=name)
    np.testing.assert_allclose(boxed["predictions"], ruled["predictions"], atol=1e-5, rtol=0)


def test_flax_metadata_naming_replica_is_refused(tmp_path):
    x, y = digits(64)
    est = jaxspec.TPUEstimator(
        make_model_fn(),
        config=config(str(tmp_path), 2),
        train_batch_size=64,
        init_fn=make_init_fn(BoxedMlp(bias_axes=("replica",))),
    )
    with pytest.raises(
        ValueError,
        match=r"'params/params/Dense_0/bias/value' \(shape \(32,\)\), flax partitioning metadata.*'replica'",
    ):
        est.train(batches_input_fn(x, y, 64, repeat=True), steps=1)


def _v2_input_fn(x, y):
    def input_fn(params):  # PER_HOST_V2: called for one replica's batch at a time
        b = params["batch_size"]
        while True:
            for s in range(0, len(x), b):
                yield {"x": x[s : s + b]}, y[s : s + b]

    return input_fn


def test_input_partition_dims_split_features_over_cores(tmp_path):
    """PER_HOST_V2 with input_partition_dims: features [B, 64] split over the 2 cores on
    their second dimension; the same numbers as the unpartitioned 8x1 run."""
    x, y = digits(256)
    runs = {}
    for name, cores, dims in [("split", 2, [{"x": [1, 2]}, None]), ("plain", None, None)]:
        tpu = dict(per_host_input_for_training=jaxspec.InputPipelineConfig.PER_HOST_V2)
        if dims is not None:
            tpu["input_partition_dims"] = dims
        est = jaxspec.TPUEstimator(
            make_model_fn(),
            config=config(str(tmp_path / name), cores, **tpu),
            train_batch_size=64,
            eval_batch_size=64,
            init_fn=make_init_fn(Attention()),
            partition_rules=ATTENTION_RULES,
        )
        est.train(_v2_input_fn(x, y), steps=10)
        metrics = est.evaluate(batches_input_fn(x[:128], y[:128], 16 if cores else 8), steps=2)
        runs[name] = (est, {n: est.get_variable_value(n) for n in est.get_variable_names()}, metrics)
    (split, split_values, split_metrics), (_, plain_values, plain_metrics) = runs["split"], runs["plain"]
    for name, value in plain_values.items():
        np.testing.assert_allclose(split_values[name], value, atol=1e-5, rtol=0, err_msg=name)
    for key, value in plain_metrics.items():
        np.testing.assert_allclose(split_metrics[key], value, atol=1e-5, rtol=0, err_msg=key)
    (compiled,) = split._compile_cache.modes["train"].compiled.values()
    features_sharding = jax.tree.leaves(compiled.input_shardings[0][3])[0]
    assert features_sharding.spec == P(None, "replica", "core")


def test_input_partition_dims_checked():
    with pytest.raises(ValueError, match=r"splits into 4 parts; num_cores_per_replica is 2"):
        jaxspec.TPUConfig(
            num_cores_per_replica=2,
            per_host_input_for_training=jaxspec.InputPipelineConfig.PER_HOST_V2,
            input_partition_dims=[[1, 2, 2]],
        )
    with pytest.raises(ValueError, match="one non-batch dimension"):
        jaxspec.TPUConfig(
            num_cores_per_replica=2,
            per_host_input_for_training=jaxspec.InputPipelineConfig.PER_HOST_V2,
            input_partition_dims=[{"x": [2, 1]}, None],
        )


def test_one_replica_over_all_eight_devices(tmp_path):
    """k = 8: a 1x8 mesh (the replica reduction over one replica is skipped: XLA refuses a
    collective over a one-member manual axis)."""
    wide = _run(str(tmp_path / "8x1"), Mlp(), MLP_RULES, cores=None, steps=5)
    one = _run(str(tmp_path / "1x8"), Mlp(), MLP_RULES, cores=8, steps=5)
    assert one["est"]._mesh().shape == {"replica": 1, "core": 8}
    for name, value in wide["values"].items():
        np.testing.assert_allclose(one["values"][name], value, atol=1e-5, rtol=0, err_msg=name)
    np.testing.assert_allclose(one["losses"], wide["losses"], atol=1e-5, rtol=0)
    kernel = _leaf(one["probe"].final, "params/params/Dense_0/kernel")
    assert {s.data.shape for s in kernel.addressable_shards} == {(64, 4)}


def test_activation_constraints_run_on_every_topology(tmp_path):
    """model_fn's jaxspec.with_sharding_constraint: applied at 4x2, ignored at 8x1 and
    on one device; the numbers agree."""
    split = _run(str(tmp_path / "4x2"), Attention(constrain=True), ATTENTION_RULES, cores=2, steps=5)
    wide = _run(str(tmp_path / "8x1"), Attention(constrain=True), ATTENTION_RULES, cores=None, steps=5)
    for name, value in wide["values"].items():
        np.testing.assert_allclose(split["values"][name], value, atol=1e-5, rtol=0, err_msg=name)
    x = digits(8)[0]
    module = Attention(constrain=True)
    params = module.init(jax.random.PRNGKey(0), x)
    np.testing.assert_allclose(
        module.apply(params, x), Attention().apply(params, x), atol=1e-6
    )  # no mesh: no-op

    def lowered(mesh):
        fn = jax.shard_map(
            lambda v: module.apply(params, v),
            mesh=mesh,
            in_specs=P("replica"),
            out_specs=P("replica"),
            axis_names={"replica"},
            check_vma=False,
        )
        return jax.jit(fn).lower(x).as_text()

    devices = np.array(jax.devices())
    assert "sharding_constraint" in lowered(jax.sharding.Mesh(devices.reshape(4, 2), ("replica", "core")))
    assert "sharding_constraint" not in lowered(jax.sharding.Mesh(devices, ("replica",)))


def test_input_fn_context_counts_replicas_not_devices(tmp_path):
    x, y = digits(64)
    seen = []

    def input_fn(params):
        seen.append((params["batch_size"], params["context"]))
        return batches_input_fn(x, y, params["batch_size"], repeat=True)()

    tpu = dict(per_host_input_for_training=jaxspec.InputPipelineConfig.PER_HOST_V2)
    est = jaxspec.TPUEstimator(
        make_model_fn(),
        config=config(str(tmp_path), 2, **tpu),
        train_batch_size=64,
        init_fn=make_init_fn(Mlp()),
    )
    est.train(input_fn, steps=1)
    batch, context = seen[0]
    assert batch == 16  # PER_HOST_V2: the global 64 over 4 replicas
    assert (context.num_replicas, context.num_of_replicas_per_host) == (4, 4)
    assert (context.num_cores_per_replica, context.num_of_cores_per_host) == (2, 8)
