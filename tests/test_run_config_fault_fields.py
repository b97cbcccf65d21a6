"""RunConfig refuses, when it is made and naming the field, the launch and fault values
that used to fail only inside train() (issue 45's trial): a None heartbeat, a cluster of
no known form, and a local checkpoint directory that can never be written (checked
before any model_dir is created)."""

from __future__ import annotations

import os

import pytest

import jaxspec
from jaxspec.config.cluster import Cluster


def test_heartbeat_timeout_none_is_refused() -> None:
    with pytest.raises(ValueError, match="^RunConfig: heartbeat_timeout_secs must be .* got None"):
        jaxspec.RunConfig(heartbeat_timeout_secs=None)
    with pytest.raises(ValueError, match="^RunConfig: heartbeat_timeout_secs must be a finite .* got inf"):
        jaxspec.RunConfig(heartbeat_timeout_secs=float("inf"))
    assert jaxspec.RunConfig(heartbeat_timeout_secs=2.5).heartbeat_timeout_secs == 2.5


class _Resolver:
    """A ClusterResolver's shape: ``cluster_spec()``."""

    def cluster_spec(self) -> dict:
        return {}


def test_cluster_of_no_known_form_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="^RunConfig: cluster must be .*got object"):
        jaxspec.RunConfig(cluster=object())
    with pytest.raises(TypeError, match="^RunConfig: cluster must be .*got int"):
        jaxspec.RunConfig(cluster=3)
    with pytest.raises(
        TypeError, match="^RunConfig: cluster {'bogus': 1} does not describe a Cluster: .*bogus"
    ):
        jaxspec.RunConfig(cluster={"bogus": 1})
    with pytest.raises(
        ValueError, match="^RunConfig: cluster .* does not describe a Cluster: .*process_id 2"
    ):
        jaxspec.RunConfig(cluster={"num_processes": 2, "process_id": 2})
    with pytest.raises(TypeError, match="^RunConfig: cluster must be .*got type"):
        jaxspec.RunConfig(cluster=_Resolver)  # the class, not a resolver
    single = Cluster(num_processes=1)
    assert jaxspec.RunConfig(cluster=single).cluster is single
    as_dict = {"coordinator_address": "127.0.0.1:1234", "num_processes": 2, "process_id": 0}
    assert jaxspec.RunConfig(cluster=as_dict).cluster == as_dict


@pytest.mark.parametrize("kind", ["file", "file_parent", "read_only"])
def test_unwritable_local_checkpoint_dir_is_refused_before_anything_is_written(tmp_path, kind) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    local = {"file": blocker, "file_parent": blocker / "local", "read_only": tmp_path / "ro" / "local"}[kind]
    if kind == "read_only":
        (tmp_path / "ro").mkdir()
        os.chmod(tmp_path / "ro", 0o500)
        if os.access(tmp_path / "ro", os.W_OK):  # root ignores the mode bits
            pytest.skip("this user can write a read-only directory (root)")
    model_dir = tmp_path / "model"
    with pytest.raises(ValueError, match="^RunConfig: local_checkpoint_dir .*"):
        jaxspec.RunConfig(
            model_dir=str(model_dir), local_checkpoint_dir=local, local_save_checkpoints_steps=5
        )
    assert not model_dir.exists()


def test_path_like_local_checkpoint_dir_is_stored_as_str(tmp_path) -> None:
    config = jaxspec.RunConfig(
        local_checkpoint_dir=tmp_path / "new" / "local", local_save_checkpoints_steps=5
    )
    assert config.local_checkpoint_dir == str(tmp_path / "new" / "local")
