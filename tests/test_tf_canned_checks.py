"""Bad input to tf_bridge's canned estimators raises what TF 2.15's raised.

``tests/data/tf215_canned.json``'s ``bad_inputs`` holds the exception type TF 2.15's canned
estimators raised for each mistake of ``tools/tf215_canned_reference.BAD_INPUTS``;
tf_bridge must raise the same type, with a message naming the argument. The optimizer
defaults are checked against TF 2.15's checkpoints in ``test_tf_canned_reference.py``
(the learning rates are checkpoint variables); here, their rules.
"""

from __future__ import annotations

import builtins
import json
import math
import os
from typing import Any

import pytest
import tensorflow as tf

tf_keras = pytest.importorskip("tf_keras")

import tf_bridge.estimator as tf_estimator  # noqa: E402
from tf_bridge.runtime.canned import get_optimizer_instance_v2  # noqa: E402
from tools import tf215_canned_reference as ref  # noqa: E402

with open(ref.JSON_PATH) as _f:
    REFERENCE = json.load(_f)

# The argument each mistake's message must name.
NAMED = {
    "combined_no_columns": "feature_columns",
    "combined_no_hidden_units": "dnn_hidden_units",
    "features_not_dict": "features",
    "linear_column_not_a_column": "feature_columns",
    "loss_reduction_none": "loss_reduction",
    "loss_reduction_unknown": "loss_reduction",
    "n_classes_1": "n_classes",
    "optimizer_new_keras": "optimizer",
    "optimizer_not_an_optimizer": "optimizer",
    "optimizer_unknown_name": "optimizer",
    "sparse_combiner_unknown": "sparse_combiner",
}


@pytest.mark.parametrize("name", sorted(ref.BAD_INPUTS))
def test_bad_input_raises_as_tf215(name: str, tmp_path: Any) -> None:
    expected = getattr(builtins, REFERENCE["bad_inputs"][name])  # TF 2.15's exception type
    with pytest.raises(expected, match=NAMED[name]) as raised:
        ref.BAD_INPUTS[name](tf_estimator, tf_keras, tf.feature_column, tf, os.path.join(tmp_path, "m"))
    assert type(raised.value) is expected


def test_every_bad_input_is_checked() -> None:
    assert sorted(NAMED) == sorted(ref.BAD_INPUTS) == sorted(REFERENCE["bad_inputs"])


@pytest.mark.parametrize(
    ("name", "cls", "rate"),
    [
        ("Adagrad", "Adagrad", 0.001),
        ("Adam", "Adam", 0.001),
        ("Ftrl", "Ftrl", 0.001),
        ("RMSProp", "RMSprop", 0.001),
        ("SGD", "SGD", 0.01),
    ],
)
def test_optimizer_names_give_keras_defaults(name: str, cls: str, rate: float) -> None:
    opt = get_optimizer_instance_v2(name)
    assert type(opt) is getattr(tf_keras.optimizers.legacy, cls)
    assert math.isclose(opt.get_config()["learning_rate"], rate)
    assert math.isclose(get_optimizer_instance_v2(name, learning_rate=0.3).get_config()["learning_rate"], 0.3)


def test_optimizer_instances_and_callables_pass_through() -> None:
    opt = tf_keras.optimizers.legacy.Adam(0.02)
    assert get_optimizer_instance_v2(opt) is opt
    made = get_optimizer_instance_v2(lambda: tf_keras.optimizers.legacy.SGD(0.5))
    assert isinstance(made, tf_keras.optimizers.legacy.SGD)
    with pytest.raises(ValueError, match="optimizer"):
        get_optimizer_instance_v2(tf.keras.optimizers.SGD())  # Keras 3: not a legacy optimizer
