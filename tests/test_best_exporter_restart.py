"""BestExporter keeps the best across a restart: a new exporter (a new process) reads the
earlier evaluations from the eval event files (``event_file_pattern``) and exports only
what beats them, so ``exports_to_keep`` never pushes the true best out. TF 2.15 exports
its first evaluation after a restart whatever it is (``not self._has_exported``)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import jaxspec
from jaxspec.estimators.exporter import BestExporter, eval_results_from_events
from tests.helpers import batches_input_fn, digits, init_fn, make_model_fn

tf = pytest.importorskip("tensorflow")
import tf_bridge  # noqa: E402
from tools import tf215_reference_models as models  # noqa: E402


def _receiver():
    return tf_bridge.build_raw_serving_input_receiver_fn({"x": tf.TensorSpec([None, 64], tf.float32)})


def _exports(path) -> list[str]:
    return sorted(d for d in os.listdir(path) if d.isdigit())


def test_jaxspec_best_exporter_remembers_the_best_across_a_restart(tmp_path):
    x, y = digits(64)
    wrong = (y + 3) % 10  # labels the model has not learnt: a worse evaluation
    config = jaxspec.RunConfig(model_dir=str(tmp_path), log_step_count_steps=None)
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    export_path = str(tmp_path / "export" / "best")

    est.train(batches_input_fn(x, y, 16, repeat=True), max_steps=8)
    first = est.evaluate(batches_input_fn(x, y, 32))
    before = BestExporter(serving_input_receiver_fn=_receiver(), exports_to_keep=1)
    assert before.export(est, export_path, est.latest_checkpoint(), first, False) is not None
    best_dir = _exports(export_path)

    # The process restarts: a new Estimator and a new exporter on the same model_dir.
    est = jaxspec.Estimator(make_model_fn(as_estimator_spec=True), config=config, init_fn=init_fn)
    est.train(batches_input_fn(x, y, 16, repeat=True), max_steps=12)
    worse = est.evaluate(batches_input_fn(x, wrong, 32))
    assert worse["loss"] > first["loss"]
    after = BestExporter(serving_input_receiver_fn=_receiver(), exports_to_keep=1)
    assert after.export(est, export_path, est.latest_checkpoint(), worse, False) is None
    assert _exports(export_path) == best_dir  # the true best (step 8) is still there

    # What the exporter read: both evaluations, each with its step and loss.
    results = eval_results_from_events(str(tmp_path / "eval" / "*.tfevents.*"))
    assert [r["global_step"] for r in results] == [8, 12]
    np.testing.assert_allclose([r["loss"] for r in results], [first["loss"], worse["loss"]], rtol=1e-6)

    est.train(batches_input_fn(x, y, 16, repeat=True), max_steps=40)
    better = est.evaluate(batches_input_fn(x, y, 32))
    assert better["loss"] < first["loss"]
    written = after.export(est, export_path, est.latest_checkpoint(), better, False)
    assert written is not None and _exports(export_path) == [os.path.basename(written.decode())]


def test_tf_bridge_best_exporter_reads_its_estimators_eval_events(tmp_path):
    """The same rule with a TensorFlow model_fn: the eval events tf_bridge writes."""
    cfg = tf_bridge.RunConfig(tf_random_seed=1, log_step_count_steps=None, save_checkpoints_steps=3)
    est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(tmp_path), config=cfg)
    est.train(models.train_input_fn, max_steps=6)
    earlier = est.evaluate(models.eval_input_fn)
    export_path = str(tmp_path / "export" / "best")
    fresh = tf_bridge.BestExporter(
        serving_input_receiver_fn=models.serving_input_receiver_fn(tf_bridge), exports_to_keep=1
    )
    os.makedirs(os.path.join(export_path, "1500000000"))  # an earlier process's best export
    worse = {**earlier, "loss": earlier["loss"] * 2, "global_step": earlier["global_step"] + 1}
    assert fresh.export(est, export_path, est.latest_checkpoint(), worse, False) is None
    assert _exports(export_path) == ["1500000000"]
    better = {**earlier, "loss": earlier["loss"] / 2, "global_step": earlier["global_step"] + 2}
    assert fresh.export(est, export_path, est.latest_checkpoint(), better, False) is not None
    assert "1500000000" not in _exports(export_path)


def test_the_current_steps_own_event_is_not_its_rival(tmp_path):
    """The evaluation being exported is already in the event files (evaluate writes
    before exporting): after a restart it is compared with the others, not itself."""
    from jaxspec.store.summaries import close_all, write_scalars

    eval_dir = str(tmp_path / "eval")
    for step, loss in ((100, 0.5), (200, 0.2), (300, 0.4)):
        write_scalars(eval_dir, step, {"loss": loss})
    close_all()
    results = eval_results_from_events(os.path.join(eval_dir, "*.tfevents.*"), skip_step=200)
    assert [(r["global_step"], pytest.approx(r["loss"])) for r in results] == [(100, 0.5), (300, 0.4)]


def test_an_earlier_processs_evaluation_of_the_same_step_stays_its_rival(tmp_path):
    """An evaluator restarted on a finished run evaluates the last step again: the earlier
    process's result for that step (an earlier event file) is still a rival, so an equal
    loss exports nothing twice; only the file just written loses that step."""
    import time

    from jaxspec.store.summaries import close_all, write_scalars

    eval_dir = str(tmp_path / "eval")
    for step, loss in ((9, 0.3), (12, 0.2)):
        write_scalars(eval_dir, step, {"loss": loss})
    close_all()
    time.sleep(1.1)  # the next writer's file name holds a later second
    write_scalars(eval_dir, 12, {"loss": 0.2})  # the restarted process's evaluation of 12
    close_all()
    results = eval_results_from_events(os.path.join(eval_dir, "*.tfevents.*"), skip_step=12)
    assert [(r["global_step"], pytest.approx(r["loss"])) for r in results] == [(9, 0.3), (12, 0.2)]
