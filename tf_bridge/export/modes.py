"""One ``tf.compat.v1`` graph per mode: receiver, state variables, the converted JAX
function and the signatures tf.estimator writes for that mode.

* PREDICT (tag ``serve``): one signature per export head (``_signatures``).
* TRAIN (tag ``train``): signature ``train`` (``tensorflow/supervised/training``) with
  ``loss`` and ``predictions/*``; the new state the JAX model_fn returns is assigned to
  the state variables by a ``train_op`` (with ``global_step += 1``) stored in the
  ``saved_model_train_op`` collection, so running it in TF is one real training step.
* EVAL (tag ``eval``): signature ``eval`` (``tensorflow/supervised/eval``) with ``loss``,
  ``predictions/*`` and per metric ``metrics/<name>/value`` (the value of the state
  accumulated so far) and ``metrics/<name>/update_op`` (merges this batch into the
  state, held in local variables reset by the main op, and returns the new value), as
  ``tf.compat.v1.metrics`` pairs behave.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
import numpy as np
import tensorflow as tf

from jaxspec.export.export_output import ExportOutput
from jaxspec.export.slim import ExportFn
from jaxspec.metrics.base import MetricState
from jaxspec.spec.fn_types import ArrayLike, PyTree
from tf_bridge.export import graph as _graph
from tf_bridge.export import signatures as _signatures
from tf_bridge.export.receivers import InputReceiver
from tf_bridge.export.signatures import SignatureDef

PREDICT, TRAIN, EVAL = "infer", "train", "eval"
TAGS = {PREDICT: ["serve"], TRAIN: ["train"], EVAL: ["eval"]}
TRAIN_OP_COLLECTION = "saved_model_train_op"
_SUPERVISED = {TRAIN: ("train", _signatures.TRAIN_METHOD_NAME), EVAL: ("eval", _signatures.EVAL_METHOD_NAME)}


@dataclasses.dataclass(frozen=True)
class ModeExport:
    """What one mode's meta graph is built from.

    Attributes:
      receiver_fn: no-argument function returning a receiver (called in the graph).
      fn: pure JAX ``fn(state, global_step, features, labels) -> dict`` as
        ``StepEngine.export_fn`` returns it: PREDICT ``{'heads': {head: {key: array}}}``;
        TRAIN ``{'loss', 'predictions', 'new_state'}``; EVAL ``{'loss', 'predictions',
        'metrics': {name: metric state}}``. ``global_step`` is int32 ``[]``.
      heads: PREDICT only: signature key → ExportOutput (kind, class vocabulary).
    """

    receiver_fn: Callable[[], object]
    fn: ExportFn
    heads: Mapping[str, ExportOutput] | None = None


@dataclasses.dataclass
class ModeGraph:
    """A built graph, ready for the SavedModel builder and the load check."""

    mode: str
    graph: tf.Graph
    step_var: tf.Variable | None
    state_vars: list[tf.Variable]
    signatures: dict[str, SignatureDef]
    excluded: dict[str, str]
    main_op: tf.Operation
    feeds: dict[str, np.ndarray]
    fetches: list[str]
    shapes: dict[str, str | None]
    serving: dict[str, Any] | None = None  # PREDICT: what jaxspec's JAX artifact needs

    @property
    def tags(self) -> list[str]:
        return TAGS[self.mode]


def _receiver(receiver_fn: Callable[[], object], mode: str) -> InputReceiver:
    receiver = receiver_fn()
    if not all(hasattr(receiver, a) for a in ("features", "receiver_tensors")):
        kinds = (
            "ServingInputReceiver or TensorServingInputReceiver"
            if mode == PREDICT
            else ("SupervisedInputReceiver (or ServingInputReceiver)")
        )
        raise ValueError(
            f"the {mode} input receiver fn has to return a {kinds}; got {type(receiver).__name__}."
        )
    return cast(InputReceiver, receiver)


def _example(tree: PyTree) -> PyTree:
    """Zeros at batch 1 (every unknown dimension 1) shaped like the receiver tensors
    (None stays None: a receiver without labels)."""
    if tree is None:
        return None
    return tf.nest.map_structure(
        lambda t: np.zeros([1 if d is None else d for d in t.shape.as_list()], t.dtype.as_numpy_dtype), tree
    )


def _feeds(features: PyTree, labels: PyTree) -> dict[str, np.ndarray]:
    tensors = tf.nest.flatten(features) + ([] if labels is None else tf.nest.flatten(labels))
    return {t.name: value for t, value in zip(tensors, tf.nest.flatten(_example(tensors)), strict=True)}


def _metric_variables(abstract: dict[str, PyTree]) -> tuple[list[tf.Variable], jax.tree_util.PyTreeDef]:
    """Local variables holding each metric's state, initialised to ``state.empty()``
    (TF's metric variables are local too: reset by the main op, never checkpointed)."""
    leaves, treedef = jax.tree_util.tree_flatten(abstract)
    zeros = jax.tree_util.tree_unflatten(treedef, [np.zeros(s.shape, s.dtype) for s in leaves])
    empty = {name: state.empty() for name, state in zeros.items()}
    with_paths, _ = jax.tree_util.tree_flatten_with_path(empty)
    variables = []
    for path, value in with_paths:
        value = np.asarray(value, dtype=jax.dtypes.canonicalize_dtype(np.asarray(value).dtype))
        variables.append(
            tf.compat.v1.Variable(
                tf.constant(value),
                name="eval_metrics/" + _graph.leaf_name(path),
                trainable=False,
                use_resource=True,
                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES, tf.compat.v1.GraphKeys.METRIC_VARIABLES],
            )
        )
    return variables, treedef


def _serving(
    receiver: InputReceiver,
    heads: Mapping[str, ExportOutput],
    signatures: Mapping[str, SignatureDef],
    specs: PyTree,
) -> dict[str, Any]:
    """For ``jaxspec.export.serving``: per serving signature its head and inputs. A
    signature whose receiver tensors are the features (a raw receiver) takes its own
    input names; one whose features TF computes (parsing) takes the features by key."""
    flat = jax.tree_util.tree_leaves(receiver.features)
    index = {t.name: i for i, t in enumerate(flat)}
    by_key = {
        jax.tree_util.keystr(p, simple=True, separator="/") or "feature": i
        for i, (p, _) in enumerate(jax.tree_util.tree_flatten_with_path(receiver.features)[0])
    }
    groups = [(None, receiver.receiver_tensors)]
    groups += list((getattr(receiver, "receiver_tensors_alternatives", None) or {}).items())
    described = {}
    for group_name, tensors in groups:
        named = {k: index.get(getattr(t, "name", None)) for k, t in tensors.items()}
        ids = [i for i in named.values() if i is not None]
        own = len(ids) == len(named) and sorted(ids) == list(range(len(flat)))
        inputs, inputs_are = (named, "receiver_tensors") if own else (by_key, "features")
        for head in heads:
            key = head if group_name is None else f"{group_name}:{head}"
            if key in signatures:
                described[key] = (head, inputs, inputs_are)
    return {"features": _example(receiver.features), "shapes": specs, "signatures": described}


def _predict(
    export: ModeExport,
    treedef: jax.tree_util.PyTreeDef,
    state_in: list[tf.Tensor],
    step: tf.Tensor,
    receiver: InputReceiver,
    specs: PyTree,
    platforms: Sequence[str],
) -> tuple[dict[str, SignatureDef], dict[str, str], list[tf.Tensor]]:
    heads = _signatures.check_heads(export.heads)

    def body(flat_state: list[jax.Array], step: jax.Array, features: PyTree) -> PyTree:
        return export.fn(jax.tree_util.tree_unflatten(treedef, flat_state), step, features, None)["heads"]

    outputs = _graph.convert(body, [None, None, specs], platforms)(state_in, step, receiver.features)
    batch_of = tf.nest.flatten(receiver.features)[0]
    tensors = _signatures.head_tensors(heads, outputs, batch_of)
    signatures, excluded = _signatures.signature_defs(
        receiver.receiver_tensors, getattr(receiver, "receiver_tensors_alternatives", None), heads, tensors
    )
    return signatures, excluded, [t for head in tensors.values() for t in head.values()]


def _supervised(
    mode: str,
    export: ModeExport,
    treedef: jax.tree_util.PyTreeDef,
    state_vars: list[tf.Variable],
    state_in: list[tf.Tensor],
    step_var: tf.Variable | None,
    step: tf.Tensor,
    receiver: InputReceiver,
    specs: tuple[PyTree, PyTree],
    platforms: Sequence[str],
) -> tuple[dict[str, SignatureDef], dict[str, str], list[tf.Tensor | tf.Operation]]:
    features, labels = receiver.features, getattr(receiver, "labels", None)
    values: dict[str, Any] = {}
    updates: dict[str, Any] = {}
    extra: list[Any] = []

    def model(flat_state: list[jax.Array], step: ArrayLike, f: PyTree, lab: PyTree) -> dict[str, PyTree]:
        return export.fn(jax.tree_util.tree_unflatten(treedef, flat_state), step, f, lab)

    if mode == TRAIN:

        def train_body(
            flat_state: list[jax.Array], step: jax.Array, f: PyTree, lab: PyTree
        ) -> tuple[jax.Array, PyTree, list[jax.Array]]:
            out = model(flat_state, step, f, lab)
            return out["loss"], out["predictions"], jax.tree_util.tree_leaves(out["new_state"])

        converted = _graph.convert(train_body, [None, None, *specs], platforms)
        loss, predictions, new_leaves = converted(state_in, step, features, labels)
        assigns = [var.assign(new, read_value=False) for var, new in zip(state_vars, new_leaves, strict=True)]
        if step_var is not None:
            with tf.control_dependencies(new_leaves + [loss]):
                assigns.append(step_var.assign_add(1, read_value=False))
        train_op = tf.group(*assigns, name="train_op")
        tf.compat.v1.add_to_collection(TRAIN_OP_COLLECTION, train_op)
        extra.append(train_op)
    else:
        abstract = jax.eval_shape(
            lambda s, f, lab: model(s, np.int32(0), f, lab)["metrics"],
            [jax.ShapeDtypeStruct(v.shape, v.dtype.as_numpy_dtype) for v in state_vars],
            *(_example(t) for t in (features, labels)),
        )
        metric_vars, metric_def = _metric_variables(dict(abstract))
        acc_in = [v.value() for v in metric_vars]

        def merged_values(acc: dict[str, MetricState]) -> dict[str, PyTree]:
            return {name: state.compute() for name, state in acc.items()}

        def eval_body(
            flat_state: list[jax.Array], step: jax.Array, flat_acc: list[jax.Array], f: PyTree, lab: PyTree
        ) -> tuple[jax.Array, PyTree, list[jax.Array], dict[str, PyTree]]:
            out = model(flat_state, step, f, lab)
            acc = jax.tree_util.tree_unflatten(metric_def, flat_acc)
            merged = {name: acc[name].merge(out["metrics"][name]) for name in acc}
            new_leaves = [
                new.astype(old.dtype)
                for new, old in zip(jax.tree_util.tree_leaves(merged), flat_acc, strict=True)
            ]
            merged = jax.tree_util.tree_unflatten(metric_def, new_leaves)
            return out["loss"], out["predictions"], new_leaves, merged_values(merged)

        converted = _graph.convert(eval_body, [None, None, None, *specs], platforms)
        loss, predictions, new_acc, after = converted(state_in, step, acc_in, features, labels)
        if metric_vars:
            assigns = [v.assign(n, read_value=False) for v, n in zip(metric_vars, new_acc, strict=True)]
            with tf.control_dependencies(assigns):
                updates = {
                    name: tf.identity(t, name=f"update_op_{i}") for i, (name, t) in enumerate(after.items())
                }

            def value_body(flat_acc: list[jax.Array]) -> dict[str, PyTree]:
                return merged_values(jax.tree_util.tree_unflatten(metric_def, flat_acc))

            values = _graph.convert(value_body, [None], platforms)([v.value() for v in metric_vars])
    outputs = _signatures.supervised_outputs(loss, predictions, values, updates)
    key, method = _SUPERVISED[mode]
    signatures, excluded = _signatures.supervised_signature_defs(
        key, method, receiver.receiver_tensors, outputs
    )
    return signatures, excluded, list(outputs.values()) + extra


def build(
    mode: str,
    export: ModeExport,
    leaves: Sequence[tuple[str, np.ndarray]],
    treedef: jax.tree_util.PyTreeDef,
    global_step: int | None,
    platforms: Sequence[str],
) -> ModeGraph:
    """Build ``mode``'s graph (PREDICT, TRAIN or EVAL; tf.estimator's tags).

    Raises:
      ValueError: a bad receiver or heads, or outputs that do not fit them.
      TypeError: a sparse, ragged or string tensor reaches the JAX function.
    """
    graph = tf.Graph()
    with graph.as_default():
        step_var, state_vars = _graph.make_variables(leaves, global_step)
        receiver = _receiver(export.receiver_fn, mode)
        labels = getattr(receiver, "labels", None) if mode != PREDICT else None
        counter = itertools.count()
        feature_specs = _graph.shape_specs(receiver.features, "features", counter)
        label_specs = None if labels is None else _graph.shape_specs(labels, "labels", counter)
        state_in = [var.value() for var in state_vars]
        step = _graph.step_input(step_var)
        serving = None
        if mode == PREDICT:
            signatures, excluded, fetched = _predict(
                export, treedef, state_in, step, receiver, feature_specs, platforms
            )
            serving = _serving(receiver, export.heads or {}, signatures, feature_specs)
        else:
            signatures, excluded, fetched = _supervised(
                mode,
                export,
                treedef,
                state_vars,
                state_in,
                step_var,
                step,
                receiver,
                (feature_specs, label_specs),
                platforms,
            )
        main_op = tf.group(
            tf.compat.v1.local_variables_initializer(),
            tf.compat.v1.tables_initializer(),
            name="jaxspec_init_op",
        )
    shapes = _graph.spec_record(feature_specs, "features")
    if label_specs is not None:
        shapes.update(
            {
                f"labels/{k}" if k != "labels" else k: v
                for k, v in _graph.spec_record(label_specs, "labels").items()
            }
        )
    fetches = [t.name for t in fetched if isinstance(t, tf.Tensor)] + [
        op.name for op in fetched if isinstance(op, tf.Operation)
    ]
    return ModeGraph(
        mode,
        graph,
        step_var,
        state_vars,
        signatures,
        excluded,
        main_op,
        _feeds(receiver.features, labels),
        fetches,
        shapes,
        serving,
    )
