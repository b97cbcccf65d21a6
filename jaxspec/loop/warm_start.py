"""Warm starting: initialise state leaves from another model's checkpoint (the settings,
``WarmStartSettings``, live in ``jaxspec.config.warm_start_settings``)."""

from __future__ import annotations

import difflib
import logging
import re

import jax
import numpy as np

from jaxspec._trees import named_leaves
from jaxspec.config.warm_start_settings import WarmStartSettings
from jaxspec.spec.fn_types import State
from jaxspec.store import paths
from jaxspec.store.checkpoints import CHECKPOINT_SUBDIR, restore_on_host

__all__ = ["warm_start"]

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


def _patterns(settings: WarmStartSettings) -> list[str]:
    patterns = settings.vars_to_warm_start
    return [patterns] if isinstance(patterns, str) else list(patterns)


def _selected(names: list[str], settings: WarmStartSettings) -> list[str]:
    patterns = _patterns(settings)
    if patterns == [".*"] and any(n.startswith("params/") for n in names):
        return [n for n in names if n.startswith("params/")]
    return [n for n in names if any(re.match(p, n) for p in patterns)]


def close_names(wanted: str, names: list[str], n: int = 10) -> list[str]:
    """Up to ``n`` of ``names`` closest to ``wanted`` (difflib's ratio), best first; the
    first ``n`` names when none is close at all."""
    return difflib.get_close_matches(wanted, names, n=n, cutoff=0.3) or names[:n]


def _check_selection(names: list[str], chosen: set[str], settings: WarmStartSettings) -> None:
    """Raise when the settings select nothing, or rename a leaf they do not select.

    TF 2.15 warm-starts nothing without a word when ``vars_to_warm_start`` matches no
    variable; jaxspec raises (docs/decisions.md, "Trust, second round"). An unused
    ``var_name_to_prev_var_name`` entry is a ValueError in TF too.
    """
    if not chosen:
        wanted = " or ".join(repr(p) for p in _patterns(settings))
        raise ValueError(
            f"WarmStartSettings.vars_to_warm_start={wanted} matches no leaf of the state "
            f"(patterns are re.match-ed against leaf names from their start); the closest names are "
            f"{close_names(_patterns(settings)[0], names)} (Estimator.get_variable_names() lists them all)."
        )
    for name in settings.var_name_to_prev_var_name:
        if name in chosen:
            continue
        why = "vars_to_warm_start does not select" if name in names else "is not a leaf of the state"
        raise ValueError(
            f"WarmStartSettings.var_name_to_prev_var_name names {name!r}, which {why}; "
            f"the closest selected names are {close_names(name, sorted(chosen))}."
        )


def warm_start(state: State, settings: WarmStartSettings) -> State:
    """Return ``state`` with the selected leaves replaced by the checkpoint's values.

    Raises:
      ValueError: ``vars_to_warm_start`` selects no leaf of ``state``; a
        ``var_name_to_prev_var_name`` key is not a selected leaf; a selected leaf is missing
        from the checkpoint or has another shape (each names up to 10 close names).
    """
    path = _checkpoint_path(settings.ckpt_to_initialize_from)
    stored = dict(named_leaves(restore_on_host(path)))
    mine = named_leaves(state)
    chosen = set(_selected([n for n, _ in mine], settings))
    _check_selection([n for n, _ in mine], chosen, settings)
    out = []
    for name, leaf in mine:
        if name not in chosen:
            out.append(leaf)
            continue
        prev = settings.var_name_to_prev_var_name.get(name, name)
        if prev not in stored:
            raise ValueError(
                f"warm start: {prev!r} is not in the checkpoint {path}; its closest names are "
                f"{close_names(prev, sorted(stored))}."
            )
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
