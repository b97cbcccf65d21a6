"""``tf.math.zero_fraction`` without its ``tf.cond``, for the canned estimators' summaries.

TensorFlow's ``zero_fraction`` counts the non-zero values in int32 or int64 depending on
the tensor's size, choosing with a ``tf.cond`` whose two branches count in different
dtypes. In a training graph (the canned DNN's ``fraction_of_zero_values`` summaries) that
cond makes TensorFlow's C++ type inference log a ~30-line "Type inference failed ... while
inferring type of node '.../zero_fraction/cond/output/_N'" warning on every train, though
the graph runs correctly. Counting in int64 always needs no cond and gives the same
float32 value (the count is exact in both dtypes; the division is TensorFlow's).
"""

from __future__ import annotations

from typing import TypeAlias

import tensorflow as tf

# A value tf.convert_to_tensor takes (tensors, numpy arrays, Python numbers).
TensorLike: TypeAlias = tf.types.experimental.TensorLike


def zero_fraction(value: TensorLike, name: str | None = None) -> tf.Tensor:
    """The fraction of zeros in ``value`` (any shape and numeric dtype), a float32 scalar:
    ``tf.math.zero_fraction``'s value, computed as ``(size - nonzero) / size`` in float32
    as TensorFlow does, with no cond in the graph (see the module docstring)."""
    with tf.name_scope(name or "zero_fraction"):
        value = tf.convert_to_tensor(value, name="value")
        size = tf.size(value, out_type=tf.int64)
        nonzero = tf.math.count_nonzero(value, dtype=tf.int64)
        fraction = tf.cast(size - nonzero, tf.float32) / tf.cast(size, tf.float32)
        return tf.identity(fraction, name="fraction")
