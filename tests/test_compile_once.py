"""Compile once per mode (issue 46, item 1): a train() call compiles at most two
training programs whatever the grouping, the hooks' steps, max_steps or a resume point;
evaluate() and predict() at most two each. Counted from jax.monitoring's backend-compile
events, by the compiled function's name, with the persistent cache off around each count
(helpers.no_compilation_cache); the trained numbers equal a hand loop's and the ungrouped
loop's."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import jax
import jax.monitoring
import numpy as np
import optax
import pytest
from helpers import batches_input_fn, digits, init_fn, make_model_fn, no_compilation_cache

import jaxspec
from jaxspec.loop_cost import BACKEND_COMPILE_EVENT

BATCH = 16
X, Y = digits(160)  # 10 batches, cycled
_heard: list[list[str]] = []  # the open recordings: compiled function names


def _listen(event: str, duration: float, **kwargs: Any) -> None:
    if event == BACKEND_COMPILE_EVENT:
        for names in _heard:
            names.append(str(kwargs.get("fun_name", "?")))


jax.monitoring.register_event_duration_secs_listener(_listen)


@contextlib.contextmanager
def compiled_programs() -> Iterator[list[str]]:
    """The names of the programs XLA compiles inside the block (``jit(train_loop)``...)."""
    names: list[str] = []
    with no_compilation_cache():
        assert not jax.config.jax_enable_compilation_cache
        _heard.append(names)
        try:
            yield names
        finally:
            _heard.remove(names)


def _loops(names: list[str], mode: str) -> list[str]:
    """The compiled loops of ``mode`` among ``names`` (init_fn, key splits and eager
    operations are other programs)."""
    marks = {
        "train": ("train_loop", "train_block_loop"),
        "eval": ("jit(loop)", "eval_block_loop", "totals"),
        "infer": ("predict_loop",),
    }
    return [n for n in names if any(m in n for m in marks[mode])]


def _config(model_dir: str, **kwargs: Any) -> jaxspec.RunConfig:
    return jaxspec.RunConfig(model_dir=model_dir, **kwargs)


def _estimator(model_dir: str, **kwargs: Any) -> jaxspec.Estimator:
    return jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True), config=_config(model_dir, **kwargs), init_fn=init_fn, params={}
    )


@functools.lru_cache(maxsize=1)  # both parametrizations compare with the same 500 steps
def _hand_params(steps: int) -> Any:
    """The same model trained by hand: one jitted step per batch, the batches cycled."""
    state = init_fn(None, {"x": X[:BATCH]})

    @jax.jit
    def step(state: Any, xb: Any, yb: Any) -> Any:
        def loss_fn(p: Any) -> Any:
            return optax.softmax_cross_entropy_with_integer_labels(state.apply_fn(p, xb), yb).mean()

        return state.apply_gradients(grads=jax.grad(loss_fn)(state.params))

    for i in range(steps):
        s = (i % (len(X) // BATCH)) * BATCH
        state = step(state, X[s : s + BATCH], Y[s : s + BATCH])
    return jax.device_get(state.params)


def _assert_params(est: jaxspec.Estimator, params: Any) -> None:
    for path, value in jax.tree_util.tree_flatten_with_path(params)[0]:
        name = "params/" + "/".join(str(getattr(k, "key", k)) for k in path)
        np.testing.assert_allclose(est.get_variable_value(name), value, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "settings",
    [{}, {"save_summary_steps": 10, "log_step_count_steps": 7}],
    ids=["default RunConfig", "summaries every 10, logs every 7"],
)
def test_a_fresh_train_compiles_at_most_two_training_programs(tmp_path: Any, settings: dict) -> None:
    est = _estimator(str(tmp_path), **settings)
    with compiled_programs() as names:
        est.train(batches_input_fn(X, Y, BATCH, repeat=True), steps=500)
    loops = _loops(names, "train")
    assert 1 <= len(loops) <= 2, names
    assert est.get_variable_value("global_step") == 500
    _assert_params(est, _hand_params(500))


def test_a_resumed_train_compiles_at_most_two_and_equals_the_ungrouped_loop(tmp_path: Any) -> None:
    variables = {}
    for spe in ("auto", 1):
        model_dir = str(tmp_path / str(spe))
        _estimator(model_dir, save_checkpoints_steps=100, steps_per_execution=spe).train(
            batches_input_fn(X, Y, BATCH, repeat=True), max_steps=100
        )
        est = _estimator(model_dir, save_checkpoints_steps=100, steps_per_execution=spe)  # a new process
        with compiled_programs() as names:
            est.train(batches_input_fn(X, Y, BATCH, repeat=True), max_steps=537)
        assert 1 <= len(_loops(names, "train")) <= 2, names
        assert est.get_variable_value("global_step") == 537
        variables[spe] = {n: np.asarray(est.get_variable_value(n)) for n in est.get_variable_names()}
    for name, value in variables[1].items():
        np.testing.assert_allclose(variables["auto"][name], value, rtol=1e-5, atol=1e-5, err_msg=name)


def test_evaluate_and_predict_compile_at_most_two_programs_each(tmp_path: Any) -> None:
    _estimator(str(tmp_path)).train(batches_input_fn(X, Y, BATCH, repeat=True), steps=20)
    rows = 23 * BATCH + 5  # a short last batch
    x, y = digits(rows)
    est = _estimator(str(tmp_path))
    with compiled_programs() as names:
        est.evaluate(batches_input_fn(x, y, BATCH))
    assert 1 <= len(_loops(names, "eval")) <= 2, names
    with compiled_programs() as names:
        predictions = list(est.predict(batches_input_fn(x, None, BATCH)))
    assert 1 <= len(_loops(names, "infer")) <= 2, names
    assert len(predictions) == rows


def test_a_tpu_estimator_keeps_its_loop_of_iterations_per_loop_steps(tmp_path: Any) -> None:
    """TPUEstimator(use_tpu=True, iterations_per_loop=3) on the mesh: loops of 3 steps
    and the remainder's (10 = 3 + 3 + 3 + 1), a checkpoint every 4 steps."""
    config = jaxspec.RunConfig(
        model_dir=str(tmp_path),
        save_checkpoints_steps=4,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=3),
    )
    est = jaxspec.TPUEstimator(
        make_model_fn(), config=config, train_batch_size=BATCH, init_fn=init_fn, use_tpu=True, params={}
    )
    with compiled_programs() as names:
        est.train(batches_input_fn(X, Y, BATCH, repeat=True), steps=10)
    assert 1 <= len(_loops(names, "train")) <= 2, names
    assert est.get_variable_value("global_step") == 10


def test_each_compile_analysis_lands_on_a_summary_step_of_its_own(tmp_path: Any) -> None:
    """Two programs compiled before steps 1 and 2 (summaries every 10 steps from step 1):
    their memory/ and perf/ summaries go to steps 1 and 11, not 1 and 2."""
    from jaxspec.hooks.estimator_hooks import ProgressHook
    from jaxspec.loop_cost import LoopCost

    hook = ProgressHook(str(tmp_path), 10, None, None, lambda *a, **k: None)
    hook.after_create_session(type("S", (), {"global_step": 0})(), None)
    cost = LoopCost(3, 2e4, 10, 20, 30, 40, 1, "cpu", "cpu")
    hook.after_compile(cost, 0)
    hook.after_compile(cost, 1)
    hook.after_compile(cost, 14)  # a later compile: the next summary step, 21
    assert [s for s, _ in hook._pending] == [1, 11, 21]
