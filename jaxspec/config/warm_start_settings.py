"""WarmStartSettings (``tf.estimator.WarmStartSettings``): where and what an Estimator
warm-starts from; ``jaxspec.loop.warm_start`` applies them."""

from __future__ import annotations

import os
from typing import Any

from jaxspec.rules.warm_start import WarmStartSettingsBase


class WarmStartSettings(WarmStartSettingsBase):
    """Where and what to warm-start from (``tf.estimator.WarmStartSettings``; fields,
    defaults and checks in ``jaxspec.rules.warm_start``).

    Applied only when model_dir has no checkpoint, after init_fn and before the
    Scaffold's init_fn, as TF applies it.

    Args:
      ckpt_to_initialize_from: a model_dir (its latest checkpoint is used) or one
        checkpoint step directory (``.../checkpoints/<step>``).
      vars_to_warm_start: a regex (or list of regexes) ``re.match``-ed from the start of
        state leaf names, the names ``Estimator.get_variable_names()`` lists: for a flax
        TrainState ``params/params/Dense_0/kernel`` (the TrainState's ``params`` field,
        then flax's own ``params`` collection), ``opt_state/0/mu/params/Dense_0/kernel``,
        ``step``. TF's default ``'.*'`` means its trainable variables; here it means the
        leaves under ``params`` when the state has a ``params`` field (a flax TrainState:
        optimizer slots and the step are not copied), else all leaves. E.g.
        ``'params/params/Dense_0/'`` copies the first Dense layer's kernel and bias.
      var_name_to_vocab_info: not supported (must be None).
      var_name_to_prev_var_name: ``{name in this state: name in the checkpoint}``, e.g.
        ``{'params/params/head/kernel': 'params/params/Dense_2/kernel'}``; each key must be
        a leaf that ``vars_to_warm_start`` selects.

    Raises:
      ValueError: ckpt_to_initialize_from is empty, or var_name_to_vocab_info is given. When the state is first built
        (``train`` with no checkpoint in model_dir): ``vars_to_warm_start`` selects no
        leaf (TF 2.15 copies nothing then, silently), a ``var_name_to_prev_var_name``
        key is not a selected leaf (as TF), or a selected leaf is missing from the
        checkpoint or differs in shape; each error lists up to 10 real names close to
        the one asked for.
    """

    __slots__ = ()
    vocab_info_supported = False


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
