"""``HostCallHook``: a ``(host_fn, tensors)`` pair carried through an EstimatorSpec's
hooks. The pairs' validation lives in ``jaxspec.rules.fn_tensors`` (shared with
tf_bridge); its names stay importable from here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxspec.rules.fn_tensors import call_with_tensors, validate_fn_tensors_pair
from jaxspec.spec.hooks import SessionRunHook

__all__ = ["HostCallHook", "call_with_tensors", "validate_fn_tensors_pair"]


class HostCallHook(SessionRunHook):
    """Carries a ``(host_fn, tensors)`` pair through an EstimatorSpec's hooks.

    ``TPUEstimatorSpec.as_estimator_spec()`` turns ``host_call`` into this hook, as
    TPUEstimator does on CPU; the engine returns ``tensors`` from each step and calls
    ``host_fn`` on the host once per step, in step order, with numpy arrays.
    """

    def __init__(self, host_call: tuple[Callable[..., Any], Any]) -> None:
        self.host_call = host_call

    def reads_state_after(self, step: int) -> bool:
        """False: the engine takes the pair out of the hooks; it never runs as one."""
        return False

    def may_stop_after(self, step: int) -> bool:
        """False: it never requests a stop."""
        return False
