"""A DeepFM-shaped program in the style of Ascend's ModelZoo-TensorFlow samples, left as
such a sample writes it: ``npu_ops``, ``npu_unary_ops``, ``npu_scope`` and ``hccl_ops``
imported from the adapter's paths, gradients all-reduced over the ranks with
``hccl_ops.allreduce``, the deep part's activations ``npu_unary_ops.gelu``, its dropout
``npu_ops.dropout(x, keep_prob)``, trained by an NPUEstimator with an NPURunConfig.

tests/test_tf_bridge_npu_modules.py runs it with ``python -m tf_bridge`` where Ascend's
adapter is absent. Usage: npu_deepfm.py MODEL_DIR OUT_NPZ; the deep part's tensors of each
training step go to OUT_NPZ; prints one ``RESULT <json>`` line.
"""

import json
import sys

import numpy as np
import tensorflow as tf
from hccl.manage.api import get_rank_size
from npu_bridge.estimator import npu_ops
from npu_bridge.estimator.npu import npu_scope
from npu_bridge.estimator.npu.npu_config import NPURunConfig
from npu_bridge.estimator.npu.npu_estimator import NPUEstimator, NPUEstimatorSpec
from npu_bridge.estimator.npu_unary_ops import npu_unary_ops
from npu_bridge.hccl import hccl_ops
from npu_bridge.npu_init import *  # noqa: F403

FIELDS, VOCAB, EMBED, HIDDEN, BATCH, KEEP_PROB = 4, 50, 8, 32, 64, 0.8
STEPS = []


def input_fn(params):
    rng = np.random.RandomState(0)
    ids = rng.randint(0, VOCAB, size=(BATCH * 8, FIELDS)).astype(np.int32)
    labels = (ids.sum(axis=1, keepdims=True) % 2).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices(({"feat_ids": ids}, labels))
    return ds.repeat().batch(BATCH, drop_remainder=True)


def model_fn(features, labels, mode, params):
    ids = features["feat_ids"]
    init = tf.compat.v1.glorot_normal_initializer(seed=1)
    embeddings = tf.compat.v1.get_variable("feat_embeddings", [VOCAB, EMBED], initializer=init)
    weights = tf.compat.v1.get_variable("feat_wgts", [VOCAB, 1], initializer=init)
    with npu_scope.without_npu_compile_scope():
        first_order = tf.reduce_sum(tf.nn.embedding_lookup(weights, ids), axis=[1, 2])
    emb = tf.nn.embedding_lookup(embeddings, ids)  # (batch, fields, embed)
    second_order = 0.5 * tf.reduce_sum(tf.square(tf.reduce_sum(emb, 1)) - tf.reduce_sum(tf.square(emb), 1), 1)
    deep_in = tf.reshape(emb, [-1, FIELDS * EMBED])
    pre = tf.compat.v1.layers.dense(deep_in, HIDDEN, kernel_initializer=init, name="deep_1")
    act = npu_unary_ops.gelu(pre)
    if mode == tf.estimator.ModeKeys.TRAIN:
        dropped = npu_ops.dropout(act, keep_prob=KEEP_PROB)
        rows = npu_ops.dropout(act, keep_prob=0.5, noise_shape=[BATCH, 1])  # a row is kept or dropped whole
    else:
        dropped = rows = act
    with npu_scope.keep_dtype_scope():
        deep_out = tf.compat.v1.layers.dense(dropped, 1, kernel_initializer=init, name="deep_out")
    logits = first_order + second_order + tf.squeeze(deep_out, 1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return NPUEstimatorSpec(mode, predictions={"prob": tf.sigmoid(logits)})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels[:, 0], logits=logits))
    if mode == tf.estimator.ModeKeys.EVAL:
        return NPUEstimatorSpec(mode, loss=loss)
    optimizer = tf.compat.v1.train.AdamOptimizer(0.01)
    grads = optimizer.compute_gradients(loss)
    rank_size = get_rank_size()
    grads = [(hccl_ops.allreduce(g, "sum") / rank_size, v) for g, v in grads if g is not None]
    train_op = optimizer.apply_gradients(grads, global_step=tf.compat.v1.train.get_global_step())
    hook = NPUOutputTensorHook(  # noqa: F405
        {"pre": pre, "act": act, "dropped": dropped, "rows": rows},
        output_fn=STEPS.extend,
        output_every_n_steps=2,
    )
    return NPUEstimatorSpec(mode, loss=loss, train_op=train_op, training_hooks=[hook])


def main(model_dir, out):
    config = NPURunConfig(
        model_dir=model_dir, tf_random_seed=3, save_checkpoints_steps=4, log_step_count_steps=2
    )
    est = NPUEstimator(model_fn=model_fn, config=config, params={})
    est.train(input_fn, max_steps=4)
    metrics = est.evaluate(input_fn, steps=2)
    np.savez(out, **{k: np.stack([step[k] for step in STEPS]) for k in ("pre", "act", "dropped", "rows")})
    result = {
        "global_step": int(metrics["global_step"]),
        "eval_loss": float(metrics["loss"]),
        "rank_size": get_rank_size(),
        "logged_steps": len(STEPS),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
