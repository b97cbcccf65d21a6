"""Mixed precision: the ``Policy`` NPUEstimator gives model_fn for a reduced-precision
``precision_mode``, and the check that a traced step computes in that dtype.

The Ascend graph engine casts a TF graph to float16 by itself (``allow_mix_precision``);
XLA never changes a program's dtypes, so jaxspec cannot cast a model: model_fn casts its
inputs and parameters with the policy (or builds its flax modules with ``dtype=``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from jaxspec._checks import is_floating
from jaxspec.spec.fn_types import PyTree

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr, JaxprEqn

#: The primitives counted as the model's heavy arithmetic.
MATMUL_PRIMITIVES = ("dot_general", "conv_general_dilated")


@dataclasses.dataclass(frozen=True)
class Policy:
    """Which dtypes a model keeps and computes in.

    Attributes:
      compute_dtype: the dtype of activations and matmuls (``jnp.bfloat16`` or
        ``jnp.float16`` for reduced precision).
      param_dtype: the dtype parameters are stored (and updated) in; float32.

    ``cast_to_compute`` and ``cast_to_param`` cast the floating leaves of a pytree and
    leave the others (ints, bools, keys) as they are.
    """

    compute_dtype: Any
    param_dtype: Any = jnp.float32

    def __post_init__(self) -> None:
        object.__setattr__(self, "compute_dtype", jnp.dtype(self.compute_dtype))
        object.__setattr__(self, "param_dtype", jnp.dtype(self.param_dtype))

    def cast_to_compute(self, tree: PyTree) -> PyTree:
        """``tree``'s floating leaves in ``compute_dtype``."""
        return _cast(tree, self.compute_dtype)

    def cast_to_param(self, tree: PyTree) -> PyTree:
        """``tree``'s floating leaves in ``param_dtype``."""
        return _cast(tree, self.param_dtype)


def _cast(tree: PyTree, dtype: DTypeLike) -> PyTree:
    return jax.tree.map(lambda x: x.astype(dtype) if hasattr(x, "dtype") and is_floating(x) else x, tree)


def _eqns(jaxpr: Jaxpr) -> Iterator[JaxprEqn]:
    """Every equation of ``jaxpr`` and of the jaxprs nested in it (scan, cond, pjit,
    remat, custom derivatives, shard_map)."""
    from jax.extend.core import subjaxprs

    stack = [jaxpr]
    while stack:
        current = stack.pop()
        yield from current.eqns
        stack.extend(subjaxprs(current))


def matmul_dtypes(closed_jaxpr: ClosedJaxpr | Jaxpr) -> set[np.dtype]:
    """The operand dtypes of the matmuls and convolutions (``MATMUL_PRIMITIVES``) in a
    (closed) jaxpr, nested ones included."""
    jaxpr = cast("Jaxpr", getattr(closed_jaxpr, "jaxpr", closed_jaxpr))
    found: set[np.dtype] = set()
    for eqn in _eqns(jaxpr):
        if eqn.primitive.name in MATMUL_PRIMITIVES:
            found.update(np.dtype(v.aval.dtype) for v in eqn.invars if hasattr(v.aval, "dtype"))
    return found


def computes_in(closed_jaxpr: ClosedJaxpr | Jaxpr, dtype: DTypeLike) -> bool:
    """Whether some matmul or convolution of the jaxpr takes operands of ``dtype``."""
    return np.dtype(jnp.dtype(dtype)) in matmul_dtypes(closed_jaxpr)


__all__ = ["MATMUL_PRIMITIVES", "Policy", "computes_in", "matmul_dtypes"]
