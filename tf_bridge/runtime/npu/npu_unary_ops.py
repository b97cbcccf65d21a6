"""``npu_bridge.estimator.npu_unary_ops`` on tf_bridge's CPU path.

The adapter's module holds its op library under the name ``npu_unary_ops``; scripts write
``from npu_bridge.estimator.npu_unary_ops import npu_unary_ops`` and call
``npu_unary_ops.gelu(x)``. Here that name is this module itself, so both
``npu_unary_ops.gelu`` spellings work.

- ``gelu(features)``: the adapter's GELU, the tanh approximation
  ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``: ``tf.nn.gelu(x, approximate=True)``;
  ``gelu_grad(gradients, features, activations)``: its backprop, ``gradients * gelu'(x)``.
- ``fast_gelu(features)``: ``x * sigmoid(1.702 x)`` (the adapter's FastGelu);
  ``fast_gelu_grad(gradients, features)``: its backprop.
- The library's other ops (NPU kernels, queues, caches, quantisation) import and raise
  ``NotImplementedError`` when called.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import NoReturn, TypeAlias

import tensorflow as tf

from tf_bridge.runtime.npu.npu_only import npu_only

# What the ops accept: a float tf.Tensor, or anything tf.convert_to_tensor takes.
TensorLike: TypeAlias = tf.types.experimental.TensorLike

__all__ = ["fast_gelu", "fast_gelu_grad", "gelu", "gelu_grad", "npu_unary_ops"]

_FAST_GELU_SCALE = 1.702
_TANH_CUBIC = 0.044715

# The op library's other ops, by their Python names: NPU kernels without a CPU meaning here.
NPU_ONLY_OPS = (
    "basic_lstm_cell",
    "dynamic_gru_v2",
    "dynamic_rnn",
    "drop_out_gen_mask",
    "drop_out_do_mask",
    "lars",
    "lars_v2",
    "lamb_apply_optimizer_assign",
    "lamb_apply_weight_assign",
    "npu_alloc_float_status",
    "npu_clear_float_status",
    "npu_get_float_status",
    "ascend_quant",
    "ascend_dequant",
    "ascend_anti_quant",
    "ascend_weight_quant",
    "centralization",
    "deformable_offsets",
    "dense_image_warp",
    "random_choice_with_mask",
    "lru_cache",
    "cache_add",
    "embedding_rank_id",
    "decode_and_resize_jpeg",
    "decode_and_crop_and_resize_jpeg",
    "log_time_stamp",
)


def gelu(features: TensorLike, name: str | None = None) -> tf.Tensor:
    """GELU, tanh approximation (the adapter's ``Gelu`` op); same shape and float dtype as
    ``features``."""
    return tf.nn.gelu(features, approximate=True, name=name or "Gelu")


def gelu_grad(
    gradients: TensorLike, features: TensorLike, activations: TensorLike, name: str | None = None
) -> tf.Tensor:
    """The backprop of ``gelu``: ``gradients * d gelu(x) / dx`` at ``x = features``.

    ``activations`` (``gelu(features)``) is accepted for the adapter's signature; the
    derivative is computed from ``features``. All three have one shape and float dtype.
    """
    with tf.name_scope(name or "GeluGrad"):
        x = tf.convert_to_tensor(features)
        inner = math.sqrt(2.0 / math.pi) * (x + _TANH_CUBIC * x**3)
        t = tf.tanh(inner)
        d_inner = math.sqrt(2.0 / math.pi) * (1.0 + 3.0 * _TANH_CUBIC * x**2)
        return gradients * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t**2) * d_inner)


def fast_gelu(features: TensorLike, name: str | None = None) -> tf.Tensor:
    """``x * sigmoid(1.702 x)`` (the adapter's ``FastGelu``); same shape and dtype."""
    with tf.name_scope(name or "FastGelu"):
        x = tf.convert_to_tensor(features)
        return x * tf.sigmoid(_FAST_GELU_SCALE * x)


def fast_gelu_grad(gradients: TensorLike, features: TensorLike, name: str | None = None) -> tf.Tensor:
    """The backprop of ``fast_gelu``: ``gradients * (s + 1.702 x s (1 - s))``, ``s = sigmoid(1.702 x)``."""
    with tf.name_scope(name or "FastGeluGrad"):
        x = tf.convert_to_tensor(features)
        s = tf.sigmoid(_FAST_GELU_SCALE * x)
        return gradients * (s + _FAST_GELU_SCALE * x * s * (1.0 - s))


npu_unary_ops = sys.modules[__name__]  # the adapter's name for its op library


def __getattr__(name: str) -> Callable[..., NoReturn]:
    if name in NPU_ONLY_OPS:
        return npu_only(f"npu_unary_ops.{name}", "a kernel of the NPU's op library")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
