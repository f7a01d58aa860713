"""Storage backends: where a trace's bytes live, a local file or objects on a bucket (`s3` extra: fsspec, s3fs).

The bottom layer: it imports nothing of harness but `_errors`, and knows of a
trace only that it is whole lines of bytes with its blobs beside it
(blobs.py). The layers above use it through a small interface:
- the journal (trace/journal.py) writes a local trace through its own
  descriptor (O_APPEND, flock, fdatasync: the hot path stays one os.write
  per record). For a trace URL it appends the same way to the local spool
  of a `Spool` (spool.py), and at its ship points calls `Spool.ship()`,
  which creates the next segment object, fenced by the store's conditional
  create, under the run's lease (lease.py) (trace/remote.py);
- the reader (trace/reader.py) gets a readable local file from
  `local_copy(path)`: the trace itself, this process's spool of it, or the
  concatenation of its segments (read.py), and runs the same checks.

A trace on a bucket is a prefix of immutable segment objects whose
concatenation is exactly the bytes of a local trace (location.py);
listing.py finds the runs (segments, leases) under a runs URL, mirror.py
follows them into a local folder, notes.py keeps annotations as objects,
publish.py places a whole trace and its blobs.

Each helper here takes a local path as well, and imports fsspec only for a
URL: `is_url`, `open(url)`, `exists(path)`, `join(folder, name)`,
`local_copy(path)`, `runs_dir(folder)`. Private: users call `harness.store`.
"""

from __future__ import annotations

import os
from typing import Any

from .location import FenceLost, Location, is_url, open_location, segment_name

__all__ = [
    "FenceLost",
    "Location",
    "exists",
    "is_url",
    "join",
    "local_copy",
    "open",
    "runs_dir",
    "segment_name",
]


def open(url: str, *, storage_options: dict[str, Any] | None = None) -> Location:  # harness.store.open, as io.open
    """The Location (fsspec file system and path) of url."""
    return open_location(url, storage_options)


def join(folder: str | os.PathLike[str], name: str) -> str:
    """name inside folder, a URL or a local path."""
    return f"{str(folder).rstrip('/')}/{name}" if is_url(folder) else os.path.join(folder, name)


def exists(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether a trace is at path: a file (even a dangling link) for a local path, a segment for a URL."""
    if not is_url(path):
        return os.path.lexists(path)
    return bool(open_location(str(path), storage_options).segments())


def local_copy(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> str:
    """A local file holding the trace at path: path itself when it is local, else a copy of its segments."""
    if not is_url(path):
        return os.fspath(path)
    from .read import local_copy as copy

    return copy(str(path), storage_options=storage_options)


def runs_dir(folder: str | os.PathLike[str] | None = None) -> str:
    """The folder runs go to: `folder`, else $HARNESS_RUNS_DIR, else ./runs."""
    return os.fspath(folder or os.environ.get("HARNESS_RUNS_DIR") or "runs")
