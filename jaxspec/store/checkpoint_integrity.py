"""Is a checkpoint on disk whole? A digest of every file Orbax wrote, checked before restoring.

Orbax makes a checkpoint appear atomically, but nothing protects its files afterwards: a
truncated, corrupted or deleted file surfaces as a TensorStore error, a JSON error, or
(for a flipped byte in an array chunk) silently wrong values. So each checkpoint gets a
``jaxspec_digest.json`` listing the size and SHA-256 of every file, written in Orbax's
post-finalisation callback, before the temporary directory takes its final name (the
digest is as atomic as the checkpoint). The two files Orbax writes when it commits
(after the callback) are checked by form instead. A checkpoint without a digest
(written by an older jaxspec) is judged by whether Orbax can read its metadata.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import shutil

_log = logging.getLogger("jaxspec")

DIGEST_FILE = "jaxspec_digest.json"
DAMAGED_SUBDIR = "checkpoints_damaged"  # where train moves damaged checkpoints (never deleted)
_TMP_SUFFIX = ".orbax-checkpoint-tmp"  # Orbax's temporary step directory suffix (atomic rename)
_STEP_METADATA = "_CHECKPOINT_METADATA"  # rewritten by Orbax when it commits (after the digest)
_COMMIT_MARKER = "commit_success.txt"  # written by Orbax when it commits (after the digest)


def _files(directory: str) -> list[str]:
    out = []
    for root, _, names in os.walk(directory):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), directory)
            if rel not in (DIGEST_FILE, _STEP_METADATA, _COMMIT_MARKER) and not rel.endswith(".tmp"):
                out.append(rel)
    return sorted(out)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_digest(directory: str) -> None:
    """Write ``directory/jaxspec_digest.json``: ``{relative path: [bytes, sha256]}`` of
    every file under ``directory`` (written to a temporary name, then renamed)."""
    files = {
        rel: [os.path.getsize(os.path.join(directory, rel)), _sha256(os.path.join(directory, rel))]
        for rel in _files(directory)
    }
    path = os.path.join(directory, DIGEST_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump({"format": 1, "files": files}, f)
    os.replace(path + ".tmp", path)


def pending_directory(checkpoints: str, step: int) -> str | None:
    """The directory a step's checkpoint is being finalised in: Orbax's temporary one
    (renamed when complete) or, on file systems without atomic rename, the final one."""
    tmp = glob.glob(os.path.join(glob.escape(checkpoints), f"{step}{_TMP_SUFFIX}*"))
    if len(tmp) == 1:
        return tmp[0]
    final = os.path.join(checkpoints, str(step))
    return final if os.path.isdir(final) else None


def has_digest(directory: str) -> bool:
    """Whether ``directory`` (a checkpoint step directory) carries a digest."""
    return os.path.isfile(os.path.join(directory, DIGEST_FILE))


def damage(directory: str) -> str | None:
    """What is wrong with the checkpoint in ``directory`` according to its digest (the
    first file that is missing, of another size or of other content), or None when every
    file matches. None too when there is no digest (the caller judges those)."""
    path = os.path.join(directory, DIGEST_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            files = json.load(f)["files"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"its {DIGEST_FILE} cannot be read ({type(err).__name__})"
    for rel, (size, sha) in sorted(files.items()):
        full = os.path.join(directory, rel)
        if not os.path.isfile(full):
            return f"{rel} is missing"
        actual = os.path.getsize(full)
        if actual != size:
            return f"{rel} has {actual} bytes where {size} were written"
        if _sha256(full) != sha:
            return f"{rel} does not hold the bytes that were written (corrupted)"
    return _commit_damage(directory)


def _commit_damage(directory: str) -> str | None:
    """Orbax writes two files of the step directory when it commits, after the digest:
    they are checked by form (the step metadata is a JSON object naming the item
    handlers; the commit marker says the commit succeeded)."""
    try:
        with open(os.path.join(directory, _STEP_METADATA), encoding="utf-8") as f:
            metadata = json.load(f)
        if not isinstance(metadata, dict) or "item_handlers" not in metadata:
            return f"{_STEP_METADATA} does not hold Orbax's step metadata"
    except (OSError, ValueError) as err:
        return f"{_STEP_METADATA} cannot be read ({type(err).__name__})"
    try:
        with open(os.path.join(directory, _COMMIT_MARKER), encoding="utf-8") as f:
            marker = f.read()
    except (OSError, ValueError) as err:
        return f"{_COMMIT_MARKER} cannot be read ({type(err).__name__})"
    # "... successful to <step directory>": the path ends with this step's name (it was
    # written in the final directory, which may since have been copied elsewhere).
    if not re.fullmatch(r"Checkpoint commit was successful to .+/(\d+)", marker.strip()) or (
        marker.strip().rsplit("/", 1)[-1] != os.path.basename(os.path.normpath(directory))
    ):
        return f"{_COMMIT_MARKER} does not record a successful commit of this step"
    return None


def signature(directory: str) -> tuple[tuple[str, int, int], ...]:
    """Names, sizes and modification times of a directory's files: a cheap key under
    which a verdict of ``damage`` stays valid."""
    out = []
    for root, _, names in os.walk(directory):
        for name in names:
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            out.append((os.path.relpath(full, directory), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def set_aside(model_dir: str, step_directory: str) -> str:
    """Move a damaged checkpoint out of Orbax's directory to
    ``model_dir/checkpoints_damaged/<step>[-n]`` (kept for inspection, never deleted), so
    that training can write that step again. Returns the new path."""
    target_dir = os.path.join(model_dir, DAMAGED_SUBDIR)
    os.makedirs(target_dir, exist_ok=True)
    base = os.path.join(target_dir, os.path.basename(os.path.normpath(step_directory)))
    target, n = base, 0
    while os.path.exists(target):
        n += 1
        target = f"{base}-{n}"
    shutil.move(step_directory, target)
    return target
