"""Can the installed TensorFlow run what this JAX writes? Checked at export time.

jax2tf (native serialization) writes the model as StableHLO inside an ``XlaCallModule``
op whose ``version`` attribute is JAX's export calling-convention version. A TensorFlow
whose XlaCallModule kernel does not support that version (or the module's platforms)
fails only when the op first runs, i.e. at serving time. So the export (1) compares the
two versions before converting, where TF tells its maximum, and (2) loads the finished
SavedModel in a fresh graph and runs each meta graph once at batch 1 before the export
directory gets its final name. Either failure raises ``ExportCompatibilityError``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import tensorflow as tf

logger = logging.getLogger("tf_bridge")

_PINNED = ("jax", "jaxlib", "tensorflow-cpu")


class ExportCompatibilityError(RuntimeError):
    """The installed TensorFlow cannot load or run the SavedModel this JAX writes."""


def calling_convention_version() -> int:
    """The XlaCallModule serialization version jax2tf writes (JAX's export
    calling-convention version)."""
    return int(jax.config.values["jax_export_calling_convention_version"])


# What jax2tf assumes of a TensorFlow that predates call_module_maximum_supported_version.
_TF_MAX_WHEN_UNREPORTED = 6


def tf_max_call_module_version() -> int | None:
    """The highest XlaCallModule version the installed TensorFlow supports. A TF that
    has XlaCallModule but does not report its maximum (older than the query) is taken to
    support up to version 6, as jax2tf itself assumes; None where TF has no XlaCallModule
    wrapper at all."""
    try:
        from tensorflow.compiler.tf2xla.python import xla as tfxla
    except ImportError:
        return None
    query = getattr(tfxla, "call_module_maximum_supported_version", None)
    if query is None:
        return _TF_MAX_WHEN_UNREPORTED
    return int(query())


def _installed(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def pinned_requirements() -> dict[str, str]:
    """jaxspec's pins for jax, jaxlib and tensorflow-cpu (``'==0.10.2'``, ``'==2.21.*'``),
    read from the installed package's metadata; empty where jaxspec is not installed."""
    try:
        requires = importlib.metadata.requires("jaxspec") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    pins: dict[str, str] = {}
    for req in requires:
        spec = req.split(";")[0].strip()
        for name in _PINNED:
            if spec.startswith(name + "==") and name not in pins:
                pins[name] = spec[len(name) :]
    return pins


def _matches(version: str, pin: str) -> bool:
    want = pin[2:]
    if want.endswith(".*"):
        return version == want[:-2] or version.startswith(want[:-1])
    return version == want


def versions() -> dict[str, Any]:
    """What the export record stores about versions: installed jax/jaxlib/tensorflow,
    jaxspec's pins, the calling-convention version written and the ranges each side
    supports."""
    import jaxlib

    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "tensorflow": tf.__version__,
        "pinned": pinned_requirements(),
        "jax_export_calling_convention_version": calling_convention_version(),
        "jax_export_supported_calling_convention_versions": [
            int(jax.export.minimum_supported_calling_convention_version),
            int(jax.export.maximum_supported_calling_convention_version),
        ],
        "tf_xla_call_module_max_version": tf_max_call_module_version(),
    }


def _describe() -> str:
    highest = tf_max_call_module_version()
    return (
        f"jax {jax.__version__} writes XlaCallModule version {calling_convention_version()}; "
        f"tensorflow {tf.__version__} supports up to "
        f"{'an unknown version' if highest is None else highest}"
    )


@contextlib.contextmanager
def incompatibilities_reported() -> Iterator[None]:
    """Turn what jax2tf or TensorFlow raise when they cannot work together while
    converting (jax2tf's NotImplementedError about the XlaCallModule version; a TF
    without the XlaCallModule op) into ExportCompatibilityError naming both versions.

    Raises:
      ExportCompatibilityError: in place of those errors; others pass unchanged.
    """
    try:
        yield
    except NotImplementedError as err:
        if "XlaCallModule" not in str(err) and "serialization version" not in str(err):
            raise
        raise ExportCompatibilityError(
            f"The installed TensorFlow cannot run what this JAX exports ({_describe()}): {err}"
        ) from err
    except (AttributeError, ImportError) as err:
        if "XlaCallModule" not in str(err) and "call_module" not in str(err).lower():
            raise
        raise ExportCompatibilityError(
            f"The installed TensorFlow has no usable XlaCallModule op ({_describe()}): {err}"
        ) from err


def check_before_export() -> None:
    """Raise before converting when TF's XlaCallModule cannot run this JAX's version
    (a TF that does not report its maximum counts as 6, as jax2tf assumes); log a
    warning when installed versions differ from jaxspec's pins.

    Raises:
      ExportCompatibilityError: JAX's calling-convention version is above the installed
        TensorFlow's maximum.
    """
    highest = tf_max_call_module_version()
    if highest is not None and calling_convention_version() > highest:
        raise ExportCompatibilityError(
            f"The installed TensorFlow cannot run what this JAX exports: {_describe()}. "
            "Install the versions jaxspec pins (pip install 'jaxspec[tf]'), a newer TensorFlow, "
            "or lower jax_export_calling_convention_version."
        )
    for dist, pin in pinned_requirements().items():
        have = _installed(dist)
        if have is not None and not _matches(have, pin):
            logger.warning(
                "%s %s is installed but jaxspec pins %s%s; the export is checked by loading it.",
                dist,
                have,
                dist,
                pin,
            )


def verify_export(
    export_dir: str, runs: Sequence[tuple[Sequence[str], Mapping[str, np.ndarray], Sequence[str]]]
) -> None:
    """Load ``export_dir`` with ``tf.compat.v1`` and run each ``(tags, feeds, fetches)``:
    feeds map tensor names to arrays (the receiver's features at batch 1), fetches are
    tensor names (signature outputs). What TF Serving would do first, done at export time.

    Raises:
      ExportCompatibilityError: the meta graph cannot be loaded or run by this TF.
    """
    for tags, feeds, fetches in runs:
        graph = tf.Graph()
        config = tf.compat.v1.ConfigProto(device_count={"GPU": 0})
        try:
            with graph.as_default(), tf.compat.v1.Session(graph=graph, config=config) as session:
                tf.compat.v1.saved_model.loader.load(session, list(tags), export_dir)
                session.run(list(fetches), feed_dict=dict(feeds))
        except (tf.errors.OpError, ValueError, TypeError, KeyError) as err:
            raise ExportCompatibilityError(
                f"The SavedModel written for tags {list(tags)} does not load and run in the "
                f"installed TensorFlow ({_describe()}): {type(err).__name__}: {err}"
            ) from err
