"""A run's records as the viewer serves them: line positions, built once, extended as the file grows.

How it works: the trace is read in large chunks from where the last read
stopped. Each complete line has its chained CRC-32 checked (docs/FORMAT.md)
and is parsed once; the index keeps only, per line, its byte offset, a
one-letter class (the state it moves to, or its kind), its lane (the
`agent` field, "main" when absent) and its column: its place in causal
order. Records carrying a vector clock (`vc`) sit one column after the
latest record of every lane they have seen; records without one follow
everything before them, so a sequential run is one lane, one record per
column. The first line that fails its checksum or does not parse stops the
index there; `replay()` gives the full verdict (`Index.verdict()`), and a
`TraceCorruption` at line N hides line N and every line after it.

Guarantees: the file is opened read-only and never written; only complete
lines are indexed or served, so a torn tail (bytes after the last newline)
never is; a record is read back from its offset when asked for, so memory
stays a few bytes per record whatever the trace's size; a file replaced or
shrunk under the index is indexed again from the start.
"""

from __future__ import annotations

import bisect
import os
import threading
import zlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import HarnessError, TraceCorruption
from .._replay import replay

_CHUNK = 1 << 20
_SUFFIX = len(b',"crc":"00000000"}')
_NOTE = 160  # characters of a value shown in a record's one-line note
_PLAIN = frozenset({"seq", "kind", "ts", "crc", "agent", "vc", "reused", "mutated"})

# one letter per record, for the overview: what colour it takes and how it is marked
CLASSES = {
    "H": "header", "P": "PLAN", "A": "ACT", "V": "VERIFY", "C": "CHECKPOINT", "K": "checkpoint",
    "D": "DONE", "F": "FAILED", "Z": "PAUSED", "R": "retry", "X": "crossing", "E": "error",
    "r": "resume", "c": "reconcile", "s": "seal", "e": "event", "n": "end", "o": "other",
}  # fmt: skip
_TO = {"PLAN": "P", "ACT": "A", "VERIFY": "V", "CHECKPOINT": "C", "DONE": "D", "FAILED": "F", "PAUSED": "Z"}
_KIND = {"header": "H", "checkpoint": "K", "crossing": "X", "resume": "r", "reconcile": "c", "seal": "s", "event": "e"}


def classify(rec: dict[str, Any]) -> str:
    """The record's letter in CLASSES: failures and retries first, then the state it enters, then its kind."""
    kind = rec.get("kind")
    if kind == "transition":
        to = rec.get("to")
        if to == "PLAN" and rec.get("from") in ("ACT", "VERIFY"):
            return "R"  # a failed attempt: the step is planned again
        return _TO.get(str(to), "o")
    if kind == "end":
        return "n" if rec.get("status") == "success" else "F"
    if rec.get("error") is not None:
        return "E"
    return _KIND.get(str(kind), "o")


def role(rec: dict[str, Any], header: dict[str, Any] | None) -> str | None:
    """A fork's record is reused (served from the parent), mutated (the branch) or live (after it).

    None outside a fork and for the header.
    """
    branch = header.get("branch") if header else None
    if type(branch) is not int or rec.get("kind") == "header":
        return None
    if rec.get("reused") is True:
        return "reused"
    if rec.get("mutated") is True:
        return "mutated"
    if "vc" in rec:  # a causal fork marks what it reused and the branch: the rest ran live
        return "live"
    seq = rec.get("seq")
    if type(seq) is not int:
        return None
    return "mutated" if seq == branch else "live" if seq > branch else "reused"


def label(rec: dict[str, Any]) -> str:
    """A record in a few words: `ACT → VERIFY`, `crossing llm`, `checkpoint "search"`."""
    kind = rec.get("kind")
    if kind == "transition":
        return f"{rec.get('from')} → {rec.get('to')}"
    if kind == "crossing":
        return f"crossing {rec.get('boundary')}"
    if kind == "checkpoint":
        return f"checkpoint {short(rec.get('name'), 40)}"
    if kind in ("event", "end"):
        return f"{kind} {short(rec.get('type', rec.get('status')), 40)}"
    return str(kind)


def note(rec: dict[str, Any]) -> str:
    """What the record carries, on one line: the call, the answer or the error."""
    if rec.get("error") is not None:
        err = rec["error"]
        if isinstance(err, dict):
            return f"error {err.get('type')}: {short(err.get('message'), _NOTE)}"
        return f"error {short(err, _NOTE)}"
    kind = rec.get("kind")
    if kind == "header":
        return f"goal {short(rec.get('goal'), _NOTE)}"
    if kind == "transition" and "tool" in rec:
        return f"{rec['tool']} {short(rec.get('args'), _NOTE)}"
    if kind == "resume":
        return f"set aside {rec['set_aside']}" if rec.get("set_aside") else "resumed by another process"
    for field in ("result", "response", "data", "evidence"):
        if field in rec:
            return short(rec[field], _NOTE)
    if kind == "reconcile":
        return f"op {rec.get('op')} happened={rec.get('happened')}"
    if kind not in ("transition", "checkpoint", "crossing", "header", "resume", "end", "event"):
        rest = {k: v for k, v in rec.items() if k not in _PLAIN}  # a kind this viewer does not know: what it holds
        return short(rest, _NOTE) if rest else ""
    return ""


def short(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=repr).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What replay() says of the file as it was at (size, mtime)."""

    error: dict[str, Any] | None  # {line, seq, reason, detail, message} when the trace is corrupt or unreadable
    state: str | None
    pending: dict[str, Any] | None
    torn_tail: bool
    records: int


class Index:
    """The records of one trace, kept as positions; see the module docstring."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._reset(None)
        self._verdict: tuple[tuple[int, int, int], Verdict] | None = None

    def _reset(self, ident: tuple[int, int] | None) -> None:
        self.ident = ident  # (st_dev, st_ino) of the file indexed
        self.offsets = array("q")  # start of each complete line; offsets[i] is line i + 1
        self.end = 0  # offset after the last indexed line
        self.size = 0  # file size at the last read (bytes after `end` are a tail still being written, or torn)
        self.crc = 0
        self.codes = bytearray()
        self.lanes = array("H")
        self.cols = array("q")
        self.lane_names: list[str] = []
        self._lane_of: dict[str, int] = {}
        self._own: list[array[int]] = []  # per lane: own vc component of each of its records with a vc
        self._own_col: list[array[int]] = []  # ... and that record's column
        self._last_col: list[int] = []  # per lane: its last record's column
        self._top = -1  # highest column so far
        self._barrier = -1  # column of the last record without a vc: all later records come after it
        self.header: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.broken: dict[str, Any] | None = None  # {line, reason, detail}: the first line that fails

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self) -> Index:
        """Index the complete lines written since the last call."""
        with self._lock:
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                raise HarnessError(f"{self.path}: no such file") from None
            except OSError as e:
                raise HarnessError(f"{self.path}: cannot read: {e.strerror}") from None
            try:
                st = os.fstat(fd)
                ident = (st.st_dev, st.st_ino)
                if ident != self.ident or st.st_size < self.end:
                    self._reset(ident)
                self.size = st.st_size
                while self.broken is None and self.end < self.size:
                    data = os.pread(fd, min(_CHUNK, self.size - self.end), self.end)
                    cut = data.rfind(b"\n")
                    if cut < 0:
                        if len(data) < _CHUNK:
                            break  # only a partial line: a tail
                        whole = self._long_line(fd)
                        if whole is None:
                            break
                        data, cut = whole, len(whole) - 1
                    self._lines(data[: cut + 1])
            finally:
                os.close(fd)
        return self

    def _long_line(self, fd: int) -> bytes | None:
        """A line longer than one chunk, read whole (or None while it is still partial)."""
        n = _CHUNK
        while self.end + n < self.size:
            n *= 4
            data = os.pread(fd, min(n, self.size - self.end), self.end)
            cut = data.find(b"\n")
            if cut >= 0:
                return data[: cut + 1]
        return None

    def _lines(self, data: bytes) -> None:  # the hot loop of a first open: locals, and a fast path
        loads, crc32, classify_ = orjson.loads, zlib.crc32, classify
        offsets, codes, lanes, cols = self.offsets, self.codes, self.lanes, self.cols
        crc, pos, n = self.crc, self.end, len(offsets)
        main = self._lane_of.get("main")
        top = self._top
        for line in data.split(b"\n")[:-1]:
            n += 1
            after = crc32(line[:-_SUFFIX], crc)
            if line[-_SUFFIX:] != b',"crc":"%08x"}' % after:
                self.broken = {"line": n, "reason": "checksum", "detail": "the line does not match its checksum"}
                break
            try:
                rec = loads(line)
            except orjson.JSONDecodeError:
                rec = None
            if type(rec) is not dict:
                self.broken = {"line": n, "reason": "malformed", "detail": "the line is not a JSON object"}
                break
            crc = after
            if n == 1 and rec.get("kind") == "header":
                self.header = rec
            if main is None or "agent" in rec or "vc" in rec:
                self._top = top
                self._place(rec)
                top, main = self._top, self._lane_of.get("main")
            else:  # a record of the main agent without a clock: after everything before it
                top += 1
                codes.append(ord(classify_(rec)))
                lanes.append(main)
                cols.append(top)
                self._barrier = top
                self._last_col[main] = top
            offsets.append(pos)
            pos += len(line) + 1
            self.last = rec
        self._top = top
        self.crc, self.end = crc, pos

    def _place(self, rec: dict[str, Any]) -> None:
        agent = rec.get("agent", "main")
        name = agent if isinstance(agent, str) else str(agent)
        lane = self._lane_of.get(name)
        if lane is None:
            lane = self._lane_of[name] = len(self.lane_names)
            self.lane_names.append(name)
            self._own.append(array("q"))
            self._own_col.append(array("q"))
            self._last_col.append(-1)
        vc = rec.get("vc")
        if isinstance(vc, dict):
            col = max(self._barrier, self._last_col[lane])
            for other, seen in vc.items():
                j = self._lane_of.get(other)
                if j is None or j == lane or type(seen) is not int:
                    continue
                k = bisect.bisect_right(self._own[j], seen)  # the latest record of that lane this one has seen
                if k:
                    col = max(col, self._own_col[j][k - 1])
            col += 1
            own = vc.get(name)
            self._own[lane].append(own if type(own) is int else len(self._own[lane]) + 1)
            self._own_col[lane].append(col)
        else:
            col = self._top + 1
            self._barrier = col
        self._last_col[lane] = col
        self._top = max(self._top, col)
        self.codes.append(ord(classify(rec)))
        self.lanes.append(lane)
        self.cols.append(col)

    def verdict(self) -> Verdict:
        """replay()'s verdict on the file, computed again only when the file changed."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise HarnessError(f"{self.path}: cannot read: {e.strerror}") from None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._verdict
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            rep = replay(self.path)
            verdict = Verdict(None, rep.state, rep.pending, rep.torn_tail, rep.records)
        except TraceCorruption as e:
            error = {"line": e.line, "seq": e.seq, "reason": e.reason, "detail": e.detail, "message": str(e)}
            verdict = Verdict(error, None, None, False, e.line - 1)
        except HarnessError as e:
            error = {"line": None, "seq": None, "reason": "unreadable", "detail": str(e), "message": str(e)}
            verdict = Verdict(error, None, None, False, 0)
        self._verdict = (key, verdict)
        return verdict

    def find(self, offset: int) -> int | None:
        """The index of the line starting at byte `offset` (len(self) for the end), None if no line starts there."""
        if offset == self.end:
            return len(self.offsets)
        i = bisect.bisect_left(self.offsets, offset)
        return i if i < len(self.offsets) and self.offsets[i] == offset else None

    def raw(self, start: int, stop: int) -> list[bytes]:
        """Lines start..stop-1 (0-based) as bytes, without their newlines, read in one go."""
        stop = min(stop, len(self.offsets))
        if start >= stop:
            return []
        first = self.offsets[start]
        last = self.offsets[stop] if stop < len(self.offsets) else self.end
        with open(self.path, "rb") as f:
            f.seek(first)
            data = f.read(last - first)
        return data.split(b"\n")[: stop - start]

    def next_offset(self, i: int) -> int:
        return self.offsets[i + 1] if i + 1 < len(self.offsets) else self.end

    def brief(self, i: int, rec: dict[str, Any]) -> dict[str, Any]:
        """Line i (0-based) as the timeline shows it."""
        error = rec.get("error")
        return {
            "line": i + 1, "seq": rec.get("seq"), "kind": rec.get("kind"), "cls": chr(self.codes[i]),
            "lane": self.lanes[i], "agent": self.lane_names[self.lanes[i]], "col": self.cols[i],
            "role": role(rec, self.header), "label": label(rec), "note": note(rec),
            "step": rec.get("step"), "attempt": rec.get("attempt"), "failed": error is not None,
        }  # fmt: skip


class Indexes:
    """A small cache of Index objects by path, least recently used dropped first."""

    def __init__(self, size: int = 16):
        self._size = size
        self._items: OrderedDict[str, Index] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str) -> Index:
        with self._lock:
            idx = self._items.pop(path, None) or Index(path)
            self._items[path] = idx
            while len(self._items) > self._size:
                self._items.popitem(last=False)
            return idx
