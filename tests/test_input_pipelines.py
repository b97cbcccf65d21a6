"""Input pipeline modes: params['batch_size'], params['context'], input_fn call counts,
and the same training whichever way the same global batches arrive."""

from __future__ import annotations

import numpy as np
import pytest

import jaxspec
from jaxspec import InputPipelineConfig as IPC
from tests.helpers import digits, init_fn, make_model_fn

GLOBAL, REPLICAS, STEPS = 64, 8, 4  # two loops of 2 (iterations_per_loop): one compiled length


def _config(model_dir, pipeline):
    return jaxspec.RunConfig(
        model_dir=model_dir,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        log_step_count_steps=None,
        save_summary_steps=0,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=2, per_host_input_for_training=pipeline),
    )


def _input_fn(pipeline, x, y, calls):
    """Feeds the same global batches (rows 64k..64k+63 at step k) in each mode's shape."""

    def input_fn(params):
        ctx = params["context"]
        host_device, index, total = ctx.current_input_fn_deployment()
        calls.append(
            dict(
                batch_size=params["batch_size"],
                num_replicas=ctx.num_replicas,
                num_hosts=ctx.num_hosts,
                index=index,
                total=total,
                pipeline=ctx.input_pipeline,
            )
        )
        b = params["batch_size"]

        def gen():
            for k in range(STEPS):
                rows = slice(GLOBAL * k, GLOBAL * (k + 1))
                gx, gy = x[rows], y[rows]
                if pipeline is IPC.PER_HOST_V2:
                    for r in range(REPLICAS):
                        yield {"x": gx[r * b : (r + 1) * b]}, gy[r * b : (r + 1) * b]
                elif pipeline is IPC.PER_SHARD_V1:
                    yield {"x": gx[index * b : (index + 1) * b]}, gy[index * b : (index + 1) * b]
                else:
                    yield {"x": gx}, gy

        return gen()

    return input_fn


EXPECTED = {  # input_fn's params['batch_size'] and call count per train() call
    IPC.PER_HOST_V1: (64, 1),
    IPC.PER_HOST_V2: (8, 1),
    IPC.PER_SHARD_V1: (8, 8),
    IPC.BROADCAST: (64, 1),
}


def test_every_pipeline_trains_the_same(tmp_path):
    x, y = digits(GLOBAL * STEPS)
    finals = {}
    for pipeline, (batch_size, ncalls) in EXPECTED.items():
        calls = []
        est = jaxspec.TPUEstimator(
            make_model_fn(),
            config=_config(str(tmp_path / pipeline.name), pipeline),
            train_batch_size=GLOBAL,
            init_fn=init_fn,
        )
        est.train(_input_fn(pipeline, x, y, calls), steps=STEPS)
        assert len(calls) == ncalls, pipeline
        assert {c["batch_size"] for c in calls} == {batch_size}
        assert all(
            c["num_replicas"] == REPLICAS and c["num_hosts"] == 1 and c["pipeline"] is pipeline for c in calls
        )
        if pipeline is IPC.PER_SHARD_V1:
            assert sorted(c["index"] for c in calls) == list(range(8)) and {c["total"] for c in calls} == {8}
        assert est.get_variable_value("step") == STEPS
        finals[pipeline] = est._checkpoint_store().read()
    reference = finals[IPC.PER_HOST_V1]
    for pipeline, values in finals.items():
        for name in reference:
            np.testing.assert_allclose(
                values[name], reference[name], atol=1e-5, err_msg=f"{pipeline.name} {name}"
            )


@pytest.mark.parametrize("pipeline", [IPC.PER_HOST_V2, IPC.PER_SHARD_V1, IPC.BROADCAST])
def test_eval_and_predict_padding_in_each_pipeline(tmp_path, pipeline):
    x, y = digits(37)
    est = jaxspec.TPUEstimator(
        make_model_fn(),
        config=_config(str(tmp_path), pipeline),
        train_batch_size=GLOBAL,
        eval_batch_size=16,
        predict_batch_size=16,
        init_fn=init_fn,
    )

    def input_fn(params):
        b = params["batch_size"]
        _, index, total = params["context"].current_input_fn_deployment()
        starts = range(0, 37, b)
        if pipeline is IPC.PER_SHARD_V1:  # replica i reads every total-th batch
            starts = list(starts)[index::total]
        return (({"x": x[s : s + b]}, y[s : s + b]) for s in starts)

    results = est.evaluate(input_fn)
    preds = list(est.predict(lambda params: (f for f, _ in input_fn(params))))
    ids = np.array([p["class_ids"] for p in preds])
    assert len(ids) == 37
    # PER_SHARD_V1: replica i reads batches i, i+8, ...; interleaved they come back in order.
    assert results["accuracy"] == pytest.approx(float(np.mean(ids == y)), abs=1e-6)
    assert results["mean_label"] == pytest.approx(float(np.mean(y)), abs=1e-6)
