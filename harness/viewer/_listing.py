"""The runs page's table: `harness.list_runs()` plus what the two ends of each trace say of goal and steps.

Runs in subfolders are listed too, each under its path relative to the runs
folder (`team-a/run-1`, its run address); a subfolder is never entered
through a symlink, and a trace whose real path lies outside the runs folder
(a symlink out) is not listed, as `_paths` would not open it either.

How it works: list_runs() gives each run's status, start, end, record
count and parent, reading the header line and the last complete line of
each file. The viewer reads the same two ends once more for what RunInfo
does not carry: the goal (from the header, cached by file identity since a
header never changes) and the step, attempt and time of the last record
(cached by file size and mtime, so an unchanged file is not read again).
When the last record is a run's seal, the line before it is read too: it
is the terminal record, where the steps are counted; the row says `sealed`
(whether the seal still matches is checked on the run's own page).
Nothing between the two ends is read, and nothing is validated: a run's own
page does that.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import orjson

from ..review.runs import list_runs
from ..trace.reader import attempt_of
from ._index import short
from ._paths import address, inside

_HEAD = 64 * 1024
_TAIL = 8 * 1024
_MAX = 1 << 20  # longer header or last lines are not read by the listing (their fields show as unknown)
_GOAL = 200  # characters of the goal shown


class Listing:
    """Lists one runs folder, remembering what it read of files that did not change."""

    def __init__(self, folder: str):
        self.folder = folder
        self._heads: dict[tuple[str, int, int], dict[str, Any]] = {}
        self._tails: dict[tuple[str, int, int], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def runs(self) -> list[dict[str, Any]]:
        """One dict per run, newest first."""
        # every subfolder too, and no trace whose real path lies outside the folder (list_runs enters no folder
        # through a symlink: only a trace that is one can lead out)
        every = list_runs(self.folder, recursive=True)
        infos = [i for i in every if not os.path.islink(i.path) or inside(self.folder, i.path)]
        by_run_id: dict[str, str] = {}
        rows = []
        with self._lock:
            heads: dict[Any, Any] = {}
            tails: dict[Any, Any] = {}
            for info in infos:
                row = info.to_json()
                row["run_id"] = row.pop("id")
                row["id"] = address(self.folder, info.path)
                del row["path"]
                row.update(self._ends(info.path, heads, tails))
                if info.status == "unreadable":  # its last line belongs to no run we can name
                    row.update(_tail_of(None))
                if row["id"] == row["run_id"] or row["run_id"] not in by_run_id:  # a copy never hides the original
                    by_run_id[row["run_id"]] = row["id"]
                rows.append(row)
            self._heads, self._tails = heads, tails  # forget files that are gone
        for row in rows:
            row["parent_id"] = by_run_id.get(row["parent"]) if row["parent"] else None
        rows.reverse()
        return rows

    def _ends(self, path: str, heads: dict[Any, Any], tails: dict[Any, Any]) -> dict[str, Any]:
        try:
            st = os.stat(path)
        except OSError:
            return {"goal": None, "start_ts": None, **_tail_of(None)}
        hkey = (path, st.st_dev, st.st_ino)
        tkey = (path, st.st_size, st.st_mtime_ns)
        head = self._heads.get(hkey)
        tail = self._tails.get(tkey)
        if head is None or tail is None:
            try:
                with open(path, "rb") as f:
                    if head is None:
                        head = _head(f)
                    if tail is None:
                        tail = _tail(f, st.st_size)
            except OSError:
                head, tail = head or _head_of(None), tail or _tail_of(None)
        if head["goal"] is not None:  # a header that could not be read is tried again next time
            heads[hkey] = head
        tails[tkey] = tail
        start, since = head["start_ts"], tail["last_ts"]  # a record's ts counts from the header's
        return {**head, **tail, "last_ts": start + since if start is not None and since is not None else None}


def _head(f: Any) -> dict[str, Any]:
    data = f.read(_HEAD)
    end = data.find(b"\n")
    while end < 0 and len(data) < _MAX and len(data) % _HEAD == 0 and data:
        more = f.read(len(data))
        if not more:
            break
        data += more
        end = data.find(b"\n")
    return _head_of(_parse(data[:end]) if end >= 0 else None)


def _head_of(rec: dict[str, Any] | None) -> dict[str, Any]:
    if rec is None or rec.get("kind") != "header":
        return {"goal": None, "start_ts": None}
    return {"goal": short(rec.get("goal"), _GOAL), "start_ts": _ts(rec.get("ts"))}


def _tail(f: Any, size: int) -> dict[str, Any]:
    """What the last record says; for a sealed run, the record the seal follows (its end), with the seal's time."""
    n = _TAIL
    while True:
        start = max(0, size - n)
        f.seek(start)
        data = f.read(size - start)
        lines = data.split(b"\n")[:-1]  # complete lines (the part after the last newline is torn or empty)
        if start > 0:
            lines = lines[1:]  # the first may be cut
        if lines:
            last = _parse(lines[-1])
            if last is None or last.get("kind") != "seal":
                return _tail_of(last)
            if len(lines) > 1:
                return {**_tail_of(_parse(lines[-2])), "last_ts": _ts(last.get("ts")), "sealed": True}
        if start == 0 or n >= _MAX:
            return _tail_of(None)
        n *= 4


def _tail_of(rec: dict[str, Any] | None) -> dict[str, Any]:
    if rec is None:
        return {"steps": None, "step": None, "attempt": None, "last_ts": None, "sealed": False}
    step, attempt = rec.get("step"), attempt_of(rec)
    step = step if type(step) is int else None
    steps = None
    if step is not None:  # steps done, as far as the last record tells
        kind = rec.get("kind")
        done = rec.get("to") == "DONE" and kind == "transition"
        closed = kind == "checkpoint" or (kind == "transition" and rec.get("from") == "CHECKPOINT")
        steps = step if done else step + 1 if closed else step
    return {
        "steps": steps, "step": step, "attempt": attempt if type(attempt) is int else None,
        "last_ts": 0.0 if rec.get("kind") == "header" else _ts(rec.get("ts")), "sealed": False,
    }  # fmt: skip


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None


def _ts(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) else None
