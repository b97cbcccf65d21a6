"""The prediction loop: a generator of per-example predictions, padding dropped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, cast

import jax
import numpy as np

from jaxspec.engine.multihost import local_rows
from jaxspec.engine.steps import PredictLoopOut
from jaxspec.hooks.call_progress import PredictProgressHook
from jaxspec.loop.hook_runner import last_step_values
from jaxspec.loop.phase import Phase
from jaxspec.loop.plan import RunPlan
from jaxspec.spec.fn_types import Hooks, InputFn

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


def _real_rows(preds: Any, step: int, real: np.ndarray, single: bool) -> Any:
    """Step ``step``'s predictions without padding rows. A prediction not batched on
    axis 0 passes unchanged into a batch (``yield_single_examples=False``, as TF) and is a
    ValueError naming its key when single examples are asked for."""

    def rows(key: str, x: Any) -> np.ndarray:
        x = np.asarray(x[step])
        if x.ndim and x.shape[0] == real.shape[0]:
            return x[real]
        if single:
            raise ValueError(
                f"predictions[{key!r}] has shape {x.shape}, not the batch's {real.shape[0]} rows on axis 0; "
                "yield_single_examples=True needs every prediction batched (or use yield_single_examples=False)."
            )
        return x

    if isinstance(preds, dict):
        return {k: rows(k, v) for k, v in preds.items()}
    return rows("predictions", preds)


def run_predict(
    plan: RunPlan,
    input_fn: InputFn,
    predict_keys: Any,
    hooks: Hooks,
    checkpoint_path: Any,
    yield_single_examples: bool,
) -> Iterator[Any]:
    """Body of ``Estimator.predict`` (a generator: input_fn runs at the first
    ``next()``). Its progress (the bar, the ``Prediction: ...`` lines) is a
    PredictProgressHook's, run after the call's other hooks."""
    phase = Phase(plan)
    if not phase.start(input_fn, checkpoint_path):
        return
    lifecycle, loop = phase.lifecycle, phase.loop
    if lifecycle.restored_step is None:
        _log.info("No checkpoint in %s; predicting with the initial state.", plan.model_dir)
    progress = PredictProgressHook(plan.config.log_step_count_steps)
    loop.compile_clock.listeners.append(progress.leave_out)
    runner = phase.begin(hooks, after=[progress])
    phase.prefetch(None)
    plan.compile_cache.readers += 1  # a train call meanwhile must not donate this state
    try:
        done, examples = 0, 0
        while True:
            group = phase.next_group(phase.iterations_per_loop)
            if group is None:
                break
            args, mask, n, _ = group
            done, examples = done + n, examples + int((mask > 0).sum())
            progress.after_batches(done, examples)
            runner.before_run()
            out = cast(
                PredictLoopOut, loop.dispatch(lifecycle.state, lifecycle.global_step, *args)
            )  # a PREDICT loop
            preds, hook_values = out
            preds = _select(local_rows(preds), predict_keys)  # this process's rows
            last = _real_rows(preds, n - 1, mask[n - 1] > 0, single=False)
            values = last if isinstance(last, dict) else {"predictions": last}
            stop = runner.after_run(values, last_step_values(hook_values))
            for i in range(n):
                batch = _real_rows(preds, i, mask[i] > 0, yield_single_examples)
                if not yield_single_examples:
                    yield batch
                    continue
                for j in range(int((mask[i] > 0).sum())):
                    yield jax.tree.map(lambda x, j=j: x[j], batch)
            if stop:
                break
        runner.end()
    finally:
        plan.compile_cache.readers -= 1
        phase.close()
