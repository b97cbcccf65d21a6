"""What ``numpy_input_fn`` and ``pandas_input_fn`` read, decided once for jaxspec's
plain input_fns and tf_bridge's queue-fed ones.

A *reading* function (``numpy_io.numpy_reading``, ``pandas_io.pandas_reading``) carries
TF 2.15's signature (names, order, defaults), checks the arguments and returns a
``TableReading``. Each side's public input function is a *face* over it
(``input_fn_face``): same signature, its own docstring, and a *feed* that turns the
reading into that side's input_fn (jaxspec: a generator of numpy batches, in TF's queue
order; tf_bridge: TF1 queues fed by queue runners).

numpy only; no jax and no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from jaxspec.rules.feeding import Table

P = ParamSpec("P")
R = TypeVar("R")


@dataclasses.dataclass(frozen=True)
class TableReading:
    """The checked arguments of one ``numpy_input_fn`` / ``pandas_input_fn`` call.

    Attributes:
      fn_name: ``'numpy_input_fn'`` or ``'pandas_input_fn'``, for messages.
      make_table: builds (and checks) the table of columns; called each time the
        input_fn is called, as TF builds its queue then.
      batch_size: rows per batch (>= 1).
      num_epochs: passes over the rows per reader, or None for no end.
      shuffle: whether rows come from a random-shuffle buffer.
      capacity: rows of the queue (the shuffling buffer), >= 1.
      min_after_dequeue: rows a shuffling TF queue keeps until its readers are done.
      num_threads: readers (>= 1).
    """

    fn_name: str
    make_table: Callable[[], Table]
    batch_size: int
    num_epochs: int | None
    shuffle: bool
    capacity: int
    min_after_dequeue: int
    num_threads: int


def _sections(doc: str | None) -> dict[str, str]:
    """A Google-style docstring's sections by heading (``''`` for the summary)."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in inspect.cleandoc(doc or "").splitlines():
        if line.endswith(":") and line[:-1] in ("Args", "Returns", "Raises"):
            current = line[:-1]
            sections[current] = []
        else:
            sections[current].append(line)
    return {name: "\n".join(lines).strip("\n") for name, lines in sections.items()}


def input_fn_face(
    reading: Callable[P, TableReading],
    feed: Callable[[TableReading], R],
    name: str,
    module: str,
    doc: str,
) -> Callable[P, R]:
    """A side's public input function: ``feed(reading(...))``, with ``reading``'s
    signature (TF 2.15's) and the return annotation of ``feed``.

    Args:
      reading: the shared reading function (signature and argument checks).
      feed: the side's ``TableReading -> input_fn``.
      name: the function's public name (``'numpy_input_fn'``).
      module: the module it is published from (``__name__`` of the caller).
      doc: its docstring, summary and ``Returns:`` section; the ``Args:`` section and the
        ``Raises:`` lines of ``reading`` are added after the summary, then ``doc``'s own
        ``Raises:`` lines (the side's).

    Returns:
      The function.
    """

    def face(*args: P.args, **kwargs: P.kwargs) -> R:
        return feed(reading(*args, **kwargs))

    own, shared = _sections(doc), _sections(reading.__doc__)
    raises = "\n".join(part for part in (shared.get("Raises"), own.get("Raises")) if part)
    parts = [own[""], "Args:\n" + shared["Args"], "Returns:\n" + own["Returns"], "Raises:\n" + raises]
    face.__doc__ = "\n\n".join(parts)
    face.__name__ = face.__qualname__ = name
    face.__module__ = module
    # annotations as objects: the face's module need not import the names they use
    signature = inspect.signature(reading, eval_str=True)
    returns = inspect.signature(feed, eval_str=True).return_annotation
    face.__signature__ = signature.replace(return_annotation=returns)  # type: ignore[attr-defined]
    return face
