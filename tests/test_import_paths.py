"""The root's modules moved into ``config/``, ``estimators/`` and ``train_utils/``
(issue 44); the import paths users wrote before still give the same module objects,
in a fresh interpreter, whichever import form they used. At most 15 modules stay at the
package root."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import jaxspec

ROOT = pathlib.Path(__file__).resolve().parents[1]

OLD_FORMS = """
import jaxspec.loss_scale
from jaxspec.tpu_estimator import TPUEstimator
from jaxspec.config import RunConfig, TPUConfig, InputPipelineConfig
from jaxspec import cluster, training
from jaxspec.cluster import Cluster, maybe_initialize
from jaxspec.mixed_precision import Policy
import jaxspec.estimator as old_estimator
import jaxspec
from jaxspec.estimators import estimator, training as new_training
from jaxspec.config import cluster as new_cluster
assert jaxspec.loss_scale is __import__("jaxspec.train_utils.loss_scale", fromlist=["x"])
assert TPUEstimator is jaxspec.TPUEstimator and RunConfig is jaxspec.RunConfig
assert cluster is new_cluster and training is new_training and old_estimator is estimator
assert Cluster is new_cluster.Cluster and Policy is jaxspec.mixed_precision.Policy
print("OLD_PATHS_OK")
"""


def test_old_import_paths_name_the_moved_modules():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", OLD_FORMS], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0 and "OLD_PATHS_OK" in out.stdout, out.stderr[-3000:]


def test_every_moved_module_is_aliased_and_the_root_is_small():
    for old, new in jaxspec.MOVED_MODULES.items():
        assert sys.modules[f"jaxspec.{old}"] is sys.modules[new] is getattr(jaxspec, old)
        assert not (ROOT / "jaxspec" / f"{old}.py").exists()
    root_modules = [p.name for p in (ROOT / "jaxspec").glob("*.py")]
    assert len(root_modules) <= 15, sorted(root_modules)
