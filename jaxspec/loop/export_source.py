"""The JAX half of ``Estimator.export_saved_model``: restore the state and build model_fn's
per-mode functions off the mesh. ``tf_bridge`` turns what this returns into a SavedModel;
it never sees the engine or the loop."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from jaxspec.engine.spec_parts import SpecParts
from jaxspec.engine.steps import StepEngine
from jaxspec.export.slim import slim_export
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.state_lifecycle import StateLifecycle
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import Features, Labels, State

_log = logging.getLogger("jaxspec")


@dataclasses.dataclass(frozen=True)
class ExportSource:
    """What a SavedModel is written from.

    Attributes:
      state: the restored state pytree (on this process's first device) holding only
        the leaves the exported modes read (``jaxspec.export.slim``): every other leaf
        is None, so the kept leaves keep their key paths (their variable names).
      global_step: the checkpoint's global step (int).
      fns: ``{mode: fn}``, ``fn(state, global_step, features, labels) -> dict``: model_fn
        in that mode off the mesh (see ``jaxspec.engine.steps.StepEngine.export_fn``),
        taking ``state`` as above.
      heads: PREDICT's export_outputs ``{head: ExportOutput}`` (None without PREDICT).
      left_out: key paths of the state leaves no exported mode reads (not exported).
    """

    state: State
    global_step: int
    fns: Mapping[str, Callable[..., dict[str, Any]]]
    heads: Mapping[str, Any] | None
    left_out: tuple[str, ...] = ()


def export_source(
    plan: RunPlan,
    modes: Sequence[str],
    examples: Mapping[str, tuple[Features, Labels]],
    checkpoint_path: str | None = None,
) -> ExportSource | None:
    """Restore the latest (or ``checkpoint_path``'s) state and build the export functions.

    Args:
      plan: the Estimator's export plan (off the mesh; ``model_params`` as exports see
        them, e.g. TPUEstimator's ``use_tpu=False``).
      modes: the ModeKeys to export, in the order their meta graphs are written.
      examples: ``{mode: (features, labels)}`` of numpy zeros shaped like each receiver's
        tensors (unknown dimensions as 1): for init_fn's shapes and the PREDICT trace.
      checkpoint_path: a checkpoint step directory to export instead of the latest.

    With several processes every process must call this (Orbax reads collectively);
    process 0 gets the ExportSource and the others None.

    Raises:
      ValueError: model_dir has no checkpoint (tf.estimator: no trained model).
    """
    engine = StepEngine(
        plan.model_fn, {m: plan.params_for_model_fn() for m in ModeKeys.all()}, plan.config, None
    )
    lifecycle = StateLifecycle(plan, engine, examples[modes[0]], checkpoint_path)
    if lifecycle.restored_step is None:
        raise ValueError(f"export: no trained model (checkpoint) in {plan.model_dir}.")
    lifecycle.create_state(examples[modes[0]], None)  # every process restores (Orbax reads collectively)
    if jax.process_index() != 0:
        _log.info("Export is written by process 0; process %d returns None.", jax.process_index())
        return None
    traced: list[SpecParts] = []
    fns = {mode: engine.export_fn(mode, lifecycle.step_key) for mode in modes}
    # The PREDICT trace that finds the leaves it reads also records its export heads.
    trace_fns = {
        ModeKeys.PREDICT: engine.export_fn(ModeKeys.PREDICT, lifecycle.step_key, record=traced.append)
    }
    inputs = {m: (examples[m][0], None if m == ModeKeys.PREDICT else examples[m][1]) for m in modes}
    slim = slim_export(lifecycle.state, fns, inputs, trace_fns, train_mode=ModeKeys.TRAIN)
    heads = traced[0].export_outputs if ModeKeys.PREDICT in fns else None
    return ExportSource(slim.state, lifecycle.restored_step, slim.fns, heads, slim.left_out)
