"""jaxspec's own exception classes, each standing for a tf.estimator / TF one."""

from __future__ import annotations


class NanLossDuringTrainingError(RuntimeError):
    """Raised when a training step's loss is NaN (``tf.compat.v1.train.NanLossDuringTrainingError``).

    The state of the loop that produced it is dropped, so the last checkpoint in
    model_dir is the last good one.
    """

    def __str__(self) -> str:
        return "NaN loss during training."
