"""The README's "How to export a JAX Estimator" code runs as written: it trains, exports
with build_raw_serving_input_receiver_fn, and TF serves what jaxspec predicts."""

from __future__ import annotations

import os
import pathlib
import re

import pytest

pytest.importorskip("tensorflow")
ROOT = pathlib.Path(__file__).resolve().parents[1]


def _section_code(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one python block"
    return blocks[0]


def test_readme_export_section_runs(tmp_path, monkeypatch):
    code = _section_code("How to export a JAX Estimator")
    assert "build_raw_serving_input_receiver_fn" in code and "export_saved_model" in code
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "readme_export"}
    exec(compile(code, "README.md", "exec"), namespace)  # its own assert_allclose checks serving
    assert os.path.isfile(os.path.join(namespace["export_dir"], "saved_model.pb"))
    assert namespace["est"].get_variable_value("global_step") == 50
