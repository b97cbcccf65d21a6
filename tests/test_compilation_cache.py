"""A new process on an existing model_dir compiles no training loop: JAX's persistent
compilation cache (on by default for Estimators) already holds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, os.path.join({repo!r}, "tests"))
    import jax
    from helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn
    import jaxspec

    events = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    x, y = digits(64)
    est = jaxspec.TPUEstimator(make_model_fn(), config=fast_config({model_dir!r}, iterations_per_loop=2),
                               use_tpu=False, train_batch_size=16, init_fn=init_fn)
    est.train(batches_input_fn(x, y, 16, repeat=True), steps=4)
    print(json.dumps({{"cache_dir": jax.config.jax_compilation_cache_dir,
                      "hits": events.count("/jax/compilation_cache/cache_hits"),
                      "misses": events.count("/jax/compilation_cache/cache_misses"),
                      "step": int(est.get_variable_value("global_step"))}}))
    """
)


def _run(tmp_path, env_value):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = CHILD.format(repo=repo, model_dir=str(tmp_path / "model"))
    env = dict(os.environ, JAXSPEC_COMPILATION_CACHE_DIR=env_value, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _loop_entries(cache_dir):
    return {f for f in os.listdir(cache_dir) if f.startswith("jit_train_loop")}


def test_second_process_compiles_no_loop(tmp_path):
    cache_dir = str(tmp_path / "xla")
    first = _run(tmp_path, cache_dir)
    assert first["cache_dir"] == cache_dir and first["step"] == 4
    loops = _loop_entries(cache_dir)
    assert loops, os.listdir(cache_dir)  # the training loop was written to the cache
    second = _run(tmp_path, cache_dir)
    assert second["step"] == 8  # resumed on the same model_dir
    assert _loop_entries(cache_dir) == loops  # and compiled no new loop
    assert second["hits"] >= len(loops)


def test_switched_off(tmp_path):
    result = _run(tmp_path, "off")
    assert result["cache_dir"] in (None, "") and result["hits"] == 0
