"""``Estimator.predict`` for TensorFlow model_fns, as tf.estimator (2.15) runs it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from tf_bridge.runner.inputs import has_dataset_or_queue
from tf_bridge.runner.plan import RunPlan


def select_keys(predictions: Any, predict_keys: Any) -> Any:
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


def batch_length(values: dict[str, Any]) -> int:
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


def _unbatch(evaluated: Any, is_dict: bool, single: bool) -> Iterator[Any]:
    if not single:
        yield evaluated
    elif not is_dict:
        yield from evaluated
    else:
        for i in range(batch_length(evaluated)):
            yield {key: value[i] for key, value in evaluated.items()}


def run_predict(
    plan: RunPlan,
    input_fn: Any,
    predict_keys: Any,
    hooks: list[Any],
    checkpoint_path: str | None,
    yield_single_examples: bool,
) -> Iterator[Any]:
    """Yield predictions batch by batch (or example by example) until the input ends."""
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
