"""TF 2.15's v1 and v2 estimator classes on tf_bridge (issue 37, items 2 and 6), against
``tests/data/tf215_v1_forms.json`` (``tools/tf215_v1_forms_reference.py``, run with TF
2.15): the constructors' defaults of each v1/v2 pair, ``export_savedmodel`` on the v1
classes only, what evaluate() reports under each form's loss reduction, the v1
``loss_reduction`` values, and the MonitoredTrainingSession arguments of a train call on
the collective-strategy path."""

from __future__ import annotations

import inspect
import json
import os
from typing import Any
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

import tf_bridge
import tf_bridge.estimator.v1
from tools import tf215_v1_forms_reference as ref

with open(os.path.join(os.path.dirname(__file__), "data", "tf215_v1_forms.json")) as _f:
    DATA = json.load(_f)
FORMS = {"v1": tf_bridge.estimator.v1, "v2": tf_bridge.estimator}
COLUMNS = [tf.feature_column.numeric_column("x")]


def _defaults(cls: type) -> dict[str, Any]:
    return dict(map(tuple, ref.signature(cls)))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(DATA["pairs"]))
def test_each_v1_v2_pair_has_tf215s_defaults(name: str) -> None:
    if not hasattr(tf_bridge.estimator, name):
        pytest.skip(f"tf_bridge has no {name} yet")
    for form, ns in FORMS.items():
        want = DATA["pairs"][name][form]
        ours, theirs = _defaults(getattr(ns, name)), dict(map(tuple, want["signature"]))
        for arg in sorted(set(ours) & set(theirs) - {"config", "optimizer", "warm_start_from"}):
            assert ours[arg] == theirs[arg], f"{form} {name}({arg}=): {ours[arg]!r}, TF 2.15 {theirs[arg]!r}"
        assert hasattr(getattr(ns, name), "export_savedmodel") == want["export_savedmodel"]


def test_export_savedmodel_only_on_v1_instances(tmp_path: Any) -> None:
    for form, ns in FORMS.items():
        estimators = {
            "Estimator": ns.Estimator(ref.step_model_fn, str(tmp_path / form)),
            "LinearRegressor": ns.LinearRegressor(COLUMNS, model_dir=str(tmp_path / f"l{form}")),
        }
        for name, est in estimators.items():
            assert (
                hasattr(est, "export_savedmodel") == DATA["pairs"][name][form]["instance_export_savedmodel"]
            )


def _evaluate(cls: Any, y: np.ndarray, tmp_path: Any, **kwargs: Any) -> dict[str, float]:
    est = cls(COLUMNS, model_dir=str(tmp_path), **kwargs)
    result = est.evaluate(ref.input_fn(y), steps=1)
    return {k: float(result[k]) for k in ("loss", "average_loss")}


@pytest.mark.parametrize("name", ["LinearRegressor", "LinearClassifier"])
def test_evaluate_reports_each_forms_loss_reduction(name: str, tmp_path: Any) -> None:
    y = ref.Y_REGRESSION if name == "LinearRegressor" else ref.Y_CLASSES
    for form, ns in FORMS.items():
        got = _evaluate(getattr(ns, name), y, tmp_path / form)
        assert got == pytest.approx(DATA["evaluate"][f"{name}[{form}]"], rel=1e-6)


def test_baseline_forms_reduce_as_tf215s(tmp_path: Any) -> None:
    """The Baseline pair with a zero bias, by hand: v1 reports the summed loss (TF 2.15's
    v1 default SUM), v2 the mean; both report the mean as average_loss."""
    y = ref.Y_REGRESSION
    squares = float(np.sum(np.square(y.astype(np.float64))))
    for form, ns in FORMS.items():
        est = ns.BaselineRegressor(model_dir=str(tmp_path / form))
        result = est.evaluate(ref.input_fn(y), steps=1)
        want = squares if form == "v1" else squares / len(y)
        assert float(result["loss"]) == pytest.approx(want, rel=1e-6), form
        assert float(result["average_loss"]) == pytest.approx(squares / len(y), rel=1e-6), form
        assert hasattr(est, "export_savedmodel") == (form == "v1"), form


def test_v1_loss_reduction_takes_tf_compat_v1_values(tmp_path: Any) -> None:
    """As TF 2.15's v1 LinearRegressor, except MEAN, which tf_bridge refuses (ValueError)."""
    for value, want in DATA["v1_loss_reduction"].items():
        cls = tf_bridge.estimator.v1.LinearRegressor
        if want["error"] is not None or value == "weighted_mean":
            with pytest.raises(ValueError, match="loss_reduction"):
                cls(COLUMNS, loss_reduction=value)
        else:
            got = _evaluate(cls, ref.Y_REGRESSION, tmp_path / value, loss_reduction=value)
            assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)
    # given by position too (TF 2.15's v2 order, which tf_bridge's v1 forms keep)
    sig = inspect.signature(tf_bridge.estimator.v1.LinearRegressor)
    assert sig.parameters["loss_reduction"].default == tf.compat.v1.losses.Reduction.SUM


def test_collective_strategy_train_passes_tf215s_session_arguments(tmp_path: Any) -> None:
    """estimator_test's collective case: the session saves checkpoints itself, with the
    RunConfig's save_checkpoints_steps under MonitoredTrainingSession's keyword."""
    from tensorflow.python.training import training

    strategy = type("MultiWorkerMirroredStrategy", (), {})()  # tf.estimator tests the class name
    tf_config = json.dumps({"cluster": ref.MTS_CLUSTER, "task": {"type": "worker", "index": 0}})
    with mock.patch.dict(os.environ, {"TF_CONFIG": tf_config}):
        config = tf_bridge.RunConfig(model_dir=str(tmp_path), train_distribute=strategy, **ref.MTS_CONFIG)
    est = tf_bridge.Estimator(ref.step_model_fn, config=config)
    with mock.patch.object(training, "MonitoredTrainingSession") as session:
        est.train(ref.input_fn(ref.Y_REGRESSION), steps=1)
    got, want = ref.plain_kwargs(session.call_args[1]), DATA["collective_session_args"]
    for key in (
        "save_checkpoint_secs",
        "save_checkpoint_steps",
        "save_summaries_steps",
        "log_step_count_steps",
    ):
        assert got[key] == want[key], key
    saving = {"CheckpointSaverHook", "SummarySaverHook", "StepCounterHook"}
    assert not saving & set(got["hooks"] + got["chief_only_hooks"])
    assert set(want["hooks"]) - {"DistributedIteratorInitializerHook"} <= set(got["hooks"])
