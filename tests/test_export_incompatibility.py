"""Every JAX/TF export incompatibility is an ExportCompatibilityError naming both versions,
and the export base directory keeps nothing of the failed export."""

from __future__ import annotations

import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from tensorflow.compiler.tf2xla.python import xla as tfxla  # noqa: E402

from jaxspec.export.export_output import PredictOutput  # noqa: E402
from tf_bridge import ExportCompatibilityError, export_saved_model  # noqa: E402
from tf_bridge.export import compat as _compat  # noqa: E402
from tf_bridge.export.receivers import build_raw_serving_input_receiver_fn  # noqa: E402


def _export(base: str) -> bytes:
    state = {"w": np.full((2,), 3.0, np.float32)}
    receiver_fn = build_raw_serving_input_receiver_fn({"v": np.zeros((1, 2), np.float32)})

    def fn(state, features):
        return {"serving_default": {"out": features["v"] * state["w"]}}

    heads = {"serving_default": PredictOutput(jnp.zeros((1,)))}
    return export_saved_model(base, receiver_fn, fn, state, heads, platforms=("cpu",))


def _names_both_versions(message: str) -> None:
    version = _compat.calling_convention_version()
    assert f"jax {jax.__version__}" in message and f"tensorflow {tf.__version__}" in message, message
    assert f"XlaCallModule version {version}" in message, message


@pytest.fixture
def tf_without_version_query(monkeypatch):
    """A TensorFlow older than ``call_module_maximum_supported_version``."""
    assert _compat.calling_convention_version() > 6  # what jax2tf assumes such a TF supports
    monkeypatch.delattr(tfxla, "call_module_maximum_supported_version")


def test_tf_that_does_not_report_its_maximum_fails_before_writing(tmp_path, tf_without_version_query):
    base = str(tmp_path / "exports")
    with pytest.raises(ExportCompatibilityError, match="supports up to 6") as err:
        _export(base)
    _names_both_versions(str(err.value))
    assert not os.path.exists(base)


def test_jax2tf_refusal_while_converting_is_reported(tmp_path, tf_without_version_query, monkeypatch):
    """Past the pre-check (the maximum unknown), jax2tf's own NotImplementedError while
    converting arrives as ExportCompatibilityError; the base made for the export goes."""
    monkeypatch.setattr(_compat, "tf_max_call_module_version", lambda: None)
    base = str(tmp_path / "exports")
    with pytest.raises(ExportCompatibilityError, match="supports up to an unknown version") as err:
        _export(base)
    _names_both_versions(str(err.value))
    assert isinstance(err.value.__cause__, NotImplementedError)
    assert not os.path.exists(base)
    existing = tmp_path / "kept"
    (existing / "1700000000").mkdir(parents=True)  # an earlier export stays, nothing is added
    with pytest.raises(ExportCompatibilityError):
        _export(str(existing))
    assert os.listdir(existing) == ["1700000000"]


def test_the_same_export_works_with_the_real_query(tmp_path):
    path = _export(str(tmp_path / "exports")).decode()
    assert os.listdir(tmp_path / "exports") == [os.path.basename(path)]
