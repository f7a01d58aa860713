"""Content-addressed blobs: large payloads stored once, beside the traces that name them.

A payload (a crossing's request or response, a step's result, an event's
data) whose JSON is larger than the journal's threshold is written to
`blobs/<sha256>` in the trace's folder, and the record names it instead of
holding it: the field is absent and `"blobs": {field: {"sha256", "size"}}`
says where its bytes are (the JSON, exactly as orjson wrote it). An
artifact (`harness.artifact()`) is a blob of raw bytes named by an
`artifact` record. Blobs are shared by every run of the folder: identical
payloads are stored once.

Rules kept here:
- a blob is written to a temporary file, fsynced, then renamed into place,
  before the line that names it: a reader never sees a line naming a blob
  that is not whole;
- an existing blob is trusted only if its bytes still hash to its name;
  otherwise it is written again;
- a reader gets a payload only after checking its size and sha256: a missing
  or altered blob is TraceCorruption(reason="blob") naming the line and the
  digest, never a wrong value;
- a blob is opened as every file beside a trace is (`files.open_beside`):
  a regular file inside the runs folder, never a FIFO (which would block the
  reader), a device (/dev/zero reads without end) or a symlink out, and
  never more bytes read than the record says it holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import TooLarge, TraceCorruption, TraceUnreadable
from . import files as _files

THRESHOLD = 64 * 1024  # bytes of JSON above which a payload goes to a blob (Executor(blob_threshold=...))
FOLDER = "blobs"
# record kind -> the fields that may be stored as blobs
FIELDS: dict[str, tuple[str, ...]] = {
    "transition": ("result",),
    "crossing": ("request", "response"),
    "reconcile": ("result",),
    "event": ("data",),
}


@dataclass(frozen=True, slots=True)
class BlobRef:
    """A payload stored in a blob, not yet read: what the record says about it."""

    sha256: str
    size: int


def folder_of(trace: str) -> str:
    """The blobs folder of the runs folder holding trace."""
    return os.path.join(os.path.dirname(os.path.abspath(trace)), FOLDER)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put(folder: str, data: bytes, *, sync_dir: bool) -> str:
    """Store data as folder/<sha256> (atomically, fsynced) unless an intact copy is there; its digest."""
    name = digest(data)
    path = os.path.join(folder, name)
    try:
        there = _files.read_beside(path, os.path.dirname(folder), len(data))
    except TraceUnreadable:  # a FIFO, a link out, too many bytes: replaced below by a file of the right bytes
        there = None
    if there is not None and digest(there) == name:
        return name
    os.makedirs(folder, exist_ok=True)
    write_atomically(path, data, sync_dir=sync_dir)
    return name


def keep_mode(fd: int, path: str) -> None:
    """Give the file open at fd the permissions of the file at path, when there is one (it replaces it)."""
    with contextlib.suppress(FileNotFoundError):
        os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))


def write_atomically(path: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace the file at path with data: a temporary file beside it, fsynced, renamed, folder fsynced.

    Readers see the old file or the whole new one, never part of it; a failure leaves no temporary file.
    The new file keeps the old one's permissions (a trace kept 0600 stays so).
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            keep_mode(fd, path)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def refs(rec: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(field, sha256, size) of every blob a record names; ValueError when the names are malformed."""
    out = []
    named = rec.get("blobs")
    if named is not None:
        if type(named) is not dict or not named:
            raise ValueError("blobs is not a non-empty object")
        for field, ref in named.items():
            if field not in FIELDS.get(rec["kind"], ()) or field in rec:
                raise ValueError(f"blobs names {field!r}, which a {rec['kind']} record cannot hold in a blob")
            out.append((field, *_ref(ref)))
    if rec["kind"] == "artifact":
        out.append(("artifact", *_ref(rec)))
    return out


def _ref(ref: Any) -> tuple[str, int]:
    if type(ref) is not dict:
        raise ValueError("a blob reference is not an object")
    name, size = ref.get("sha256"), ref.get("size")
    if type(name) is not str or len(name) != 64 or name.strip("0123456789abcdef") or type(size) is not int:
        raise ValueError("a blob reference needs a 64-hex sha256 and an int size")
    return name, size


def missing(folder: str, name: str, size: int) -> str | None:
    """None when folder/name is a regular file with this size (cheap: no hashing), else what is wrong.

    A symlink is followed only inside the runs folder (the blobs folder's parent).
    """
    path = os.path.join(folder, name)
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):  # rare: resolved only then, so a replay of many blobs stays one lstat each
            fd = _files.open_regular(path, within=os.path.dirname(folder))  # raises when it leads out or nowhere
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
    except FileNotFoundError:
        return f"blob {name} is missing from {folder}"
    except TraceUnreadable as e:
        return f"blob {name} cannot be read: {e.problem}"
    except OSError as e:
        return f"blob {name} cannot be read: {e.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"blob {name} is not a regular file (a FIFO, a device or a folder is never read as a blob)"
    return None if st.st_size == size else f"blob {name} holds {st.st_size} bytes, the record says {size}"


def read(trace: str, line: int, name: str, size: int) -> bytes:
    """The bytes of blob `name`, checked; TraceCorruption naming the trace's line and the digest if not.

    Never more than `size` bytes are read (one more byte than that is an altered blob).
    """
    folder = folder_of(trace)
    try:
        data = _files.read_beside(os.path.join(folder, name), os.path.dirname(folder), size)
    except TooLarge as e:
        why = f"blob {name} was altered: it holds {e.size} bytes, the record says {size}"
        raise TraceCorruption(trace, line, "blob", why, line) from None
    except TraceUnreadable as e:
        raise TraceCorruption(trace, line, "blob", f"blob {name} cannot be read: {e.problem}", line) from None
    if data is None:
        raise TraceCorruption(trace, line, "blob", f"blob {name} is missing from {folder}", line) from None
    if len(data) != size or digest(data) != name:
        why = f"blob {name} was altered: its bytes no longer hash to its name"
        raise TraceCorruption(trace, line, "blob", why, line)
    return data


def inline(trace: str, rec: Mapping[str, Any]) -> dict[str, Any]:
    """The record with every blob-stored field read back in place (the record as if written inline)."""
    named = rec.get("blobs")
    if not named:
        return dict(rec) if not isinstance(rec, dict) else rec
    out = {k: v for k, v in rec.items() if k != "blobs"}
    line = rec.get("seq") if type(rec.get("seq")) is int else 0
    for field, ref in named.items():
        out[field] = orjson.loads(read(trace, int(line or 0), ref["sha256"], ref["size"]))
    return out


def value_digest(value: Any) -> str:
    """The sha256 a value would have as a blob: for comparing an inline value with a blob-stored one."""
    if isinstance(value, BlobRef):
        return value.sha256
    return digest(orjson.dumps(value))
