"""A program in which a library logs through absl before or after ``import jaxspec``
(as grain, or any absl user, does), with or without the program's own
``logging.basicConfig(level=INFO)``. Run by tests/test_console_absl.py.

argv[1]: model_dir; argv[2]: ``before``, ``after`` or ``before+basic``.
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
how = sys.argv[2]


def library_logs() -> None:
    """What a library importing absl does on its first record: absl calls
    ``logging.basicConfig()`` on a root logger without handlers."""
    from absl import logging as absl_logging

    absl_logging.info("a library's first absl record")


if how.startswith("before"):
    library_logs()
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxspec  # noqa: E402

if how == "after":
    library_logs()
if how.endswith("+basic"):
    logging.basicConfig(level=logging.INFO, format="USER %(levelname)s %(name)s: %(message)s")


def model_fn(features, labels, mode, state):
    loss = jnp.mean((features["x"] * state["w"] - labels) ** 2)
    return jaxspec.EstimatorSpec(mode, loss=loss, train_op={"w": state["w"] - 0.1 * loss})


x = np.arange(8, dtype=np.float32)
config = jaxspec.RunConfig(log_step_count_steps=2, save_checkpoints_steps=None, save_summary_steps=0)
est = jaxspec.Estimator(model_fn, sys.argv[1], config=config, init_fn=lambda: {"w": jnp.float32(1.0)})
est.train(lambda: ({"x": x}, 2 * x), steps=2)
