"""Scaffold: how the first state is completed when no checkpoint is restored."""

from __future__ import annotations

from collections.abc import Callable

from jaxspec.spec.fn_types import State


class Scaffold:
    """The JAX form of ``tf.compat.v1.train.Scaffold``.

    TensorFlow's Scaffold gathers the ops that initialise variables; in jaxspec the
    first state is built by the Estimator's ``init_fn``, and ``Scaffold.init_fn``
    (``state -> state``) may then change it, e.g. to load pretrained weights. As in TF,
    ``init_fn`` runs only when no checkpoint is restored from model_dir.

    Args:
      init_fn: ``None`` or a callable taking the initial state pytree and returning a
        state of the same tree structure, shapes and dtypes.
      copy_from_scaffold: another Scaffold whose ``init_fn`` is used when ``init_fn``
        is ``None``.

    Raises:
      TypeError: ``init_fn`` is not callable, or ``copy_from_scaffold`` is not a Scaffold.
    """

    def __init__(
        self,
        init_fn: Callable[[State], State] | None = None,
        copy_from_scaffold: Scaffold | None = None,
    ) -> None:
        if copy_from_scaffold is not None:
            if not isinstance(copy_from_scaffold, Scaffold):
                raise TypeError(
                    "Scaffold: copy_from_scaffold must be a Scaffold, got "
                    f"{type(copy_from_scaffold).__name__}."
                )
            if init_fn is None:
                init_fn = copy_from_scaffold.init_fn
        if init_fn is not None and not callable(init_fn):
            raise TypeError(f"Scaffold: init_fn must be callable, got {type(init_fn).__name__}.")
        self._init_fn = init_fn

    @property
    def init_fn(self) -> Callable[[State], State] | None:
        """The ``state -> state`` function, or None."""
        return self._init_fn

    def apply(self, state: State) -> State:
        """Return ``init_fn(state)``, or ``state`` when there is no init_fn."""
        return state if self._init_fn is None else self._init_fn(state)
