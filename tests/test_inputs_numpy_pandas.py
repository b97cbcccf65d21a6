"""Issue 37, items 3 and 5: numpy_input_fn / pandas_input_fn on both sides (batches
checked against numpy by hand: TF 2.15's order, epochs and short last batch), and
add_metrics on both sides (metric values checked against numpy)."""

from __future__ import annotations

import numpy as np
import pytest

import jaxspec
from jaxspec.inputs import numpy_input_fn, pandas_input_fn

X = {"a": np.arange(3) * 1.0, "b": np.arange(32, 35)}
Y = np.arange(-32, -29)
# 3 rows, batch 2, 3 epochs: rows 0 1 2 0 1 2 0 1 2 in chunks of 2, the last one short
ORDER = [[0, 1], [2, 0], [1, 2], [0, 1], [2]]


def test_jax_side_order_epochs_and_short_last_batch():
    batches = list(numpy_input_fn(X, Y, batch_size=2, shuffle=False, num_epochs=3)())
    assert [f["a"].tolist() for f, _ in batches] == [[float(i) for i in o] for o in ORDER]
    assert [t.tolist() for _, t in batches] == [[int(Y[i]) for i in o] for o in ORDER]


def test_jax_side_shuffle_reads_every_row_num_epochs_times_and_is_seeded():
    config = jaxspec.RunConfig(tf_random_seed=3)
    fn = numpy_input_fn(np.arange(10), None, batch_size=4, shuffle=True, num_epochs=2)
    rows = np.concatenate(list(fn(config)))
    assert sorted(rows.tolist()) == sorted(list(range(10)) * 2)
    assert rows.tolist() != list(range(10)) * 2
    assert rows.tolist() == np.concatenate(list(fn(config))).tolist()


def test_errors_as_tf():
    with pytest.raises(ValueError):
        numpy_input_fn(X, Y)  # shuffle must be given
    with pytest.raises(TypeError):
        numpy_input_fn([1, 2], None, shuffle=False)()
    with pytest.raises(ValueError):
        numpy_input_fn(X, {"a": Y}, shuffle=False)()  # a key in both
    with pytest.raises(ValueError):
        numpy_input_fn(X, np.arange(5), shuffle=False)()  # different rows


def test_pandas_missing_or_batches():
    try:
        import pandas as pd
    except ImportError:
        with pytest.raises(ImportError, match=r"jaxspec\[pandas\]"):
            pandas_input_fn(None, shuffle=False)
        return
    x = pd.DataFrame({"a": X["a"], "b": X["b"]}, index=np.arange(100, 103))
    y = pd.Series(Y, index=x.index)
    batches = list(pandas_input_fn(x, y, batch_size=2, shuffle=False, num_epochs=3)())
    assert [t.tolist() for _, t in batches] == [[int(Y[i]) for i in o] for o in ORDER]


def test_tf_side_queue_matches_the_jax_side():
    tf = pytest.importorskip("tensorflow")
    from tf_bridge.estimator.inputs import numpy_input_fn as tf_numpy_input_fn

    with tf.Graph().as_default():
        features, target = tf_numpy_input_fn(X, Y, batch_size=2, shuffle=False, num_epochs=3)()
        got = []
        with tf.compat.v1.train.MonitoredSession() as session:  # starts the queue runners
            while not session.should_stop():
                got.append(session.run(target).tolist())
    assert got == [[int(Y[i]) for i in o] for o in ORDER]
    with pytest.raises(RuntimeError):
        tf_numpy_input_fn(X, Y, shuffle=False)()  # eager: queues need a graph


def _jax_model_fn(features, labels, mode, state):
    import jax.numpy as jnp

    pred = features["a"] * 2.0 + state["w"]
    loss = jnp.mean(pred - labels) * 0.0
    return jaxspec.EstimatorSpec(mode, predictions={"p": pred}, loss=loss, train_op=state)


def test_add_metrics_jax_side(tmp_path):
    def metric_fn(labels, predictions):
        return {"mean_p": jaxspec.metrics.mean(predictions["p"]), "mean_y": jaxspec.metrics.mean(labels)}

    est = jaxspec.Estimator(_jax_model_fn, model_dir=str(tmp_path), init_fn=lambda: {"w": np.float32(0.0)})
    with pytest.raises(ValueError, match="unknown_arg"):
        jaxspec.add_metrics(est, lambda features, unknown_arg: {})
    new = jaxspec.add_metrics(est, metric_fn)
    x = {"a": np.arange(5, dtype=np.float32)}
    y = np.arange(5, dtype=np.float32) * 3
    new.train(numpy_input_fn(x, y, batch_size=2, shuffle=True, num_epochs=None), steps=2)
    out = new.evaluate(numpy_input_fn(x, y, batch_size=2, shuffle=False, num_epochs=1))
    assert out["mean_p"] == pytest.approx(np.mean(x["a"] * 2))  # short last batch counted once
    assert out["mean_y"] == pytest.approx(np.mean(y))
