"""A training input_fn that yields nothing: a warning naming it, and the step-0
checkpoint that tf.estimator's session creation writes.

tf.estimator builds its graph from the input's structure, so with an empty input the
session is still created and its checkpoint saver hook saves global
step 0 before the first ``session.run`` meets the end of the input. jaxspec builds the
first state from the first batch; with no batch, it can still build it when init_fn
declares neither ``features`` nor ``labels`` (or there is no init_fn), and then saves it
(warm-started first, as TF's graph would be). Otherwise the warning says why no
checkpoint was written.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import numpy as np

from jaxspec._fn_args import call_with_declared, fn_arg_names
from jaxspec.engine.partitioning import init_context
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.warm_start import warm_start
from jaxspec.spec.fn_types import InputFn

_log = logging.getLogger("jaxspec")


def fn_name(fn: Any) -> str:
    """``module.qualname`` of a function (its repr for other callables)."""
    name = getattr(fn, "__qualname__", None)
    return f"{getattr(fn, '__module__', '?')}.{name}" if name else repr(fn)


def _first_state(plan: RunPlan) -> Any:
    """init_fn's state without a batch (key, params and config only), warm-started."""
    if plan.init_fn is None:
        return {}
    init_key, _ = plan.compile_cache.keys_for(plan.seed)
    args = dict(rng=init_key, params=plan.params_for_model_fn(), config=plan.config)
    with init_context():
        state = jax.tree.map(np.asarray, call_with_declared(plan.init_fn, args))
    return state if plan.warm_start is None else warm_start(state, plan.warm_start)


def train_without_data(plan: RunPlan, input_fn: InputFn, latest: int | None) -> None:
    """What ``train`` does when ``input_fn`` gave no batch on any process: warn naming
    input_fn, and save the step-0 checkpoint when model_dir has none and init_fn needs
    no batch."""
    name = fn_name(input_fn)
    if latest is not None:
        _log.warning("input_fn %s gave no data: nothing trained; global step stays %d.", name, latest)
        return
    needs = [
        a for a in ("features", "labels") if plan.init_fn is not None and a in fn_arg_names(plan.init_fn)
    ]
    if needs:
        _log.warning(
            "input_fn %s gave no data: nothing trained, and no step-0 checkpoint written, since init_fn "
            "takes %s of a first batch. Check that input_fn yields batches (an exhausted iterator, a "
            "filter that drops everything, a batch larger than the data with drop_remainder=True).",
            name,
            " and ".join(needs),
        )
        return
    _log.warning("input_fn %s gave no data: nothing trained; saving init_fn's state as step 0.", name)
    _log.info("Saving checkpoints for %d into %s.", 0, plan.store.directory)
    plan.store.save(0, _first_state(plan))
    plan.store.wait()
