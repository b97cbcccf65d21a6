"""RunConfig, TPUConfig and NPURunConfig: fields, defaults and validation (CFG cases)."""

from __future__ import annotations

import logging
import pathlib

import jax.numpy as jnp
import pytest

import jaxspec
from jaxspec import InputPipelineConfig, NPURunConfig, RunConfig, TPUConfig
from jaxspec.config.run_config import REPLACEABLE_FIELDS, iterations_per_loop_count, loop_duration_secs

# -- CFG cases ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"num_shards": 0}, "num_shards"),
        ({"iterations_per_loop": 0}, "iterations_per_loop"),
        ({"iterations_per_loop": -1}, "iterations_per_loop"),
        ({"iterations_per_loop": "-1h"}, "iterations_per_loop"),
        ({"iterations_per_loop": "-1m"}, "iterations_per_loop"),
        ({"iterations_per_loop": "-1s"}, "iterations_per_loop"),
    ],
)
def test_cfg_02_non_positive_values(kwargs, field):
    with pytest.raises(ValueError, match=rf"{field} must be (positive|a positive)"):
        TPUConfig(**kwargs)


def test_cfg_03_cores_per_replica_powers_of_two():
    with pytest.raises(
        ValueError, match=r"num_cores_per_replica must be one of \[1, 2, 4, 8, 16, 32, 64, 128\], got 7"
    ):
        TPUConfig(num_cores_per_replica=7)
    assert TPUConfig(num_cores_per_replica=2).num_cores_per_replica == 2


@pytest.mark.parametrize(
    "value,parsed",
    [
        (1, (1, "count")),
        (100, (100, "count")),
        ("300s", (300, "seconds")),
        ("1m", (60, "seconds")),
        ("1h", (3600, "seconds")),
    ],
)
def test_cfg_04_iterations_per_loop_parsing(value, parsed):
    config = TPUConfig(iterations_per_loop=value)
    assert config.iterations_per_loop == value
    assert tuple(config.parsed_iterations_per_loop) == parsed


# -- TPUConfig ------------------------------------------------------------------------------


def test_tpu_config_defaults_and_pipelines():
    config = TPUConfig()
    assert config.iterations_per_loop == 2 and config.num_shards is None
    assert config.per_host_input_for_training is InputPipelineConfig.PER_HOST_V1
    assert TPUConfig(per_host_input_for_training=False).input_pipeline is InputPipelineConfig.PER_SHARD_V1
    assert TPUConfig(per_host_input_for_training=InputPipelineConfig.PER_HOST_V2).input_pipeline == 3
    assert config.experimental_host_call_every_n_steps == 1
    with pytest.raises(AttributeError):
        config.num_shards = 4  # a namedtuple, as in TF


def test_tpu_config_validation():
    with pytest.raises(TypeError, match="num_shards must be an int"):
        TPUConfig(num_shards=2.0)
    with pytest.raises(ValueError, match="iterations_per_loop"):
        TPUConfig(iterations_per_loop=1.5)
    with pytest.raises(ValueError, match="iterations_per_loop"):
        TPUConfig(iterations_per_loop=True)
    with pytest.raises(ValueError, match="input_partition_dims .*PER_HOST_V2"):
        TPUConfig(input_partition_dims=[[1, 2]], num_cores_per_replica=2)
    with pytest.raises(ValueError, match="input_partition_dims needs num_cores_per_replica"):
        TPUConfig(input_partition_dims=[[1, 2]], per_host_input_for_training=InputPipelineConfig.PER_HOST_V2)
    with pytest.raises(ValueError, match="eval_training_input_configuration"):
        TPUConfig(eval_training_input_configuration=InputPipelineConfig.PER_HOST_V2)
    with pytest.raises(ValueError, match="per_host_input_for_training"):
        TPUConfig(per_host_input_for_training=9)
    with pytest.raises(TypeError, match="experimental_host_call_every_n_steps"):
        TPUConfig(experimental_host_call_every_n_steps="2")


def test_duration_loops_start_at_one_step():
    """A duration starts training loops at one step (the loop then sizes itself by time;
    tests/test_loop.py); a count is used as given."""
    assert iterations_per_loop_count(TPUConfig(iterations_per_loop="300s")) == 1
    assert loop_duration_secs(TPUConfig(iterations_per_loop="5m")) == 300.0
    assert loop_duration_secs(TPUConfig(iterations_per_loop=7)) is None
    assert iterations_per_loop_count(TPUConfig(iterations_per_loop=7)) == 7


# -- RunConfig ------------------------------------------------------------------------------


def test_run_config_defaults():
    config = RunConfig()
    assert (config.model_dir, config.tf_random_seed, config.save_summary_steps) == (None, None, 100)
    assert (config.save_checkpoints_steps, config.save_checkpoints_secs) == (None, 600)
    assert (config.keep_checkpoint_max, config.keep_checkpoint_every_n_hours) == (5, 10000)
    assert config.log_step_count_steps == 100 and config.session_creation_timeout_secs == 7200
    assert isinstance(config.tpu_config, TPUConfig) and config.is_chief and config.num_ps_replicas == 0


def test_run_config_checkpoint_intervals():
    assert (RunConfig(save_checkpoints_steps=10).save_checkpoints_secs) is None
    assert (RunConfig(save_checkpoints_secs=10).save_checkpoints_steps) is None
    none = RunConfig(save_checkpoints_steps=None, save_checkpoints_secs=None)
    assert (none.save_checkpoints_steps, none.save_checkpoints_secs) == (None, None)
    with pytest.raises(ValueError, match="save_checkpoints_steps and save_checkpoints_secs"):
        RunConfig(save_checkpoints_steps=10, save_checkpoints_secs=10)


@pytest.mark.parametrize(
    "kwargs,error,field",
    [
        ({"model_dir": ""}, ValueError, "model_dir"),
        ({"save_summary_steps": -1}, ValueError, "save_summary_steps"),
        ({"save_checkpoints_steps": -1}, ValueError, "save_checkpoints_steps"),
        ({"save_checkpoints_secs": -1}, ValueError, "save_checkpoints_secs"),
        ({"keep_checkpoint_max": -1}, ValueError, "keep_checkpoint_max"),
        ({"keep_checkpoint_every_n_hours": 0}, ValueError, "keep_checkpoint_every_n_hours"),
        ({"log_step_count_steps": 0}, ValueError, "log_step_count_steps"),
        ({"session_creation_timeout_secs": 0}, ValueError, "session_creation_timeout_secs"),
        ({"tf_random_seed": 1.5}, ValueError, "tf_random_seed"),
        ({"experimental_max_worker_delay_secs": 1.5}, ValueError, "experimental_max_worker_delay_secs"),
        ({"device_fn": lambda x: None}, ValueError, "device_fn"),
        ({"protocol": "http"}, ValueError, "protocol"),
        ({"save_summary_steps": "10"}, TypeError, "save_summary_steps"),
        ({"tpu_config": {"iterations_per_loop": 2}}, TypeError, "tpu_config"),
        ({"master": "grpc://a", "cluster": object()}, ValueError, "master and cluster"),
    ],
)
def test_run_config_field_rules(kwargs, error, field):
    with pytest.raises(error, match=field):
        RunConfig(**kwargs)


def test_run_config_accepts_what_tf_accepts(tmp_path):
    config = RunConfig(
        model_dir=pathlib.Path(tmp_path),
        tf_random_seed=3,
        device_fn=lambda op: None,
        protocol="grpc",
        log_step_count_steps=None,
        keep_checkpoint_max=0,
        master="grpc://m",
    )
    assert config.model_dir == str(tmp_path) and config.evaluation_master == "grpc://m"


def test_run_config_fields_are_read_only():
    config = RunConfig()
    with pytest.raises(AttributeError, match="read-only"):
        config.model_dir = "/tmp/x"
    with pytest.raises(AttributeError):
        del config.tpu_config
    assert config.tpu_config == TPUConfig()


def test_run_config_declares_every_field():
    """The fields a type checker sees in RunConfig's class body are the ones it stores:
    REPLACEABLE_FIELDS and the three replace() may not change, each with a docstring."""
    declared = [name for name in vars(RunConfig) if name in RunConfig.__annotations__]
    assert declared == [*REPLACEABLE_FIELDS, "evaluation_master", "master", "cluster"]
    config = RunConfig(model_dir="/tmp/m", master="grpc://m")
    assert [getattr(config, n) for n in declared] == [getattr(config, "_" + n) for n in declared]
    assert "read-only" in vars(RunConfig)["model_dir"].__doc__


def test_run_config_replace():
    class Sub(RunConfig):
        pass

    config = Sub(save_checkpoints_steps=10, tf_random_seed=1)
    new = config.replace(save_checkpoints_secs=30, tf_random_seed=2)
    assert isinstance(new, Sub) and config.tf_random_seed == 1
    assert (new.save_checkpoints_steps, new.save_checkpoints_secs, new.tf_random_seed) == (None, 30, 2)
    assert new.replace(save_checkpoints_steps=5).save_checkpoints_secs is None
    with pytest.raises(ValueError, match="save_checkpoints_steps and save_checkpoints_secs"):
        config.replace(save_checkpoints_steps=5, save_checkpoints_secs=5)
    with pytest.raises(ValueError, match="'master' cannot be replaced"):
        config.replace(master="grpc://x")
    with pytest.raises(ValueError, match="keep_checkpoint_max"):
        config.replace(keep_checkpoint_max=-3)
    tpu = config.replace(tpu_config=TPUConfig(iterations_per_loop=9))
    assert tpu.tpu_config.iterations_per_loop == 9 and "tpu_config" in REPLACEABLE_FIELDS


# -- NPURunConfig ---------------------------------------------------------------------------


def test_npu_run_config_defaults():
    config = NPURunConfig()
    assert isinstance(config, RunConfig)
    assert config.iterations_per_loop == 1 and config.save_summary_steps == 0
    assert (config.save_checkpoints_steps, config.save_checkpoints_secs) == (100, None)
    assert config.mix_compile_mode is False and config.precision_mode is None and config.compute_dtype is None
    assert NPURunConfig(save_checkpoints_secs=60).save_checkpoints_steps is None


@pytest.mark.parametrize(
    "kwargs,error,field",
    [
        ({"iterations_per_loop": 0}, ValueError, "iterations_per_loop"),
        ({"iterations_per_loop": 2.0}, TypeError, "iterations_per_loop"),
        ({"mix_compile_mode": 1}, ValueError, "mix_compile_mode"),
        ({"mix_compile_mode": True, "iterations_per_loop": 10}, ValueError, "iterations_per_loop must be 1"),
        ({"horovod_mode": "yes"}, ValueError, "horovod_mode"),
        ({"graph_run_mode": 2}, ValueError, "graph_run_mode"),
        ({"graph_run_mode": -1}, ValueError, "graph_run_mode"),
        ({"enable_exception_dump": -1}, ValueError, "enable_exception_dump"),
        ({"precision_mode": 16}, TypeError, "precision_mode"),
        ({"save_checkpoints_steps": 10, "save_checkpoints_secs": 10}, ValueError, "save_checkpoints"),
    ],
)
def test_npu_run_config_rules(kwargs, error, field):
    with pytest.raises(error, match=field):
        NPURunConfig(**kwargs)


def test_npu_precision_modes(caplog):
    assert NPURunConfig(precision_mode="allow_mix_precision_bf16").compute_dtype == jnp.bfloat16
    assert NPURunConfig(precision_mode="force_fp16").compute_dtype == jnp.float16
    assert NPURunConfig(precision_mode="force_fp32").compute_dtype == jnp.float32
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        config = NPURunConfig(precision_mode="cube_fp16in_fp32out", op_debug_level=2, dump_path="/tmp/d")
    assert config.precision_mode == "cube_fp16in_fp32out" and config.compute_dtype is None
    assert "cube_fp16in_fp32out" in caplog.text and config.npu_options == {"dump_path": "/tmp/d"}


def test_npu_aoe_mode_forces_one_iteration(monkeypatch):
    monkeypatch.delenv("AOE_MODE", raising=False)
    assert NPURunConfig(iterations_per_loop=5, aoe_mode="2").iterations_per_loop == 1
    monkeypatch.setenv("AOE_MODE", "1")
    assert NPURunConfig(iterations_per_loop=5).iterations_per_loop == 1


def test_npu_config_replace_keeps_npu_fields(tmp_path):
    config = NPURunConfig(iterations_per_loop=4, precision_mode="force_fp16")
    new = config.replace(model_dir=str(tmp_path))
    assert isinstance(new, NPURunConfig) and new.iterations_per_loop == 4 and new.model_dir == str(tmp_path)
    assert jaxspec.NPURunConfig is NPURunConfig
