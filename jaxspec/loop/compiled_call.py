"""One call's compiled loops and state: the loop lowered and compiled per input shape, the
state restored or initialised, the global step and the random key."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspec._fn_args import call_with_declared
from jaxspec._trees import shape_signature
from jaxspec.engine.mesh import (
    cores_per_replica,
    partitioned_input_specs,
    put_stacked,
    replicated,
    stacked_batch_sharding,
)
from jaxspec.engine.multihost import agree
from jaxspec.engine.partitioning import put_state, state_shardings
from jaxspec.engine.spec_parts import SpecParts
from jaxspec.engine.steps import StepEngine
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.warm_start import warm_start
from jaxspec.mode_keys import ModeKeys
from jaxspec.store.checkpoints import SavedCheckpoint, as_saved

_log = logging.getLogger("jaxspec")


def _strong(x: Any) -> Any:
    """A leaf as a strongly typed array (a weak type would break the scan carry)."""
    if isinstance(x, jax.Array) and not getattr(x, "weak_type", False):
        return x
    arr = np.asarray(x)
    return arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype), copy=False)


def previous_treedef_matches(previous: Any, current: Any) -> bool:
    """Same tree, up to the identity of objects in its metadata (closures such as an
    optax transformation's functions are new objects on each init_fn call)."""
    strip = lambda t: re.sub(r" at 0x[0-9a-fA-F]+", "", str(t))  # noqa: E731
    return previous.num_leaves == current.num_leaves and strip(previous) == strip(current)


class ModeCache:
    """What one Estimator keeps per mode across calls: the StepEngine (whose first trace
    holds the spec's hooks, host functions and scaffold), the jitted loop, and the
    loop lowered and compiled per input shape signature. A later call with the same
    signature neither traces model_fn nor compiles."""

    def __init__(self, engine: StepEngine, mode: str) -> None:
        self.engine = engine
        self.mode = mode
        self._loop: Any = None
        self.lowered: dict[Any, Any] = {}
        self.compiled: dict[Any, Any] = {}

    def loop(self, state_shardings: Any) -> Any:
        """The jitted loop, built on first use for the state's shardings (the loop keeps
        the state's layout; they are the same on every call of one Estimator)."""
        if self._loop is None:
            self.engine.state_shardings = state_shardings
            self._loop = {
                ModeKeys.TRAIN: self.engine.train_loop,
                ModeKeys.EVAL: self.engine.eval_loop,
                ModeKeys.PREDICT: self.engine.predict_loop,
            }[self.mode]()
        return self._loop


@dataclasses.dataclass(frozen=True)
class LiveState:
    """The state a call ended with, kept on the Estimator so that the next call need not
    read it back from disk: valid while the checkpoint of ``step`` on disk is the very
    directory it was when recorded (``identity``: inode and mtime), on the same mesh."""

    step: int
    state: Any
    mesh: Any
    identity: tuple[int, int]


def checkpoint_identity(path: str) -> tuple[int, int] | None:
    """(inode, mtime in ns) of a checkpoint step directory, or None when it is absent.
    Orbax writes a checkpoint under a temporary name and renames it when complete, so a
    checkpoint rewritten by anyone gets a new identity."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _keys(plan: RunPlan) -> tuple[Any, Any]:
    """init_fn's and the steps' random keys, split from ``PRNGKey(tf_random_seed or 0)``
    once per Estimator and seed (each call starts from the same keys, as a TF graph
    built with the same seed)."""
    keys = plan.compile_cache.setdefault("keys", {})
    seed = plan.seed or 0
    if seed not in keys:
        keys[seed] = tuple(jax.random.split(jax.random.PRNGKey(seed)))
    return keys[seed]


def mode_cache(plan: RunPlan, make_engine: Any) -> ModeCache:
    """The plan's ModeCache for its mode (created with ``make_engine()`` on first use)."""
    caches = plan.compile_cache.setdefault("modes", {})
    if plan.mode not in caches:
        caches[plan.mode] = ModeCache(make_engine(), plan.mode)
    return caches[plan.mode]


class CompiledCall:
    """The compiled loop and the state of one train/evaluate/predict call (or export).

    Args:
      plan: the call's RunPlan (mode, init_fn, checkpoint store, seed, warm start and
        the Estimator's compile cache, which keeps compiled executables and the state's
        tree across calls).
      cache: the Estimator's ModeCache for this mode (engine, lowered and compiled loops).
      first_batch: the first step's host ``(features, labels)`` (for init_fn and tracing).
      checkpoint_path: restore this checkpoint step directory instead of the latest.
    """

    def __init__(
        self, plan: RunPlan, cache: ModeCache, first_batch: Any, checkpoint_path: str | None = None
    ) -> None:
        self.engine = engine = cache.engine
        self.mode = plan.mode
        self.mesh = engine.mesh
        self.init_key, self.step_key = _keys(plan)
        self._cache = cache
        self._shared = plan.compile_cache
        self._init_fn = plan.init_fn
        self._first_batch = first_batch
        self.store = plan.store
        self.checkpoint_path = checkpoint_path
        self.restored_step = self._checkpoint_step(checkpoint_path)
        self.abstract_state = self._abstract_state()
        self.state_shardings = jax.tree.map(lambda s: s.sharding, self.abstract_state)
        self._loop = cache.loop(self.state_shardings)
        self.state: Any = None
        self.global_step = self.restored_step or 0
        self._device_step: tuple[int, Any] | None = None  # (value, the same on the devices)
        # As tf.estimator: warm start only when training from nothing.
        self.warm_start = plan.warm_start if plan.mode == ModeKeys.TRAIN else None

    def _checkpoint_step(self, checkpoint_path: str | None) -> int | None:
        if checkpoint_path is None:
            self.store.refresh()  # another writer may have added a checkpoint
            return self.store.latest_step()
        name = os.path.basename(os.path.normpath(os.fspath(checkpoint_path)))
        if not name.isdigit():
            raise ValueError(f"checkpoint_path {checkpoint_path!r} is not a checkpoint step directory.")
        return int(name)

    @staticmethod
    def _init_caller(init_fn: Any, params: Any, config: Any) -> Any:
        """``(rng, features, labels) -> state``: init_fn called with the arguments it declares
        (``rng``, ``features``, ``labels``, ``params``, ``config``); ``{}`` without an init_fn.
        It holds only these, not the call that made it (it may be kept across calls)."""

        def init(rng: Any, features: Any, labels: Any) -> Any:
            if init_fn is None:
                return {}
            args = dict(rng=rng, features=features, labels=labels, params=params, config=config)
            return call_with_declared(init_fn, args)

        return init

    def _call_init(self) -> Any:
        """init_fn's state from ``init_key`` and the first step's host features and labels."""
        return self._init_caller(self._init_fn, self.engine.params[self.mode], self.engine.config)(
            self.init_key, *self._first_batch
        )

    def _initial_state(self) -> Any:
        """init_fn's state, compiled with ``jax.jit`` (a flax ``init`` run op by op is
        slow) with the state's shardings as output shardings, so each device computes and
        holds only its shards (born sharded).

        The jitted init takes the key and the first step's features and labels as
        arguments and is kept in the Estimator's compile cache per mode, mesh and first
        batch signature, so a later call (an evaluate on a model_dir without checkpoint)
        neither traces init_fn nor lowers it again: like model_fn, init_fn is traced once,
        and values it closes over are read at that trace. An init_fn that needs concrete
        features or labels (host-side logic on their values) is jitted with them as
        constants on every call instead; one that cannot be traced at all runs as is.
        """
        treedef = jax.tree.structure(self.abstract_state)
        inits = self._shared.setdefault("jitted_inits", {})
        key = (self.mode, self.engine, self.mesh, shape_signature(self._first_batch))
        features, labels = self._first_batch
        errors = (jax.errors.JAXTypeError, jax.errors.JAXIndexError, TypeError)
        if inits.get(key) is not False:
            if key not in inits:
                init = self._init_caller(self._init_fn, self.engine.params[self.mode], self.engine.config)
                flat = lambda rng, f, lab: jax.tree.leaves(init(rng, f, lab))  # noqa: E731
                inits[key] = jax.jit(flat, out_shardings=jax.tree.leaves(self.state_shardings))
            try:
                return jax.tree.unflatten(treedef, inits[key](self.init_key, features, labels))
            except errors:
                inits[key] = False  # needs concrete inputs: the per-call jit below from now on
        flat_init = lambda: jax.tree.leaves(self._call_init())  # noqa: E731
        shardings = jax.tree.leaves(self.state_shardings)
        try:
            return jax.tree.unflatten(treedef, jax.jit(flat_init, out_shardings=shardings)())
        except errors:
            return self._call_init()

    def _abstract_state(self) -> Any:
        """The state's shapes, from init_fn traced abstractly once per first-batch shape
        signature (and on or off the mesh). When they match the previous call's, that
        call's tree (and its pytree metadata, such as a TrainState's ``tx``) is reused,
        so its compiled executables still fit."""
        key = (shape_signature(self._first_batch), self.mesh is None)
        known = self._shared.setdefault("abstract_states", {})
        if key in known:
            return known[key]
        shapes = jax.eval_shape(lambda: jax.tree.map(jnp.asarray, self._call_init()))
        # Off the mesh the state lives on this process's first device (a checkpoint
        # written by a mesh of several processes is then restored locally); on the mesh
        # it is replicated, or laid out over 'core' by partition_rules / flax metadata.
        shardings = jax.tree.leaves(state_shardings(shapes, self.engine.partition_rules, self.mesh))
        leaves = [
            jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh)
            for s, sh in zip(jax.tree.leaves(shapes), shardings, strict=True)
        ]
        treedef = jax.tree.structure(shapes)
        previous = self._shared.get("state")
        if (
            previous is not None
            and [(x.shape, x.dtype) for x in jax.tree.leaves(previous)]
            == [(x.shape, x.dtype) for x in leaves]
            and previous_treedef_matches(jax.tree.structure(previous), treedef)
        ):
            treedef = jax.tree.structure(previous)
        state = jax.tree.unflatten(treedef, leaves)
        self._shared["state"] = known[key] = state
        return state

    @property
    def parts(self) -> SpecParts:
        """The SpecParts of the first trace (hooks, host functions, scaffold)."""
        return self.engine.parts[self.mode]

    def _input_specs(self, batch_args: tuple[Any, ...]) -> Any:
        """Per-leaf PartitionSpecs of the batch arguments when TPUConfig's
        input_partition_dims splits them over 'core' (None otherwise)."""
        dims = getattr(getattr(self.engine.config, "tpu_config", None), "input_partition_dims", None)
        if dims is None or self.engine.broadcast or cores_per_replica(self.mesh) == 1:
            return None
        return partitioned_input_specs(batch_args, dims)

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
        if input_specs is None:
            batch = jax.tree.map(spec, batch_args)
        else:
            batch = jax.tree.map(
                lambda x, p: spec(x, stacked_batch_sharding(self.mesh, p)), batch_args, input_specs
            )
        return (self.abstract_state, step, self.step_key, *batch)

    def trace(self, steps: int, *batch_args: Any) -> None:
        """Lower the loop for ``steps`` steps shaped like ``batch_args`` (one step,
        stacked), so the spec's hooks and scaffold exist before the first step runs; the
        lowering is compiled when a loop of that shape first runs."""
        specs = self._specs(steps, batch_args)
        sig = shape_signature(specs[3:])
        if sig not in self._cache.compiled and sig not in self._cache.lowered:
            self._cache.lowered[sig] = self._loop.lower(*specs)

    def _compile(self, batch_args: tuple[Any, ...]) -> Any:
        """The executable for these batch shapes, kept across calls of the same Estimator
        (model_fn is traced once per mode and shape signature; XLA compiles once)."""
        sig = shape_signature(batch_args)
        compiled = self._cache.compiled.get(sig)
        if compiled is None:
            lowered = self._cache.lowered.pop(sig, None) or self._loop.lower(*self._specs(None, batch_args))
            compiled = self._cache.compiled[sig] = lowered.compile()
        return compiled

    def create_state(self) -> None:
        """Restore the checkpoint, or run init_fn, then warm start (``self.warm_start``),
        then the spec's Scaffold.init_fn (as TF, both only when nothing is restored).
        A checkpoint that is the one the previous call ended with is not read again: that
        call's state, still in memory, is used (``remember``)."""
        if self._reuse_live_state():
            self.state = self._shared["live"].state
            return
        if self.checkpoint_path is not None:
            self.state = self.store.restore_path(self.checkpoint_path, self.abstract_state)
            _log.info("Restored state from %s.", self.checkpoint_path)
            self.remember(self.restored_step, restored=True)
            return
        if self.restored_step is not None:
            self.state = self.store.restore(self.restored_step, self.abstract_state)
            _log.info("Restored state from checkpoint at global step %d.", self.restored_step)
            self.remember(self.restored_step, restored=True)
            return
        state = self._as_traced(self._initial_state())
        if self.warm_start is not None:
            state = self._as_traced(warm_start(state, self.warm_start))
        scaffold = self.parts.scaffold
        if scaffold is not None and scaffold.init_fn is not None:
            state = self._as_traced(scaffold.apply(state))
        self.state = put_state(state, self.state_shardings)

    def _checkpoint_dir(self, step: int) -> str:
        return os.path.normpath(self.store.path(step))

    def _reuse_live_state(self) -> bool:
        """Whether the checkpoint this call restores is the previous call's state, still
        in memory (same step, same directory on disk, same mesh). Every process must
        agree, or none reuses it (a restore is collective)."""
        live = self._shared.get("live")
        ok = (
            live is not None
            and live.step == self.restored_step
            and live.mesh is self.mesh
            and (
                self.checkpoint_path is None
                or os.path.normpath(os.path.abspath(self.checkpoint_path)) == self._checkpoint_dir(live.step)
            )
            and checkpoint_identity(self._checkpoint_dir(live.step)) == live.identity
        )
        return agree(1 if ok else 0, "min") == 1

    def remember(self, step: int, restored: bool = False, saved: SavedCheckpoint | None = None) -> None:
        """Keep ``self.state`` as the state of checkpoint ``step`` for the next call (when
        that checkpoint is in this model_dir); otherwise forget any kept state. A state
        just ``restored`` from that checkpoint already holds replica 0's copies, and so
        does ``saved.saved`` when ``saved`` (the call's last save) was of this state."""
        identity = checkpoint_identity(self._checkpoint_dir(step))
        if identity is None or self.state is None or (self.mesh is not None and jax.process_count() > 1):
            self._shared.pop("live", None)  # several processes restore (collectively) instead
            return
        if self.mesh is None or restored:
            state = self.state
        elif saved is not None and saved.source is self.state:
            state = saved.saved  # saved just now: already replica 0's copies
        else:
            state = as_saved(self.state)
        self._shared["live"] = LiveState(step, state, self.mesh, identity)

    def _as_traced(self, state: Any) -> Any:
        """``state``'s leaves in the tree the loop was compiled for (pytree metadata such
        as a TrainState's ``tx`` must be the very objects seen at trace time).

        Raises:
          ValueError: the tree structure or a leaf shape differs from the traced state.
        """
        leaves, treedef = jax.tree.flatten(state)
        want = jax.tree.structure(self.abstract_state)
        if treedef.num_leaves != want.num_leaves:
            raise ValueError(
                f"the state has {treedef.num_leaves} leaves where {want.num_leaves} were expected."
            )
        for leaf, spec in zip(leaves, jax.tree.leaves(self.abstract_state), strict=True):
            if tuple(np.shape(leaf)) != tuple(spec.shape):
                raise ValueError(f"a state leaf has shape {np.shape(leaf)} where {spec.shape} was expected.")
        return jax.tree.unflatten(want, [_strong(x) for x in leaves])

    def run(self, *host_args: Any) -> Any:
        """Run one compiled loop on host arrays stacked ``[N, B, ...]`` from the current
        state and global step (asynchronously: JAX returns before the devices finish)."""
        return self.dispatch(self.state, self.global_step, *host_args)

    def dispatch(self, state: Any, global_step: int, *host_args: Any) -> Any:
        """Run one compiled loop from ``state`` at ``global_step`` (which may be the
        not yet computed outputs of the previous loop)."""
        specs = self._input_specs(host_args)
        device_args = put_stacked(host_args, self.mesh, self.engine.broadcast, specs)
        if self._device_step is None or self._device_step[0] != global_step:
            self._device_step = (global_step, jax.device_put(np.int32(global_step), replicated(self.mesh)))
        out = self._compile(device_args)(state, self._device_step[1], self.step_key, *device_args)
        if self.mode == ModeKeys.TRAIN:  # the loop returns the step after it, on the devices
            steps = int(np.shape(jax.tree.leaves(host_args)[0])[0])
            self._device_step = (global_step + steps, out[1])
        return out
