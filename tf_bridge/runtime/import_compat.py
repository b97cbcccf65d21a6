"""``tf_bridge.install()``: tf.estimator's import paths, on TensorFlow >= 2.16, lead to tf_bridge.

After ``install()``, in this process, code written for tf.estimator imports unmodified:
``tf.estimator``, ``tf.compat.v1.estimator``, ``from tensorflow import estimator``,
``import tensorflow.estimator`` and the ``tensorflow_estimator`` package's module paths
(``TENSORFLOW_ESTIMATOR_PATHS``) resolve to tf_bridge's objects (the v1 namespace and the
plain names of tensorflow_estimator's modules to TF 2.15's v1 classes,
``tf_bridge.estimator.v1``); where Ascend's adapter is not installed, ``npu_bridge``'s
paths (``NPU_BRIDGE_PATHS``) resolve to tf_bridge's NPU path, and so do CANN's
``hccl.manage.api`` and ``hccl.split.api`` (``HCCL_PATHS``) where that package is not
installed either. TensorFlow gains the ``estimator`` attributes and nothing else. The paths are
resolved lazily (a path's tf_bridge module loads when the path is first imported).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Mapping

import tensorflow as tf

from tf_bridge.runtime import module_map as _module_map

_TFE = "tensorflow_estimator.python.estimator"
_V1F = "tf_bridge.runtime.runner.v1_forms"  # v1 Estimator (``Estimator``), v2 as ``EstimatorV2``
_V1C = "tf_bridge.runtime.canned.v1"  # the v1 canned estimators, under their plain names

# tf.estimator's paths -> tf_bridge: a string aliases a module (and its submodules); a
# tuple makes a module whose names come from those modules (see ``tf_bridge.runtime.module_map``).
TENSORFLOW_ESTIMATOR_PATHS: Mapping[str, _module_map.Entry] = {
    "tensorflow.estimator": "tf_bridge.estimator",
    "tensorflow.compat.v1.estimator": "tf_bridge.estimator.v1",
    "tensorflow.compat.v2.estimator": "tf_bridge.estimator",
    "tensorflow_estimator": ("tf_bridge",),
    "tensorflow_estimator.estimator": "tf_bridge.estimator",
    "tensorflow_estimator.python": (),
    _TFE: (),
    f"{_TFE}.api": (),
    f"{_TFE}.api._v1": (),
    f"{_TFE}.api._v2": (),
    f"{_TFE}.api._v1.estimator": "tf_bridge.estimator.v1",
    f"{_TFE}.api._v2.estimator": "tf_bridge.estimator",
    # the plain names of tensorflow_estimator's modules are TF 2.15's v1 classes, ``...V2`` the v2 ones
    f"{_TFE}.estimator": (_V1F, "tf_bridge.runtime.runner.estimator", "tf_bridge.runtime.tfe_names"),
    f"{_TFE}.estimator_lib": ("tf_bridge.estimator.v1",),
    f"{_TFE}.model_fn": ("tf_bridge.runtime.spec",),
    f"{_TFE}.mode_keys": ("tf_bridge.runtime.spec",),
    f"{_TFE}.run_config": ("tf_bridge.runtime.run_config",),
    f"{_TFE}.training": ("tf_bridge.runtime.training",),
    f"{_TFE}.exporter": ("tf_bridge.runtime.training",),
    f"{_TFE}.early_stopping": ("tf_bridge.runtime.hooks",),
    f"{_TFE}.extenders": ("tf_bridge.runtime.extenders",),
    f"{_TFE}.inputs": ("tf_bridge.estimator.inputs",),
    f"{_TFE}.inputs.inputs": ("tf_bridge.estimator.inputs",),
    f"{_TFE}.inputs.numpy_io": ("tf_bridge.runtime.inputs.numpy_io",),
    f"{_TFE}.inputs.pandas_io": ("tf_bridge.runtime.inputs.pandas_io",),
    f"{_TFE}.export": ("tf_bridge.estimator.export",),
    f"{_TFE}.export.export": ("tf_bridge.export.receivers",),
    f"{_TFE}.export.export_lib": ("tf_bridge.estimator.export", "tf_bridge.export.receivers"),
    f"{_TFE}.export.export_output": ("tf_bridge.runtime.spec", "tf_bridge.runtime.tfe_names"),
    f"{_TFE}.hooks": (),
    f"{_TFE}.hooks.hooks": ("tf_bridge.runtime.hooks",),
    f"{_TFE}.hooks.session_run_hook": ("tf_bridge.estimator",),
    f"{_TFE}.hooks.basic_session_run_hooks": ("tf_bridge.estimator",),
    f"{_TFE}.tpu": ("tf_bridge.estimator.tpu",),
    f"{_TFE}.tpu.tpu_estimator": ("tf_bridge.estimator.tpu",),
    f"{_TFE}.tpu.tpu_config": ("tf_bridge.runtime.run_config",),
    # the heads (TF 2.15's head package; TF's v1 heads, canned/head.py, below)
    f"{_TFE}.head": ("tf_bridge.runtime.heads",),
    f"{_TFE}.head.base_head": ("tf_bridge.runtime.heads.base", "jaxspec.rules.head_keys"),
    f"{_TFE}.head.binary_class_head": ("tf_bridge.runtime.heads.binary_class",),
    f"{_TFE}.head.multi_class_head": ("tf_bridge.runtime.heads.multi_class",),
    f"{_TFE}.head.multi_head": ("tf_bridge.runtime.heads.multi_head",),
    f"{_TFE}.head.multi_label_head": ("tf_bridge.runtime.heads.multi_label",),
    f"{_TFE}.head.regression_head": ("tf_bridge.runtime.heads.regression",),
    # the canned estimators: the plain names are the v1 classes, ``...V2`` the v2 ones
    f"{_TFE}.canned": ("tf_bridge.runtime.canned",),
    f"{_TFE}.canned.baseline": (_V1C, "tf_bridge.runtime.canned.baseline"),
    f"{_TFE}.canned.dnn": (_V1C, "tf_bridge.runtime.canned.dnn"),
    f"{_TFE}.canned.linear": (_V1C, "tf_bridge.runtime.canned.linear"),
    f"{_TFE}.canned.dnn_linear_combined": (_V1C, "tf_bridge.runtime.canned.dnn_linear_combined"),
    # TF's v1 heads' module: tf_bridge's v1 heads (BinaryClassHeadV1, ...) and TF's private
    # factories the v1 ``...Estimator`` classes took heads from (``_regression_head``, ...)
    f"{_TFE}.canned.head": ("tf_bridge.runtime.canned.v1.heads",),
    f"{_TFE}.canned.optimizers": ("tf_bridge.runtime.canned.optimizers",),
    f"{_TFE}.canned.parsing_utils": ("tf_bridge.runtime.canned.parsing_utils",),
    f"{_TFE}.canned.metric_keys": ("jaxspec.rules.head_keys",),
    f"{_TFE}.canned.prediction_keys": ("jaxspec.rules.head_keys",),
}

_NPU = "npu_bridge.estimator.npu"

# Ascend's adapter paths -> tf_bridge's NPU path (only where the adapter is not installed).
NPU_BRIDGE_PATHS: Mapping[str, _module_map.Entry] = {
    "npu_bridge": ("tf_bridge.runtime.npu",),
    "npu_bridge.npu_init": "tf_bridge.runtime.npu.npu_init",
    "npu_bridge.estimator": (),
    "npu_bridge.estimator.npu_ops": "tf_bridge.runtime.npu.npu_ops",
    "npu_bridge.estimator.npu_unary_ops": "tf_bridge.runtime.npu.npu_unary_ops",
    "npu_bridge.hccl": (),
    "npu_bridge.hccl.hccl_ops": "tf_bridge.runtime.npu.hccl_ops",
    _NPU: (),
    f"{_NPU}.npu_scope": "tf_bridge.runtime.npu.npu_scope",
    f"{_NPU}.npu_estimator": ("tf_bridge.runtime.npu.estimator", "tf_bridge.runtime.spec"),
    f"{_NPU}.npu_config": ("tf_bridge.runtime.npu.config", "tf_bridge.runtime.npu.npu_scope"),
    f"{_NPU}.npu_optimizer": ("tf_bridge.runtime.npu.optimizer",),
    f"{_NPU}.npu_loss_scale_optimizer": ("tf_bridge.runtime.npu.optimizer",),
    f"{_NPU}.npu_loss_scale_manager": ("tf_bridge.runtime.npu.loss_scale",),
    f"{_NPU}.npu_hook": ("tf_bridge.runtime.npu.hooks",),
}

# CANN's ``hccl`` package (rank functions, which Ascend samples import from it directly),
# where neither it nor the adapter is installed.
HCCL_PATHS: Mapping[str, _module_map.Entry] = {
    "hccl": (),
    "hccl.manage": (),
    "hccl.manage.api": ("tf_bridge.runtime.npu.hooks",),
    "hccl.split": (),
    "hccl.split.api": ("tf_bridge.runtime.npu.hooks",),
}

MIN_TF_VERSION = (2, 16)

_installed: list[_module_map.ModuleMapFinder] = []


def _tf_version(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _importable(name: str) -> bool:
    """Whether ``name`` imports from an installed package (tf_bridge's finders aside)."""
    if name in sys.modules and not isinstance(sys.modules[name], _module_map.MergedModule):
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def install() -> None:
    """Make tf.estimator's import paths resolve to tf_bridge in this process (see the
    module docstring); calling it again does nothing.

    Keras: TensorFlow >= 2.16 gives Keras 3 as ``tf.keras``; a TF 2.15 program using
    ``tf.compat.v1.layers``, ``tf.keras.optimizers.legacy`` or Keras optimizer objects in
    canned estimators needs Keras 2: install ``tf_keras`` (tf_bridge's ``[tf]`` extra
    does) and set ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported (before
    ``import tf_bridge``), e.g. ``os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")`` at
    the top of the program. install() runs after that import, so it cannot choose;
    ``python -m tf_bridge`` sets it for you (``--keras3`` opts out).

    Raises:
      RuntimeError: TensorFlow is older than 2.16 (its own tf.estimator is there), or the
        real ``tensorflow_estimator`` package is importable (it would be shadowed).
    """
    if _installed:
        return
    if _tf_version(tf.__version__) < MIN_TF_VERSION:
        raise RuntimeError(
            f"tf_bridge.install(): TensorFlow {tf.__version__} still has tf.estimator; install() is for "
            "TensorFlow >= 2.16, where it was removed. Use tf.estimator itself."
        )
    if _importable("tensorflow_estimator"):
        raise RuntimeError(
            "tf_bridge.install(): the tensorflow_estimator package is installed; install() would shadow it. "
            "Uninstall it (pip uninstall tensorflow-estimator) or do not call install()."
        )
    table = dict(TENSORFLOW_ESTIMATOR_PATHS)
    if not _importable("npu_bridge"):
        table.update(NPU_BRIDGE_PATHS)
        if not _importable("hccl"):
            table.update(HCCL_PATHS)
    finder = _module_map.register(_module_map.ModuleMapFinder(table))
    _installed.append(finder)
    # ``import tensorflow.compat.v1`` (tf_keras does it, e.g. when a v1 head builds its AUC)
    # puts new wrapper objects at tf.compat.v1 / v2, without the names set below: import them
    # first, so those names are set on the objects that stay.
    for path in ("tensorflow.compat.v1", "tensorflow.compat.v2"):
        importlib.import_module(path)
    estimator = importlib.import_module("tf_bridge.estimator")
    for namespace in (tf, tf.compat.v2):
        namespace.estimator = estimator
    tf.compat.v1.estimator = importlib.import_module("tf_bridge.estimator.v1")


def installed() -> bool:
    """Whether ``install()`` ran in this process."""
    return bool(_installed)
