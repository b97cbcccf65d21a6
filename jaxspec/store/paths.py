"""One path layer for everything jaxspec reads or writes under a model_dir or an export dir.

A local path goes to ``os``, ``shutil`` and ``glob``, exactly as before object stores were
supported. A URL (``gs://bucket/run``; any ``scheme://`` fsspec knows) goes through
``etils.epath`` -- the path type Orbax itself uses -- on fsspec's filesystem for the scheme
(gcsfs for ``gs://``); TensorStore writes the checkpoint arrays itself. The first URL seen
sets ``EPATH_USE_TF=false`` unless the environment says otherwise, so that epath (in
jaxspec and in Orbax) takes fsspec and not TensorFlow's ``tf.io.gfile``, which reaches
only Google's own endpoint (never an emulator, nor a store named by fsspec options), and
turns off gcsfs's listing cache unless fsspec's configuration sets it: another process
(or TensorStore) writes checkpoints that a cached listing would never show.
"""

from __future__ import annotations

import dataclasses
import glob as _glob
import os
import posixpath
import re
import shutil
import time
from collections.abc import Callable
from typing import IO, Any

from etils import epath

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
CONNECT_TIMEOUT_ENV = "JAXSPEC_STORE_CONNECT_TIMEOUT_SECS"
CONNECT_TIMEOUT_SECS = 60.0  # how long the store's first answer is awaited (retries included)
_prepared = False


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an object store (``scheme://...``) rather than a local path."""
    return bool(_URL.match(os.fspath(path)))


def _prepare() -> None:
    global _prepared
    if _prepared:
        return
    os.environ.setdefault("EPATH_USE_TF", "false")
    # epath decides once per process (a cached check, made at its first path, local ones
    # included) whether TensorFlow's gfile serves URLs: decide again now.
    from etils.epath import gpath

    getattr(getattr(gpath, "_is_tf_installed", None), "cache_clear", lambda: None)()
    import fsspec.config

    for protocol in ("gs", "gcs"):
        fsspec.config.conf.setdefault(protocol, {}).setdefault("use_listings_cache", False)
    _prepared = True


def _fs(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, the path as that filesystem names it) of a URL."""
    _prepare()
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def _scheme(url: str) -> str:
    return url.split("://", 1)[0] + "://"


def absolute(path: str | os.PathLike[str]) -> str:
    """``os.path.abspath`` of a local path; a URL without a trailing ``/``."""
    path = os.fspath(path)
    if is_url(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme}://{posixpath.normpath(rest) if rest else rest}"
    return os.path.abspath(path)


def normalize(path: str | os.PathLike[str]) -> str:
    """``os.path.normpath`` of a local path; a URL with its scheme's ``//`` kept."""
    path = os.fspath(path)
    return absolute(path) if is_url(path) else os.path.normpath(path)


def join(base: str | os.PathLike[str], *parts: str) -> str:
    """``base/part/...`` (``os.path.join`` locally, ``/``-joined for a URL)."""
    base = os.fspath(base)
    return posixpath.join(base, *parts) if is_url(base) else os.path.join(base, *parts)


def basename(path: str | os.PathLike[str]) -> str:
    """The last component of ``path`` (trailing separators ignored)."""
    return posixpath.basename(normalize(path)) if is_url(path) else os.path.basename(os.path.normpath(path))


def dirname(path: str | os.PathLike[str]) -> str:
    """The directory holding ``path``."""
    return posixpath.dirname(normalize(path)) if is_url(path) else os.path.dirname(os.fspath(path))


def epath_of(path: str | os.PathLike[str]) -> epath.Path:
    """``path`` as an ``etils.epath.Path`` (what Orbax takes), on fsspec for a URL."""
    if is_url(path):
        _prepare()
    return epath.Path(os.fspath(path))


def exists(path: str) -> bool:
    """Whether a file or directory ``path`` exists."""
    return epath_of(path).exists() if is_url(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    """Whether ``path`` is a directory (for a URL: objects exist under ``path/``)."""
    return epath_of(path).is_dir() if is_url(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
    """Whether ``path`` is a file (an object, on a store)."""
    return epath_of(path).is_file() if is_url(path) else os.path.isfile(path)


def listdir(path: str) -> list[str]:
    """The names in directory ``path``.

    Raises:
      OSError: ``path`` is not a directory (FileNotFoundError when absent).
    """
    if not is_url(path):
        return os.listdir(path)
    if not isdir(path):
        raise FileNotFoundError(f"no directory {path}")
    return [p.name for p in epath_of(path).iterdir()]


def makedirs(path: str) -> None:
    """Create directory ``path`` and its parents (nothing to do on an object store)."""
    if not is_url(path):
        os.makedirs(path, exist_ok=True)


def open_file(path: str, mode: str = "rb") -> IO[Any]:
    """``open(path, mode)``; on an object store a written object appears whole at close."""
    if not is_url(path):
        return open(path, mode)  # noqa: SIM115
    return epath_of(path).open(mode)


def read_bytes(path: str) -> bytes:
    """The content of file ``path``.

    Raises:
      OSError: it cannot be read (FileNotFoundError when absent).
    """
    with open_file(path, "rb") as f:
        return f.read()


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one: a
    local file through a temporary name and ``os.replace``; an object (which its store
    makes visible only when the upload completes) directly."""
    if is_url(path):
        with open_file(path, "wb") as f:
            f.write(data)
        return
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def glob(pattern: str) -> list[str]:
    """Paths matching ``pattern`` (``glob.glob`` locally; fsspec's glob for a URL)."""
    if not is_url(pattern):
        return _glob.glob(pattern)
    fs, path = _fs(pattern)
    return [_scheme(pattern) + p for p in fs.glob(path)]


def glob_escape(path: str) -> str:
    """``path`` with glob's special characters escaped."""
    return _glob.escape(path)


def rmtree(path: str) -> None:
    """Remove directory ``path`` and everything under it; an absent one is no error."""
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    fs, p = _fs(path)
    try:
        fs.rm(p, recursive=True)
    except FileNotFoundError:
        pass


def move(src: str, dst: str) -> None:
    """Move directory ``src`` to ``dst`` (``shutil.move``; copy then delete on a store)."""
    if not is_url(src):
        shutil.move(src, dst)
        return
    fs, s = _fs(src)
    _, d = _fs(dst)
    fs.copy(s, d, recursive=True)
    fs.rm(s, recursive=True)


@dataclasses.dataclass(frozen=True)
class FileEntry:
    """One file under a directory: its path relative to it, its bytes, a version that
    changes when the file is rewritten (mtime in ns locally; the object's generation on
    a store) and, where the store keeps one, the CRC-32C of its content (hex)."""

    rel: str
    size: int
    version: Any
    crc32c: str | None = None


def _crc32c_hex(info: dict[str, Any]) -> str | None:
    raw = info.get("crc32c")
    if not raw:
        return None
    import base64

    try:
        return base64.b64decode(raw).hex()
    except (ValueError, TypeError):
        return None


def files(directory: str) -> list[FileEntry]:
    """Every file under ``directory`` (recursively), by relative path; an absent directory
    has none. One listing request on an object store."""
    out = []
    if not is_url(directory):
        for root, _, names in os.walk(directory):
            for name in names:
                full = os.path.join(root, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                out.append(FileEntry(os.path.relpath(full, directory), st.st_size, st.st_mtime_ns))
        return sorted(out, key=lambda e: e.rel)
    fs, root = _fs(directory)
    root = root.rstrip("/")
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return []
    for name, info in found.items():
        if info.get("type") == "directory" or name.endswith("/"):
            continue
        rel = name[len(root) + 1 :]
        version = info.get("generation") or info.get("updated") or info.get("mtime")
        out.append(FileEntry(rel, int(info["size"]), version, _crc32c_hex(info)))
    return sorted(out, key=lambda e: e.rel)


def identity(directory: str, marker: str) -> tuple[Any, ...] | None:
    """Something that changes when the checkpoint in ``directory`` is written anew, or
    None when it is absent: locally the directory's (inode, mtime in ns) (Orbax renames a
    finished checkpoint into place); on a store, the generation of its ``marker`` object
    (Orbax writes the commit file last)."""
    if not is_url(directory):
        try:
            st = os.stat(directory)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns
    fs, p = _fs(join(directory, marker))
    try:
        info = fs.info(p)
    except (FileNotFoundError, OSError):
        return None
    return (info.get("generation"), info.get("updated"), info.get("size"))


def upload_tree(local_dir: str, url: str, last: tuple[str, ...] = ()) -> None:
    """Copy the local directory ``local_dir`` to ``url``, the files named in ``last``
    (relative paths) after all others: a reader that waits for them sees a whole copy."""
    fs, root = _fs(url)
    rels = sorted(
        os.path.relpath(os.path.join(r, n), local_dir) for r, _, names in os.walk(local_dir) for n in names
    )
    for rel in [r for r in rels if r not in last] + [r for r in rels if r in last]:
        fs.put_file(os.path.join(local_dir, rel), f"{root.rstrip('/')}/{rel.replace(os.sep, '/')}")


def download_tree(url: str, local_dir: str) -> None:
    """Copy everything under ``url`` into the local directory ``local_dir``."""
    for entry in files(url):
        target = os.path.join(local_dir, *entry.rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(read_bytes(join(url, entry.rel)))


#: Where gcsfs / google-cloud-storage and TensorStore send GCS requests without an emulator.
GCS_ENDPOINT = "https://storage.googleapis.com"


def _endpoint(value: str | None) -> str:
    value = (value or GCS_ENDPOINT).strip().rstrip("/")
    return value if "://" in value else "http://" + value


def gcs_endpoints() -> tuple[str, str]:
    """(gcsfs's endpoint, TensorStore's endpoint): ``STORAGE_EMULATOR_HOST`` and
    ``TENSORSTORE_GCS_HTTP_URL``, Google's own where unset."""
    return (
        _endpoint(os.environ.get("STORAGE_EMULATOR_HOST")),
        _endpoint(os.environ.get("TENSORSTORE_GCS_HTTP_URL")),
    )


def _check_tensorstore(url: str, bucket: str, timeout_secs: float) -> None:
    """TensorStore (which writes the checkpoint's arrays) answers for ``bucket`` within
    ``timeout_secs``: it has retry policies of its own that wait many minutes."""
    import tensorstore as ts

    retries = {"max_retries": 2, "initial_delay": "0.1s", "max_delay": "1s"}
    spec = {"driver": "gcs", "bucket": bucket, "context": {"gcs_request_retries": retries}}
    start = time.monotonic()
    try:
        store = ts.KvStore.open(spec).result(timeout=timeout_secs)
        store.read("jaxspec-reachability-probe").result(
            timeout=max(timeout_secs - (time.monotonic() - start), 1.0)
        )
    except Exception as err:
        raise ConnectionError(
            f"TensorStore, which writes the arrays of {url}, could not reach {gcs_endpoints()[1]} "
            f"({type(err).__name__}: {str(err)[:200] or repr(err)}) after {time.monotonic() - start:.1f} s."
        ) from err


def check_reachable(url: str, timeout_secs: float | None = None) -> None:
    """Before anything is read from or written to ``url``: its bucket exists and both
    clients that reach it answer (gcsfs, for jaxspec's and Orbax's files, and, for
    ``gs://``, TensorStore, for the arrays), each waiting at most ``timeout_secs``
    (default: the ``JAXSPEC_STORE_CONNECT_TIMEOUT_SECS`` environment variable, else
    ``CONNECT_TIMEOUT_SECS``), the clients' own retries included. Local paths are not
    checked.

    Raises:
      ValueError: ``gs://`` with ``STORAGE_EMULATOR_HOST`` and ``TENSORSTORE_GCS_HTTP_URL``
        naming different endpoints (one of them unset counts as Google's own): the
        arrays and the other files would go to different stores.
      FileNotFoundError: the bucket does not exist (the URL is named).
      ConnectionError: a client did not answer in time, or refused (the URL and the
        endpoint are named).
    """
    if not is_url(url):
        return
    if timeout_secs is None:
        timeout_secs = float(os.environ.get(CONNECT_TIMEOUT_ENV) or CONNECT_TIMEOUT_SECS)
    gcs = _scheme(url) in ("gs://", "gcs://")
    if gcs and len(set(gcs_endpoints())) > 1:
        files, arrays = gcs_endpoints()
        raise ValueError(
            f"{url}: STORAGE_EMULATOR_HOST sends files to {files} but TENSORSTORE_GCS_HTTP_URL "
            f"sends arrays to {arrays}; set both to the same endpoint (or neither, for Google's)."
        )
    fs, path = _fs(url)
    bucket = path.split("/", 1)[0]
    start = time.monotonic()
    try:
        if getattr(fs, "async_impl", False):
            import fsspec.asyn

            fsspec.asyn.sync(fs.loop, fs._info, bucket, timeout=max(timeout_secs, 1.0))
        else:
            fs.info(bucket)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"the bucket of {url} ({_scheme(url)}{bucket}) does not exist.") from err
    except Exception as err:
        spent = time.monotonic() - start
        where = f" at {gcs_endpoints()[0]}" if gcs else ""
        raise ConnectionError(
            f"the store of {url}{where} could not be reached ({type(err).__name__}: "
            f"{str(err)[:200] or repr(err)}) after {spent:.1f} s of retries."
        ) from err
    if gcs:
        _check_tensorstore(url, bucket, timeout_secs)


#: Files of a SavedModel copied last: a reader that finds one finds the whole model.
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_MAX_NAME_BUMPS = 100


def export_through_local(url_base: str, write: Callable[[str], bytes | str]) -> bytes:
    """A timestamped export under the store directory ``url_base``, written locally first:
    ``write(local_base)`` makes ``local_base/<name>`` (and returns it), which is copied to
    ``url_base/<name>`` (the next integer name when ``<name>`` is taken there), the
    SavedModel's ``saved_model.pb`` last, so that a reader that finds it finds every
    file. The local copy is removed. Returns the store path as bytes.

    Raises:
      FileExistsError: no free name after 100 tries.
      What ``write`` raises (nothing is copied then).
    """
    import tempfile

    local_base = tempfile.mkdtemp(prefix="jaxspec_export_")
    try:
        local = os.fsdecode(write(local_base))
        name = os.path.basename(os.path.normpath(local))
        for _ in range(_MAX_NAME_BUMPS):
            target = join(url_base, name)
            if not exists(target):
                upload_tree(local, target, last=SAVED_MODEL_FILES)
                return target.encode()
            name = str(int(name) + 1) if name.isdigit() else f"{name}-1"
        raise FileExistsError(f"no free export directory name under {url_base}.")
    finally:
        shutil.rmtree(local_base, ignore_errors=True)
