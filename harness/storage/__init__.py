"""Traces on object storage (the `s3` extra: fsspec, s3fs).

Anywhere harness takes a runs folder or a trace path, an fsspec URL works
too (`s3://bucket/runs`, `s3://bucket/runs/<run>.jsonl`). A trace there is a
prefix of immutable segment objects whose concatenation is exactly the bytes
of a local trace (`_location`); a writer keeps the open tail in a local spool
and ships segments at its sync points, fenced by the store's conditional
create (`_spool`); readers concatenate the segments and run the same checks
(`_read`); `harness runs` lists a runs URL (`_runs`).

One resolver for everything that takes a path: `open_journal(path)` for
writers, `local_copy(path)` / `replay(path)` for readers, `list_runs(path)`,
`exists(path)`, `join(folder, name)`: each takes a local path as well, and
imports fsspec only for a URL. A command that only reads a file can call
`local_copy(path)` first and go on as for a local trace.
"""

from __future__ import annotations

import os
from typing import Any

from ..ops.compact import Compacted, compact
from .location import FenceLost, Location, is_url, open_location, segment_name
from .spool import RemoteJournal, open_journal

__all__ = [
    "Compacted",
    "FenceLost",
    "Location",
    "RemoteJournal",
    "compact",
    "exists",
    "is_url",
    "join",
    "list_runs",
    "local_copy",
    "open",
    "open_journal",
    "replay",
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


def replay(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """harness.replay() of a local path or a URL (with storage_options for the URL)."""
    if not is_url(path):
        from ..trace.reader import replay as local

        return local(path, **kwargs)
    from .read import replay_url

    return replay_url(str(path), storage_options=storage_options, **kwargs)


def list_runs(folder: str | os.PathLike[str] | None = None, *, storage_options: dict[str, Any] | None = None) -> Any:
    """harness.list_runs() of a local folder or a runs URL."""
    if is_url(folder):
        from .listing import list_runs_url

        return list_runs_url(str(folder), storage_options=storage_options)
    from ..review.runs import list_runs as local

    return local(folder)
