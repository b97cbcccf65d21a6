"""Spec fields beyond the MF cases: (fn, tensors) pairs, scaffold_fn, as_estimator_spec,
NPUEstimatorSpec.host_call, immutability, pytrees, pickling."""

from __future__ import annotations

import functools
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxspec
from jaxspec import EstimatorSpec, ModeKeys, NPUEstimatorSpec, TPUEstimatorSpec
from jaxspec.spec.host_call import HostCallHook

LOSS = jnp.float32(1.5)
STATE = {"w": jnp.ones(3)}
T = jnp.ones((2,))


def host_fn(a, b):
    return None


@pytest.mark.parametrize(
    "cls,field",
    [(TPUEstimatorSpec, "host_call"), (TPUEstimatorSpec, "eval_metrics"), (NPUEstimatorSpec, "host_call")],
)
def test_fn_tensors_pair_rules(cls, field):
    def build(value):
        return cls(ModeKeys.EVAL, loss=LOSS, **{field: value})

    with pytest.raises(ValueError, match=rf"{field} must be a tuple or list"):
        build(host_fn)
    with pytest.raises(ValueError, match=rf"{field} must have exactly two elements"):
        build((host_fn, [T, T], None))
    with pytest.raises(TypeError, match=rf"{field}\[0\] must be callable"):
        build(("host_fn", [T, T]))
    with pytest.raises(ValueError, match=rf"{field}\[1\] must be a list, tuple or dict"):
        build((host_fn, T))
    with pytest.raises(RuntimeError, match=rf"{field} passes 1 tensors.*declares 2"):
        build((host_fn, [T]))
    assert getattr(build([host_fn, (T, T)]), field) == (host_fn, (T, T))  # a list pair becomes a tuple
    assert getattr(build((host_fn, {"a": T, "b": T})), field)[1]["b"] is T  # dicts: no arity check


def test_arity_counts_named_arguments_as_tf_does():
    spec = functools.partial(TPUEstimatorSpec, ModeKeys.EVAL, loss=LOSS)
    spec(host_call=(lambda *tensors: None, [T, T, T]))  # *args: any number
    spec(host_call=(functools.partial(host_fn, b=T), [T]))  # bound by a partial: not counted

    class Writer:
        def write(self, a, b):
            return None

    spec(host_call=(Writer().write, [T, T]))  # self not counted
    with pytest.raises(RuntimeError):  # defaulted and keyword-only arguments count
        spec(host_call=(lambda a, b=1, *, c: None, [T]))


def test_scaffold_fn():
    scaffold = jaxspec.Scaffold(init_fn=lambda s: s)
    spec = TPUEstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, scaffold_fn=lambda: scaffold)
    assert spec.scaffold() is scaffold and spec.as_estimator_spec().scaffold is scaffold
    with pytest.raises(TypeError, match="scaffold_fn must be callable"):
        TPUEstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, scaffold_fn=scaffold)
    with pytest.raises(ValueError, match="scaffold_fn returned None"):
        TPUEstimatorSpec(ModeKeys.EVAL, loss=LOSS, scaffold_fn=lambda: None).scaffold()
    with pytest.raises(TypeError, match="scaffold_fn must return a jaxspec.Scaffold"):
        TPUEstimatorSpec(ModeKeys.EVAL, loss=LOSS, scaffold_fn=lambda: "s").scaffold()


def test_as_estimator_spec_hooks_in_every_list():
    hook = jaxspec.SessionRunHook()
    spec = TPUEstimatorSpec(
        ModeKeys.TRAIN, loss=LOSS, train_op=STATE, host_call=(host_fn, [T, T]), training_hooks=[hook]
    )
    cpu = spec.as_estimator_spec()
    assert type(cpu) is EstimatorSpec and cpu.train_op is STATE
    assert cpu.training_hooks[0] is hook
    for hooks in (cpu.training_hooks[1:], cpu.evaluation_hooks, cpu.prediction_hooks):
        assert (
            len(hooks) == 1 and isinstance(hooks[0], HostCallHook) and hooks[0].host_call == (host_fn, [T, T])
        )


def test_as_estimator_spec_metric_fn_by_keyword():
    def metric_fn(labels, predictions):
        return {"acc": jaxspec.metrics.accuracy(labels, predictions)}

    spec = TPUEstimatorSpec(
        ModeKeys.EVAL,
        loss=LOSS,
        eval_metrics=(metric_fn, {"predictions": jnp.array([1, 0]), "labels": jnp.array([1, 1])}),
    )
    assert float(spec.as_estimator_spec().eval_metric_ops["acc"].compute()) == pytest.approx(0.5)


def test_npu_host_call_is_kept_readable_and_immutable():
    spec = NPUEstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, host_call=(host_fn, [T, T]))
    assert spec.host_call == spec._host_call == (host_fn, [T, T])
    assert spec._replace(loss=jnp.float32(2)).host_call == spec.host_call
    assert spec._replace(host_call=None).host_call is None
    with pytest.raises(AttributeError, match="immutable"):
        spec.loss = LOSS
    with pytest.raises(AttributeError):
        EstimatorSpec(ModeKeys.EVAL, loss=LOSS).extra = 1
    positional = NPUEstimatorSpec(
        ModeKeys.EVAL, None, LOSS, None, None, None, None, None, None, None, None, (host_fn, [T, T])
    )
    assert positional.host_call[0] is host_fn  # the adapter's argument order


def test_specs_are_pytrees_of_their_arrays():
    spec = EstimatorSpec(
        ModeKeys.TRAIN,
        loss=LOSS,
        train_op=STATE,
        predictions={"p": T},
        training_hooks=[jaxspec.SessionRunHook()],
    )
    assert len(jax.tree.leaves(spec)) == 3
    doubled = jax.tree.map(lambda x: x * 2, spec)
    assert type(doubled) is EstimatorSpec and float(doubled.loss) == 3.0
    assert doubled.training_hooks is spec.training_hooks and doubled.scaffold is spec.scaffold
    tpu = TPUEstimatorSpec(ModeKeys.EVAL, loss=LOSS, host_call=(host_fn, [T, T]))
    moved = jax.tree.map(np.asarray, tpu)
    assert moved.host_call[0] is host_fn and isinstance(moved.host_call[1][0], np.ndarray)
    npu = NPUEstimatorSpec(ModeKeys.EVAL, loss=LOSS, host_call=(host_fn, {"a": T, "b": T}))
    assert jax.tree.map(lambda x: x + 1, npu).host_call[1]["a"][0] == 2.0
    assert jax.tree.structure(npu) == jax.tree.structure(jax.tree.map(lambda x: x, npu))

    out = jax.jit(lambda s: s)(spec)  # through jit and back
    assert type(out) is EstimatorSpec and out.train_op["w"].shape == (3,)


def test_specs_pickle():
    spec = NPUEstimatorSpec(
        ModeKeys.EVAL, loss=np.float32(1.0), host_call=(host_fn, [np.ones(2), np.ones(2)])
    )
    again = pickle.loads(pickle.dumps(spec))
    assert type(again) is NPUEstimatorSpec and again.host_call[0] is host_fn and float(again.loss) == 1.0


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="mode must be one of"):
        EstimatorSpec("predict", predictions={"p": T})  # ModeKeys.PREDICT is 'infer'
    spec = EstimatorSpec(None)
    assert spec.mode is None and spec.predictions == {} and spec.export_outputs is None
