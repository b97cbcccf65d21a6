"""TF 2.15's v1 canned estimators on tf_bridge (issue 48 item 1), against
``tests/data/tf215_v1_canned.json`` and the model_dir in ``tests/data/tf215_v1_canned/``
(``tools/tf215_v1_canned_reference.py``, run with TF 2.15): a census-shaped
``DNNLinearCombinedClassifier`` resumes TF 2.15's step-4 model_dir (optimizer slots
included) through ``train_and_evaluate`` with a ``FinalExporter`` and gives TF 2.15's
variables, metrics, summary tags and served probabilities at step 8; every v1 class writes
TF 2.15's checkpoint keys and summary tags; with parameter servers the variables split as
TF 2.15 split them; the v1 AUCs are ``tf.compat.v1.metrics.auc``'s."""

from __future__ import annotations

import json
import os
import shutil
import types
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tf_bridge
import tf_bridge.estimator.v1 as v1
from tf_bridge.runtime.canned.v1 import heads as v1_heads
from tf_bridge.runtime.canned.v1.optimizers import get_optimizer_instance
from tools import tf215_v1_canned_reference as ref

DATA_DIR = os.path.join(os.path.dirname(__file__), "data")
with open(os.path.join(DATA_DIR, "tf215_v1_canned.json")) as _f:
    DATA = json.load(_f)
CENSUS = DATA["census"]
RTOL = 2e-5  # float32 steps of the same math


def _census(model_dir: str) -> Any:
    linear, dnn = ref.columns(tf)
    return v1.DNNLinearCombinedClassifier(
        model_dir=model_dir,
        linear_feature_columns=linear,
        dnn_feature_columns=dnn,
        dnn_hidden_units=[8, 4],
        config=tf_bridge.RunConfig(tf_random_seed=48, save_summary_steps=1),
    )


def _receiver() -> Any:
    features, _ = ref.census_rows()
    return tf_bridge.estimator.export.build_raw_serving_input_receiver_fn(
        {k: tf.constant(v[:1]) for k, v in features.items()}
    )


def _assert_metrics(got: dict[str, Any], want: dict[str, float]) -> None:
    assert set(got) == set(want)
    for key, value in want.items():
        assert float(got[key]) == pytest.approx(value, rel=RTOL, abs=1e-6), key


def test_census_resumes_tf215_model_dir_through_train_and_evaluate(tmp_path: Any) -> None:
    model_dir = str(tmp_path / "census")
    shutil.copytree(os.path.join(DATA_DIR, "tf215_v1_canned", "model_dir"), model_dir)
    est = _census(model_dir)
    exporter = tf_bridge.estimator.FinalExporter("census", _receiver())
    result, exports = tf_bridge.estimator.train_and_evaluate(
        est,
        tf_bridge.estimator.TrainSpec(ref.input_fn(tf), max_steps=8),
        tf_bridge.estimator.EvalSpec(ref.input_fn(tf, 1), steps=None, name="census", exporters=[exporter]),
    )
    _assert_metrics(result, CENSUS["eval8"])
    assert ref.tags(tf, os.path.join(model_dir, "eval_census")) == CENSUS["eval_tags"]
    assert ref.tags(tf, model_dir) == CENSUS["train_tags"]  # the copied model_dir had no event files

    reader = tf.train.load_checkpoint(model_dir)
    assert reader.get_variable_to_shape_map() == {k: v[0] for k, v in CENSUS["checkpoint"].items()}
    want = np.load(os.path.join(DATA_DIR, "tf215_v1_canned", "values8.npz"))
    for key in want.files:
        np.testing.assert_allclose(reader.get_tensor(key.replace("|", "/")), want[key], rtol=RTOL, atol=1e-6)

    served = tf.saved_model.load(exports[0].decode()).signatures["predict"]
    features, _ = ref.census_rows()
    out = served(**{k: tf.constant(v) for k, v in features.items()})
    np.testing.assert_allclose(
        out["probabilities"].numpy()[:, 1], CENSUS["probabilities8"], rtol=RTOL, atol=1e-6
    )


def _classes() -> dict[str, Any]:
    linear, dnn = ref.columns(tf)
    return {
        "DNNClassifier": lambda d: v1.DNNClassifier([8, 4], dnn, model_dir=d),
        "DNNRegressor": lambda d: v1.DNNRegressor([8, 4], dnn, model_dir=d),
        "LinearClassifier": lambda d: v1.LinearClassifier(linear, model_dir=d),
        "LinearRegressor": lambda d: v1.LinearRegressor(linear, model_dir=d),
        "DNNLinearCombinedRegressor": lambda d: v1.DNNLinearCombinedRegressor(
            d, linear, dnn_feature_columns=dnn, dnn_hidden_units=[8, 4]
        ),
        "DNNClassifier_3_batch_norm_adam": lambda d: v1.DNNClassifier(
            [8, 4], dnn, model_dir=d, n_classes=3, optimizer="Adam", batch_norm=True, dropout=0.1
        ),
        "DNNLinearCombinedClassifier_adam_sgd": lambda d: v1.DNNLinearCombinedClassifier(
            d, linear, "SGD", dnn, "Adam", dnn_hidden_units=[8, 4]
        ),
        "BaselineClassifier": lambda d: v1.BaselineClassifier(model_dir=d),
        "BaselineRegressor": lambda d: v1.BaselineRegressor(model_dir=d),
    }


# Linear and baseline models start from zeros: their metrics after two steps are TF 2.15's
# (one classifier and one regressor are evaluated, to keep the test short).
ZERO_INIT = {"LinearClassifier", "BaselineRegressor"}


@pytest.mark.parametrize("name", sorted(DATA["classes"]))
def test_each_v1_class_writes_tf215s_keys_and_tags(name: str, tmp_path: Any) -> None:
    want = DATA["classes"][name]
    est = _classes()[name](str(tmp_path))
    est.train(ref.input_fn(tf), steps=2)
    shapes = tf.train.load_checkpoint(str(tmp_path)).get_variable_to_shape_map()
    assert shapes == {k: v[0] for k, v in want["checkpoint"].items()}
    assert ref.tags(tf, str(tmp_path)) == want["train_tags"]
    if name in ZERO_INIT:
        _assert_metrics(est.evaluate(ref.input_fn(tf, 1)), want["eval"])


@pytest.mark.parametrize("cluster", ["ps", "no_ps"])
def test_partitioned_variables_and_keys_as_tf215(cluster: str, tmp_path: Any) -> None:
    """With 2 parameter servers a 307 KiB hidden kernel splits in two (the ``dnn`` scope's
    256 KiB slices) and the 64 MiB input layer does not; without, every variable is one
    ``part_0``; the Saver's keys are the whole variables'."""
    want = DATA["partitioned"][cluster]
    config = types.SimpleNamespace(
        num_ps_replicas=DATA["partitioned"]["num_ps_replicas"] if cluster == "ps" else 0
    )
    linear, dnn = ref.columns(tf)
    features, labels = ref.census_rows()
    features["wide"] = np.ones((ref.ROWS, 256), np.float32)
    dnn = dnn + [tf.feature_column.numeric_column("wide", shape=(256,))]
    makers = {
        "DNNClassifier": lambda: v1.DNNClassifier([300, 4], dnn),
        "DNNLinearCombinedClassifier": lambda: v1.DNNLinearCombinedClassifier(
            linear_feature_columns=linear, dnn_feature_columns=dnn, dnn_hidden_units=[300, 4]
        ),
    }
    for name, make in makers.items():
        with tf.Graph().as_default():
            tf.compat.v1.train.create_global_step()
            feats = {k: tf.constant(v) for k, v in features.items()}
            make()._model_fn(feats, tf.constant(labels), tf_bridge.estimator.ModeKeys.TRAIN, config)
            graph = {v.name: v.shape.as_list() for v in tf.compat.v1.global_variables()}
            assert graph == want[name]["graph"], name
            saver = tf.compat.v1.train.Saver()
            with tf.compat.v1.Session() as session:
                session.run([tf.compat.v1.global_variables_initializer(), tf.compat.v1.tables_initializer()])
                path = saver.save(session, str(tmp_path / name / "model.ckpt"))
        keys = tf.train.load_checkpoint(path).get_variable_to_shape_map()
        assert keys == {k: v[0] for k, v in want[name]["checkpoint"].items()}, name


def test_v1_auc_is_tf_compat_v1_metrics_auc() -> None:
    """The v1 head's AUCs, checked against ``tf.compat.v1.metrics.auc`` itself."""
    rng = np.random.RandomState(0)
    labels = (rng.uniform(size=(200, 1)) < 0.3).astype(np.float32)
    scores = np.clip(labels * 0.2 + rng.uniform(size=(200, 1)) * 0.8, 0, 1).astype(np.float32)
    weights = rng.uniform(0.5, 2.0, size=(200, 1)).astype(np.float32)
    for curve in ("ROC", "PR"):
        with tf.Graph().as_default():
            ours = v1_heads.v1_auc(curve, "auc")
            update = ours.update_state(labels, scores, sample_weight=weights)
            value, op = tf.compat.v1.metrics.auc(labels, scores, weights=weights, curve=curve)
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.variables_initializer(ours.variables))
                session.run(tf.compat.v1.local_variables_initializer())
                session.run([update, op])
                got, expected = session.run([ours.result(), value])
        assert got == pytest.approx(expected, rel=1e-6), curve


def test_optimizer_instances_are_tf1s() -> None:
    adagrad = get_optimizer_instance("Adagrad", learning_rate=0.05)
    assert isinstance(adagrad, tf.compat.v1.train.AdagradOptimizer) and adagrad._learning_rate == 0.05
    with pytest.raises(ValueError, match="learning_rate"):
        get_optimizer_instance("Ftrl")
    with pytest.raises(ValueError, match="Nope"):
        get_optimizer_instance("Nope", learning_rate=0.1)
    import tf_keras

    with pytest.raises(ValueError, match="tf.compat.v1.train.Optimizer"):
        get_optimizer_instance(tf_keras.optimizers.legacy.Adagrad())
    sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    assert get_optimizer_instance(lambda: sgd) is sgd


def test_plain_module_names_are_the_v1_classes() -> None:
    from tf_bridge.runtime import canned
    from tf_bridge.runtime.canned import v1 as canned_v1

    assert tf_bridge.estimator.v1.DNNClassifier is canned_v1.DNNClassifier
    assert not issubclass(canned_v1.DNNClassifier, canned.DNNClassifier)
    assert issubclass(canned_v1.LinearRegressor, tf_bridge.estimator.Estimator)
    assert hasattr(canned_v1.LinearRegressor([]), "export_savedmodel")
