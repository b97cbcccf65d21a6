"""``Estimator.predict`` for TensorFlow model_fns, as tf.estimator (2.15) runs it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeAlias

import numpy as np
import tensorflow as tf

from jaxspec.spec.fn_types import InputFn, PyTree
from tf_bridge.runtime.runner.inputs import has_dataset_or_queue
from tf_bridge.runtime.runner.plan import TFRunPlan
from tf_bridge.runtime.runner.predict_cache import (
    PredictCache,
    Predictor,
    dataset_features,
    dataset_features_spec,
)

# What model_fn predicts: a tensor or a dict of them; evaluated, numpy arrays.
GraphPredictions: TypeAlias = tf.Tensor | dict[str, tf.Tensor]
Predictions: TypeAlias = np.ndarray | dict[str, np.ndarray]


def select_keys(predictions: GraphPredictions, predict_keys: str | Sequence[str] | None) -> GraphPredictions:
    """The predictions restricted to ``predict_keys`` (all when None/empty).

    Raises:
      ValueError: predict_keys with non-dict predictions, or none of the keys exists.
    """
    if not predict_keys:
        return predictions
    if not isinstance(predictions, dict):
        raise ValueError("predict_keys can only select from dict predictions; model_fn returned a tensor.")
    selected = {k: v for k, v in predictions.items() if k in predict_keys}
    if not selected:
        raise ValueError(
            f"none of predict_keys {list(predict_keys)} is a prediction key {sorted(predictions)}."
        )
    return selected


def batch_length(values: dict[str, np.ndarray]) -> int:
    """The common first dimension of evaluated predictions.

    Raises:
      ValueError: two predictions have different batch sizes.
    """
    length = None
    for key, value in values.items():
        length = length or value.shape[0]
        if value.shape[0] != length:
            raise ValueError(
                f"prediction {key!r} has batch size {value.shape[0]}, others {length}; with "
                "yield_single_examples=True all predictions need the same first dimension."
            )
    return int(length or 0)


def _unbatch(evaluated: Predictions, is_dict: bool, single: bool) -> Iterator[Predictions]:
    if not single:
        yield evaluated
    elif not is_dict:
        yield from evaluated
    else:
        for i in range(batch_length(evaluated)):
            yield {key: value[i] for key, value in evaluated.items()}


def _build_predictor(
    plan: TFRunPlan,
    key: tuple[object, ...],
    features_spec: PyTree,
    predict_keys: str | Sequence[str] | None,
    checkpoint_path: str | None,
) -> Predictor | None:
    """model_fn on placeholders of ``features_spec``, its session restored from
    ``checkpoint_path``; None when the spec has prediction hooks (they need the per-call
    MonitoredSession)."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.random.set_random_seed(plan.config.tf_random_seed)
        plan.create_global_step(graph)
        inputs = tf.nest.map_structure(lambda s: tf.compat.v1.placeholder(s.dtype, s.shape), features_spec)
        spec = plan.model_fn(inputs, None)
        if spec.prediction_hooks:
            return None
        plan.maybe_warm_start(restoring=bool(checkpoint_path))
        predictions = select_keys(spec.predictions, predict_keys)
        creator = tf.compat.v1.train.ChiefSessionCreator(
            checkpoint_filename_with_path=checkpoint_path,
            master=plan.config.session_target(),
            scaffold=spec.scaffold,
            config=plan.session_config,
        )
        session = creator.create_session()
    return Predictor(key, graph, session, inputs, predictions)


def _cached_predictor(
    cache: PredictCache,
    plan: TFRunPlan,
    result: object,
    predict_keys: str | Sequence[str] | None,
    checkpoint_path: str | None,
) -> Predictor | None:
    """The cache's predictor for this dataset (built when missing), or None when this
    input cannot use one."""
    features_spec = dataset_features_spec(result)
    if features_spec is None:
        return None
    key = cache.key(checkpoint_path, features_spec, predict_keys)
    if cache.is_uncacheable(key):
        return None
    predictor = cache.get(key)
    if predictor is None:
        predictor = _build_predictor(plan, key, features_spec, predict_keys, checkpoint_path)
        if predictor is None:
            cache.mark_uncacheable(key)
            return None
        cache.put(predictor)
    return predictor


def run_predict(
    plan: TFRunPlan,
    input_fn: InputFn,
    predict_keys: str | Sequence[str] | None,
    hooks: list[tf.compat.v1.train.SessionRunHook],
    checkpoint_path: str | None,
    yield_single_examples: bool,
) -> Iterator[Predictions]:
    """Yield predictions batch by batch (or example by example) until the input ends:
    through the plan's predict cache when the input allows it (see
    ``tf_bridge.runtime.runner.predict_cache``), else in a graph and session of this call."""
    cache = plan.predict_cache
    if cache is not None and not hooks and tf.executing_eagerly() and not cache.is_uncacheable(input_fn):
        try:
            result = plan.input_fn_result(input_fn)
        except Exception:  # e.g. placeholders or queues, which need a graph: the per-call path
            result = None
        predictor = None
        if isinstance(result, tf.data.Dataset):
            predictor = _cached_predictor(cache, plan, result, predict_keys, checkpoint_path)
        if predictor is not None:
            for features in dataset_features(result):
                evaluated = predictor.run(features)
                yield from _unbatch(evaluated, isinstance(predictor.predictions, dict), yield_single_examples)
            return
        cache.mark_uncacheable(input_fn)  # this input_fn is called in a graph from now on
    yield from _run_predict_in_call_graph(
        plan, input_fn, predict_keys, hooks, checkpoint_path, yield_single_examples
    )


def _run_predict_in_call_graph(
    plan: TFRunPlan,
    input_fn: InputFn,
    predict_keys: str | Sequence[str] | None,
    hooks: list[tf.compat.v1.train.SessionRunHook],
    checkpoint_path: str | None,
    yield_single_examples: bool,
) -> Iterator[Predictions]:
    """tf.estimator's predict: a graph and a MonitoredSession for this call."""
    with tf.Graph().as_default() as graph:
        tf.compat.v1.random.set_random_seed(plan.config.tf_random_seed)
        plan.create_global_step(graph)
        features, _, input_hooks = plan.call_input_fn(input_fn)
        if plan.check_predict_input and not has_dataset_or_queue(features):
            tf.compat.v1.logging.warning(  # TensorFlow's logger, where tf.estimator wrote it
                "Input graph does not read a tf.data.Dataset and does not contain a QueueRunner: "
                "predict() ends only when a hook stops it."
            )
        spec = plan.model_fn(features, None)
        plan.maybe_warm_start(restoring=bool(checkpoint_path))
        predictions = select_keys(spec.predictions, predict_keys)
        all_hooks = list(input_hooks) + list(hooks) + list(spec.prediction_hooks)
        creator = tf.compat.v1.train.ChiefSessionCreator(
            checkpoint_filename_with_path=checkpoint_path,
            master=plan.config.session_target(),
            scaffold=spec.scaffold,
            config=plan.session_config,
        )
        with tf.compat.v1.train.MonitoredSession(session_creator=creator, hooks=all_hooks) as session:
            while not session.should_stop():
                evaluated = session.run(predictions)
                yield from _unbatch(evaluated, isinstance(predictions, dict), yield_single_examples)
