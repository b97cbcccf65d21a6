"""The TF-free artifact (``<export>/jax/``): written when asked for (argument or RunConfig),
loaded by ``jaxspec.export.load_serving`` in a process where importing TensorFlow raises,
serving what ``predict`` and the SavedModel's signatures give, at any batch size."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import jaxspec  # noqa: E402
import tf_bridge  # noqa: E402
from jaxspec.export import load_serving  # noqa: E402
from tests.helpers import digits, fast_config  # noqa: E402
from tests.slim_export_model import CLASSES, input_fn, make_init_fn, model_fn  # noqa: E402
from tests.test_export_support import serialize  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
X, Y = digits(64)

_NO_TF = """
import json, sys
sys.modules["tensorflow"] = None  # `import tensorflow` raises ImportError from here on
import numpy as np
from jaxspec.export import load_serving

x = np.load(sys.argv[1])["x"]
result = {}
for name in sys.argv[2:]:
    fns = load_serving(sys.argv[1].rsplit("/", 1)[0] + "/" + name)
    result[name] = {}
    for key, fn in sorted(fns.items()):
        outs = {}
        for rows in (1, 37):
            inputs = {k: x[:rows] for k in fn.inputs}
            outs[rows] = {
                k: v.tolist() if v.dtype != object else [[b.decode() for b in r] for r in v]
                for k, v in fn(inputs).items()
            }
        result[name][key] = {"inputs": sorted(fn.inputs), "inputs_are": fn.inputs_are, "outs": outs}
print("RESULT " + json.dumps(result))
"""


def _parsing_with_raw_alternative():
    serialized = tf.compat.v1.placeholder(tf.string, [None], name="input_example_tensor")
    x = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([64], tf.float32)})["x"]
    return tf_bridge.ServingInputReceiver({"x": x}, {"examples": serialized}, {"raw": {"x": x}})


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("artifact")
    config = fast_config(str(root / "model"), export_jax_artifact=True)
    est = jaxspec.Estimator(model_fn, str(root / "model"), config=config, init_fn=make_init_fn(32))
    est.train(input_fn(X, Y, 32), steps=3)
    raw = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})
    paths = {
        "raw": est.export_saved_model(str(root / "raw"), raw).decode(),  # RunConfig's default
        "parsing": est.export_saved_model(str(root / "parsing"), _parsing_with_raw_alternative).decode(),
        "off": est.export_saved_model(str(root / "off"), raw, jax_artifact=False).decode(),
    }
    work = root / "work"
    work.mkdir()
    for name in ("raw", "parsing"):
        shutil.copytree(paths[name], work / name)
    np.savez(work / "inputs.npz", x=X)
    run = subprocess.run(
        [sys.executable, "-c", _NO_TF, str(work / "inputs.npz"), "raw", "parsing"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    served = json.loads(next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    return est, paths, served


def test_written_only_when_asked_for(exported):
    _, paths, _ = exported
    assert os.path.isfile(os.path.join(paths["raw"], "jax", "serving.json"))
    assert not os.path.exists(os.path.join(paths["off"], "jax"))
    with pytest.raises(FileNotFoundError):
        load_serving(paths["off"])
    serve = load_serving(paths["raw"])["serving_default"]
    with pytest.raises(TypeError, match="missing \\['x'\\], unexpected \\['y'\\]"):
        serve({"y": X[:2]})


def test_signatures_are_the_saved_models(exported):
    _, paths, served = exported
    for name in ("raw", "parsing"):
        signatures = tf.saved_model.load(paths[name]).signatures
        assert set(served[name]) == set(signatures), name
    # A raw receiver's tensors are the features: the signature's own inputs.
    assert served["raw"]["serving_default"] == {**served["raw"]["serving_default"], "inputs": ["x"]}
    assert served["raw"]["serving_default"]["inputs_are"] == "receiver_tensors"
    # Parsing runs in TF: those signatures take the parsed features; the alternative its own.
    assert {k: v["inputs_are"] for k, v in served["parsing"].items()} == {
        "serving_default": "features",
        "classify": "features",
        "raw:serving_default": "receiver_tensors",
    }  # raw:classify is left out of both: a classify signature takes serialized examples


def test_served_without_tensorflow_equals_predict_and_the_saved_model(exported):
    est, paths, served = exported
    for rows in (1, 37):
        want = np.stack([p["logits"] for p in est.predict(lambda r=rows: iter([{"x": X[:r]}]))])
        for name, key in (
            ("raw", "serving_default"),
            ("parsing", "serving_default"),
            ("parsing", "raw:serving_default"),
        ):
            got = np.asarray(served[name][key]["outs"][str(rows)]["logits"], np.float32)
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"{name} {key} {rows}")
        classify = tf.saved_model.load(paths["parsing"]).signatures["classify"](inputs=serialize(X[:rows]))
        ours = served["parsing"]["classify"]["outs"][str(rows)]
        assert ours["classes"] == [CLASSES] * rows
        assert [[c.decode() for c in r] for r in classify["classes"].numpy()] == ours["classes"]
        np.testing.assert_allclose(np.asarray(ours["scores"]), classify["scores"].numpy(), atol=1e-5, rtol=0)


def test_version_guard(exported, tmp_path):
    _, paths, _ = exported
    copy = tmp_path / "newer"
    shutil.copytree(paths["raw"], copy)
    manifest = json.loads((copy / "jax" / "serving.json").read_text())
    assert manifest["format"] == "jaxspec.jax_serving" and manifest["format_version"] == 1
    assert manifest["weights"] == sorted(manifest["weights"]) and all(
        n.startswith("ema/") for n in manifest["weights"]
    )
    (copy / "jax" / "serving.json").write_text(json.dumps({**manifest, "format_version": 2}))
    with pytest.raises(ValueError, match="format_version 2"):
        load_serving(copy)
    sig = dict(manifest["signatures"]["serving_default"], calling_convention_version=1)
    (copy / "jax" / "serving.json").write_text(
        json.dumps({**manifest, "signatures": {"serving_default": sig}})
    )
    with pytest.raises(ValueError, match="calling convention 1"):
        load_serving(copy)


def test_run_config_field():
    assert jaxspec.RunConfig().export_jax_artifact is False
    assert jaxspec.RunConfig().replace(export_jax_artifact=True).export_jax_artifact is True
    with pytest.raises(TypeError, match="export_jax_artifact must be a bool"):
        jaxspec.RunConfig(export_jax_artifact="yes")


def _bf16_model_fn(features, labels, mode, state):
    import jax.numpy as jnp

    y = (features["x"].astype(jnp.bfloat16) @ state["w"]).astype(jnp.float32)
    if mode == jaxspec.ModeKeys.PREDICT:
        outputs = {"serving_default": jaxspec.export.PredictOutput({"y": y})}
        return jaxspec.EstimatorSpec(mode, predictions={"y": y}, export_outputs=outputs)
    loss = jnp.mean((y - labels) ** 2)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"w": state["w"] * jnp.bfloat16(0.5)})


def test_bfloat16_weights_load_and_serve(tmp_path):
    """npz keeps a bfloat16 array's bytes but reads them back as raw void bytes: the
    manifest's dtypes bring bfloat16 back, and the artifact serves what predict gives."""
    import jax.numpy as jnp

    w = np.arange(1, 7, dtype=np.float32).reshape(3, 2) / 4
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3)
    est = jaxspec.Estimator(
        _bf16_model_fn,
        config=fast_config(str(tmp_path / "m")),
        init_fn=lambda: {"w": jnp.asarray(w, jnp.bfloat16)},
    )
    est.train(lambda: iter([({"x": x}, np.zeros((5, 2), np.float32))]))
    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 3], tf.float32)})
    path = est.export_saved_model(str(tmp_path / "e"), receiver, jax_artifact=True).decode()
    (fn,) = load_serving(path).values()
    served = np.asarray(fn({"x": x})["y"])
    predicted = np.stack([p["y"] for p in est.predict(lambda: iter([{"x": x}]))])
    np.testing.assert_allclose(served, predicted, rtol=1e-5)
    by_hand = (x.astype(jnp.bfloat16) @ (jnp.asarray(w, jnp.bfloat16) * jnp.bfloat16(0.5))).astype(np.float32)
    np.testing.assert_allclose(served, np.asarray(by_hand), rtol=1e-2)
