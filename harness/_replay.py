"""Read a trace back: validate every line and rebuild the run, running no tool.

The file is read in large chunks and split on newlines; each complete line
is checked in this order: the checksum suffix is where it must be, the
chained crc matches the bytes, the line parses as an object, the seq is the
previous one + 1, and the record is legal in the current state (the table in
_state.py). The first failure raises TraceCorruption naming the line. A last
line without its newline is a torn tail (a writer died mid-line), reported,
never an error.

No record stays in memory: checkpoints and crossings are kept as
(offset, length, previous crc) triples and decoded on access, re-checking
each line's crc, so a file changed after replay() is still caught.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import orjson

from . import _state as S
from ._errors import HarnessError, TraceCorruption
from ._journal import HEADER_START as _HEADER_START
from ._journal import MARK as _MARK
from ._journal import MAX_LINE, SCHEMA, SUFFIX, canonical, line_ok

_CHUNK = 1 << 16  # 64 KiB: small enough that a chunk's lines are still in the CPU cache when checked


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A verified step result. `seq` is the checkpoint record's seq."""

    step: int
    name: str
    result: Any
    seq: int = 0


@dataclass(frozen=True, slots=True)
class Crossing:
    """One value that crossed a boundary: a tool call, an LLM call, the clock, randomness.

    `seq` is the record carrying the response (in a valid trace seq is also
    its line number); `error` is set instead of `response` when the crossing
    raised (`{"type": ..., "message": ...}`).
    """

    seq: int
    kind: str
    request: Any
    response: Any
    error: dict[str, Any] | None = None
    line: int = 0

    @property
    def hash(self) -> str:
        return request_hash(self.kind, self.request)


def request_hash(kind: str, request: Any) -> str:
    return hashlib.sha256(canonical([kind, request])).hexdigest()[:16]


class _Lines:
    """Records of a trace kept as file positions, decoded (and re-checked) on access."""

    __slots__ = ("_build", "_path", "_pos", "_width")

    def __init__(self, path: str, width: int, build: Any):
        self._path, self._pos, self._build, self._width = path, array("q"), build, width

    def __len__(self) -> int:
        return len(self._pos) // (3 * self._width)

    def _read(self, f: Any, i: int) -> list[dict[str, Any]]:
        out = []
        base = i * 3 * self._width
        for j in range(self._width):
            off, length, prev = self._pos[base + 3 * j : base + 3 * j + 3]
            f.seek(off)
            line = f.read(length - 1)  # without its newline
            if len(line) != length - 1 or not line_ok(line, prev):
                raise HarnessError(f"{self._path} changed after it was replayed (at byte {off}); replay it again")
            out.append(orjson.loads(line))
        return out

    def __iter__(self) -> Iterator[Any]:
        with open(self._path, "rb") as f:
            for i in range(len(self)):
                yield self._build(*self._read(f, i))

    def __getitem__(self, i: int) -> Any:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        with open(self._path, "rb") as f:
            return self._build(*self._read(f, i))


class Records(Sequence[Any]):
    """A read-only sequence over a trace's checkpoints or crossings."""

    def __init__(self, lines: _Lines):
        self._lines = lines

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._lines[j] for j in range(*i.indices(len(self)))]
        return self._lines[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._lines)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"<{len(self)} records of {self._lines._path}>"


def _checkpoint(rec: dict[str, Any]) -> Checkpoint:
    return Checkpoint(rec["step"], rec["name"], rec["result"], rec["seq"])


def _crossing(req: dict[str, Any], resp: dict[str, Any]) -> Crossing:
    if resp["kind"] == "crossing":
        return Crossing(
            resp["seq"], resp["boundary"], resp["request"], resp.get("response"), resp.get("error"), resp["seq"]
        )
    request = {"tool": req["tool"], "args": req["args"]}
    return Crossing(resp["seq"], "tool", request, resp.get("result"), resp.get("error"), resp["seq"])


@dataclass(frozen=True, slots=True)
class Replay:
    """What a trace says happened. Built by `replay()`."""

    path: str
    header: dict[str, Any]
    state: str
    checkpoints: Records
    crossings: Records
    transitions: int
    records: int
    resumes: int
    torn_tail: bool
    last_seq: int
    # where a resuming writer continues: end of the last complete line, its crc
    end: int = field(repr=False)
    crc: int = field(repr=False)
    last: dict[str, Any] | None = field(repr=False)  # the last transition
    intent: dict[str, Any] | None = field(repr=False)  # the last transition into ACT
    result: Any = field(repr=False)  # the last tool result (state VERIFY or CHECKPOINT)
    reconcile: dict[str, Any] | None = field(repr=False)  # an operator's word on a PAUSED run
    fresh: int = field(repr=False)  # crossings since the last transition

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    @property
    def goal(self) -> Any:
        return self.header["goal"]

    @property
    def complete(self) -> bool:
        return self.state in S.TERMINAL

    def resumable_crossings(self) -> list[Crossing]:
        """The crossings since the last transition, up to the first that failed: a resume serves them again."""
        served = []
        for c in self.crossings[len(self.crossings) - self.fresh :]:
            if c.error is not None:
                break
            served.append(c)
        return served

    @property
    def pending(self) -> dict[str, Any] | None:
        """The operation whose outcome is uncertain, when the run is PAUSED."""
        if self.state != S.PAUSED or self.intent is None:
            return None
        i = self.intent
        return {"seq": i["seq"], "step": i["step"], "tool": i["tool"], "args": i["args"]}


def replay(
    trace: str | os.PathLike[str], *, on_record: Callable[[bytes, dict[str, Any]], None] | None = None
) -> Replay:
    """Validate the trace at `trace` and rebuild its run, running no tool.

    Raises TraceCorruption (with .line, .seq, .reason) when the file cannot
    support its story, HarnessError when it is not a readable trace at all.
    `on_record(line, record)`, when given, is called with each line (without
    its newline) and its record once they passed every check, in order: a
    reader that streams the trace (`harness show`) sees what precedes a
    corruption before replay() raises, and holds no more than one record.
    """
    path = os.fspath(trace)
    try:
        f = open(path, "rb")  # noqa: SIM115 - each open error gets its own message; `with f` below closes it
    except IsADirectoryError:
        raise HarnessError(f"{path}: is a directory, not a trace file") from None
    except FileNotFoundError:
        raise HarnessError(f"{path}: no such file") from None
    except OSError as e:
        raise HarnessError(f"{path}: cannot read: {e.strerror}") from None
    with f:
        return _scan(path, f, on_record)


_fail = TraceCorruption


def _claimed(line: bytes) -> int | None:
    """The seq a line that failed its checks still names, for the message."""
    found = re.match(rb'\{"seq":(\d+),', line)
    return int(found[1]) if found else None


def _scan(
    path: str, f: Any, on_record: Callable[[bytes, dict[str, Any]], None] | None = None
) -> Replay:  # one loop on purpose: it is the hot path
    checkpoints, crossings = _Lines(path, 1, _checkpoint), _Lines(path, 2, _crossing)
    ck_pos, cr_pos = checkpoints._pos, crossings._pos
    edges = S.EDGES
    loads, crc32 = orjson.loads, zlib.crc32  # locals: looked up once, not on every line
    header: dict[str, Any] = {}
    state = S.INIT
    n = seq = crc = transitions = resumes = offset = 0
    vouch: int | None = None  # step vouched for by VERIFY -> CHECKPOINT, until its checkpoint
    last: dict[str, Any] | None = None
    intent: dict[str, Any] | None = None
    intent_pos = (0, 0, 0)
    result: Any = None
    reconcile: dict[str, Any] | None = None
    fresh = 0  # crossings since the last transition
    at_step, at_attempt = 0, 1  # what the next transition must name
    buf = b""
    while True:
        # a long partial line doubles the read, so copying stays linear; the cap keeps any line longer
        # than MAX_LINE from completing inside one read: it is caught below as a too-long partial line
        chunk = f.read(min(max(_CHUNK, len(buf)), MAX_LINE + 1 - len(buf)))
        if not chunk:
            break
        lines = (buf + chunk).split(b"\n") if buf else chunk.split(b"\n")
        buf = lines.pop()
        if len(buf) > MAX_LINE:
            raise _fail(path, n + 1, "line-too-long", f"a line longer than {MAX_LINE} bytes; this is not a trace")
        for line in lines:
            n += 1
            length = len(line) + 1
            prev = crc
            crc = crc32(line[:-SUFFIX], crc)
            if line[-SUFFIX:] != b',"crc":"%08x"}' % crc:  # one compare on the good path; then say what is wrong
                if n == 1 and not line.startswith(_HEADER_START):
                    raise _fail(path, 1, "not-a-trace", "the first line is not a harness trace header")
                if line[-SUFFIX:-10] != _MARK or line[-2:] != b'"}':
                    raise _fail(path, n, "malformed", "the line does not end with its checksum", _claimed(line))
                why = "the line's bytes do not match its checksum (edited, moved or damaged)"
                raise _fail(path, n, "checksum", why, _claimed(line))
            try:
                rec = loads(line)
                rseq = rec["seq"]
                kind = rec["kind"]
            except (orjson.JSONDecodeError, TypeError, KeyError):
                raise _fail(path, n, "malformed", "not a JSON object with seq and kind", _claimed(line)) from None
            if rseq != seq + 1 or type(rseq) is not int:
                raise _fail(
                    path, n, "seq", f"expected seq {seq + 1}, found {rseq!r}", rseq if type(rseq) is int else None
                )
            seq = rseq
            if state in S.TERMINAL:
                raise _fail(path, n, "after-terminal", f"a {kind} record after the run ended in {state}", seq)
            try:
                if kind == "transition":
                    src, dst, step, attempt = rec["from"], rec["to"], rec["step"], rec["attempt"]
                    if src != state:
                        raise _fail(path, n, "bad-transition", f"transition from {src} but the run is in {state}", seq)
                    if dst not in edges[state]:
                        raise _fail(path, n, "bad-transition", S.check(state, dst) or "", seq)
                    if step != at_step or attempt != at_attempt or type(step) is not int or type(attempt) is not int:
                        why = (
                            f"step {step!r}, attempt {attempt!r} where step {at_step}, attempt {at_attempt} comes next"
                        )
                        raise _fail(path, n, "bad-transition", why, seq)
                    if vouch is not None:
                        why = "VERIFY -> CHECKPOINT is not followed by its checkpoint"
                        raise _fail(path, n, "unvouched-checkpoint", why, seq)
                    if dst == S.ACT:
                        if (
                            type(rec["name"]) is not str
                            or type(rec["tool"]) is not str
                            or type(rec["args"]) is not dict
                        ):
                            raise _fail(
                                path, n, "malformed", "an intent needs a str name, a str tool, a dict of args", seq
                            )
                        intent, intent_pos = rec, (offset, length, prev)
                    elif dst == S.CHECKPOINT:
                        vouch = step
                    elif dst == S.FAILED and type(rec["error"]) is not dict:
                        raise _fail(path, n, "malformed", "a transition into FAILED without its error object", seq)
                    elif dst == S.PLAN and src != S.INIT:
                        if src == S.CHECKPOINT:
                            at_step, at_attempt = at_step + 1, 1
                        else:  # a failed attempt: the step is planned again
                            at_attempt += 1
                    if src == S.ACT or (src == S.PAUSED and dst == S.VERIFY):
                        result = rec["result"] if dst == S.VERIFY else None
                        if dst != S.PAUSED:
                            cr_pos.extend(intent_pos)
                            cr_pos.extend((offset, length, prev))
                    if src == S.PAUSED:
                        if reconcile is None:
                            raise _fail(
                                path, n, "bad-transition", "a paused run moved on before it was reconciled", seq
                            )
                        if reconcile["happened"] is not (dst == S.VERIFY) or result != reconcile["result"]:
                            why = f"PAUSED -> {dst} contradicts the reconcile record (happened={reconcile['happened']})"
                            raise _fail(path, n, "bad-reconcile", why, seq)
                        reconcile = None
                    state, last = dst, rec
                    transitions += 1
                    fresh = 0
                elif kind == "checkpoint":
                    if vouch is None or rec["step"] != vouch:
                        raise _fail(
                            path,
                            n,
                            "unvouched-checkpoint",
                            f"checkpoint of step {rec['step']} without its VERIFY -> CHECKPOINT just before it",
                            seq,
                        )
                    if intent is None or rec["name"] != intent["name"] or rec["result"] != result:
                        why = "the checkpoint's name or result is not the one verified"
                        raise _fail(path, n, "unvouched-checkpoint", why, seq)
                    vouch = None
                    ck_pos.extend((offset, length, prev))
                elif kind == "crossing":
                    fresh += 1
                    cr_pos.extend((offset, length, prev, offset, length, prev))
                elif kind == "resume":
                    resumes += 1
                elif kind == "header":
                    if n != 1:
                        raise _fail(path, n, "bad-header", "a header after the first line", seq)
                    if rec.get("schema") != SCHEMA:
                        raise _fail(
                            path,
                            n,
                            "schema",
                            f"trace schema version {rec.get('schema')!r}; this harness reads version {SCHEMA}",
                            seq,
                        )
                    if "run_id" not in rec or "goal" not in rec:
                        raise _fail(path, n, "malformed", "a header without its run_id and goal", seq)
                    header = rec
                elif kind == "reconcile":
                    if state != S.PAUSED or reconcile is not None:
                        raise _fail(
                            path, n, "bad-reconcile", "a reconcile record with no uncertain operation before it", seq
                        )
                    if intent is None or rec["op"] != intent["seq"] or type(rec["happened"]) is not bool:
                        why = (
                            "the reconcile record does not name the paused operation's seq with happened true or false"
                        )
                        raise _fail(path, n, "bad-reconcile", why, seq)
                    reconcile = rec
                elif kind == "event":  # a Recorder's: its runs stay in INIT until their end record
                    if state != S.INIT:
                        raise _fail(path, n, "bad-transition", f"an event record in state {state}", seq)
                    if type(rec["type"]) is not str:
                        raise _fail(path, n, "malformed", "an event record whose type is not a str", seq)
                elif kind == "end":
                    if state != S.INIT:
                        raise _fail(path, n, "bad-transition", f"an end record in state {state}", seq)
                    if rec["status"] not in ("success", "failure", "error"):
                        why = f"end status {rec['status']!r} is not success, failure or error"
                        raise _fail(path, n, "malformed", why, seq)
                    state = S.DONE if rec["status"] == "success" else S.FAILED
                else:
                    raise _fail(path, n, "unknown-kind", f"unknown record kind {kind!r}", seq)
            except (KeyError, TypeError) as e:
                raise _fail(path, n, "malformed", f"a {kind} record without a valid {e} field", seq) from None
            if vouch is not None and kind not in ("transition", "checkpoint", "resume"):
                raise _fail(
                    path, n, "unvouched-checkpoint", "VERIFY -> CHECKPOINT is not followed by its checkpoint", seq
                )
            if n == 1 and kind != "header":
                raise _fail(path, 1, "not-a-trace", "the first record is not a header", seq)
            if on_record is not None:
                on_record(line, rec)
            offset += length
        del lines, chunk  # free this chunk and its lines before reading the next one (peak memory)
    if n == 0:
        if buf.startswith(_HEADER_START[: len(buf)]) and buf:
            raise _fail(
                path, 1, "torn-header", "the file holds only part of a header: the writer died while creating it"
            )
        if not buf:
            raise HarnessError(f"{path}: is empty, not a trace")
        raise _fail(path, 1, "not-a-trace", "no complete line; this is not a harness trace")
    return Replay(
        path=path,
        header=header,
        state=state,
        checkpoints=Records(checkpoints),
        crossings=Records(crossings),
        transitions=transitions,
        records=n,
        resumes=resumes,
        torn_tail=bool(buf),
        last_seq=seq,
        end=offset,
        crc=crc,
        last=last,
        intent=intent,
        result=result,
        reconcile=reconcile,
        fresh=fresh,
    )
