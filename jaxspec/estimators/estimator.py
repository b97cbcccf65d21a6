"""Estimator: train, evaluate, predict and export one model_fn (``tf.estimator.Estimator``)."""

from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import functools
import inspect
import logging
import os
import tempfile
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any, ParamSpec, TypeAlias, TypeVar, cast

import numpy as np
from jax.sharding import PartitionSpec

from jaxspec._fn_args import check_declared_args
from jaxspec._trees import named_leaves
from jaxspec.compilation_cache import ensure_compilation_cache
from jaxspec.config.cluster import EVALUATOR, maybe_initialize, run_config_task
from jaxspec.config.run_config import RunConfig
from jaxspec.config.warm_start_settings import WarmStartSettings, as_settings
from jaxspec.engine.partitioning import check_rules
from jaxspec.estimators._model_fn import (
    ModelFnCaller,
    ModelFnSpec,
    estimator_spec_check,
    verify_model_fn_args,
)
from jaxspec.hooks.checkpoint import CheckpointSaverListener
from jaxspec.loop.call_cache import EstimatorCache
from jaxspec.loop.console import call_output, quiet_libraries
from jaxspec.loop.evaluate import run_evaluate
from jaxspec.loop.export_source import export_source
from jaxspec.loop.plan import RunPlan
from jaxspec.loop.predict import run_predict
from jaxspec.loop.train import run_train
from jaxspec.mode_keys import ModeKeys
from jaxspec.spec.fn_types import ArrayLike, Hooks, InitFn, InputFn, ModelFn, PyTree
from jaxspec.store.checkpoints import EMPTY_STATE_KEY, CheckpointStore
from jaxspec.store.local_tier import TieredCheckpointStore

_log = logging.getLogger("jaxspec")
GLOBAL_STEP_NAME = "global_step"

INIT_FN_ARGS = ("rng", "features", "labels", "params", "config")

P = ParamSpec("P")
R = TypeVar("R")
# ``partition_rules``: ``(regex over a state leaf's key path, PartitionSpec over 'core')``.
PartitionRules: TypeAlias = Sequence[tuple[str, PartitionSpec]]
# A receiver fn: ``() -> ServingInputReceiver`` (or TRAIN/EVAL's SupervisedInputReceiver).
ReceiverFn: TypeAlias = Callable[[], object]


def resolve_model_dir(config: RunConfig | None, model_dir: str | os.PathLike[str] | None) -> RunConfig:
    """The config with its model_dir settled, as tf.estimator does.

    A non-empty ``model_dir`` must equal ``config.model_dir`` when both are set; with
    neither set (or ``model_dir=''``), a fresh temporary directory is used and a warning
    logged. Returns ``config`` itself when nothing changes, else ``config.replace(...)``
    (same class).

    Raises:
      ValueError: the two model_dir values differ.
    """
    config = RunConfig() if config is None else config
    model_dir = os.fspath(model_dir) if model_dir is not None else None
    if model_dir:
        if config.model_dir is not None and config.model_dir != model_dir:
            raise ValueError(
                f"model_dir is set both in the Estimator ({model_dir!r}) and in its RunConfig "
                f"({config.model_dir!r}), to different values."
            )
        return config if config.model_dir == model_dir else config.replace(model_dir=model_dir)
    if config.model_dir is None:
        model_dir = tempfile.mkdtemp(prefix="jaxspec_")
        _log.warning("Using a temporary directory as model_dir: %s", model_dir)
        return config.replace(model_dir=model_dir)
    return config


# Predict generators still open: closed at interpreter exit, while the modules their
# clean-up needs (threads, logging, contextlib) still exist; left to the garbage
# collector after module teardown, their closing printed "Exception ignored" tracebacks.
_open_generators: weakref.WeakSet[Generator[object]] = weakref.WeakSet()


@atexit.register
def _close_open_generators() -> None:
    for gen in list(_open_generators):
        gen.close()


# The public methods that are calls with progress output: each runs in one console
# scope (``jaxspec.loop.console.call_output``), whose route the progress hooks draw on.
CALL_METHODS = frozenset({"train", "evaluate", "predict"})


def _quietly(fn: Callable[P, R], output: bool = False) -> Callable[P, R]:
    """``fn`` run inside ``quiet_libraries()``; a generator function has each of its
    resumptions (and its closing) run inside it, since a predict generator reads the
    checkpoint at its first ``next()``. Generators left open are closed at exit.
    ``output``: ``fn`` is a call with progress output, run inside ``call_output()``
    too (a generator from its first ``next()`` to its end or closing, between its
    resumptions as well)."""
    if inspect.isgeneratorfunction(fn):

        def resumed(*args: P.args, **kwargs: P.kwargs) -> Generator[object]:
            inner = cast("Generator[object]", fn(*args, **kwargs))
            with call_output() if output else contextlib.nullcontext():
                try:
                    while True:
                        with quiet_libraries():
                            try:
                                item = next(inner)
                            except StopIteration:
                                return
                        yield item
                finally:
                    with quiet_libraries():
                        inner.close()

        @functools.wraps(fn)
        def generator(*args: P.args, **kwargs: P.kwargs) -> R:
            gen = resumed(*args, **kwargs)
            _open_generators.add(gen)
            return cast(R, gen)

        return generator

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with quiet_libraries(), call_output() if output else contextlib.nullcontext():
            return fn(*args, **kwargs)

    return call


def quiet_public_methods(cls: type) -> type:
    """Run ``__init__`` and every public method ``cls`` defines inside
    ``quiet_libraries()``: the INFO records of Orbax (absl), JAX and TensorFlow that a
    call causes stay hidden, whatever the program's logging, and a warning logged before
    any handler exists goes through the same stand-in as during train (``WARNING:jaxspec:``).
    ``train``, ``evaluate`` and ``predict`` (``CALL_METHODS``) also run inside the
    console scope of their call (``call_output()``: where its progress goes, and
    jaxspec's INFO records shown there), entered here and nowhere in the loop.
    Applied to Estimator and, through ``__init_subclass__``, to every subclass."""
    for name, value in list(vars(cls).items()):
        if (name == "__init__" or not name.startswith("_")) and inspect.isfunction(value):
            setattr(cls, name, _quietly(value, output=name in CALL_METHODS))
    return cls


class Estimator:
    """Trains, evaluates, predicts and exports a model_fn, as ``tf.estimator.Estimator``.

    ``model_fn`` takes, by name, any of ``features, labels, mode, params, config, state,
    rng, global_step`` (``features`` is required) and returns an EstimatorSpec (or a
    TPUEstimatorSpec/NPUEstimatorSpec). JAX differences: variables are an explicit
    ``state`` pytree, whose first value comes from ``init_fn`` (arguments by name: any of
    ``rng, features, labels, params, config``; ``features``/``labels`` are the first
    batch, numpy); the TRAIN spec's ``train_op`` is the new state; ``rng`` is a key folded
    from ``config.tf_random_seed``, the global step and the replica index; ``global_step``
    is an int32 scalar, the step count before this step. Runs on one device with
    ``jax.jit``.

    Unlike tf.estimator, which rebuilt its graph on every call, model_fn is traced once
    per Estimator, mode and input shape signature: later calls reuse the compiled loops
    and the spec's parts, so hooks (and host_call functions) created inside model_fn are
    the same objects on every call; init_fn is likewise jitted once per first-batch
    signature. The state a call ends with stays in memory; the next
    call reads the checkpoint from disk only when it is not that state's (another step,
    ``checkpoint_path``, or another writer). JAX's persistent compilation cache is turned
    on at construction (``jaxspec.enable_compilation_cache``).

    Args:
      model_fn: the model function (see above).
      model_dir: directory for checkpoints (``model_dir/checkpoints/<step>``), event
        files and eval results (str or path-like); when neither it nor
        ``config.model_dir`` is set, a temporary directory (a warning is logged).
      config: a RunConfig.
      params: dict passed to model_fn (deep-copied).
      warm_start_from: a model_dir / checkpoint path or a WarmStartSettings; used only
        when model_dir has no checkpoint (TypeError for another type).
      init_fn: builds the first state; required when model_fn declares ``state``.
      partition_rules: None, or ordered ``(regex, jax.sharding.PartitionSpec)`` pairs
        laying state leaves out over the ``'core'`` axis of TPUEstimator's model-parallel
        mesh (not in tf.estimator, whose variables were placed by the graph): the first
        regex that ``re.search``es a leaf's key path (``params/dense_0/kernel``) gives its
        spec; flax partitioning metadata is honoured too; other leaves are replicated. On
        one device (Estimator) the rules are only checked. A bad spec raises ValueError
        naming the leaf, its shape and the rule when the state is first built.

    Calls are checked as tf.estimator does: labels returned by input_fn but not taken by
    model_fn, or a model_fn result that is not an EstimatorSpec (a TPUEstimatorSpec is
    not one), raise ValueError when train/evaluate/predict trace model_fn.

    Raises:
      ValueError: config is not a RunConfig (checked first), model_fn is missing, the
        two model_dir values conflict, model_fn lacks ``features`` or declares names not
        listed above (all named), init_fn declares a name not listed above, params is
        given and model_fn takes none, or model_fn declares ``state`` and init_fn is None.
      TypeError: partition_rules is not a list of (regex, PartitionSpec) pairs.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        quiet_public_methods(cls)

    def __init__(
        self,
        model_fn: ModelFn | None = None,
        model_dir: str | None = None,
        config: RunConfig | None = None,
        params: dict[str, Any] | None = None,
        warm_start_from: str | os.PathLike[str] | WarmStartSettings | None = None,
        init_fn: InitFn | None = None,
        partition_rules: PartitionRules | None = None,
    ) -> None:
        if config is not None and not isinstance(config, RunConfig):
            raise ValueError(f"config must be a jaxspec.RunConfig, got {type(config).__name__}.")
        if model_fn is None:
            raise ValueError("model_fn is required.")
        self._warm_start_settings = as_settings(warm_start_from)
        if "state" in verify_model_fn_args(model_fn, params) and init_fn is None:
            raise ValueError(
                "model_fn declares `state` but no init_fn is given: pass init_fn to build the first state."
            )
        config = resolve_model_dir(config, model_dir)
        if init_fn is not None:
            check_declared_args(init_fn, INIT_FN_ARGS, "init_fn")
        self._model_fn: ModelFn = ModelFnCaller(model_fn, self._check_spec, self._model_fn_needs_params)
        self._model_dir = cast(str, config.model_dir)  # resolve_model_dir set it
        self._config = config
        self._params = copy.deepcopy(params or {})
        self._init_fn = init_fn
        self._partition_rules = partition_rules
        check_rules(partition_rules)
        self._store: CheckpointStore | None = None
        ensure_compilation_cache()  # a later process on this model_dir skips XLA compiles
        self._compile_cache = EstimatorCache()  # compiled loops and the state tree, kept across calls

    #: Whether model_fn must declare ``params`` (TPUEstimator's rule, checked per call).
    _model_fn_needs_params = False

    def _check_spec(self, spec: object, mode: str, params: dict[str, Any]) -> ModelFnSpec:
        """Which specs this Estimator accepts from model_fn (called at each trace).

        Estimator: an EstimatorSpec or NPUEstimatorSpec; not a TPUEstimatorSpec, as in
        tf.estimator. Subclasses override this.

        Raises:
          ValueError: model_fn returned something else.
        """
        return estimator_spec_check(spec, mode, params)

    # -- properties (tf.estimator's) -------------------------------------------------
    @property
    def model_dir(self) -> str:
        """The model directory."""
        return self._model_dir

    @property
    def config(self) -> RunConfig:
        """The RunConfig (its model_dir equals ``model_dir``)."""
        return self._config

    @property
    def params(self) -> dict[str, Any]:
        """A copy of the params dict."""
        return copy.deepcopy(self._params)

    @property
    def model_fn(self) -> ModelFn:
        """The model_fn as the engine calls it: a wrapper taking every argument by name
        (the user's function is its ``user_model_fn``), as tf.estimator's property
        returns a wrapper too."""
        return self._model_fn

    # -- the three phases ------------------------------------------------------------
    def train(
        self,
        input_fn: InputFn,
        hooks: Hooks = None,
        steps: int | None = None,
        max_steps: int | None = None,
        saving_listeners: Iterable[CheckpointSaverListener] | None = None,
    ) -> Estimator:
        """Train, as ``tf.estimator.Estimator.train``; returns self.

        ``steps`` counts from the current global step; ``max_steps`` is absolute (if the
        latest checkpoint is already there, nothing runs). With neither, training runs
        until input_fn's data ends. A checkpoint is saved at the last step, and (as tf.estimator's
        CheckpointSaverHook) when training starts from no checkpoint, at step 0.

        Each compiled loop donates the state it replaces (JAX's ``donate_argnums``, where
        TF updated variables in place), so the devices hold one state: a hook that keeps
        ``session.state`` values past its call copies them.

        Raises:
          ValueError: steps and max_steps both given, or either <= 0; on TF_CONFIG's
            ``evaluator`` task, which must not write checkpoints (as tf.estimator).
          NanLossDuringTrainingError: a step's loss is NaN (the checkpoint on disk is
            the last good one).
          SystemExit: (status 143, that of a process ended by SIGTERM) after a SIGTERM in
            the main thread: the running loop finishes and the final checkpoint is
            written first. A SIGTERM handler the program installed itself is called
            instead; an ignored SIGTERM stays ignored. tf.estimator has no SIGTERM
            handling (the process dies with 143, unsaved).
        """
        task = run_config_task(self._config.cluster)  # not config.task_type: JAX must not start yet
        if task is not None and task[0] == EVALUATOR:
            raise ValueError(
                "Estimator.train: this process is TF_CONFIG's 'evaluator' task; it evaluates the "
                "checkpoints the chief and workers write. Call train_and_evaluate in every task."
            )
        run_train(self._run_plan(ModeKeys.TRAIN), input_fn, hooks, steps, max_steps, saving_listeners)
        return self

    def evaluate(
        self,
        input_fn: InputFn,
        steps: int | None = None,
        hooks: Hooks = None,
        checkpoint_path: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Evaluate, as ``tf.estimator.Estimator.evaluate``.

        Runs ``steps`` batches, or to the end of input_fn's data when None; a final partial
        batch is padded and masked so every example counts once. Returns a dict of Python
        scalars (arrays for vector metrics): ``loss`` (tf.estimator's: the mean over batches of
        model_fn's loss, each batch counting once, a short last batch's loss over its real
        rows; on TPUEstimator's mesh exact for a loss that is a mean over the replica's
        rows with any input pipeline but BROADCAST, see ``jaxspec.loop.short_batch``; a
        model_fn whose loss is not a plain mean, or under BROADCAST, takes the mean over
        the rows weighted by ``jaxspec.metrics.current_padding_mask()``), every metric, and ``global_step``; also
        written to ``model_dir/eval`` (``eval_<name>``).

        Raises:
          ValueError: steps <= 0, or input_fn gives no data.
        """
        return run_evaluate(self._run_plan(ModeKeys.EVAL), input_fn, steps, hooks, checkpoint_path, name)

    def predict(
        self,
        input_fn: InputFn,
        predict_keys: str | Sequence[str] | None = None,
        hooks: Hooks = None,
        checkpoint_path: str | None = None,
        yield_single_examples: bool = True,
    ) -> Iterator[Any]:
        """Yield predictions, as ``tf.estimator.Estimator.predict``.

        A generator: input_fn runs at the first ``next()``. Yields one dict of numpy
        values per example (or per batch with ``yield_single_examples=False``); padding
        rows of a final partial batch are never yielded.

        Raises:
          ValueError: a predict_key is not among the predictions.
        """
        # A generator function: the plan (and its batch-size checks) waits for next(), as TF.
        plan = self._run_plan(ModeKeys.PREDICT)
        yield from run_predict(plan, input_fn, predict_keys, hooks, checkpoint_path, yield_single_examples)

    def eval_dir(self, name: str | None = None) -> str:
        """Where ``evaluate(name=name)`` writes its event files: ``model_dir/eval`` or
        ``model_dir/eval_<name>`` (``tf.estimator.Estimator.eval_dir``); early stopping
        hooks read it."""
        from jaxspec.loop.evaluate import eval_dir

        return eval_dir(self.model_dir, name)

    def export_saved_model(
        self,
        export_dir_base: str,
        serving_input_receiver_fn: ReceiverFn | None,
        assets_extra: dict[str, str] | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        experimental_mode: str = ModeKeys.PREDICT,
        jax_artifact: bool | None = None,
        warmup_requests: int | Sequence[Mapping[str, ArrayLike]] | None = None,
        validate: bool | str = True,
        validation_tolerances: Mapping[str, float] | None = None,
    ) -> bytes | None:
        """Write a SavedModel through ``tf_bridge``, as ``Estimator.export_saved_model``.

        model_fn runs in ``experimental_mode`` on the features (and, in TRAIN/EVAL,
        labels) of ``serving_input_receiver_fn``'s receiver; the state of the latest
        checkpoint (or ``checkpoint_path``) becomes the SavedModel's variables. PREDICT
        (tag ``serve``): one signature per export_outputs head, as TF. TRAIN/EVAL (tags
        ``train``/``eval``, receivers from ``tf_bridge.build_supervised_input_receiver_fn_from_input_fn``):
        see ``experimental_export_all_saved_models``. The batch dimension stays symbolic.
        Needs TensorFlow; ``tf_bridge`` documents the graph and the export record.

        The SavedModel holds the state leaves the exported mode reads (found from the
        traced model_fn, ``jaxspec.export.slim``) and ``global_step``: a PREDICT export
        leaves out optimizer slots and counters, as tf.estimator's PREDICT graph never
        built them. ``jax_artifact`` (not a tf.estimator argument; None: the RunConfig's
        ``export_jax_artifact``) also writes ``jax/``, the serving signatures as
        ``jax.export`` functions that ``jaxspec.export.load_serving`` runs without TF.

        Serving additions (not tf.estimator arguments; see docs/serving.md):
        ``warmup_requests`` writes ``assets.extra/tf_serving_warmup_requests`` for TF
        Serving to replay: an int N (1 to 1000) sends N copies of the receiver's example
        features (zeros) per serving signature, a list of feature dicts (feature key ->
        one row's value, no batch axis) those rows; Classify/Regress/Predict requests
        follow each signature's method. ``validate`` (True, ``'warn'``, False): a PREDICT
        export runs the written SavedModel with TF and model_fn with JAX on the same rows
        (the warmup rows, else the receiver's example) and writes
        ``assets.extra/jaxspec_validation.json``; a difference beyond tolerance raises
        ``tf_bridge.export.validation.ExportValidationError`` (True) or logs (``'warn'``).
        ``validation_tolerances``: dtype name -> relative tolerance (float32 1e-5).

        Returns:
          The timestamped export directory (``export_dir_base/<unix seconds>``) as bytes.

        With several processes every process calls it (the checkpoint is read
        collectively); process 0 writes the SavedModel and the others get None.

        Raises:
          ValueError: no serving_input_receiver_fn, an unknown experimental_mode, or no
            checkpoint to export (as TF).
          tf_bridge.ExportCompatibilityError: the installed TensorFlow cannot run what
            this JAX writes (found at export time, before the directory is renamed).
          ValueError: warmup_requests above 1000, rows that do not fit the receiver's
            features, or a bad ``validate`` (nothing is written).
          tf_bridge.ExportValidationError: validation failed with ``validate=True``; no
            export directory is left.
          ImportError: warmup_requests without ``tensorflow-serving-api`` (``tf`` extra).
        """
        if not serving_input_receiver_fn:
            raise ValueError("export_saved_model needs a serving_input_receiver_fn.")
        return self.experimental_export_all_saved_models(
            export_dir_base,
            {experimental_mode: serving_input_receiver_fn},
            assets_extra=assets_extra,
            as_text=as_text,
            checkpoint_path=checkpoint_path,
            jax_artifact=jax_artifact,
            warmup_requests=warmup_requests,
            validate=validate,
            validation_tolerances=validation_tolerances,
        )

    def experimental_export_all_saved_models(
        self,
        export_dir_base: str,
        input_receiver_fn_map: Mapping[str, ReceiverFn | None],
        assets_extra: dict[str, str] | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        jax_artifact: bool | None = None,
        warmup_requests: int | Sequence[Mapping[str, ArrayLike]] | None = None,
        validate: bool | str = True,
        validation_tolerances: Mapping[str, float] | None = None,
    ) -> bytes | None:
        """One SavedModel with a meta graph per mode, sharing one set of variables, as
        ``tf.estimator.Estimator.experimental_export_all_saved_models``.

        ``input_receiver_fn_map`` maps ModeKeys to receiver fns (TRAIN/EVAL: returning a
        ``tf_bridge.SupervisedInputReceiver``). Meta graphs are written TRAIN, EVAL,
        PREDICT, as TF. TRAIN (tag ``train``): signature ``train``
        (``tensorflow/supervised/training``), outputs ``loss`` and ``predictions[/key]``;
        the new state model_fn returns is assigned to the variables (and global_step
        incremented) by the op in the ``saved_model_train_op`` collection, so running it
        in TF is one real training step. EVAL (tag ``eval``): signature ``eval``
        (``tensorflow/supervised/eval``), outputs ``loss``, ``predictions[/key]``,
        ``metrics/<name>/value`` and ``metrics/<name>/update_op`` (metric states in
        local variables, merged per update_op, as TF's streaming metrics). host_call and
        hooks are not exported. Differences from TF: JAX computes integers as int32
        (TF's ``tf.argmax`` gives int64), and TRAIN exports carry eval_metric_ops only
        in EVAL. The shared variables are the state leaves any exported mode reads
        (TRAIN: all of them, since its train_op assigns each); ``jax_artifact``,
        ``warmup_requests``, ``validate``, ``validation_tolerances``: see
        ``export_saved_model`` (the last three act on the PREDICT meta graph only).

        Returns:
          The timestamped export directory as bytes.

        Raises:
          ValueError: no mode of the map has a receiver fn, or no checkpoint (as TF).
          tf_bridge.ExportCompatibilityError: see ``export_saved_model``.
        """
        # tf_bridge imports TensorFlow: imported here so that `import jaxspec` does not.
        from tf_bridge.export.estimator_modes import export_modes, write_estimator_modes

        # The serving checks live beside the writer that uses them (TensorFlow side too).
        from tf_bridge.export.validation import check_validate

        # The warmup check: as above, in tf_bridge, which imports TensorFlow.
        from tf_bridge.export.warmup import check_warmup_requests

        check_warmup_requests(warmup_requests)
        check_validate(validate, validation_tolerances)
        plan = self._run_plan(ModeKeys.PREDICT, for_export=True)
        with quiet_libraries():  # Orbax (absl) and TF log while restoring and writing
            modes, examples = export_modes(input_receiver_fn_map)
            source = export_source(dataclasses.replace(plan, mode=modes[0]), modes, examples, checkpoint_path)
            if source is None:  # processes other than 0 write nothing
                return None
            if jax_artifact is None:
                jax_artifact = self._config.export_jax_artifact
            return write_estimator_modes(
                source,
                modes,
                export_dir_base,
                input_receiver_fn_map,
                assets_extra,
                as_text,
                jax_artifact,
                warmup_requests=warmup_requests,
                validate=validate,
                validation_tolerances=validation_tolerances,
            )

    # -- checkpoints -----------------------------------------------------------------
    def latest_checkpoint(self) -> str | None:
        """Path of the newest checkpoint in model_dir, or None; read from disk at each
        call, as TF (another process, such as the trainers of an evaluator, may write)."""
        store = self._checkpoint_store()
        store.refresh()
        step = store.latest_step()
        return None if step is None else store.path(step)

    def get_variable_names(self) -> list[str]:
        """Names of the state leaves in the latest checkpoint (for a flax TrainState
        ``params/params/Dense_0/kernel``, ``opt_state/...``, ``step``), and ``global_step`` (the checkpoint's step), as tf.estimator lists it.

        Raises:
          ValueError: model_dir has no checkpoint.
        """
        names = [name for name, _ in named_leaves(self._latest_metadata()) if name != EMPTY_STATE_KEY]
        return names if GLOBAL_STEP_NAME in names else names + [GLOBAL_STEP_NAME]

    def _latest_metadata(self) -> PyTree:
        store = self._checkpoint_store()
        step = store.latest_step()
        if step is None:
            raise ValueError(f"no checkpoint in {self.model_dir}.")
        return store.metadata(step)

    def get_variable_value(self, name: str) -> np.ndarray | np.generic:
        """The value (numpy) of state leaf ``name`` (or ``global_step``) in the latest
        checkpoint (``Estimator.get_variable_value``); a typed PRNG key leaf
        (``jax.random.key``) is given as its key data (uint32), as TF gives a variable's
        value.

        Unlike tf.estimator's local file read, in a multi-process run this is a collective
        (Orbax reads a checkpoint with every process): call it on every process, not on the
        chief alone, which would wait for the others forever.

        Raises:
          ValueError: no checkpoint, or no leaf of that name.
        """
        store = self._checkpoint_store()
        values: dict[str, np.ndarray | np.generic] = dict(store.read())
        values.setdefault(
            GLOBAL_STEP_NAME, np.int64(cast(int, store.latest_step()))
        )  # the step is the checkpoint's
        if name not in values:
            raise ValueError(f"{name!r} is not in the checkpoint; names are {sorted(values)}.")
        return values[name]

    # -- what subclasses change --------------------------------------------------------
    def _checkpoint_store(self) -> CheckpointStore:
        if self._store is None:
            maybe_initialize(self._config.cluster, self._config.heartbeat_timeout_secs)  # Orbax asks JAX
            c = self._config
            with quiet_libraries():  # Orbax logs through absl, whose first record configures the root
                self._store = (
                    CheckpointStore(self._model_dir, c.keep_checkpoint_max, c.keep_checkpoint_every_n_hours)
                    if c.local_checkpoint_dir is None
                    else TieredCheckpointStore(
                        self._model_dir,
                        c.keep_checkpoint_max,
                        c.keep_checkpoint_every_n_hours,
                        c.local_checkpoint_dir,
                        cast(int, c.local_save_checkpoints_steps),  # RunConfig sets both or neither
                    )
                )
        return self._store

    def _run_plan(self, mode: str, for_export: bool = False) -> RunPlan:
        """The RunPlan of one ``mode`` call (``for_export``: of an export's restore, off
        the mesh). The one place an Estimator describes how its calls run; subclasses
        override it. Estimator: one device, one step per loop, ``params`` as given."""
        return RunPlan(
            mode=mode,
            model_fn=self._model_fn,
            init_fn=self._init_fn,
            config=self._config,
            store=self._checkpoint_store(),
            input_params=self._params,
            model_params=self._params,
            warm_start=self._warm_start_settings,
            partition_rules=self._partition_rules,
            compile_cache=self._compile_cache,
        )


quiet_public_methods(Estimator)
