"""Read a trace back: validate every line and rebuild the run, running no tool.

The file is read in large chunks and split on newlines; each complete line
is checked in this order: the checksum suffix is where it must be, the
chained crc matches the bytes, the line parses as an object, the seq is the
previous one + 1, once the run spawned agents its vector clock is the one
the rules give (clock.py, ClockRules), and the record is legal in the current
state (the table in state.py): transitions, checkpoints and crossings, nearly
every line, are checked inline in the loop; every other kind by its function
in rules.py's table (RULES). Each call of a parallel step walks the
state table in a lane of its own: the lane's variables are swapped into the
loop's locals when one of its records comes, so one code path checks every
lane. The first failure raises TraceCorruption naming the line. A last
line without its newline is a torn tail (a writer died mid-line), reported,
never an error.

No record stays in memory: checkpoints and crossings are kept as the
positions of their lines (offset; length << 32 | the crc before the line:
two int64s, in fixed-size blocks, see _Rows) and decoded on access,
re-checking each line's crc, so a file changed after replay() is still
caught. A checkpoint vouches for its lane's last transition into VERIFY;
its result is read from there, and its name from the intent before it. Blob-stored
payloads are read (and their sha256 checked) on access too; the scan only
checks that each named blob is there with its size. A `seal` record is
checked against the content hash (seal.py) of every byte before it, every
block hashed again, and the blobs the trace names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import orjson

from .._errors import HarnessError, TraceCorruption, TraceUnreadable, internal
from ..storage import blobs as _blobs
from ..storage import is_url, local_copy
from ..storage.blobs import BlobRef
from ..storage.files import open_regular, read_error, unreadable
from . import state as S
from .clock import MAIN, ClockRules
from .line import HEADER_START as _HEADER_START
from .line import MARK as _MARK
from .line import MAX_DEPTH, MAX_LINE, SUFFIX, canonical, line_ok
from .rules import (
    CHECKPOINT_KEYS,
    CROSSING_KEYS,
    FIELDS,
    FIELDS_FORK,
    INTENT,
    RULES,
    Lane,
    Scan,
    after_crash,
    all_joined,
    asked_again,
    bad_task,
    checkpoint_fields,
    contract_ok,
    crossing_fields,
    error_ok,
    fork_marks,
    in_flight,
    left_group,
    left_pause,
    malformed_crossing,
    misplaced,
    pause_question,
    paused_on_operation,
    payload,
    planned_intent,
    rejected,
    result_placement,
    stray_field,
    timed_out,
)
from .tasks import TASK, well_formed

_ERROR_OBJECT = 'error object {"type": str, "message": str}'
_CHUNK = 1 << 16  # 64 KiB: small enough that a chunk's lines are still in the CPU cache when checked


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A verified step result. `seq` is the checkpoint record's seq; `result_seq` the record holding `result`
    (its transition into VERIFY: where a resume finds its kept secrets, trace/vault.py)."""

    step: int
    name: str
    result: Any
    seq: int = 0
    result_seq: int = field(default=0, compare=False, repr=False)  # where the value is, not what it is


@dataclass(frozen=True, slots=True)
class Crossing:
    """One value that crossed a boundary: a tool call, an LLM call, the clock, randomness.

    `seq` is the record carrying the response (in a valid trace seq is also
    its line number); `error` is set instead of `response` when the crossing
    raised (`{"type": ..., "message": ...}`). `agent` made it; `vc` is the
    vector clock of its record; `task` the task of that agent that made it (None: its root task; see
    trace/tasks.py).
    """

    seq: int
    kind: str
    request: Any
    response: Any
    error: dict[str, Any] | None = None
    line: int = 0
    agent: str = MAIN
    vc: dict[str, int] = field(default_factory=dict)  # the record's clock ({"main": seq} in a run that never spawned)
    task: str | None = None

    @property
    def hash(self) -> str:
        return request_hash(self.kind, self.request)


@dataclass(frozen=True, slots=True)
class Call:
    """One call of a parallel step still open at the end of a trace (a crash, a pause): where its lane stands."""

    agent: str
    step: int
    state: str
    attempt: int
    last: dict[str, Any] | None
    intent: dict[str, Any] | None
    result: Any
    reconcile: dict[str, Any] | None
    done: bool
    joined: bool
    planned: dict[str, Any]
    checkpoint: Checkpoint | None
    result_seq: int = 0  # the record holding its result (which its checkpoint vouches for)


def attempt_of(rec: Mapping[str, Any]) -> Any:
    """A record's attempt: a transition without `attempt` is its step's first; other kinds say theirs (or not)."""
    return rec.get("attempt", 1) if rec.get("kind") == "transition" else rec.get("attempt")


def wall_clock(header: Mapping[str, Any], rec: Mapping[str, Any]) -> float | None:
    """When rec was written, in seconds since the epoch: its `ts` counts from the header's (None when unknown)."""
    start, ts = header.get("ts"), rec.get("ts")
    if type(start) is not float or type(ts) is not float:
        return None
    return start if rec is header or rec.get("kind") == "header" else start + ts


def request_hash(kind: str, request: Any) -> str:
    return hashlib.sha256(canonical([kind, request])).hexdigest()[:16]


_ROWS = 1 << 12  # rows of positions per block: every full block is the same size, so freed ones are reused
_LOW = 0xFFFFFFFF


class _Rows:
    """Rows of `width` int64s (line positions), kept in int64 arrays of _ROWS rows each, the last rows in `tail`.

    The scan appends to `tail`, a list (list.extend of a tuple costs a fifth
    of array.extend's), and calls `seal()` between chunks, which moves each
    full block of rows into an array: `tail` never holds much more than a
    block. Why blocks: one array grown by realloc to tens of MB leaves the
    heap fragmented once freed (glibc raises its mmap threshold to the size
    freed, then grows the next such array on the heap, copying), so a second
    replay in the same process (`harness diff A B`) held twice the memory.
    Blocks are all the same size: a second replay reuses the first's.
    """

    __slots__ = ("blocks", "tail", "width")

    def __init__(self, width: int):
        self.width = width
        self.tail: list[int] = []
        self.blocks: list[array[int]] = []

    def __len__(self) -> int:
        return len(self.blocks) * _ROWS + len(self.tail) // self.width

    def seal(self) -> None:
        size = _ROWS * self.width
        while len(self.tail) >= size:
            self.blocks.append(array("q", self.tail[:size]))  # tail keeps its identity (the scan holds it)
            del self.tail[:size]

    def __getitem__(self, i: int) -> array[int]:
        w, b = self.width, i // _ROWS
        if b < len(self.blocks):
            r = (i - b * _ROWS) * w
            return self.blocks[b][r : r + w]
        r = (i - len(self.blocks) * _ROWS) * w
        return array("q", self.tail[r : r + w])

    def column(self, j: int) -> array[int]:
        """Slot j of every row, in order."""
        out = array("q")
        for block in (*self.blocks, self.tail):
            out.extend(block[j :: self.width])
        return out


def _unpack(off: int, packed: int) -> tuple[int, int, int]:
    """A line's position (offset, length with its newline, crc of the line before) from its two stored slots."""
    return off, packed >> 32, packed & _LOW


class _Lines:
    """Crossings of a trace kept as file positions, decoded (and re-checked) on access.

    A row is the request's line and the response's line (the same line for a
    `crossing` record; the intent and its result for a tool), each as two
    int64s: the line's offset, and its length << 32 | the crc of the line
    before it.
    """

    __slots__ = ("_build", "_path", "_pos")

    def __init__(self, path: str, build: Any, width: int = 4):
        self._path, self._pos, self._build = path, _Rows(width), build

    def __len__(self) -> int:
        return len(self._pos)

    def _read(self, f: Any, i: int) -> list[dict[str, Any]]:
        req_off, req, resp_off, resp = self._pos[i]
        got = self._line(f, resp_off, resp)
        return [got if req_off == resp_off else self._line(f, req_off, req), got]

    def _line(self, f: Any, off: int, packed: int) -> dict[str, Any]:
        """The record at off, its crc checked again and its blob-stored payloads read back."""
        length, prev = packed >> 32, packed & _LOW
        f.seek(off)
        line = f.read(length - 1)  # without its newline
        if len(line) != length - 1 or not line_ok(line, prev):
            raise HarnessError(f"{self._path} changed after it was replayed (at byte {off}); replay it again")
        return _blobs.inline(self._path, orjson.loads(line))

    def __iter__(self) -> Iterator[Any]:
        with os.fdopen(open_regular(self._path), "rb") as f:
            for i in range(len(self)):
                yield self._build(*self._checked(f, i))

    def __getitem__(self, i: int) -> Any:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        with os.fdopen(open_regular(self._path), "rb") as f:
            return self._build(*self._checked(f, i))

    def _checked(self, f: Any, i: int) -> list[dict[str, Any]]:
        try:
            return self._read(f, i)
        except OSError as e:
            raise read_error(self._path, e) from None


class _Checkpoints(_Lines):
    """Checkpoints, each kept as its line's position and the index of the tool crossing whose result it vouches for.

    The crossing holds the intent (the step's name) and the result: nothing is stored twice, in memory or on file.
    A row: the line's offset, its length << 32 | the crc before it, the crossing's index.
    """

    __slots__ = ("_crossings",)

    def __init__(self, path: str, crossings: _Lines):
        super().__init__(path, _checkpoint, 3)
        self._crossings = crossings

    def _read(self, f: Any, i: int) -> list[dict[str, Any]]:
        off, packed, crossing = self._pos[i]
        return [self._line(f, off, packed), *self._crossings._read(f, crossing)]


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


def _checkpoint(rec: dict[str, Any], intent: dict[str, Any], verified: dict[str, Any]) -> Checkpoint:
    return Checkpoint(rec["step"], intent["name"], verified["result"], rec["seq"], verified["seq"])


@dataclass(frozen=True, slots=True)
class Artifact:
    """A named output of a run (`harness.artifact()`), stored as blob `sha256` beside the trace."""

    seq: int
    name: str
    sha256: str
    size: int
    trace: str = field(repr=False, default="")

    def read(self) -> bytes:
        """Its bytes, checked against its sha256 (TraceCorruption if missing or altered)."""
        return _blobs.read(self.trace, self.seq, self.sha256, self.size)


def _crossing(req: dict[str, Any], resp: dict[str, Any]) -> Crossing:
    seq = resp["seq"]
    agent, vc = resp.get("agent", MAIN), resp.get("vc") or {MAIN: seq}
    if resp["kind"] == "crossing":
        response, error, task = resp.get("response"), resp.get("error"), resp.get(TASK)
        return Crossing(seq, resp["boundary"], resp["request"], response, error, seq, agent, vc, task)
    request = {"tool": req["tool"], "args": req["args"]}
    return Crossing(seq, "tool", request, resp.get("result"), resp.get("error"), seq, agent, vc, req.get(TASK))


@dataclass(frozen=True, slots=True)
class Tail:
    """Where a run stands at the end of its trace: what a resuming writer needs and a reader of the story does not.

    `Replay.tail`, built once by `replay()` (and by `index.resume_point()`, from a mark). The fields are what the
    reader found; the properties name the questions a resume, a reconcile and the viewer ask of them (read those:
    a field may change meaning when the format grows, a question keeps its answer).
    """

    end: int  # the byte after the last complete line: a resuming writer appends there
    crc: int  # the chained crc of that line: the next line chains on it
    last: dict[str, Any] | None  # the last record that moved the state (transition, checkpoint)
    intent: dict[str, Any] | None  # the last transition into ACT
    result: Any  # the last tool result (state VERIFY), a blob read back
    reconcile: dict[str, Any] | None  # an operator's word on a PAUSED run
    fresh: int  # crossings since the last transition (a resume serves them again)
    # crossings[planned[0]:planned[1]]: those the planner made while planning the last intent (a resume asks it again)
    planned: tuple[int, int] = (0, 0)
    # interrupt(): the transition into PAUSED that asked (or that paused on the run's budget, which needs no answer),
    # while the run is PAUSED on it; whether it is answered;
    # the answers not yet delivered to agent code (served again on resume); the last crash record
    question: dict[str, Any] | None = None
    answered: bool = False
    answers: tuple[Any, ...] = ()
    crash: dict[str, Any] | None = None
    result_seq: int = 0  # the record holding `result`
    # every blob the trace names (payloads and artifacts): sha256 -> (size, first line naming it)
    blobs: dict[str, tuple[int, int]] = field(default_factory=dict)
    clocks: dict[str, dict[str, int]] | None = None  # last clock per agent, once spawned
    group: tuple[Call, ...] = ()  # the calls of a parallel step not closed yet
    # the last quiet point (after a checkpoint a resume may start from; see index.py), and the byte where
    # checking began: 0 for replay(), an index mark's end for index.resume_point()
    quiet: tuple[Any, ...] | None = None
    since: int = 0

    @property
    def open_calls(self) -> tuple[Call, ...]:
        """The calls of a parallel step that is not closed yet (each from where its lane stands), else ()."""
        return self.group

    @property
    def asking(self) -> dict[str, Any] | None:
        """The transition into PAUSED whose `question` (interrupt()) waits for its answer, else None."""
        q = self.question
        return q if q is not None and not self.answered and "question" in q else None

    @property
    def over_budget(self) -> dict[str, Any] | None:
        """The transition into PAUSED on the run's budget (`reason` budget) the run is paused on, else None: it
        waits for no answer (a resume goes back where it paused)."""
        q = self.question
        return q if q is not None and q.get("reason") == "budget" else None

    @property
    def reconciled(self) -> bool:
        """Whether an operator's reconcile record answers the pause the run ends in."""
        return self.reconcile is not None

    @property
    def pending_answers(self) -> tuple[Any, ...]:
        """The answers the trace holds that no agent code took yet: a resume delivers them first."""
        return self.answers

    @property
    def agents(self) -> bool:
        """Whether the run spawned agents: its records from here on carry vector clocks (`clocks`)."""
        return self.clocks is not None


@dataclass(frozen=True, slots=True)
class Replay:
    """What a trace says happened. Built by `replay()`.

    `seal` is the seal record, when the run is sealed. `tail` (a `Tail`) is where a resuming writer continues:
    what resume, reconcile and the tools that append to a trace read, not part of the run's story.
    """

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
    tail: Tail = field(repr=False)
    artifacts: tuple[Artifact, ...] = ()
    seal: dict[str, Any] | None = field(repr=False, default=None)  # the seal record, when sealed

    @property
    def sealed(self) -> bool:
        return self.seal is not None

    @property
    def blobs(self) -> dict[str, tuple[int, int]]:
        """Every blob the trace names (payloads and artifacts): sha256 -> (size, the first line naming it)."""
        return dict(self.tail.blobs)

    @property
    def agents(self) -> dict[str, list[Crossing]]:
        """Each agent's crossings, in its own order ("main" first, then by name)."""
        out: dict[str, list[Crossing]] = {MAIN: []}
        for c in self.crossings:
            out.setdefault(c.agent, []).append(c)
        return {MAIN: out.pop(MAIN), **dict(sorted(out.items()))}

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    @property
    def workflow(self) -> str | None:
        """The `module:qualname` of the workflow whose run this is (`@harness.workflow`), None for an Executor's."""
        name = self.header.get("workflow")
        return name if isinstance(name, str) else None

    @property
    def returned(self) -> Any:
        """What a workflow that ended DONE returned (its PLAN -> DONE's result, a blob read back); else None."""
        last = self.tail.last
        if self.state != S.DONE or self.workflow is None or last is None:
            return None
        return _blobs.inline(self.path, last)["result"] if "result" not in last else last["result"]

    @property
    def goal(self) -> Any:
        return self.header["goal"]

    @property
    def complete(self) -> bool:
        return self.state in S.TERMINAL

    def resumable_crossings(self) -> list[Crossing]:
        """The crossings since the last transition, each agent's up to its first that failed: a resume serves
        them again."""
        served, failed = [], set()
        for c in self.crossings[len(self.crossings) - self.tail.fresh :]:
            if c.error is not None:
                failed.add(c.agent)
            if c.agent not in failed:
                served.append(c)
        return served

    @property
    def pending(self) -> dict[str, Any] | None:
        """What a PAUSED run waits for: the question interrupt() asked, the operation of uncertain outcome, or a
        larger budget (`reason` "budget", and `budget`: the limit, what was spent, the call it would have made)."""
        if self.state != S.PAUSED:
            return None
        tail = self.tail
        if tail.question is not None:
            q = tail.question
            if "question" not in q:  # a pause on the run's budget
                return {
                    "seq": q["seq"],
                    "step": q["step"],
                    "state": q["from"],
                    "reason": q["reason"],
                    "budget": q["budget"],
                }
            return {"seq": q["seq"], "step": q["step"], "state": q["from"], "question": q["question"]}
        paused = next((c for c in tail.group if c.state == S.PAUSED and c.reconcile is None), None)
        i = paused.intent if paused is not None else tail.intent
        if i is None:
            return None
        return {"seq": i["seq"], "step": i["step"], "tool": i["tool"], "args": i["args"]}


def _call(x: Lane, joined: bool) -> Call:
    checkpoint = x.ck_rec
    return Call(
        x.agent, x.at_step, x.state, x.at_attempt, x.last, x.intent, x.result, x.reconcile, x.done, joined, x.planned,
        checkpoint, x.result_seq,
    )  # fmt: skip


def replay(
    trace: str | os.PathLike[str], *, on_record: Callable[[bytes, dict[str, Any]], None] | None = None
) -> Replay:
    """Validate the trace at `trace` and rebuild its run, running no tool.

    Raises TraceCorruption (with .line, .seq, .reason) when the file cannot
    support its story, HarnessError when it is not a readable trace at all
    (missing, a directory, a FIFO or device, a read error).
    `on_record(line, record)`, when given, is called with each line (without
    its newline) and its record once they passed every check, in order: a
    reader that streams the trace (`harness show`) sees what precedes a
    corruption before replay() raises, and holds no more than one record.
    """
    path = os.fspath(trace)
    if is_url(path):  # a trace on object storage: its segments, concatenated, through this same function
        return replay_url(path, on_record=on_record)
    with os.fdopen(open_regular(path), "rb") as f:
        try:
            return _scan(path, f, on_record)
        except BrokenPipeError:  # on_record's, writing to a closed pipe (`harness show | head`): never the file's
            raise
        except OSError as e:  # EIO and the like, after the open: the file's problem, named
            raise read_error(path, e) from None


def replay_url(
    url: str,
    *,
    on_record: Callable[[bytes, dict[str, Any]], None] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Replay:
    """replay() of the trace at url: the same checks, the damage named against the URL."""
    url = url.rstrip("/")
    path = local_copy(url, storage_options=storage_options)
    try:
        rep = replay(path, on_record=on_record)
    except TraceCorruption as e:
        raise TraceCorruption(url, e.line, e.reason, e.detail, e.seq) from None
    except TraceUnreadable as e:
        raise TraceUnreadable(url, e.problem.replace(path, url)) from None
    except HarnessError as e:
        raise HarnessError(str(e).replace(path, url)) from None
    return dataclasses.replace(rep, path=url)


_fail = TraceCorruption
# a checkpoint record makes S.CHECKPOINT_MOVES from VERIFY (the only state it is read in): the table's word on
# them, asked once here, as the table is fixed (the first move it refuses, or None)
_CHECKPOINT_ILLEGAL = next(filter(None, map(S.check, (S.VERIFY, *S.CHECKPOINT_MOVES[:-1]), S.CHECKPOINT_MOVES)), None)
_SORTED = orjson.OPT_SORT_KEYS


def _claimed(line: bytes) -> int | None:
    """The seq a line that failed its checks still names, for the message."""
    found = re.match(rb'\{"seq":(\d+),', line)
    return int(found[1]) if found else None


def _unchecked(path: str, n: int, line: bytes) -> TraceCorruption:
    """Why a line does not end with the checksum it should: the slow path of the first check."""
    if n == 1 and not line.startswith(_HEADER_START):
        return _fail(path, 1, "not-a-trace", "the first line is not a harness trace header")
    if line.endswith(b'"}\r'):
        why = (
            "the line ends in CRLF (\\r\\n), not LF: the file was converted, most likely by git "
            "(core.autocrlf=true on checkout). Add `*.jsonl -text` to .gitattributes (or set "
            "core.autocrlf to false or input) and check the file out again; a trace is never edited as text"
        )
        return _fail(path, n, "crlf", why, _claimed(line))
    if line[-SUFFIX:-10] != _MARK or line[-2:] != b'"}':
        return _fail(path, n, "malformed", "the line does not end with its checksum", _claimed(line))
    why = "the line's bytes do not match its checksum (edited, moved or damaged)"
    return _fail(path, n, "checksum", why, _claimed(line))


def _unparsed(path: str, n: int, line: bytes, e: orjson.JSONDecodeError) -> TraceCorruption:
    if "depth" in str(e) or "recursion" in str(e):
        return _fail(path, n, "too-deep", f"a value nested more than {MAX_DEPTH} levels deep", _claimed(line))
    return _fail(path, n, "malformed", f"not a JSON object with seq and kind ({e})", _claimed(line))


def _noncanonical(path: str, n: int, line: bytes, rec: dict[str, Any]) -> TraceCorruption:
    """Why a line that parses is not the line harness writes for its record: the slow path of that check."""
    seq = rec.get("seq") if type(rec.get("seq")) is int else _claimed(line)
    try:
        again = orjson.dumps(rec)
    except TypeError:  # orjson writes at most MAX_DEPTH levels; harness never wrote this line
        why = f"a value nested more than {MAX_DEPTH} levels deep (the record included); harness never writes one"
        return _fail(path, n, "too-deep", why, seq)
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if not found and len(set(keys)) < len(keys):
            dup = next(k for i, k in enumerate(keys) if k in keys[:i])
            found.append(f"key {dup!r} appears twice in one object (two JSON parsers can read it differently)")
        return dict(items)

    def integer(text: str) -> int:
        value = int(text)
        if not found and not -(2**63) <= value < 2**64:
            found.append(f"integer {text} is out of the 64-bit range harness writes (it reads back as a float)")
        return value

    with contextlib.suppress(ValueError, RecursionError):  # json sees what orjson's parse hides; depth is bounded
        json.loads(line, object_pairs_hook=pairs, parse_int=integer)
    if not found:
        at = _first_difference(line, again)
        found.append(
            f"its bytes differ from the record re-encoded from byte {at} on ({line[at : at + 24]!r} where harness "
            f"writes {again[at : at + 24]!r}): spaces, escapes, key order or number spelling a writer of harness "
            "never produces"
        )
    return _fail(path, n, "non-canonical", found[0], seq)


def _first_difference(a: bytes, b: bytes) -> int:
    """The first index where a and b differ (or the shorter one's length): 4 KiB at a time, then byte by byte."""
    start, end = 0, min(len(a), len(b))
    while start < end and a[start : start + 4096] == b[start : start + 4096]:
        start += 4096
    stop = min(start + 4096, end)
    return next((i for i in range(start, stop) if a[i] != b[i]), stop)


def _scan(
    path: str, f: Any, on_record: Callable[[bytes, dict[str, Any]], None] | None = None, origin: Any = None
) -> Replay:  # one loop on purpose: it is the hot path
    """Check the lines of f from its start, or from the point `origin` describes (a verified index mark, index.py).

    One loop, its state in locals: the set-up; the framing (crc chain, parse, canonical bytes, seq, clocks,
    the writer's lane); the three kinds nearly every line is, inline; every other kind, and each rare edge or
    error, a function of rules.py (`RULES`: handed the state in a `Scan`, giving back what it changed).
    """
    crossings = _Lines(path, _crossing)
    checkpoints = _Checkpoints(path, crossings) if origin is None else origin.checkpoints(path, crossings)
    ck_rows, cr_rows = checkpoints._pos, crossings._pos
    ck_add, cr_add = ck_rows.tail.extend, cr_rows.tail.extend  # rows go to the tail; seal() moves full blocks out
    ck_tail, cr_tail, ck_full, cr_full = ck_rows.tail, cr_rows.tail, _ROWS * 3, _ROWS * 4
    crossed = 0  # crossings so far (rows of cr_rows)
    loads, dumps, crc32 = orjson.loads, orjson.dumps, zlib.crc32  # locals: looked up once, not on every line
    run_lane = lane = Lane(MAIN, S.INIT, 0)  # the lane whose variables are loaded in the locals below
    sc = Scan(path, run_lane, ck_add)  # what the rarer kinds' rules (rules.py) share with this loop
    lanes, blobs = sc.lanes, sc.blobs  # (shared, changed in place)
    state = S.INIT
    n = seq = crc = transitions = resumes = offset = 0
    last: dict[str, Any] | None = None
    intent: dict[str, Any] | None = None
    intent_pos = (0, 0)
    result: Any = None  # the result being verified (a BlobRef while its blob is not read)
    result_seq, result_crossing = 0, 0  # the record holding it, and its tool crossing's index
    reconcile: dict[str, Any] | None = None
    question: dict[str, Any] | None = None  # the pause on interrupt() the run is in
    answered = False
    timed_out_key: tuple[bytes, str] | None = None  # an idempotent call that timed out, and its key: reused
    answers: list[Any] = []  # answers not yet delivered: an `interrupt` crossing delivers one
    crash: dict[str, Any] | None = None  # the last crash record, until the run moves on
    fresh = 0  # crossings since the last transition
    planned = (0, 0)  # the crossings made while planning the last intent, as indexes into crossings
    at_step, at_attempt = 0, 1  # what the next transition must name
    before = ""  # the previous record's kind
    clocks: ClockRules | None = None  # once the run spawned an agent
    group: list[Lane] = []  # the open parallel step's calls, in planner order
    joined = 0  # how many of them the run joined (in that order)
    ended = False  # the run reached DONE or FAILED
    quiet: tuple[Any, ...] | None = None  # the last point a resume may start from (index.py), once resolved
    mutated_at: int | None = None  # a fork's record marked mutated (with agents its seq is the child's own)
    mcp_servers: set[str] = set()  # the `server` of each mcp.list_tools crossing: its steps are `<server>.<tool>`
    dying = False  # main wrote a crash record: its next record is the resuming process's `resume`
    mail: dict[tuple[str, str], list[tuple[Any, bytes]]] = {}  # (sender, to) -> messages sent, not yet received
    if origin is not None:  # right after a quiet checkpoint: the state is these few values (transitions and
        last, intent, intent_pos, result, result_seq, quiet, n, offset, at_step = _restored(sc, origin, f)
        state, seq, crc, before = S.PLAN, n, origin.mark.crc, "checkpoint"  # resumes count from here)
    # the header's (set by its rule): tools holds the contracts an intent must name; the fields each kind (and
    # each edge) carries, a fork's with its marks
    header, tools, fork, kind_fields, edge_fields = sc.header, sc.tools, sc.fork, sc.kind_fields, sc.edge_fields
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
                raise _unchecked(path, n, line)
            try:
                rec = loads(line)
                rseq, kind = rec["seq"], rec["kind"]
            except orjson.JSONDecodeError as e:
                raise _unparsed(path, n, line, e) from None
            except (TypeError, KeyError, IndexError):
                raise _fail(path, n, "malformed", "not a JSON object with seq and kind", _claimed(line)) from None
            # Exactly the bytes harness writes for this record (orjson, in order, no spaces), so duplicate
            # keys, integers beyond 64 bits, nesting orjson cannot write back, and any respelling are refused.
            try:
                same = dumps(rec) == line
            except TypeError:  # too deep to write back
                same = False
            if not same:
                raise _noncanonical(path, n, line, rec)
            if rseq != seq + 1 or type(rseq) is not int:
                raise _fail(
                    path, n, "seq", f"expected seq {seq + 1}, found {rseq!r}", rseq if type(rseq) is int else None
                )
            seq = rseq
            if clocks is not None or "vc" in rec or "agent" in rec:
                if clocks is None:
                    clocks = ClockRules(seq, reexecuted="workflow" in header)
                    if kind != "spawn":
                        raise _fail(path, n, "vector-clock", "a clock or agent before the run spawned an agent", seq)
                if "blobs" in rec and rec.get("boundary") == "agent_msg":  # a large message: its clock is in it
                    wrong = clocks.see(_blobs.inline(path, rec), kind)
                else:
                    wrong = clocks.see(rec, kind)
                if wrong is not None:
                    raise _fail(path, n, "vector-clock", wrong, seq)
                who = rec.get("agent", MAIN)
                if kind == "reconcile":  # an operator's word on a paused call belongs to that call's lane
                    for x in group:
                        paused = intent if x is lane else x.intent
                        if paused is not None and paused["seq"] == rec.get("op"):
                            who = x.agent
                if who != lane.agent and (who in lanes or lane is not run_lane):  # load that lane's variables
                    lane.state, lane.at_step, lane.at_attempt, lane.last = state, at_step, at_attempt, last
                    lane.result_seq, lane.result_crossing = result_seq, result_crossing
                    lane.intent, lane.intent_pos, lane.result, lane.reconcile = intent, intent_pos, result, reconcile
                    lane = lanes.get(who, run_lane)
                    state, at_step, at_attempt, last = lane.state, lane.at_step, lane.at_attempt, lane.last
                    result_seq, result_crossing = lane.result_seq, lane.result_crossing
                    intent, intent_pos, result, reconcile = lane.intent, lane.intent_pos, lane.result, lane.reconcile
            if ended and (kind != "seal" or sc.seal is not None):
                what = " and was sealed" if sc.seal is not None else ""
                raise _fail(path, n, "after-terminal", f"a {kind} record after the run ended in {state}{what}", seq)
            if type(rec.get("ts")) is not float:
                raise _fail(path, n, "malformed", f"a {kind} record without its float ts", seq)
            if dying and kind != "resume" and rec.get("agent", MAIN) == MAIN:
                raise after_crash(path, n, seq, kind)
            try:
                if fork:  # its marks: what it reused, and the one record it answered differently (its branch)
                    mutated_at = fork_marks(path, n, seq, rec, header, clocks is not None, mutated_at)
                if "blobs" in rec or kind == "artifact":
                    _check_blobs(path, n, seq, rec, blobs)
                if kind == "transition":
                    src, dst, step, attempt = rec["from"], rec["to"], rec["step"], rec.get("attempt", 1)
                    if lane is not run_lane:
                        if lane.done:
                            why = f"a transition of {lane.agent}, whose call ended at its checkpoint"
                            raise _fail(path, n, "bad-transition", why, seq)
                    elif clocks is not None and rec.get("agent", MAIN) != MAIN:
                        why = f"a transition of agent {rec['agent']!r}, which runs no call of a parallel step"
                        raise _fail(path, n, "bad-transition", why, seq)
                    elif group:  # the run moves on from a parallel step: every call joined, the failure named
                        at_step, at_attempt = left_group(path, n, seq, rec, group, joined)
                        group, joined = [], 0
                    if src != state:
                        raise _fail(path, n, "bad-transition", f"transition from {src} but the run is in {state}", seq)
                    legal = edge_fields[state]  # the edges from state (the table's), and the fields of each
                    if dst not in legal:
                        raise _fail(path, n, "bad-transition", S.check(state, dst) or "", seq)
                    size, allowed = legal[dst]
                    if len(rec) != size and not allowed.issuperset(rec):
                        raise stray_field(path, n, seq, rec, allowed, f"a {src} -> {dst} transition")
                    if (step != at_step or type(step) is not int or attempt != at_attempt) or (
                        "attempt" in rec or dst == S.CHECKPOINT  # (an attempt written out: its type is checked there)
                    ):
                        misplaced(path, n, seq, rec, at_step, at_attempt)  # (raises, unless a retry's attempt)
                    asked = src == S.PAUSED and question is not None  # leaving a pause on interrupt()
                    if resumes > lane.resumes and src == S.ACT and intent is not None:  # (false unless resumed since)
                        in_flight(path, n, seq, rec, intent, tools)
                    if dst == S.PAUSED and (src != S.ACT or "question" in rec):  # a pause on interrupt()'s question
                        question, answered = pause_question(path, n, seq, rec), False
                    elif answers and not asked and dst != S.PAUSED and not (src == S.PAUSED and dst == S.ACT):
                        answers = []  # delivered, as the state moved on (a call in doubt, and its way back, keep them)
                    if src == S.VERIFY and dst == S.PLAN and intent is not None:
                        rejected(path, n, seq, intent, tools)
                    if asked and dst == S.ACT and intent is not None:
                        asked_again(path, n, seq, rec, intent)
                    if dst == S.ACT:
                        again = timed_out_key if timed_out_key and timed_out_key[0] == _call_of(rec) else None
                        _intent(path, n, rec, tools, header, intent if src == S.PAUSED else None, again)
                        if lane is not run_lane:  # a call's intent: the call its spawn planned
                            planned_intent(path, n, seq, rec, lane)
                        timed_out_key = None
                        intent, intent_pos = rec, (offset, length << 32 | prev)
                        if src != S.PAUSED and lane is run_lane:  # PAUSED -> ACT repeats the intent planned before
                            planned = (crossed - fresh, crossed)  # (a call's plan is its spawn's)
                        lane.resumes = resumes
                    elif dst == S.PAUSED and src == S.ACT and "question" not in rec:  # an operation in doubt
                        paused_on_operation(
                            path, n, seq, rec, intent, tools, before == "resume" or resumes > lane.resumes
                        )
                    elif dst == S.PLAN and src not in (S.INIT, S.PAUSED):  # a failed attempt: planned again
                        at_attempt += 1
                    failed = dst == S.FAILED or (dst == S.PLAN and src in (S.ACT, S.VERIFY))  # a failed attempt
                    if failed and not error_ok(rec["error"]):
                        raise _fail(path, n, "malformed", f"{src} -> {dst} without its {_ERROR_OBJECT}", seq)
                    if (
                        failed
                        and src == S.ACT
                        and rec["error"]["type"] == "ToolTimeout"
                        and intent is not None
                        and timed_out(path, n, seq, dst, intent, tools)  # (true: its next attempt keeps its key)
                    ):
                        timed_out_key = (_call_of(intent), intent["key"])
                    if (src == S.ACT and "question" not in rec) or (src == S.PAUSED and dst == S.VERIFY and not asked):
                        result = None
                        if dst == S.VERIFY:
                            result = rec["result"] if "result" in rec else payload(rec, "result")
                        if dst != S.PAUSED:
                            cr_add((*intent_pos, offset, length << 32 | prev))
                            crossed += 1
                        if dst == S.VERIFY:
                            result_seq, result_crossing = seq, crossed - 1
                    delivered = dst == S.VERIFY and result_seq == seq
                    # what the tool returned (ACT -> VERIFY), as harness.mcp recorded it; a reconcile's result
                    # (PAUSED -> VERIFY) is the operator's, which a resume carries as given: not looked into
                    if delivered and src == S.ACT and mcp_servers and "workflow" in header:
                        _mcp_result(path, n, seq, intent, result, mcp_servers)
                    returned = "result" in rec or "result" in (rec.get("blobs") or ())
                    if dst == S.DONE or (returned and not delivered):  # (a workflow's PLAN -> DONE has its result)
                        result_placement(path, n, seq, rec, returned, "workflow" in header and lane is run_lane)
                    if src == S.PAUSED:  # on the answer to the question it asked, or on an operator's word
                        left_pause(path, n, seq, dst, question if asked else None, answered, reconcile, result)
                        if asked:
                            question, answered = None, False  # (a later pause, on an operation say, waits for none)
                        else:
                            reconcile = None
                    state, last = dst, rec
                    if dst in S.TERMINAL and lane is run_lane:
                        ended = True
                        all_joined(path, n, seq, clocks)
                    transitions += 1
                    crash = None
                    if not asked and question is not rec:  # crossings made before a question are served again
                        fresh = 0
                elif kind == "checkpoint":  # the moves VERIFY -> CHECKPOINT -> PLAN, in one line
                    step = rec["step"]  # it vouches for the result of its lane's last transition into VERIFY
                    if len(rec) != CHECKPOINT_KEYS:  # (a clock, an agent, a fork's mark; or more)
                        checkpoint_fields(path, n, seq, rec, kind_fields[kind])
                    if state != S.VERIFY or type(step) is not int or step != at_step:
                        why = f"a checkpoint of step {step!r} in state {state}, step {at_step}: nothing verified"
                        raise _fail(path, n, "unvouched-checkpoint", why, seq)
                    if _CHECKPOINT_ILLEGAL:  # the table allows each move from VERIFY, or this is no checkpoint
                        raise _fail(path, n, "bad-transition", _CHECKPOINT_ILLEGAL, seq)
                    state = S.CHECKPOINT_MOVES[-1]
                    transitions += len(S.CHECKPOINT_MOVES)
                    if lane is run_lane and last["from"] == S.ACT and clocks is None and crash is None and not answers:  # type: ignore[index]
                        quiet = (offset, length, prev, seq, crc, step, len(blobs), result_crossing)
                    last, fresh = rec, 0
                    if lane is run_lane:
                        at_step, at_attempt = at_step + 1, 1
                        ck_add((offset, length << 32 | prev, result_crossing))
                    else:  # a call's checkpoint joins the progress when the run joins the call, in planner order
                        lane.ck, lane.done = (offset, length << 32 | prev, result_crossing), True
                        if intent is None:  # (VERIFY is entered after an intent)
                            raise internal(f"a checkpoint of {lane.agent} with no intent", path, seq)
                        lane.ck_rec = Checkpoint(step, intent["name"], result, seq, result_seq)
                elif kind == "crossing":
                    named = rec.get("blobs") or {}
                    if named or len(rec) != CROSSING_KEYS:  # (a clock, an agent, a task, blobs; or another field)
                        crossing_fields(path, n, seq, rec, kind_fields[kind])
                    if (
                        type(rec["boundary"]) is not str
                        or ("request" not in rec and "request" not in named)
                        or type(rec["hash"]) is not str
                        or ("response" in rec or "response" in named) is ("error" in rec)
                        or ("error" in rec and not error_ok(rec["error"]))
                    ):
                        raise malformed_crossing(path, n, seq, rec, named)
                    if rec["boundary"] in _BOUNDARIES:  # a message between agents, or what harness.mcp recorded
                        _boundary(path, n, seq, rec, mail, mcp_servers)
                    fresh += 1
                    crossed += 1
                    packed = length << 32 | prev
                    cr_add((offset, packed, offset, packed))
                    if rec["boundary"] == "interrupt" and answers:
                        answers.pop(0)  # delivered, and recorded: a resume serves the crossing
                else:  # a rarer kind: its rule is rules.py's, on the scan's state handed over in sc and taken back
                    rule = RULES.get(kind) if type(kind) is str else None  # (a list or dict kind is unhashable)
                    if rule is None:
                        raise _fail(path, n, "unknown-kind", f"unknown record kind {kind!r}", seq)
                    sc.state, sc.intent, sc.reconcile, sc.at_step, sc.lane, sc.clocks = (
                        state, intent, reconcile, at_step, lane, clocks
                    )  # fmt: skip
                    sc.crossed, sc.fresh, sc.planned, sc.group, sc.joined = crossed, fresh, planned, group, joined
                    sc.question, sc.answered, sc.answers, sc.crash, sc.ended = question, answered, answers, crash, ended
                    sc.offset, sc.size, sc.prev = offset, length, prev
                    rule(sc, rec, n, seq)
                    state, reconcile, planned, joined, answered, crash, ended, dying, resumes, at_step = (
                        sc.state, sc.reconcile, sc.planned, sc.joined, sc.answered, sc.crash, sc.ended, sc.dying,
                        sc.resumes, sc.at_step,
                    )  # fmt: skip
                    header, tools, fork, kind_fields, edge_fields = (
                        sc.header, sc.tools, sc.fork, sc.kind_fields, sc.edge_fields
                    )  # fmt: skip
            except (KeyError, TypeError) as e:
                raise _fail(path, n, "malformed", f"a {kind} record without a valid {e} field", seq) from None
            if n == 1 and kind != "header":
                raise _fail(path, 1, "not-a-trace", "the first record is not a header", seq)
            if on_record is not None:
                on_record(line, rec)
            before = kind
            offset += length
        del lines, chunk  # free this chunk and its lines before reading the next one (peak memory)
        if len(cr_tail) >= cr_full:
            cr_rows.seal()
        if len(ck_tail) >= ck_full:
            ck_rows.seal()
    # the lane the scan ended in keeps its variables: the run's are its lane's (a call's were kept on leaving it)
    lane.state, lane.at_step, lane.at_attempt, lane.last = state, at_step, at_attempt, last
    lane.result_seq, lane.result_crossing = result_seq, result_crossing
    lane.intent, lane.intent_pos, lane.result, lane.reconcile = intent, intent_pos, result, reconcile
    sc.fresh, sc.planned, sc.group, sc.joined, sc.clocks = fresh, planned, group, joined, clocks
    sc.question, sc.answered, sc.answers, sc.crash = question, answered, answers, crash
    end = (n, seq, crc, offset, transitions)
    return _replay_of(sc, checkpoints, crossings, buf, quiet, origin.mark.end if origin is not None else 0, end)


def _restored(sc: Scan, origin: Any, f: Any) -> tuple[Any, ...]:
    """The scan's state at an index mark (index.py): sc's header and what the locals start from; f at its end."""
    m = origin.mark
    sc.header, sc.tools, sc.header_pos = origin.header, dict(origin.header["tools"]), m.header
    sc.fork = "branch" in sc.header
    sc.kind_fields, sc.edge_fields = FIELDS_FORK if sc.fork else FIELDS
    sc.blobs.update((name, (0, 0)) for name in m.blobs)  # (size and first line: not known)
    f.seek(m.end)
    intent_pos = (m.intent[0], m.intent[1] << 32 | m.intent[2])
    return (
        origin.last,
        origin.intent,
        intent_pos,
        origin.result,
        origin.result_seq,
        origin.quiet,
        m.seq,
        m.end,
        m.step + 1,
    )


def _replay_of(
    sc: Scan, checkpoints: _Lines, crossings: _Lines, buf: bytes, quiet: Any, since: int, end: tuple[int, ...]
) -> Replay:
    """After the last line: the partial line left (a torn tail, or a lie), then the Replay of the run's lane.

    end: the scan's last (line number, seq, crc, end offset, transitions); since: the byte where it began.
    """
    path, run, (n, seq, crc, offset, transitions) = sc.path, sc.run_lane, end
    state, last, intent, result, result_seq, reconcile = (
        run.state, run.last, run.intent, run.result, run.result_seq, run.reconcile
    )  # fmt: skip
    ck_rows, cr_rows = checkpoints._pos, crossings._pos
    calls = tuple(_call(x, i < sc.joined) for i, x in enumerate(sc.group))
    if any(c.state == S.PAUSED for c in calls) and state == S.PLAN:
        state = S.PAUSED  # the run waits for an operator's word on a call
    if n == 0:
        if buf.startswith(_HEADER_START[: len(buf)]) and buf:
            raise _fail(
                path, 1, "torn-header", "the file holds only part of a header: the writer died while creating it"
            )
        if not buf:
            raise unreadable(path, "is empty, not a trace")
        raise _fail(path, 1, "not-a-trace", "no complete line; this is not a harness trace")
    if buf and state in S.TERMINAL:  # the end and its seal go out in one write: only a torn seal can follow the end
        if sc.seal is not None:
            raise _fail(path, n + 1, "after-terminal", f"{len(buf)} bytes after the seal: a sealed trace is immutable")
        start = b'{"seq":%d,"kind":"seal",' % (seq + 1)
        if not (buf.startswith(start) or start.startswith(buf)):
            why = (
                f"{len(buf)} bytes without a newline after the run ended in {state}, and they are not the start "
                "of its seal: harness writes nothing else after a terminal record, so they are not a torn tail"
            )
            raise _fail(path, n + 1, "after-terminal", why, _claimed(buf))
    if isinstance(result, BlobRef):
        result = orjson.loads(_blobs.read(path, result_seq, result.sha256, result.size))
    if quiet is not None and len(quiet) == 8:  # where the lines of the last quiet point are (see _index.Writer)
        off, length, prev, q_seq, q_crc, step, q_blobs, c = quiet
        done = len(checkpoints) - (len(ck_rows) - _count_to(ck_rows, off))
        row = cr_rows[c]
        intent_at, result_at = _unpack(row[0], row[1]), _unpack(row[2], row[3])
        quiet = (
            off + length,
            q_seq,
            q_crc,
            step,
            (off, length, prev),
            intent_at,
            result_at,
            q_blobs,
            done,
            sc.header_pos,
        )
    if reconcile is not None and "result" not in reconcile:
        reconcile = _blobs.inline(path, reconcile)
    return Replay(
        path=path,
        header=sc.header,
        state=state,
        checkpoints=Records(checkpoints),
        crossings=Records(crossings),
        transitions=transitions,
        records=n,
        resumes=sc.resumes,
        torn_tail=bool(buf),
        last_seq=seq,
        tail=Tail(
            end=offset,
            crc=crc,
            last=last,
            intent=intent,
            result=result,
            reconcile=reconcile,
            fresh=sc.fresh,
            planned=sc.planned,
            result_seq=result_seq,
            blobs=sc.blobs,
            clocks=dict(sc.clocks.last) if sc.clocks is not None else None,
            group=calls,
            question=sc.question,
            answered=sc.answered,
            answers=tuple(sc.answers),
            crash=sc.crash,
            quiet=quiet,
            since=since,
        ),
        artifacts=tuple(Artifact(*a, path) for a in sc.artifacts),
        seal=sc.seal,
    )


def _count_to(ck_rows: _Rows, off: int) -> int:
    """How many checkpoints ck_rows holds up to and including the one at byte off (the last blocks first; 0 if none).

    A checkpoint's line has its own offset, so the first row holding off in a block is the only one.
    """
    parts = [*ck_rows.blocks, ck_rows.tail]
    for b in range(len(parts) - 1, -1, -1):
        offsets = parts[b][:: ck_rows.width]
        if off in offsets:
            return b * _ROWS + offsets.index(off) + 1
    return 0


def _message(path: str, rec: dict[str, Any], mail: dict[tuple[str, str], list[tuple[Any, bytes]]]) -> str | None:
    """Why an `agent_msg` crossing cannot be true (None when it can); a send is kept in mail until received.

    A send is `{"send": to, "message": m}` with a null response; a receive is
    `{"receive": sender or null}` with `{"from", "message", "sent"}` (or an
    error: it timed out), taking exactly one message sent before it to its
    agent, not taken before: from `from` (the sender it asked for, if it
    named one), with the same message by type and value and `sent` the
    clock of that send (null for a send before the run spawned).
    """
    if "blobs" in rec:  # a message too large for a line (rare): read back
        rec = _blobs.inline(path, rec)
    agent, request = rec.get("agent", MAIN), rec["request"]
    if type(request) is not dict:
        return "a message crossing whose request is neither a send nor a receive"
    if "send" in request:
        if request.keys() != {"send", "message"} or type(request["send"]) is not str or not request["send"]:
            return 'a send whose request is not {"send": agent, "message": value}'
        if "response" not in rec or rec["response"] is not None:
            return "a send with a response or an error: a send's response is null"
        body = orjson.dumps(request["message"], option=_SORTED)
        mail.setdefault((agent, request["send"]), []).append((rec.get("vc"), body))
        return None
    asked = request.get("receive", 0)
    if request.keys() != {"receive"} or (asked is not None and type(asked) is not str):
        return 'a receive whose request is not {"receive": sender or null}'
    if "error" in rec:  # nothing was received (a timeout)
        return None
    got = rec["response"]
    if type(got) is not dict or got.keys() != {"from", "message", "sent"} or type(got["from"]) is not str:
        return 'a receive whose response is not {"from": sender, "message": value, "sent": clock}'
    sender = got["from"]
    if asked is not None and sender != asked:
        return f"a receive from {asked!r} answered by a message from {sender!r}"
    body, sent, queue = orjson.dumps(got["message"], option=_SORTED), got["sent"], mail.get((sender, agent), [])
    for i, (clock, sent_body) in enumerate(queue):
        if clock == sent and sent_body == body:
            del queue[i]  # received: at most once
            return None
    return (
        f"a message received by {agent!r} from {sender!r} that no send of {sender!r} to {agent!r} before it "
        "carries (the same message, by type and value, with that clock), or whose send was received already"
    )


def _call_of(rec: dict[str, Any]) -> bytes:
    """A call's identity (tool and args, canonical), to recognise the same call made again."""
    return orjson.dumps([rec.get("tool"), rec.get("args")], option=_SORTED)


def _intent(
    path: str,
    n: int,
    rec: dict[str, Any],
    tools: dict[str, Any],
    header: dict[str, Any],
    paused: dict[str, Any] | None,
    again: tuple[bytes, str] | None = None,
) -> None:
    """Refuse a transition into ACT that a resume could not act on as the writer meant: TraceCorruption.

    `again`: the same call timed out on the attempt before, so its key is the one to repeat.
    """
    seq, tool = rec["seq"], rec["tool"]
    if type(rec["name"]) is not str or type(tool) is not str or type(rec["args"]) is not dict:
        raise _fail(path, n, "malformed", "an intent needs a str name, a str tool, a dict of args", seq)
    if "workflow" in header:  # a workflow's tools are not known when it starts: each intent names its contract
        if rec["name"] != tool:  # a workflow's step is its call: named by its tool, which a resume matches
            why = f"a workflow's intent named {rec['name']!r} for tool {tool!r}: a workflow's step is named by its tool"
            raise _fail(path, n, "bad-intent", why, seq)
        _contract(path, n, rec, tools)
    elif "contract" in rec:
        why = "an intent with a contract in a trace whose header names no workflow (its header lists the contracts)"
        raise _fail(path, n, "malformed", why, seq)
    contract = tools.get(tool)
    if contract is None:
        listed = ", ".join(sorted(tools)) or "none"
        why = f"an intent naming tool {tool!r}, which the header does not list (it lists: {listed})"
        raise _fail(path, n, "bad-intent", why, seq)
    if contract["effect"] == "idempotent":
        key = again[1] if again is not None else S.key_of(header["run_id"], rec["step"], rec.get("attempt", 1))
        if rec.get("key") != key:
            found = f"key {rec['key']!r}" if "key" in rec else "no key"
            why = f"an intent for idempotent tool {tool!r} with {found}; its idempotency key is {key!r}"
            raise _fail(path, n, "bad-intent", why, seq)
    elif "key" in rec:
        why = f"an intent with a key for {tool!r}, an {contract['effect']} tool that is never given one"
        raise _fail(path, n, "bad-intent", why, seq)
    if TASK in rec and not well_formed(rec[TASK]):
        raise _fail(path, n, "malformed", bad_task(rec[TASK]), seq)
    if paused is not None and _repeat(rec) != _repeat(paused):
        why = f"PAUSED -> ACT does not repeat the uncertain intent (seq {paused['seq']}) exactly"
        why += " (name, tool, args, key, a workflow's contract and the task, compared by type and value)"
        raise _fail(path, n, "bad-intent", why, seq)


def _repeat(intent: dict[str, Any]) -> bytes:
    """What PAUSED -> ACT must repeat of an intent, as canonical bytes (compared by type and value)."""
    return orjson.dumps([intent.get(k) for k in INTENT], option=_SORTED)


def _contract(path: str, n: int, rec: dict[str, Any], tools: dict[str, Any]) -> None:
    """A workflow's intent names its tool's contract; within a run a tool keeps the one it first had (in tools)."""
    seq, tool, contract = rec["seq"], rec["tool"], rec.get("contract")
    if not contract_ok(contract):
        why = (
            f'a workflow\'s intent for {tool!r} without its contract {{"effect": at-least-once|idempotent|unsafe, '
            f'"version": str or null}} (it has {contract!r:.200})'
        )
        raise _fail(path, n, "malformed", why, seq)
    known = tools.setdefault(tool, contract)
    if known is not contract and orjson.dumps(known, option=_SORTED) != orjson.dumps(contract, option=_SORTED):
        why = f"tool {tool!r} with contract {contract!r}, after {known!r} earlier in the run: a tool keeps one contract"
        raise _fail(path, n, "bad-intent", why, seq)


def _check_blobs(path: str, n: int, seq: int, rec: dict[str, Any], seen: dict[str, tuple[int, int]]) -> None:
    """Every blob the record names is well named and present with its size (its bytes are checked when read)."""
    try:
        named = _blobs.refs(rec)
    except (ValueError, KeyError) as e:
        raise _fail(path, n, "malformed", f"a {rec['kind']} record naming blobs badly: {e}", seq) from None
    if any(len(ref) != 2 for ref in (rec.get("blobs") or {}).values()):  # one reading: sha256 and size, nothing else
        raise _fail(
            path, n, "malformed", f"a {rec['kind']} record whose blob reference has more than its sha256 and size", seq
        )
    folder = _blobs.folder_of(path)
    for _, name, size in named:
        if name in seen:
            continue
        why = _blobs.missing(folder, name, size)
        if why:
            raise _fail(path, n, "blob", why, seq)
        seen[name] = (size, n)


_MCP_BLOCKS = {  # a CallToolResult's content block types, and the str fields each needs (`resource`: an object)
    "text": ("text",), "image": ("data", "mimeType"), "audio": ("data", "mimeType"),
    "resource_link": ("name", "uri"), "resource": (),
}  # fmt: skip


_MCP_OPTIONAL = {"annotations": dict, "_meta": dict, "title": str, "description": str, "size": int, "icons": list}


_BOUNDARIES = frozenset({"agent_msg", "mcp.call_tool", "mcp.list_tools"})  # crossings with rules of their own


def _boundary(path: str, n: int, seq: int, rec: dict[str, Any], mail: dict[Any, Any], mcp_servers: set[str]) -> None:
    """A message between agents is sent once and received once; harness.mcp's crossings hold what MCP sent."""
    if rec["boundary"] == "agent_msg":
        wrong = _message(path, rec, mail)
        if wrong is not None:
            raise _fail(path, n, "bad-message", wrong, seq)
    elif rec["boundary"] == "mcp.call_tool" and "response" in rec:
        wrong = _mcp_result_problem(rec["response"])
        if wrong is not None:
            why = f"an mcp.call_tool crossing whose response is not a CallToolResult's wire JSON: {wrong}"
            raise _fail(path, n, "bad-result", why, seq)
    elif rec["boundary"] == "mcp.list_tools" and type(rec.get("request")) is dict:
        server = rec["request"].get("server")  # harness.mcp lists a server's tools before its steps
        if type(server) is str:
            mcp_servers.add(server)


def _mcp_result(path: str, n: int, seq: int, intent: dict[str, Any] | None, result: Any, servers: set[str]) -> None:
    """TraceCorruption (bad-result) when a workflow's call of an MCP tool delivered what no CallToolResult is."""
    tool = _mcp_tool(intent, servers)
    wrong = _mcp_result_problem(result) if tool is not None else None
    if wrong is not None:
        raise _fail(
            path, n, "bad-result", f"MCP tool {tool!r}'s result is not a CallToolResult's wire JSON: {wrong}", seq
        )


def _mcp_tool(intent: dict[str, Any] | None, servers: set[str]) -> str | None:
    """The tool of a workflow's intent if it calls harness.mcp (`<server>.<tool>`, a server listed earlier), else None.

    By the servers listed, not by the default name `mcp.`: a session may have
    another name, and a tool of the workflow's own may be named `mcp.<x>`.
    """
    tool = None if intent is None else intent["tool"]
    return tool if tool is not None and any(tool.startswith(server + ".") for server in servers) else None


def _mcp_result_problem(value: Any) -> str | None:
    """What keeps value from being a CallToolResult's wire JSON (as harness.mcp records it), or None.

    Only what `CallToolResult.model_validate` would refuse, read strictly; a
    result stored in a blob (a BlobRef, not read here) is not looked into.
    """
    if isinstance(value, BlobRef):
        return None
    if type(value) is not dict:
        return f"a {type(value).__name__}, not an object"
    content = value.get("content")
    if type(content) is not list:
        return 'no "content" list'
    for i, block in enumerate(content):
        need = _MCP_BLOCKS.get(str(block.get("type"))) if type(block) is dict else None
        if need is None:
            return f"content[{i}] is not a content block with a type of {', '.join(_MCP_BLOCKS)}"
        resource = block.get("resource")
        if any(type(block.get(k)) is not str for k in need) or (
            block["type"] == "resource"
            and not (
                type(resource) is dict
                and type(resource.get("uri")) is str
                and (type(resource.get("text")) is str or type(resource.get("blob")) is str)
            )
        ):
            return f"content[{i}], a {block['type']} block, without its {', '.join(need) or 'resource (uri, text)'}"
        wrong = next((k for k, t in _MCP_OPTIONAL.items() if k in block and type(block[k]) is not t), None)
        if wrong is not None:
            return f"content[{i}] has a {wrong!r} that is not a {_MCP_OPTIONAL[wrong].__name__}"
    if "isError" in value and type(value["isError"]) is not bool:
        return '"isError" is not a bool'
    for key in ("structuredContent", "_meta"):
        if key in value and type(value[key]) is not dict:
            return f'"{key}" is not an object'
    return None
