"""tf_bridge's runner against TensorFlow 2.15's real tf.estimator.

The numbers in EXPECTED were written by ``tools/tf215_reference.py``, which runs the
same model_fns (``tools/tf215_reference_models.py``) with TF 2.15's
``tf.estimator.Estimator`` and ``TPUEstimator(use_tpu=False)``; ``tests/data/tf215_linear``
is the model_dir TF 2.15 left after 6 steps. tf_bridge runs them on the pinned
TensorFlow: per-step losses, evaluate results, predictions, checkpoints, exported
signatures and host_call calls must match to 1e-6 (they are bit-identical today).
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import tf_bridge
from tools import tf215_reference_models as models

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tf215_linear")
ATOL = 1e-6

# BEGIN TF215 EXPECTED
# Written by tools/tf215_reference.py with TensorFlow 2.15.1.
EXPECTED = {
    "linear": {
        "evaluate": {
            "global_step": 10,
            "loss": 0.4617820680141449,
            "mae": 0.5461646914482117,
            "rmse": 0.6551637649536133,
        },
        "evaluate_two_steps": {
            "global_step": 10,
            "loss": 0.3804258406162262,
            "mae": 0.5116328001022339,
            "rmse": 0.6167867183685303,
        },
        "export": {
            "served_pred": [
                -0.07026466727256775,
                1.9890114068984985,
                -0.8165155649185181,
                -0.12955155968666077,
                1.9297244548797607,
                -0.8758026361465454,
                -0.18883848190307617,
            ],
            "signatures": {
                "all": {
                    "inputs": {"x": ["x:0", "float32", [-1, 3]]},
                    "method_name": "tensorflow/serving/predict",
                    "outputs": {"pred": ["add:0", "float32", [-1, 1]]},
                }
            },
        },
        "prediction_batches": [3, 3, 1],
        "predictions": [
            -0.07026466727256775,
            1.9890114068984985,
            -0.8165155649185181,
            -0.12955155968666077,
            1.9297244548797607,
            -0.8758026361465454,
            -0.18883848190307617,
        ],
        "train_losses_20": [
            2.204925060272217,
            2.1056501865386963,
            1.6434195041656494,
            1.781531810760498,
            1.335486650466919,
            1.2635198831558228,
            0.8552407622337341,
            0.815415620803833,
            0.5175604820251465,
            0.6465545892715454,
            0.40653231739997864,
            0.36495399475097656,
            0.1920739710330963,
            0.17350253462791443,
            0.09367150813341141,
            0.12298095226287842,
            0.05410606041550636,
            0.04494902864098549,
            0.01908688247203827,
            0.01178940013051033,
        ],
        "train_losses_first": [
            2.204925060272217,
            2.1056501865386963,
            1.6434195041656494,
            1.781531810760498,
            1.335486650466919,
            1.2635198831558228,
        ],
        "train_losses_resumed": [
            0.8552407622337341,
            0.815415620803833,
            0.5175604820251465,
            0.6465545892715454,
        ],
        "variable_names": [
            "b",
            "b/Adam",
            "b/Adam_1",
            "beta1_power",
            "beta2_power",
            "global_step",
            "w",
            "w/Adam",
            "w/Adam_1",
        ],
        "variables": {
            "b": [0.24471533298492432],
            "beta1_power": [0.3138104975223541],
            "w": [1.0438289642333984, -1.167445182800293, 0.42005082964897156],
            "w/Adam": [-0.5181187987327576, 0.749565839767456, 0.0006632544100284576],
        },
    },
    "tensorflow": "2.15.1",
    "tpu": {
        "evaluate": {"global_step": 3, "loss": 1.842477798461914, "mae": 1.1627519130706787},
        "host_call": [
            ["train", 2.204925060272217, 0.07000000774860382],
            ["train", 2.1056501865386963, -0.01499997079372406],
            ["train", 1.6434195041656494, 0.3741271495819092],
            ["eval", 1.6107314825057983, 0.16715668141841888],
            ["eval", 1.4006649255752563, 0.25897854566574097],
            ["eval", 2.5160369873046875, 0.6583700776100159],
        ],
        "input_fn_batch_size": [4, 4, 3],
        "model_fn_params": [["train", 4, False], ["eval", 4, False], ["infer", 3, False]],
        "predictions": [
            0.4011133015155792,
            0.9872032999992371,
            -0.39563316106796265,
            0.3295368254184723,
            0.9156267046928406,
            -0.46720969676971436,
            0.2579602599143982,
        ],
    },
}
# END TF215 EXPECTED


LINEAR = EXPECTED["linear"]
TPU = EXPECTED["tpu"]


def close(actual: Any, expected: Any) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, np.float64), np.asarray(expected, np.float64), rtol=0, atol=ATOL
    )


def linear_estimator(model_dir: str, losses: list[float]) -> tf_bridge.Estimator:
    config = tf_bridge.RunConfig(tf_random_seed=42)
    return tf_bridge.Estimator(
        models.make_linear_model_fn(tf_bridge, losses), model_dir, config=config, params={}
    )


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The reference script's linear run, by tf_bridge: train 6, train 4, evaluate,
    predict, export."""
    work = tmp_path_factory.mktemp("linear")
    losses: list[float] = []
    est = linear_estimator(str(work / "model"), losses)
    est.train(models.train_input_fn, steps=6)
    first = list(losses)
    losses.clear()
    est.train(models.train_input_fn, steps=4)
    export_dir = est.export_saved_model(str(work / "export"), models.serving_input_receiver_fn(tf_bridge))
    return {
        "est": est,
        "first": first,
        "resumed": list(losses),
        "evaluate": est.evaluate(models.eval_input_fn),
        "evaluate_two": est.evaluate(models.eval_input_fn, steps=2, name="two"),
        "predictions": list(est.predict(models.predict_input_fn)),
        "batches": list(est.predict(models.predict_input_fn, yield_single_examples=False)),
        "export_dir": export_dir.decode(),
    }


def test_per_step_losses_match_tf215(linear_run: dict[str, Any]) -> None:
    close(linear_run["first"], LINEAR["train_losses_first"])
    close(linear_run["resumed"], LINEAR["train_losses_resumed"])


def test_evaluate_matches_tf215(linear_run: dict[str, Any]) -> None:
    for got, want in (
        (linear_run["evaluate"], LINEAR["evaluate"]),
        (linear_run["evaluate_two"], LINEAR["evaluate_two_steps"]),
    ):
        assert sorted(got) == sorted(want)
        assert int(got["global_step"]) == want["global_step"]
        close(
            [got[k] for k in sorted(want) if k != "global_step"],
            [want[k] for k in sorted(want) if k != "global_step"],
        )


def test_predictions_match_tf215(linear_run: dict[str, Any]) -> None:
    close([p["pred"] for p in linear_run["predictions"]], LINEAR["predictions"])
    assert [len(b["pred"]) for b in linear_run["batches"]] == LINEAR["prediction_batches"]


def test_variables_and_checkpoints_match_tf215(linear_run: dict[str, Any]) -> None:
    est = linear_run["est"]
    assert sorted(est.get_variable_names()) == LINEAR["variable_names"]
    for name, want in LINEAR["variables"].items():
        close(np.ravel(est.get_variable_value(name)), want)
    assert os.path.basename(est.latest_checkpoint()) == "model.ckpt-10"
    ours = os.path.join(est.model_dir, "model.ckpt-6")
    theirs = os.path.join(FIXTURE, "model.ckpt-6")
    for name, _ in tf.train.list_variables(theirs):
        # Same names, shapes and values; the last bits of float32 training differ between
        # CPUs (vector instruction sets), so values are compared to float32 precision.
        np.testing.assert_allclose(
            tf.train.load_variable(ours, name), tf.train.load_variable(theirs, name), rtol=1e-5, atol=1e-7
        )
    state = tf.train.get_checkpoint_state(est.model_dir)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-0",
        "model.ckpt-6",
        "model.ckpt-10",
    ]


def test_export_signatures_and_serving_match_tf215(linear_run: dict[str, Any]) -> None:
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], linear_run["export_dir"])
        assert models.signature_summary(meta) == LINEAR["export"]["signatures"]
        sig = meta.signature_def["all"]
        served = session.run(sig.outputs["pred"].name, {sig.inputs["x"].name: models.predict_data()})
    close(np.ravel(served), LINEAR["export"]["served_pred"])


def test_resumes_a_model_dir_written_by_tf215(tmp_path: Any) -> None:
    model_dir = str(tmp_path / "from_tf215")
    shutil.copytree(FIXTURE, model_dir)
    losses: list[float] = []
    est = linear_estimator(model_dir, losses)
    assert int(est.get_variable_value("global_step")) == 6
    est.train(models.train_input_fn, steps=4)
    close(losses, LINEAR["train_losses_resumed"])
    got = est.evaluate(models.eval_input_fn)
    assert int(got["global_step"]) == 10
    close([got["loss"], got["mae"], got["rmse"]], [LINEAR["evaluate"][k] for k in ("loss", "mae", "rmse")])


def test_tpu_estimator_cpu_path_matches_tf215(tmp_path: Any) -> None:
    records: dict[str, list[Any]] = defaultdict(list)
    config = tf_bridge.RunConfig(
        model_dir=str(tmp_path), tf_random_seed=42, tpu_config=tf_bridge.TPUConfig(iterations_per_loop=2)
    )
    est = tf_bridge.TPUEstimator(
        models.make_tpu_model_fn(tf_bridge, records),
        config=config,
        use_tpu=False,
        train_batch_size=models.TRAIN_BATCH,
        eval_batch_size=models.EVAL_BATCH,
        predict_batch_size=models.PREDICT_BATCH,
    )
    est.train(models.recording_input_fn(models.train_input_fn, records), steps=3)
    got = est.evaluate(models.recording_input_fn(models.eval_input_fn, records))
    preds = [p["pred"] for p in est.predict(models.recording_input_fn(models.predict_input_fn, records))]
    assert int(got["global_step"]) == TPU["evaluate"]["global_step"]
    close([got["loss"], got["mae"]], [TPU["evaluate"]["loss"], TPU["evaluate"]["mae"]])
    close(preds, TPU["predictions"])
    # host_call: once per step, in step order, with that step's values (3 train, 3 eval batches)
    assert [r[0] for r in records["host_call"]] == [r[0] for r in TPU["host_call"]]
    close([r[1:] for r in records["host_call"]], [r[1:] for r in TPU["host_call"]])
    assert [list(r) for r in records["model_fn_params"]] == TPU["model_fn_params"]
    assert records["input_fn_batch_size"] == TPU["input_fn_batch_size"]
