"""Warm start selections that copy nothing are errors naming real leaves (issue 35, item 1).

TF 2.15 warm-starts nothing, silently, when ``vars_to_warm_start`` matches no variable;
jaxspec raises ValueError listing close real names (docs/decisions.md, "Trust, second
round"). An unused ``var_name_to_prev_var_name`` entry is a ValueError in TF too.
"""

from __future__ import annotations

import pytest

import jaxspec
from tests.helpers import batches_input_fn, digits, fast_config, init_fn, make_model_fn

X, Y = digits(16)


def _train(path, **kwargs):
    est = jaxspec.Estimator(
        make_model_fn(as_estimator_spec=True),
        config=fast_config(str(path)),
        params={},
        init_fn=init_fn,
        **kwargs,
    )
    est.train(batches_input_fn(X, Y, 16, repeat=True), steps=1)
    return est


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("source"))


def test_the_docstring_names_are_real(source):
    names = source.get_variable_names()
    assert "params/params/Dense_0/kernel" in names and "params/params/Dense_1/bias" in names
    assert "params/Dense_0/kernel" not in names
    doc = jaxspec.WarmStartSettings.__doc__
    for quoted in ("params/params/Dense_0/kernel", "step"):
        assert f"``{quoted}``" in doc and quoted in names
    assert "``params/Dense_0/kernel``" not in doc


def test_a_selection_matching_nothing_names_close_leaves(source, tmp_path):
    settings = jaxspec.WarmStartSettings(source.model_dir, vars_to_warm_start="params/Dense_0/kernel")
    with pytest.raises(ValueError, match="matches no leaf") as err:
        _train(tmp_path / "a", warm_start_from=settings)
    message = str(err.value)
    assert "'params/params/Dense_0/kernel'" in message, message
    listed = message.split("closest names are ")[1]
    assert listed.count("'") // 2 <= 10


def test_a_renamed_leaf_that_does_not_exist_names_close_leaves(source, tmp_path):
    settings = jaxspec.WarmStartSettings(
        source.model_dir,
        vars_to_warm_start="params/params/Dense_1/",
        var_name_to_prev_var_name={"params/Dense_1/bias": "params/params/Dense_1/bias"},
    )
    with pytest.raises(ValueError, match="'params/Dense_1/bias', which is not a leaf") as err:
        _train(tmp_path / "b", warm_start_from=settings)
    assert "'params/params/Dense_1/bias'" in str(err.value)
