"""``tf.estimator.WarmStartSettings``'s fields, defaults and checks, once for the JAX
Estimators (``jaxspec.WarmStartSettings``) and tf_bridge's (``tf_bridge.WarmStartSettings``)."""

from __future__ import annotations

import collections
import os
from collections.abc import Mapping, Sequence
from typing import ClassVar

# The field names written out in the call, the form a type checker reads.
_Fields = collections.namedtuple(
    "_Fields",
    ["ckpt_to_initialize_from", "vars_to_warm_start", "var_name_to_vocab_info", "var_name_to_prev_var_name"],
)
FIELDS = _Fields._fields


class WarmStartSettingsBase(_Fields):
    """Where and what to warm-start from, a namedtuple as TF's.

    Args:
      ckpt_to_initialize_from: a model_dir (its latest checkpoint) or one checkpoint
        (path-like; kept as a str).
      vars_to_warm_start: a regex or a list of regexes (default ``'.*'``).
      var_name_to_vocab_info: ``{name: VocabInfo}`` (kept as a dict; ``{}`` for None).
      var_name_to_prev_var_name: ``{name now: name in the checkpoint}`` (a dict).

    Raises:
      ValueError: ``ckpt_to_initialize_from`` is empty (as TF), or
        ``var_name_to_vocab_info`` is given where the side cannot use it.
    """

    __slots__ = ()
    #: Whether ``var_name_to_vocab_info`` may be given (TF's warm start reads it).
    vocab_info_supported: ClassVar[bool] = True

    def __new__(
        cls,
        ckpt_to_initialize_from: str | os.PathLike[str],
        vars_to_warm_start: str | Sequence[str] | None = ".*",
        var_name_to_vocab_info: Mapping[str, object] | None = None,
        var_name_to_prev_var_name: Mapping[str, str] | None = None,
    ) -> WarmStartSettingsBase:
        if not ckpt_to_initialize_from:
            raise ValueError("WarmStartSettings: ckpt_to_initialize_from is required.")
        if var_name_to_vocab_info and not cls.vocab_info_supported:
            raise ValueError("WarmStartSettings: var_name_to_vocab_info is not supported here.")
        return super().__new__(
            cls,
            os.fsdecode(ckpt_to_initialize_from),
            vars_to_warm_start,
            dict(var_name_to_vocab_info or {}),
            dict(var_name_to_prev_var_name or {}),
        )
