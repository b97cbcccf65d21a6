"""A host_call's tensors hold the values of their own step: read before the step updates
any variable.

TPUEstimator and NPUEstimator hand a host_call the tensors of the step that produced them:
``[global_step, loss]`` is the global step the step started from and that step's loss. In a
TensorFlow graph a read of a variable that no edge orders against the train op's update may
run before or after it (on a loaded machine both happen within one run), so
``order_before_update`` adds those edges: every op of the train op that writes a variable
(or a resource) waits for the host_call's tensors.
"""

from __future__ import annotations

from typing import TypeAlias

import tensorflow as tf

from jaxspec.spec.fn_types import PyTree

# A value tf.convert_to_tensor takes (tensors, numpy arrays, Python numbers).
TensorLike: TypeAlias = tf.types.experimental.TensorLike

# Ops that only read a resource: they need not wait (the forward pass stays unordered).
_READS = frozenset(
    {
        "ReadVariableOp",
        "ResourceGather",
        "ResourceGatherNd",
        "VarIsInitializedOp",
        "VariableShape",
        "IteratorGetNext",
        "IteratorGetNextSync",
        "IteratorGetNextAsOptional",
        "LookupTableFindV2",
        "LookupTableSizeV2",
    }
)


def _as_tensor(value: TensorLike | tf.Variable) -> tf.Tensor:
    """``value`` as a tensor; a variable becomes a read of it, taken here (not later)."""
    if isinstance(value, tf.Variable):
        with tf.control_dependencies(None):
            return tf.identity(value)
    return tf.convert_to_tensor(value)


def _closure(ops: list[tf.Operation]) -> set[tf.Operation]:
    """Every op ``ops`` depend on (through inputs and control inputs), themselves included."""
    seen: set[tf.Operation] = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def _writes_state(op: tf.Operation) -> bool:
    """Whether ``op`` may write a variable or another resource: it takes a resource (or a
    TF1 ref) input and is not a plain read. An op inside a TF1 while loop is left out (an
    edge from outside its frame is not allowed; TF >= 2.16 builds v2 loops)."""
    if op.type in _READS:
        return False
    context = op._control_flow_context  # noqa: SLF001 - TF has no public accessor
    if context is not None and context.IsWhileContext():
        return False
    return any(t.dtype == tf.resource or t.dtype._is_ref_dtype for t in op.inputs)  # noqa: SLF001


def order_before_update(tensors: PyTree, train_op: tf.Operation | tf.Tensor) -> PyTree:
    """``tensors`` (a structure of tensors or variables, as a host_call's), each read before
    any variable write of ``train_op``.

    Variables in ``tensors`` are replaced by reads of them. Every op ``train_op`` depends on
    that writes state gets a control input from each tensor that depends on none of those
    ops; a tensor that does (one computed after the update, e.g. under
    ``tf.control_dependencies([train_op])``) keeps its place, as the user ordered it.

    Args:
      tensors: a ``tf.nest`` structure (list, tuple, dict) of tensors, variables or values
        ``tf.convert_to_tensor`` takes.
      train_op: the step's train op (an Operation or a Tensor).

    Returns:
      The same structure, of tensors.

    Note: the edges are added to ops already in the graph through TensorFlow's
    ``Operation._add_control_input`` (there is no public way to do so).
    """
    out = tf.nest.map_structure(_as_tensor, tensors)
    anchor = train_op.op if isinstance(train_op, tf.Tensor) else train_op
    writes = [op for op in _closure([anchor]) if _writes_state(op)]
    for host_op in dict.fromkeys(t.op for t in tf.nest.flatten(out)):
        if _closure([host_op]).isdisjoint(writes):
            for op in writes:
                if host_op not in op.control_inputs:
                    op._add_control_input(host_op)  # noqa: SLF001
    return out
