"""Warm starting: initialise state leaves from another model's checkpoint (the settings,
``WarmStartSettings``, live in ``jaxspec.warm_start_settings``; importing them from here
still works)."""

from __future__ import annotations

import logging
import re
from typing import Any

import jax
import numpy as np

from jaxspec._trees import named_leaves
from jaxspec.store import paths
from jaxspec.store.checkpoints import CHECKPOINT_SUBDIR, restore_on_host
from jaxspec.warm_start_settings import WarmStartSettings, as_settings

__all__ = ["WarmStartSettings", "as_settings", "warm_start"]

_log = logging.getLogger("jaxspec")


def _checkpoint_path(path: str) -> str:
    path = paths.absolute(path)
    directory = (
        paths.join(path, CHECKPOINT_SUBDIR) if paths.isdir(paths.join(path, CHECKPOINT_SUBDIR)) else None
    )
    if directory is None:
        return path
    steps = [int(d) for d in paths.listdir(directory) if d.isdigit()]
    if not steps:
        raise ValueError(f"warm start: no checkpoint in {path}.")
    return paths.join(directory, str(max(steps)))


def _selected(names: list[str], settings: WarmStartSettings) -> list[str]:
    patterns = settings.vars_to_warm_start
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    if patterns == [".*"] and any(n.startswith("params/") for n in names):
        return [n for n in names if n.startswith("params/")]
    return [n for n in names if any(re.match(p, n) for p in patterns)]


def warm_start(state: Any, settings: WarmStartSettings) -> Any:
    """Return ``state`` with the selected leaves replaced by the checkpoint's values.

    Raises:
      ValueError: a selected leaf is missing from the checkpoint or has another shape.
    """
    path = _checkpoint_path(settings.ckpt_to_initialize_from)
    stored = dict(named_leaves(restore_on_host(path)))
    mine = named_leaves(state)
    chosen = set(_selected([n for n, _ in mine], settings))
    out = []
    for name, leaf in mine:
        if name not in chosen:
            out.append(leaf)
            continue
        prev = settings.var_name_to_prev_var_name.get(name, name)
        if prev not in stored:
            raise ValueError(f"warm start: {prev!r} is not in the checkpoint {path}.")
        value = np.asarray(stored[prev])
        if value.shape != tuple(np.shape(leaf)):
            raise ValueError(
                f"warm start: the checkpoint's {prev!r} has shape {value.shape}; this state's "
                f"{name!r} has {tuple(np.shape(leaf))}."
            )
        dtype = leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype  # a sharded leaf stays put
        out.append(value.astype(dtype))
    _log.info("Warm-started %d state leaves from %s.", len(chosen), path)
    return jax.tree.unflatten(jax.tree.structure(state), out)
