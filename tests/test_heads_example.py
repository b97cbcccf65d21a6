"""examples/head_dnn_classifier.py: a DNNClassifier-equivalent model_fn from a head."""

from __future__ import annotations

import numpy as np
import pytest

from examples import head_dnn_classifier


def test_dnn_classifier_example(tmp_path):
    pytest.importorskip("sklearn")
    result = head_dnn_classifier.main(str(tmp_path), steps=150)
    evaluation, predictions, labels = result["evaluation"], result["predictions"], result["labels"]
    assert sorted(evaluation) == ["accuracy", "average_loss", "global_step", "loss"]
    assert evaluation["global_step"] == 150
    class_ids = np.array([int(p["class_ids"][0]) for p in predictions])
    assert len(class_ids) == len(labels) == 360
    # The evaluation's accuracy is that of the predictions, and the model learned.
    assert evaluation["accuracy"] == pytest.approx(float(np.mean(class_ids == labels)), abs=1e-6)
    assert evaluation["accuracy"] > 0.8
    probabilities = np.stack([p["probabilities"] for p in predictions])
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    assert sorted(predictions[0]) == [
        "all_class_ids",
        "all_classes",
        "class_ids",
        "classes",
        "logits",
        "probabilities",
    ]
