"""behaviour-cases.md, section MF: the EstimatorSpec contract, case by case (no training).

Each test is named by its case ID. The three spec classes share the field validators,
so most cases also run against TPUEstimatorSpec / NPUEstimatorSpec where the field exists.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse

import jaxspec
from jaxspec import EstimatorSpec, ModeKeys, NPUEstimatorSpec, TPUEstimatorSpec
from jaxspec.export import ClassificationOutput, PredictOutput, RegressionOutput

LOSS = jnp.float32(1.5)
STATE = {"w": jnp.ones(3)}
PREDS = {"y": jnp.ones((4, 2))}
ALL_SPECS = [EstimatorSpec, TPUEstimatorSpec, NPUEstimatorSpec]
HOOK_FIELDS = ["training_chief_hooks", "training_hooks", "evaluation_hooks", "prediction_hooks"]


def _sparse():
    return sparse.BCOO.fromdense(jnp.eye(2))


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_01_minimal_spec_per_mode(cls):
    train = cls(ModeKeys.TRAIN, loss=LOSS, train_op=STATE)
    assert train.mode == ModeKeys.TRAIN and train.loss is LOSS and train.train_op is STATE
    evaluate = cls(ModeKeys.EVAL, loss=LOSS)
    assert evaluate.predictions == {} and float(evaluate.loss) == 1.5
    predict = cls(ModeKeys.PREDICT, predictions=PREDS)
    assert predict.loss is None and predict.predictions == PREDS


@pytest.mark.parametrize("mode", ModeKeys.all())
def test_mf_02_every_field_set_in_every_mode(mode):
    hook = jaxspec.SessionRunHook()
    metric = jaxspec.metrics.mean(jnp.ones(4))
    heads = {"serving_default": PredictOutput(PREDS)}
    scaffold = jaxspec.Scaffold()
    spec = EstimatorSpec(
        mode,
        predictions=PREDS,
        loss=LOSS,
        train_op=STATE,
        eval_metric_ops={"pair": (jnp.float32(1.0), jnp.float32(2.0)), "metric": metric},
        export_outputs=heads,
        training_chief_hooks=[hook],
        training_hooks=[hook],
        scaffold=scaffold,
        evaluation_hooks=[hook],
        prediction_hooks=[hook],
    )
    assert spec.train_op is STATE and spec.scaffold is scaffold and spec.predictions == PREDS
    assert spec.eval_metric_ops["metric"] is metric and len(spec.eval_metric_ops["pair"]) == 2
    assert all(getattr(spec, f) == (hook,) for f in HOOK_FIELDS)
    assert spec.export_outputs["serving_default"] is heads["serving_default"]


@pytest.mark.parametrize("cls", ALL_SPECS)
@pytest.mark.parametrize("mode", [ModeKeys.TRAIN, ModeKeys.EVAL])
@pytest.mark.parametrize("loss", [1.0, _sparse()], ids=["float", "sparse"])
def test_mf_03_loss_must_be_a_dense_array(cls, mode, loss):
    with pytest.raises(TypeError, match=r"\bloss\b"):
        cls(mode, loss=loss, train_op=STATE)


@pytest.mark.parametrize("cls", ALL_SPECS)
@pytest.mark.parametrize("mode", [ModeKeys.TRAIN, ModeKeys.EVAL])
def test_mf_04_loss_is_required(cls, mode):
    with pytest.raises(ValueError, match=rf"loss is required in {mode}"):
        cls(mode, train_op=STATE)


@pytest.mark.parametrize("cls", ALL_SPECS)
@pytest.mark.parametrize("mode", [ModeKeys.TRAIN, ModeKeys.EVAL])
def test_mf_05_loss_of_shape_two_is_not_a_scalar(cls, mode):
    with pytest.raises(ValueError, match=r"loss must be a scalar.*\(2,\)"):
        cls(mode, loss=jnp.ones(2), train_op=STATE)


@pytest.mark.parametrize("cls", ALL_SPECS)
@pytest.mark.parametrize("mode", [ModeKeys.TRAIN, ModeKeys.EVAL])
def test_mf_06_loss_of_shape_one_counts_as_a_scalar(cls, mode):
    spec = cls(mode, loss=np.array([2.5], np.float32), train_op=STATE)
    assert spec.loss.shape == () and float(spec.loss) == 2.5


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_07_train_op_is_required_in_train(cls):
    with pytest.raises(ValueError, match="train_op .*required in TRAIN"):
        cls(ModeKeys.TRAIN, loss=LOSS)


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_08_train_op_string(cls):
    with pytest.raises(TypeError, match="train_op"):
        cls(ModeKeys.TRAIN, loss=LOSS, train_op="minimize")


@pytest.mark.parametrize("field", HOOK_FIELDS)
def test_mf_09_hook_lists_hold_only_hooks(field):
    with pytest.raises(TypeError, match=rf"{field}\[1\] is not a SessionRunHook"):
        EstimatorSpec(
            ModeKeys.TRAIN, loss=LOSS, train_op=STATE, **{field: [jaxspec.SessionRunHook(), object()]}
        )
    if field != "training_chief_hooks":  # TPUEstimatorSpec has no chief hooks
        with pytest.raises(TypeError, match=field):
            TPUEstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, **{field: ["not a hook"]})


def test_mf_10_scaffold_of_another_class():
    class Unrelated:
        pass

    with pytest.raises(TypeError, match="scaffold"):
        EstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE, scaffold=Unrelated())


def test_mf_11_default_scaffold():
    spec = EstimatorSpec(ModeKeys.TRAIN, loss=LOSS, train_op=STATE)
    assert isinstance(spec.scaffold, jaxspec.Scaffold) and spec.scaffold.init_fn is None


@pytest.mark.parametrize("cls", ALL_SPECS)
@pytest.mark.parametrize("mode", [ModeKeys.EVAL, ModeKeys.PREDICT])
def test_mf_12_predictions_may_be_one_array(cls, mode):
    preds = np.arange(4.0)
    spec = cls(mode, loss=LOSS, predictions=preds)
    assert spec.predictions is preds


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_13_predictions_required_in_predict(cls):
    with pytest.raises(ValueError, match="predictions is required in PREDICT"):
        cls(ModeKeys.PREDICT, loss=LOSS)


@pytest.mark.parametrize("cls", ALL_SPECS)
@pytest.mark.parametrize("mode", [ModeKeys.EVAL, ModeKeys.PREDICT])
def test_mf_14_prediction_value_a_python_float(cls, mode):
    with pytest.raises(TypeError, match=r"predictions\['number'\]"):
        cls(mode, loss=LOSS, predictions={"ok": jnp.ones(2), "number": 1.0})


@pytest.mark.parametrize("cls", ALL_SPECS)
@pytest.mark.parametrize("mode", [ModeKeys.EVAL, ModeKeys.PREDICT])
def test_mf_15_prediction_value_a_sparse_array(cls, mode):
    with pytest.raises(TypeError, match=r"predictions\['sparse'\]"):
        cls(mode, loss=LOSS, predictions={"sparse": _sparse()})


def test_mf_16_eval_metric_ops_types():
    with pytest.raises(TypeError, match="eval_metric_ops must be a dict"):
        EstimatorSpec(ModeKeys.EVAL, loss=LOSS, eval_metric_ops=jnp.ones(2))
    with pytest.raises(TypeError, match=r"eval_metric_ops\['auc'\].*\(value, update\)"):
        EstimatorSpec(ModeKeys.EVAL, loss=LOSS, eval_metric_ops={"auc": jnp.ones(())})


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_19_replace_revalidates(cls):
    spec = cls(ModeKeys.EVAL, loss=LOSS)
    with pytest.raises(ValueError, match=r"loss must be a scalar.*\(2,\)"):
        spec._replace(loss=jnp.ones(2))


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_20_replace_predictions(cls):
    spec = cls(ModeKeys.EVAL, loss=LOSS, predictions={"a": jnp.ones(2), "b": jnp.ones(2)})
    new = spec._replace(predictions={"m": jnp.zeros(2)})
    assert list(new.predictions) == ["m"] and type(new) is cls and float(new.loss) == 1.5


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_21_replace_mode(cls):
    spec = cls(ModeKeys.EVAL, loss=LOSS)
    assert spec._replace(mode=ModeKeys.EVAL).mode == ModeKeys.EVAL
    with pytest.raises(ValueError, match="mode is fixed"):
        spec._replace(mode=ModeKeys.TRAIN)


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_22_export_outputs_types(cls):
    with pytest.raises(TypeError, match="export_outputs must be a dict"):
        cls(ModeKeys.PREDICT, predictions=PREDS, export_outputs=PredictOutput(PREDS))
    with pytest.raises(TypeError, match=r"export_outputs\['head'\].*ExportOutput"):
        cls(ModeKeys.PREDICT, predictions=PREDS, export_outputs={"head": {"y": PREDS["y"]}})


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_23_single_head_is_aliased_as_default(cls):
    head = RegressionOutput(jnp.ones(4))
    given = {"head-1": head}
    spec = cls(ModeKeys.PREDICT, predictions=PREDS, export_outputs=given)
    assert set(spec.export_outputs) == {"serving_default", "head-1"}
    assert spec.export_outputs["serving_default"] is head and spec.export_outputs["head-1"] is head
    assert given == {"head-1": head}  # the caller's dict is left alone


def _three_heads():
    return {
        "regress": RegressionOutput(jnp.ones(4)),
        "classify": ClassificationOutput(scores=jnp.ones((4, 3))),
        "predict": PredictOutput(PREDS),
    }


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_24_three_heads_with_a_default(cls):
    heads = _three_heads()
    heads["serving_default"] = heads.pop("predict")
    spec = cls(ModeKeys.PREDICT, predictions=PREDS, export_outputs=heads)
    assert spec.export_outputs == heads


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_25_three_heads_without_a_default(cls):
    with pytest.raises(ValueError, match="none is keyed 'serving_default'"):
        cls(ModeKeys.PREDICT, predictions=PREDS, export_outputs=_three_heads())


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_26_single_array_prediction_default_head(cls):
    preds = jnp.arange(4.0)
    spec = cls(ModeKeys.PREDICT, predictions=preds)
    default = spec.export_outputs["serving_default"]
    assert isinstance(default, PredictOutput)
    assert default.outputs == PredictOutput(preds).outputs == {"output": preds}


@pytest.mark.parametrize("cls", ALL_SPECS)
def test_mf_27_dict_prediction_default_head(cls):
    preds = {"loss": jnp.ones(4), "score": jnp.zeros(4)}
    spec = cls(ModeKeys.PREDICT, predictions=preds)
    assert list(spec.export_outputs) == ["serving_default"]
    assert spec.export_outputs["serving_default"].outputs == preds
