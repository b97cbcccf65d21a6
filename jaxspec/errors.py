"""jaxspec's own exception classes, each standing for a tf.estimator / TF one."""

from __future__ import annotations


class NanLossDuringTrainingError(RuntimeError):
    """Raised when a training step's loss is NaN (``tf.compat.v1.train.NanLossDuringTrainingError``).

    The state of the loop that produced it is dropped, so the last checkpoint in
    model_dir is the last good one. ``global_step`` is the global step at which the step
    with a NaN loss ran (model_fn's ``global_step`` argument), None where unknown.
    """

    def __init__(self, global_step: int | None = None) -> None:
        super().__init__(global_step)
        self.global_step = global_step

    def __str__(self) -> str:
        at = "" if self.global_step is None else f" at global step {self.global_step}"
        return f"NaN loss during training{at}."


class DataLossError(RuntimeError):
    """No readable checkpoint: every checkpoint of model_dir (or the one named by
    ``checkpoint_path``) has a truncated, corrupted or missing file.

    Stands for ``tf.errors.DataLossError``, which TensorFlow raises when a checkpoint's
    data is corrupt; here it is a RuntimeError (jaxspec has no TF OpError hierarchy).
    """
