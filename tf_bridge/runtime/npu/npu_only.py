"""Names of Ascend's adapter that have no meaning on tf_bridge's CPU path.

Such a name imports (a ModelZoo script's ``from npu_bridge... import ...`` lines all run)
and raises ``NotImplementedError`` only when it is called, naming itself and saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn


def npu_only(qualname: str, why: str) -> Callable[..., NoReturn]:
    """A stand-in for the adapter's ``qualname`` (e.g. ``"npu_ops.LARSV2"``).

    Calling it raises ``NotImplementedError`` naming ``qualname`` with ``why`` (what the
    NPU does that the CPU cannot); it accepts any arguments.
    """

    def unavailable(*args: object, **kwargs: object) -> NoReturn:
        raise NotImplementedError(
            f"npu_bridge's {qualname} runs on an Ascend NPU only ({why}); tf_bridge's CPU path has no "
            "equivalent. Run on an NPU host with the adapter installed, or replace the call."
        )

    unavailable.__name__ = qualname.rsplit(".", 1)[-1]
    unavailable.__qualname__ = qualname
    unavailable.__doc__ = (
        f"npu_bridge's ``{qualname}``: NPU only ({why}); raises NotImplementedError when called."
    )
    return unavailable


class NpuOnlyModule:
    """A stand-in for one of the adapter's NPU-only modules (``npu_rnn``, ``util``, ...):
    every attribute is an ``npu_only`` function named ``<module>.<attribute>``."""

    def __init__(self, name: str, why: str) -> None:
        self.__name__ = name
        self._why = why

    def __getattr__(self, attr: str) -> Callable[..., NoReturn]:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return npu_only(f"{self.__name__}.{attr}", self._why)

    def __repr__(self) -> str:
        return f"<npu_bridge's {self.__name__}: NPU only on tf_bridge's CPU path>"
