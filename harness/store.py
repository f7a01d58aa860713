"""Traces on a local disk or on object storage, through one resolver (public: `harness.store`).

Anywhere harness takes a runs folder or a trace path, an fsspec URL works
too (`s3://bucket/runs`, `s3://bucket/runs/<run>.jsonl`; the `s3` extra:
fsspec, s3fs). `open_journal(path)` for writers, `local_copy(path)` /
`replay(path)` for readers, `list_runs(path)`, `exists(path)`,
`join(folder, name)`, `compact(url)`: each takes a local path as well, and
imports fsspec only for a URL. How a trace lives on a bucket is
`harness.storage`'s (docs/ARCHITECTURE.md); this module gathers the names
users call, from the layers that own them.
"""

from __future__ import annotations

from .storage import (
    Compacted,
    FenceLost,
    Location,
    RemoteJournal,
    compact,
    exists,
    is_url,
    join,
    list_runs,
    local_copy,
    open,
    open_journal,
    replay,
    segment_name,
)

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
