"""Two traps of issue 48 (item 4) that tf_bridge caused:

- the chief of a TF_CONFIG cluster warned "global step has not been increased" while it
  grew: the step hooks' read of the global step was not ordered before the optimizer's
  increment, and with the variable on a parameter server it came after it in some runs;
- a canned DNN's train made TensorFlow's C++ type inference log "Type inference failed"
  (~30 lines) for the cond inside ``tf.math.zero_fraction`` (its layer summaries).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.training import training_util

import tf_bridge
from tf_bridge.runtime.step_read_order import WRITER_TYPES, order_step_writes_after_read
from tf_bridge.runtime.zero_fraction import zero_fraction
from tools import tf215_reference_models as models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _step_writers(graph: Any) -> list[Any]:
    step = tf.compat.v1.train.get_global_step(graph)
    return [
        op
        for op in graph.get_operations()
        if op.type in WRITER_TYPES and op.inputs[0].op is step.op and op is not step.initializer
    ]


def test_the_step_read_comes_before_the_increment_on_a_parameter_server() -> None:
    """Global step on a ps task of an in-process cluster, as a TF_CONFIG chief has it: the
    value the hooks fetch with the train op is the step before that run, every run
    (without the ordering about one run in five read the incremented value here)."""
    cluster = tf.train.ClusterSpec(
        {"ps": [f"127.0.0.1:{_free_port()}"], "chief": [f"127.0.0.1:{_free_port()}"]}
    )
    servers = [tf.distribute.Server(cluster, job, 0) for job in ("ps", "chief")]
    with tf.Graph().as_default() as graph:
        with tf.device("/job:ps/task:0"):
            step = tf.compat.v1.train.get_or_create_global_step()
            w = tf.compat.v1.get_variable("w", initializer=tf.ones([64, 64]))
        read = training_util._get_or_create_global_step_read(graph)
        with tf.device("/job:chief/task:0"):
            loss = tf.reduce_sum(tf.matmul(w, w))
            train_op = tf.compat.v1.train.GradientDescentOptimizer(1e-6).minimize(loss, global_step=step)
        assert order_step_writes_after_read(graph) == 1
        assert order_step_writes_after_read(graph) == 0  # once
        (writer,) = _step_writers(graph)
        assert read.op in writer.control_inputs
        with tf.compat.v1.Session(servers[1].target) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            reads = [int(sess.run([read, train_op])[0]) for _ in range(60)]
            final = int(sess.run(step))
    assert reads == list(range(60)) and final == 60


def test_estimator_train_orders_the_step_writes(tmp_path: Any) -> None:
    seen: list[bool] = []

    class Inspect(tf.compat.v1.train.SessionRunHook):
        def begin(self) -> None:
            graph = tf.compat.v1.get_default_graph()
            read = training_util._get_global_step_read(graph)
            writers = _step_writers(graph)
            seen.extend(read.op in op.control_inputs for op in writers)

    est = tf_bridge.Estimator(models.make_linear_model_fn(tf_bridge, []), str(tmp_path))
    est.train(models.train_input_fn, steps=2, hooks=[Inspect()])
    assert seen == [True]
    assert int(est.get_variable_value("global_step")) == 2


def test_zero_fraction_is_tensorflows_value() -> None:
    rng = np.random.RandomState(0)
    values = [
        np.maximum(rng.normal(size=(16, 8)), 0).astype(np.float32),
        rng.randint(-2, 3, size=(5, 4, 3)).astype(np.int32),
        np.zeros((7,), np.float64),
        np.float32(3.0),
    ]
    for value in values:
        ours = zero_fraction(tf.constant(value)).numpy()
        assert ours.dtype == np.float32
        assert ours == tf.math.zero_fraction(tf.constant(value)).numpy()
        assert ours == np.float32(np.count_nonzero(np.asarray(value) == 0)) / np.float32(np.size(value))


SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tf_bridge
    import tensorflow as tf
    from tf_bridge.runtime.canned import _layers

    x = np.random.RandomState(0).normal(size=(32, 3)).astype(np.float32)
    y = (x.sum(1) > 0).astype(np.int32)

    def input_fn():
        return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).repeat().batch(16)

    def train(model_dir):
        columns = [tf.feature_column.numeric_column("x", shape=[3])]
        tf_bridge.estimator.DNNClassifier([8], columns, model_dir=model_dir).train(input_fn, steps=1)
        sys.stderr.flush()

    train(sys.argv[1] + "/ours")
    print("MARK", file=sys.stderr, flush=True)
    _layers.zero_fraction = tf.math.zero_fraction  # TensorFlow's own, with its cond
    train(sys.argv[1] + "/tf")
    """
)


def test_a_canned_dnn_trains_without_type_inference_noise(tmp_path: Any) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the C++ warnings must be visible for the check
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ours, control = run.stderr.split("MARK\n")
    assert "Type inference failed" not in ours, ours
    # the control: TensorFlow's zero_fraction in the same graph logs it (so the check can see it)
    assert "Type inference failed" in control and "zero_fraction/cond" in control
