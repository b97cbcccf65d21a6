"""A user's program that configures no logging: train, evaluate and predict on the digits.

Run by tests/test_console.py in a pseudo-terminal and through a pipe. argv[1] is the
model_dir; an optional argv[2] ``basic`` calls ``logging.basicConfig(level=INFO)`` after
``import jaxspec`` (the user's own configuration must take effect), ``off`` turns the
console off with the jaxspec logger's level.
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jaxspec  # noqa: E402
from tests.helpers import batches_input_fn, digits, init_fn, make_model_fn  # noqa: E402

ROOT_HANDLERS_AFTER_IMPORT = list(logging.root.handlers)
how = sys.argv[2] if len(sys.argv) > 2 else ""
if how == "basic":
    logging.basicConfig(level=logging.INFO, format="USER %(levelname)s %(name)s: %(message)s")
if how == "off":
    logging.getLogger("jaxspec").setLevel(logging.WARNING)

x, y = digits(512)
config = jaxspec.RunConfig(log_step_count_steps=10, save_checkpoints_steps=20)
est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), sys.argv[1], config=config, init_fn=init_fn)
hook = jaxspec.LoggingTensorHook({"the_step": "global_step"}, every_n_iter=20)
est.train(batches_input_fn(x, y, 16, repeat=True), steps=40, hooks=[hook])
est.evaluate(batches_input_fn(x, y, 16), steps=25)
est.evaluate(batches_input_fn(x, y, 64))
est.evaluate(
    batches_input_fn(x, y, 16), checkpoint_path=os.path.join(sys.argv[1], "checkpoints", "20"), steps=3
)
n = sum(1 for _ in est.predict(batches_input_fn(x, None, 64)))
print("ROOT_HANDLERS_AFTER_IMPORT", len(ROOT_HANDLERS_AFTER_IMPORT), file=sys.stderr)
print("ROOT_HANDLERS_AT_END", len(logging.root.handlers), file=sys.stderr)
print("PREDICTED", n, file=sys.stderr)
jaxspec_logger = logging.getLogger("jaxspec")
print("JAXSPEC_LOGGER_AT_END", jaxspec_logger.level, len(jaxspec_logger.handlers), file=sys.stderr)
