"""What one Estimator keeps across its calls: per mode the engine and the compiled loops,
the random keys, the jitted init_fns, the state's abstract trees and the state the last
call ended with."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from jaxspec.engine.spec_parts import SpecParts
from jaxspec.engine.steps import StepEngine
from jaxspec.spec.fn_types import State


@dataclasses.dataclass(frozen=True)
class LiveState:
    """The state a call ended with, kept on the Estimator so that the next call need not
    read it back from disk: valid while the checkpoint of ``step`` on disk is the very
    directory it was when recorded (``identity``: inode and mtime), on the same mesh."""

    step: int
    state: State
    mesh: Any
    identity: tuple[int, int]


@dataclasses.dataclass(eq=False)
class ModeCache:
    """One mode's engine and loops, kept across calls: the StepEngine, the jitted loop
    (built on first use), the loop lowered and compiled per input shape signature, and
    the SpecParts of its first trace (hooks, host functions, scaffold), the ones the host
    uses: a retrace for another input shape must not swap in new hook objects. A later
    call with the same signature neither traces model_fn nor compiles."""

    engine: StepEngine
    mode: str
    jitted: Any = None
    lowered: dict[Any, Any] = dataclasses.field(default_factory=dict)
    compiled: dict[Any, Any] = dataclasses.field(default_factory=dict)
    parts: SpecParts | None = None
    jitted_keep: Any = None  # TRAIN: the loop without donation, for loops dispatched ahead
    compiled_keep: dict[Any, Any] = dataclasses.field(default_factory=dict)
    # TRAIN and EVAL off the mesh: the loop whose trip count is an argument
    # (jaxspec.engine.block_loop), compiled per block shape signature; the block size K
    # grouped calls use; EVAL: True once the metric states proved not carriable by it.
    jitted_block: Any = None
    compiled_block: dict[Any, Any] = dataclasses.field(default_factory=dict)
    block_steps: int | None = None
    block_unsupported: bool = False
    step_jaxprs: Any = None  # the block loops' jaxspec.engine.block_loop.StepJaxprs
    last_cost: Any = None  # TRAIN: the jaxspec.loop_cost.LoopCost of the latest compile, when read
    # EVAL: the loop that carries metric totals (jaxspec.loop.eval_totals), and per shape
    # signature its abstract totals (None: the states cannot be carried) and StartTotals.
    jitted_totals: Any = None
    totals_specs: dict[Any, Any] = dataclasses.field(default_factory=dict)
    start_totals: dict[Any, Any] = dataclasses.field(default_factory=dict)

    def record(self, parts: SpecParts) -> None:
        """The engine's ``record``: keep the first trace's SpecParts."""
        if self.parts is None:
            self.parts = parts


@dataclasses.dataclass(eq=False)
class EstimatorCache:
    """The Estimator's cache across calls (the one mutable member of a RunPlan).

    Attributes:
      keys: ``{seed: (init key, step key)}``, split from ``PRNGKey(seed)``.
      modes: ``{mode: ModeCache}``.
      jitted_inits: ``{(mode, engine, mesh, first batch signature): jitted init_fn}``,
        or False for an init_fn that needs concrete inputs.
      abstract_states: ``{(first batch signature, off the mesh): abstract state}``.
      last_abstract_state: the abstract state of the latest call (its tree is reused
        when the next call's matches, so compiled executables still fit).
      live: the state the last call ended with, or None.
      readers: predict generators of this Estimator still open: they may hold ``live``'s
        state, so a train call takes a copy of it instead (training donates its state).
    """

    keys: dict[int, tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    modes: dict[str, ModeCache] = dataclasses.field(default_factory=dict)
    jitted_inits: dict[Any, Any] = dataclasses.field(default_factory=dict)
    abstract_states: dict[Any, Any] = dataclasses.field(default_factory=dict)
    last_abstract_state: Any = None
    live: LiveState | None = None
    readers: int = 0

    def keys_for(self, seed: int | None) -> tuple[Any, Any]:
        """init_fn's and the steps' random keys, split from ``PRNGKey(seed or 0)`` once
        per Estimator and seed (each call starts from the same keys, as a TF graph built
        with the same seed)."""
        seed = seed or 0
        if seed not in self.keys:
            self.keys[seed] = tuple(jax.random.split(jax.random.PRNGKey(seed)))
        return self.keys[seed]

    def mode(self, mode: str, make_engine: Callable[[], StepEngine]) -> ModeCache:
        """The ModeCache of ``mode`` (created with ``make_engine()`` on first use)."""
        if mode not in self.modes:
            self.modes[mode] = ModeCache(make_engine(), mode)
        return self.modes[mode]
