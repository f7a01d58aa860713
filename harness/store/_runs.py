"""List the runs under a runs URL, reading only the two ends of each trace.

One recursive listing of the prefix finds every run (`<run>.jsonl/` with
its segments); for each, the first line of segment 1 (the header) and the
last line of the last segment are read with ranged reads, as the local
listing reads the two ends of a file. Nothing is validated: replay does that.

Status as for a local folder, except that a store has no lock to see: a run
without a terminal record is `running` while its writer's lease is fresh
(the lease, or the last segment, modified less than 3 lease periods ago,
_lease.py), else `paused` or `interrupted`. The times come from the same
listing: no extra request per run.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from .._errors import TraceUnreadable
from .._replay import wall_clock
from .._runs import RunInfo, _detail, _terminal, _time, _waiting, header_line
from ._lease import NAME, STALE_FACTOR, every, modified
from ._location import Location, cover, open_location, segment_span

_SEG = re.compile(r"^(.*\.jsonl)/([^/]+\.seg)$")
_LEASE = re.compile(r"^(.*\.jsonl)/" + NAME + "$")
_HEAD = 64 * 1024
_TAIL = 8 * 1024


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


def list_runs_url(url: str, *, storage_options: dict[str, Any] | None = None) -> list[RunInfo]:
    """The runs under url, oldest first."""
    location = open_location(url, storage_options)
    runs, alive = _runs(location)
    if not runs and not location.fs.exists(location.root):
        raise TraceUnreadable(location.url, "no such runs folder on the store")
    live = _fresh(alive)
    infos = [_info(location, name, segs, name in live) for name, segs in runs.items()]
    infos.sort(key=lambda r: (r.started is None, r.started or datetime.min.replace(tzinfo=UTC), r.id))
    return infos


def _info(location: Any, name: str, found: Found, live: bool) -> RunInfo:
    url = f"{location.url}/{name}"
    fallback = name.removesuffix(".jsonl")
    held = cover(url, found, strict=False)  # the objects a reader reads: a planted span beside segments is not one
    header = _first_line(location, held[0][1]) if held else None
    if header is None:
        return RunInfo(fallback, url, None, "unreadable", None, None, 0)
    last = _last_line(location, held[-1][1]) or header
    env = header.get("env")
    status = _terminal(last) or ("running" if live else _waiting(last))
    parent, branch = header.get("parent"), header.get("branch")
    return RunInfo(
        id=str(header.get("run_id", fallback)), path=url,
        entrypoint=env.get("entrypoint") if isinstance(env, dict) else None,
        status=status, started=_time(header.get("ts")),
        ended=_time(wall_clock(header, last)) if status in ("done", "failed") else None,
        records=last["seq"] if type(last.get("seq")) is int else 1,
        parent=parent if isinstance(parent, str) else None,
        branch=branch if type(branch) is int else None,
        detail=None if status == "running" else _detail(last),
    )  # fmt: skip


def _first_line(location: Any, path: str) -> dict[str, Any] | None:
    try:
        data = location.read(path, 0, _HEAD)
        end = data.find(b"\n")
        if end < 0:
            data = location.read(path)
            end = data.find(b"\n")
    except TraceUnreadable:
        return None
    return header_line(data[:end]) if end >= 0 else None


def _last_line(location: Any, path: str) -> dict[str, Any] | None:
    try:
        data = location.read(path, -_TAIL, None)
        if data.count(b"\n") < 2 and len(data) >= _TAIL:  # a long last line: read the whole segment
            data = location.read(path)
    except TraceUnreadable:
        return None
    lines = data.rstrip(b"\n").rsplit(b"\n", 1)
    try:
        rec = orjson.loads(lines[-1])
    except orjson.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None
