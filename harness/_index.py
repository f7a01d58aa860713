"""The sidecar `TRACE.idx`: a point of a trace that a resume may start from without reading what precedes it.

Layout: one entry of 24 bytes per checkpoint record of the run, in order:
the byte offsets (little-endian int64) where its intent line (the last
transition into ACT), its result line (the ACT -> VERIFY transition the
checkpoint names) and the checkpoint line itself start. Then the trailer:
the JSON of the mark, then its length (u32), its zlib crc32 (u32) and
MAGIC. A file is usable only when its size is exactly 24 x the mark's
checkpoint count + the trailer's length.

A mark describes a quiet point of a run that never spawned an agent: right
after a `checkpoint` record whose result came from ACT (not a reconcile, not
an answer) and whose step saw no crash. There the state of the scanner in
_replay._scan is a few numbers (seq, crc, counts, the step), the blobs named
so far, and four lines: the header, the step's intent, its result and the
checkpoint. The executor writes marks (one pwrite of the new entries and the
trailer) every INTERVAL bytes of trace and when a run stops; it finds its
lines by reading back what it wrote since the last mark (`Writer`). A mark is
never fsynced: it is a hint that a resume checks (`start`), never a source of
truth. A missing, torn, stale or foreign index is ignored, the trace is read
from its first line, and the resume leaves a fresh index behind.

What a resume from a mark trusts, and what catches a change: see
docs/FORMAT.md, "The index (`<trace>.idx`)".
"""

from __future__ import annotations

import contextlib
import copy
import operator
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from . import _blobs
from . import _state as S
from ._journal import MAX_LINE, SUFFIX, line_ok, open_regular, read_error
from ._replay import Checkpoint, Records, Replay, _Checkpoints, _header_problem, _Lines, _payload, _scan
from ._replay import replay as _replay
from .store._location import is_url

MAGIC = b"HIDX\x00\x02\r\n"  # the format's name and version (2: schema-2 traces); \r\n catches a text conversion
INTERVAL = 1 << 16  # bytes of trace between two marks written while a run goes on
ENTRY = 24  # three int64 offsets per checkpoint: intent, result, checkpoint
BLOBS_MAX = 256  # a run naming more blobs gets no new mark (the last one written stays good)
_CLOSE = struct.Struct("<II8s")
_BATCH = 4096  # entries read at a time when progress is iterated
Pos = tuple[int, int, int]  # a line's offset, its length with its newline, and the crc of the line before it


def path_of(trace: str) -> str:
    return trace + ".idx"


def remove(trace: str) -> None:
    """Delete trace's index (a new trace at that path must not find an old one's)."""
    with contextlib.suppress(OSError):
        os.unlink(path_of(trace))


@dataclass(frozen=True, slots=True)
class Mark:
    """The scanner's state right after a quiet checkpoint, and where the lines it names are."""

    run_id: str
    end: int  # bytes of trace covered: the checkpoint's line ends here
    seq: int  # the checkpoint's seq (the number of lines up to end)
    crc: int  # its crc: the chain's value at end
    step: int  # the step the checkpoint closed
    header: Pos
    intent: Pos  # the step's intent (its name)
    result: Pos  # the ACT -> VERIFY transition holding the verified result
    last: Pos  # the checkpoint
    transitions: int  # moves up to end (a checkpoint counts two)
    resumes: int
    checkpoints: int  # entries before the trailer
    blobs: tuple[tuple[str, int, int], ...]  # every blob named up to end: (sha256, size, first line naming it)

    def encode(self) -> bytes:
        body = orjson.dumps({k: getattr(self, k) for k in self.__slots__})
        return body + _CLOSE.pack(len(body), zlib.crc32(body), MAGIC)

    @classmethod
    def decode(cls, body: bytes) -> Mark | None:
        try:
            d = orjson.loads(body)
            d["blobs"] = tuple(tuple(b) for b in d["blobs"])
            mark = cls(**{k: tuple(v) if type(v) is list else v for k, v in d.items()})  # type: ignore[arg-type]
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return None
        ints = [mark.end, mark.seq, mark.crc, mark.step, mark.transitions, mark.resumes, mark.checkpoints]
        poss = [mark.header, mark.intent, mark.result, mark.last]
        if (
            type(mark.run_id) is not str
            or any(len(p) != 3 for p in poss)
            or not all(type(v) is int and v >= 0 for v in ints + [x for p in poss for x in p])
            or not all(len(b) == 3 and type(b[0]) is str and type(b[1]) is int for b in mark.blobs)
        ):
            return None
        return mark


def load(trace: str) -> Mark | None:
    """The mark of trace's index, when the file is whole; None when there is none or it cannot be used."""
    try:
        fd = os.open(path_of(trace), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < _CLOSE.size:
            return None
        length, crc, magic = _CLOSE.unpack(os.pread(fd, _CLOSE.size, size - _CLOSE.size))
        if magic != MAGIC or length > size - _CLOSE.size or (size - _CLOSE.size - length) % ENTRY:
            return None
        body = os.pread(fd, length, size - _CLOSE.size - length)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(body) != length or zlib.crc32(body) != crc:
        return None
    mark = Mark.decode(body)
    if mark is None or mark.checkpoints * ENTRY + length + _CLOSE.size != size:
        return None
    return mark


def entries(trace: str, lo: int, hi: int) -> array[int]:
    """The offsets (intent, result, checkpoint) of checkpoints lo..hi-1, read from trace's index."""
    out = array("q")
    with open(path_of(trace), "rb") as f:
        f.seek(lo * ENTRY)
        data = f.read((hi - lo) * ENTRY)
    if len(data) != (hi - lo) * ENTRY:
        raise OSError(f"{path_of(trace)} is shorter than its mark says")
    out.frombytes(data)
    if sys.byteorder != "little":
        out.byteswap()
    return out


# ------------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class Start:
    """A verified mark and the records it names: where _replay._scan() may begin."""

    mark: Mark
    header: dict[str, Any]
    last: dict[str, Any]  # the checkpoint record
    intent: dict[str, Any]
    result: Any  # the verified result (a BlobRef when it is in a blob)
    result_seq: int

    def checkpoints(self, path: str, crossings: _Lines) -> _Checkpoints:
        return Prefixed(path, crossings, self.mark.checkpoints)

    @property
    def quiet(self) -> tuple[Any, ...]:
        m = self.mark
        return (m.end, m.seq, m.crc, m.step, m.last, m.intent, m.result, m.transitions, m.resumes, len(m.blobs),
                m.checkpoints, m.header)  # fmt: skip


def resume_point(trace: str) -> Replay:
    """The run as a resume needs it, reading only what follows the trace's index mark when it has a usable one.

    A mark is used when the checkpoint line it names is there, ends exactly
    at the mark's end, carries the mark's seq, step and crc (chained on the
    crc it holds for the line before), and when the header, intent and result
    lines it names pass the same line check and are the ones that checkpoint
    closes. The lines before the mark are not read again (replay() and
    `harness verify` read them all); every line after it gets all of
    replay()'s checks. `checkpoints` of the Replay covers the whole run (the
    older ones read on access, see Prefixed); `crossings`, `artifacts` and
    `records` before the mark are not known: only what a resume uses is.
    Without a usable mark this is replay().
    """
    if is_url(trace):
        return _replay(trace)
    mark = load(trace)
    if mark is not None:
        with os.fdopen(open_regular(trace), "rb") as f:
            try:
                start = _verify(f, mark)
                if start is not None:
                    return _scan(trace, f, None, start)
            except OSError as e:
                raise read_error(trace, e) from None
    return _replay(trace)


def _read(f: Any, pos: Pos) -> dict[str, Any] | None:
    """The record at pos when its line is whole and its crc right (chained on pos's crc); else None."""
    off, length, prev = pos
    f.seek(off)
    line = f.read(length)
    if len(line) != length or line[-1:] != b"\n" or not line_ok(line[:-1], prev):
        return None
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return rec if type(rec) is dict else None


def _closes(ck: dict[str, Any], intent: dict[str, Any], result: dict[str, Any], step: int) -> bool:
    """Whether ck is the checkpoint of step `step` of the run, naming result, whose intent is `intent`."""
    return (
        ck.get("kind") == "checkpoint"
        and ck.get("step") == step
        and "agent" not in ck
        and "vc" not in ck
        and result.get("kind") == "transition"
        and result.get("from") == S.ACT
        and result.get("to") == S.VERIFY
        and result.get("step") == step
        and ck.get("verified") == result.get("seq")
        and intent.get("kind") == "transition"
        and intent.get("to") == S.ACT
        and intent.get("step") == step
        and intent.get("attempt") == result.get("attempt")
        and type(intent.get("seq")) is int
        and intent["seq"] < result["seq"] < ck["seq"]
    )


def _verify(f: Any, mark: Mark) -> Start | None:
    """The records a mark names, when its lines are what it says; None when the mark cannot be trusted."""
    off, length, _ = mark.last
    if off + length != mark.end or mark.header[0] != 0 or mark.header[2] != 0:
        return None
    f.seek(off)
    line = f.read(length)
    if len(line) != length or line[-SUFFIX - 1 : -1] != b',"crc":"%08x"}' % mark.crc:
        return None
    last, header, intent, result = _read(f, mark.last), _read(f, mark.header), _read(f, mark.intent), None
    if last is None or header is None or intent is None:
        return None
    result = _read(f, mark.result)
    if result is None or last.get("seq") != mark.seq or not _closes(last, intent, result, mark.step):
        return None
    if header.get("kind") != "header" or header.get("run_id") != mark.run_id or _header_problem("", header):
        return None
    try:
        payload = _payload(result, "result")
    except (KeyError, TypeError):
        return None
    return Start(mark, header, last, intent, payload, result["seq"])


def _locate(f: Any, off: int) -> Pos:
    """(offset, length, crc before) of the line starting at off, read from the line before's suffix.

    OSError when the bytes there cannot be a line's start (the caller then reads the whole trace).
    """
    if off < SUFFIX + 1:
        raise OSError("not a line after another one")
    f.seek(off - 11)
    head = f.read(11)  # the end of the line before: <8 hex digits>"}\n
    line = f.readline(MAX_LINE + 1)
    if len(head) != 11 or head[8:] != b'"}\n' or not line.endswith(b"\n"):
        raise OSError("not a line after another one")
    try:
        prev = int(head[:8], 16)
    except ValueError:
        raise OSError("not a crc before the line") from None
    return (off, len(line), prev)


class Prefixed(_Checkpoints):
    """The checkpoints of a run resumed from a mark: the first `base` are found through the index.

    Checkpoint i < base is read from the three lines its index entry points
    at, each line's crc checked again (chained on the crc at the end of the
    line before it), and accepted only if they are checkpoint i, the result it
    names and that result's intent; its result read from its blob (sha256
    checked) when it is in one. When an entry does not lead to such lines (the
    index was torn, or the trace changed), the whole trace is replayed, which
    raises TraceCorruption if the trace itself changed, and the older
    checkpoints are then read from that replay.
    """

    __slots__ = ("_base", "_full")

    def __init__(self, path: str, crossings: _Lines, base: int):
        super().__init__(path, crossings)
        self._base = base
        self._full: _Checkpoints | None = None

    def __len__(self) -> int:
        return self._base + len(self._pos) // 4

    def _read(self, f: Any, i: int) -> list[dict[str, Any]]:
        if i >= self._base:
            return super()._read(f, i - self._base)
        if self._full is None:
            try:
                found = self._decode(f, entries(self._path, i, i + 1), i)
            except OSError:
                found = None
            if found is not None:
                return found
            self._rebase()
        assert self._full is not None
        return self._full._read(f, i)

    def _decode(self, f: Any, at: Sequence[int], i: int) -> list[dict[str, Any]] | None:
        """Checkpoint i's records from its entry's offsets, or None when they are not there (OSError too)."""
        ck_pos, intent_pos, result_pos = _locate(f, at[2]), _locate(f, at[0]), _locate(f, at[1])
        ck, intent, result = _read(f, ck_pos), _read(f, intent_pos), _read(f, result_pos)
        if ck is None or intent is None or result is None or not _closes(ck, intent, result, i):
            return None
        return [ck, intent, _blobs.inline(self._path, result)]

    def _rebase(self) -> None:
        """The index does not lead to the lines it should: every older checkpoint from a replay of the whole trace.

        replay() reads and checks every line; a trace that was itself changed raises TraceCorruption there.
        """
        full = _replay(self._path).checkpoints._lines
        assert isinstance(full, _Checkpoints)
        self._full = full

    def __iter__(self) -> Iterator[Any]:
        done = 0
        try:
            with os.fdopen(open_regular(self._path), "rb") as f:
                while done < self._base and self._full is None:  # a few thousand entries at a time
                    hi = min(done + _BATCH, self._base)
                    try:
                        at = entries(self._path, done, hi)
                        got = [self._decode(f, at[3 * k : 3 * k + 3], done + k) for k in range(hi - done)]
                    except OSError:
                        got = [None]
                    if any(g is None for g in got):
                        self._rebase()
                        break
                    for g in got:
                        assert g is not None
                        yield self._build(*g)
                    done = hi
                for i in range(done, len(self)):
                    yield self._build(*self._read(f, i))
        except OSError as e:
            raise read_error(self._path, e) from None

    def positions(self) -> tuple[int, array[int]]:
        """(entries on file, the offsets of the checkpoints after them) for the index writer."""
        return self._base, offsets(self)


def offsets(ck: _Checkpoints) -> array[int]:
    """(intent, result, checkpoint) offsets of each checkpoint ck holds positions for (after its base)."""
    out = array("q")
    cr = ck._crossings._pos
    pos = ck._pos
    for j in range(0, len(pos), 4):
        c = 6 * pos[j + 3]
        out.extend((cr[c], cr[c + 3], pos[j]))
    return out


# ------------------------------------------------------------------------------------------------- writing


class Writer:
    """Appends checkpoint entries and marks to a trace's index as its run goes; every failure is silent (a hint).

    It reads back the lines written since it last looked (they are in the
    page cache), recognising each kind by its first bytes: the positions of
    intents, results and checkpoints, transitions and resumes counted, blobs
    collected. A checkpoint whose result came straight from ACT, with only
    crossings between them, is a quiet point; at most every INTERVAL bytes,
    and when the run stops, the last quiet point becomes the mark. A spawn
    (the run has agents) or too many blobs stop it: the last mark stays.
    A trace shorter than INTERVAL gets no index: reading it whole is as fast.
    """

    __slots__ = (
        "blobs", "count", "crc", "dead", "fd", "header", "idx", "intent", "path", "pending", "plain", "pos", "quiet",
        "result", "resumes", "seq", "steps", "stopped", "transitions", "written_at",
    )  # fmt: skip

    def __init__(self, trace: str, fd: int):
        self.path, self.fd = trace, fd  # the trace and a descriptor to read it (the journal's)
        self.idx = -2  # the index's descriptor: -2 not opened yet, -1 given up
        self.count = 0  # entries on file
        self.pending = array("q")  # entries not yet on file
        self.pos = self.seq = self.crc = self.transitions = self.resumes = 0  # what was read back so far
        self.intent = self.result = 0  # offsets of the last intent and result read
        self.plain = False  # since the last result (from ACT), only crossings
        self.header: Pos = (0, 0, 0)
        self.blobs: dict[str, tuple[int, int]] = {}
        self.quiet: Mark | None = None  # the last quiet point read
        self.written_at = 0  # the end of the last mark written
        self.steps = 0
        self.dead = False  # something went wrong: write nothing more
        self.stopped = False  # the run spawned agents: read no further, the last quiet point before stays good

    @classmethod
    def after(cls, trace: str, fd: int, rep: Replay) -> Writer | None:
        """The writer of a resumed run, from where replay or resume_point left the index and the run."""
        if is_url(trace) or rep.clocks is not None or rep.group:
            return None
        w = cls(trace, fd)
        lines = rep.checkpoints._lines
        assert isinstance(lines, _Checkpoints)
        base, later = lines.positions() if isinstance(lines, Prefixed) else (0, offsets(lines))
        q = rep.quiet
        if q is None:  # no quiet point yet: read back from the start when the time comes
            return w
        end, seq, crc, step, last, intent, result, transitions, resumes, nblobs, count, header = q
        w.count, w.pending = base, later[: 3 * (count - base)]
        w.pos, w.seq, w.crc, w.transitions, w.resumes, w.header = end, seq, crc, transitions, resumes, header
        w.blobs = dict(list(rep.blobs.items())[:nblobs])
        w.quiet = Mark(rep.run_id, end, seq, crc, step, header, intent, result, last, transitions, resumes, count,
                       tuple((k, s, n) for k, (s, n) in w.blobs.items()))  # fmt: skip
        if isinstance(lines, Prefixed) and rep.since == end:  # the mark on file is this very point
            w.written_at = end
        return w

    def step(self) -> None:
        """A checkpoint was written: every 16 steps, write a mark if INTERVAL bytes went by since the last one."""
        self.steps += 1
        if self.steps & 15 == 0 and not self.dead and not self.stopped:
            try:
                if os.fstat(self.fd).st_size - self.written_at >= INTERVAL:
                    self.mark()
            except OSError:
                self.dead = True

    def mark(self) -> None:
        """Read back what was written since last time, and write the last quiet point's mark if it is new."""
        if self.dead:
            return
        try:
            if not self.stopped:
                self._read_back()
        except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            self.dead = True
        q = self.quiet
        if self.dead or q is None or q.end == self.written_at or q.end < INTERVAL or self.idx == -1:
            return
        if self.idx == -2:
            try:
                self.idx = os.open(path_of(self.path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError:
                self.idx = -1
                return
        todo = self.pending[: 3 * (q.checkpoints - self.count)]
        data = todo.tobytes() if sys.byteorder == "little" else _swapped(todo)
        try:
            os.pwrite(self.idx, data + q.encode(), self.count * ENTRY)
            end = q.checkpoints * ENTRY + len(q.encode())
            if os.fstat(self.idx).st_size != end:  # a shorter mark, or a resume that went back: drop what lay beyond
                os.ftruncate(self.idx, end)
        except OSError:
            self.close()
            return
        del self.pending[: len(todo)]
        self.count = q.checkpoints
        self.written_at = q.end

    def _read_back(self) -> None:
        size = os.fstat(self.fd).st_size
        while self.pos < size:
            data = os.pread(self.fd, min(size - self.pos, 1 << 20), self.pos)
            cut = data.rfind(b"\n") + 1
            if not cut:  # a line longer than the window: read up to its end
                data = os.pread(self.fd, min(size - self.pos, MAX_LINE + 1), self.pos)
                cut = data.rfind(b"\n") + 1
                if not cut:
                    return
            self._lines(data[:cut].split(b"\n")[:-1])
            if self.dead or self.stopped:
                return

    def _lines(self, lines: list[bytes]) -> None:
        pos, seq = self.pos, self.seq
        for line in lines:
            off, pos, seq = pos, pos + len(line) + 1, seq + 1
            k = line.find(b'"kind":"', 0, 40) + 8
            kind = line[k : line.find(b'"', k)]
            if kind == b"transition":
                self.transitions += 1
                head = line[k : k + 64]
                if b'"to":"ACT"' in head:
                    self.intent, self.plain = off, False
                elif b'"to":"VERIFY"' in head:
                    self.result, self.plain = off, b'"from":"ACT"' in head
                else:
                    self.plain = False
            elif kind == b"checkpoint":
                self.transitions += len(S.CHECKPOINT_MOVES)
                self.pending.extend((self.intent, self.result, off))
                if self.plain and len(self.blobs) <= BLOBS_MAX and seq > 1:
                    self._quiet(off, pos, seq, line)
                self.plain = False
            elif kind == b"crossing":
                pass
            elif kind == b"header":
                self.header = (0, len(line) + 1, 0)
            elif kind == b"spawn":  # agents: the marks stop here
                self.stopped = True
                return
            elif k == 7:  # a line this reader cannot place
                self.dead = True
                return
            else:
                self.plain = False
                self.resumes += kind == b"resume"
            if b'"blobs":{' in line or kind == b"artifact":
                rec = orjson.loads(line)
                for _, name, size in _blobs.refs(rec):
                    self.blobs.setdefault(name, (size, seq))
        self.pos, self.seq = pos, seq
        self.crc = int(lines[-1][-10:-2], 16) if lines else self.crc

    def _quiet(self, off: int, end: int, seq: int, line: bytes) -> None:
        rec = orjson.loads(line)
        crc = int(line[-10:-2], 16)
        prev = self._crc_before(off)
        count = self.count + len(self.pending) // 3
        self.quiet = Mark(
            self._run_id(), end, seq, crc, rec["step"], self.header, self._pos_of(self.intent),
            self._pos_of(self.result), (off, end - off, prev), self.transitions, self.resumes, count,
            tuple((k, s, n) for k, (s, n) in self.blobs.items()),
        )  # fmt: skip

    def _crc_before(self, off: int) -> int:
        return int(os.pread(self.fd, 11, off - 11)[:8], 16)

    def _pos_of(self, off: int) -> Pos:
        """The line starting at off: its length, and the crc before it."""
        length = 0
        while True:
            chunk = os.pread(self.fd, 4096, off + length)
            nl = chunk.find(b"\n")
            if nl >= 0 or not chunk:
                length += nl + 1
                break
            length += len(chunk)
        return (off, length, self._crc_before(off))

    def _run_id(self) -> str:
        if self.quiet is not None:
            return self.quiet.run_id
        first = os.pread(self.fd, self.header[1], 0)
        return str(orjson.loads(first)["run_id"])

    def close(self) -> None:
        """Write the last mark (the run stops) and let go of the index."""
        if self.idx != -1:
            self.mark()
        if self.idx >= 0:
            with contextlib.suppress(OSError):
                os.close(self.idx)
        self.idx = -1


def _swapped(a: array[int]) -> bytes:
    b = array("q", a)
    b.byteswap()
    return b.tobytes()


# ------------------------------------------------------------------------------------------------- progress


class ResumedProgress(Sequence[Checkpoint]):
    """Progress after a resume: the checkpoints written before it are read from the trace as they are accessed.

    It reads as Progress does (len, [i], slices, iteration, ==, copies that
    are plain lists) and refuses every change, but it is not a list:
    `list(progress)` makes one. Each older checkpoint is decoded (its lines'
    checksums checked again, a blob's sha256 too) on first access and kept, so
    a resume costs the same after ten steps or a million.
    """

    __slots__ = ("_before", "_cache", "_tail")

    def __init__(self, before: Records, tail: list[Checkpoint] | tuple[Checkpoint, ...] | None = None):
        self._before = before
        self._cache: dict[int, Checkpoint] = {}
        self._tail: list[Checkpoint] | tuple[Checkpoint, ...] = [] if tail is None else tail

    @property
    def tail(self) -> list[Checkpoint]:
        """The checkpoints written since the resume: the executor appends to this list."""
        assert isinstance(self._tail, list)
        return self._tail

    def __len__(self) -> int:
        return len(self._before) + len(self._tail)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i, n = operator.index(i), len(self._before)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("progress index out of range")
        if i >= n:
            return self._tail[i - n]
        found = self._cache.get(i)
        if found is None:
            found = self._cache[i] = self._before[i]
        return found

    def __iter__(self) -> Iterator[Checkpoint]:
        yield from self._before
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str | bytes) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<progress: {len(self)} checkpoints, the first {len(self._before)} read from the trace on access>"

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("progress is read only: it is the run's record of verified steps; copy it to change it")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __copy__(self) -> list[Checkpoint]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Checkpoint]:
        return copy.deepcopy(list(self), memo)

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))

    def snapshot(self) -> ResumedProgress:
        """What an Outcome holds: the same older checkpoints, the newer ones as they are now."""
        return ResumedProgress(self._before, tuple(self._tail))


def resumed(checkpoints: Records) -> ResumedProgress:
    return ResumedProgress(checkpoints)
