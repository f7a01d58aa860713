"""Traces on a local disk or on object storage, through one resolver (public: `harness.store`).

Anywhere harness takes a runs folder or a trace path, an fsspec URL works
too (`s3://bucket/runs`, `s3://bucket/runs/<run>.jsonl`; the `s3` extra:
fsspec, s3fs). One resolver for everything that takes a path:
`open_journal(path)` for writers, `local_copy(path)` / `replay(path)` for
readers, `list_runs(path)`, `exists(path)`, `join(folder, name)`: each takes
a local path as well, and imports fsspec only for a URL. A command that only
reads a file can call `local_copy(path)` first and go on as for a local
trace. `compact(url)` merges a sealed run's segments into one object.

This module gathers those names from the layers that own them
(docs/ARCHITECTURE.md): how a trace lives on a bucket is `harness.storage`'s,
its writer `harness.trace.remote`'s, its reader `harness.trace.reader`'s.
"""

from __future__ import annotations

import os
from typing import Any

from .ops.compact import Compacted, compact
from .review.runs import RunInfo, list_runs_url
from .review.runs import list_runs as _list_local
from .storage import FenceLost, Location, exists, is_url, join, local_copy, open, segment_name
from .trace.reader import Replay, replay_url
from .trace.reader import replay as _replay_local
from .trace.remote import RemoteJournal, open_journal

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


def replay(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None, **kwargs: Any) -> Replay:
    """harness.replay() of a local path or a URL (with storage_options for the URL)."""
    if not is_url(path):
        return _replay_local(path, **kwargs)
    return replay_url(str(path), storage_options=storage_options, **kwargs)


def list_runs(
    folder: str | os.PathLike[str] | None = None, *, storage_options: dict[str, Any] | None = None
) -> list[RunInfo]:
    """harness.list_runs() of a local folder or a runs URL."""
    if is_url(folder):
        return list_runs_url(str(folder), storage_options=storage_options)
    return _list_local(folder)
