"""Compaction: a sealed run's segments merged into one object, with readers kept correct while it happens.

A run keeps its segments as they were shipped, a few per step, and reading
it costs one GET per segment. `compact(url)` merges a sealed run's segments
1..N into one object named for its span, `000001-NNNNNN.seg`, holding
exactly their concatenation, then deletes the objects it holds.

Why a reader is never wrong while it happens:
- only a sealed run is compacted: nothing may follow a seal, so no writer
  ships a segment meanwhile, and the bytes are final;
- the bytes are checked first (the run replays, sealed, through the same
  checks as any read), the span is created with the conditional create and
  read back, and only then is anything deleted;
- the span holds the very bytes of the objects it replaces: a reader that
  lists while both are there reads the segments (`cover()` reads a span
  only where they are gone), one that listed before and finds an object
  gone lists again and starts over (`Location.download`), and the mirror of
  `harness serve` checks a span against what it holds before it appends
  the rest;
- the objects are deleted one at a time, first to last: a compaction
  killed at any point leaves the run readable, before the create as it
  was, after it as the span, checked against the segments left (its last
  ones: `span_problem`); running it again finishes the deletes. Two
  compactors racing create the same span with the same bytes: the second
  finds it there, compares, and deletes what is left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import HarnessError, TraceUnreadable
from ..storage.location import open_location, span_name


@dataclass(frozen=True, slots=True)
class Compacted:
    """What compact() did: objects holding the trace before and after (equal when there was nothing to do)."""

    url: str
    before: int
    after: int
    bytes: int


def compact(url: str, *, storage_options: dict[str, Any] | None = None) -> Compacted:
    """Merge the segments of the sealed run at the trace URL url into one object; see the module docstring."""
    from ..storage.read import local_copy
    from ..trace.reader import replay_url

    url = url.rstrip("/")
    location = open_location(url, storage_options)
    objects = location.segment_objects()
    if not objects:
        raise TraceUnreadable(url, "no such trace on the store; nothing was changed")
    versions = location.versions()
    last = versions[-1][0]
    if len(versions) == 1 and len(objects) == 1:
        return Compacted(url, 1, 1, int(objects[0][3].split(":", 1)[0] or 0))
    rep = replay_url(url, storage_options=storage_options)  # every check a reader makes, on these very bytes
    if rep.seal is None:
        why = "the run has not ended" if not rep.complete else "the run is not sealed"
        raise HarnessError(
            f"{url}: {why} (state {rep.state}); only a sealed run is compacted, as its segments are final. "
            f"{'Resume it to its end' if not rep.complete else f'Seal it: harness seal {url}'}; nothing was changed"
        )
    with open(local_copy(url, storage_options=storage_options), "rb") as f:
        data = f.read()
    name = span_name(1, last)
    path = f"{location.root}/{name}"
    try:
        if not location.create(name, data) and location.read(path) != data:
            raise HarnessError(f"{url}: {name} is there with other bytes than the segments it names; nothing deleted")
        if location.read(path) != data:  # read back before anything is deleted
            raise HarnessError(f"{url}: {name} does not read back as written; nothing deleted")
    except OSError as e:
        raise HarnessError(f"{url}: cannot create {name}: {e}; nothing was deleted") from None
    held = [p for first, end, p, _ in objects if end <= last and p.rstrip("/").rsplit("/", 1)[-1] != name]
    try:
        for p in held:  # one at a time, first to last: those a kill leaves are the span's last ones (span_problem)
            location.fs.rm(p)
    except OSError as e:
        raise HarnessError(
            f"{url}: {name} holds the whole trace, but deleting the {len(held)} objects it replaces failed ({e}); "
            "readers read the span; run compact again to finish"
        ) from None
    return Compacted(url, len(objects), 1, len(data))  # a sealed run: no segment follows the span


def compact_runs(url: str, *, storage_options: dict[str, Any] | None = None) -> list[Compacted | HarnessError]:
    """compact() of every run under the runs URL url: what it did, or why not, for each, in name order."""
    from ..storage.listing import run_segments

    location = open_location(url, storage_options)
    out: list[Compacted | HarnessError] = []
    for name in sorted(run_segments(location)):
        try:
            out.append(compact(f"{location.url}/{name}", storage_options=storage_options))
        except HarnessError as e:
            out.append(e)
    return out
