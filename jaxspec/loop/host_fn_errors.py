"""A host function that raises: the user's exception, with a note saying where it ran."""

from __future__ import annotations

from typing import Any


def call_host_fn(host_call: Any, values: list[Any], mode: str, global_step: int, loop_step: int) -> Any:
    """Call ``host_call`` (a HostCall) with one step's numpy ``values``.

    Raises:
      Exception: whatever the host function raises, of its own type, with a PEP 678 note
        naming the host function, the mode, the global step and the step's index in its
        loop (TPUEstimator reports host_call failures from its outfeed thread without
        them).
    """
    try:
        return host_call.call(values)
    except Exception as err:
        fn = host_call.fn
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        err.add_note(
            f"raised by the host_call function {name!r} in mode {mode!r} at global step {global_step} "
            f"(step {loop_step + 1} of its loop)"
        )
        raise
