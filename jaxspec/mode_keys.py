"""Mode keys, with the string values tf.estimator uses."""

from __future__ import annotations


class ModeKeys:
    """The three modes a model_fn is called in (``tf.estimator.ModeKeys``).

    The values are the strings TensorFlow uses, so code that compares ``mode`` with
    literal strings keeps working: TRAIN is ``'train'``, EVAL is ``'eval'`` and
    PREDICT is ``'infer'``.
    """

    TRAIN = "train"
    EVAL = "eval"
    PREDICT = "infer"

    @classmethod
    def all(cls) -> tuple[str, str, str]:
        """Return the three mode strings (TRAIN, EVAL, PREDICT)."""
        return (cls.TRAIN, cls.EVAL, cls.PREDICT)
