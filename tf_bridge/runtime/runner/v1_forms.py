"""tf.estimator's v1 classes (``tf.compat.v1.estimator.*``) as forms of tf_bridge's v2 ones.

TF 2.15 had two classes for each estimator: the v1 one (``tf.compat.v1.estimator.X``, and
the plain names of ``tensorflow_estimator``'s modules) and the v2 one (``tf.estimator.X``,
the ``...V2`` names). tf_bridge implements the v2 class; ``v1_form(cls)`` makes the v1
one, a subclass of the same name that

- has ``export_savedmodel`` (``V1Methods``), which TF 2.15's v2 classes hid (reading it
  raised AttributeError);
- takes TF 2.15's v1 defaults where they differ (``V1_DEFAULTS``): the canned estimators'
  ``loss_reduction`` is ``SUM`` (v2: ``SUM_OVER_BATCH_SIZE``).

One line makes a class's v1 form, e.g. ``LinearClassifier = v1_form(linear.LinearClassifier)``
(the canned ones are in ``tf_bridge.runtime.canned.v1``). Otherwise a v1 form is the v2
class: the same graph, Keras optimizers and variable names (TF 2.15's v1 canned
estimators used ``tf.compat.v1.train`` optimizers, whose slots are named differently).
A v1 form is a subclass of the v2 class (TF 2.15 had it the other way round), so
``isinstance(v1_instance, tf.estimator.Estimator)`` holds here.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from jaxspec.mode_keys import ModeKeys
from jaxspec.rules.head_keys import Reduction
from tf_bridge.runtime.runner.estimator import Estimator as EstimatorV2

T = TypeVar("T")

#: TF 2.15's v1 defaults that differ from the v2 ones, by argument name (applied where
#: the class takes the argument).
V1_DEFAULTS: dict[str, Any] = {"loss_reduction": Reduction.SUM}


class V1Methods:
    """What TF 2.15's v1 Estimators had and its v2 ones hid: ``export_savedmodel``."""

    _export_all: Callable[..., bytes]

    def export_savedmodel(
        self,
        export_dir_base: Any,
        serving_input_receiver_fn: Callable[[], Any],
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


def v1_form(cls: type[T], **defaults: Any) -> type[T]:
    """The v1 form of tf_bridge's v2 Estimator class ``cls``: a subclass named as ``cls``
    with ``V1Methods`` and TF 2.15's v1 defaults (``V1_DEFAULTS`` for the arguments ``cls``
    takes, then ``defaults``); its ``__init__`` signature shows them.

    Raises:
      TypeError: ``defaults`` names an argument ``cls.__init__`` does not take.
    """
    signature = inspect.signature(cls.__init__)  # type: ignore[misc]
    names = list(signature.parameters)
    unknown = sorted(set(defaults) - set(names))
    if unknown:
        raise TypeError(f"{cls.__name__}.__init__ takes no argument {unknown}.")
    changed = {k: v for k, v in V1_DEFAULTS.items() if k in names} | defaults
    parameters = [
        p.replace(default=changed[p.name]) if p.name in changed else p for p in signature.parameters.values()
    ]
    base_init = cls.__init__  # type: ignore[misc]

    @functools.wraps(base_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for name, value in changed.items():
            if name not in kwargs and len(args) < names.index(name):  # not given by position
                kwargs[name] = value
        base_init(self, *args, **kwargs)

    __init__.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    doc = (
        f"``tf.compat.v1.estimator.{cls.__name__}``: TF 2.15's v1 form of ``{cls.__name__}``, which it is in "
        f"everything but ``export_savedmodel`` (this form has it) and these defaults: {changed or 'none'}.\n\n"
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
