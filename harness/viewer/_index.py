"""A run's records as the viewer serves them: line positions, built once, extended as the file grows.

How it works: the first look at a trace is one `replay()` pass; its
`on_record` hook hands over each line that passed every check, and the
index keeps only, per line, its byte offset, a one-letter class (the state
it moves to, or its kind), its lane (the `agent` field, "main" when absent)
and its column: its place in causal order. So one read gives both the index
and replay()'s verdict (`Index.verdict()`), and a `TraceCorruption` at line
N leaves lines 1..N-1 indexed and nothing after them. Records carrying a
vector clock (`vc`) sit one column after the latest record of every lane
they have seen; records without one follow everything before them, so a
sequential run is one lane, one record per column.

While a writer goes on, later lines are read from where the index stopped,
each checked against the checksum chain (`trace.line.line_ok`) and the seq
order before it is indexed: what a page shows is always lines that passed
these checks. The full replay() verdict of the longer file is computed
again only when a run's summary is asked for after the file changed, never
per window or per record, so following a live run stays O(new lines).

Guarantees: the file is opened read-only and never written; only complete
lines are indexed or served, so a torn tail (bytes after the last newline)
never is; a record is read back from its offset when asked for, so memory
stays a few bytes per record whatever the trace's size, and lines are read
back in pieces of at most READ bytes (a longer line alone), so what one
request holds is its reply and one record, never the records around it.

A file replaced, shrunk or rewritten under the index is indexed again from
the start, and `generation` counts how often that happened, so a live
stream that began on the old file stops with a reset instead of going on in
another run. Size, mtime and inode do not tell a same-size edit in place:
the change time (which no one sets back) says that something was written,
and then the crc ending the header line and the one ending the last indexed
line are read again: a different one means other bytes there, and the file
is indexed again. Whatever changed, the next summary asks replay() again.
"""

from __future__ import annotations

import bisect
import os
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import HarnessError, IndexChanged, TraceCorruption, TraceUnreadable
from ..review.show import role as show_role
from ..trace.line import MAX_LINE, line_ok
from ..trace.reader import Replay, attempt_of, replay
from ..trace.stream import FRAMEWORK_MODELS, reply, said

_CHUNK = 1 << 20
READ = 1 << 20  # bytes of lines read back at once (a longer line is read alone): a request's memory is its reply
_NOTE = 160  # characters of a value shown in a record's one-line note
_CRC_END = len(b'00000000"}\n')  # the bytes that end every line: its crc, the closing brace, the newline
_PLAIN = frozenset({"seq", "kind", "ts", "crc", "agent", "vc", "reused", "mutated", "blobs"})

# one letter per record, for the overview: what colour it takes and how it is marked
CLASSES = {
    "H": "header", "P": "PLAN", "A": "ACT", "V": "VERIFY", "C": "CHECKPOINT", "K": "checkpoint",
    "D": "DONE", "F": "FAILED", "Z": "PAUSED", "R": "retry", "X": "crossing", "E": "error",
    "r": "resume", "c": "reconcile", "s": "seal", "e": "event", "n": "end", "S": "spawn", "J": "join",
    "Q": "exit", "M": "send", "G": "receive", "T": "artifact", "a": "answer", "o": "other",
}  # fmt: skip
_TO = {"PLAN": "P", "ACT": "A", "VERIFY": "V", "CHECKPOINT": "C", "DONE": "D", "FAILED": "F", "PAUSED": "Z"}
_KIND = {
    "header": "H", "checkpoint": "K", "crossing": "X", "resume": "r", "reconcile": "c", "seal": "s", "event": "e",
    "spawn": "S", "join": "J", "exit": "Q", "artifact": "T", "answer": "a",
}  # fmt: skip
_KNOWN = frozenset({*_KIND, "transition", "end"})
MESSAGES = "agent_msg"  # the boundary of messages between agents (docs/FORMAT.md, "Agents")


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
    if kind == "crossing" and rec.get("boundary") == MESSAGES:
        request = rec.get("request")
        return "M" if isinstance(request, dict) and "send" in request else "G"
    return _KIND.get(str(kind), "o")


def link(rec: dict[str, Any]) -> dict[str, Any] | None:
    """What ties this record to another agent's: a spawn or join names the child, a send its
    receiver, a receive its sender and the sender's own count at the send (`sent`). None otherwise."""
    kind = rec.get("kind")
    if kind in ("spawn", "join") and isinstance(rec.get("child"), str):
        return {kind: rec["child"]}
    if kind != "crossing" or rec.get("boundary") != MESSAGES:
        return None
    request, response = rec.get("request"), rec.get("response")
    if isinstance(request, dict) and isinstance(request.get("send"), str):
        return {"send": request["send"]}
    if isinstance(response, dict) and isinstance(response.get("from"), str) and isinstance(response.get("sent"), dict):
        sender = response["from"]
        return {"receive": sender, "sent": response["sent"].get(sender)}
    return None


def role(rec: dict[str, Any], header: dict[str, Any] | None) -> str | None:
    """A rerun's or fork's record is served (from the recording), answered (the branch) or live: harness show's
    words (`review.show.role`). None for the header and outside a rerun or fork."""
    branch = header.get("branch") if header else None
    seq = rec.get("seq")
    if type(seq) is not int:
        return None
    rerun = header is not None and "parent" in header and type(branch) is not int
    return show_role(seq, rec, branch if type(branch) is int else None, rerun)


def label(rec: dict[str, Any]) -> str:
    """A record in a few words: `ACT → VERIFY`, `crossing llm`, `checkpoint "search"`."""
    kind = rec.get("kind")
    if kind == "transition":
        return f"{rec.get('from')} → {rec.get('to')}"
    if kind == "crossing":
        tie = link(rec)
        if tie is not None:
            return f"send → {tie['send']}" if "send" in tie else f"receive ← {tie['receive']}"
        return f"crossing {rec.get('boundary')}"
    if kind == "checkpoint":
        return f"checkpoint {short(rec.get('name'), 40)}" if "name" in rec else f"checkpoint step {rec.get('step')}"
    if kind == "seal":
        return f"seal {rec.get('state')}" + (" (keyed)" if "hmac" in rec else "")
    if kind in ("event", "end"):
        return f"{kind} {short(rec.get('type', rec.get('status')), 40)}"
    if kind in ("spawn", "join"):
        return f"{kind} {short(rec.get('child'), 40)}"
    if kind == "exit":
        return f"exit {short(rec.get('status'), 20)}"
    if kind == "answer":
        return f"answer to seq {rec.get('op')}"
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
    if kind in ("transition", "spawn") and "tool" in rec:  # an intent, or a parallel call as planned
        return f"{rec['tool']} {short(rec.get('args'), _NOTE)}"
    if kind == "crossing" and rec.get("boundary") == MESSAGES:
        request, response = rec.get("request"), rec.get("response")
        if isinstance(request, dict) and "send" in request:
            return short(request.get("message"), _NOTE)
        if isinstance(response, dict) and "message" in response:
            return short(response["message"], _NOTE)
    if kind == "crossing" and (rec.get("boundary") == "http" or rec.get("boundary") in FRAMEWORK_MODELS):
        answer = reply(rec.get("response"))  # a model call, streamed or not: what the model said
        if answer is not None:
            return short(said(answer), _NOTE)
    if kind == "resume":
        return f"set aside {rec['set_aside']}" if rec.get("set_aside") else "resumed by another process"
    if kind == "answer":  # what the human said
        return short(rec.get("answer"), _NOTE)
    named = rec.get("blobs")
    stored: dict[str, Any] = named if isinstance(named, dict) else {}
    for field in ("result", "response", "data", "evidence"):
        if field in rec:
            return short(rec[field], _NOTE)
        ref = stored.get(field)
        if isinstance(ref, dict):  # a payload stored in a blob: the panel reads it
            return f"{field} in blob {str(ref.get('sha256'))[:12]}… ({ref.get('size')} bytes)"
    if kind == "artifact":
        return f"{short(rec.get('name'), 60)} ({rec.get('size')} bytes, blob {str(rec.get('sha256'))[:12]}…)"
    if kind == "reconcile":
        return f"op {rec.get('op')} happened={rec.get('happened')}"
    if kind not in _KNOWN:
        rest = {k: v for k, v in rec.items() if k not in _PLAIN}  # a kind this viewer does not know: what it holds
        return short(rest, _NOTE) if rest else ""
    return ""


def short(value: Any, width: int) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=repr).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What replay() says of the file's complete lines when it was last asked."""

    error: dict[str, Any] | None  # {line, seq, reason, detail, message} when the trace is corrupt or unreadable
    state: str | None
    pending: dict[str, Any] | None
    torn_tail: bool
    records: int
    seal: dict[str, Any] | None = None  # {line, state, keyed, digests} when the run is sealed (replay() checked it)
    blobs: int = 0  # blobs and artifacts the trace names (replay() checked each is there, with its size)
    settled: bool = False  # PAUSED, and what it waits for was given (a reconcile, an answer): a resume goes on


def _verdict_of(exc: HarnessError) -> Verdict:
    if isinstance(exc, TraceCorruption):
        error = {"line": exc.line, "seq": exc.seq, "reason": exc.reason, "detail": exc.detail, "message": str(exc)}
        return Verdict(error, None, None, False, exc.line - 1)
    error = {"line": None, "seq": None, "reason": "unreadable", "detail": str(exc), "message": str(exc)}
    return Verdict(error, None, None, False, 0)


def _verdict_ok(rep: Replay) -> Verdict:
    seal = None
    if rep.seal is not None:
        digests = rep.seal.get("digests")
        seal = {
            "line": rep.records, "state": rep.seal.get("state"), "keyed": "hmac" in rep.seal,
            "digests": len(digests) if isinstance(digests, list) else 0,
        }  # fmt: skip
    paused = [c for c in rep.tail.open_calls if c.state == "PAUSED"]  # a parallel step's calls waiting on an operator
    settled = rep.pending is not None and (
        rep.tail.answered if rep.tail.question is not None
        else all(c.reconcile is not None for c in paused) if paused
        else rep.tail.reconciled
    )  # fmt: skip
    return Verdict(None, rep.state, rep.pending, rep.torn_tail, rep.records, seal, len(rep.tail.blobs), settled)


class Index:
    """The records of one trace, kept as positions; see the module docstring."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self.generation = 0  # how often the file was found replaced or rewritten and indexed again
        self._reset(None)

    def _reset(self, ident: tuple[int, int] | None) -> None:
        self.ident = ident  # (st_dev, st_ino) of the file indexed
        self.stamp: tuple[int, int, int] = (-1, -1, -1)  # (size, mtime_ns, ctime_ns) at the last read
        self.offsets = array("q")  # start of each complete line; offsets[i] is line i + 1
        self.end = 0  # offset after the last indexed line
        self.size = 0  # file size at the last read (bytes after `end` are a tail still being written, or torn)
        self.crc = 0
        self.seq = 0  # the last indexed line's seq
        self.codes = bytearray()
        self.lanes = array("H")
        self.cols = array("q")
        self.lane_names: list[str] = []
        self._lane_of: dict[str, int] = {}
        self._main: int | None = None  # the lane of "main", once it has one
        self._own: list[array[int]] = []  # per lane: own vc component of each of its records with a vc
        self._own_col: list[array[int]] = []  # ... and that record's column
        self._last_col: list[int] = []  # per lane: its last record's column
        self._top = -1  # highest column so far
        self._barrier = -1  # column of the last record without a vc: all later records come after it
        self.header: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.broken: dict[str, Any] | None = None  # {line, reason, detail}: the first line that fails
        self._head_crc = -1  # the crc ending the header line, as indexed
        self._verdict: tuple[Any, Verdict] | None = None  # ((end, stamp) it speaks of, verdict)

    def __len__(self) -> int:
        return len(self.offsets)

    def limit(self) -> int:
        """How many lines may be shown: those indexed, up to the first one replay() found corrupt."""
        n = len(self.offsets)
        found = self._verdict
        if found is not None and found[1].error is not None:
            n = min(n, max(0, (found[1].error["line"] or 1) - 1))
        return n

    def extend(self) -> Index:
        """Index the complete lines written since the last call (the first call: one replay() pass)."""
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                raise TraceUnreadable(self.path, "no such file") from None
            except OSError as e:
                raise TraceUnreadable(self.path, f"cannot read: {e.strerror}") from None
            ident, stamp = (st.st_dev, st.st_ino), (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if stamp == self.stamp and ident == self.ident:
                return self
            if (
                ident != self.ident
                or st.st_size < self.end
                or (self.broken is not None and stamp != self.stamp)
                or not self._same_lines()
            ):
                if self.ident is not None:
                    self.generation += 1  # another file, or other bytes: what was served came from the old one
                self._reset(ident)
            first = self._first() if not self.offsets and self.broken is None else None
            if first is None and self.broken is None:
                self._more()
            # the file as it was before this read: lines that landed during it make the next call read on
            self.stamp, self.size = stamp, max(st.st_size, self.end)
            if first is not None:
                self._verdict = ((self.end, self.stamp), first)
        return self

    def invalidate(self) -> None:
        """Forget the file (IndexChanged was raised reading it): the next extend() indexes it from the start."""
        with self._lock:
            self.generation += 1
            self._reset(None)

    def _same_lines(self) -> bool:
        """Whether the header line and the last indexed line still end with the crcs they had when indexed.

        A rewrite at the same inode, or an edit in place that kept the size,
        changes them (every crc after an edited line changes with it).
        """
        if not self.offsets or self.header is None:
            return True
        try:
            with open(self.path, "rb") as f:
                return self._crc_in(f, self.end) == self.crc and self._crc_in(f, self.next_offset(0)) == self._head_crc
        except OSError:
            return False

    def _first(self) -> Verdict:
        """The first pass: replay() checks every line and hands each one over; the index keeps its place."""
        try:
            rep = replay(self.path, on_record=self._add)
        except HarnessError as e:
            verdict = _verdict_of(e)
            if isinstance(e, TraceCorruption) and e.reason != "torn-header":  # a header being written: wait
                self.broken = {"line": e.line, "reason": e.reason, "detail": e.detail}
        else:
            verdict = _verdict_ok(rep)
            self.crc = rep.tail.crc
        self._head_crc = self._crc_at(1)
        return verdict

    def _crc_at(self, line: int) -> int:
        """The crc that ends indexed line `line` (1-based), read from the file; -1 when it cannot be read."""
        if line > len(self.offsets):
            return -1
        try:
            with open(self.path, "rb") as f:
                return self._crc_in(f, self.next_offset(line - 1))
        except OSError:
            return -1

    def _more(self) -> None:
        """Lines written since the last read: checksum chain and seq order checked, then indexed."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed just below
        except OSError as e:
            raise TraceUnreadable(self.path, f"cannot read: {e.strerror}") from None
        with f:
            f.seek(self.end)
            tail = b""
            while self.broken is None:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                data = tail + chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    if len(data) > MAX_LINE:
                        self._break(len(self.offsets) + 1, "line-too-long", f"a line longer than {MAX_LINE} bytes")
                    tail = data
                    continue
                self._lines(data[:cut])
                tail = data[cut + 1 :]

    def _break(self, line: int, reason: str, detail: str) -> None:
        self.broken = {"line": line, "reason": reason, "detail": detail}

    def _lines(self, data: bytes) -> None:
        for line in data.split(b"\n"):
            n = len(self.offsets) + 1
            if not line_ok(line, self.crc):
                return self._break(n, "checksum", "the line does not match its checksum")
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                rec = None
            if type(rec) is not dict:
                return self._break(n, "malformed", "the line is not a JSON object")
            if rec.get("seq") != self.seq + 1:
                return self._break(n, "seq", f"expected seq {self.seq + 1}, found {rec.get('seq')!r}")
            self.crc = int(line[-10:-2], 16)  # the chained crc the line was just checked against
            self._add(line, rec)
            if n == 1:
                self._head_crc = self.crc

    def _add(self, line: bytes, rec: dict[str, Any]) -> None:  # once per record on a first open: kept lean
        self.offsets.append(self.end)
        self.end += len(line) + 1
        self.seq = rec["seq"]
        self.last = rec
        main = self._main
        if main is None or "agent" in rec or "vc" in rec:
            if self.header is None and rec.get("kind") == "header":
                self.header = rec
            self._place(rec)
        else:  # a record of the main agent without a clock: after everything before it
            self._top += 1
            self.codes.append(ord(classify(rec)))
            self.lanes.append(main)
            self.cols.append(self._top)
            self._barrier = self._last_col[main] = self._top

    def _place(self, rec: dict[str, Any]) -> None:
        agent = rec.get("agent", "main")
        name = agent if isinstance(agent, str) else str(agent)
        lane = self._lane(name)
        if rec.get("kind") == "spawn" and isinstance(rec.get("child"), str):
            self._lane(rec["child"])  # the child's lane comes in spawn order, before its first record
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

    def _lane(self, name: str) -> int:
        lane = self._lane_of.get(name)
        if lane is None:
            lane = self._lane_of[name] = len(self.lane_names)
            self.lane_names.append(name)
            self._own.append(array("q"))
            self._own_col.append(array("q"))
            self._last_col.append(-1)
            if name == "main":
                self._main = lane
        return lane

    def verdict(self) -> Verdict:
        """replay()'s verdict on the file: the first pass's, computed again only once the file has changed."""
        found = self._verdict
        if found is not None and found[0] == (self.end, self.stamp):
            return found[1]
        try:
            rep = replay(self.path)
            verdict = _verdict_ok(rep)
        except HarnessError as e:
            verdict = _verdict_of(e)
        self._verdict = ((self.end, self.stamp), verdict)
        return verdict

    def find(self, offset: int) -> int | None:
        """The index of the line starting at byte `offset` (len(self) for the end), None if no line starts there."""
        if offset == self.end:
            return len(self.offsets)
        i = bisect.bisect_left(self.offsets, offset)
        return i if i < len(self.offsets) and self.offsets[i] == offset else None

    def lines(self, start: int, stop: int) -> Iterator[tuple[int, memoryview]]:
        """(i, line i without its newline) for lines start..stop-1 (0-based), read in pieces of at most READ
        bytes (a longer line alone): what is held at once is one piece, whatever the lines around it weigh.

        Each line is checked as it is read: the header line still ends with the crc it was indexed with,
        and each line chains on the crc ending the line before it, read from the file too. A line that
        does not raises IndexChanged: the file was rewritten or edited since it was indexed, and no line of
        another file is ever given as this one's.
        """
        offsets, end_of_all, head = self.offsets, self.end, self._head_crc  # as now: another thread may reset them
        stop = min(stop, len(offsets))

        def after(k: int) -> int:
            return offsets[k + 1] if k + 1 < len(offsets) else end_of_all

        with open(self.path, "rb") as f:
            if start < stop:
                if len(offsets) > 1 and self._crc_in(f, offsets[1]) != head:
                    raise IndexChanged(self.path)
                prev = self._crc_in(f, offsets[start]) if start else 0
            i = start
            while i < stop:
                first = offsets[i]
                j = i + 1
                while j < stop and after(j) - first <= READ:
                    j += 1
                f.seek(first)
                data = memoryview(f.read(after(j - 1) - first))  # views of it: no line is copied
                pos = 0
                for k in range(i, j):
                    end = after(k) - first - 1
                    line = data[pos:end]
                    if not line_ok(line, prev):
                        raise IndexChanged(self.path)
                    prev = int(bytes(line[-10:-2]), 16)
                    yield k, line
                    pos = end + 1
                i = j

    @staticmethod
    def _crc_in(f: Any, end: int) -> int:
        """The crc ending the line that ends at byte `end` of the open file f; -1 when there is none."""
        f.seek(end - _CRC_END)
        data = f.read(_CRC_END)
        try:
            return int(data[:8], 16) if data[8:] == b'"}\n' else -1
        except ValueError:
            return -1

    def raw(self, start: int, stop: int) -> list[bytes]:
        """Lines start..stop-1 (0-based) as bytes, without their newlines (for a few lines: see lines())."""
        return [bytes(line) for _, line in self.lines(start, stop)]

    def next_offset(self, i: int) -> int:
        return self.offsets[i + 1] if i + 1 < len(self.offsets) else self.end

    def brief(self, i: int, rec: dict[str, Any]) -> dict[str, Any]:
        """Line i (0-based) as the timeline shows it."""
        error = rec.get("error")
        vc, agent = rec.get("vc"), self.lane_names[self.lanes[i]]
        return {
            "line": i + 1, "seq": rec.get("seq"), "kind": rec.get("kind"), "cls": chr(self.codes[i]),
            "lane": self.lanes[i], "agent": agent, "col": self.cols[i],
            "role": role(rec, self.header), "label": label(rec), "note": note(rec),
            "step": rec.get("step"), "attempt": attempt_of(rec), "failed": error is not None,
            "own": vc.get(agent) if isinstance(vc, dict) else None, "link": link(rec),
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
