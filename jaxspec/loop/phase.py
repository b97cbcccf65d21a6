"""What train, evaluate and predict share: input_fn, feeder, engine, state lifecycle,
compiled loop, hooks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxspec._fn_args import call_with_declared
from jaxspec.config.run_config import InputPipelineConfig
from jaxspec.engine.mesh import cores_per_replica, local_replica_devices, local_replicas, num_replicas
from jaxspec.engine.multihost import agree, agree_each
from jaxspec.engine.spec_parts import SpecParts
from jaxspec.engine.steps import StepEngine
from jaxspec.loop import watchdog
from jaxspec.loop.compiled_loop import CompiledLoop
from jaxspec.loop.data_position import DataPosition
from jaxspec.loop.feeder import StepFeeder
from jaxspec.loop.hook_runner import HookRunner
from jaxspec.loop.host_call import run_host_calls
from jaxspec.loop.inputs import interleave, iterate_batches
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.prefetch import GroupPrefetcher
from jaxspec.loop.state_lifecycle import StateLifecycle
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import Hooks, InputFn
from jaxspec.spec.hooks import SessionRunHook
from jaxspec.tpu_context import TPUContext


def _host_args(mode: str, batch: Any, mask: Any) -> tuple[Any, ...]:
    features, labels = batch
    if mode == ModeKeys.TRAIN:
        return (features, labels)
    if mode == ModeKeys.EVAL:
        return (features, labels, mask)
    return (features,)


class LoopInput(NamedTuple):
    """One loop's host input: ``args`` (the loop's batch arguments, stacked ``[N, B,
    ...]``: TRAIN ``(features, labels)``, EVAL ``(features, labels, mask)``, PREDICT
    ``(features,)``), ``mask`` ``[N, B]``, ``steps`` (N) and ``batches``, the input steps it
    stands for (``StepGroup.batches``: N, or one for a short eval batch split over steps)."""

    args: tuple[Any, ...]
    mask: np.ndarray
    steps: int
    batches: int


class Phase:
    """One ``train``/``evaluate``/``predict`` call, run from its RunPlan.

    ``start(input_fn)`` calls input_fn once (with the ``mode``, ``params`` and ``config``
    it declares), reads the first step, builds the StepEngine, the StateLifecycle
    (``self.lifecycle``) and the CompiledLoop (``self.loop``) and traces model_fn, so the
    spec's hooks (``self.parts``) exist before the first step runs; ``begin(hooks)`` then
    runs the preamble every call shares (hooks' ``begin``, restore or create the state,
    ``after_create_session``).

    Args:
      plan: the call's RunPlan.
      position: TRAIN: the DataPosition that checkpoints save the input's position
        with, or None.
    """

    # Set by start(); read only after it returned True.
    feeder: StepFeeder
    lifecycle: StateLifecycle
    loop: CompiledLoop
    parts: SpecParts

    def __init__(self, plan: RunPlan, position: DataPosition | None = None) -> None:
        self.plan = plan
        self.mode = plan.mode
        self.store = plan.store
        self.mesh = plan.mesh
        self.iterations_per_loop = plan.iterations_per_loop  # a duration resizes it after loop 2
        self.global_batch_size = plan.global_batch_size
        self._prefetcher: GroupPrefetcher | None = None
        self._prefetch_sizes: Callable[[int], int] | None = None  # set by prefetch()
        self._steps_read: int | None = None  # input steps of the first group (None: not read, or input ended)
        self.position = position

    def _input_params(self, invocation: int = 0, total: int = 1) -> dict[str, Any]:
        """input_fn's params: the plan's (with its per-pipeline ``batch_size``) and, on
        the mesh, ``params['context']`` (a TPUContext)."""
        params = self.plan.params_for_input_fn()
        if self.mesh is None:
            return params
        local = self._local_devices()
        device = str(local[invocation % len(local)]) if total > 1 else str(local[0])
        params["context"] = TPUContext(
            num_replicas(self.mesh),
            jax.process_count(),
            jax.process_index(),
            len(local),
            self.plan.input_pipeline,
            self.mode,
            device,
            invocation,
            total,
            cores_per_replica(self.mesh),
        )
        return params

    def _local_devices(self) -> list[Any]:
        """This process's replicas in the mesh (the first device of each), in mesh order."""
        if self.mesh is None:  # off the mesh a plan is PER_HOST_V1: no replica devices to name
            raise RuntimeError("a phase off the mesh has no replica devices.")
        return local_replica_devices(self.mesh)

    def _batches(self, input_fn: InputFn) -> tuple[Iterator[Any], int | None]:
        """The input batches (interleaved over per-replica input_fn calls for PER_SHARD_V1)
        and the rows of a full input batch.

        Raises:
          TypeError: ``input_fn`` is not callable (data given where the function that
            returns it was expected, e.g. ``train(iter(batches))``).
        """
        if not callable(input_fn):
            raise TypeError(
                f"input_fn must be a callable that returns the data, got a {type(input_fn).__name__}: "
                "pass a function, e.g. input_fn=lambda: batches (as tf.estimator, which calls input_fn)."
            )
        per_shard = self.plan.input_pipeline == InputPipelineConfig.PER_SHARD_V1
        calls = len(self._local_devices()) if per_shard else 1
        total = num_replicas(self.mesh) if per_shard else 1
        iterators, params = [], {}
        for i in range(calls):
            params = self._input_params(jax.process_index() * calls + i if per_shard else 0, total)
            result = call_with_declared(
                input_fn, dict(mode=self.mode, params=params, config=self.plan.config)
            )
            iterators.append(iterate_batches(result, self.mode, self.position if calls == 1 else None))
        batches = iterators[0] if len(iterators) == 1 else interleave(iterators)
        if self.mode == ModeKeys.PREDICT:
            batches = ((features, None) for features, _ in batches)
        return batches, params.get("batch_size") if self.mesh is not None else None

    def start(self, input_fn: InputFn, checkpoint_path: str | None = None) -> bool:
        """Prepare the phase; False when input_fn gives no data at all (on every process)."""
        plan = self.plan
        batches, batch_size = self._batches(input_fn)
        replicas = 1 if self.mesh is None else local_replicas(self.mesh)
        self.feeder = StepFeeder(
            batches, self.mode, replicas, plan.input_pipeline, batch_size, on_mesh=self.mesh is not None
        )
        first = self.feeder.next_step()
        if agree(0 if first is None else 1, "max") == 0:
            return False
        if first is None:
            raise ValueError("input_fn gave no data on this process while others have some.")
        self.feeder.push_back(first)  # begin() gives it to init_fn; the first loop reads it
        cache = plan.compile_cache.mode(
            plan.mode,
            lambda: StepEngine(
                plan.model_fn,
                {self.mode: plan.params_for_model_fn()},
                plan.config,
                self.mesh,
                broadcast=plan.broadcast,
                partition_rules=plan.partition_rules,
            ),
        )
        self.lifecycle = StateLifecycle(plan, cache.engine, first[0], checkpoint_path)
        self.loop = CompiledLoop(cache, self.lifecycle.abstract_state, self.lifecycle.step_key)
        stacked = jax.tree.map(lambda x: x[None], _host_args(self.mode, *first))
        self.parts = self.loop.trace(self.iterations_per_loop, *stacked)  # most loops have this many steps
        return True

    def begin(self, hooks: Hooks, after: list[SessionRunHook] | tuple[()] = ()) -> HookRunner:
        """The preamble of every call: the user's ``hooks``, the spec's hooks (chief-only
        ones on process 0) and ``after`` in a HookRunner; ``begin()`` on each; the state
        restored or created; ``after_create_session`` on each. Returns the runner."""
        parts = self.parts
        runner = HookRunner(
            list(hooks or ()), parts.all_hooks, len(parts.chief_hooks), after=after, lifecycle=self.lifecycle
        )
        runner.begin()
        first = self.feeder.peek_step()  # the first step, still unread by the loop
        if first is None:
            raise RuntimeError("Phase.begin() runs after a start() that found data.")
        batch, _ = first
        self.lifecycle.create_state(batch, parts.scaffold)
        runner.after_create_session()
        return runner

    def next_group(self, max_steps: int, stop: Callable[[], bool] | None = None) -> LoopInput | None:
        """The next stacked host arguments for the loop, their mask and step count.
        ``stop``: ``() -> bool``, checked between the steps read (not with the input
        thread): True ends the group at the steps read so far (a SIGTERM).

        With several processes they agree on the step count: the minimum in TRAIN (a
        process whose input ended stops everyone), the maximum in EVAL and PREDICT
        (a process with fewer steps feeds fully masked ones), so collectives match.
        """
        watchdog.mark(watchdog.INPUT)
        if self._prefetcher is None and self._prefetch_sizes is not None and self._steps_read is not None:
            self._start_prefetcher(self._steps_read, self._prefetch_sizes)
        if self._prefetcher is not None:
            group = self._prefetcher.get(max_steps)
        else:
            group = self.feeder.next_group(max_steps, stop)
        batches = 0 if group is None else group.batches  # input steps
        if self._prefetcher is None and self._prefetch_sizes is not None:  # the first group: read here
            self._steps_read = None if group is None else batches  # counted for the thread
        n_local = 0 if group is None else group.steps
        split_local = n_local - batches  # a split short batch's extra steps
        if jax.process_count() > 1:
            watchdog.mark(watchdog.COLLECTIVE)
        n, split = agree_each(
            [n_local, split_local], ["min" if self.mode == ModeKeys.TRAIN else "max", "max"]
        )
        if n == 0:
            return None
        batch, mask, _ = group if group is not None else self.feeder.empty_group(0)
        if n_local > n:
            batch, mask = jax.tree.map(lambda x: x[:n], (batch, mask))
        elif n_local < n:
            batch, mask = self.feeder.pad_group(batch, mask, n)
        return LoopInput(_host_args(self.mode, batch, mask), mask, n, n - split)

    def can_work_ahead(self) -> bool:
        """Whether input may be read, and training loops dispatched, ahead of the loop the
        host is handling: one process (several agree on each loop's size first), loops of
        a fixed size (not a duration), and no input position saved with checkpoints (it
        must be that of the last trained batch)."""
        if jax.process_count() > 1 or self.plan.loop_duration_secs is not None:
            return False
        return not (self.position is not None and self.position.tracking)

    def prefetch(self, total_steps: int | None) -> None:
        """Read the input of later loops in a background thread, from the second loop's
        on, when ``can_work_ahead()`` and loops have several steps (for one-step loops the hand-off
        to a thread costs more than it hides). Loops have ``iterations_per_loop`` steps,
        the last one cut to ``total_steps`` (None: no limit); the caller must ask
        ``next_group`` for exactly those sizes, and call ``close()`` on every way out."""
        ipl = self.iterations_per_loop
        if ipl == 1 or not self.can_work_ahead():
            return

        def sizes(done: int) -> int:
            return ipl if total_steps is None else min(ipl, total_steps - done)

        # The first group is read in the caller's thread and the thread starts when the
        # second is asked for: by then loop 1 is running, so the thread's start and its
        # hand-overs of the interpreter lock delay no dispatch; before it, the first loop
        # would wait for both.
        self._prefetch_sizes = sizes

    def _start_prefetcher(self, done: int, sizes: Callable[[int], int]) -> None:
        self._prefetcher = GroupPrefetcher(
            self.feeder.next_group, lambda read: sizes(done + read), counted=lambda group: group.batches
        )

    def close(self) -> None:
        """Stop the input thread, if any, and the loop's compile clock (idempotent)."""
        self._prefetch_sizes = None
        if hasattr(self, "loop"):
            self.loop.stop()
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def host_calls(self, host: Any, n: int, first_step: int | None = None) -> None:
        """This loop's host_call functions, once per step in step order (see
        ``jaxspec.loop.host_call.run_host_calls``); ``first_step`` is given in TRAIN."""
        if first_step is None:  # EVAL/PREDICT: the global step does not move
            run_host_calls(self.parts.host_calls, host, n, self.mode, self.lifecycle.global_step, 1, False)
        else:
            every = self.plan.host_call_every_n_steps
            run_host_calls(self.parts.host_calls, host, n, self.mode, first_step, every, True)
