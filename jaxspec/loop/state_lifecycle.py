"""One call's state lifecycle: the abstract state, the state restored from a checkpoint
or made by init_fn (jitted, born sharded), warm start, the spec's Scaffold, and the state
kept in memory between calls of one Estimator."""

from __future__ import annotations

import logging
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxspec._fn_args import call_with_declared
from jaxspec._trees import shape_signature
from jaxspec.engine.multihost import agree
from jaxspec.engine.partitioning import init_context, put_state, state_shardings
from jaxspec.engine.steps import StepEngine
from jaxspec.loop.call_cache import EstimatorCache, LiveState
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.warm_start import warm_start
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.scaffold import Scaffold
from jaxspec.store import paths
from jaxspec.store.checkpoints import as_saved

_log = logging.getLogger("jaxspec")


def _strong(x: Any) -> Any:
    """A leaf as a strongly typed array (a weak type would break the scan carry)."""
    if isinstance(x, jax.Array) and not getattr(x, "weak_type", False):
        return x
    arr = np.asarray(x)
    return arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype), copy=False)


def _device_copy(x: Any) -> Any:
    """A new buffer with ``x``'s values and sharding (``x`` itself when not an array)."""
    return jax.device_put(x, x.sharding, may_alias=False) if isinstance(x, jax.Array) else x


def previous_treedef_matches(previous: Any, current: Any) -> bool:
    """Same tree, up to the identity of objects in its metadata (closures such as an
    optax transformation's functions are new objects on each init_fn call)."""
    strip = lambda t: re.sub(r" at 0x[0-9a-fA-F]+", "", str(t))  # noqa: E731
    return previous.num_leaves == current.num_leaves and strip(previous) == strip(current)


def checkpoint_identity(path: str) -> tuple[Any, ...] | None:
    """(inode, mtime in ns) of a checkpoint step directory, or None when it is absent.
    Orbax writes a checkpoint under a temporary name and renames it when complete, so a
    checkpoint rewritten by anyone gets a new identity. In an object store: the
    generation of its commit file, which Orbax writes last (``paths.identity``)."""
    return paths.identity(path, "commit_success.txt")


class StateLifecycle:
    """The state of one train/evaluate/predict call (or export): which checkpoint it
    restores, its abstract tree and shardings, the state itself and the global step.

    The one owner of the call's state: ``state`` and ``global_step`` change only
    through its transitions, ``create_state`` (restored, kept from the previous call, or
    made by init_fn), ``advance`` (a training loop accounted for) and ``finish`` (kept
    for the next call). ``state`` is the state at ``global_step``, or None while a loop
    dispatched ahead holds it (donated): the HookRunner's session reads it from here,
    so hooks see exactly this.

    Args:
      plan: the call's RunPlan (mode, init_fn, checkpoint store, seed, warm start and
        the Estimator's cache, which keeps jitted init_fns, the state's tree and the
        last call's state across calls).
      engine: the mode's StepEngine (init_fn's params and config, partition rules, mesh).
      first_batch: the first step's host ``(features, labels)``: init_fn's shapes.
      checkpoint_path: restore this checkpoint step directory instead of the latest.
    """

    def __init__(
        self, plan: RunPlan, engine: StepEngine, first_batch: Any, checkpoint_path: str | None = None
    ) -> None:
        self.engine = engine
        self.mode = plan.mode
        self.mesh = engine.mesh
        self._shared: EstimatorCache = plan.compile_cache
        self.init_key, self.step_key = self._shared.keys_for(plan.seed)
        self._init_fn = plan.init_fn
        self.store = plan.store
        self.checkpoint_path = checkpoint_path
        self.restored_step = self._checkpoint_step(checkpoint_path)
        self.abstract_state = self._abstract_state(first_batch)
        self.state_shardings = jax.tree.map(lambda s: s.sharding, self.abstract_state)
        self._state: Any = None
        self._global_step = self.restored_step or 0
        # As tf.estimator: warm start only when training from nothing.
        self.warm_start = plan.warm_start if plan.mode == ModeKeys.TRAIN else None

    @property
    def state(self) -> Any:
        """The state pytree at ``global_step`` (on the devices), or None: not created
        yet, or given (donated) to a training loop dispatched ahead."""
        return self._state

    @property
    def global_step(self) -> int:
        """The global step of ``state``: the restored checkpoint's (0 without one), then
        the end of the last training loop accounted for."""
        return self._global_step

    def advance(self, out: Any, steps: int, donated: bool) -> None:
        """A training loop of ``steps`` steps, from ``global_step``, is accounted for:
        ``out`` is what it returned (a TrainLoopOut, its ``state`` the state after it).
        With ``donated`` a loop dispatched ahead has taken that state (its buffers are
        gone), so ``state`` becomes None until the next ``advance``.

        Raises:
          ValueError: ``steps`` < 1.
        """
        if steps < 1:
            raise ValueError(f"a training loop runs at least one step, got steps={steps}.")
        self._global_step += int(steps)
        self._state = None if donated else out.state

    def finish(self) -> None:
        """The call ended at ``global_step`` with its checkpoint on disk: keep ``state``
        for the next call of this Estimator (``remember``), which then reads no disk."""
        self.remember(self._global_step)

    def _checkpoint_step(self, checkpoint_path: str | None) -> int | None:
        if checkpoint_path is None:
            self.store.refresh()  # another writer may have added a checkpoint
            if self.mode == ModeKeys.TRAIN:  # may be a node-local checkpoint (RunConfig's local tier)
                return self.store.resume_step()
            return self.store.latest_step(collective=True)  # every process looks, each at its own files
        name = paths.basename(checkpoint_path)
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
            with init_context():  # nnx: sharding metadata without eager sharding
                return call_with_declared(init_fn, args)

        return init

    def _call_init(self, first_batch: Any) -> Any:
        """init_fn's state from ``init_key`` and the first step's host features and labels."""
        return self._init_caller(self._init_fn, self.engine.params[self.mode], self.engine.config)(
            self.init_key, *first_batch
        )

    def _initial_state(self, first_batch: Any) -> Any:
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
        inits = self._shared.jitted_inits
        key = (self.mode, self.engine, self.mesh, shape_signature(first_batch))
        features, labels = first_batch
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
        flat_init = lambda: jax.tree.leaves(self._call_init(first_batch))  # noqa: E731
        shardings = jax.tree.leaves(self.state_shardings)
        try:
            return jax.tree.unflatten(treedef, jax.jit(flat_init, out_shardings=shardings)())
        except errors:
            return self._call_init(first_batch)

    def _abstract_state(self, first_batch: Any) -> Any:
        """The state's shapes, from init_fn traced abstractly once per first-batch shape
        signature (and on or off the mesh). When they match the previous call's, that
        call's tree (and its pytree metadata, such as a TrainState's ``tx``) is reused,
        so its compiled executables still fit."""
        key = (shape_signature(first_batch), self.mesh is None)
        known = self._shared.abstract_states
        if key in known:
            return known[key]
        shapes = jax.eval_shape(lambda: jax.tree.map(jnp.asarray, self._call_init(first_batch)))
        # Off the mesh the state lives on this process's first device (a checkpoint
        # written by a mesh of several processes is then restored locally); on the mesh
        # it is replicated, or laid out over 'core' by partition_rules / flax metadata.
        shardings = jax.tree.leaves(state_shardings(shapes, self.engine.partition_rules, self.mesh))
        leaves = [
            jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh)
            for s, sh in zip(jax.tree.leaves(shapes), shardings, strict=True)
        ]
        treedef = jax.tree.structure(shapes)
        previous = self._shared.last_abstract_state
        if (
            previous is not None
            and [(x.shape, x.dtype) for x in jax.tree.leaves(previous)]
            == [(x.shape, x.dtype) for x in leaves]
            and previous_treedef_matches(jax.tree.structure(previous), treedef)
        ):
            treedef = jax.tree.structure(previous)
        state = jax.tree.unflatten(treedef, leaves)
        self._shared.last_abstract_state = known[key] = state
        return state

    def create_state(self, first_batch: Any, scaffold: Scaffold | None) -> None:
        """Restore the checkpoint, or run init_fn on ``first_batch`` (the first step's
        host ``(features, labels)``), then warm start (``self.warm_start``), then
        ``scaffold.init_fn`` (the spec's; as TF, both only when nothing is restored).
        A checkpoint that is the one the previous call ended with is not read again: that
        call's state, still in memory, is used (``remember``)."""
        if self._reuse_live_state():  # collective: every process asks
            live = self._shared.live
            assert live is not None  # reused only when there is one
            self._state = live.state
            if self.mode == ModeKeys.TRAIN:
                # Training donates this state to its first loop: the kept copy ends here
                # (the call remembers its own final state). An open predict generator may
                # still read it: then training takes a copy.
                if self._shared.readers:
                    self._state = jax.tree.map(_device_copy, self.state)
                self._shared.live = None
            return
        if self.checkpoint_path is not None:
            self._state = self.store.restore_path(self.checkpoint_path, self.abstract_state)
            _log.info("Restored state from %s.", self.checkpoint_path)
            self.remember(self._global_step, restored=True)  # the step of checkpoint_path
            return
        if self.restored_step is not None:
            self._state = self.store.restore(self.restored_step, self.abstract_state)
            _log.info("Restored state from checkpoint at global step %d.", self.restored_step)
            self.remember(self.restored_step, restored=True)
            return
        state = self._as_traced(self._initial_state(first_batch))
        if self.warm_start is not None:
            state = self._as_traced(warm_start(state, self.warm_start))
        if scaffold is not None and scaffold.init_fn is not None:
            state = self._as_traced(scaffold.apply(state))
        self._state = put_state(state, self.state_shardings)

    def _checkpoint_dir(self, step: int) -> str:
        return paths.normalize(self.store.path(step))

    def _reuse_live_state(self) -> bool:
        """Whether the checkpoint this call restores is the previous call's state, still
        in memory (same step, same directory on disk, same mesh). Every process must
        agree, or none reuses it (a restore is collective)."""
        live = self._shared.live
        ok = (
            live is not None
            and live.step == self.restored_step
            and live.mesh is self.mesh
            and (
                self.checkpoint_path is None
                or paths.absolute(self.checkpoint_path) == self._checkpoint_dir(live.step)
            )
            and checkpoint_identity(self._checkpoint_dir(live.step)) == live.identity
        )
        return agree(1 if ok else 0, "min") == 1

    def remember(self, step: int, restored: bool = False) -> None:
        """Keep ``self.state`` as the state of checkpoint ``step`` for the next call (when
        that checkpoint is in this model_dir); otherwise forget any kept state. On the mesh
        the kept state holds replica 0's copies (``as_saved``, what a restore gives); a
        state just ``restored`` from that checkpoint holds them already."""
        identity = checkpoint_identity(self._checkpoint_dir(step))
        if restored and self.mode == ModeKeys.TRAIN:
            identity = None  # training donates the restored state to its first loop
        if identity is None or self.state is None or (self.mesh is not None and jax.process_count() > 1):
            self._shared.live = None  # several processes restore (collectively) instead
            return
        state = self.state if self.mesh is None or restored else as_saved(self.state)
        self._shared.live = LiveState(step, state, self.mesh, identity)

    def _as_traced(self, state: Any) -> Any:
        """``state``'s leaves in the tree the loop was compiled for (pytree metadata such
        as a TrainState's ``tx`` must be the very objects seen at trace time).

        Raises:
          ValueError: the tree structure or a leaf shape differs from the traced state.
        """
        leaves, treedef = jax.tree.flatten(state)
        want = jax.tree.structure(self.abstract_state)
        wanted = len(jax.tree.leaves(self.abstract_state))
        if len(leaves) != wanted:
            raise ValueError(f"the state has {len(leaves)} leaves where {wanted} were expected.")
        for leaf, spec in zip(leaves, jax.tree.leaves(self.abstract_state), strict=True):
            if tuple(np.shape(leaf)) != tuple(spec.shape):
                raise ValueError(f"a state leaf has shape {np.shape(leaf)} where {spec.shape} was expected.")
        return jax.tree.unflatten(want, [_strong(x) for x in leaves])
