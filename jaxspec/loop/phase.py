"""What train, evaluate and predict share: input_fn, feeder, engine, session, host calls."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxspec.engine.fn_args import call_with_declared
from jaxspec.engine.steps import StepEngine
from jaxspec.loop.feeder import StepFeeder
from jaxspec.loop.inputs import iterate_batches
from jaxspec.loop.session import Session
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.hooks import SessionRunHook


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

    def start(self, input_fn: Any, checkpoint_path: str | None = None) -> bool:
        """Prepare the phase; False when input_fn gives no data at all."""
        est = self.est
        result = call_with_declared(input_fn, dict(mode=self.mode, params=est._input_params(self.mode), config=est.config))
        batches = iterate_batches(result, self.mode)
        if self.mode == ModeKeys.PREDICT:
            batches = ((features, None) for features, _ in batches)
        replicas = 1 if self.mesh is None else self.mesh.size
        batch_size = est._input_params(self.mode).get("batch_size") if self.mesh is not None else None
        self.feeder = StepFeeder(batches, self.mode, replicas, est._input_pipeline(), batch_size)
        first = self.feeder.next_step()
        if first is None:
            return False
        self.feeder.push_back(first)
        engine = StepEngine(est._model_fn, {self.mode: est._model_params(self.mode)}, est.config, self.mesh)
        self.session = Session(engine, self.mode, est._init_fn, self.store, first[0],
                               est.config.tf_random_seed, checkpoint_path)
        stacked = jax.tree.map(lambda x: x[None], _host_args(self.mode, *first))
        self.session.trace(*stacked)
        return True

    def next_group(self, max_steps: int) -> tuple[tuple[Any, ...], np.ndarray, int] | None:
        """The next stacked host arguments for the loop, their mask and step count."""
        group = self.feeder.next_group(max_steps)
        if group is None:
            return None
        batch, mask, n = group
        return _host_args(self.mode, batch, mask), mask, n

    def chief_hooks(self) -> list[SessionRunHook]:
        """The spec's training_chief_hooks, on process 0 only (as tf.estimator)."""
        return list(self.session.parts.chief_hooks) if jax.process_index() == 0 else []

    def call_host_fns(self, host: Any, n: int) -> None:
        """Call each host function once per step of the loop, in step order, with numpy
        arrays (``host[k][j]`` is tensor j of host call k, stacked ``[n, ...]``)."""
        host_calls = self.session.parts.host_calls
        if not host_calls:
            return
        host = jax.device_get(host)
        for i in range(n):
            for hc, tensors in zip(host_calls, host, strict=True):
                hc.call([np.asarray(t[i]) for t in tensors])
