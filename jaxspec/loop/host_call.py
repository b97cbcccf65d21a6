"""host_call's host side: the host functions of TPUEstimatorSpec.host_call (and
NPUEstimatorSpec's, and as_estimator_spec's hook) called once per step, in step order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxspec.engine.multihost import to_host


def run_host_calls(host_calls: Sequence[Any], host: Any, n: int, first_step: int = 0, every: int = 1) -> None:
    """Call each host function once per step of a loop of ``n`` steps, in step order.

    Args:
      host_calls: the spec's host calls (``jaxspec.spec.host_call.HostCall``), in order.
      host: what the compiled loop returned for them: ``host[k][j]`` is tensor j of host
        call k, stacked ``[n, global_batch, ...]`` (concatenated over replicas, replica 0
        first).
      n: steps in the loop.
      first_step: the global step before the loop's first step.
      every: call only on steps whose global step (before the step) is a multiple of
        this (``TPUConfig.experimental_host_call_every_n_steps``; 1 calls every step).

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
        for hc, tensors in zip(host_calls, host, strict=True):
            hc.call([np.asarray(t[i]) for t in tensors])
