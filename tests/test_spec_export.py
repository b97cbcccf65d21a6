"""Export outputs (jaxspec.export): the checks and exception types of
tf.estimator.export's ClassificationOutput, RegressionOutput and PredictOutput."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from jaxspec.export import ClassificationOutput, ExportOutput, PredictOutput, RegressionOutput


def test_classification_output_needs_scores_or_classes():
    with pytest.raises(ValueError, match="at least one of scores and classes"):
        ClassificationOutput()
    scores = jnp.ones((2, 3))
    assert ClassificationOutput(scores=scores).tensors() == {"scores": scores}
    vocab = ClassificationOutput(scores=scores, classes=["a", "b", "c"])
    assert list(vocab.class_vocabulary) == ["a", "b", "c"] and vocab.tensors() == {"scores": scores}
    ids = jnp.array([0, 2])
    assert ClassificationOutput(classes=ids).tensors()["classes"] is ids


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"scores": jnp.ones((2, 3), jnp.int32)}, "scores"),
        ({"scores": [[0.5, 0.5]]}, "scores"),
        ({"classes": jnp.ones((2,), jnp.float32)}, "classes"),
        ({"classes": "a"}, "classes"),
    ],
)
def test_classification_output_types(kwargs, field):
    with pytest.raises(ValueError, match=f"ClassificationOutput: {field}"):
        ClassificationOutput(**kwargs)


def test_regression_output():
    value = jnp.ones((4,), jnp.bfloat16)
    assert RegressionOutput(value).tensors() == {"outputs": value}
    for bad in (jnp.ones(4, jnp.int32), [1.0, 2.0], None):
        with pytest.raises(ValueError, match="RegressionOutput: value"):
            RegressionOutput(bad)


def test_predict_output_single_array_and_keys():
    value = np.ones((3, 2), np.float32)
    assert PredictOutput(value).outputs == {"output": value}
    assert PredictOutput({("head", "probs"): value}).outputs == {"head/probs": value}
    with pytest.raises(ValueError, match="keys must be strings, got 3"):
        PredictOutput({3: value})
    with pytest.raises(ValueError, match="output 'y' must be an array"):
        PredictOutput({"y": [1.0]})
    assert all(isinstance(o, ExportOutput) for o in (PredictOutput(value), RegressionOutput(value)))
