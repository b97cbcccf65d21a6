"""Naming and describing pytree leaves: the one owner of TF-style leaf names
(``params/Dense_0/kernel``) and of a tree's shape signature."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxspec.spec.fn_types import PyTree


def key_path_name(path: Sequence[Any]) -> str:
    """A leaf's key path joined with ``/`` (dict keys, attribute names and sequence
    indices), the way TF names variables: ``params/Dense_0/kernel``, ``opt/0/mu/...``."""

    def entry(k: Any) -> str:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                return str(getattr(k, attr))
        return str(k)

    return "/".join(entry(k) for k in path)


def named_leaves(tree: PyTree, is_leaf: Any = None) -> list[tuple[str, Any]]:
    """``(name, leaf)`` pairs of a pytree, named by ``key_path_name``."""
    flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)[0]
    return [(key_path_name(path), leaf) for path, leaf in flat]


def shape_signature(tree: PyTree) -> tuple[Any, tuple[tuple[tuple[int, ...], np.dtype], ...]]:
    """A tree's structure and each leaf's shape and dtype (no values read: device
    arrays and ``jax.ShapeDtypeStruct`` leaves work too). Equal signatures can share one
    compiled executable, or be stacked into one batch. Cheap enough for every step: the
    dtypes are numpy dtype objects (hashable), not their names."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(
        (x.shape, x.dtype) if hasattr(x, "dtype") and hasattr(x, "shape") else _leaf_signature(x)
        for x in leaves
    )


def _leaf_signature(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    arr = np.asarray(x)
    return arr.shape, arr.dtype
