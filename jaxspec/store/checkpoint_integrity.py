"""Is a checkpoint on disk whole? A record of every file Orbax wrote, checked before restoring.

Orbax makes a checkpoint appear atomically, but nothing protects its files afterwards: a
truncated, corrupted or deleted file surfaces as a TensorStore error, a JSON error, or
(for a flipped byte in an array chunk) silently wrong values. So each process writes, in
Orbax's post-finalisation callback (before the temporary directory takes its final
name, so the record is as atomic as the checkpoint), a record of the files it wrote:
their sizes and CRC-32 checksums. Process 0's record is ``jaxspec_digest.json`` (files
without a process in their name, and its own ``ocdbt.process_0``/``*.process_0.*``
files); process ``p > 0`` writes ``jaxspec_digest.process_<p>.json`` for the files that
name it. A check verifies every record present, or, when several processes check
together, each process its own record (``damage(directory, process_index, process_count)``) and the
verdicts are combined by the caller. The two files Orbax writes when it
commits (after the callback) are checked by form instead. A checkpoint without process
0's record (written by an older jaxspec) is judged by whether Orbax can read its
metadata; records of the first format (SHA-256) are still verified as they were written.

CRC-32C (Google's ``google-crc32c``, which uses the CPU's CRC instruction) instead of a
cryptographic hash: a record guards against damage, not tampering. At about 9 GB/s per
core here (``zlib.crc32``: 3 GB/s; SHA-256: 0.4 GB/s) the check adds a few percent to a
save or a restore instead of doubling it. Each file is checksummed in pieces of
``PIECE_BYTES``, one checksum per piece, and the pieces of all files are checked in
parallel threads (``google-crc32c`` releases the GIL), so one large file of a checkpoint does not
keep the check on one core. Records of the earlier formats are still verified as they were
written: format 1 (SHA-256 of each file), format 2 (``zlib`` CRC-32 of each file).

In an object store (``gs://``) every file is reached through ``jaxspec.store.paths``. GCS
keeps the CRC-32C of each object's content, so there a record lists one checksum per
whole object (``piece_bytes`` = ``WHOLE_OBJECT``), taken from the store's listing, and a
check compares the listing with the records: one listing request, no object read. A
deleted, truncated or rewritten object has another size or checksum. Pieces of a record
written elsewhere (local pieces of 64 MiB) are read back in ranges.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import google_crc32c

from jaxspec.store import paths

_log = logging.getLogger("jaxspec")

DIGEST_FILE = "jaxspec_digest.json"  # process 0's record
DAMAGED_SUBDIR = "checkpoints_damaged"  # where train moves damaged checkpoints (never deleted)
_TMP_SUFFIX = ".orbax-checkpoint-tmp"  # Orbax's temporary step directory suffix (atomic rename)
_STEP_METADATA = "_CHECKPOINT_METADATA"  # rewritten by Orbax when it commits (after the record)
_COMMIT_MARKER = "commit_success.txt"  # written by Orbax when it commits (after the record)
# 1: SHA-256 hex digest per file (process 0 recorded every file); 2: zlib CRC-32 per file,
# each process its own; 3: CRC-32C per piece of PIECE_BYTES, each process its own.
_FORMAT = 3
_PROCESS = re.compile(r"(?:^|[/.])process_(\d+)(?:[/.]|$)")  # ocdbt.process_1/..., x.process_1.json
_RECORD = re.compile(r"jaxspec_digest(?:\.process_\d+)?\.json")
_CHUNK = 1 << 20  # read size: a buffer per thread
PIECE_BYTES = 64 << 20  # a format-3 record has one checksum per piece of this many bytes
WHOLE_OBJECT = 1 << 62  # piece_bytes of a record with one checksum per whole file (object stores)


def record_name(process_index: int) -> str:
    """The record file of process ``process_index`` in a step directory."""
    return DIGEST_FILE if process_index == 0 else f"jaxspec_digest.process_{process_index}.json"


def _owner(rel: str) -> int:
    """The process that wrote ``rel``: the one its name says (``process_<p>``), else 0."""
    match = _PROCESS.search(rel)
    return int(match.group(1)) if match else 0


def _files(listing: list[paths.FileEntry], process_index: int | None) -> list[paths.FileEntry]:
    """The files of ``listing`` that process ``process_index`` wrote (None: every one),
    records and Orbax's commit files left out."""
    return [
        e
        for e in listing
        if not (
            _RECORD.fullmatch(e.rel)
            or e.rel in (_STEP_METADATA, _COMMIT_MARKER)
            or e.rel.endswith(".tmp")
            or (process_index is not None and _owner(e.rel) != process_index)
        )
    ]


# A job: (path, offset, bytes) of one piece of a file, and the checksum of that piece.
_Job = tuple[str, int, int, Callable[[str, int, int], str]]


def _reading(path: str, offset: int, length: int, update: Callable[[bytes, int], int]) -> int:
    """``update`` folded over ``length`` bytes of ``path`` from ``offset`` (``length``
    -1: to the end), read ``_CHUNK`` bytes at a time."""
    value = 0
    with open(path, "rb", buffering=0) if not paths.is_url(path) else paths.open_file(path) as f:
        f.seek(offset)
        left = length
        while left != 0 and (data := f.read(_CHUNK if left < 0 else min(_CHUNK, left))):
            value = update(data, value)
            left -= len(data) if left > 0 else 0
    return value


def _crc32c(path: str, offset: int, length: int) -> str:
    return f"{_reading(path, offset, length, lambda b, v: google_crc32c.extend(v, b)):08x}"


def _crc32(path: str, offset: int, length: int) -> str:  # format 2: zlib's CRC-32
    return f"{_reading(path, offset, length, lambda b, v: zlib.crc32(b, v)):08x}"


def _sha256(path: str, offset: int, length: int) -> str:  # format 1: whole files only
    h = hashlib.sha256()

    def update(b: bytes, v: int) -> int:
        h.update(b)
        return 0

    _reading(path, offset, length, update)
    return h.hexdigest()


def _pieces(path: str, size: int, piece: int) -> list[_Job]:
    """The format-3 jobs of one file of ``size`` bytes: one per ``piece`` bytes (one for
    an empty file)."""
    return [(path, off, min(piece, size - off), _crc32c) for off in range(0, max(size, 1), piece)]


def _checksums(jobs: list[_Job]) -> list[str]:
    """The checksum of every job's piece, in threads when there are several (the pieces of
    a checkpoint's large files are checksummed at once)."""
    run = lambda job: job[3](job[0], job[1], job[2])  # noqa: E731
    if len(jobs) < 2:
        return [run(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=min(8, len(jobs), os.cpu_count() or 1)) as pool:
        return list(pool.map(run, jobs))


def _final_name(rel: str) -> str:
    """``rel`` as it is named once Orbax commits: a process other than 0 records its
    files while the item directory still has its temporary name (``default.orbax-
    checkpoint-tmp...``)."""
    return "/".join(re.sub(re.escape(_TMP_SUFFIX) + ".*", "", part) for part in rel.split("/"))


def write_digest(directory: str, process_index: int = 0, every_file: bool = False) -> None:
    """Write process ``process_index``'s record in ``directory``: ``{relative path: [bytes,
    [crc32c hex of each piece of PIECE_BYTES]]}`` of the files it wrote (``every_file``:
    of every file there, as process 0's record of a checkpoint one process wrote alone,
    such as a node-local tier's), to a temporary name, then renamed."""
    entries = _files(paths.files(directory), None if every_file else process_index)
    if paths.is_url(directory) and all(e.crc32c for e in entries):  # the store's checksums
        piece = WHOLE_OBJECT
        files = {_final_name(e.rel): [e.size, [e.crc32c]] for e in entries}
    else:
        piece = PIECE_BYTES
        jobs = [_pieces(paths.join(directory, e.rel), e.size, piece) for e in entries]
        sums = iter(_checksums([job for file_jobs in jobs for job in file_jobs]))
        files = {
            _final_name(e.rel): [e.size, [next(sums) for _ in file_jobs]]
            for e, file_jobs in zip(entries, jobs, strict=True)
        }
    record = {
        "format": _FORMAT,
        "checksum": "crc32c",
        "piece_bytes": piece,
        "process": process_index,
        "files": files,
    }
    paths.write_bytes_atomic(paths.join(directory, record_name(process_index)), json.dumps(record).encode())


def pending_directory(checkpoints: str, step: int) -> str | None:
    """The directory a step's checkpoint is being finalised in: Orbax's temporary one
    (renamed when complete) or, on file systems without atomic rename, the final one."""
    tmp = paths.glob(paths.join(paths.glob_escape(checkpoints), f"{step}{_TMP_SUFFIX}*"))
    if len(tmp) == 1:
        return tmp[0]
    final = paths.join(checkpoints, str(step))
    return final if paths.isdir(final) else None


#: The key of Orbax's step metadata (``custom_metadata``, in ``_CHECKPOINT_METADATA``)
#: under which a save says which records it writes: ``{"format": 3, "processes": P}``.
RECORDS_KEY = "jaxspec_records"


def records_metadata(process_count: int) -> dict:
    """What ``CheckpointStore.save`` puts under ``RECORDS_KEY``: every one of
    ``process_count`` processes writes its record."""
    return {RECORDS_KEY: {"format": _FORMAT, "processes": process_count}}


def promised_records(directory: str) -> int | None:
    """How many processes' records the step metadata of the checkpoint in ``directory``
    says were written, or None (no such entry: a checkpoint of an older jaxspec, or
    metadata that cannot be read, which the commit check names)."""
    try:
        promised = json.loads(paths.read_bytes(paths.join(directory, _STEP_METADATA)))
        promised = promised["custom_metadata"][RECORDS_KEY]
        return int(promised["processes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def has_digest(directory: str) -> bool:
    """Whether ``directory`` (a checkpoint step directory) carries process 0's record."""
    return paths.isfile(paths.join(directory, DIGEST_FILE))


def damage(directory: str, process_index: int | None = None, process_count: int = 1) -> str | None:
    """What is wrong with the checkpoint in ``directory`` according to its records (the
    first file that is missing, of another size or of other content), or None when every
    recorded file matches. A record that Orbax's step metadata says was written
    (``promised_records``) and is missing is damage. None when there is no record of
    process 0 and none was promised (an older jaxspec's checkpoint: the caller judges
    those); a missing record of another process that was not promised leaves its files
    unchecked.

    Args:
      directory: a checkpoint step directory.
      process_index: with ``process_count`` processes checking together, this process
        checks the records of the writers ``q`` with ``q % process_count ==
        process_index`` (its own when as many processes wrote the checkpoint; the two
        files Orbax writes when it commits go with process 0); None checks every record.
      process_count: how many processes check together.
    """

    def ours(q: int) -> bool:
        return process_index is None or q % process_count == process_index

    listing = _Listing(directory)
    for q in range(promised_records(directory) or 0):
        if ours(q) and not listing.isfile(record_name(q)):
            return f"its {record_name(q)} is missing (the checkpoint was written with it)"
    if not listing.isfile(DIGEST_FILE):
        return None
    entries: list[tuple[str, int, list[_Job], list[str]]] = []  # (file, bytes, jobs, their sums)
    for name in sorted(listing.names()):
        if not _RECORD.fullmatch(name) or not ours(_owner(name)):
            continue
        try:
            entries += _recorded(directory, json.loads(paths.read_bytes(paths.join(directory, name))))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            return f"its {name} cannot be read ({type(err).__name__})"
    entries.sort(key=lambda entry: entry[0])
    for rel, size, _, _ in entries:  # sizes first: a stat per file
        if not listing.isfile(rel):
            return f"{rel} is missing"
        actual = listing.size(rel)
        if actual != size:
            return f"{rel} has {actual} bytes where {size} were written"
    jobs = [job for _, _, file_jobs, _ in entries for job in file_jobs]
    known = [listing.stored_crc32c(job) for job in jobs]  # the store's checksum of a whole object
    computed = iter(_checksums([job for job, k in zip(jobs, known, strict=True) if k is None]))
    sums = iter([k if k is not None else next(computed) for k in known])
    for rel, _, file_jobs, expected in entries:
        if [next(sums) for _ in file_jobs] != expected:
            return f"{rel} does not hold the bytes that were written (corrupted)"
    return _commit_damage(directory) if process_index in (None, 0) else None


class _Listing:
    """What ``damage`` asks of a step directory's files: local ``os`` calls, one listing
    request for a directory in an object store."""

    def __init__(self, directory: str) -> None:
        self._dir = directory
        self._store = {e.rel: e for e in paths.files(directory)} if paths.is_url(directory) else None

    def isfile(self, rel: str) -> bool:
        return rel in self._store if self._store is not None else os.path.isfile(os.path.join(self._dir, rel))

    def size(self, rel: str) -> int:
        return (
            self._store[rel].size
            if self._store is not None
            else os.path.getsize(os.path.join(self._dir, rel))
        )

    def names(self) -> list[str]:
        if self._store is None:
            return os.listdir(self._dir)
        return sorted({rel.split("/", 1)[0] for rel in self._store})

    def stored_crc32c(self, job: _Job) -> str | None:
        """The store's CRC-32C of the object a format-3 job covers whole, else None."""
        if self._store is None or job[3] is not _crc32c or job[1] != 0:
            return None
        entry = self._store.get(job[0][len(self._dir.rstrip("/")) + 1 :])
        return entry.crc32c if entry is not None and job[2] == entry.size else None


def _recorded(directory: str, record: dict) -> list[tuple[str, int, list[_Job], list[str]]]:
    """``(file, bytes, checksum jobs, the sums recorded for them)`` of each file a record
    lists, in the record's format.

    Raises:
      ValueError, KeyError, TypeError, AttributeError: the record is not of a known form.
    """
    fmt = record.get("format", 1)
    out = []
    for rel, (size, recorded) in record["files"].items():
        full, size = paths.join(directory, rel), int(size)
        if fmt == 3:
            jobs: list[_Job] = _pieces(full, size, int(record["piece_bytes"]))
            sums = [str(v) for v in recorded]
            if len(sums) != len(jobs):
                raise ValueError(f"{rel}: {len(sums)} checksums for {len(jobs)} pieces")
        elif fmt in (1, 2):
            jobs, sums = [(full, 0, -1, _sha256 if fmt == 1 else _crc32)], [str(recorded)]
        else:
            raise ValueError(f"record format {fmt!r}")
        out.append((rel, size, jobs, sums))
    return out


def _commit_damage(directory: str) -> str | None:
    """Orbax writes two files of the step directory when it commits, after the records:
    they are checked by form (the step metadata is a JSON object naming the item
    handlers; the commit marker says the commit succeeded)."""
    try:
        metadata = json.loads(paths.read_bytes(paths.join(directory, _STEP_METADATA)).decode("utf-8"))
        if not isinstance(metadata, dict) or "item_handlers" not in metadata:
            return f"{_STEP_METADATA} does not hold Orbax's step metadata"
    except (OSError, ValueError) as err:
        return f"{_STEP_METADATA} cannot be read ({type(err).__name__})"
    try:
        marker = paths.read_bytes(paths.join(directory, _COMMIT_MARKER)).decode("utf-8")
    except (OSError, ValueError) as err:
        return f"{_COMMIT_MARKER} cannot be read ({type(err).__name__})"
    # "... successful to <step directory>": the path ends with this step's name (it was
    # written in the final directory, which may since have been copied elsewhere).
    if not re.fullmatch(r"Checkpoint commit was successful to .+/(\d+)", marker.strip()) or (
        marker.strip().rsplit("/", 1)[-1] != paths.basename(directory)
    ):
        return f"{_COMMIT_MARKER} does not record a successful commit of this step"
    return None


def signature(directory: str) -> tuple[tuple[str, int, int], ...]:
    """Names, sizes and modification times of a directory's files: a cheap key under
    which a verdict of ``damage`` stays valid."""
    return tuple((e.rel, e.size, e.version) for e in paths.files(directory))


def set_aside(model_dir: str, step_directory: str) -> str:
    """Move a damaged checkpoint out of Orbax's directory to
    ``model_dir/checkpoints_damaged/<step>[-n]`` (kept for inspection, never deleted), so
    that training can write that step again. Returns the new path."""
    target_dir = paths.join(model_dir, DAMAGED_SUBDIR)
    paths.makedirs(target_dir)
    base = paths.join(target_dir, paths.basename(step_directory))
    target, n = base, 0
    while paths.exists(target):
        n += 1
        target = f"{base}-{n}"
    paths.move(step_directory, target)
    return target
