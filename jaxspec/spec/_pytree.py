"""Register the spec namedtuples as JAX pytrees whose leaves are their arrays only.

JAX would otherwise flatten a namedtuple field by field, hooks, scaffold and mode string
included, and rebuild it through the validating constructor. Here the array-bearing
fields (predictions, loss, train_op, metric states, the tensors of ``(fn, tensors)``
pairs) are the children; everything else stays in the treedef, compared by identity, and
unflattening never re-validates (``jax.tree.map`` may put anything in the leaves).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


class _Static:
    """The non-array fields of one spec, kept in a treedef and compared by identity."""

    __slots__ = ("items",)

    def __init__(self, items: tuple[tuple[str, Any], ...]) -> None:
        self.items = items

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Static) or len(other.items) != len(self.items):
            return False
        return all(
            ka == kb and (va is vb or (isinstance(va, str) and va == vb))
            for (ka, va), (kb, vb) in zip(self.items, other.items, strict=True)
        )

    def __hash__(self) -> int:
        return hash(tuple(k for k, _ in self.items))


def register_spec_pytree(
    cls: type,
    array_fields: tuple[str, ...],
    pair_fields: tuple[str, ...] = (),
    build: Callable[[type, dict[str, Any]], Any] | None = None,
) -> None:
    """Register ``cls`` (a spec namedtuple class) as a pytree.

    Args:
      cls: the class to register (each subclass needs its own registration).
      array_fields: fields whose whole value is a child (a pytree of arrays or None).
      pair_fields: ``(fn, tensors)`` fields: ``tensors`` is a child, ``fn`` static.
      build: ``(cls, fields) -> instance`` without validation; defaults to
        ``tuple.__new__`` over ``cls._fields``.
    """

    def flatten(spec: Any) -> tuple[list[Any], _Static]:
        fields = spec._asdict()
        extra: dict[str, Any] = getattr(spec, "_extra_fields", dict)()
        fields.update(extra)
        children = [fields[f] for f in array_fields]
        static: list[tuple[str, Any]] = []
        for f in pair_fields:
            pair = fields[f]
            children.append(None if pair is None else pair[1])
            static.append((f, None if pair is None else pair[0]))
        static += [(k, v) for k, v in fields.items() if k not in array_fields and k not in pair_fields]
        return children, _Static(tuple(static))

    def unflatten(aux: _Static, children: Any) -> Any:
        children = list(children)
        fields: dict[str, Any] = dict(zip(array_fields, children[: len(array_fields)], strict=True))
        statics = dict(aux.items)
        for f, tensors in zip(pair_fields, children[len(array_fields) :], strict=True):
            fn = statics.pop(f)
            fields[f] = None if fn is None else (fn, tensors)
        fields.update(statics)
        if build is not None:
            return build(cls, fields)
        names: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]  # a namedtuple class
        return tuple.__new__(cls, [fields[f] for f in names])

    jax.tree_util.register_pytree_node(cls, flatten, unflatten)
