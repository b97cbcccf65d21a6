"""docs/migration.md's two model_fns (TensorFlow via tf_bridge, JAX via jaxspec) run on the
same data and must report the same evaluation and predictions: the guide's code runs,
and the port it shows is faithful."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import tensorflow as tf

from tools import tf215_reference_models as models

GUIDE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "migration.md")


def guide_block(tag: str) -> dict[str, Any]:
    """Execute the guide's python block starting with ``# migration: <tag>``."""
    with open(GUIDE) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    (code,) = [b for b in blocks if b.startswith(f"# migration: {tag}\n")]
    namespace: dict[str, Any] = {}
    exec(compile(code, f"{GUIDE}:{tag}", "exec"), namespace)
    return namespace


def eval_input_fn() -> Any:
    """Two batches of 5 (one shape: one compilation on the JAX side)."""
    x, y = models.eval_data()
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).batch(5)


def predict_input_fn() -> Any:
    return tf.data.Dataset.from_tensor_slices({"x": models.predict_data()}).batch(7)


def test_guide_model_fns_agree(tmp_path: Any) -> None:
    results = {}
    for tag in ("tf", "jax"):
        est = guide_block(tag)[f"make_{tag}_estimator"](str(tmp_path / tag))
        est.train(models.train_input_fn, steps=5)
        evaluation = est.evaluate(eval_input_fn)
        preds = [float(p["pred"]) for p in est.predict(predict_input_fn)]
        results[tag] = (evaluation, preds)
    (tf_eval, tf_preds), (jax_eval, jax_preds) = results["tf"], results["jax"]
    assert int(tf_eval["global_step"]) == int(jax_eval["global_step"]) == 5
    for key in ("loss", "mae"):
        np.testing.assert_allclose(float(jax_eval[key]), float(tf_eval[key]), rtol=1e-5)
    np.testing.assert_allclose(jax_preds, tf_preds, rtol=1e-5, atol=1e-6)
