"""tf_bridge: SavedModel export of a JAX serving function, reloaded and run by TensorFlow."""

from __future__ import annotations

import json
import logging
import os
import time

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax.training import train_state  # noqa: E402
from tensorflow.core.protobuf import saved_model_pb2  # noqa: E402

from jaxspec.export.export_output import (  # noqa: E402
    ClassificationOutput,
    PredictOutput,
    RegressionOutput,
)
from tf_bridge import (  # noqa: E402
    ServingInputReceiver,
    TensorServingInputReceiver,
    build_parsing_serving_input_receiver_fn,
    build_raw_serving_input_receiver_fn,
    export_saved_model,
)

NUM_FEATURES = 64
VOCAB = np.array(["cat", "dog", "bird"])
FEATURE_SPEC = {"x": tf.io.FixedLenFeature([NUM_FEATURES], tf.float32)}
CPU = jax.devices("cpu")[0]
# TF here is CPU-only; lower for CPU whatever JAX's default backend is.
PLATFORMS = ("cpu",)


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(16)(x))
        return nn.Dense(len(VOCAB))(x)


def make_state():
    with jax.default_device(CPU):
        params = MLP().init(jax.random.PRNGKey(0), jnp.zeros((1, NUM_FEATURES)))["params"]
    # Random biases too (flax starts them at 0), so every value is distinctive.
    rs = np.random.RandomState(0)
    return {
        "params": jax.tree_util.tree_map(
            lambda a: (np.asarray(a) + 0.1 * rs.randn(*a.shape)).astype(np.float32), params
        )
    }


def serving_fn(state, features):
    logits = MLP().apply({"params": state["params"]}, features["x"])
    probs = jax.nn.softmax(logits)
    return {
        "serving_default": {"logits": logits, "probabilities": probs},
        "classification": {"scores": probs},
        "class_ids": {"scores": probs, "classes": jnp.argmax(logits, axis=-1)},
        "regression": {"outputs": logits[:, 0]},
    }


def make_heads():
    scores = jnp.zeros((1, len(VOCAB)))
    return {
        "serving_default": PredictOutput({"logits": scores, "probabilities": scores}),
        "classification": ClassificationOutput(scores=scores, classes=VOCAB),
        "class_ids": ClassificationOutput(scores=scores, classes=jnp.zeros((1,), jnp.int32)),
        "regression": RegressionOutput(jnp.zeros((1,))),
    }


def serialize(xs):
    return tf.constant(
        [
            tf.train.Example(
                features=tf.train.Features(
                    feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=x))}
                )
            ).SerializeToString()
            for x in xs
        ]
    )


def reference(state, features):
    with jax.default_device(CPU):
        return jax.tree_util.tree_map(np.asarray, jax.jit(serving_fn)(state, features))


def read_meta_graph(path):
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    assert len(proto.meta_graphs) == 1
    return proto.meta_graphs[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("export")
    asset = tmp_path_factory.mktemp("src") / "vocab.txt"
    asset.write_text("cat\ndog\nbird\n")
    state = make_state()
    before = int(time.time())
    path = export_saved_model(
        str(base),
        build_parsing_serving_input_receiver_fn(FEATURE_SPEC),
        serving_fn,
        state,
        make_heads(),
        assets_extra={"vocab/vocab.txt": str(asset)},
        global_step=123,
        platforms=PLATFORMS,
    )
    return {"path": path, "base": str(base), "state": state, "before": before, "after": int(time.time())}


def test_returns_timestamped_bytes_path(exported):
    path = exported["path"]
    assert isinstance(path, bytes)
    path = path.decode()
    assert os.path.dirname(path) == exported["base"]
    name = os.path.basename(path)
    assert name.isdigit() and exported["before"] <= int(name) <= exported["after"] + 1
    assert os.listdir(exported["base"]) == [name]  # no temp-* directory left behind
    assert os.path.isfile(os.path.join(path, "saved_model.pb"))
    assert os.path.isfile(os.path.join(path, "variables", "variables.index"))


def test_signature_defs_match_tf_estimator(exported):
    meta = read_meta_graph(exported["path"].decode())
    assert list(meta.meta_info_def.tags) == ["serve"]
    sigs = meta.signature_def
    assert set(sigs) == {"serving_default", "classification", "class_ids", "regression"}
    expected = {
        "serving_default": ("tensorflow/serving/predict", {"examples"}, {"logits", "probabilities"}),
        "classification": ("tensorflow/serving/classify", {"inputs"}, {"classes", "scores"}),
        "class_ids": ("tensorflow/serving/classify", {"inputs"}, {"classes", "scores"}),
        "regression": ("tensorflow/serving/regress", {"inputs"}, {"outputs"}),
    }
    for key, (method, inputs, outputs) in expected.items():
        assert sigs[key].method_name == method, key
        assert set(sigs[key].inputs) == inputs, key
        assert set(sigs[key].outputs) == outputs, key
        for info in sigs[key].inputs.values():
            assert info.name == "input_example_tensor:0"
            assert info.dtype == tf.string.as_datatype_enum
    assert sigs["classification"].outputs["classes"].dtype == tf.string.as_datatype_enum
    assert sigs["classification"].outputs["scores"].dtype == tf.float32.as_datatype_enum
    assert sigs["regression"].outputs["outputs"].dtype == tf.float32.as_datatype_enum
    # Exactly one XlaCallModule op: the whole serving_fn, natively serialized.
    assert [n.op for n in meta.graph_def.node].count("XlaCallModule") == 1


@pytest.mark.parametrize("batch", [1, 5, 7])
def test_signatures_match_jax(exported, batch):
    loaded = tf.saved_model.load(exported["path"].decode())
    xs = np.random.RandomState(batch).randn(batch, NUM_FEATURES).astype(np.float32)
    want = reference(exported["state"], {"x": xs})
    examples = serialize(xs)

    got = loaded.signatures["serving_default"](examples=examples)
    for key in ("logits", "probabilities"):
        assert got[key].shape == (batch, len(VOCAB))
        np.testing.assert_allclose(got[key].numpy(), want["serving_default"][key], rtol=0, atol=1e-5)

    got = loaded.signatures["classification"](inputs=examples)
    np.testing.assert_allclose(got["scores"].numpy(), want["classification"]["scores"], rtol=0, atol=1e-5)
    assert got["classes"].numpy().astype(str).tolist() == [VOCAB.tolist()] * batch

    got = loaded.signatures["class_ids"](inputs=examples)
    ids = want["class_ids"]["classes"]
    assert got["classes"].numpy().astype(str).tolist() == [str(i) for i in ids]

    got = loaded.signatures["regression"](inputs=examples)
    assert got["outputs"].shape == (batch,)
    np.testing.assert_allclose(got["outputs"].numpy(), want["regression"]["outputs"], rtol=0, atol=1e-5)


def test_variables_hold_the_state(exported):
    path = exported["path"].decode()
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    params = exported["state"]["params"]
    expected = {f"params/{layer}/{leaf}": params[layer][leaf] for layer in params for leaf in params[layer]}
    assert set(expected) == {
        "params/Dense_0/kernel",
        "params/Dense_0/bias",
        "params/Dense_1/kernel",
        "params/Dense_1/bias",
    }
    assert set(reader.get_variable_to_shape_map()) == set(expected) | {"global_step"}
    for name, value in expected.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)
    assert reader.get_tensor("global_step") == 123
    assert reader.get_variable_to_dtype_map()["global_step"] == tf.int64
    loaded = tf.saved_model.load(path)
    assert {v.name for v in loaded.variables} == {f"{n}:0" for n in expected} | {"global_step:0"}
    # Values live in the checkpoint only, not as constants in the graph.
    graph_bytes = open(os.path.join(path, "saved_model.pb"), "rb").read()
    for value in expected.values():
        assert value.tobytes()[:32] not in graph_bytes


def test_assets_extra_and_export_record(exported):
    extra = os.path.join(exported["path"].decode(), "assets.extra")
    with open(os.path.join(extra, "vocab", "vocab.txt")) as f:
        assert f.read() == "cat\ndog\nbird\n"
    with open(os.path.join(extra, "jaxspec_export.json")) as f:
        record = json.load(f)
    import jaxlib

    assert record["jax"] == jax.__version__
    assert record["jaxlib"] == jaxlib.__version__
    assert record["tensorflow"] == tf.__version__
    low, high = record["jax_export_supported_calling_convention_versions"]
    assert (low, high) == (
        jax.export.minimum_supported_calling_convention_version,
        jax.export.maximum_supported_calling_convention_version,
    )
    assert len(record["xla_call_module_versions"]) == 1
    assert low <= record["xla_call_module_versions"][0] <= high
    assert record["platforms"] == ["CPU"]
    assert record["polymorphic_shapes"] == {"x": f"(b, {NUM_FEATURES})"}
    assert record["global_step"] == 123
    assert record["signatures"] == {
        "class_ids": "tensorflow/serving/classify",
        "classification": "tensorflow/serving/classify",
        "regression": "tensorflow/serving/regress",
        "serving_default": "tensorflow/serving/predict",
    }


def test_raw_receiver_skips_classify_with_warning(tmp_path, caplog):
    state = make_state()
    receiver_fn = build_raw_serving_input_receiver_fn({"x": np.zeros((1, NUM_FEATURES), np.float32)})

    def fn(state, features):
        out = serving_fn(state, features)
        return {"serving_default": out["serving_default"], "classification": out["classification"]}

    heads = make_heads()
    heads = {"serving_default": heads["serving_default"], "classification": heads["classification"]}
    with caplog.at_level(logging.WARNING, logger="tf_bridge"):
        path = export_saved_model(str(tmp_path), receiver_fn, fn, state, heads, platforms=PLATFORMS).decode()
    assert any("'classification'" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    sigs = read_meta_graph(path).signature_def
    assert set(sigs) == {"serving_default"}
    assert set(sigs["serving_default"].inputs) == {"x"}
    assert sigs["serving_default"].inputs["x"].tensor_shape.dim[0].size == -1
    xs = np.random.RandomState(3).randn(3, NUM_FEATURES).astype(np.float32)
    got = tf.saved_model.load(path).signatures["serving_default"](x=tf.constant(xs))
    want = reference(state, {"x": xs})["serving_default"]
    np.testing.assert_allclose(got["logits"].numpy(), want["logits"], rtol=0, atol=1e-5)
    with open(os.path.join(path, "assets.extra", "jaxspec_export.json")) as f:
        assert list(json.load(f)["signatures_left_out"]) == ["classification"]


def test_alternatives_train_state_and_tensor_receiver(tmp_path):
    """A TrainState's leaves are named by attribute path; a receiver alternative adds
    '<alt>:<head>' signatures (classify is left out for its float input)."""
    model = nn.Dense(2)
    with jax.default_device(CPU):
        params = model.init(jax.random.PRNGKey(1), jnp.zeros((1, 4)))["params"]
        state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))

    def fn(state, x):
        y = state.apply_fn({"params": state.params}, x)
        return {"serving_default": {"y": y}, "classify": {"scores": jax.nn.softmax(y)}}

    def receiver_fn():
        serialized = tf.compat.v1.placeholder(tf.string, [None], name="input_example_tensor")
        x = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([4], tf.float32)})["x"]
        return TensorServingInputReceiver(x, {"examples": serialized}, {"raw": x})

    heads = {
        "serving_default": PredictOutput(jnp.zeros((1, 2))),
        "classify": ClassificationOutput(jnp.zeros((1, 2))),
    }
    path = export_saved_model(str(tmp_path), receiver_fn, fn, state, heads, platforms=PLATFORMS).decode()
    sigs = read_meta_graph(path).signature_def
    assert set(sigs) == {"serving_default", "classify", "raw:serving_default"}
    assert set(sigs["raw:serving_default"].inputs) == {"input"}
    names = set(
        tf.train.load_checkpoint(os.path.join(path, "variables", "variables")).get_variable_to_shape_map()
    )
    assert names == {
        "step",
        "params/kernel",
        "params/bias",
        "opt_state/0/count",
        "opt_state/0/mu/kernel",
        "opt_state/0/mu/bias",
        "opt_state/0/nu/kernel",
        "opt_state/0/nu/bias",
    }
    xs = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    loaded = tf.saved_model.load(path)
    with jax.default_device(CPU):
        want = np.asarray(fn(state, jnp.asarray(xs))["serving_default"]["y"])
    np.testing.assert_allclose(
        loaded.signatures["raw:serving_default"](input=xs)["y"].numpy(), want, atol=1e-5
    )


def test_as_text_and_timestamp_bump(tmp_path):
    state = {"w": np.full((2,), 3.0, np.float32)}
    receiver_fn = build_raw_serving_input_receiver_fn({"v": np.zeros((1, 2), np.float32)})
    heads = {"serving_default": PredictOutput(jnp.zeros((1,)))}

    def fn(state, features):
        return {"serving_default": {"out": features["v"] * state["w"]}}

    first = export_saved_model(tmp_path, receiver_fn, fn, state, heads, as_text=True, platforms=PLATFORMS)
    second = export_saved_model(tmp_path, receiver_fn, fn, state, heads, platforms=PLATFORMS)
    assert int(os.path.basename(second)) > int(os.path.basename(first))
    assert os.path.isfile(os.path.join(first.decode(), "saved_model.pbtxt"))
    assert not os.path.exists(os.path.join(first.decode(), "saved_model.pb"))
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p.decode()) for p in (first, second))


def test_failures_leave_nothing_behind(tmp_path):
    state = make_state()
    receiver_fn = build_parsing_serving_input_receiver_fn(FEATURE_SPEC)
    with pytest.raises(ValueError, match="heads' keys"):
        export_saved_model(
            str(tmp_path),
            receiver_fn,
            serving_fn,
            state,
            {"serving_default": make_heads()["serving_default"]},
        )

    def broken(state, features):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        export_saved_model(str(tmp_path), receiver_fn, broken, state, make_heads(), platforms=PLATFORMS)
    with pytest.raises(ValueError, match="PredictOutput"):
        export_saved_model(str(tmp_path), receiver_fn, serving_fn, state, {"serving_default": object()})
    # (A typed PRNG key leaf is no failure any more: tests/test_nnx.py exports one.)
    assert os.listdir(tmp_path) == []


def test_receivers_wrap_and_check_like_tf():
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        s = tf.compat.v1.placeholder(tf.string, [None], name="s")
        receiver = ServingInputReceiver(x, s)
        assert receiver.features == {"feature": x}
        assert receiver.receiver_tensors == {"input": s}
        assert receiver.receiver_tensors_alternatives is None
        assert ServingInputReceiver({1: x}, {"s": s}).features == {1: x}
        alt = ServingInputReceiver({"x": x}, s, {"raw": x}).receiver_tensors_alternatives
        assert alt == {"raw": {"input": x}}
        tensor_receiver = TensorServingInputReceiver(x, s)
        assert tensor_receiver.features is x and tensor_receiver.receiver_tensors == {"input": s}
        for bad in (
            lambda: ServingInputReceiver(None, s),
            lambda: ServingInputReceiver(x, None),
            lambda: ServingInputReceiver(x, {1: s}),
            lambda: ServingInputReceiver({"x": np.zeros(3)}, s),
            lambda: ServingInputReceiver(x, s, [x]),
            lambda: TensorServingInputReceiver({"x": x}, s),
            lambda: TensorServingInputReceiver(None, s),
        ):
            with pytest.raises(ValueError):
                bad()

        parsed = build_parsing_serving_input_receiver_fn(FEATURE_SPEC, default_batch_size=4)()
        (examples,) = parsed.receiver_tensors.values()
        assert list(parsed.receiver_tensors) == ["examples"]
        assert examples.name == "input_example_tensor:0" and examples.shape.as_list() == [4]
        assert parsed.features["x"].shape.as_list() == [4, NUM_FEATURES]

        raw = build_raw_serving_input_receiver_fn(
            {"a": np.zeros((9, 2, 3), np.int32), "b": tf.TensorSpec([None], tf.float32)}, default_batch_size=5
        )()
        assert raw.features is raw.receiver_tensors or raw.features == raw.receiver_tensors
        assert raw.features["a"].shape.as_list() == [5, 2, 3] and raw.features["a"].dtype == tf.int32
        assert raw.features["b"].shape.as_list() == [5] and raw.features["b"].op.type == "Placeholder"


def _scale_export(tmp_path, **kwargs):
    state = {"w": np.full((2,), 3.0, np.float32)}
    receiver_fn = build_raw_serving_input_receiver_fn({"v": np.zeros((1, 2), np.float32)})

    def fn(state, features):
        return {"serving_default": {"out": features["v"] * state["w"]}}

    return export_saved_model(
        str(tmp_path), receiver_fn, fn, state, {"serving_default": PredictOutput(jnp.zeros((1,)))}, **kwargs
    )


def test_tf_too_old_for_this_jax_fails_before_writing(tmp_path, monkeypatch):
    from tf_bridge import ExportCompatibilityError
    from tf_bridge.export import compat as _compat

    version = _compat.calling_convention_version()
    monkeypatch.setattr(_compat, "tf_max_call_module_version", lambda: version - 1)
    with pytest.raises(
        ExportCompatibilityError, match=f"XlaCallModule version {version}.*up to {version - 1}"
    ):
        _scale_export(tmp_path, platforms=PLATFORMS)
    assert os.listdir(tmp_path) == []


def test_load_check_refuses_a_model_this_tf_cannot_run(tmp_path):
    """A module lowered only for CUDA cannot run on this CPU TensorFlow: the export says
    so (instead of TF Serving at the first request) and leaves nothing behind."""
    from tf_bridge import ExportCompatibilityError

    with pytest.raises(ExportCompatibilityError, match="CUDA"):
        _scale_export(tmp_path, platforms=("cuda",))
    assert os.listdir(tmp_path) == []
    # verify=False writes it anyway (for a serving machine that has the device).
    path = _scale_export(tmp_path, platforms=("cuda",), verify=False).decode()
    with open(os.path.join(path, "assets.extra", "jaxspec_export.json")) as f:
        assert json.load(f)["platforms"] == ["CUDA"]


def test_receiver_vocabulary_becomes_an_asset(tmp_path):
    """TF ops in front of the JAX body (a string lookup table) keep working, and the
    table's vocabulary file is copied to assets/ (the source can go away)."""
    vocab = tmp_path / "src" / "words.txt"
    vocab.parent.mkdir()
    vocab.write_text("zero\none\ntwo\n")
    state = {"table": np.array([10.0, 20.0, 30.0, -1.0], np.float32)}

    def receiver_fn():
        words = tf.compat.v1.placeholder(tf.string, [None], name="words")
        table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                str(vocab),
                tf.string,
                tf.lookup.TextFileIndex.WHOLE_LINE,
                tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER,
            ),
            default_value=3,
        )
        return ServingInputReceiver({"ids": tf.cast(table.lookup(words), tf.int32)}, {"words": words})

    def fn(state, features):
        return {"serving_default": {"value": state["table"][features["ids"]]}}

    path = export_saved_model(
        str(tmp_path / "export"),
        receiver_fn,
        fn,
        state,
        {"serving_default": PredictOutput(jnp.zeros((1,)))},
        platforms=PLATFORMS,
    ).decode()
    assert open(os.path.join(path, "assets", "words.txt")).read() == "zero\none\ntwo\n"
    vocab.unlink()
    got = tf.saved_model.load(path).signatures["serving_default"](words=tf.constant(["two", "zero", "nine"]))
    np.testing.assert_array_equal(got["value"].numpy(), [30.0, 10.0, -1.0])


def test_unknown_inner_dims_stay_unknown_and_static_batch_stays_static(tmp_path):
    state = {"w": np.float32(2.0)}
    raw = build_raw_serving_input_receiver_fn({"seq": tf.TensorSpec([None, None], tf.float32, name="seq")})

    def fn(state, features):
        return {"serving_default": {"total": state["w"] * features["seq"].sum(axis=1)}}

    heads = {"serving_default": PredictOutput(jnp.zeros((1,)))}
    path = export_saved_model(str(tmp_path / "a"), raw, fn, state, heads, platforms=PLATFORMS).decode()
    with open(os.path.join(path, "assets.extra", "jaxspec_export.json")) as f:
        assert json.load(f)["polymorphic_shapes"] == {"seq": "(b, d0)"}
    sig = read_meta_graph(path).signature_def["serving_default"]
    assert sig.inputs["seq"].name == "seq:0"
    assert [d.size for d in sig.inputs["seq"].tensor_shape.dim] == [-1, -1]
    served = tf.saved_model.load(path).signatures["serving_default"]
    for shape in [(2, 5), (3, 11)]:
        xs = np.random.RandomState(0).randn(*shape).astype(np.float32)
        np.testing.assert_allclose(served(seq=tf.constant(xs))["total"].numpy(), 2 * xs.sum(1), rtol=1e-5)

    fixed = build_parsing_serving_input_receiver_fn(FEATURE_SPEC, default_batch_size=4)
    path = export_saved_model(
        str(tmp_path / "b"), fixed, serving_fn, make_state(), make_heads(), platforms=PLATFORMS
    ).decode()
    with open(os.path.join(path, "assets.extra", "jaxspec_export.json")) as f:
        assert json.load(f)["polymorphic_shapes"] == {"x": f"(4, {NUM_FEATURES})"}
    sig = read_meta_graph(path).signature_def["serving_default"]
    assert [d.size for d in sig.outputs["logits"].tensor_shape.dim] == [4, len(VOCAB)]


def test_supervised_receivers_like_tf():
    from tf_bridge import (
        SupervisedInputReceiver,
        build_raw_supervised_input_receiver_fn,
        build_supervised_input_receiver_fn_from_input_fn,
    )

    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3])
        y = tf.compat.v1.placeholder(tf.int32, [None])
        receiver = SupervisedInputReceiver({"x": x}, y, {"x": x, "y": y})
        assert receiver.labels is y and set(receiver.receiver_tensors) == {"x", "y"}
        assert SupervisedInputReceiver(x, y, x).receiver_tensors == {"input": x}
        for bad in (
            lambda: SupervisedInputReceiver(x, None, x),
            lambda: SupervisedInputReceiver(x, y, None),
            lambda: SupervisedInputReceiver(x, np.zeros(3), x),
        ):
            with pytest.raises(ValueError):
                bad()

        single = build_raw_supervised_input_receiver_fn(
            np.zeros((2, 3), np.float32), np.zeros((2,), np.int32)
        )()
        assert set(single.receiver_tensors) == {"input", "label"}
        assert single.features.shape.as_list() == [None, 3] and single.labels.dtype == tf.int32
        with pytest.raises(ValueError, match="distinct keys"):
            build_raw_supervised_input_receiver_fn({"label": x}, y)

        def input_fn(params):  # a jaxspec input_fn: numpy batches
            rows = params["batch_size"]
            return iter([({"x": np.zeros((rows, 3), np.float32)}, np.zeros((rows, 1), np.float32))])

        made = build_supervised_input_receiver_fn_from_input_fn(input_fn, params={"batch_size": 5})()
        assert set(made.receiver_tensors) == {"x", "label"}
        assert made.features["x"].shape.as_list() == [None, 3]
        assert made.labels.shape.as_list() == [None, 1]

        dataset = tf.data.Dataset.from_tensor_slices(
            ({"x": np.zeros((6, 3), np.float32)}, np.zeros(6, np.int64))
        ).batch(4)
        from_data = build_supervised_input_receiver_fn_from_input_fn(lambda: dataset)()  # made outside
        assert from_data.features["x"].shape.as_list() == [None, 3]
        assert from_data.labels.dtype == tf.int64
        with pytest.raises(ValueError, match="labels"):
            build_supervised_input_receiver_fn_from_input_fn(lambda: iter([{"x": np.zeros((2, 3))}]))


def test_low_level_eval_export_without_labels_streams_a_mean(tmp_path):
    from jaxspec.metrics import mean
    from tf_bridge import ModeExport, UnsupervisedInputReceiver, export_all_saved_models

    def receiver_fn():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        return UnsupervisedInputReceiver({"x": x}, {"x": x})

    def eval_fn(state, step, features, labels):
        assert labels is None
        y = state["w"] * features["x"].sum(axis=1)
        return {"loss": jnp.mean(y), "predictions": y, "metrics": {"mean_y": mean(y)}}

    state = {"w": np.float32(2.0)}
    path = export_all_saved_models(
        str(tmp_path), {"eval": ModeExport(receiver_fn, eval_fn)}, state, platforms=PLATFORMS
    ).decode()
    meta = read_meta_graph(path)
    assert list(meta.meta_info_def.tags) == ["eval"]
    sig = meta.signature_def["eval"]
    assert sig.method_name == "tensorflow/supervised/eval"
    assert set(sig.outputs) == {"loss", "predictions", "metrics/mean_y/value", "metrics/mean_y/update_op"}
    batches = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((5, 3), np.float32)]
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        tf.compat.v1.saved_model.loader.load(session, ["eval"], path)
        for xs in batches:
            session.run(sig.outputs["metrics/mean_y/update_op"].name, {sig.inputs["x"].name: xs})
        value = session.run(sig.outputs["metrics/mean_y/value"].name)
    np.testing.assert_allclose(value, np.mean(np.concatenate([2 * b.sum(1) for b in batches])), rtol=1e-6)
