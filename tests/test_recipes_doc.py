"""docs/recipes.md runs as written: each section's python block trains, evaluates (and
for EMA exports and serves) and checks its own result with asserts."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SECTIONS = ["Gradient accumulation", "bfloat16 compute", "float16 with loss scaling", "EMA weights"]


def _section_code(title: str) -> str:
    text = (ROOT / "docs" / "recipes.md").read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "each recipe has one python block"
    return blocks[0]


def test_every_section_is_tested() -> None:
    text = (ROOT / "docs" / "recipes.md").read_text()
    assert re.findall(r"^## (.+)$", text, re.M) == SECTIONS


@pytest.mark.parametrize("title", SECTIONS)
def test_recipe_runs(title: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = _section_code(title)
    if "import tf_bridge" in code:
        pytest.importorskip("tensorflow")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "recipe"}
    exec(compile(code, f"docs/recipes.md ({title})", "exec"), namespace)  # its asserts check it
    if title == "float16 with loss scaling":  # the loss_scale summary at TF 2.15's steps 1, 11, ..., 91
        from tests.test_loss_scale import read_scalars

        written = read_scalars(namespace["est"].model_dir, "loss_scale")
        assert [step for step, _ in written] == list(range(1, 101, 10))
        # the scale settles within the first steps and holds to step 100, as checkpointed
        assert written[-1][1] == namespace["scale"]
