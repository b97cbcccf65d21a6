"""Exporters for train_and_evaluate (``tf.estimator.LatestExporter`` and friends).

Each writes SavedModels through ``Estimator.export_saved_model`` (``tf_bridge``) into
``model_dir/export/<name>/<timestamp>``.
"""

from __future__ import annotations

import collections
import inspect
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from jaxspec.spec.fn_types import ArrayLike
from jaxspec.store import paths

_log = logging.getLogger("jaxspec")


class ExportingEstimator(Protocol):
    """What exporters and ``train_and_evaluate``'s driver use of an Estimator of either
    family (jaxspec's, or tf_bridge's for TF model_fns), called with tf.estimator's
    arguments."""

    @property
    def model_dir(self) -> str: ...

    @property
    def export_saved_model(self) -> Callable[..., bytes | None]:
        """``export_saved_model(export_dir_base, serving_input_receiver_fn, **kwargs)``."""

    @property
    def train(self) -> Callable[..., object]:
        """``train(input_fn, hooks=, max_steps=, saving_listeners=)``."""

    @property
    def evaluate(self) -> Callable[..., dict[str, Any]]:
        """``evaluate(input_fn, steps=, hooks=, checkpoint_path=, name=)``: the metrics."""


class Exporter:
    """Base class (``tf.estimator.Exporter``): ``export`` is called after each evaluation."""

    @property
    def name(self) -> str:
        """Directory name under ``model_dir/export``."""
        raise NotImplementedError

    def export(
        self,
        estimator: ExportingEstimator,
        export_path: str,
        checkpoint_path: str,
        eval_result: dict[str, Any],
        is_the_final_export: bool,
    ) -> bytes | None:
        """Export (or not); return the export directory as bytes, or None."""
        raise NotImplementedError


def _check_keep(exports_to_keep: int | None) -> None:
    if exports_to_keep is not None and exports_to_keep <= 0:
        raise ValueError("exports_to_keep must be a positive number or None.")


class _SavedModelExporter(Exporter):
    def __init__(
        self,
        name: str,
        serving_input_receiver_fn: Callable[[], object] | None,
        assets_extra: Mapping[str, str] | None = None,
        as_text: bool = False,
        exports_to_keep: int | None = 5,
        *,
        warmup_requests: int | Sequence[Mapping[str, ArrayLike]] | None = None,
        validate: bool | str = True,
    ) -> None:
        if not name:
            raise ValueError("an exporter needs a non-empty name.")
        _check_keep(exports_to_keep)
        self._name = name
        self._receiver_fn = serving_input_receiver_fn
        self._assets_extra, self._as_text, self._keep = assets_extra, as_text, exports_to_keep
        self._warmup_requests, self._validate = warmup_requests, validate

    @property
    def name(self) -> str:
        """Directory name under ``model_dir/export``."""
        return self._name

    def _write(self, estimator: ExportingEstimator, export_path: str, checkpoint_path: str) -> bytes | None:
        path = estimator.export_saved_model(
            export_path,
            self._receiver_fn,
            assets_extra=self._assets_extra,
            as_text=self._as_text,
            checkpoint_path=checkpoint_path,
            **self._serving_kwargs(),
        )
        self._garbage_collect(export_path)
        return path

    def _serving_kwargs(self) -> dict[str, object]:
        """The serving arguments that differ from their defaults: an Estimator whose
        export_saved_model lacks one (tf_bridge's takes no ``validate``) still works
        with an exporter that leaves it alone."""
        kwargs: dict[str, object] = {}
        if self._warmup_requests is not None:
            kwargs["warmup_requests"] = self._warmup_requests
        if self._validate is not True:
            kwargs["validate"] = self._validate
        return kwargs

    def _garbage_collect(self, export_path: str) -> None:
        if self._keep is None:
            return
        stamps = sorted(int(d) for d in paths.listdir(export_path) if d.isdigit())
        for stamp in stamps[: max(0, len(stamps) - self._keep)]:
            paths.rmtree(paths.join(export_path, str(stamp)))


class LatestExporter(_SavedModelExporter):
    """Exports after every evaluation and keeps the newest ``exports_to_keep``
    (``tf.estimator.LatestExporter``).

    Args:
      name: directory under ``model_dir/export``.
      serving_input_receiver_fn: as for ``export_saved_model``.
      assets_extra, as_text: as for ``export_saved_model``.
      exports_to_keep: how many exports to keep (5); None keeps all.
      warmup_requests, validate: keyword-only, as for ``export_saved_model`` (TF Serving
        warmup records; the validation report). Not tf.estimator arguments. Only the
        ones given are passed on: ``tf_bridge.Estimator`` (TF model_fns) takes
        ``warmup_requests`` but no ``validate`` (its SavedModel is TF's own graph).

    Raises:
      ValueError: exports_to_keep <= 0, or an empty name.
    """

    def export(
        self,
        estimator: ExportingEstimator,
        export_path: str,
        checkpoint_path: str,
        eval_result: dict[str, Any],
        is_the_final_export: bool,
    ) -> bytes | None:
        """Write a SavedModel of ``checkpoint_path`` (None on processes other than 0)."""
        return self._write(estimator, export_path, checkpoint_path)


class FinalExporter(_SavedModelExporter):
    """Exports only after the final evaluation (``tf.estimator.FinalExporter``); the
    arguments are LatestExporter's, without exports_to_keep."""

    def __init__(
        self,
        name: str,
        serving_input_receiver_fn: Callable[[], object],
        assets_extra: Mapping[str, str] | None = None,
        as_text: bool = False,
        *,
        warmup_requests: int | Sequence[Mapping[str, ArrayLike]] | None = None,
        validate: bool | str = True,
    ) -> None:
        super().__init__(
            name,
            serving_input_receiver_fn,
            assets_extra,
            as_text,
            exports_to_keep=None,
            warmup_requests=warmup_requests,
            validate=validate,
        )

    def export(
        self,
        estimator: ExportingEstimator,
        export_path: str,
        checkpoint_path: str,
        eval_result: dict[str, Any],
        is_the_final_export: bool,
    ) -> bytes | None:
        """Write a SavedModel when ``is_the_final_export``."""
        return self._write(estimator, export_path, checkpoint_path) if is_the_final_export else None


def _loss_smaller(best_eval_result: dict[str, Any], current_eval_result: dict[str, Any]) -> bool:
    """True when the current ``loss`` is below the best one (BestExporter's default).

    Raises:
      ValueError: either result has no ``loss``.
    """
    for result in (best_eval_result, current_eval_result):
        if not result or "loss" not in result:
            raise ValueError("BestExporter's default compare_fn needs 'loss' in the eval results.")
    return current_eval_result["loss"] < best_eval_result["loss"]


def eval_results_from_events(pattern: str, skip_step: int | None = None) -> list[dict[str, Any]]:
    """The evaluation results recorded in the event files matching ``pattern`` (a glob):
    one dict of scalar summaries (plus ``global_step``) per global step, steps
    ascending. ``skip_step``'s values in the last file that holds that step (the
    evaluation just written) are left out; an earlier process's evaluation of the same
    step, in an earlier file, stays. A truncated tail (a killed writer) ends its file."""
    from tensorboardX.proto.event_pb2 import Event

    from jaxspec.hooks.early_stopping import _records

    per_file: list[dict[int, dict[str, Any]]] = []
    for path in sorted(paths.glob(pattern)):  # event file names start with their creation time
        steps: dict[int, dict[str, Any]] = collections.defaultdict(dict)
        for data in _records(path):
            event = Event.FromString(data)
            values = {v.tag: v.simple_value for v in event.summary.value if v.HasField("simple_value")}
            if values:
                steps[event.step].update(values)
        per_file.append(steps)
    holding = [steps for steps in per_file if skip_step in steps]
    if holding and skip_step is not None:  # a step some file holds is an int
        del holding[-1][skip_step]
    by_step: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    for steps in per_file:
        for step, values in steps.items():
            by_step[step].update(values)
    return [{**by_step[step], "global_step": step} for step in sorted(by_step)]


class BestExporter(_SavedModelExporter):
    """Exports when an evaluation beats the best so far (``tf.estimator.BestExporter``).

    The best so far includes the evaluations of earlier processes: on its first export
    for a model_dir the exporter reads the results in ``model_dir/event_file_pattern``
    (the eval event files; the current evaluation's own step left out), so after a
    restart ``export/<name>`` still holds the best evaluations seen across restarts.
    TF 2.15 reads those files too but always exports its first evaluation after a
    restart, whose export can then push the true best out through exports_to_keep;
    here the first export happens only when it beats them, or when ``export/<name>``
    holds no export yet.

    Args:
      name, serving_input_receiver_fn, assets_extra, as_text, exports_to_keep,
        warmup_requests, validate: as LatestExporter.
      event_file_pattern: glob of the eval event files, relative to the estimator's
        model_dir (``'eval/*.tfevents.*'``: the results of ``evaluate`` without a
        name); None or ``''`` reads none.
      compare_fn: ``(best_eval_result, current_eval_result) -> bool``; default: lower
        loss. It is also how the best earlier result is chosen.

    Raises:
      ValueError: compare_fn does not take exactly those two arguments; (export) the
        default compare_fn meets a result without ``loss``.
    """

    def __init__(
        self,
        name: str = "best_exporter",
        serving_input_receiver_fn: Callable[[], object] | None = None,
        event_file_pattern: str = "eval/*.tfevents.*",
        compare_fn: Callable[..., bool] = _loss_smaller,
        assets_extra: Mapping[str, str] | None = None,
        as_text: bool = False,
        exports_to_keep: int | None = 5,
        *,
        warmup_requests: int | Sequence[Mapping[str, ArrayLike]] | None = None,
        validate: bool | str = True,
    ) -> None:
        params = set(inspect.signature(compare_fn).parameters)
        if params != {"best_eval_result", "current_eval_result"}:
            raise ValueError("compare_fn must take exactly best_eval_result and current_eval_result.")
        super().__init__(
            name,
            serving_input_receiver_fn,
            assets_extra,
            as_text,
            exports_to_keep,
            warmup_requests=warmup_requests,
            validate=validate,
        )
        self._compare = compare_fn
        self._pattern = event_file_pattern
        self._model_dir: str | None = None
        self._best: dict[str, Any] | None = None

    def _best_earlier(self, model_dir: str, step: int | None) -> dict[str, Any] | None:
        """The best result in the eval event files of ``model_dir``, ``step``'s left out."""
        best = None
        pattern = paths.join(os.fspath(model_dir), self._pattern)
        for result in eval_results_from_events(pattern, None if step is None else int(step)):
            if best is None or self._compare(best_eval_result=best, current_eval_result=result):
                best = result
        if best is not None:
            _log.info("Best earlier eval result (global step %s) read from %s.", best["global_step"], pattern)
        return best

    def export(
        self,
        estimator: ExportingEstimator,
        export_path: str,
        checkpoint_path: str,
        eval_result: dict[str, Any],
        is_the_final_export: bool,
    ) -> bytes | None:
        """Write a SavedModel when ``eval_result`` is the best so far (earlier processes'
        evaluations included), or when ``export_path`` holds no export yet."""
        model_dir = getattr(estimator, "model_dir", None)
        if self._pattern and model_dir and model_dir != self._model_dir:
            self._model_dir = model_dir
            earlier = self._best_earlier(model_dir, (eval_result or {}).get("global_step"))
            if earlier is not None and (
                self._best is None or self._compare(best_eval_result=self._best, current_eval_result=earlier)
            ):
                self._best = earlier
        has_exports = paths.isdir(export_path) and any(d.isdigit() for d in paths.listdir(export_path))
        if (
            has_exports
            and self._best is not None
            and not self._compare(best_eval_result=self._best, current_eval_result=eval_result)
        ):
            return None
        self._best = dict(eval_result) if eval_result is not None else None
        _log.info(
            "New best eval result at global step %s; exporting.", (eval_result or {}).get("global_step")
        )
        return self._write(estimator, export_path, checkpoint_path)
