"""One call's compiled loop: the one place where a loop is jitted, lowered, compiled per
input shape and dispatched."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspec._trees import shape_signature
from jaxspec.engine.block_loop import BlockUnsupported, StepJaxprs, eval_block_loop, train_block_loop
from jaxspec.engine.mesh import (
    cores_per_replica,
    partitioned_input_specs,
    put_stacked,
    replica_axis,
    replicated,
    stacked_batch_sharding,
)
from jaxspec.engine.spec_parts import SpecParts
from jaxspec.engine.steps import EvalLoopOut, LoopFn, PredictLoopOut, TrainLoopOut
from jaxspec.loop import eval_totals
from jaxspec.loop.call_cache import ModeCache
from jaxspec.loop.trace_notes import TraceNotes
from jaxspec.loop_cost import CompileClock, LoopCost, read_cost
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import State


def _jit(loop: LoopFn, donate_state: bool) -> Any:
    """``jax.jit`` of an engine's loop (its ``out_shardings`` when it has them). With
    ``donate_state`` the loop's first argument, the state, is donated: its buffers hold
    the state the loop returns (the output shardings equal the input's), so a training
    loop holds one state on the devices, not two, as a hand ``jax.jit(...,
    donate_argnums=0)`` loop does. The state given is invalid once the loop is dispatched."""
    donate = (0,) if donate_state else ()
    if loop.out_shardings is None:
        return jax.jit(loop.fn, donate_argnums=donate)
    return jax.jit(loop.fn, out_shardings=loop.out_shardings, donate_argnums=donate)


class CompiledLoop:
    """The compiled loop of one train/evaluate/predict call.

    Args:
      cache: the Estimator's ModeCache for this mode (engine, jitted, lowered and
        compiled loops, the first trace's SpecParts).
      abstract_state: the state's abstract tree (``jax.ShapeDtypeStruct`` leaves with
        their shardings), which every loop of the call takes.
      step_key: the steps' random key.
    """

    def __init__(self, cache: ModeCache, abstract_state: State, step_key: Any) -> None:
        self._cache = cache
        self.engine = engine = cache.engine
        self.mode = cache.mode
        self.mesh = engine.mesh
        self.abstract_state = abstract_state
        self.step_key = step_key
        self._device_step: tuple[int, Any] | None = None  # (value, the same on the devices)
        self.last_compile_secs = 0.0  # seconds the latest dispatch spent lowering and compiling (0: none)
        # The seconds this call compiles (its loops', and eager operations' on this
        # thread): rates and the bar's remaining time leave them out (the progress
        # hooks are its listeners). Stopped by stop().
        self.compile_clock = CompileClock()
        self.notes = TraceNotes(self.mode)  # a later trace's warning, an error's note
        # Told of each compile: (XLA's analysis, the global step its first dispatch starts at).
        self.on_compile: Callable[[LoopCost, int | None], None] | None = None
        # Built once per Estimator and mode, for the state's shardings (the loop keeps
        # the state's layout; they are the same on every call of one Estimator).
        shardings = self._shardings = jax.tree.map(lambda s: s.sharding, abstract_state)
        self._build = {
            ModeKeys.TRAIN: lambda: engine.train_loop(shardings, cache.record),
            ModeKeys.EVAL: lambda: engine.eval_loop(cache.record),
            ModeKeys.PREDICT: lambda: engine.predict_loop(cache.record),
        }[self.mode]
        if cache.jitted is None:
            cache.jitted = _jit(self._build(), donate_state=self.mode == ModeKeys.TRAIN)
            if self.mode == ModeKeys.EVAL:
                cache.jitted_totals = eval_totals.carrying_loop(cache.jitted, self.mesh)
        self._jitted = cache.jitted

    def _lower(self, jitted: Any, specs: tuple[Any, ...]) -> Any:
        """``jitted`` lowered for the abstract arguments ``specs``; in EVAL the loop that
        carries the metric totals instead, where the states can be carried (see
        ``jaxspec.loop.eval_totals``; which it is is kept per shape signature)."""
        if self.mode != ModeKeys.EVAL or self.mesh is None:
            # Off the mesh a short last batch runs at its own shape, and a state shaped by
            # the batch must then be merged on the host (as a loop of another shape).
            return jitted.lower(*specs)
        carry = eval_totals.totals_spec(jitted, specs, self.mesh)
        self._cache.totals_specs[shape_signature(specs[3:])] = carry
        if carry is None:
            return jitted.lower(*specs)
        flag = eval_totals.flag_spec(self.mesh)
        return self._cache.jitted_totals.lower(*specs, carry.totals, flag, carry.computes)

    def _input_specs(self, batch_args: tuple[Any, ...]) -> Any:
        """Per-leaf PartitionSpecs of the batch arguments when TPUConfig's
        input_partition_dims splits them over 'core' (None otherwise)."""
        dims = self.engine.config.tpu_config.input_partition_dims
        if dims is None or self.engine.broadcast or cores_per_replica(self.mesh) == 1:
            return None
        return partitioned_input_specs(batch_args, dims, replica_axis(self.mesh))

    def _specs(self, steps: int | None, batch_args: tuple[Any, ...]) -> tuple[Any, ...]:
        """Abstract loop arguments (with the shardings the real ones get) for batches
        stacked ``[steps, ...]`` (``steps`` None: keep the leading size)."""
        batch_sharding = None
        if self.mesh is not None:
            batch_sharding = (
                replicated(self.mesh) if self.engine.broadcast else stacked_batch_sharding(self.mesh)
            )

        def spec(x: Any, sharding: Any = batch_sharding) -> jax.ShapeDtypeStruct:
            shape = tuple(np.shape(x)) if steps is None else (steps,) + tuple(np.shape(x))[1:]
            return jax.ShapeDtypeStruct(shape, x.dtype, sharding=sharding)

        step = jax.ShapeDtypeStruct((), jnp.int32, sharding=replicated(self.mesh))
        input_specs = self._input_specs(batch_args)
        mesh = self.mesh
        if input_specs is None or mesh is None:  # specs only exist on a mesh with 'core' > 1
            batch = jax.tree.map(spec, batch_args)
        else:
            batch = jax.tree.map(
                lambda x, p: spec(x, stacked_batch_sharding(mesh, p)), batch_args, input_specs
            )
        return (self.abstract_state, step, self.step_key, *batch)

    def trace(self, steps: int, *batch_args: Any) -> SpecParts:
        """Lower the loop for ``steps`` steps shaped like ``batch_args`` (one step,
        stacked), so the spec's hooks and scaffold exist before the first step runs; the
        lowering is compiled when a loop of that shape first runs. Where the call may
        group steps (one step per run off the mesh), one step of the block loop is traced
        instead (``_trace_step``). Returns the SpecParts of the mode's first trace."""
        self.notes.first(batch_args)
        specs = self._specs(steps, batch_args)
        sig = shape_signature(specs[3:])
        if self.takes_blocks and steps == 1 and self.engine.config.steps_per_execution != 1:
            with self.notes.noting(batch_args, None):  # a grouped call: the block loop's step
                self._trace_step(batch_args)
        elif sig not in self._cache.compiled and sig not in self._cache.lowered:
            with self.notes.noting(batch_args, None):
                self._cache.lowered[sig] = self._lower(self._jitted, specs)
        parts = self._cache.parts
        if parts is None:  # the mode's first lowering records them
            raise RuntimeError(f"the {self.mode} loop was lowered without recording its spec parts.")
        return parts

    def _step_jaxprs(self) -> StepJaxprs:
        """The mode's StepJaxprs (one step traced once per signature), made on first use."""
        if self._cache.step_jaxprs is None:
            body = (
                self.engine.train_step(self._shardings, self._cache.record)
                if self.mode == ModeKeys.TRAIN
                else self.engine.eval_step(self._cache.record)
            )
            self._cache.step_jaxprs = StepJaxprs(body)
        return self._cache.step_jaxprs

    def _trace_step(self, batch_args: tuple[Any, ...]) -> None:
        """Trace one step of the block loop (a plain Estimator's grouped call) for
        ``batch_args`` (one step, stacked): the block loop compiled later reuses it, so
        model_fn is traced once, and no scan is lowered that the call will not run."""
        state, step, key, *batch = self._specs(1, batch_args)
        one = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), tuple(batch))
        if self.mode == ModeKeys.TRAIN:
            self._step_jaxprs().get((state, step), key, one)
        else:
            self._step_jaxprs().get(state, step, key, one)

    def _lower_block(self, batch_args: tuple[Any, ...]) -> Any:
        """The block loop (``jaxspec.engine.block_loop``, TRAIN off the mesh) lowered for
        blocks shaped like ``batch_args``, jitted on first use (state donated)."""
        if self._cache.jitted_block is None:
            make = train_block_loop if self.mode == ModeKeys.TRAIN else eval_block_loop
            loop = make(self._step_jaxprs())
            self._cache.jitted_block = _jit(loop, donate_state=self.mode == ModeKeys.TRAIN)
        state, step, key, *batch = self._specs(None, batch_args)
        steps = jax.ShapeDtypeStruct((), jnp.int32)
        return self._cache.jitted_block.lower(state, step, key, steps, *batch)

    def _compile(
        self,
        batch_args: tuple[Any, ...],
        global_step: int | None = None,
        keep_state: bool = False,
        block: bool = False,
    ) -> Any:
        """The executable for these batch shapes, kept across calls of the same Estimator
        (model_fn is traced once per mode and shape signature; XLA compiles once). With
        ``keep_state`` (TRAIN only) the one that does not donate the state, for a loop
        dispatched ahead while the host may still read the state it starts from: jitted
        and compiled on first use (model_fn traced once more; the first trace's hooks
        stay the ones used). With ``block`` (TRAIN off the mesh) the block loop, whose
        trip count is an argument (``dispatch(block_steps=)``)."""
        sig = shape_signature(batch_args)
        done = self._cache.compiled_block if block else self._cache.compiled
        done = self._cache.compiled_keep if keep_state else done
        compiled = done.get(sig)
        if compiled is None:
            began = time.perf_counter()
            with self.compile_clock.timing(), self.notes.noting(batch_args, global_step):
                lowered = None if keep_state or block else self._cache.lowered.pop(sig, None)
                if block:
                    self.notes.retrace(batch_args, global_step)  # a new shape or dtype: one warning
                    lowered = self._lower_block(batch_args)
                if lowered is None:
                    if keep_state and self._cache.jitted_keep is None:
                        self._cache.jitted_keep = _jit(self._build(), donate_state=False)
                    elif not keep_state:
                        self.notes.retrace(batch_args, global_step)
                    jitted = self._cache.jitted_keep if keep_state else self._jitted
                    lowered = self._lower(jitted, self._specs(None, batch_args))
                compiled = done[sig] = lowered.compile()
            self.last_compile_secs = time.perf_counter() - began
            if self.on_compile is not None:
                self._tell_cost(compiled, batch_args, global_step, block)
        return compiled

    def _tell_cost(
        self, compiled: Any, batch_args: tuple[Any, ...], global_step: int | None, block: bool = False
    ) -> None:
        """Read XLA's analysis of a just-compiled loop, keep it in the ModeCache (a later
        call that compiles nothing still knows a step's FLOPs) and hand it to
        ``on_compile``."""
        devices = list(self.mesh.devices.flat) if self.mesh is not None else [jax.devices()[0]]
        steps = int(np.shape(jax.tree.leaves(batch_args)[0])[0])
        cost = self._cache.last_cost = read_cost(compiled, steps, devices, up_to=block)
        if self.on_compile is not None:
            self.on_compile(cost, global_step)

    def dispatch(
        self,
        state: State,
        global_step: int,
        *host_args: Any,
        keep_state: bool = False,
        totals: Any = None,
        block_steps: int | None = None,
    ) -> TrainLoopOut | EvalLoopOut | PredictLoopOut:
        """Run one compiled loop on host arrays stacked ``[N, B, ...]`` from ``state`` at
        ``global_step`` (which may be the not yet computed outputs of the previous loop),
        asynchronously: JAX returns before the devices finish. In TRAIN ``state`` is
        donated: read nothing from it afterwards (the output's state replaces it), unless
        ``keep_state`` (then the loop writes its state to new buffers). EVAL: ``totals``
        is the previous loop's ``EvalLoopOut.totals`` (None for the first loop); the
        returned ``totals`` include this loop's states (None where the states cannot be
        carried: merge ``metric_states`` then) and ``values`` are their metrics' values
        (None where ``compute`` cannot be traced).
        The call is wrapped in ``jax.profiler.StepTraceAnnotation(mode, step_num=
        global_step, steps=N)`` (after compiling, so the annotation times the call only).
        Where ``takes_blocks``, ``block_steps`` (int, 1 <= block_steps <= N) runs the
        block loop (``jaxspec.engine.block_loop``): only the first ``block_steps`` steps
        of the block ``host_args`` run, and the per-step fields of the returned
        TrainLoopOut or EvalLoopOut have N rows of which only the first ``block_steps``
        count (an eval whose metric states cannot be carried runs those steps as a scan
        of their own size instead, as before the block loop).
        Returns the engine's TrainLoopOut, EvalLoopOut or PredictLoopOut."""
        specs = self._input_specs(host_args)
        device_args = put_stacked(host_args, self.mesh, self.engine.broadcast, specs)
        if self._device_step is None or self._device_step[0] != global_step:
            self._device_step = (global_step, jax.device_put(np.int32(global_step), replicated(self.mesh)))
        keep = keep_state and self.mode == ModeKeys.TRAIN
        self.last_compile_secs = 0.0
        block = self.takes_blocks and block_steps is not None
        if block and self._cache.block_unsupported:
            return self._unblocked(state, global_step, int(block_steps), host_args, totals)  # type: ignore[arg-type]
        try:
            executable = self._compile(device_args, global_step, keep_state=keep, block=block)
        except BlockUnsupported:
            self._cache.block_unsupported = True
            return self._unblocked(state, global_step, int(block_steps), host_args, totals)  # type: ignore[arg-type]
        steps = int(np.shape(jax.tree.leaves(host_args)[0])[0])
        # One annotation per compiled call (under a microsecond when no trace runs): its
        # first global step and its step count, for TensorBoard's profile plugin.
        extra: tuple[Any, ...] = ()
        if self.mode == ModeKeys.EVAL:
            extra = self._totals_arguments(device_args, totals)
        if block:
            steps = int(block_steps)  # type: ignore[arg-type]  # block implies not None
            return self._run_block(executable, state, global_step, steps, device_args)
        with jax.profiler.StepTraceAnnotation(self.mode, step_num=global_step, steps=steps):
            out = executable(state, self._device_step[1], self.step_key, *device_args, *extra)
        self.notes.steps_dispatched += steps
        if self.mode == ModeKeys.TRAIN:  # the loop returns the step after it, on the devices
            self._device_step = (global_step + steps, out.step)
        return out

    @property
    def takes_blocks(self) -> bool:
        """Whether ``dispatch(block_steps=)`` runs the block loop: TRAIN or EVAL off the
        mesh (one device)."""
        return self.mesh is None and self.mode in (ModeKeys.TRAIN, ModeKeys.EVAL)

    def _unblocked(
        self, state: State, global_step: int, steps: int, host_args: tuple[Any, ...], totals: Any
    ) -> Any:
        """The first ``steps`` rows of a block run as a loop of their own size."""
        rows = tuple(jax.tree.map(lambda x: np.asarray(x)[:steps], a) for a in host_args)
        return self.dispatch(state, global_step, *rows, totals=totals)

    def _run_block(
        self, executable: Any, state: State, global_step: int, steps: int, device_args: tuple[Any, ...]
    ) -> TrainLoopOut | EvalLoopOut:
        """Call the block loop's ``executable`` for ``steps`` steps (see ``dispatch``)."""
        assert self._device_step is not None  # set by dispatch
        with jax.profiler.StepTraceAnnotation(self.mode, step_num=global_step, steps=steps):
            out = executable(state, self._device_step[1], self.step_key, np.int32(steps), *device_args)
        self.notes.steps_dispatched += steps
        if self.mode == ModeKeys.TRAIN:
            self._device_step = (global_step + steps, out.step)
        return out

    def stop(self) -> None:
        """The call is over: stop its compile clock (idempotent)."""
        self.compile_clock.stop()

    def _totals_arguments(self, device_args: tuple[Any, ...], totals: Any) -> tuple[Any, ...]:
        """A carrying eval loop's ``(totals, has_totals)``; () for a loop that carries none."""
        sig = shape_signature(device_args)
        carry = self._cache.totals_specs.get(sig)
        if carry is None:
            return ()
        start = self._cache.start_totals.get(sig)
        if start is None:
            start = self._cache.start_totals[sig] = eval_totals.StartTotals(carry.totals, self.mesh)
        return start.arguments(totals)
