"""Build the API reference (HTML, pdoc) of jaxspec and tf_bridge from their docstrings.

Usage: ``python tools/build_docs.py [OUTPUT_DIR]`` (default ``docs/api``; ``./dev docs``).
Exits with status 1, listing them, if pdoc warns about anything (an unresolvable
reference, a module that fails to import, a malformed docstring section).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ["jaxspec", "tf_bridge"]


def build(output: Path) -> list[str]:
    """Write the HTML reference into ``output``; return pdoc's warnings (empty when clean)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("PDOC_ALLOW_EXEC", "1")  # a dependency runs `uname -p` on import
    sys.path.insert(0, str(ROOT))
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="google", footer_text="jaxspec API reference", search=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*MODULES, output_directory=output)
    return [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if w.filename.startswith(str(Path(pdoc.__file__).parent)) or "pdoc" in str(w.message).lower()
    ]


def main() -> int:
    output = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "api"
    problems = build(output)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"API reference: {output / 'index.html'} ({len(problems)} warnings)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
