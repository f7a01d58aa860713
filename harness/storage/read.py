"""Reading a trace on object storage: its segments, concatenated into a local copy.

`local_copy(url)` lists the run's segments and streams them, in order, into
one local file: the very bytes a local trace of the run holds, which the
reader checks as it checks a local trace (trace/reader.py `replay_url`).
When this process itself holds the run's writer, its spool is read instead
(what it wrote, shipped or not).

Copies live in one temporary folder per process, removed when it exits; a
copy is reused while the run's segment objects are unchanged (the same
names, sizes and ETags or modification times, those not read included).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import uuid
from typing import Any

from .._errors import TraceUnreadable
from .location import cover, open_location
from .spool import SPOOLS

_folder: str | None = None


def _copies() -> str:
    global _folder
    if _folder is None:
        _folder = tempfile.mkdtemp(prefix="harness-copies-")
        atexit.register(shutil.rmtree, _folder, True)
    return _folder


def local_copy(url: str, *, storage_options: dict[str, Any] | None = None) -> str:
    """A local file holding the trace at url, byte for byte; TraceUnreadable when the run has no segments."""
    url = url.rstrip("/")
    if url in SPOOLS:
        return SPOOLS[url]
    location = open_location(url, storage_options)
    found = location.segment_objects()
    versions = cover(url, found)
    if not versions:
        raise TraceUnreadable(url, "no such trace on the store (no segments under it)")
    # every segment object, not only those read: one planted since is checked (span_problem), never skipped
    key = hashlib.sha256(repr((url, found)).encode()).hexdigest()[:24]
    path = os.path.join(_copies(), f"{key}.jsonl")
    if os.path.exists(path):  # the same segments, each of the same size and version: the same bytes
        return path
    part = f"{path}.part-{uuid.uuid4().hex}"  # (two threads may copy the same URL at once)
    try:
        with open(part, "wb") as f:
            location.download(f, [(n, p) for n, p, _ in versions])
        location.fetch_blobs(part)  # into the copies' blobs folder, shared: blobs are named by their digest
        os.replace(part, path)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise
    return path
