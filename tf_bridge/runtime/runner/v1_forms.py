"""tf.estimator's v1 classes (``tf.compat.v1.estimator.*``) as forms of tf_bridge's v2 ones.

TF 2.15 had two classes for each estimator: the v1 one (``tf.compat.v1.estimator.X``, and
the plain names of ``tensorflow_estimator``'s modules) and the v2 one (``tf.estimator.X``,
the ``...V2`` names). tf_bridge implements the v2 class; ``v1_form(cls)`` makes the v1
one, a subclass of the same name that

- has ``export_savedmodel`` (``V1Methods``), which TF 2.15's v2 classes hid (reading it
  raised AttributeError);
- takes TF 2.15's v1 arguments where they differ (``V1_ARGUMENTS``): the canned
  estimators' ``loss_reduction`` is a ``tf.compat.v1.losses.Reduction`` value, by default
  ``SUM`` (``'weighted_sum'``; v2: ``tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE``);
  SUM and SUM_OVER_BATCH_SIZE are computed, MEAN and SUM_BY_NONZERO_WEIGHTS (which TF
  2.15's v1 heads also computed) are refused with ValueError.

One line makes a class's v1 form, e.g. ``Estimator = v1_form(EstimatorV2)``; otherwise a
v1 form is the v2 class. A v1 form is a subclass of the v2 class (TF 2.15 had it the other
way round), so ``isinstance(v1_instance, tf.estimator.Estimator)`` holds here. The v1
canned estimators are not forms: ``tf_bridge.runtime.canned.v1`` builds them as TF 2.15's
v1 classes (TF1 optimizers and slot names, partitioners, v1 heads), with ``V1Methods`` and
``v1_loss_reduction`` from here.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import Any, TypeVar

import tensorflow as tf

from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.head_keys import Reduction
from tf_bridge.runtime.runner.estimator import Estimator as EstimatorV2

T = TypeVar("T")
_V1_REDUCTION = tf.compat.v1.losses.Reduction
# tf.compat.v1.losses.Reduction's names for the two reductions the (v2) heads compute.
_V1_TO_HEAD = {
    _V1_REDUCTION.SUM: Reduction.SUM,
    _V1_REDUCTION.SUM_OVER_BATCH_SIZE: Reduction.SUM_OVER_BATCH_SIZE,
}


def v1_loss_reduction(value: object) -> str:
    """A v1 canned estimator's ``loss_reduction`` (a ``tf.compat.v1.losses.Reduction``
    value, as TF 2.15's v1 classes took) as the head's reduction.

    Raises:
      ValueError: NONE or another value (as TF); MEAN or SUM_BY_NONZERO_WEIGHTS, which TF
        2.15's v1 heads computed and tf_bridge's heads do not.
    """
    if value in _V1_TO_HEAD:
        return _V1_TO_HEAD[value]
    if value in (_V1_REDUCTION.MEAN, _V1_REDUCTION.SUM_BY_NONZERO_WEIGHTS):
        raise ValueError(
            f"loss_reduction {value!r}: tf_bridge's v1 canned estimators compute only "
            f"{sorted(_V1_TO_HEAD)} (tf.compat.v1.losses.Reduction.SUM, SUM_OVER_BATCH_SIZE)."
        )
    raise ValueError(
        f"loss_reduction must be a tf.compat.v1.losses.Reduction value other than NONE for a v1 canned "
        f"estimator, got {value!r}."
    )


#: TF 2.15's v1 arguments that differ from the v2 ones: name -> (the v1 default, what
#: turns a v1 value into the v2 class's). Applied where the class takes the argument.
V1_ARGUMENTS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "loss_reduction": (_V1_REDUCTION.SUM, v1_loss_reduction),
}


class V1Methods:
    """What TF 2.15's v1 Estimators had and its v2 ones hid: ``export_savedmodel``."""

    _export_all: Callable[..., bytes]

    def export_savedmodel(
        self,
        export_dir_base: str | bytes | os.PathLike[str],
        serving_input_receiver_fn: Callable[[], object] | None,
        assets_extra: dict[str, str] | None = None,
        as_text: bool = False,
        checkpoint_path: str | None = None,
        strip_default_attrs: bool = False,
    ) -> bytes:
        """``tf.compat.v1.estimator.Estimator.export_savedmodel`` (TF1's name): the PREDICT
        export of ``export_saved_model``, keeping default-valued node attributes unless
        ``strip_default_attrs``. Only the v1 classes have it, as in TF 2.15 (its v2
        classes raised AttributeError).

        Returns:
          The export directory, as bytes.

        Raises:
          ValueError: as export_saved_model.
        """
        if not serving_input_receiver_fn:
            raise ValueError("export_savedmodel needs a serving_input_receiver_fn.")
        return self._export_all(
            export_dir_base,
            {ModeKeys.PREDICT: serving_input_receiver_fn},
            assets_extra,
            as_text,
            checkpoint_path,
            strip_default_attrs,
        )


def v1_form(cls: type[T]) -> type[T]:
    """The v1 form of tf_bridge's v2 Estimator class ``cls``: a subclass named as ``cls``
    with ``V1Methods``, whose arguments in ``V1_ARGUMENTS`` take TF 2.15's v1 defaults and
    values (its ``__init__`` signature shows the defaults); the rest is ``cls``."""
    signature = inspect.signature(cls.__init__)  # type: ignore[misc]
    names = list(signature.parameters)
    changed = {k: v for k, v in V1_ARGUMENTS.items() if k in names}
    parameters = [
        p.replace(default=changed[p.name][0]) if p.name in changed else p
        for p in signature.parameters.values()
    ]
    base_init = cls.__init__  # type: ignore[misc]

    @functools.wraps(base_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        args = list(args)
        for name, (default, convert) in changed.items():
            position = names.index(name) - 1  # args excludes self
            if position < len(args):
                args[position] = convert(args[position])
            else:
                kwargs[name] = convert(kwargs.get(name, default))
        base_init(self, *args, **kwargs)

    __init__.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    defaults = {k: v[0] for k, v in changed.items()}
    doc = (
        f"``tf.compat.v1.estimator.{cls.__name__}``: TF 2.15's v1 form of ``{cls.__name__}``, which it is in "
        f"everything but ``export_savedmodel`` (this form has it) and these v1 defaults: {defaults or 'none'}"
        " (``loss_reduction`` is a ``tf.compat.v1.losses.Reduction`` value, SUM or SUM_OVER_BATCH_SIZE).\n\n"
        + (cls.__doc__ or "")
    )
    namespace = {
        "__init__": __init__,
        "__doc__": doc,
        "__module__": __name__,
        "__qualname__": cls.__qualname__,
    }
    return type(cls.__name__, (V1Methods, cls), namespace)


#: ``tf.compat.v1.estimator.Estimator``: the Estimator with ``export_savedmodel``.
Estimator = v1_form(EstimatorV2)
