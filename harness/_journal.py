"""The append-only writer of one trace file.

A record is one line: the record's orjson bytes with the closing brace
replaced by `,"crc":"<8 hex digits>"}` and a newline. The crc is
zlib.crc32 of the bytes before `,"crc":`, seeded with the previous line's
crc, so the lines form a chain: an edited, deleted, swapped or re-appended
line breaks it at that very line, and the reader checks it straight from
the bytes on disk, with no re-serialization.

Rules kept here:
- a record is encoded whole before anything is written; a value that would
  not come back equal raises NotSerializable and writes nothing;
- one os.write per record on an O_APPEND descriptor, looping on short writes;
- after a failed write or sync the journal refuses everything: an fsync error
  is never retried and trusted (see "fsyncgate" in docs/FORMAT.md);
- an exclusive flock on the descriptor for the writer's life: a second writer,
  in any thread or process, fails at once; the kernel drops it with the process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
import time
import zlib
from collections.abc import Iterable
from typing import Any

import orjson

from ._errors import JournalError, NotSerializable, TraceLocked, TraceUnreadable

SCHEMA = 1
MAX_LINE = 16 * 1024 * 1024  # bytes; larger records are refused on write and on read
SUFFIX = len(b',"crc":"00000000"}')  # bytes after the checksummed part, newline excluded
MARK = b',"crc":"'  # where that suffix starts
HEADER_START = b'{"seq":1,"kind":"header"'  # how every trace begins

_DUMPS_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
_fsync = getattr(os, "fdatasync", os.fsync)  # the data and the size are what we need back


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def canonical(value: Any) -> bytes:
    """Canonical JSON bytes (sorted keys): what goals and requests are compared and hashed by."""
    return orjson.dumps(value, default=_refuse, option=_DUMPS_OPTIONS | orjson.OPT_SORT_KEYS)


def problem(value: Any, where: str = "") -> tuple[str, str] | None:
    """(where, what) of the first part of value that a JSON round trip would change.

    `what` reads after "is": `a datetime, not a JSON value`.
    """
    if isinstance(value, bool) or value is None:
        return None
    if type(value) is str:
        return None if _utf8(value) else (where, "a str with a lone surrogate, not valid UTF-8")
    if type(value) is int:
        return None if -(2**63) <= value < 2**64 else (where, f"the integer {value}, out of the 64-bit range")
    if type(value) is float:
        return None if math.isfinite(value) else (where, f"{value}, not a finite number")
    if type(value) is dict:
        for k, v in value.items():
            if type(k) is not str:
                return (where, f"a dict with the key {k!r}, which is {a(type(k).__name__)}, not a str")
            if not _utf8(k):
                return (where, f"a dict with the key {k!r}, which has a lone surrogate, not valid UTF-8")
            found = problem(v, f"{where}.{k}")
            if found:
                return found
        return None
    if type(value) is list:
        for i, v in enumerate(value):
            found = problem(v, f"{where}[{i}]")
            if found:
                return found
        return None
    return (where, f"{a(type(value).__name__)}, not a JSON value")


def a(noun: str) -> str:
    """noun with its indefinite article: `a datetime`, `an object`."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _utf8(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:  # a lone surrogate: orjson refuses it
        return False
    return True


def check_value(field: str, value: Any, *, tool: str | None = None, step: int | None = None) -> Any:
    """value as it reads back from a trace: a fresh copy nobody else holds.

    NotSerializable unless it survives a JSON round trip unchanged; `tool`
    and `step` name the step it belongs to in the message.
    """
    t = type(value)
    if t is bool or value is None:  # a str may hold a lone surrogate: it goes through the check
        return value
    try:  # the whole check runs in C; the Python walk below only explains a failure
        back = orjson.loads(orjson.dumps(value, default=_refuse, option=_DUMPS_OPTIONS))
        if back == value:
            return back
    except TypeError:
        pass
    where, what = problem(value) or ("", "a value that does not come back equal from JSON")
    raise NotSerializable(field, where, what, tool=tool, step=step)


def encode(record: dict[str, Any], crc: int) -> tuple[bytes, int]:
    """The line for record, chained on crc; returns (line, its crc).

    NotSerializable, naming the field, when a value is not JSON or the line is too long.
    """
    try:
        body = orjson.dumps(record, default=_refuse, option=_DUMPS_OPTIONS)[:-1]  # a hot path
    except TypeError as e:  # a non-JSON value in a field nobody asked to check
        raise _unstorable(record, e) from None
    crc = zlib.crc32(body, crc)
    line = body + b',"crc":"%08x"}\n' % crc  # one copy of body: faster than formatting it in
    if len(line) > MAX_LINE:
        raise NotSerializable(
            f"the {record['kind']} record", "", f"{len(line)} bytes long; a trace line holds at most {MAX_LINE}"
        )
    return line, crc


def line_ok(line: bytes, prev: int) -> bool:
    """Whether line (without its newline) ends with the crc of its bytes, chained on prev."""
    return line[-SUFFIX:] == b',"crc":"%08x"}' % zlib.crc32(line[:-SUFFIX], prev)


class Journal:
    """The single writer of one trace. Open with `Journal.open()`; use as a context manager."""

    __slots__ = ("_broken", "crc", "created", "fd", "fsync", "path", "seq")

    def __init__(self, path: str, fd: int, *, fsync: bool, created: bool):
        self.path, self.fd, self.fsync, self.created = path, fd, fsync, created
        self.seq = 0
        self.crc = 0
        self._broken: str | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, durability: str = "flush") -> Journal:
        """Open (creating if needed) and lock path. Takes the lock before anything else."""
        if durability not in ("flush", "fsync"):
            raise ValueError(f"durability must be 'flush' or 'fsync', not {durability!r}")
        path = os.fspath(path)
        created = False
        try:
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                created = True
            except FileExistsError:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except IsADirectoryError:
            raise TraceUnreadable(path, "is a directory, not a trace file; nothing was written") from None
        except FileNotFoundError:  # O_CREAT: only a missing folder (or a dangling symlink) gets here
            folder = os.path.dirname(os.path.abspath(path))
            if os.path.isdir(folder):
                raise TraceUnreadable(path, "cannot be created (a dangling symlink?); nothing was written") from None
            why = f"its folder {folder} does not exist; nothing was written. Create the folder, or choose another path"
            raise TraceUnreadable(path, why) from None
        except OSError as e:
            raise TraceUnreadable(path, f"cannot open for writing: {_why(e)}; nothing was written") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TraceLocked(path) from None
        journal = cls(path, fd, fsync=durability == "fsync", created=created)
        if created:
            try:
                journal.sync_dir()
            except OSError as e:  # close, or the leaked descriptor would keep the lock
                journal.close()
                raise JournalError(path, f"fsync of its directory failed: {_why(e)}") from None
        return journal

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def sync_dir(self) -> None:
        """fsync the directory holding the trace, so that a new file's name survives power loss."""
        dfd = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def continue_after(self, seq: int, crc: int, end: int) -> None:
        """Continue the chain of an existing trace whose last complete line ends at byte end."""
        if self.size() != end:
            self._guard(lambda: os.ftruncate(self.fd, end), "truncate")
            self._guard(lambda: _fsync(self.fd), "fsync")
        self.seq, self.crc = seq, crc

    def append(self, kind: str, fields: dict[str, Any], *, sync: bool = False, check: tuple[str, ...] = ()) -> int:
        """Write one record and return its seq. `check` names user-supplied fields to round-trip."""
        for name in check:
            check_value(name, fields[name])
        seq = self.seq + 1
        line, crc = encode({"seq": seq, "kind": kind, **fields, "ts": time.time()}, self.crc)
        self._write(line, seq, crc, sync)
        return seq

    def append_many(self, records: Iterable[tuple[str, dict[str, Any]]], *, sync: bool = False) -> int:
        """Write records that follow each other with nothing done between them, in one write.

        All are encoded before any byte is written: one that cannot be stored
        raises NotSerializable and none is written. Returns the last seq.
        """
        seq, crc, lines = self.seq, self.crc, []
        for kind, fields in records:
            seq += 1
            line, crc = encode({"seq": seq, "kind": kind, **fields, "ts": time.time()}, crc)
            lines.append(line)
        self._write(b"".join(lines), seq, crc, sync)
        return seq

    def _write(self, data: bytes, seq: int, crc: int, sync: bool) -> None:
        """Write data, the lines up to seq, and acknowledge them only once they are where durability says."""
        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        try:
            written = os.write(self.fd, data)
            while written < len(data):  # a short write: send the rest
                data = data[written:]
                written = os.write(self.fd, data)
        except OSError as e:
            self._broken = "write"
            seqs = f"seq {seq}" if seq == self.seq + 1 else f"seqs {self.seq + 1}..{seq}"
            raise JournalError(self.path, f"write of {seqs} failed: {_why(e)}") from None
        if sync or self.fsync:
            self._guard(lambda: _fsync(self.fd), "fsync")
        self.seq, self.crc = seq, crc

    def _guard(self, op: Any, name: str) -> None:
        try:
            op()
        except OSError as e:
            self._broken = name
            raise JournalError(self.path, f"{name} failed after seq {self.seq}: {_why(e)}") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # also releases the flock
            self.fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unstorable(record: dict[str, Any], e: TypeError) -> NotSerializable:
    """Say which field of a record orjson refused, and where inside it."""
    for name, value in record.items():
        found = problem(value)
        if found:
            return NotSerializable(name, *found)
    return NotSerializable(f"the {record.get('kind')} record", "", f"refused by the JSON encoder ({e})")


def _why(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "the disk is full (ENOSPC)"
    return e.strerror or str(e)


def set_aside(path: str, data_from: int) -> str | None:
    """Move the bytes of path after offset data_from to a new sibling file; return its name.

    The caller truncates the trace afterwards; the sibling is fsynced first, so
    nothing is lost even if we die in between.
    """
    with open(path, "rb") as f:
        f.seek(data_from)
        tail = f.read()
    if not tail:
        return None
    n = 1
    while os.path.exists(aside := f"{path}.torn-{n}"):
        n += 1
    try:
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(tail)
            while view:  # a short write is not a failure: write the rest
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:  # the trace is not truncated yet: drop the partial copy, keep the tail in place
        with contextlib.suppress(OSError):
            os.unlink(aside)
        raise JournalError(path, f"cannot set its torn tail aside in {aside}: {_why(e)}") from None
    return aside
