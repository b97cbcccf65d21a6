"""TF Serving warmup records: ``assets.extra/tf_serving_warmup_requests``.

TF Serving replays this file (a TFRecord file of ``tensorflow.serving.PredictionLog``
protos, at most 1000 records) before it marks a model version ready, so the first real
requests do not pay for lazy initialisation. tf.estimator has no helper for it; both
SavedModel writers (jaxspec models and TF model_fns) call ``write_warmup`` inside their
atomic export.

What each request holds follows its SignatureDef, read from the written
``saved_model.pb`` (the one description both wings share): a ``tensorflow/serving/classify``
signature gets a ``ClassificationRequest`` and a ``tensorflow/serving/regress`` one a
``RegressionRequest``, each with ``tf.Example``s; a ``tensorflow/serving/predict`` one a
``PredictRequest`` with its inputs by name, or serialized ``tf.Example``s when its only
input is a string tensor (a parsing receiver). One record per row and signature, each
request holding one row.

The protos come from TF Serving's own Python package, ``tensorflow-serving-api``
(the ``tf`` extra), imported only here, when records are written.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import node_def_pb2
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from jaxspec.spec.fn_types import ArrayLike
from tf_bridge.export.receivers import InputReceiver

if TYPE_CHECKING:
    from tensorflow_serving.apis.prediction_log_pb2 import PredictionLog

WARMUP_FILE = "tf_serving_warmup_requests"
MAX_RECORDS = 1000  # TF Serving reads no more than this many warmup records
SERVE_TAG = "serve"
CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
PREDICT = "tensorflow/serving/predict"

Rows = list[dict[str, np.ndarray]]
# ``build(apis, signature key, feed)``: one warmup record (a PredictionLog).
LogBuilder: TypeAlias = Callable[[types.SimpleNamespace, str, Mapping[str, np.ndarray]], "PredictionLog"]
# ``warmup_requests``: None, a number of copies of the receiver's example per signature,
# or feature dicts (feature key -> one row's value, no batch axis).
WarmupRequests: TypeAlias = int | Sequence[Mapping[str, ArrayLike]] | None


def check_warmup_requests(warmup_requests: object) -> None:
    """Check ``warmup_requests`` before anything is written.

    Raises:
      ValueError: an int below 1 or above 1000 (TF Serving's limit), or an empty list /
        a list of more than 1000 rows.
      TypeError: neither None, an int, nor a list of feature dicts.
    """
    if warmup_requests is None:
        return
    if isinstance(warmup_requests, bool):
        raise TypeError("warmup_requests has to be None, an int or a list of feature dicts; got a bool.")
    if isinstance(warmup_requests, (int, np.integer)):
        count = int(warmup_requests)
    elif isinstance(warmup_requests, Sequence) and not isinstance(warmup_requests, (str, bytes)):
        for i, row in enumerate(warmup_requests):
            if not isinstance(row, Mapping):
                raise TypeError(
                    f"warmup_requests[{i}] has to be a dict of feature name to value; got {type(row).__name__}."
                )
        count = len(warmup_requests)
    else:
        raise TypeError(
            f"warmup_requests has to be None, an int or a list of feature dicts; got {type(warmup_requests).__name__}."
        )
    if not 1 <= count <= MAX_RECORDS:
        raise ValueError(
            f"warmup_requests has to ask for 1 to {MAX_RECORDS} requests per signature "
            f"(TF Serving reads at most {MAX_RECORDS} records); got {count}."
        )


def feature_rows(
    warmup_requests: int | Sequence[Mapping[str, ArrayLike]],
    example: Mapping[str, np.ndarray],
    defaults: Mapping[str, np.ndarray] | None = None,
) -> Rows:
    """The rows to send: the user's feature dicts (each value one row, no batch axis),
    or ``warmup_requests`` copies of ``example``'s first row (the receiver's features at
    batch 1, zeros), a feature's parse default (``defaults``, see ``parsed_defaults``)
    taking the zeros' place. Values are cast to the example's dtypes.

    Raises:
      ValueError: a row whose keys differ from the features' or whose value's shape
        does not fit the feature.
    """
    if not isinstance(warmup_requests, Sequence):
        first = {}
        for k, v in example.items():
            zeros = np.asarray(v)[0]
            given = (defaults or {}).get(k)
            first[k] = zeros if given is None else np.broadcast_to(given, zeros.shape).astype(zeros.dtype)
        return [dict(first) for _ in range(int(warmup_requests))]
    rows: Rows = []
    for i, row in enumerate(warmup_requests):
        if set(row) != set(example):
            raise ValueError(
                f"warmup_requests[{i}] has features {sorted(row)}; the receiver's are {sorted(example)}."
            )
        cast = {k: np.asarray(row[k], dtype=example[k].dtype) for k in example}
        for k, value in cast.items():
            want = example[k].shape[1:]
            if value.ndim != len(want) or any(
                w != 1 and w != v for w, v in zip(want, value.shape, strict=True)
            ):
                raise ValueError(
                    f"warmup_requests[{i}][{k!r}] has shape {value.shape}; the feature's row shape is {want}."
                )
        rows.append(cast)
    return rows


def receiver_example(receiver_fn: Callable[[], object]) -> dict[str, np.ndarray]:
    """Zeros at batch 1 (unknown dimensions 1) shaped like ``receiver_fn``'s features,
    built in a scratch graph, by feature key (``'feature'`` for a single tensor)."""
    with tf.Graph().as_default():
        features = cast(InputReceiver, receiver_fn()).features
        zeros = tf.nest.map_structure(
            lambda t: np.zeros([1 if d is None else d for d in t.shape.as_list()], t.dtype.as_numpy_dtype),
            features,
        )
    return dict(zeros) if isinstance(zeros, Mapping) else {"feature": zeros}


def batch(rows: Rows) -> dict[str, np.ndarray]:
    """Rows stacked on a new axis 0: ``{feature: [len(rows), ...]}``."""
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def _serve_meta_graph(export_dir: str) -> meta_graph_pb2.MetaGraphDef | None:
    """The ``serve`` MetaGraphDef of ``export_dir``'s ``saved_model.pb``/``.pbtxt`` (None
    without one)."""
    proto = saved_model_pb2.SavedModel()
    binary = os.path.join(export_dir, "saved_model.pb")
    if tf.io.gfile.exists(binary):
        with tf.io.gfile.GFile(binary, "rb") as f:
            proto.ParseFromString(f.read())
    else:
        from google.protobuf import text_format

        with tf.io.gfile.GFile(os.path.join(export_dir, "saved_model.pbtxt"), "r") as f:
            text_format.Parse(f.read(), proto)
    return next((m for m in proto.meta_graphs if SERVE_TAG in m.meta_info_def.tags), None)


def serving_signatures(export_dir: str) -> dict[str, meta_graph_pb2.SignatureDef]:
    """The ``serve`` meta graph's SignatureDefs ``{key: SignatureDef}`` of ``export_dir``
    (classify, regress and predict ones only)."""
    meta = _serve_meta_graph(export_dir)
    if meta is None:
        return {}
    return {
        k: s for k, s in sorted(meta.signature_def.items()) if s.method_name in (CLASSIFY, REGRESS, PREDICT)
    }


def _const(nodes: Mapping[str, node_def_pb2.NodeDef], name: str) -> np.ndarray | None:
    """The value of a constant input (through the Reshape/Identity TF puts in front of a
    parse default), or None."""
    node = nodes.get(name.split(":")[0].lstrip("^"))
    while node is not None and node.op in ("Reshape", "Identity"):
        node = nodes.get(node.input[0].split(":")[0].lstrip("^"))
    if node is None or node.op != "Const":
        return None
    return tf.make_ndarray(node.attr["value"].tensor)


def parsed_defaults(export_dir: str) -> dict[str, np.ndarray]:
    """The default values the ``serve`` graph's ``ParseExampleV2`` ops give dense
    features (``FixedLenFeature(default_value=...)``), by feature key: the plausible row
    for a warmup request made from an int. Keys without a default are left out."""
    meta = _serve_meta_graph(export_dir)
    if meta is None:
        return {}
    nodes = {n.name: n for n in meta.graph_def.node}
    defaults = {}
    for node in meta.graph_def.node:
        if node.op != "ParseExampleV2":
            continue
        keys = _const(nodes, node.input[3])  # inputs: serialized, names, sparse, dense, ragged keys, defaults
        for i, key in enumerate([] if keys is None else keys.reshape(-1).tolist()):
            value = _const(nodes, node.input[5 + i]) if 5 + i < len(node.input) else None
            if value is not None and value.size:
                defaults[key.decode()] = value
    return defaults


def parsed_example_keys(export_dir: str) -> frozenset[str]:
    """The tf.Example feature names the ``serve`` graph parses: the string constants fed
    to its ``ParseExample*`` ops (keys; also string defaults, which do no harm here). A
    string receiver tensor that reaches no such op takes something else than tf.Examples
    (e.g. words for a lookup table), so no request is made of tf.Examples for it."""
    meta = _serve_meta_graph(export_dir)
    if meta is None:
        return frozenset()
    nodes = {n.name: n for n in meta.graph_def.node}
    for function in meta.graph_def.library.function:
        nodes.update({n.name: n for n in function.node_def})
    keys: set[str] = set()
    for node in nodes.values():
        if not node.op.startswith(("ParseExample", "ParseSingleExample")):
            continue
        for name in node.input[1:]:
            const = nodes.get(name.split(":")[0].lstrip("^"))
            if (
                const is not None
                and const.op == "Const"
                and const.attr["dtype"].type == tf.string.as_datatype_enum
            ):
                keys.update(
                    v.decode() for v in tf.make_ndarray(const.attr["value"].tensor).reshape(-1).tolist()
                )
    return frozenset(keys)


def _feature(value: np.ndarray) -> tf.train.Feature:
    flat = np.asarray(value).reshape(-1)
    if flat.dtype.kind in "biu":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=flat.astype(np.int64).tolist()))
    if flat.dtype.kind == "f":
        return tf.train.Feature(float_list=tf.train.FloatList(value=flat.astype(np.float32).tolist()))
    if flat.dtype.kind in "SUO":
        values = [v if isinstance(v, bytes) else str(v).encode() for v in flat.tolist()]
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    raise TypeError(f"a feature of dtype {flat.dtype} cannot go into a tf.Example.")


def example_proto(row: Mapping[str, np.ndarray]) -> tf.train.Example:
    """One ``tf.train.Example`` of a row (ints as int64_list, floats as float_list,
    strings as bytes_list, each flattened as ``tf.io.parse_example`` reads it back)."""
    return tf.train.Example(features=tf.train.Features(feature={k: _feature(v) for k, v in row.items()}))


def signature_feed(
    signature: meta_graph_pb2.SignatureDef,
    rows: Rows,
    names: Mapping[str, str] | None,
    example_keys: frozenset[str],
) -> dict[str, np.ndarray]:
    """What ``signature`` takes for ``rows``: ``{input name: array}``. Its inputs by name
    (``names``: input name -> feature key, when the writer knows them; else the rows'
    own keys) when the rows have them all (a raw receiver); else its one string input
    holds the rows as serialized ``tf.Example``s (a parsing receiver; classify and regress
    always), their feature names the rows' keys, which the graph must parse
    (``example_keys``, from ``parsed_example_keys``).

    Raises:
      ValueError: neither fits (the message names the signature's inputs).
    """
    inputs = sorted(signature.inputs)
    names = dict(names) if names else {n: n for n in inputs}
    if signature.method_name == PREDICT and set(inputs) <= set(names) and set(names.values()) <= set(rows[0]):
        return {n: np.stack([r[names[n]] for r in rows]) for n in inputs}
    is_string = len(inputs) == 1 and signature.inputs[inputs[0]].dtype == tf.string.as_datatype_enum
    if is_string and set(rows[0]) <= example_keys:
        return {inputs[0]: np.array([example_proto(r).SerializeToString() for r in rows], dtype=object)}
    raise ValueError(
        f"warmup: the signature takes inputs {inputs}, which are neither the features {sorted(rows[0])} "
        f"nor one string tensor of tf.Examples with those features (the graph parses {sorted(example_keys)})."
    )


def run_signature(loaded: tf.Module, key: str, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run signature ``key`` of a ``tf.saved_model.load``-ed model on ``feed``.

    Raises:
      ValueError: TF refused the feed (e.g. tf.Examples whose feature names the
        receiver does not parse), naming the signature.
    """
    try:
        result = loaded.signatures[key](**{k: tf.constant(v) for k, v in feed.items()})
    except (tf.errors.InvalidArgumentError, TypeError) as e:
        first = str(e).strip().splitlines()[0]
        raise ValueError(f"signature {key!r} cannot run on the rows ({sorted(feed)}): {first}") from e
    return {k: v.numpy() for k, v in result.items()}


def _serving_apis() -> types.SimpleNamespace:
    try:
        from tensorflow_serving.apis import (
            classification_pb2,
            predict_pb2,
            prediction_log_pb2,
            regression_pb2,
        )
    except ImportError as e:
        raise ImportError(
            "warmup_requests needs TF Serving's protos from the 'tensorflow-serving-api' package: "
            "install jaxspec's 'tf' extra (pip install 'jaxspec[tf]')."
        ) from e
    return types.SimpleNamespace(
        classification_pb2=classification_pb2,
        predict_pb2=predict_pb2,
        prediction_log_pb2=prediction_log_pb2,
        regression_pb2=regression_pb2,
    )


def _predict_log(apis: types.SimpleNamespace, key: str, feed: Mapping[str, np.ndarray]) -> PredictionLog:
    request = apis.predict_pb2.PredictRequest()
    request.model_spec.signature_name = key
    for name, value in feed.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return apis.prediction_log_pb2.PredictionLog(
        predict_log=apis.prediction_log_pb2.PredictLog(request=request)
    )


def _examples_log(module: str, request_class: str, log_field: str, log_class: str) -> LogBuilder:
    """A builder of Classify/Regress logs: the request (``module.request_class``) holds
    the serialized tf.Examples of the feed's one input."""

    def build(apis: types.SimpleNamespace, key: str, feed: Mapping[str, np.ndarray]) -> PredictionLog:
        request = getattr(getattr(apis, module), request_class)()
        request.model_spec.signature_name = key
        (serialized,) = feed.values()
        request.input.example_list.examples.extend(tf.train.Example.FromString(b) for b in serialized)
        log = getattr(apis.prediction_log_pb2, log_class)(request=request)
        return apis.prediction_log_pb2.PredictionLog(**{log_field: log})

    return build


# The request each kind of signature gets, by its SignatureDef's method name (the one
# description the SavedModels of jaxspec models and of TF model_fns share).
_BUILDERS = {
    PREDICT: _predict_log,
    CLASSIFY: _examples_log("classification_pb2", "ClassificationRequest", "classify_log", "ClassifyLog"),
    REGRESS: _examples_log("regression_pb2", "RegressionRequest", "regress_log", "RegressLog"),
}


def write_warmup(
    export_dir: str, rows: Rows, names: Mapping[str, Mapping[str, str]] | None = None, replay: bool = True
) -> str:
    """Write ``<export_dir>/assets.extra/tf_serving_warmup_requests``: for each serving
    signature one request per row (``names``: signature key -> its input name -> feature
    key, see ``signature_feed``). With ``replay`` each signature is first run once on all
    the rows with the loaded SavedModel, so a record TF Serving would refuse is never
    written (without it, for a model this TF cannot run, the records are written unchecked).

    Returns:
      The file's path.

    Raises:
      ImportError: ``tensorflow-serving-api`` is not installed (the ``tf`` extra).
      ValueError: more than 1000 records in all (rows × signatures), or a signature the
        rows cannot feed (see ``signature_feed``, ``run_signature``).
    """
    signatures = serving_signatures(export_dir)
    names = names or {}
    total = len(rows) * len(signatures)
    if total > MAX_RECORDS:
        raise ValueError(
            f"warmup_requests: {len(rows)} rows × {len(signatures)} serving signatures is {total} records; "
            f"TF Serving reads at most {MAX_RECORDS}."
        )
    apis = _serving_apis()
    parsed = parsed_example_keys(export_dir)
    if replay:
        loaded = tf.saved_model.load(export_dir, tags=[SERVE_TAG])
        for key, sig in signatures.items():
            run_signature(loaded, key, signature_feed(sig, rows, names.get(key), parsed))
    logs = [
        _BUILDERS[sig.method_name](apis, key, signature_feed(sig, [row], names.get(key), parsed))
        for key, sig in signatures.items()
        for row in rows
    ]
    path = os.path.join(export_dir, "assets.extra", WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for log in logs:
            writer.write(log.SerializeToString())
    return path
