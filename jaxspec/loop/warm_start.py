"""Warm starting: initialise state leaves from another model's checkpoint."""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import jax
import numpy as np

from jaxspec._trees import named_leaves
from jaxspec.store.checkpoints import CHECKPOINT_SUBDIR, restore_on_host

_log = logging.getLogger("jaxspec")


class WarmStartSettings:
    """Where and what to warm-start from (``tf.estimator.WarmStartSettings``).

    Applied only when model_dir has no checkpoint, after init_fn and before the
    Scaffold's init_fn, as TF applies it.

    Args:
      ckpt_to_initialize_from: a model_dir (its latest checkpoint is used) or one
        checkpoint step directory (``.../checkpoints/<step>``).
      vars_to_warm_start: a regex (or list of regexes) over state leaf names
        (``params/Dense_0/kernel``). TF's default ``'.*'`` means its trainable variables;
        here it means the leaves under ``params`` when the state has a ``params`` field
        (a flax TrainState: optimizer slots and the step are not copied), else all leaves.
      var_name_to_vocab_info: not supported (must be None).
      var_name_to_prev_var_name: ``{name in this state: name in the checkpoint}``.

    Raises:
      ValueError: var_name_to_vocab_info is given.
    """

    def __init__(
        self,
        ckpt_to_initialize_from: str,
        vars_to_warm_start: Any = ".*",
        var_name_to_vocab_info: Any = None,
        var_name_to_prev_var_name: dict[str, str] | None = None,
    ) -> None:
        if var_name_to_vocab_info:
            raise ValueError("WarmStartSettings: var_name_to_vocab_info is not supported.")
        self.ckpt_to_initialize_from = os.fspath(ckpt_to_initialize_from)
        self.vars_to_warm_start = vars_to_warm_start
        self.var_name_to_prev_var_name = dict(var_name_to_prev_var_name or {})


def as_settings(warm_start_from: Any) -> WarmStartSettings | None:
    """A path becomes ``WarmStartSettings(path)``; settings pass through; None stays None.

    Raises:
      TypeError: anything else.
    """
    if warm_start_from is None or isinstance(warm_start_from, WarmStartSettings):
        return warm_start_from
    if isinstance(warm_start_from, (str, os.PathLike)):
        return WarmStartSettings(os.fspath(warm_start_from))
    raise TypeError(
        f"warm_start_from must be a path or WarmStartSettings, got {type(warm_start_from).__name__}."
    )


def _checkpoint_path(path: str) -> str:
    path = os.path.abspath(path)
    directory = (
        os.path.join(path, CHECKPOINT_SUBDIR)
        if os.path.isdir(os.path.join(path, CHECKPOINT_SUBDIR))
        else None
    )
    if directory is None:
        return path
    steps = [int(d) for d in os.listdir(directory) if d.isdigit()]
    if not steps:
        raise ValueError(f"warm start: no checkpoint in {path}.")
    return os.path.join(directory, str(max(steps)))


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
