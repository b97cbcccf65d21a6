"""One phase's runtime: the compiled loop, the state (restored or initialised), the key."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspec.engine.fn_args import call_with_declared
from jaxspec.engine.mesh import put_replicated, put_stacked, replicated
from jaxspec.engine.spec_parts import SpecParts
from jaxspec.engine.steps import StepEngine
from jaxspec.loop.checkpoints import CheckpointStore
from jaxspec.loop.warm_start import WarmStartSettings, warm_start
from jaxspec.mode_keys import ModeKeys

_log = logging.getLogger("jaxspec")


def _strong(x: Any) -> Any:
    """A leaf as a strongly typed array (a weak type would break the scan carry)."""
    if isinstance(x, jax.Array) and not getattr(x, "weak_type", False):
        return x
    arr = np.asarray(x)
    return arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype), copy=False)


def _signature(args: tuple[Any, ...]) -> Any:
    leaves, treedef = jax.tree.flatten(args)
    return treedef, tuple((tuple(np.shape(x)), str(getattr(x, "dtype", type(x)))) for x in leaves)


class Session:
    """The state and compiled loop of one train/evaluate/predict call.

    Args:
      engine: the StepEngine of this call (model_fn is traced once per input shape).
      mode: ModeKeys value.
      init_fn: the Estimator's init_fn (arguments by name: rng, features, labels,
        params, config).
      store: the model_dir's CheckpointStore.
      first_batch: the first step's host ``(features, labels)`` (for init_fn and tracing).
      checkpoint_path: restore this checkpoint step directory instead of the latest.
    """

    def __init__(self, engine: StepEngine, mode: str, init_fn: Callable[..., Any] | None, store: CheckpointStore,
                 first_batch: Any, seed: int | None, checkpoint_path: str | None = None) -> None:
        self.engine = engine
        self.mode = mode
        self.mesh = engine.mesh
        self.init_key, self.step_key = jax.random.split(jax.random.PRNGKey(seed or 0))
        self._loop = {ModeKeys.TRAIN: engine.train_loop, ModeKeys.EVAL: engine.eval_loop,
                      ModeKeys.PREDICT: engine.predict_loop}[mode]()
        self._compiled: dict[Any, Any] = {}
        self._init_fn = init_fn
        self._first_batch = first_batch
        self.store = store
        self.checkpoint_path = checkpoint_path
        self.restored_step = self._checkpoint_step(checkpoint_path)
        self.abstract_state = self._abstract_state()
        self.state: Any = None
        self.global_step = self.restored_step or 0
        self.warm_start: WarmStartSettings | None = None

    def _checkpoint_step(self, checkpoint_path: str | None) -> int | None:
        if checkpoint_path is None:
            return self.store.latest_step()
        name = os.path.basename(os.path.normpath(os.fspath(checkpoint_path)))
        if not name.isdigit():
            raise ValueError(f"checkpoint_path {checkpoint_path!r} is not a checkpoint step directory.")
        return int(name)

    def _call_init(self) -> Any:
        if self._init_fn is None:
            return {}
        features, labels = self._first_batch
        return call_with_declared(self._init_fn, dict(
            rng=self.init_key, features=features, labels=labels,
            params=self.engine.params[self.mode], config=self.engine.config))

    def _abstract_state(self) -> Any:
        shapes = jax.eval_shape(lambda: jax.tree.map(jnp.asarray, self._call_init()))
        sharding = replicated(self.mesh)
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes)

    @property
    def parts(self) -> SpecParts:
        """The SpecParts of the first trace (hooks, host functions, scaffold)."""
        return self.engine.parts[self.mode]

    def trace(self, *batch_args: Any) -> None:
        """Trace (not compile) the loop for these host inputs, so the spec's hooks and
        scaffold exist before the first step; compiling waits for the first real loop."""
        args = (self.abstract_state, jax.ShapeDtypeStruct((), jnp.int32), self.step_key)
        args += tuple(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), batch_args))
        self._loop.trace(*args)

    def _compile(self, state: Any, *batch_args: Any) -> Any:
        args = (state, jnp.zeros((), jnp.int32), self.step_key, *batch_args)
        sig = _signature(args)
        if sig not in self._compiled:
            self._compiled[sig] = self._loop.lower(*args).compile()
        return self._compiled[sig]

    def create_state(self) -> None:
        """Restore the checkpoint, or run init_fn, then warm start (``self.warm_start``),
        then the spec's Scaffold.init_fn (as TF, both only when nothing is restored)."""
        if self.checkpoint_path is not None:
            self.state = self.store.restore_path(self.checkpoint_path, self.abstract_state)
            _log.info("Restored state from %s.", self.checkpoint_path)
            return
        if self.restored_step is not None:
            self.state = self.store.restore(self.restored_step, self.abstract_state)
            _log.info("Restored state from checkpoint at global step %d.", self.restored_step)
            return
        state = self._as_traced(self._call_init())
        if self.warm_start is not None:
            state = self._as_traced(warm_start(state, self.warm_start))
        scaffold = self.parts.scaffold
        if scaffold is not None and scaffold.init_fn is not None:
            state = self._as_traced(scaffold.apply(state))
        self.state = put_replicated(state, self.mesh)

    def _as_traced(self, state: Any) -> Any:
        """``state``'s leaves in the tree the loop was compiled for (pytree metadata such
        as a TrainState's ``tx`` must be the very objects seen at trace time).

        Raises:
          ValueError: the tree structure or a leaf shape differs from the traced state.
        """
        leaves, treedef = jax.tree.flatten(state)
        want = jax.tree.structure(self.abstract_state)
        if treedef.num_leaves != want.num_leaves:
            raise ValueError(f"the state has {treedef.num_leaves} leaves where {want.num_leaves} were expected.")
        for leaf, spec in zip(leaves, jax.tree.leaves(self.abstract_state), strict=True):
            if tuple(np.shape(leaf)) != tuple(spec.shape):
                raise ValueError(f"a state leaf has shape {np.shape(leaf)} where {spec.shape} was expected.")
        return jax.tree.unflatten(want, [_strong(x) for x in leaves])

    def run(self, *host_args: Any) -> Any:
        """Run one compiled loop on host arrays stacked ``[N, B, ...]``."""
        device_args = put_stacked(host_args, self.mesh, self.engine.broadcast)
        step = jnp.asarray(self.global_step, jnp.int32)
        compiled = self._compile(self.abstract_state, *device_args)
        return compiled(self.state, step, self.step_key, *device_args)
