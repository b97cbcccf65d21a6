"""Every public method of Estimator and TPUEstimator hides the INFO records of Orbax
(absl), JAX and TensorFlow that its own work causes, under a program's
``logging.basicConfig(level=INFO)`` (issue 35, item 4; ``get_variable_value`` used to
print 14 Orbax lines). Only the ``jaxspec`` logger's own records remain."""

from __future__ import annotations

import inspect
import logging

import numpy as np

import jaxspec
from tests.helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn

X, Y = digits(16)
LIBRARIES = ("absl", "jax", "tensorflow", "orbax", "tensorstore", "etils")


def _public(cls: type) -> set[str]:
    return {name for name, v in inspect.getmembers(cls) if not name.startswith("_") and callable(v)}


def _calls(est: jaxspec.Estimator, tmp_path) -> dict[str, object]:
    import tf_bridge

    receiver = tf_bridge.build_raw_serving_input_receiver_fn({"x": np.zeros((1, 64), np.float32)})
    return {
        "train": lambda: est.train(batches_input_fn(X, Y, 8, repeat=True), steps=2),
        "evaluate": lambda: est.evaluate(batches_input_fn(X, Y, 8)),
        "predict": lambda: list(est.predict(batches_input_fn(X, None, 8))),
        "eval_dir": lambda: est.eval_dir(),
        "latest_checkpoint": lambda: est.latest_checkpoint(),
        "get_variable_names": lambda: est.get_variable_names(),
        "get_variable_value": lambda: est.get_variable_value("params/params/Dense_0/kernel"),
        "export_saved_model": lambda: est.export_saved_model(str(tmp_path / "export"), receiver),
        "experimental_export_all_saved_models": lambda: est.experimental_export_all_saved_models(
            str(tmp_path / "export_all"), {jaxspec.ModeKeys.PREDICT: receiver}
        ),
    }


def _make(kind: str, model_dir: str, source: str | None) -> jaxspec.Estimator:
    if kind == "Estimator":
        return jaxspec.Estimator(
            make_model_fn(as_estimator_spec=True),
            config=fast_config(model_dir),
            init_fn=init_fn,
        )
    warm = jaxspec.WarmStartSettings(source, vars_to_warm_start="params/params/Dense_0/")
    return jaxspec.TPUEstimator(
        make_model_fn(),
        config=fast_config(model_dir, 2),
        params={},
        train_batch_size=8,
        eval_batch_size=8,
        predict_batch_size=8,
        init_fn=init_fn,
        warm_start_from=warm,
    )


def test_every_public_method_hides_library_info(tmp_path, caplog):
    source = None
    for kind in ("Estimator", "TPUEstimator"):  # the second warm-starts from the first
        with caplog.at_level(logging.INFO):  # as the program's basicConfig(level=INFO)
            est = _make(kind, str(tmp_path / kind), source)
            calls = _calls(est, tmp_path / kind)
            assert set(calls) == _public(getattr(jaxspec, kind)), "a public method is not covered here"
            for name, call in calls.items():
                caplog.clear()
                call()
                leaked = [
                    f"{r.name}: {r.getMessage()}"
                    for r in caplog.records
                    if r.levelno < logging.WARNING and r.name.split(".")[0] in LIBRARIES
                ]
                assert not leaked, f"{kind}.{name} let through {leaked[:5]}"
                if name == "train" and source is not None:
                    assert any(
                        r.name == "jaxspec" and "Warm-started" in r.getMessage() for r in caplog.records
                    )
        source = est.model_dir
