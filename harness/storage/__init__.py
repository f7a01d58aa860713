"""Storage backends: traces in local files, and on object storage (the `s3` extra: fsspec, s3fs).

Anywhere harness takes a runs folder or a trace path, an fsspec URL works
too (`s3://bucket/runs`, `s3://bucket/runs/<run>.jsonl`). A trace there is a
prefix of immutable segment objects whose concatenation is exactly the bytes
of a local trace (`location`); a writer keeps the open tail in a local spool
and ships segments at its sync points, fenced by the store's conditional
create (`spool`); readers concatenate the segments and run the same checks
(`read`); `harness runs` lists a runs URL (`listing`).

The bottom layer: it imports nothing of harness but `_errors`, and knows of
a trace only that it is whole lines with its blobs beside it (`blobs`). The
journal writes a local trace through its own descriptor; for a URL it
appends to a `Spool` and calls `Spool.ship()` at its ship points
(trace/remote.py). The reader gets a local file from `local_copy(path)` and
runs the same checks. Each helper here takes a local path as well, and
imports fsspec only for a URL: `open(url)`, `exists(path)`,
`join(folder, name)`, `local_copy(path)`, `runs_dir(folder)`. A command that
only reads a file can call `local_copy(path)` first and go on as for a local
trace. Private: users call `harness.store` (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import os
from typing import Any

from .._errors import FenceLost
from .location import Location, is_url, open_location, segment_name

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
