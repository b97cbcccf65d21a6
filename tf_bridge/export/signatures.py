"""Heads → TF tensors → SignatureDefs, the way tf.estimator builds them.

``head_tensors`` turns what the converted serving function returned into the tensors each
signature exposes (string class names, float32 scores/outputs); ``signature_defs`` makes
one SignatureDef per head (and per receiver alternative, named ``'<alt>:<head>'``),
leaving out, with a logged warning, the ones TF would leave out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TypeAlias

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2

from jaxspec.export.export_output import (
    ClassificationOutput,
    ExportOutput,
    PredictOutput,
    RegressionOutput,
)
from jaxspec.spec.fn_types import PyTree
from tf_bridge.export.receivers import GraphTensor

logger = logging.getLogger("tf_bridge")

# A meta graph's signature (TF's protocol buffer).
SignatureDef: TypeAlias = meta_graph_pb2.SignatureDef
DEFAULT_SIGNATURE_KEY = "serving_default"
_CLASSIFY_KEYS = frozenset({"scores", "classes"})


def check_heads(heads: object) -> dict[str, ExportOutput]:
    """ValueError unless ``heads`` is a dict of str to ClassificationOutput /
    RegressionOutput / PredictOutput (TF raises ValueError for a bad export_outputs)."""
    if not isinstance(heads, Mapping):
        raise ValueError(f"heads has to be a dict of name to ExportOutput; got {type(heads).__name__}.")
    for key, head in heads.items():
        if not isinstance(key, str):
            raise ValueError(f"heads: every key has to be a str; got {key!r}.")
        if not isinstance(head, ExportOutput):
            raise ValueError(
                f"heads[{key!r}] has to be a ClassificationOutput, RegressionOutput or "
                f"PredictOutput; got {type(head).__name__}."
            )
    return dict(heads)


def _as_float32(tensor: tf.Tensor, what: str) -> tf.Tensor:
    """float32 as TF Serving's classify/regress APIs require; other float widths are cast
    (TF would drop the signature instead), anything else is a ValueError."""
    if not tensor.dtype.is_floating:
        raise ValueError(f"{what} has to be a float array; serving_fn returned {tensor.dtype.name}.")
    return tensor if tensor.dtype == tf.float32 else tf.cast(tensor, tf.float32)


def _classification(
    key: str, head: ClassificationOutput, out: dict[str, tf.Tensor], batch_of: tf.Tensor
) -> dict[str, tf.Tensor]:
    unknown = set(out) - _CLASSIFY_KEYS
    if unknown:
        raise ValueError(
            f"serving_fn output for classification head {key!r} may hold only 'scores' and "
            f"'classes'; got also {sorted(unknown)}."
        )
    result: dict[str, tf.Tensor] = {}
    if "scores" in out:
        result["scores"] = _as_float32(out["scores"], f"head {key!r} scores")
    vocab = head.class_vocabulary
    if vocab is not None:
        if "classes" in out:
            raise ValueError(
                f"head {key!r} has a class vocabulary, so serving_fn must not return 'classes' for it."
            )
        vocab = np.asarray(vocab).astype(str)
        num_scores = result["scores"].shape[-1] if "scores" in result else None
        if num_scores is not None and num_scores != vocab.shape[0]:
            raise ValueError(
                f"head {key!r}: {vocab.shape[0]} class names but scores have {num_scores} columns."
            )
        ref = result.get("scores", batch_of)
        table = tf.constant(vocab.reshape(1, -1).astype(object), dtype=tf.string)
        result["classes"] = tf.tile(table, tf.stack([tf.shape(ref)[0], 1]))
    elif "classes" in out:
        classes = out["classes"]
        if not (classes.dtype.is_integer or classes.dtype == tf.string):
            raise ValueError(f"head {key!r} classes have to be integer class ids; got {classes.dtype.name}.")
        result["classes"] = classes if classes.dtype == tf.string else tf.strings.as_string(classes)
    elif head.classes is not None:
        raise ValueError(f"head {key!r} has integer classes but serving_fn returned no 'classes'.")
    if not result:
        raise ValueError(f"serving_fn returned neither 'scores' nor 'classes' for head {key!r}.")
    return result


def head_tensors(
    heads: Mapping[str, ExportOutput], outputs: PyTree, batch_of: tf.Tensor
) -> dict[str, dict[str, tf.Tensor]]:
    """The tensors each head's signature exposes, named ``<head>/<output key>``.

    Args:
      heads: checked heads (see ``check_heads``).
      outputs: the converted serving function's result: dict of head key to dict of
        output key to tf.Tensor.
      batch_of: a tensor whose axis 0 is the batch (for tiling a class vocabulary when a
        head has no scores).

    Returns:
      dict of head key to dict of output key to tensor: ClassificationOutput →
      ``scores`` float32 ``[batch, K]`` and/or ``classes`` string (the vocabulary tiled to
      ``[batch, K]``, or ``tf.strings.as_string`` of the ids); RegressionOutput →
      ``outputs`` float32; PredictOutput → serving_fn's dict as is.

    Raises:
      ValueError: the output's head keys differ from ``heads``', or a head's outputs do not
        fit its type (missing/unknown keys, wrong dtypes, vocabulary size ≠ scores width).
    """
    if not isinstance(outputs, Mapping) or set(outputs) != set(heads):
        got = sorted(outputs) if isinstance(outputs, Mapping) else type(outputs).__name__
        raise ValueError(
            f"serving_fn has to return a dict with exactly the heads' keys {sorted(heads)}; got {got}."
        )
    result: dict[str, dict[str, tf.Tensor]] = {}
    for key, head in heads.items():
        out = outputs[key]
        if not isinstance(out, Mapping) or not all(isinstance(k, str) for k in out):
            raise ValueError(f"serving_fn output for head {key!r} has to be a dict of str to arrays.")
        tensors = head.accept(_SignatureTensors(key, dict(out), batch_of))
        with tf.name_scope(_scope_name(key)):
            result[key] = {name: tf.identity(t, name=_scope_name(name)) for name, t in tensors.items()}
    return result


class _SignatureTensors:
    """Per kind of head: the tensors its signature exposes, from serving_fn's outputs."""

    def __init__(self, key: str, out: dict[str, tf.Tensor], batch_of: tf.Tensor) -> None:
        self.key, self.out, self.batch_of = key, out, batch_of

    def classification(self, head: ClassificationOutput) -> dict[str, tf.Tensor]:
        return _classification(self.key, head, self.out, self.batch_of)

    def regression(self, head: RegressionOutput) -> dict[str, tf.Tensor]:
        if set(self.out) != {"outputs"}:
            raise ValueError(
                f"serving_fn output for regression head {self.key!r} has to be {{'outputs': value}}; "
                f"got keys {sorted(self.out)}."
            )
        return {"outputs": _as_float32(self.out["outputs"], f"head {self.key!r} outputs")}

    def predict(self, head: PredictOutput) -> dict[str, tf.Tensor]:
        if not self.out:
            raise ValueError(f"serving_fn returned no outputs for predict head {self.key!r}.")
        return _named_classes(head, self.out)


def _named_classes(head: PredictOutput, out: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """A predict head's outputs with its class-id outputs as their class names (string
    tensors of the same shape), as TF 2.15's heads export ``classes``/``all_classes``; the
    head names them in ``class_names`` (``jaxspec.heads``' predict outputs), others have none."""
    tensors = dict(out)
    for name, vocab in getattr(head, "class_names", {}).items():
        ids = tensors.get(name)
        if ids is None or ids.dtype == tf.string:
            continue
        if not ids.dtype.is_integer:
            raise ValueError(f"predict output {name!r} has to hold integer class ids; got {ids.dtype.name}.")
        table = tf.constant(np.asarray(vocab).astype(object), dtype=tf.string)
        tensors[name] = tf.gather(table, ids)
    return tensors


def _scope_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "_" for c in name)
    return cleaned if cleaned and cleaned[0].isalnum() else f"h{cleaned}"


def _dtype_name(value: object) -> str:
    dtype = getattr(value, "dtype", None)
    return getattr(dtype, "name", type(value).__name__)


def _unfed_placeholders(inputs: Iterable[GraphTensor], outputs: Iterable[tf.Tensor]) -> list[str]:
    """Placeholders that the outputs need but that are not among the inputs (TF refuses
    such signatures: they cannot be served)."""
    fed = {t.name for t in tf.nest.flatten(list(inputs), expand_composites=True)}
    stack = [t.op for t in outputs if t.name not in fed]
    seen: set[str] = set()
    missing = []
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        if op.type in ("Placeholder", "PlaceholderV2"):
            missing.append(op.name)
        stack.extend(t.op for t in op.inputs if t.name not in fed)
        stack.extend(op.control_inputs)
    return sorted(missing)


def _one_examples_tensor(head: ExportOutput, receivers: dict[str, GraphTensor]) -> None:
    """ValueError unless the receiver is one string tensor (serialized tf.Examples), as
    TF Serving's Classify and Regress APIs take."""
    kind = head.kind
    if len(receivers) != 1:
        raise ValueError(
            f"a {kind} signature takes exactly one string receiver tensor (serialized "
            f"tf.Examples); the receiver has {len(receivers)}: {sorted(receivers)}."
        )
    (examples,) = receivers.values()
    if not isinstance(examples, tf.Tensor) or examples.dtype != tf.string:
        raise ValueError(
            f"a {kind} signature takes a string receiver tensor (serialized tf.Examples); "
            f"got {_dtype_name(examples)}."
        )


class _SignatureDef:
    """Per kind of head: its SignatureDef over the receiver tensors (TF's builders)."""

    def __init__(self, receivers: dict[str, GraphTensor], tensors: dict[str, tf.Tensor]) -> None:
        self.receivers, self.tensors = receivers, tensors

    def classification(self, head: ClassificationOutput) -> SignatureDef:
        (examples,) = self.receivers.values()
        return tf.compat.v1.saved_model.classification_signature_def(
            examples, self.tensors.get("classes"), self.tensors.get("scores")
        )

    def regression(self, head: RegressionOutput) -> SignatureDef:
        (examples,) = self.receivers.values()
        return tf.compat.v1.saved_model.regression_signature_def(examples, self.tensors["outputs"])

    def predict(self, head: PredictOutput) -> SignatureDef:
        return tf.compat.v1.saved_model.predict_signature_def(self.receivers, self.tensors)


def _one_signature(
    head: ExportOutput, receivers: dict[str, GraphTensor], tensors: dict[str, tf.Tensor]
) -> SignatureDef:
    """The SignatureDef for one head and one receiver group; ValueError when TF would
    leave it out."""
    if head.takes_examples:
        _one_examples_tensor(head, receivers)
    signature = head.accept(_SignatureDef(receivers, tensors))
    missing = _unfed_placeholders(receivers.values(), tensors.values())
    if missing:
        raise ValueError(f"its outputs need placeholders that are not its inputs: {missing}.")
    if not tf.compat.v1.saved_model.is_valid_signature(signature):
        raise ValueError("TF Serving would not accept it (is_valid_signature is False).")
    return signature


def signature_defs(
    receiver_tensors: dict[str, GraphTensor],
    alternatives: Mapping[str, dict[str, GraphTensor]] | None,
    heads: Mapping[str, ExportOutput],
    tensors: Mapping[str, dict[str, tf.Tensor]],
) -> tuple[dict[str, SignatureDef], dict[str, str]]:
    """SignatureDefs for every head and receiver group, as tf.estimator's
    ``build_all_signature_defs(serving_only=True)``.

    ClassificationOutput → ``classification_signature_def`` (``tensorflow/serving/classify``,
    input ``inputs``, outputs ``classes``/``scores``), RegressionOutput →
    ``regression_signature_def`` (``tensorflow/serving/regress``, ``inputs`` → ``outputs``);
    both need the receiver to be a single string tensor. PredictOutput →
    ``predict_signature_def(receiver_tensors, outputs)`` (``tensorflow/serving/predict``).

    Returns:
      (signature key → SignatureDef, signature key → why it was left out). Each left-out
      signature is logged as a warning on the ``tf_bridge`` logger (TF logs it too).
    """
    groups: list[tuple[str | None, dict[str, GraphTensor]]] = [(None, receiver_tensors)]
    groups += [(name, group) for name, group in (alternatives or {}).items()]
    included: dict[str, SignatureDef] = {}
    excluded: dict[str, str] = {}
    for group_name, receivers in groups:
        for key, head in heads.items():
            name = key if group_name is None else f"{group_name}:{key}"
            try:
                included[name] = _one_signature(head, receivers, tensors[key])
            except ValueError as err:
                excluded[name] = str(err)
                logger.warning("Signature %r left out of the SavedModel: %s", name, err)
    if not included:
        logger.warning("The SavedModel has no signatures.")
    elif DEFAULT_SIGNATURE_KEY not in included:
        logger.warning("The SavedModel has no %r signature.", DEFAULT_SIGNATURE_KEY)
    return included, excluded


# -- TRAIN / EVAL ---------------------------------------------------------------------------
TRAIN_METHOD_NAME = "tensorflow/supervised/training"
EVAL_METHOD_NAME = "tensorflow/supervised/eval"
LOSS_KEY = "loss"
PREDICTIONS_KEY = "predictions"
METRICS_KEY = "metrics"


def _prefixed(key: str, prefix: str) -> str:
    """TF's rule for supervised output keys: ``<prefix>/<key>``, unless the key already
    starts with the prefix (then it is kept as is)."""
    return key if key.startswith(prefix) else f"{prefix}/{key}"


def supervised_outputs(
    loss: tf.Tensor | None,
    predictions: PyTree,
    metric_values: Mapping[str, tf.Tensor],
    metric_updates: Mapping[str, tf.Tensor],
) -> dict[str, tf.Tensor]:
    """The outputs of a ``train``/``eval`` signature under tf.estimator's keys.

    ``loss`` → ``'loss'``; predictions: one tensor → ``'predictions'``, a dict →
    ``'predictions/<key>'``; each metric → ``'metrics/<name>/value'`` and
    ``'metrics/<name>/update_op'`` (a key already starting with the prefix keeps it, as
    TF's TrainOutput/EvalOutput do).

    Raises:
      ValueError: a predictions or metrics key is not a str, or two keys collide.
    """
    outputs: dict[str, tf.Tensor] = {}

    def put(key: str, tensor: tf.Tensor) -> None:
        if key in outputs:
            raise ValueError(f"two supervised outputs would both be named {key!r}.")
        # The graph names each tensor after its output key (TF would name it after its op).
        outputs[key] = tf.identity(tensor, name="/".join(_scope_name(p) for p in key.split("/")))

    if loss is not None:
        put(LOSS_KEY, loss)
    if predictions is not None:
        preds = predictions if isinstance(predictions, Mapping) else {PREDICTIONS_KEY: predictions}
        for key, tensor in preds.items():
            if not isinstance(key, str):
                raise ValueError(f"predictions keys have to be str; got {key!r}.")
            put(_prefixed(key, PREDICTIONS_KEY), tensor)
    for name in metric_values:
        if not isinstance(name, str):
            raise ValueError(f"eval_metric_ops keys have to be str; got {name!r}.")
        key = _prefixed(name, METRICS_KEY)
        put(f"{key}/value", metric_values[name])
        put(f"{key}/update_op", metric_updates[name])
    return outputs


def _tensor_info(tensor: tf.Tensor) -> meta_graph_pb2.TensorInfo:
    """A dense tensor's TensorInfo (name, dtype, shape), as ``build_tensor_info`` makes it.

    Raises:
      ValueError: the tensor is sparse or ragged (TF's supervised signatures take those,
        the JAX function never does).
    """
    if not isinstance(tensor, tf.Tensor):
        raise ValueError(f"signature tensors have to be dense; got a {type(tensor).__name__}.")
    return meta_graph_pb2.TensorInfo(
        name=tensor.name, dtype=tensor.dtype.as_datatype_enum, tensor_shape=tensor.shape.as_proto()
    )


def supervised_signature_defs(
    signature_key: str,
    method_name: str,
    receiver_tensors: dict[str, GraphTensor],
    outputs: dict[str, tf.Tensor],
) -> tuple[dict[str, SignatureDef], dict[str, str]]:
    """The one ``train`` or ``eval`` SignatureDef (tf.estimator's
    ``build_all_signature_defs(serving_only=False)``): the receiver tensors as inputs,
    ``outputs`` as outputs. Left out, with a warning, when the receiver is empty or the
    outputs need placeholders that are not among its tensors (TF leaves it out then).

    Returns:
      (signature key → SignatureDef, signature key → why it was left out).
    """
    try:
        if not receiver_tensors:
            raise ValueError("the receiver has no tensors to feed.")
        missing = _unfed_placeholders(receiver_tensors.values(), outputs.values())
        if missing:
            raise ValueError(f"its outputs need placeholders that are not its inputs: {missing}.")
        signature = tf.compat.v1.saved_model.build_signature_def(
            inputs={k: _tensor_info(t) for k, t in receiver_tensors.items()},
            outputs={k: _tensor_info(t) for k, t in outputs.items()},
            method_name=method_name,
        )
    except ValueError as err:
        logger.warning("Signature %r left out of the SavedModel: %s", signature_key, err)
        return {}, {signature_key: str(err)}
    return {signature_key: signature}, {}
