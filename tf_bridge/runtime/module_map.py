"""Module paths that resolve to other modules: one import finder, driven by a table.

Two kinds of entry, both resolved lazily (nothing is imported until the path is):

- ``"old.path": "new.path"``: an alias. ``import old.path`` gives the module
  ``new.path`` itself (``old.path is new.path``), and ``old.path.x`` gives ``new.path.x``
  for every submodule (so one entry covers a package). An alias whose target does not
  exist is not found, as if the entry were absent.
- ``"some.path": ("a.module", "b.module", ...)``: a namespace module of its own whose
  attributes are looked up in those modules, in order, when first read; with an empty
  tuple it is only a package holding other entries.

``tf_bridge.install()`` uses it for ``tensorflow_estimator``'s and ``npu_bridge``'s paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any

Entry = str | tuple[str, ...]


class MergedModule(types.ModuleType):
    """A module whose attributes come from ``sources`` (module names), read on first use."""

    def __init__(self, name: str, sources: tuple[str, ...], doc: str | None = None) -> None:
        super().__init__(name, doc)
        self.__path__: list[str] = []  # a package: entries below it can be imported
        self._sources = sources

    def __getattr__(self, attr: str) -> Any:  # a source module's attribute: any value
        if attr.startswith("__"):
            raise AttributeError(attr)
        if _mapped(f"{self.__name__}.{attr}"):  # a mapped submodule wins over a source's attribute
            value = importlib.import_module(f"{self.__name__}.{attr}")
            setattr(self, attr, value)
            return value
        for source in self._sources:
            module = importlib.import_module(source)
            if hasattr(module, attr):
                value = getattr(module, attr)
                setattr(self, attr, value)
                return value
        raise AttributeError(
            f"module {self.__name__!r} has no attribute {attr!r} (tf_bridge has no such name)."
        )

    def __dir__(self) -> list[str]:
        names = set(super().__dir__())
        for source in self._sources:
            module = importlib.import_module(source)
            names.update(getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")]))
        return sorted(names)


def _mapped(name: str) -> bool:
    """Whether a ``ModuleMapFinder`` on sys.meta_path has an entry for ``name``."""
    return any(isinstance(f, ModuleMapFinder) and f.resolve(name) is not None for f in sys.meta_path)


class _AliasLoader(importlib.abc.Loader):
    """Loads ``name`` as the already importable module ``target``."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = importlib.import_module(self._target)
        self._spec = module.__spec__  # the import system overwrites it; exec_module puts it back
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self._spec


class _MergedLoader(importlib.abc.Loader):
    def __init__(self, sources: tuple[str, ...]) -> None:
        self._sources = sources

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return MergedModule(spec.name, self._sources, f"tf_bridge's names for ``{spec.name}``.")

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _module_exists(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


class ModuleMapFinder(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder for the paths of ``table`` (see the module docstring)."""

    def __init__(self, table: Mapping[str, Entry]) -> None:
        self.table = dict(table)

    def resolve(self, fullname: str) -> Entry | None:
        """The entry for ``fullname``: its own, or an alias of a package above it extended
        by the rest of the path; None when the table has none or the target is missing."""
        entry = self.table.get(fullname)
        if isinstance(entry, tuple):
            return entry
        if entry is None:
            parts = fullname.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                above = self.table.get(".".join(parts[:cut]))
                if isinstance(above, str):
                    entry = ".".join([above, *parts[cut:]])
                    break
        return entry if entry is not None and _module_exists(entry) else None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        entry = self.resolve(fullname)
        if entry is None:
            return None
        if isinstance(entry, tuple):
            return importlib.machinery.ModuleSpec(fullname, _MergedLoader(entry), is_package=True)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(entry))


def register(finder: ModuleMapFinder) -> ModuleMapFinder:
    """Put ``finder`` first on ``sys.meta_path`` (once)."""
    if finder not in sys.meta_path:
        sys.meta_path.insert(0, finder)
    return finder
