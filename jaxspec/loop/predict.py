"""The prediction loop: a generator of per-example predictions, padding dropped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from jaxspec.engine.multihost import local_rows
from jaxspec.loop.hook_runner import HookRunner, last_step_values
from jaxspec.loop.phase import Phase

_log = logging.getLogger("jaxspec")


def _select(preds: Any, predict_keys: Any) -> Any:
    if predict_keys is None:
        return preds
    if not isinstance(preds, dict):
        raise ValueError("predict_keys needs model_fn to return predictions as a dict.")
    keys = [predict_keys] if isinstance(predict_keys, str) else list(predict_keys)
    missing = [k for k in keys if k not in preds]
    if missing:
        raise ValueError(f"predict_keys {missing} are not among the predictions {sorted(preds)}.")
    return {k: preds[k] for k in keys}


def run_predict(est: Any, input_fn: Any, predict_keys: Any, hooks: Any, checkpoint_path: Any,
                yield_single_examples: bool) -> Iterator[Any]:
    """Body of ``Estimator.predict`` (a generator: input_fn runs at the first ``next()``)."""
    phase = Phase(est, "infer")
    if not phase.start(input_fn, checkpoint_path):
        return
    session = phase.session
    if session.restored_step is None:
        _log.info("No checkpoint in %s; predicting with the initial state.", est.model_dir)
    runner = HookRunner(list(hooks or ()), session.parts.all_hooks, len(session.parts.chief_hooks))
    runner.begin()
    session.create_state()
    runner.after_create_session(session.state, session.global_step)
    log_every, done, logged = est.config.log_step_count_steps, 0, 0
    while True:
        group = phase.next_group(phase.iterations_per_loop)
        if group is None:
            break
        args, mask, n = group
        done += n
        if log_every and done // log_every > logged // log_every:
            _log.info("Prediction: %d batches, %d examples so far.", done, phase.feeder.examples_seen)
            logged = done
        runner.before_run()
        preds, hook_values = session.run(*args)
        preds = _select(local_rows(preds), predict_keys)  # this process's rows
        last_real = mask[n - 1] > 0
        fetchable = preds if isinstance(preds, dict) else {"predictions": preds}
        values = {k: np.asarray(v[n - 1])[last_real] for k, v in fetchable.items()}
        stop = runner.after_run(values, session.state, session.global_step, last_step_values(hook_values))
        for i in range(n):
            real = mask[i] > 0
            batch = jax.tree.map(lambda x, i=i, real=real: np.asarray(x[i])[real], preds)
            if not yield_single_examples:
                yield batch
                continue
            for j in range(int(real.sum())):
                yield jax.tree.map(lambda x, j=j: x[j], batch)
        if stop:
            break
    runner.end()
