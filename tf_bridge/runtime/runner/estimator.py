"""``tf_bridge.Estimator``: tf.estimator.Estimator for TF1-style model_fns on TF >= 2.16.

The model_fn is unmodified TensorFlow 1 code (``tf.compat.v1`` variables, optimizers,
``tf.compat.v1.metrics``), run in graph mode by TensorFlow itself. Checkpoints are TF's
(``model.ckpt-N`` + the ``checkpoint`` file, written by ``tf.compat.v1.train.Saver``), so a
model_dir written by TF 2.15's ``tf.estimator.Estimator`` is resumed, evaluated and
exported as it is, and the other way round.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, TypeAlias

import numpy as np
import tensorflow as tf

from jaxspec.estimators.estimator import resolve_model_dir
from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.warm_start import WarmStartSettingsBase
from jaxspec.spec.fn_types import InputFn, PyTree
from tf_bridge.export.saved_model import modes_in_order
from tf_bridge.export.warmup import WarmupRequests, check_warmup_requests
from tf_bridge.runtime.run_config import RunConfig
from tf_bridge.runtime.runner import evaluate as _evaluate
from tf_bridge.runtime.runner import model_fn_saved_model as _export
from tf_bridge.runtime.runner import predict as _predict
from tf_bridge.runtime.runner import train as _train
from tf_bridge.runtime.runner.inputs import call_model_fn, verify_model_fn_args
from tf_bridge.runtime.runner.plan import TFRunPlan, TrainPlan
from tf_bridge.runtime.runner.predict_cache import PredictCache
from tf_bridge.runtime.runner_hooks import StopAfterNEvalsHook
from tf_bridge.runtime.spec import EstimatorSpec

_log = logging.getLogger("tf_bridge")


class WarmStartSettings(WarmStartSettingsBase):
    """Warm-start settings (``tf.estimator.WarmStartSettings``; fields, defaults and checks
    in ``jaxspec.rules.warm_start``): the fields are the arguments of
    ``tf.compat.v1.train.warm_start``, which does the work.

    Raises:
      ValueError: ``ckpt_to_initialize_from`` is empty.
    """

    __slots__ = ()


# ``warm_start_from``: a checkpoint, model_dir or SavedModel path, or WarmStartSettings.
WarmStartFrom: TypeAlias = str | bytes | os.PathLike[str] | WarmStartSettings | None


def as_warm_start_settings(warm_start_from: WarmStartFrom) -> WarmStartSettings | None:
    """None, a checkpoint/model_dir path, a SavedModel directory (its variables are used)
    or WarmStartSettings, as tf.estimator accepts.

    Raises:
      ValueError: any other type.
    """
    if warm_start_from is None:
        return None
    if isinstance(warm_start_from, (str, bytes, os.PathLike)):
        path = os.fsdecode(warm_start_from)
        if tf.io.gfile.exists(os.path.join(path, "variables", "variables.index")):
            return WarmStartSettings(os.path.join(path, "variables", "variables"))
        return WarmStartSettings(path)
    if isinstance(warm_start_from, WarmStartSettings):
        return warm_start_from
    raise ValueError(
        f"warm_start_from must be a path or a WarmStartSettings, got {type(warm_start_from).__name__}."
    )


def resolve_config(
    config: RunConfig | None,
    model_dir: str | os.PathLike[str] | None,
    config_type: type[RunConfig] = RunConfig,
) -> RunConfig:
    """The config, checked to be a ``config_type``, with model_dir settled by jaxspec's
    ``resolve_model_dir`` (tf.estimator's rule: the two must agree; neither set means a
    temporary directory).

    Raises:
      ValueError: config is not a ``config_type``, or two different model_dirs.
    """
    if config is None:
        config = config_type()
    if not isinstance(config, config_type):
        raise ValueError(f"config must be a tf_bridge {config_type.__name__}, got {type(config).__name__}.")
    return resolve_model_dir(config, os.fsdecode(model_dir) if model_dir else None)


def check_hooks(
    hooks: Iterable[tf.compat.v1.train.SessionRunHook] | None,
) -> list[tf.compat.v1.train.SessionRunHook]:
    """The hooks given to train/evaluate/predict as a list.

    Raises:
      TypeError: an entry is not a ``tf.compat.v1.train.SessionRunHook``.
    """
    hooks = list(hooks or [])
    for hook in hooks:
        if not isinstance(hook, tf.compat.v1.train.SessionRunHook):
            raise TypeError(f"hooks must be tf.compat.v1.train.SessionRunHook instances, got {hook!r}.")
    return hooks


def check_listeners(
    listeners: Iterable[tf.compat.v1.train.CheckpointSaverListener] | None,
) -> list[tf.compat.v1.train.CheckpointSaverListener]:
    """saving_listeners as a list.

    Raises:
      TypeError: an entry is not a ``tf.compat.v1.train.CheckpointSaverListener``.
    """
    listeners = list(listeners or [])
    for listener in listeners:
        if not isinstance(listener, tf.compat.v1.train.CheckpointSaverListener):
            raise TypeError(f"saving_listeners must be CheckpointSaverListener instances, got {listener!r}.")
    return listeners


# Members a subclass may override, as tf.estimator allowed (its global-step creator is
# ``_create_global_step`` here).
ALLOWED_OVERRIDES = frozenset(
    {
        "model_fn",
        "latest_checkpoint",
        "_create_global_step",
        "_create_and_assert_global_step",
        "_export_all_saved_models",
    }
)


def check_members_not_overridden(est: Estimator) -> None:
    """tf.estimator's rule for subclasses: a class outside tf_bridge that derives from a
    tf_bridge Estimator may not redefine the Estimator's members (``ALLOWED_OVERRIDES``
    excepted); tf_bridge's own subclasses (TPUEstimator, NPUEstimator) are exempt.

    Raises:
      ValueError: naming the overridden members.
    """
    cls = type(est)
    if cls.__module__.startswith("tf_bridge."):
        return
    base = next(c for c in cls.__mro__ if c.__module__.startswith("tf_bridge."))
    members = {m for m in dir(base) if not m.startswith("__")}
    overridden = sorted(
        m for m in (members & set(vars(cls))) - ALLOWED_OVERRIDES if getattr(base, m) is not getattr(cls, m)
    )
    if overridden:
        raise ValueError(
            f"{cls.__name__} overrides members of {base.__name__} ({', '.join(overridden)}); subclasses of "
            "an Estimator may not (tf.estimator's rule): pass a model_fn instead."
        )


def _check_steps(name: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}.")


class Estimator:
    """Trains, evaluates, predicts and exports a TF1-style model_fn
    (``tf.estimator.Estimator``, TF 2.15 behaviour) on TensorFlow >= 2.16.

    Args:
      model_fn: ``model_fn(features, labels, mode, params, config)`` (only ``features`` is
        required) returning a ``tf_bridge.EstimatorSpec``; it builds a TF graph
        (``tf.compat.v1`` variables, optimizers, metrics).
      model_dir: checkpoints (``model.ckpt-N``), event files, ``eval/``; a temporary
        directory when neither this nor ``config.model_dir`` is set.
      config: a ``tf_bridge.RunConfig`` (None: the default one).
      params: dict passed to model_fn and input_fn (deep-copied).
      warm_start_from: a checkpoint/model_dir path, a SavedModel directory, or
        ``WarmStartSettings``; used when model_dir has no checkpoint.

    Raises:
      ValueError: a subclass overriding Estimator members (checked first, as TF), config
        of another type, model_fn missing, conflicting model_dirs, model_fn arguments
        tf.estimator refuses, a bad warm_start_from.
    """

    _spec_types: tuple[type, ...] = (EstimatorSpec,)
    _config_type: type = RunConfig
    _skip_predict_input_check = False

    def __init__(
        self,
        model_fn: Callable[..., EstimatorSpec] | None,
        model_dir: str | os.PathLike[str] | None = None,
        config: RunConfig | None = None,
        params: dict[str, Any] | None = None,
        warm_start_from: WarmStartFrom = None,
    ) -> None:
        check_members_not_overridden(self)
        self._config = resolve_config(config, model_dir, self._config_type)
        if model_fn is None:
            raise ValueError("model_fn is required.")
        verify_model_fn_args(model_fn, params)
        self._model_fn = model_fn
        self._params = copy.deepcopy(params or {})
        self._model_dir = self._config.model_dir
        self._session_config = self._config.resolved_session_config()
        self._warm_start_settings = as_warm_start_settings(warm_start_from)
        self._predict_cache = PredictCache()

    @property
    def model_dir(self) -> str:
        """The model directory."""
        return self._model_dir

    @property
    def config(self) -> RunConfig:
        """A deep copy of the RunConfig."""
        return copy.deepcopy(self._config)

    @property
    def params(self) -> dict[str, Any]:
        """A deep copy of params."""
        return copy.deepcopy(self._params)

    @property
    def model_fn(self) -> Callable[..., EstimatorSpec]:
        """``model_fn(features, labels, mode, config)`` bound to this Estimator's params."""

        def public_model_fn(features: PyTree, labels: PyTree, mode: str, config: RunConfig) -> EstimatorSpec:
            return self._call_model_fn(features, labels, mode, config)

        return public_model_fn

    # -- hooks for subclasses -------------------------------------------------------------

    def _create_global_step(self, graph: tf.Graph) -> tf.Variable:
        """The int64 ``global_step`` variable (``tf.compat.v1.train.create_global_step``)."""
        return tf.compat.v1.train.create_global_step(graph)

    def _input_fn_params(self, mode: str) -> dict[str, Any]:
        """params as input_fn receives them in ``mode``."""
        return self.params

    def _call_model_fn(
        self, features: PyTree, labels: PyTree, mode: str, config: RunConfig, export: bool = False
    ) -> EstimatorSpec:
        """Call model_fn; return the EstimatorSpec the runner uses.

        Raises:
          ValueError: model_fn returned something other than a spec of this Estimator.
        """
        return call_model_fn(self._model_fn, features, labels, mode, self.params, config, self._spec_types)

    def _iterations_per_loop(self) -> int:
        """Training steps per loop (hooks run once per loop); 1 as in tf.estimator."""
        return 1

    def _run_plan(self, mode: str, export: bool = False, train: TrainPlan | None = None) -> TFRunPlan:
        """The plan of one call in ``mode`` (for an export: ``export=True``), the only
        thing the runner receives; subclasses change it through the hooks above."""
        config = self.config
        return TFRunPlan(
            mode=mode,
            config=config,
            session_config=self._session_config,
            create_global_step=self._create_global_step,
            model_fn=functools.partial(self._call_model_fn, mode=mode, config=config, export=export),
            input_params=self._input_fn_params(mode),
            warm_start=self._warm_start_settings,
            check_predict_input=not self._skip_predict_input_check,
            train=train or TrainPlan(iterations_per_loop=self._iterations_per_loop()),
            predict_cache=self._predict_cache if mode == ModeKeys.PREDICT and not export else None,
        )

    # -- checkpoints ------------------------------------------------------------------

    def latest_checkpoint(self) -> str | None:
        """The path of the newest checkpoint in model_dir (``model_dir/model.ckpt-N``), or None."""
        return tf.train.latest_checkpoint(self._model_dir)

    def _require_checkpoint(self) -> str:
        path = self.latest_checkpoint()
        if not path:
            raise ValueError(f"no checkpoint in model_dir {self._model_dir}; train first.")
        return path

    def get_variable_names(self) -> list[str]:
        """Names of the variables in the latest checkpoint.

        Raises:
          ValueError: model_dir has no checkpoint.
        """
        return [name for name, _ in tf.train.list_variables(self._require_checkpoint())]

    def get_variable_value(self, name: str) -> np.ndarray:
        """The value (numpy) of variable ``name`` in the latest checkpoint.

        Raises:
          ValueError: model_dir has no checkpoint.
        """
        return tf.train.load_variable(self._require_checkpoint(), name)

    # -- train / evaluate / predict ---------------------------------------------------------

    def train(
        self,
        input_fn: InputFn,
        hooks: Iterable[tf.compat.v1.train.SessionRunHook] | None = None,
        steps: int | None = None,
        max_steps: int | None = None,
        saving_listeners: Iterable[tf.compat.v1.train.CheckpointSaverListener] | None = None,
    ) -> Estimator:
        """Train until ``steps`` more steps, global step ``max_steps``, or the input's end
        (``tf.estimator.Estimator.train``). Returns self.

        Raises:
          ValueError: the task is an ``evaluator`` or ``ps`` (TF_CONFIG), both steps and
            max_steps, a non-positive one, saving_listeners without checkpoint saving;
            what model_fn / the spec raise.
          TypeError: a hook or listener of the wrong type.
          tf.compat.v1.train.NanLossDuringTrainingError: the loss became NaN.
        """
        if self._config.task_type in ("evaluator", "ps"):
            raise ValueError(
                f"train() on a {self._config.task_type!r} task: in a cluster, call "
                "tf_bridge.train_and_evaluate, which runs each task's part."
            )
        if steps is not None and max_steps is not None:
            raise ValueError("give steps or max_steps, not both.")
        _check_steps("steps", steps)
        _check_steps("max_steps", max_steps)
        if max_steps is not None and max_steps <= _train.load_global_step(self._model_dir):
            _log.info("Skipping training: the checkpoint is already at max_steps=%d.", max_steps)
            return self
        hooks = check_hooks(hooks)
        if steps is not None or max_steps is not None:
            hooks.append(tf.compat.v1.train.StopAtStepHook(steps, max_steps))
        loop_size = self._iterations_per_loop()
        last_step = max_steps
        if steps is not None and loop_size > 1:
            last_step = _train.load_global_step(self._model_dir) + steps
        plan = self._run_plan(ModeKeys.TRAIN, train=TrainPlan(last_step, loop_size))
        loss = _train.train_model(plan, input_fn, hooks, check_listeners(saving_listeners))
        _log.info("Loss for final step: %s.", loss)
        return self

    def eval_dir(self, name: str | None = None) -> str:
        """``model_dir/eval`` or ``model_dir/eval_<name>``: where evaluate writes summaries."""
        return os.path.join(self._model_dir, "eval" if not name else f"eval_{name}")

    def evaluate(
        self,
        input_fn: InputFn,
        steps: int | None = None,
        hooks: Iterable[tf.compat.v1.train.SessionRunHook] | None = None,
        checkpoint_path: str | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Evaluate the latest (or the given) checkpoint on ``steps`` batches or the whole
        input (``tf.estimator.Estimator.evaluate``).

        Returns:
          dict of metric name to value (numpy scalars/arrays as the session returns them),
          with ``loss`` (mean of the batch losses) and ``global_step``.

        Raises:
          ValueError: steps <= 0, a metric named ``loss``/``global_step``; what model_fn raises.
          TypeError: a hook of the wrong type.
        """
        hooks = check_hooks(hooks)
        if steps is not None:
            _check_steps("steps", steps)
            hooks.append(StopAfterNEvalsHook(num_evals=steps))
        if not checkpoint_path:
            checkpoint_path = self.latest_checkpoint()
            if not checkpoint_path:
                _log.info("No checkpoint in %s: evaluating freshly initialised variables.", self._model_dir)
        plan = self._run_plan(ModeKeys.EVAL)
        return _evaluate.run_evaluate(plan, input_fn, hooks, checkpoint_path, self.eval_dir(name))

    def predict(
        self,
        input_fn: InputFn,
        predict_keys: str | Sequence[str] | None = None,
        hooks: Iterable[tf.compat.v1.train.SessionRunHook] | None = None,
        checkpoint_path: str | None = None,
        yield_single_examples: bool = True,
    ) -> Iterator[Any]:
        """Yield predictions until the input ends (``tf.estimator.Estimator.predict``):
        one example at a time (a dict of numpy values for dict predictions), or whole
        batches with ``yield_single_examples=False``. Nothing runs before the first ``next``.

        Beyond tf.estimator (which rebuilt the graph and restored the checkpoint on every
        call): with a ``tf.data.Dataset`` input and no ``hooks``, the graph, session and
        restored variables are kept for the next call while the checkpoint is unchanged
        (``tf_bridge.runtime.runner.predict_cache``); model_fn then runs once, on placeholders of
        the dataset's shapes, and the dataset is read eagerly.

        Raises (at the first ``next``):
          ValueError: bad predict_keys, predictions of different batch sizes.
          TypeError: a hook of the wrong type.
        """
        hooks = check_hooks(hooks)
        if not checkpoint_path:
            checkpoint_path = self.latest_checkpoint()
            if not checkpoint_path:
                _log.info(
                    "No checkpoint in %s: predicting with freshly initialised variables.", self._model_dir
                )
        yield from _predict.run_predict(
            self._run_plan(ModeKeys.PREDICT),
            input_fn,
            predict_keys,
            hooks,
            checkpoint_path,
            yield_single_examples,
        )

    # -- export -----------------------------------------------------------------------------

    def export_saved_model(
        self,
        export_dir_base: str | bytes | os.PathLike[str],
        serving_input_receiver_fn: Callable[[], object] | None,
        assets_extra: dict[str, str] | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        experimental_mode: str = ModeKeys.PREDICT,
        warmup_requests: WarmupRequests = None,
    ) -> bytes:
        """Export the model in ``experimental_mode`` (PREDICT: tag ``serve``) as a SavedModel
        under ``export_dir_base/<timestamp>`` (``tf.estimator.Estimator.export_saved_model``).

        ``serving_input_receiver_fn`` returns a receiver (``tf_bridge.ServingInputReceiver``
        or ``TensorServingInputReceiver``); the signatures are one per export output.
        ``warmup_requests`` (not a tf.estimator argument): TF Serving warmup records in
        ``assets.extra/tf_serving_warmup_requests``, as ``jaxspec.Estimator.export_saved_model``
        writes them (an int N: N copies of the receiver's zero features per serving
        signature; a list of feature dicts: those rows).

        Returns:
          The export directory, as bytes.

        Raises:
          ValueError: no receiver function, no checkpoint, variables missing from it;
            warmup_requests above 1000 or rows that do not fit (no export is left).
          ImportError: warmup_requests without ``tensorflow-serving-api``.
        """
        if not serving_input_receiver_fn:
            raise ValueError("export_saved_model needs a serving_input_receiver_fn.")
        return self.experimental_export_all_saved_models(
            export_dir_base,
            {experimental_mode: serving_input_receiver_fn},
            assets_extra=assets_extra,
            as_text=as_text,
            checkpoint_path=checkpoint_path,
            warmup_requests=warmup_requests,
        )

    @property
    def export_savedmodel(self) -> NoReturn:
        """TF1's name, hidden on the v2 Estimator as in TF 2.15: reading it raises
        AttributeError (``hasattr`` is False on an instance, True on the class). The v1
        classes (``tf.compat.v1.estimator.Estimator``, TPUEstimator, ...) have the method.
        """
        raise AttributeError(
            "export_savedmodel is not on the v2 Estimator (as in TF 2.15): call export_saved_model, or use "
            "the v1 class tf.compat.v1.estimator.Estimator."
        )

    def experimental_export_all_saved_models(
        self,
        export_dir_base: str | bytes | os.PathLike[str],
        input_receiver_fn_map: Mapping[str, Callable[[], object] | None],
        assets_extra: dict[str, str] | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        warmup_requests: WarmupRequests = None,
    ) -> bytes:
        """One SavedModel with a metagraph per mode of ``input_receiver_fn_map``
        (tags: TRAIN ``train``, EVAL ``eval``, PREDICT ``serve``), variables from the
        first of TRAIN, EVAL, PREDICT. ``warmup_requests``: see ``export_saved_model``
        (PREDICT's signatures).

        Raises:
          ValueError: as export_saved_model; no valid mode in the map.
        """
        return self._export_all(
            export_dir_base,
            input_receiver_fn_map,
            assets_extra,
            as_text,
            checkpoint_path,
            warmup_requests=warmup_requests,
        )

    def _export_all(
        self,
        export_dir_base: str | bytes | os.PathLike[str],
        input_receiver_fn_map: Mapping[str, Callable[[], object] | None],
        assets_extra: dict[str, str] | None,
        as_text: bool,
        checkpoint_path: str | None,
        strip_default_attrs: bool = True,
        warmup_requests: WarmupRequests = None,
    ) -> bytes:
        check_warmup_requests(warmup_requests)
        receiver_fn_map = dict(input_receiver_fn_map)
        plans = {mode: self._run_plan(mode, export=True) for mode in modes_in_order(receiver_fn_map)}
        return _export.export_all(
            plans,
            os.fsdecode(export_dir_base),
            receiver_fn_map,
            assets_extra,
            as_text,
            self._export_checkpoint(checkpoint_path),
            strip_default_attrs,
            warmup_requests,
        )

    def _export_checkpoint(self, checkpoint_path: str | None) -> str:
        """The checkpoint an export restores: the given one, the latest, or (none in
        model_dir) the warm start's, as tf.estimator.

        Raises:
          ValueError: no checkpoint and no warm start.
        """
        checkpoint_path = checkpoint_path or self.latest_checkpoint()
        if checkpoint_path:
            return checkpoint_path
        if self._warm_start_settings is None:
            raise ValueError(
                f"export: no checkpoint in {self._model_dir}; train first or pass checkpoint_path."
            )
        checkpoint_path = self._warm_start_settings.ckpt_to_initialize_from
        if tf.io.gfile.isdir(checkpoint_path):
            checkpoint_path = tf.train.latest_checkpoint(checkpoint_path)
        return checkpoint_path
