"""What one compiled training loop costs: XLA's FLOP count and memory figures, read once
per compile, and the devices' peak FLOP rates for the ``perf/mfu`` summary.

A JAX addition (tf.estimator wrote no such summaries). XLA's ``cost_analysis()`` counts
the body of a ``lax.scan`` (a ``while`` loop) once, whatever its trip count, so the
FLOPs of a compiled loop of N steps are those of one step (checked against a compiled
single step in ``tests/test_loop_cost.py``). Both analyses describe one device's part of
the program (XLA partitions it first): ``flops_per_step`` is that figure times the
devices the loop runs on, the memory figures stay per device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import jax

#: bf16 dense peak FLOP/s of one JAX device, by a substring of its ``device_kind``
#: (checked in this order): the vendors' published figures. A TPU device is one chip
#: (v4 and v5p chips: both TensorCores, as JAX shows them).
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("TPU v4", 275e12),
    ("TPU v5 lite", 197e12),  # v5e
    ("TPU v5e", 197e12),
    ("TPU v5p", 459e12),
    ("TPU v5", 459e12),  # v5p shows as "TPU v5"
    ("TPU v6 lite", 918e12),  # v6e (Trillium)
    ("TPU v6e", 918e12),
    ("A100", 312e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
)


def table_peak_flops(device_kind: str, platform: str) -> float | None:
    """The bf16 dense peak FLOP/s of a device of ``device_kind`` from ``PEAK_BF16_FLOPS``
    (``device_kind`` as ``jax.Device.device_kind``); None on CPU and for kinds not listed."""
    if platform == "cpu":
        return None
    for key, peak in PEAK_BF16_FLOPS:
        if key.lower() in device_kind.lower():
            return peak
    return None


@dataclasses.dataclass(frozen=True)
class LoopCost:
    """XLA's analysis of one compiled training loop.

    Attributes:
      steps: steps the loop runs per call (its scan's length).
      flops_per_step: FLOPs of one step over all ``devices``, or None when the backend
        gives no cost analysis.
      argument_bytes, output_bytes, temp_bytes, alias_bytes: ``memory_analysis()``'s
        sizes on one device (bytes), or None when the backend gives none.
      devices: devices the loop runs on.
      device_kind, platform: of its first device (``jax.Device``'s).
      up_to: the loop's trip count is an argument (``jaxspec.engine.block_loop``): it
        runs 1 to ``steps`` steps per call.
    """

    steps: int
    flops_per_step: float | None
    argument_bytes: int | None
    output_bytes: int | None
    temp_bytes: int | None
    alias_bytes: int | None
    devices: int
    device_kind: str
    platform: str
    up_to: bool = False

    def scalars(self) -> dict[str, float]:
        """The summaries of this analysis: ``perf/flops_per_step`` and ``memory/*``
        (those the backend gave)."""
        named = {
            "perf/flops_per_step": self.flops_per_step,
            "memory/argument_bytes": self.argument_bytes,
            "memory/output_bytes": self.output_bytes,
            "memory/temp_bytes": self.temp_bytes,
            "memory/alias_bytes": self.alias_bytes,
        }
        return {k: float(v) for k, v in named.items() if v is not None}

    @property
    def analysed(self) -> bool:
        """Whether the backend gave either analysis."""
        return bool(self.scalars())


def _flops(compiled: Any) -> float | None:
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # noqa: BLE001 - a backend without cost analysis raises (various types)
        return None
    if isinstance(analysis, (list, tuple)):  # older jax: one dict per program
        analysis = analysis[0] if analysis else None
    if not analysis or "flops" not in analysis:
        return None
    return float(analysis["flops"])


def _memory(compiled: Any) -> tuple[int | None, int | None, int | None, int | None]:
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - a backend without memory analysis raises (various types)
        stats = None
    if stats is None:
        return None, None, None, None
    a, o, t, al = (
        getattr(stats, f"{name}_size_in_bytes", None) for name in ("argument", "output", "temp", "alias")
    )
    return a, o, t, al


def read_cost(compiled: Any, steps: int, devices: list[Any], up_to: bool = False) -> LoopCost:
    """The LoopCost of ``compiled`` (a ``jax.stages.Compiled`` of a loop of ``steps``
    steps, or of up to ``steps`` with ``up_to``) running on ``devices`` (``jax.Device``s,
    at least one). A backend that has no analysis gives None figures; this never raises
    for it."""
    flops = _flops(compiled)
    arguments, outputs, temps, aliases = _memory(compiled)
    first = devices[0]
    return LoopCost(
        steps=steps,
        flops_per_step=None if flops is None else flops * len(devices),
        argument_bytes=arguments,
        output_bytes=outputs,
        temp_bytes=temps,
        alias_bytes=aliases,
        devices=len(devices),
        device_kind=str(getattr(first, "device_kind", "")),
        platform=str(getattr(first, "platform", "")),
        up_to=up_to,
    )


#: The event jax.monitoring reports each XLA compile under (its duration in seconds).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_clocks: weakref.WeakSet[CompileClock] = weakref.WeakSet()  # the running ones
_listening = False


def _heard(event: str, duration: float, **_: Any) -> None:
    """jax.monitoring's duration listener (one per process): an XLA compile, told to
    each running CompileClock."""
    if event == BACKEND_COMPILE_EVENT:
        for clock in list(_clocks):
            clock._heard(duration)


class CompileClock:
    """Seconds one call spends compiling on its thread, so that rates can leave them out
    (TF's StepCounterHook never timed graph construction).

    Two sources, never counted twice: the sections the loop times itself (``timing()``:
    tracing, lowering and compiling a loop, on ``time.perf_counter``), and, outside
    them, every XLA compile on the same thread that ``jax.monitoring`` reports
    (``BACKEND_COMPILE_EVENT``: the small programs of eager array operations on a new
    shape, say). Compiles on other threads (an input pipeline's) are not counted.

    ``total`` holds the seconds so far; each ``listeners`` callable is called with each
    new count of seconds. Counting starts at construction and ends at ``stop()``.
    """

    def __init__(self) -> None:
        global _listening
        self.total = 0.0
        self.listeners: list[Callable[[float], None]] = []
        self._thread = threading.get_ident()
        self._inside = 0
        if not _listening:
            jax.monitoring.register_event_duration_secs_listener(_heard)
            _listening = True
        _clocks.add(self)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Count the seconds of the ``with`` block (a loop's compile) as compiling; XLA
        compiles inside it are part of them."""
        began = time.perf_counter()
        self._inside += 1
        try:
            yield
        finally:
            self._inside -= 1
            self._add(time.perf_counter() - began)

    def _heard(self, seconds: float) -> None:
        if not self._inside and threading.get_ident() == self._thread:
            self._add(seconds)

    def _add(self, seconds: float) -> None:
        self.total += seconds
        for listener in list(self.listeners):
            listener(seconds)

    def stop(self) -> None:
        """Stop counting (idempotent)."""
        _clocks.discard(self)
