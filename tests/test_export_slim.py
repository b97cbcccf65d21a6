"""The SavedModel holds the state leaves its modes read: a model trained with Adam whose
PREDICT serves EMA weights exports those (and global_step) only, as TF's checkpoint
reader lists them; EVAL exports the raw weights, EVAL+PREDICT both, TRAIN everything.
Served outputs equal predict."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import jaxspec  # noqa: E402
import tf_bridge  # noqa: E402
from jaxspec.export import slim  # noqa: E402
from tests.helpers import digits, fast_config  # noqa: E402
from tests.slim_export_model import input_fn, make_init_fn, model_fn  # noqa: E402

TRAIN, EVAL, PREDICT = jaxspec.ModeKeys.TRAIN, jaxspec.ModeKeys.EVAL, jaxspec.ModeKeys.PREDICT
X, Y = digits(64)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("slim")
    est = jaxspec.Estimator(
        model_fn, str(root / "model"), config=fast_config(str(root / "model")), init_fn=make_init_fn(64)
    )
    est.train(input_fn(X, Y, 32), steps=3)
    values = {n: np.asarray(est.get_variable_value(n)) for n in est.get_variable_names()}
    return est, root, values


def saved_variables(export_dir: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(os.path.join(export_dir, "variables", "variables"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def variables_bytes(export_dir: str) -> int:
    folder = os.path.join(export_dir, "variables")
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


def raw_receiver():
    return tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})


def supervised_receiver():
    return tf_bridge.build_supervised_input_receiver_fn_from_input_fn(input_fn(X, Y, 32))


def test_predict_export_holds_what_predict_reads(trained):
    est, root, values = trained
    path = est.export_saved_model(str(root / "predict"), raw_receiver()).decode()
    saved = saved_variables(path)
    # PREDICT reads state.ema (model_fn), nothing else: not params, Adam's mu/nu/count, step.
    ema = {n: v for n, v in values.items() if n.startswith("ema/")}
    assert len(ema) == 4 and len(values) == 1 + 4 * 4 + 2  # global_step, 4 trees, count, step
    assert set(saved) == set(ema) | {"global_step"}
    for name, value in ema.items():
        np.testing.assert_array_equal(saved[name], value, err_msg=name)
    assert saved["global_step"] == 3
    read = sum(v.nbytes for v in ema.values())
    assert variables_bytes(path) <= 1.05 * read
    served = tf.saved_model.load(path).signatures["serving_default"](x=tf.constant(X[:9]))["logits"]
    want = np.stack([p["logits"] for p in est.predict(lambda: iter([{"x": X[:9]}]))])
    np.testing.assert_allclose(served.numpy(), want, atol=1e-5, rtol=0)


def test_each_mode_holds_what_it_reads(trained):
    est, root, values = trained
    params = {n for n in values if n.startswith("params/")}
    ema = {n for n in values if n.startswith("ema/")}
    path = est.export_saved_model(str(root / "eval"), supervised_receiver(), experimental_mode=EVAL).decode()
    assert set(saved_variables(path)) == params | {"global_step"}  # EVAL reads the raw weights
    both = est.experimental_export_all_saved_models(
        str(root / "both"), {EVAL: supervised_receiver(), PREDICT: raw_receiver()}
    ).decode()
    assert set(saved_variables(both)) == params | ema | {"global_step"}  # the union: one variable set
    train = est.export_saved_model(
        str(root / "train"), supervised_receiver(), experimental_mode=TRAIN
    ).decode()
    saved = saved_variables(train)  # its train_op assigns every leaf
    assert set(saved) == set(values)
    np.testing.assert_array_equal(
        saved["opt_state/0/mu/Dense_0/kernel"], values["opt_state/0/mu/Dense_0/kernel"]
    )


def test_leaves_read_by_the_traced_function():
    """leaves_read on a state whose names say nothing: a leaf an output depends on only
    through a scan, a cond branch or a jitted call counts; one used and then discarded
    (multiplied by zero is still a read; `0 * x` is not folded away) counts; one only
    reaching a dead value does not. The conservative walk never drops a read leaf."""
    state = {"a": jnp.ones(3), "b": jnp.ones(3), "c": jnp.ones(()), "d": jnp.ones(3), "e": jnp.ones(2)}

    def fn(st, step, features, labels):
        _ = st["d"] * 2.0  # dead
        carry, _ = jax.lax.scan(lambda c, _: (c + st["a"], None), features, None, length=2)
        branch = jax.lax.cond(step > 0, lambda: st["c"], lambda: 0.0)
        called = jax.jit(lambda v: v.sum())(st["b"])
        return {"y": carry + branch + called + 0.0 * st["e"].sum()}

    args = (np.int32(1), np.zeros(3, np.float32), None)
    read = slim.leaves_read(fn, state, *args)
    assert dict(zip(sorted(state), read, strict=True)) == {
        "a": True,
        "b": True,
        "c": True,
        "d": False,
        "e": True,
    }
    leaves, treedef = jax.tree_util.tree_flatten(state)
    jaxpr = jax.make_jaxpr(lambda ls, *a: fn(treedef.unflatten(ls), *a))(leaves, *args).jaxpr
    walked = slim.walk_used_inputs(jaxpr)[: len(leaves)]
    assert all(w for w, r in zip(walked, read, strict=True) if r) and not walked[sorted(state).index("d")]
    kept = slim.keep_leaves(state, {"p": fn}, read)
    assert kept.left_out == ("['d']",) and kept.bytes_kept == 4 * (3 + 3 + 1 + 2)
    np.testing.assert_array_equal(kept.fns["p"](kept.state, *args)["y"], fn(state, *args)["y"])
