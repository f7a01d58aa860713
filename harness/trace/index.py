"""The sidecar `TRACE.idx`: a point of a trace that a resume may start from without reading what precedes it.

Layout: one 8-byte entry per checkpoint record of the run, in order (the
byte offset where its line starts, a little-endian int64), then the trailer:
the raw sha256 of each whole 4 MiB block of the trace before the mark's end
(32 bytes each: the seal's content hash, seal.py), the JSON of the mark,
the count of blocks (u32), the JSON's length (u32), the zlib crc32 of the
digests and the JSON (u32) and MAGIC. A file is usable only when its size is
exactly 8 x the mark's checkpoint count + the trailer's length, and when it
holds the digest of every whole block before the mark's end.

A mark describes a quiet point of a run that has not spawned an agent: right
after a `checkpoint` record whose result came straight from ACT (not a
reconcile, not an answer) with nothing but crossings between them. There the
state of the scanner in _replay._scan is a few numbers (seq, crc, the step),
the blobs named so far, and four lines: the header, the step's intent, its
result and the checkpoint. The executor writes marks (one pwrite of the new
entries and the trailer) every INTERVAL bytes of trace and when a run stops,
hashing first each block the trace completed since the last mark, read back
from the file (the page cache: the bytes were just written);
it finds the checkpoints it wrote by reading back the bytes since the last
mark (`Writer`), and a mark's lines by walking back from its checkpoint. A
mark is never fsynced: it is a hint that a resume checks (`resume_point`),
never a source of truth. A missing, torn, stale or foreign index is ignored,
the trace is read from its first line, and the resume leaves a fresh index.
The seal at the end of a run resumed from a mark takes the mark's block
digests as given (`trusted_blocks`) and hashes only the bytes after them;
`replay()` and `harness verify` recompute every block, so a block changed
after its digest was recorded (or a wrong digest) fails the seal there.

What a resume from a mark trusts, and what catches a change: see
docs/FORMAT.md, "The index (`<trace>.idx`)".
"""

from __future__ import annotations

import contextlib
import copy
import operator
import os
import re
import stat
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from .._errors import HarnessError, internal
from ..storage import blobs as _blobs
from ..storage.files import open_beside, open_regular, read_error
from ..storage.location import is_url
from . import rules
from . import state as S
from .line import MAX_LINE, SUFFIX, line_ok
from .reader import Checkpoint, Replay, _Checkpoints, _Lines, _scan
from .reader import replay as _replay
from .seal import BLOCK, content_hash_of

MAGIC = b"HIDX\x00\x02\r\n"  # the format's name and version (2: schema-2 traces); \r\n catches a text conversion
INTERVAL = 1 << 16  # bytes of trace between two marks written while a run goes on
ENTRY = 8  # the offset of a checkpoint's line
BLOBS_MAX = 256  # a run naming more blobs gets no new mark (the last one written stays good)
WALK = 64  # lines a reader walks back from a checkpoint to find its result and intent
DIGEST = 32  # bytes of a block's raw sha256
_CLOSE = struct.Struct("<III8s")  # blocks, the JSON's length, crc32 of digests + JSON, MAGIC
_BATCH = 4096  # entries read at a time when progress is iterated
_CHECKPOINT = b',"kind":"checkpoint","step":'  # a line of the run's own checkpoint, after its seq
_SEQ = re.compile(rb'\{"seq":([0-9]+),"kind":"')
Pos = tuple[int, int, int]  # a line's offset, its length with its newline, and the crc of the line before it
Read = Callable[[int, int], bytes]  # read(offset, size)


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
    checkpoints: int  # entries before the trailer: one per step up to this one (step + 1)
    blobs: tuple[str, ...]  # the sha256 of every blob named up to end
    named: tuple[int, ...] = ()  # where the first line naming each of blobs starts (a resume checks that it does)
    blocks: bytes = b""  # the raw sha256 of each whole BLOCK of trace before end, in order (not in the JSON)

    def encode(self) -> bytes:
        body = orjson.dumps({k: getattr(self, k) for k in self.__slots__ if k != "blocks"})
        crc = zlib.crc32(body, zlib.crc32(self.blocks))
        return self.blocks + body + _CLOSE.pack(len(self.blocks) // DIGEST, len(body), crc, MAGIC)

    @classmethod
    def decode(cls, body: bytes, blocks: bytes = b"") -> Mark | None:
        try:
            d = orjson.loads(body)
            mark = cls(**{k: tuple(v) if type(v) is list else v for k, v in d.items()}, blocks=blocks)  # type: ignore[arg-type]
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return None
        ints = [mark.end, mark.seq, mark.crc, mark.step, mark.checkpoints]
        poss = [mark.header, mark.intent, mark.result, mark.last]
        if (
            type(mark.run_id) is not str
            or any(len(p) != 3 for p in poss)
            or not all(type(v) is int and v >= 0 for v in ints + [x for p in poss for x in p])
            or not all(type(b) is str for b in mark.blobs)
            or len(mark.named) != len(mark.blobs)
            or not all(type(o) is int and 0 <= o < mark.end for o in mark.named)
            or mark.checkpoints != mark.step + 1  # a run that never spawned checkpoints each step once
            or len(blocks) != DIGEST * (mark.end // BLOCK)
        ):
            return None
        return mark

    def block_digests(self) -> list[bytes]:
        return [self.blocks[i : i + DIGEST] for i in range(0, len(self.blocks), DIGEST)]


def load(trace: str) -> Mark | None:
    """The mark of trace's index, when the file is whole; None when there is none or it cannot be used."""
    try:  # as every file beside a trace: a FIFO or a link out of the folder is no index (never waited on)
        fd = open_beside(path_of(trace), os.path.dirname(os.path.abspath(trace)))
    except HarnessError:
        return None
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if size < _CLOSE.size:
            return None
        count, length, crc, magic = _CLOSE.unpack(os.pread(fd, _CLOSE.size, size - _CLOSE.size))
        region = count * DIGEST + length  # the digests and the JSON
        if magic != MAGIC or region > size - _CLOSE.size or (size - _CLOSE.size - region) % ENTRY:
            return None
        data = os.pread(fd, region, size - _CLOSE.size - region)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != region or zlib.crc32(data) != crc:
        return None
    mark = Mark.decode(data[count * DIGEST :], data[: count * DIGEST])
    if mark is None or mark.checkpoints * ENTRY + region + _CLOSE.size != size:
        return None
    return mark


def trusted_blocks(trace: str, rep: Replay) -> list[bytes]:
    """The block digests of the mark a resume started from (rep from resume_point), which its seal takes as given.

    [] when rep was read from the first line (no usable mark): the seal then
    hashes every block. The index is read again; only the trace's writer
    (who holds its lock, as the caller does) writes it, so it is the mark
    resume_point checked.
    """
    if rep.tail.since == 0 or is_url(trace):
        return []
    mark = load(trace)
    if mark is None or mark.end != rep.tail.since or mark.run_id != rep.run_id:
        return []
    return mark.block_digests()


def entries(trace: str, lo: int, hi: int) -> array[int]:
    """The offsets of checkpoints lo..hi-1, read from trace's index."""
    out = array("q")
    try:
        fd = open_beside(path_of(trace), os.path.dirname(os.path.abspath(trace)))
    except HarnessError as e:
        raise OSError(str(e)) from None
    if fd is None:
        raise OSError(f"{path_of(trace)} is gone")
    try:
        data = os.pread(fd, (hi - lo) * ENTRY, lo * ENTRY)
    finally:
        os.close(fd)
    if len(data) != (hi - lo) * ENTRY:
        raise OSError(f"{path_of(trace)} is shorter than its mark says")
    out.frombytes(data)
    if sys.byteorder != "little":
        out.byteswap()
    return out


# ------------------------------------------------------------------------------------------------- lines


def _line_at(read: Read, off: int) -> tuple[Pos, bytes]:
    """The line starting at off (with its newline) and its position: its length, and the crc before it.

    OSError when the bytes there cannot be a whole line after another one.
    """
    if off < SUFFIX + 1:
        raise OSError("not a line after another one")
    head = read(off - 11, 11)  # the end of the line before: <8 hex digits>"}\n
    if len(head) != 11 or head[8:] != b'"}\n':
        raise OSError("not a line after another one")
    size, line = 1 << 12, b""
    while True:
        line = read(off, size)
        nl = line.find(b"\n")
        if nl >= 0:
            line = line[: nl + 1]
            break
        if len(line) < size or size > MAX_LINE:
            raise OSError("not a whole line")
        size *= 4
    try:
        prev = int(head[:8], 16)
    except ValueError:
        raise OSError("not a crc before the line") from None
    return (off, len(line), prev), line


def _starts_before(read: Read, off: int) -> Iterator[int]:
    """The offsets where the lines before off start, the nearest first, at most WALK of them."""
    size, seen = 1 << 12, 0
    while off > 0 and seen < WALK:
        lo = max(0, off - size)
        data = read(lo, off - lo)
        nl = data.rfind(b"\n", 0, len(data) - 1)
        if nl < 0 and lo > 0:
            if size > MAX_LINE:
                return
            size *= 4
            continue
        off = lo + nl + 1
        seen += 1
        yield off


def _record(read: Read, off: int) -> tuple[Pos, dict[str, Any]] | None:
    """The record whose line starts at off, its crc checked; None when it does not check."""
    try:
        pos, line = _line_at(read, off)
    except OSError:
        return None
    if not line_ok(line[:-1], pos[2]):
        return None
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return (pos, rec) if type(rec) is dict else None


def _closed(read: Read, ck_off: int, step: int) -> tuple[Pos, dict[str, Any], Pos, dict[str, Any], Pos, dict[str, Any]] | None:  # fmt: skip  # noqa: E501
    """Checkpoint `step` at ck_off, the result it vouches for and that result's intent, each line checked.

    The result is the nearest line before the checkpoint that is not a main
    crossing (the verifier's); the intent is the nearest transition into ACT
    before the result. None when they are not there.
    """
    found = _record(read, ck_off)
    if found is None:
        return None
    ck_pos, ck = found
    result: tuple[Pos, dict[str, Any]] | None = None
    intent: tuple[Pos, dict[str, Any]] | None = None
    for off in _starts_before(read, ck_off):
        head = read(off, 96)
        if result is None:
            m = _SEQ.match(head)
            if m is None:
                return None
            if not head.startswith(b'crossing",', m.end()):  # past the verifier's crossings: the result
                result = _record(read, off)
                if result is None:
                    return None
        elif b'"kind":"transition","from":"' in head and b'","to":"ACT"' in head:
            intent = _record(read, off)
            break
    if result is None or intent is None or not _closes(ck, intent[1], result[1], step):
        return None
    return ck_pos, ck, intent[0], intent[1], result[0], result[1]


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
        and "agent" not in result
        and intent.get("kind") == "transition"
        and intent.get("to") == S.ACT
        and intent.get("step") == step
        and intent.get("attempt", 1) == result.get("attempt", 1)
        and "agent" not in intent
        and type(intent.get("seq")) is int
        and intent["seq"] < result["seq"] < ck["seq"]
    )


def _file_reader(f: Any) -> Read:
    def read(off: int, n: int) -> bytes:
        f.seek(off)
        return bytes(f.read(n))

    return read


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
        return Prefixed(path, crossings, self.mark.checkpoints, self.header.get("run_id"))

    @property
    def quiet(self) -> tuple[Any, ...]:
        m = self.mark
        return (m.end, m.seq, m.crc, m.step, m.last, m.intent, m.result, len(m.blobs), m.checkpoints, m.header)


def resume_point(trace: str) -> Replay:
    """The run as a resume needs it, reading only what follows the trace's index mark when it has a usable one.

    A mark is used when the checkpoint line it names is there, ends exactly
    at the mark's end, carries the mark's seq, step and crc (chained on the
    crc it holds for the line before), and when the header, intent and result
    lines it names pass the same line check and are the ones that checkpoint
    closes. The lines before the mark are not read again (replay() and
    `harness verify` read them all); every line after it gets all of
    replay()'s checks. `checkpoints` of the Replay covers the whole run (the
    older ones read on access, see Prefixed); `crossings`, `artifacts`,
    `transitions` and `resumes` count from the mark, and `blobs` holds the
    mark's with size and line 0: only what a resume uses is known.
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


def _verify(f: Any, mark: Mark) -> Start | None:
    """The records a mark names, when its lines are what it says; None when the mark cannot be trusted."""
    off, length, _ = mark.last
    if off + length != mark.end or mark.header[0] != 0 or mark.header[2] != 0:
        return None
    f.seek(off)
    line = f.read(length)
    if len(line) != length or line[-SUFFIX - 1 : -1] != b',"crc":"%08x"}' % mark.crc:
        return None
    header = _read(f, mark.header)
    found = _closed(_file_reader(f), off, mark.step)  # the result the checkpoint vouches for, by position
    if header is None or found is None:
        return None
    last_pos, last, intent_pos, intent, result_pos, result = found
    if last.get("seq") != mark.seq or (last_pos, intent_pos, result_pos) != (mark.last, mark.intent, mark.result):
        return None
    if header.get("kind") != "header" or header.get("run_id") != mark.run_id or rules.header_problem("", header):
        return None
    if not _names_blobs(_file_reader(f), mark):
        return None
    try:
        payload = rules.payload(result, "result")
    except (KeyError, TypeError):
        return None
    return Start(mark, header, last, intent, payload, result["seq"])


def _names_blobs(read: Read, mark: Mark) -> bool:
    """Whether each blob the mark lists is named by the line it says, a whole line before the mark's end.

    The seal of the resumed run lists them: a blob no line names would make
    it a seal replay() refuses. (A blob the mark leaves out cannot be seen
    without reading every line: its seal fails replay() too, as a wrong block
    digest does; see docs/FORMAT.md.)
    """
    for name, off in zip(mark.blobs, mark.named, strict=True):
        found = _record(read, off)
        if found is None or found[0][0] + found[0][1] > mark.end:
            return False
        try:
            if name not in {sha for _, sha, _ in _blobs.refs(found[1])}:
                return False
        except (ValueError, KeyError, TypeError):
            return False
    return True


class Prefixed(_Checkpoints):
    """The checkpoints of a run resumed from a mark: the first `base` are found through the index.

    Checkpoint i < base is read from the line its index entry points at, the
    result it names (among the lines just before it, with only crossings
    between) and that result's intent: each line's crc checked again (chained
    on the crc at the end of the line before it), and accepted only if they
    are checkpoint i, its result and its intent; its result read from its
    blob (sha256 checked) when it is in one. When an entry does not lead to
    such lines (the index was torn, or the trace changed), the whole trace is
    replayed, which raises TraceCorruption if the trace itself changed, and
    the older checkpoints are then read from that replay.
    """

    __slots__ = ("_base", "_full", "_run_id")

    def __init__(self, path: str, crossings: _Lines, base: int, run_id: Any = None):
        super().__init__(path, crossings)
        self._base, self._run_id = base, run_id
        self._full: _Checkpoints | None = None

    def __len__(self) -> int:
        return self._base + len(self._pos)

    def _read(self, f: Any, i: int) -> list[dict[str, Any]]:
        if i >= self._base:
            return super()._read(f, i - self._base)
        self._same_run(f)
        if self._full is None:
            try:
                found = self._decode(f, entries(self._path, i, i + 1)[0], i)
            except OSError:
                found = None
            if found is not None:
                return found
            self._rebase()
        if self._full is None:
            raise internal("a prefixed progress with no full read after its rebase", self._path)
        return self._full._read(f, i)

    def _decode(self, f: Any, at: int, i: int) -> list[dict[str, Any]] | None:
        """Checkpoint i's records from its entry's offset, or None when they are not there (OSError too)."""
        found = _closed(_file_reader(f), at, i)
        if found is None:
            return None
        return [found[1], found[3], _blobs.inline(self._path, found[5])]

    def _same_run(self, f: Any) -> None:
        """HarnessError unless the file still holds this run (its path may have been given to another run since)."""
        f.seek(0)
        line = f.readline(MAX_LINE + 1)
        try:
            run_id = orjson.loads(line).get("run_id") if line_ok(line.rstrip(b"\n"), 0) else None
        except (orjson.JSONDecodeError, AttributeError):
            run_id = None
        if run_id != self._run_id:
            raise HarnessError(
                f"{self._path} no longer holds run {self._run_id!r}: the older checkpoints of a resumed run are "
                "read from its trace on access, so keep the trace, or take list(outcome.checkpoints) before moving it"
            )

    def _rebase(self) -> None:
        """The index does not lead to the lines it should: every older checkpoint from a replay of the whole trace.

        replay() reads and checks every line; a trace that was itself changed raises TraceCorruption there.
        """
        full = _replay(self._path).checkpoints._lines
        if not isinstance(full, _Checkpoints):
            raise internal(f"replay() read the checkpoints as {type(full).__name__}", self._path)
        self._full = full

    def __iter__(self) -> Iterator[Any]:
        done = 0
        try:
            with os.fdopen(open_regular(self._path), "rb") as f:
                while done < self._base and self._full is None:  # a few thousand entries at a time
                    hi = min(done + _BATCH, self._base)
                    try:
                        at = entries(self._path, done, hi)
                        got = [self._decode(f, at[k], done + k) for k in range(hi - done)]
                    except OSError:
                        got = [None]
                    if any(g is None for g in got):
                        self._rebase()
                        break
                    for g in got:
                        if g is not None:  # (none is: checked above)
                            yield self._build(*g)
                    done = hi
                for i in range(done, len(self)):
                    yield self._build(*self._read(f, i))
        except OSError as e:
            raise read_error(self._path, e) from None


# ------------------------------------------------------------------------------------------------- writing


class Writer:
    """Appends checkpoint entries and marks to a trace's index as its run goes; every failure is silent (a hint).

    The executor calls step() after each checkpoint of the run itself; every
    16 steps, once INTERVAL bytes went by since the last mark, it reads back
    the bytes written since it last looked, finds the checkpoint lines among
    them (a byte search: the other lines are not looked at), and marks the
    checkpoint just written if it is a quiet point (see _closed); close()
    marks the last checkpoint when the run stops, if no line after it names a
    blob. A checkpoint of a run that spawned agents carries a clock and is
    never a quiet point: the last mark before the spawn stays.
    A trace shorter than INTERVAL gets no index: reading it whole is as fast.
    A mark lists the blobs named before it with the line naming each (found
    by reading back the bytes not searched yet, in a run that names blobs).
    """

    __slots__ = ("blocks", "count", "dead", "digests", "fd", "header", "idx", "named", "path", "pending", "pos",
                 "quiet", "run_id", "scanned", "steps", "written_at")  # fmt: skip

    def __init__(self, trace: str, fd: int, digests: set[str], blocks: list[bytes]):
        self.path, self.fd = trace, fd  # the trace and a descriptor to read it (the journal's)
        self.digests = digests  # the journal's: every blob the trace names so far
        self.blocks = blocks  # the journal's: the digests of the trace's first whole blocks (Journal.blocks)
        self.idx = -2  # the index's descriptor: -2 not opened yet, -1 given up
        self.count = 0  # entries on file
        self.pending = array("q")  # entries not yet on file
        self.pos = 0  # the bytes read back so far
        self.header: Pos | None = None
        self.run_id = ""
        self.quiet: Mark | None = None  # the last quiet point found
        self.written_at = 0  # the end of the last mark written
        self.steps = 0
        self.dead = False
        self.named: dict[str, int] = {}  # blob -> where a line naming it starts
        self.scanned = 0  # the bytes searched for lines naming blobs

    @classmethod
    def after(cls, trace: str, fd: int, digests: set[str], blocks: list[bytes], rep: Replay) -> Writer | None:
        """The writer of a resumed run, from where replay or resume_point left the index and the run.

        `blocks` holds what trusted_blocks() gave (none when the run was read
        from its first line: the first mark written hashes the blocks before it).
        """
        if is_url(trace) or rep.tail.clocks is not None or rep.tail.group:
            return None
        w = cls(trace, fd, digests, blocks)
        lines = rep.checkpoints._lines
        if not isinstance(lines, _Checkpoints):
            raise internal(f"a resume read the checkpoints as {type(lines).__name__}", trace)
        w.count = lines._base if isinstance(lines, Prefixed) else 0
        w.pending = lines._pos.column(0)
        w.pos, w.run_id = rep.tail.end, rep.run_id
        q = rep.tail.quiet
        if q is not None:
            end, seq, crc, step, last, intent, result, nblobs, count, header = q
            w.header = header
            blobs = tuple(list(rep.tail.blobs)[:nblobs])
            w.quiet = Mark(rep.run_id, end, seq, crc, step, header, intent, result, last, count, blobs)
            if isinstance(lines, Prefixed) and rep.tail.since == end:  # the mark on file is this very point
                w.written_at = end
        mark = load(trace) if rep.tail.since else None
        if mark is not None and mark.end == rep.tail.since:  # the mark the resume checked: its blobs' lines too
            w.named, w.scanned = dict(zip(mark.blobs, mark.named, strict=True)), mark.end
        return w

    def step(self) -> None:
        """A checkpoint of the run was just written: every 16 steps, mark it if INTERVAL bytes went by."""
        self.steps += 1
        if self.steps & 15 or self.dead:
            return
        try:
            size = os.fstat(self.fd).st_size
            if size - self.written_at >= INTERVAL:
                self._read_back(size)
                self._mark_last(size, blobs=frozenset(self.digests))
            self._hash_blocks(size)  # marked or not (agents, many blobs): the seal at the end takes them
        except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            self.dead = True

    def _hash_blocks(self, end: int) -> None:
        """Hash the whole blocks of the trace before end not hashed yet (read back from the page cache)."""
        whole, known = end // BLOCK, len(self.blocks)
        if whole > known:  # (blocks is the journal's own list: extended in place)
            self.blocks[known:] = content_hash_of(self._pread, whole * BLOCK, self.blocks).blocks[known:]
            if len(self.blocks) != whole:
                raise OSError("the trace is shorter than it was")

    def close(self, *, mark: bool = True) -> None:
        """The run stops: mark its last checkpoint (when no later line names a blob), let go of the index.

        mark=False only lets go: a resume that wrote nothing leaves the index as it found it.
        """
        if not self.dead and mark:
            try:
                size = os.fstat(self.fd).st_size
                self._read_back(size)
                if self.pending and size - self.pending[-1] <= 1 << 20:
                    tail = os.pread(self.fd, size - self.pending[-1], self.pending[-1])
                    after = tail[tail.find(b"\n") + 1 :]
                    if b'"blobs":{' not in after and b'"kind":"artifact"' not in after:
                        self._mark_last(self.pending[-1] + tail.find(b"\n") + 1, blobs=frozenset(self.digests))
                self._write()
            except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError):
                self.dead = True
        if self.idx >= 0:
            with contextlib.suppress(OSError):
                os.close(self.idx)
        self.idx = -1

    def _read_back(self, size: int) -> None:
        """Find the checkpoint lines in the bytes from pos to size (the header's too, at the start)."""
        read = self._pread
        if self.header is None:
            first = read(0, 1 << 16)
            nl = first.find(b"\n")
            if nl < 0:
                raise ValueError("a header longer than this reader reads back")
            self.header, self.run_id = (0, nl + 1, 0), str(orjson.loads(first[:nl])["run_id"])
        while self.pos < size:
            data = read(self.pos, min(size - self.pos, 1 << 20))
            cut = data.rfind(b"\n") + 1
            if not cut:
                data = read(self.pos, min(size - self.pos, MAX_LINE + 1))
                cut = data.rfind(b"\n") + 1
                if not cut:
                    return
            base, find, i = self.pos, data.find, 0
            while (i := find(_CHECKPOINT, i, cut)) >= 0:
                start = data.rfind(b"\n", 0, i) + 1
                if data.startswith(b'{"seq":', start) and data[start + 7 : i].isdigit():
                    self.pending.append(base + start)
                i += len(_CHECKPOINT)
            self.pos += cut

    def _pread(self, off: int, n: int) -> bytes:
        return os.pread(self.fd, n, off)

    def _find_blobs(self, end: int) -> None:
        """Search the bytes from `scanned` to end for the lines naming blobs (a byte search), keeping where."""
        while self.scanned < end:
            data = self._pread(self.scanned, min(end - self.scanned, 1 << 20))
            cut = data.rfind(b"\n") + 1
            if not cut:
                data = self._pread(self.scanned, min(end - self.scanned, MAX_LINE + 1))
                cut = data.rfind(b"\n") + 1
                if not cut:
                    return
            for text in (b'"blobs":{', b'"kind":"artifact"'):
                i = data.find(text, 0, cut)
                while i >= 0:
                    start, stop = data.rfind(b"\n", 0, i) + 1, data.find(b"\n", i)
                    try:
                        named = _blobs.refs(orjson.loads(data[start:stop]))
                    except (orjson.JSONDecodeError, ValueError, KeyError, TypeError, AttributeError):
                        named = []
                    for _, sha, _ in named:
                        self.named.setdefault(sha, self.scanned + start)
                    i = data.find(text, stop, cut)
            self.scanned += cut

    def _mark_last(self, end: int, *, blobs: frozenset[str]) -> None:
        """Take the last checkpoint found, which ends at byte end, as the quiet point if it is one; write the mark."""
        if not self.pending or len(blobs) > BLOBS_MAX or (self.quiet is not None and self.quiet.end >= end):
            return
        ck_off = self.pending[-1]
        step = int(orjson.loads(self._pread(ck_off, end - ck_off))["step"])
        found = _closed(self._pread, ck_off, step)
        if found is None or self.header is None:
            return
        ck_pos, ck, intent_pos, _, result_pos, _ = found
        if ck_pos[0] + ck_pos[1] != end:
            return
        count = self.count + len(self.pending)
        crc = int(self._pread(end - 11, 8), 16)
        self.quiet = Mark(self.run_id, end, ck["seq"], crc, step, self.header, intent_pos, result_pos, ck_pos, count,
                          tuple(sorted(blobs)))  # fmt: skip
        self._write()

    def _write(self) -> None:
        """Write the pending entries up to the quiet point and its mark, after the entries on file."""
        q = self.quiet
        if q is None or q.end == self.written_at or q.end < INTERVAL or self.idx == -1:
            return
        if self.idx == -2:
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK  # never via a symlink
            try:
                fd = os.open(path_of(self.path), flags, 0o644)
            except OSError:
                fd = -1
            if fd >= 0 and not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device is no index: none is kept
                os.close(fd)
                fd = -1
            self.idx = fd
            if fd == -1:
                return
        if q.blobs:  # where each is named: read back what was not searched yet
            if not self.named.keys() >= set(q.blobs):
                self._find_blobs(q.end)
            named = tuple(self.named.get(b, q.end) for b in q.blobs)
            if max(named) >= q.end:  # (not found: no mark rather than one a resume would refuse)
                return
            self.quiet = q = replace(q, named=named)
        whole = q.end // BLOCK
        self._hash_blocks(q.end)  # the blocks completed since the last mark (all, after a full read)
        if len(q.blocks) != whole * DIGEST:
            self.quiet = q = replace(q, blocks=b"".join(self.blocks[:whole]))
        todo = self.pending[: q.checkpoints - self.count]
        data = todo.tobytes() if sys.byteorder == "little" else _swapped(todo)
        trailer = q.encode()
        try:
            os.pwrite(self.idx, data + trailer, self.count * ENTRY)
            end = q.checkpoints * ENTRY + len(trailer)
            if os.fstat(self.idx).st_size != end:  # a shorter mark, or a resume that went back: drop what lay beyond
                os.ftruncate(self.idx, end)
        except OSError:
            self.dead = True
            return
        del self.pending[: len(todo)]
        self.count = q.checkpoints
        self.written_at = q.end


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
    checksums checked again, a blob's sha256 too) on first access and kept
    (iterating keeps them all), so a resume costs the same after ten steps or
    a million, and a planner that reads all of progress pays that once.
    """

    __slots__ = ("_before", "_cache", "_tail")

    def __init__(self, before: Sequence[Checkpoint], tail: list[Checkpoint] | tuple[Checkpoint, ...] | None = None):
        self._before = before
        self._cache: dict[int, Checkpoint] = {}
        self._tail: list[Checkpoint] | tuple[Checkpoint, ...] = [] if tail is None else tail

    @property
    def tail(self) -> list[Checkpoint]:
        """The checkpoints written since the resume: the executor appends to this list."""
        if not isinstance(self._tail, list):
            raise internal("the checkpoints of a finished resume were appended to")
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
        cache, n = self._cache, len(self._before)
        if len(cache) == n:  # all read once: from memory, as a list would
            yield from (cache[i] for i in range(n))
        else:
            for i, c in enumerate(self._before):
                yield cache.setdefault(i, c)
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


def resumed(rep: Replay) -> ResumedProgress | list[Checkpoint]:
    """A resumed run's progress: older checkpoints read on access, or all read now for a trace on object storage
    (its local copy lives only as long as this process needs it)."""
    return list(rep.checkpoints) if is_url(rep.path) else ResumedProgress(rep.checkpoints)
