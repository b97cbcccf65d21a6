"""host_call's host side: the host functions of TPUEstimatorSpec.host_call (and
NPUEstimatorSpec's, and as_estimator_spec's hook) called once per step, in step order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxspec.engine.multihost import to_host


def call_host_fn(host_call: Any, values: list[Any], mode: str, global_step: int, loop_step: int) -> Any:
    """Call ``host_call`` (a HostCall) with one step's numpy ``values``.

    Raises:
      Exception: whatever the host function raises, of its own type, with a PEP 678 note
        naming the host function, the mode, the global step and the step's index in its
        loop (TPUEstimator reports host_call failures from its outfeed thread without
        them).
    """
    try:
        return host_call.call(values)
    except Exception as err:
        fn = host_call.fn
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        err.add_note(
            f"raised by the host_call function {name!r} in mode {mode!r} at global step {global_step} "
            f"(step {loop_step + 1} of its loop)"
        )
        raise


def run_host_calls(
    host_calls: Sequence[Any],
    host: Any,
    n: int,
    mode: str,
    first_step: int = 0,
    every: int = 1,
    step_advances: bool = True,
) -> None:
    """Call each host function once per step of a loop of ``n`` steps, in step order.

    Args:
      host_calls: the spec's host calls (``jaxspec.spec.host_call.HostCall``), in order.
      host: what the compiled loop returned for them: ``host[k][j]`` is tensor j of host
        call k, stacked ``[n, global_batch, ...]`` (concatenated over replicas, replica 0
        first).
      n: steps in the loop.
      mode: the ModeKeys value (named in the note of a host function's exception).
      first_step: the global step before the loop's first step.
      every: call only on steps whose global step (before the step) is a multiple of
        this (``TPUConfig.experimental_host_call_every_n_steps``; 1 calls every step).
      step_advances: each step moves the global step (TRAIN); else every step is at
        ``first_step`` (EVAL, PREDICT).

    Raises:
      Exception: a host function's own exception, with a PEP 678 note (``call_host_fn``).

    With several processes every process takes part in gathering the tensors and
    process 0 alone calls the functions, with numpy arrays.
    """
    if not host_calls:
        return
    host = to_host(host)
    if jax.process_index() != 0:
        return
    for i in range(n):
        if every > 1 and (first_step + i) % every:
            continue
        step = first_step + i if step_advances else first_step
        for hc, tensors in zip(host_calls, host, strict=True):
            call_host_fn(hc, [np.asarray(t[i]) for t in tensors], mode, step, i)
