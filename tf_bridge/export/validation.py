"""The validation report written at export: ``assets.extra/jaxspec_validation.json``.

jax2tf can change numerics (platform lowering, dtypes, symbolic shapes). Before an
export directory is renamed into place, the written SavedModel is loaded with TensorFlow
and each serving signature is run on the same rows as the JAX model; every output both
give is compared (and, when ``jax/`` is written, every output of its functions too).
tf.estimator has no such step (its graphs were the model); Orbax Export's
``ValidationManager`` does the same job for orbax models.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from jaxspec.spec.fn_types import ArrayLike
from tf_bridge.export import warmup as _warmup

logger = logging.getLogger("tf_bridge")

REPORT_FILE = "jaxspec_validation.json"
# dtype name -> (relative, absolute) tolerance.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}

# ``fn(signature key, features, signature feed) -> {output key: array}``: the JAX side.
Reference = Callable[[str, dict[str, np.ndarray], dict[str, np.ndarray]], Mapping[str, ArrayLike]]


class ExportValidationError(RuntimeError):
    """An exported SavedModel's answers differ from the JAX model's beyond tolerance
    (``assets.extra/jaxspec_validation.json`` says where). Not a tf.estimator error:
    tf.estimator never compared two runtimes."""


def check_validate(validate: bool | str, tolerances: Mapping[str, float] | None) -> None:
    """Check ``validate`` (True, False or ``'warn'``) and ``validation_tolerances``
    (dict of dtype name to relative tolerance) before anything is written.

    Raises:
      ValueError: another ``validate``, an unknown dtype name or a negative tolerance.
    """
    if validate not in (True, False, "warn"):
        raise ValueError(f"validate has to be True, False or 'warn'; got {validate!r}.")
    for name, rtol in (tolerances or {}).items():
        if name not in DEFAULT_TOLERANCES or not float(rtol) >= 0:
            raise ValueError(
                f"validation_tolerances[{name!r}] = {rtol!r}: keys are {sorted(DEFAULT_TOLERANCES)}, "
                "values relative tolerances >= 0."
            )


def _tolerance(dtype: np.dtype, overrides: Mapping[str, float] | None) -> tuple[float, float]:
    name = str(dtype)
    if overrides and name in overrides:
        rtol = float(overrides[name])
        return rtol, rtol / 10
    return DEFAULT_TOLERANCES.get(name, (0.0, 0.0))  # ints, bools, strings: equal


def compare(got: Any, want: Any, overrides: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One output compared: ``got`` (TF's) against ``want`` (JAX's), at the tolerance of
    ``want``'s dtype: ``|got - want| <= atol + rtol * |want|`` element-wise."""
    got, want = np.asarray(got), np.asarray(want)
    if got.size == want.size and got.shape != want.shape:
        want = want.reshape(got.shape)  # e.g. regress: [batch, 1] -> [batch]
    rtol, atol = _tolerance(want.dtype, overrides)
    entry: dict[str, Any] = {"dtype": str(want.dtype), "rtol": rtol, "atol": atol, "shape": list(got.shape)}
    if got.shape != want.shape:
        return {**entry, "passed": False, "error": f"shape {got.shape} != JAX's {want.shape}"}
    if want.dtype.kind in "SUO":
        equal = bool(np.array_equal(got.astype(bytes), want.astype(bytes)))
        return {**entry, "max_abs_diff": None, "max_rel_diff": None, "passed": equal}
    g, w = got.astype(np.float64), want.astype(np.float64)
    diff = np.abs(g - w)
    rel = diff / np.maximum(np.abs(w), np.finfo(np.float64).tiny)
    passed = bool(np.all(diff <= atol + rtol * np.abs(w)))
    return {
        **entry,
        "max_abs_diff": float(diff.max(initial=0.0)),
        "max_rel_diff": float(rel.max(initial=0.0)),
        "passed": passed,
    }


def _versions() -> dict[str, str]:
    import jax
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "tensorflow": tf.__version__}


def _tf_outputs(
    export_dir: str, rows: _warmup.Rows, names: Mapping[str, Mapping[str, str]]
) -> tuple[dict[str, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]], dict[str, str]]:
    """TF's outputs per serving signature, and the signatures the rows cannot feed (with
    why: e.g. a receiver that parses tf.Example feature names other than the features')."""
    loaded = tf.saved_model.load(export_dir, tags=[_warmup.SERVE_TAG])
    outputs, skipped = {}, {}
    parsed = _warmup.parsed_example_keys(export_dir)
    for key, sig in _warmup.serving_signatures(export_dir).items():
        try:
            feed = _warmup.signature_feed(sig, rows, names.get(key), parsed)
            outputs[key] = (feed, _warmup.run_signature(loaded, key, feed))
        except ValueError as e:
            skipped[key] = str(e)
            logger.warning("export validation: signature %r not compared: %s", key, e)
    return outputs, skipped


def validate_export(
    export_dir: str,
    rows: _warmup.Rows,
    references: Mapping[str, Reference],
    validate: bool | str = True,
    tolerances: Mapping[str, float] | None = None,
    names: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """Compare the SavedModel in ``export_dir`` with JAX on ``rows`` and write the report.

    Args:
      export_dir: the (temporary) export directory, its SavedModel written.
      rows: feature dicts, one per row (see ``warmup.feature_rows``); run as one batch.
      references: name (``'jax'``, ``'jax_artifact'``) -> ``fn(signature key, features,
        signature feed) -> {output key: array}``, the JAX side. Outputs TF gives that a
        reference does not are listed under ``not_compared``.
      validate: True raises on a difference above tolerance; ``'warn'`` logs it.
      tolerances: dtype name -> relative tolerance, over ``DEFAULT_TOLERANCES``.
      names: signature key -> input name -> feature key (``warmup.signature_feed``).

    Returns:
      The report (also written to ``assets.extra/jaxspec_validation.json``): versions,
      rows, and per reference, signature and output the max absolute and relative
      difference, the tolerances and pass/fail; ``passed`` over all; ``skipped``: the
      signatures the rows could not feed, with why (logged as warnings, not failures).

    Raises:
      ExportValidationError: an output differs beyond tolerance and ``validate`` is True.
    """
    features = _warmup.batch(rows)
    tf_out, skipped = _tf_outputs(export_dir, rows, names or {})
    report: dict[str, Any] = {
        "versions": _versions(),
        "rows": len(rows),
        "references": {},
        "skipped": skipped,
    }
    failed = []
    for name, reference in references.items():
        per_sig: dict[str, Any] = {}
        for key, (feed, outputs) in tf_out.items():
            want = {k: np.asarray(v) for k, v in reference(key, features, feed).items()}
            # TF's string classes against JAX's integer ids are not the same quantity.
            same = [
                k
                for k in sorted(outputs)
                if k in want and (outputs[k].dtype.kind in "SUO") == (want[k].dtype.kind in "SUO")
            ]
            compared = {k: compare(outputs[k], want[k], tolerances) for k in same}
            per_sig[key] = {"outputs": compared, "not_compared": sorted(set(outputs) - set(same))}
            failed += [f"{name}:{key}/{k}" for k, v in compared.items() if not v["passed"]]
        report["references"][name] = per_sig
    report["passed"] = not failed
    report["failed"] = failed
    path = os.path.join(export_dir, "assets.extra", REPORT_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
    if failed:
        message = (
            f"export validation: {', '.join(failed)} differ from JAX beyond tolerance (see {REPORT_FILE})."
        )
        if validate == "warn":
            logger.warning("%s The export is kept (validate='warn').", message)
        else:
            raise ExportValidationError(message)
    logger.info("%s", summary(report))
    return report


def summary(report: Mapping[str, Any]) -> str:
    """The report in one line: pass/fail, outputs compared, the largest relative difference."""
    entries = [
        o
        for per_sig in report["references"].values()
        for s in per_sig.values()
        for o in s["outputs"].values()
    ]
    rel = max((o["max_rel_diff"] or 0.0 for o in entries), default=0.0)
    verdict = "passed" if report["passed"] else f"FAILED ({len(report['failed'])} outputs)"
    return f"export validation {verdict}: {len(entries)} outputs on {report['rows']} rows, max rel diff {rel:.3g}"
