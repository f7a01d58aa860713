"""List the runs under a runs URL: their segment objects, and whether each one's writer is alive.

One recursive listing of the prefix finds every run (`<run>.jsonl/` with
its segments); the runs listing (review/runs.py) then reads, for each, the
first line of segment 1 (the header) and the last line of the last segment
with ranged reads, as the local listing reads the two ends of a file.
Nothing is validated: replay does that.

Status as for a local folder, except that a store has no lock to see: a run
without a terminal record is `running` while its writer's lease is fresh
(the lease, or the last segment, modified less than 3 lease periods ago,
lease.py), else `paused` or `interrupted`. The times come from the same
listing: no extra request per run.
"""

from __future__ import annotations

import re
import time

from .lease import NAME, STALE_FACTOR, every, modified
from .location import Location, cover, segment_span

_SEG = re.compile(r"^(.*\.jsonl)/([^/]+\.seg)$")
_LEASE = re.compile(r"^(.*\.jsonl)/" + NAME + "$")


Found = list[tuple[int, int, str, str]]  # (first, last, path, tag) of each segment object of a run


def run_segments(location: Location) -> dict[str, list[tuple[int, str]]]:
    """`<run>.jsonl` -> (first segment held, object path) of the objects holding its segments 1..N, in order.

    From one listing; a compacted span is read rather than the segments it
    holds, and a run with a gap is given up to the gap (a mirror waits for it).
    """
    return live_runs(location)[0]


def live_runs(location: Location) -> tuple[dict[str, list[tuple[int, str]]], set[str], dict[str, Found]]:
    """run_segments(), the runs whose writer is alive (a fresh lease), and every segment object of each run
    (what a span read must agree with: `span_problem`), from the same listing."""
    runs, alive = _runs(location)
    out = {}
    for name, found in runs.items():
        firsts = {(last, path): first for first, last, path, _ in found}
        out[name] = [(firsts[(last, path)], path) for last, path, _ in cover(location.url, found, strict=False)]
    return out, _fresh(alive), runs


def _fresh(alive: dict[str, float | None]) -> set[str]:
    """The runs whose sign of life is younger than STALE_FACTOR lease periods."""
    stale, now = STALE_FACTOR * every(), time.time()
    return {name for name, t in alive.items() if t is not None and now - t < stale}


def _runs(location: Location) -> tuple[dict[str, Found], dict[str, float | None]]:
    """From one recursive listing: each run's segments, and when its writer last gave a sign of life.

    The sign of life is the newer of the lease and the last segment, for a
    run that has a lease (None: no lease, or the store gives no times).
    """
    prefix = location.root + "/"
    details = location.details(recursive=True)
    runs: dict[str, Found] = {}
    leases: dict[str, float | None] = {}
    for path, detail in details.items():
        relative = path[len(prefix) :] if path.startswith(prefix) else path
        m = _SEG.match(relative)
        span = segment_span(m[2]) if m and "/" not in m[1] else None
        if m and span:
            runs.setdefault(m[1], []).append((*span, path, str(modified(detail))))
        m = _LEASE.match(relative)
        if m and "/" not in m[1]:
            leases[m[1]] = modified(detail)
    alive: dict[str, float | None] = {}
    for name, found in runs.items():
        found.sort()
        if name in leases:
            newest = max(found, key=lambda f: f[1])[2]  # (any object: a time, not bytes to read)
            times = [t for t in (leases[name], modified(details[newest])) if t is not None]
            alive[name] = max(times) if times else None
    return runs, alive
