""" "params declared but not given": a model_fn that takes params while the Estimator got
none is a logged warning, as TF 2.15's ``_verify_model_fn_args`` logs one (docs/behaviour-table.md)."""

from __future__ import annotations

import logging

import pytest

import jaxspec


def _with_params(features, labels, mode, params):
    raise AssertionError("not called")


def _without_params(features, labels, mode):
    raise AssertionError("not called")


@pytest.mark.parametrize(
    ("model_fn", "params", "warned"),
    [(_with_params, None, True), (_with_params, {}, False), (_without_params, None, False)],
)
def test_params_declared_but_not_given_warns(tmp_path, caplog, model_fn, params, warned):
    with caplog.at_level(logging.WARNING, logger="jaxspec"):
        jaxspec.Estimator(model_fn, model_dir=str(tmp_path), params=params)
    lines = [
        r.getMessage() for r in caplog.records if "params" in r.getMessage() and r.levelno == logging.WARNING
    ]
    assert bool(lines) is warned, lines
    if warned:
        assert "no params were given" in lines[0]
