"""The input's position, saved with every training checkpoint and restored on resume.

tf.estimator restarts input_fn's data from its first batch after a restart. Here, when
input_fn returns an iterator that can tell and take its position -- a ``tf.data.Dataset``
(its iterator is checkpointable through ``tf.train.Checkpoint``) or any object with
``get_state()`` / ``set_state(state)`` (grain's DataLoader and dataset iterators) --
training saves that position in each checkpoint (``data_position.process_<i>.json`` in the
step directory, written before Orbax renames it, so the two are atomic) and a resumed
``train()`` continues from the batch after the last one the checkpoint has trained on.
Plain generators and iterables restart from the beginning, as in tf.estimator; the log
says so once per model_dir.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import jax

_log = logging.getLogger("jaxspec")
_told_restart: set[str] = set()  # model_dirs whose "starts from the beginning" line was logged


def file_name() -> str:
    """This process's position file in a checkpoint step directory."""
    return f"data_position.process_{jax.process_index()}.json"


def is_tf_dataset(result: Any) -> bool:
    """A ``tf.data.Dataset`` (checked by module, so TensorFlow is never imported here)."""
    return type(result).__module__.startswith("tensorflow") and hasattr(result, "as_numpy_iterator")


def has_state(source: Any) -> bool:
    """An iterator exposing ``get_state()`` and ``set_state(state)``."""
    return callable(getattr(source, "get_state", None)) and callable(getattr(source, "set_state", None))


class _TFDataIterator:
    """A tf.data iterator with ``get_state``/``set_state`` as bytes (a ``tf.train.Checkpoint``
    of the iterator, written to and read from a temporary directory), yielding numpy."""

    def __init__(self, dataset: Any) -> None:
        import tensorflow as tf

        self._tf = tf
        self._it = iter(dataset)

    def __iter__(self) -> _TFDataIterator:
        return self

    def __next__(self) -> Any:
        element = next(self._it)
        return self._tf.nest.map_structure(lambda t: t.numpy(), element)

    def get_state(self) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            prefix = self._tf.train.Checkpoint(iterator=self._it).write(os.path.join(tmp, "it"))
            files = {
                os.path.relpath(os.path.join(tmp, name), tmp): open(os.path.join(tmp, name), "rb").read()
                for name in os.listdir(tmp)
            }
        return json.dumps(
            {
                "prefix": os.path.basename(prefix),
                "files": {k: base64.b64encode(v).decode() for k, v in files.items()},
            }
        ).encode()

    def set_state(self, state: bytes) -> None:
        packed = json.loads(state)
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in packed["files"].items():
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(base64.b64decode(data))
            self._tf.train.Checkpoint(iterator=self._it).read(
                os.path.join(tmp, packed["prefix"])
            ).assert_consumed()


def _encode(state: Any) -> dict[str, Any]:
    if isinstance(state, bytes):
        return {"encoding": "base64", "state": base64.b64encode(state).decode()}
    return {"encoding": "json", "state": state}


def _plain(value: Any) -> Any:
    """numpy scalars and arrays in a get_state() value, as JSON numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def _decode(record: dict[str, Any]) -> Any:
    if record["encoding"] == "base64":
        return base64.b64decode(record["state"])
    return record["state"]


class DataPosition:
    """Tracks one training call's input position.

    Args:
      store: the model_dir's CheckpointStore (position files are read from its step
        directories).
      restored_step: the checkpoint training resumes from (None: a fresh start).
      model_dir: for the one-time log line about inputs that restart.
    """

    def __init__(self, store: Any, restored_step: int | None, model_dir: str) -> None:
        self._store = store
        self._restored_step = restored_step
        self._model_dir = model_dir
        self._source: Any = None
        self._kind = ""
        self.pulled = 0  # elements taken from the source in this call

    @property
    def tracking(self) -> bool:
        """Whether the input has a position that checkpoints save."""
        return self._source is not None

    def source(self, result: Any) -> Iterator[Any]:
        """The element iterator for what input_fn returned (a Dataset or an iterable of
        batches), with its position restored from the checkpoint being resumed when it
        has one (a plain generator or iterable is iterated from its start)."""
        if is_tf_dataset(result):
            self._source, self._kind = _TFDataIterator(result), "tf.data"
        else:
            it = result if has_state(result) else iter(result)  # grain: a loader's iterator has the state
            if not has_state(it):
                self._tell_restart(result)
                return it
            self._source, self._kind = it, type(it).__name__
        self._restore()
        return self._counted()

    def _counted(self) -> Iterator[Any]:
        for element in self._source:
            self.pulled += 1
            yield element

    def _tell_restart(self, result: Any) -> None:
        if self._restored_step is None or self._model_dir in _told_restart:
            return
        _told_restart.add(self._model_dir)
        _log.info(
            "input_fn returned a %s, which has no get_state()/set_state(): resuming from global step %d, "
            "its data starts again from the first batch (as in tf.estimator). Return a tf.data.Dataset or "
            "an iterator with get_state()/set_state() to continue where the checkpoint left off.",
            type(result).__name__,
            self._restored_step,
        )

    def _restore(self) -> None:
        if self._restored_step is None:
            return
        raw = self._store.read_extra(self._restored_step, file_name())
        if raw is None:
            _log.info(
                "The checkpoint at global step %d has no input position; the %s input starts from its "
                "first batch.",
                self._restored_step,
                self._kind,
            )
            return
        self._source.set_state(_decode(json.loads(raw)))
        _log.info("Input position restored from the checkpoint at global step %d.", self._restored_step)

    def extras(self, batches_trained: int) -> dict[str, bytes]:
        """The position file for a checkpoint taken after ``batches_trained`` input
        elements of this call went into steps (empty for inputs without a position).

        Elements already read but not trained on (a multi-process run cut at the shortest
        input) are past the saved position: a resumed run does not see them, and a
        warning says how many."""
        if self._source is None:
            return {}
        ahead = self.pulled - batches_trained
        if ahead > 0:
            _log.warning(
                "Saving the input position %d element(s) past the last trained batch; a resumed run skips them.",
                ahead,
            )
        record = {"kind": self._kind, **_encode(self._source.get_state())}
        try:
            return {file_name(): json.dumps(record, default=_plain).encode()}
        except TypeError as err:
            raise TypeError(
                f"the {self._kind} input's get_state() is neither bytes nor JSON-serializable: {err}"
            ) from err


def batches_per_step(feeder: Any) -> int:
    """Input elements one training step takes: one, or one per replica (PER_HOST_V2)."""
    return feeder._replicas if getattr(feeder, "_per_replica_input", False) else 1


def checkpoint_extras(
    position: DataPosition, feeder: Any, start_step: int
) -> Callable[[int], dict[str, bytes]]:
    """``global_step -> {file name: bytes}``: the input position to save with the
    checkpoint of a global step of a train call that started at ``start_step``."""
    per_step = batches_per_step(feeder)
    # short batches skipped on the mesh were read and not trained on: past them is right
    return lambda step: position.extras((step - start_step) * per_step + feeder.skipped_batches)
