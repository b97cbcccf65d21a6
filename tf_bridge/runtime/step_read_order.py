"""The global step's read, ordered before the step's own increment.

TensorFlow's step hooks (StepCounterHook's "global step has not been increased" check,
``global_step/sec``, SecondOrStepTimer) fetch the graph's global-step read tensor
(``training_util._get_or_create_global_step_read``) in the same ``Session.run`` as the
train op, and take it as the step *before* that run. Nothing in the graph says so: the
optimizer's ``assign_add`` of the global step does not wait for that read. In one process
TensorFlow's executor happens to read first; with the variable on a parameter server (a
TF_CONFIG cluster) the read can come after the increment in one run and before it in the
next, and the chief then sees the same value twice and warns, while the step does grow.

``order_step_writes_after_read(graph)`` adds the read as a control input of every op of the
graph that writes the global step outside a loop body (its initializer aside), as
``training_util._increment_global_step`` does for the increments it builds itself.
"""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.training import training_util

# ops that write a variable given as their first input (resource and ref variables)
WRITER_TYPES = frozenset(
    {"AssignAddVariableOp", "AssignSubVariableOp", "AssignVariableOp", "AssignAdd", "AssignSub", "Assign"}
)


def order_step_writes_after_read(graph: tf.Graph) -> int:
    """Make each write of ``graph``'s global step wait for its read tensor; returns how many
    writes were ordered (0 without a global step or its read tensor)."""
    step = tf.compat.v1.train.get_global_step(graph)
    read = training_util._get_global_step_read(graph) if step is not None else None
    if read is None:
        return 0
    skip = {step.initializer.name} if hasattr(step, "initializer") else set()
    ordered = 0
    for op in graph.get_operations():
        if op.type not in WRITER_TYPES or op.name in skip or not op.inputs:
            continue
        if op.inputs[0].op is not step.op or op._control_flow_context is not None:
            continue
        if read.op not in op.control_inputs:
            op._add_control_input(read.op)
            ordered += 1
    return ordered
