"""What train, evaluate and predict share: input_fn, feeder, engine, session, host calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from jaxspec.config import InputPipelineConfig
from jaxspec.engine.fn_args import call_with_declared
from jaxspec.engine.mesh import cores_per_replica, local_replica_devices, local_replicas, num_replicas
from jaxspec.engine.multihost import agree, to_host
from jaxspec.engine.steps import StepEngine
from jaxspec.loop.feeder import StepFeeder
from jaxspec.loop.inputs import interleave, iterate_batches
from jaxspec.loop.session import Session
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.hooks import SessionRunHook
from jaxspec.tpu_context import TPUContext


def _host_args(mode: str, batch: Any, mask: Any) -> tuple[Any, ...]:
    features, labels = batch
    if mode == ModeKeys.TRAIN:
        return (features, labels)
    if mode == ModeKeys.EVAL:
        return (features, labels, mask)
    return (features,)


class Phase:
    """One ``train``/``evaluate``/``predict`` call of an Estimator.

    ``start(input_fn)`` calls input_fn once (with the ``mode``, ``params`` and ``config``
    it declares), reads the first step, builds a fresh StepEngine and Session and traces
    model_fn, so the spec's hooks exist before the first step runs.
    """

    def __init__(self, est: Any, mode: str) -> None:
        self.est = est
        self.mode = mode
        self.store = est._checkpoint_store()
        self.mesh = est._mesh()
        self.iterations_per_loop = est._iterations_per_loop()
        self.global_batch_size = est._global_batch_size(mode)
        self.feeder: StepFeeder | None = None
        self.session: Session | None = None

    def _input_params(self, invocation: int = 0, total: int = 1) -> dict[str, Any]:
        """input_fn's params: the Estimator's (with its per-pipeline ``batch_size``) and,
        on the mesh, ``params['context']`` (a TPUContext)."""
        params = self.est._input_params(self.mode)
        if self.mesh is None:
            return params
        local = self._local_devices()
        device = str(local[invocation % len(local)]) if total > 1 else str(local[0])
        params["context"] = TPUContext(
            num_replicas(self.mesh),
            jax.process_count(),
            jax.process_index(),
            len(local),
            self.est._input_pipeline(),
            self.mode,
            device,
            invocation,
            total,
            cores_per_replica(self.mesh),
        )
        return params

    def _local_devices(self) -> list[Any]:
        """This process's replicas in the mesh (the first device of each), in mesh order."""
        return local_replica_devices(self.mesh)

    def _batches(self, input_fn: Any) -> tuple[Iterator[Any], int | None]:
        """The input batches (interleaved over per-replica input_fn calls for PER_SHARD_V1)
        and the rows of a full input batch."""
        pipeline = self.est._input_pipeline()
        per_shard = self.mesh is not None and pipeline == InputPipelineConfig.PER_SHARD_V1
        calls = len(self._local_devices()) if per_shard else 1
        total = num_replicas(self.mesh) if per_shard else 1
        iterators, params = [], {}
        for i in range(calls):
            params = self._input_params(jax.process_index() * calls + i if per_shard else 0, total)
            result = call_with_declared(input_fn, dict(mode=self.mode, params=params, config=self.est.config))
            iterators.append(iterate_batches(result, self.mode))
        batches = iterators[0] if len(iterators) == 1 else interleave(iterators)
        if self.mode == ModeKeys.PREDICT:
            batches = ((features, None) for features, _ in batches)
        return batches, params.get("batch_size") if self.mesh is not None else None

    def start(self, input_fn: Any, checkpoint_path: str | None = None) -> bool:
        """Prepare the phase; False when input_fn gives no data at all (on every process)."""
        est = self.est
        batches, batch_size = self._batches(input_fn)
        pipeline = est._input_pipeline() if self.mesh is not None else InputPipelineConfig.PER_HOST_V1
        replicas = 1 if self.mesh is None else local_replicas(self.mesh)
        self.feeder = StepFeeder(
            batches, self.mode, replicas, pipeline, batch_size, on_mesh=self.mesh is not None
        )
        first = self.feeder.next_step()
        if agree(0 if first is None else 1, "max") == 0:
            return False
        if first is None:
            raise ValueError("input_fn gave no data on this process while others have some.")
        self.feeder.push_back(first)
        broadcast = self.mesh is not None and pipeline == InputPipelineConfig.BROADCAST
        engine = StepEngine(
            est._model_fn,
            {self.mode: est._model_params(self.mode)},
            est.config,
            self.mesh,
            broadcast=broadcast,
            partition_rules=getattr(est, "_partition_rules", None),
        )
        self.session = Session(
            engine,
            self.mode,
            est._init_fn,
            self.store,
            first[0],
            est.config.tf_random_seed,
            checkpoint_path,
            shared=est.__dict__.setdefault("_compile_cache", {}),
        )
        stacked = jax.tree.map(lambda x: x[None], _host_args(self.mode, *first))
        self.session.trace(self.iterations_per_loop, *stacked)  # most loops have this many steps
        return True

    def next_group(self, max_steps: int) -> tuple[tuple[Any, ...], np.ndarray, int] | None:
        """The next stacked host arguments for the loop, their mask and step count.

        With several processes they agree on the step count: the minimum in TRAIN (a
        process whose input ended stops everyone), the maximum in EVAL and PREDICT
        (a process with fewer steps feeds fully masked ones), so collectives match.
        """
        group = self.feeder.next_group(max_steps)
        n_local = 0 if group is None else group[2]
        n = agree(n_local, "min" if self.mode == ModeKeys.TRAIN else "max")
        if n == 0:
            return None
        batch, mask, _ = group if group is not None else self.feeder.empty_group(0)
        if n_local > n:
            batch, mask = jax.tree.map(lambda x: x[:n], (batch, mask))
        elif n_local < n:
            batch, mask = self.feeder.pad_group(batch, mask, n)
        return _host_args(self.mode, batch, mask), mask, n

    def chief_hooks(self) -> list[SessionRunHook]:
        """The spec's training_chief_hooks, on process 0 only (as tf.estimator)."""
        return list(self.session.parts.chief_hooks) if jax.process_index() == 0 else []

    def call_host_fns(self, host: Any, n: int, first_step: int | None = None) -> None:
        """Call each host function once per step of the loop, in step order, with numpy
        arrays (``host[k][j]`` is tensor j of host call k, stacked ``[n, ...]``). With
        several processes the tensors of all of them are gathered and process 0 calls.
        In TRAIN (``first_step`` given) with ``experimental_host_call_every_n_steps`` = k,
        only the steps whose global step (before the step) is a multiple of k call."""
        host_calls = self.session.parts.host_calls
        if not host_calls:
            return
        host = to_host(host)  # every process takes part in the gather; process 0 calls
        if jax.process_index() != 0:
            return
        every = getattr(
            getattr(self.est.config, "tpu_config", None), "experimental_host_call_every_n_steps", 1
        )
        for i in range(n):
            if first_step is not None and every > 1 and (first_step + i) % every:
                continue  # TPUConfig.experimental_host_call_every_n_steps: only steps n*k
            for hc, tensors in zip(host_calls, host, strict=True):
                hc.call([np.asarray(t[i]) for t in tensors])
