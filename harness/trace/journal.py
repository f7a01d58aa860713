"""The append-only writer of one trace file.

Records are encoded as lines by line.py (the format); this module is the
durability around them: the descriptor, the lock, the sync points, the seal
blocks, redaction and blobs on the way out. A torn tail found on resume is
set aside by torn.py.

Rules kept here:
- a record is encoded whole before anything is written; a value that would
  not come back equal raises NotSerializable and writes nothing;
- one os.write per record on an O_APPEND descriptor, looping on short writes;
- a record written with sync=True is durable, with every record before it,
  when the call returns (one fdatasync covers them all); the writer chooses
  these sync points (the executor: before each tool call and at the end of
  the run, see docs/FORMAT.md "Durability"); `sync()` makes everything
  written so far durable, and with durability="fsync" close() syncs whatever
  is left unsynced;
- after a failed write or sync the journal refuses everything: an fsync error
  is never retried and trusted (see "fsyncgate" in docs/FORMAT.md);
- an exclusive flock on the descriptor for the writer's life: a second writer,
  in any thread or process, fails at once; the kernel drops it with the process;
- with a `Redaction`, the user fields a caller names (`check=`, `user=`) are
  redacted before their record is written: the search for anything to redact
  runs on the line's bytes, and only a hit walks the fields and encodes again;
- a payload larger than `blob_threshold` is stored in a blob (storage/blobs.py), as
  redacted, before the line naming it is written; a run's terminal record and
  its seal (seal.py) go out in one write, so no torn seal follows a finished run.
- once a run has several agents (`share()`), each agent's thread stamps and
  encodes its own records and only the seq, the crc chain and the write are
  under a lock; until then the single-thread path takes no lock at all;
- a journal opened while a watcher factory is set (`watch()`: harness.otel's
  live spans) tells its `Watcher` the bytes of each write once they are
  written, and its close; with none set, a write costs one check more.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import orjson

from .._errors import JournalError, NotSerializable, TraceLocked, TraceUnreadable, internal
from ..storage import blobs as _blobs
from ..storage.files import KINDS, why
from .line import DUMPS_OPTIONS, check_value, encode, encode_tail, refuse, since, unstorable
from .redact import Redaction, user_text
from .torn import set_aside
from .vault import SERVED, Keeper

_fsync = getattr(os, "fdatasync", os.fsync)  # the data and the size are what we need back
_dumps, _loads, _crc32 = orjson.dumps, orjson.loads, zlib.crc32  # the hot path's, without attribute lookups


class Watcher(Protocol):
    """What is told of one journal's writes (harness.otel's live spans). Neither call may block or raise."""

    def wrote(self, data: bytes) -> None:
        """data (whole lines, but for a short write's parts) is in the file now."""

    def closed(self, seq: int) -> None:
        """The journal closed after record seq."""


_watch: Callable[[str], Watcher | None] | None = None  # the factory every journal opened now is handed to


def watch(factory: Callable[[str], Watcher | None] | None) -> None:
    """Hand every journal opened from now on to factory(its local file), which gives its Watcher or None;
    watch(None) stops. Journals already open keep the watcher they have."""
    global _watch
    _watch = factory


class Journal:
    """The single writer of one trace. Open with `Journal.open()`; use as a context manager."""

    __slots__ = (
        "_broken", "_clean", "_deferred", "_lead", "_lock", "_stamp", "_tick", "_truncated", "_walk", "blob_threshold",
        "blocks", "crc", "created", "digests", "dirty", "fd", "fsync", "give", "keeper", "path", "redact", "seal_key",
        "seq", "t0", "watcher",
    )  # fmt: skip

    def __init__(
        self,
        path: str,
        fd: int,
        *,
        fsync: bool,
        created: bool,
        redact: Redaction | None = None,
        blob_threshold: int = _blobs.THRESHOLD,
    ):
        self.path, self.fd, self.fsync, self.created = path, fd, fsync, created
        self.redacting(redact)
        # where a served value's secrets are kept, encrypted, before its record is written (vault.py)
        self.keeper: Keeper | None = Keeper(path) if redact is not None else None
        # whether a served field's redacted secrets go back to the caller (a workflow's function, an Executor's
        # planner get the value its tool returned, as its resume is served it); else the caller gets what the
        # trace holds
        self.give = False
        self.seq = 0
        self.crc = 0
        self.t0: float | None = None  # the header's ts: every other record's ts counts from it
        self._broken: str | None = None
        self._truncated = False  # the next write goes through _write and is synced (a truncation, a lead owed)
        # records owed before the next one (a resume's seam, see owe()): their bytes, the byte they go at, the
        # `.torn-N` name the torn tail after that byte goes to (or None), the blobs their lines name
        self._lead: tuple[bytes, int, str | None, list[bytes]] | None = None
        self._deferred: list[bytes] | None = None  # while owe() encodes: blobs to store when the lead is written
        self.dirty = False  # bytes written since the last fsync
        self.blob_threshold = blob_threshold
        self.digests: set[str] = set()  # every blob the trace names: what its seal lists
        self.seal_key: bytes | None = None  # an HMAC key for the seal, else an unkeyed seal
        # the sha256 of the file's first whole blocks of the seal's content hash (seal.BLOCK bytes each), hashed
        # from the file by this process or taken from an index mark a resume trusted (index.py): the seal hashes
        # only the bytes after them
        self.blocks: list[bytes] = []
        self._lock: threading.Lock | None = None  # set once several agents write (share())
        self._stamp: Callable[[dict[str, int] | None], tuple[str, dict[str, int]]] | None = None
        self._tick: Callable[[dict[str, int]], None] | None = None
        self.watcher = _watch(path) if _watch is not None else None

    def redacting(self, redact: Redaction | None) -> None:
        """Redact the user fields of each record written from now on with `redact` (None: nothing is redacted)."""
        self.redact = redact
        self._clean = redact.clean_json if redact is not None else None  # (the hot path's own references)
        self._walk = redact is not None and redact.paths  # JSON paths apply whatever a search finds

    def share(
        self,
        stamp: Callable[[dict[str, int] | None], tuple[str, dict[str, int]]],
        tick: Callable[[dict[str, int]], None],
    ) -> None:
        """From now on several threads append, and each record carries its agent's clock from `stamp()`.

        The clock is taken (`tick`) only once the record is encoded: one that
        cannot be stored takes no event. Called from the only thread writing
        so far, before any other starts.
        """
        self._stamp, self._tick, self._lock = stamp, tick, threading.Lock()

    def now(self) -> float:
        """The `ts` of a record written now."""
        if self.t0 is None:
            raise internal("a record before the trace's header", self.path)
        return since(self.t0)

    @property
    def shared(self) -> bool:
        return self._lock is not None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        durability: str = "flush",
        redact: Redaction | None = None,
        blob_threshold: int = _blobs.THRESHOLD,
    ) -> Journal:
        """Open (creating if needed) and lock path. Takes the lock before anything else."""
        if durability not in ("flush", "fsync"):
            raise ValueError(f"durability must be 'flush' or 'fsync', not {durability!r}")
        if type(blob_threshold) is not int or blob_threshold < 0:
            raise ValueError(f"blob_threshold must be an int of bytes >= 0, not {blob_threshold!r}")
        path = os.fspath(path)
        created = False
        try:
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                created = True
            except FileExistsError:  # O_NONBLOCK: a FIFO must not block the open (and changes nothing for a file)
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK)
        except IsADirectoryError:
            raise TraceUnreadable(path, "is a directory, not a trace file; nothing was written") from None
        except FileNotFoundError:  # O_CREAT: only a missing folder (or a dangling symlink) gets here
            folder = os.path.dirname(os.path.abspath(path))
            if os.path.isdir(folder):
                raise TraceUnreadable(path, "cannot be created (a dangling symlink?); nothing was written") from None
            said = f"its folder {folder} does not exist; nothing was written. Create the folder, or choose another path"
            raise TraceUnreadable(path, said) from None
        except OSError as e:
            raise TraceUnreadable(path, f"cannot open for writing: {why(e)}; nothing was written") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            what = KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise TraceUnreadable(path, f"is {what}, not a trace file (a trace is a regular file); nothing was written")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise TraceLocked(path) from None
        journal = cls(
            path, fd, fsync=durability == "fsync", created=created, redact=redact, blob_threshold=blob_threshold
        )
        if created:
            try:
                journal.sync_dir()
            except OSError as e:  # close, or the leaked descriptor would keep the lock
                journal.close()
                raise JournalError(path, f"fsync of its directory failed: {why(e)}") from None
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

    def continue_after(
        self,
        seq: int,
        crc: int,
        end: int,
        record: tuple[str, dict[str, Any]] | None = None,
        *,
        start: float | None,
        sync: bool = False,
        user: tuple[str, ...] = (),
    ) -> int:
        """Continue the chain of an existing trace whose last complete line ends at byte end; return the last seq.

        `start` is its header's `ts` (None for an empty file, whose header comes next).

        Bytes after end (a torn tail, which the caller has set aside) are cut
        off. With `record` (kind, fields), that record is written at byte end,
        over those bytes, and the file cut after it, then synced: the record
        naming where the tail went replaces the tail. A process killed in
        between leaves either the tail (not yet overwritten) or the record
        followed by the rest of the tail, again a torn tail: never a cut-off
        tail without the record that names its copy.
        """
        self.seq, self.crc, self.t0 = seq, crc, start
        size = self.size()
        from .seal import BLOCK

        del self.blocks[end // BLOCK :]  # the bytes after end go
        if record is None or size == end:
            if size != end:
                self._guard(lambda: os.ftruncate(self.fd, end), "truncate")
                self._truncated = True
            return seq if record is None else self.append(*record, sync=sync, user=user)
        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        kind, fields = record
        line, crc = self._encode(seq + 1, kind, fields, crc, user)
        self._write_over(end, line, seq + 1, size)
        self.seq, self.crc = seq + 1, crc
        return seq + 1

    def owe(
        self,
        seq: int,
        crc: int,
        end: int,
        records: Iterable[tuple[str, dict[str, Any], tuple[str, ...]]],
        *,
        start: float,
        aside: str | None,
    ) -> int:
        """Continue an existing trace after byte end, as continue_after() does, owing `records` (kind, fields,
        user): they are written with the first record appended after them, in the same write, or never.

        A resume writes its seam so (`resume`, and `answer`): a resume that
        cannot go on (it pauses again with nothing new, drifts, is refused)
        leaves the trace and its folder byte for byte as they were. The owed
        records are encoded now (their seq, ts and crc: the next record chains
        on them); what they need on disk waits for that write: the torn tail
        after end goes to `aside` (the path `torn_name()` gave, which they
        name), the blobs they name are stored, then their bytes and the
        next record's go at byte end, over the torn tail, as continue_after()
        writes its record, and are synced. Appends take no extra step for it:
        the first write goes through `_write`, as after a truncation.
        Returns the last owed seq.
        """
        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        from .seal import BLOCK

        self.seq, self.crc, self.t0 = seq, crc, start
        del self.blocks[end // BLOCK :]  # the bytes after end go
        self._deferred = []
        try:
            lines = []
            for kind, fields, user in records:
                seq += 1
                line, crc = self._encode(seq, kind, fields, crc, user)
                lines.append(line)
        finally:
            blobs, self._deferred = self._deferred, None
        self._lead = (b"".join(lines), end, aside, blobs)
        self.seq, self.crc, self._truncated = seq, crc, True
        return seq

    @property
    def owes(self) -> bool:
        """Whether records owed by owe() still wait for the next write (nothing was written since)."""
        return self._lead is not None

    def _pay(self, data: bytes, seq: int, crc: int) -> None:
        """Write the owed records, then data (the lines up to seq, ending in crc), as owe() says; synced."""
        lead = self._lead
        if lead is None:
            raise internal("nothing owed", self.path, seq)
        owed, end, aside, blobs = lead
        for blob in blobs:
            self.put_blob(blob)
        if aside is not None:
            placed = set_aside(self.path, end)
            if placed != aside:
                raise JournalError(
                    self.path,
                    f"its torn tail went to {placed}, not to {aside} as its resume record says (a file took that "
                    "name meanwhile); nothing was written to the trace: resume again",
                )
        self._write_over(end, owed + data, self.seq - owed.count(b"\n") + 1, self.size())
        self._lead, self._truncated = None, False
        self.seq, self.crc = seq, crc

    def _write_over(self, end: int, data: bytes, first: int, size: int) -> None:
        """Write data (the lines from seq first on) at byte end of a file of size bytes, cut what lies beyond
        it, fdatasync: a kill in between leaves the old tail, or data followed by the rest of it (a torn tail)."""
        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        try:
            if size == end:  # nothing to write over: an append
                view = memoryview(data)
                while view:  # a short write: send the rest
                    view = view[os.write(self.fd, view) :]
            else:
                flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
                fcntl.fcntl(self.fd, fcntl.F_SETFL, flags & ~os.O_APPEND)  # with O_APPEND, pwrite appends (Linux)
                try:
                    view, at = memoryview(data), end
                    while view:
                        written = os.pwrite(self.fd, view, at)
                        view, at = view[written:], at + written
                finally:
                    fcntl.fcntl(self.fd, fcntl.F_SETFL, flags)
        except OSError as e:
            self._broken = "write"
            over = " over its torn tail" if size != end else ""
            raise JournalError(self.path, f"write of seq {first}{over} failed: {why(e)}") from None
        if self.watcher is not None:
            self.watcher.wrote(data)
        if size > end + len(data):
            self._guard(lambda: os.ftruncate(self.fd, end + len(data)), "truncate")
        self._guard(lambda: _fsync(self.fd), "fsync")
        self.dirty = False

    def sync(self) -> None:
        """Make every record written so far durable: one fdatasync, none when nothing is unsynced."""
        if self._lock is not None:  # an agent may be writing: sync after its write, not in the middle
            with self._lock:
                self._sync()
        else:
            self._sync()

    def _sync(self) -> None:
        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        if self._lead is not None:  # asked to sync before an effect (a tool called again): the owed records first
            self._pay(b"", self.seq, self.crc)
        elif self.dirty:
            self._guard(lambda: _fsync(self.fd), "fsync")
            self.dirty = False

    def append(
        self,
        kind: str,
        fields: dict[str, Any],
        *,
        sync: bool = False,
        check: tuple[str, ...] = (),
        user: tuple[str, ...] = (),
    ) -> int:
        """Write one record and return its seq.

        `check` names user-supplied fields that must come back equal from
        JSON (NotSerializable, and nothing written, when one does not); each
        gets its value as read back from the line: a fresh copy nobody else
        holds. Those and `user` are redacted (see `_encode`).
        """
        if check:
            user = (*check, *user)
        if self._lock is not None:
            for name in check:
                fields[name] = check_value(name, fields[name])
            return self._append_shared(((kind, fields, user),), sync)
        seq = self.seq + 1
        line, crc = self._encode(seq, kind, fields, self.crc, user, check)
        if self._broken or sync or self._truncated:
            self._write(line, seq, crc, sync)
            return seq
        try:  # _write, inline: the common case of every record
            written = os.write(self.fd, line)
        except OSError as e:
            raise self._failed(e, seq) from None
        if written < len(line):  # a short write: _write sends the rest
            if self.watcher is not None:
                self.watcher.wrote(line[:written])
            self._write(line[written:], seq, crc, sync)
            return seq
        self.dirty, self.seq, self.crc = True, seq, crc
        if self.watcher is not None:
            self.watcher.wrote(line)
        return seq

    def _encode(
        self,
        seq: int,
        kind: str,
        fields: dict[str, Any],
        crc: int,
        user: tuple[str, ...] = (),
        check: tuple[str, ...] = (),
    ) -> tuple[bytes, int]:
        """The record's line and crc: `user` fields redacted (fields gets their values), large payloads in blobs.

        The hot path of every step: one dumps, one loads when fields are
        checked, one search for anything to redact on the line's own bytes, one
        crc. Anything else (a value that is not JSON, a secret found, a line
        over the blob threshold) goes the long way, `_encode_slow`.
        """
        if kind == "header":  # the run's start, on the wall clock; every later ts counts from it
            ts = self.t0 = int(time.time() * 1000) / 1000
        elif self.t0 is not None:
            ts = int((time.time() - self.t0) * 1000) / 1000  # since(t0), inline
        else:
            ts = self.now()  # raises: a record before the header
        record = {"seq": seq, "kind": kind, **fields, "ts": ts}
        try:
            whole = _dumps(record, default=refuse, option=DUMPS_OPTIONS)
        except TypeError:  # not JSON somewhere: the long way says where
            whole = b""
        if user and whole:
            text = user_text(whole, user)  # the user fields' part of the line: checked and searched alone
            if check:
                try:
                    back = _loads(b"{%b}" % text)
                    for name in check:
                        if back[name] != fields[name]:
                            whole = b""
                            break
                        fields[name] = back[name]  # the line's own copy: nobody else holds it
                except (orjson.JSONDecodeError, KeyError):  # (user_text cut elsewhere): the long way
                    whole = b""
            # (a line over the blob threshold goes the long way anyway, which searches it: not twice)
            if (
                whole
                and self._clean is not None
                and (self._walk or len(whole) > self.blob_threshold or not self._clean(text))
            ):
                return self._encode_slow(seq, kind, fields, crc, user, ts)
        if not whole:
            for name in check:  # NotSerializable, naming the tool, the step and where in the value
                fields[name] = check_value(name, fields[name], tool=fields.get("tool"), step=fields.get("step"))
            return self._encode_slow(seq, kind, fields, crc, user, ts)
        body = whole[:-1]
        out = _crc32(body, crc)
        line = body + b',"crc":"%08x"}\n' % out  # one copy of body: faster than formatting it in
        if len(line) > self.blob_threshold:  # (no payload can be larger than its line)
            return self._encode_slow(seq, kind, fields, crc, user, ts)
        return line, out

    def _encode_slow(
        self, seq: int, kind: str, fields: dict[str, Any], crc: int, user: tuple[str, ...], ts: float
    ) -> tuple[bytes, int]:
        """_encode the long way: redaction walks the user fields, payloads over the threshold go to blobs."""
        record = {"seq": seq, "kind": kind, **fields, "ts": ts}
        try:
            line, out = encode(record, crc)
        except NotSerializable:
            if kind not in _blobs.FIELDS:
                raise
            line = b""  # too long for a line: it may fit once its payloads are blobs
        given = None  # the served field's value as given, when it was redacted (the caller gets it back)
        if line and user and self.redact is not None:
            line, out, given = self._redact(record, line, out, fields, user, crc)
        if len(line) > self.blob_threshold or not line:
            if not line:
                before = self.redacted(fields, user)
                if before is not None:
                    given = self._keep(seq, kind, before, fields)
            stored = self._store(kind, fields)
            if stored is not None:
                line, out = encode({"seq": seq, "kind": kind, **stored, "ts": ts}, crc)
            elif not line:
                line, out = encode({"seq": seq, "kind": kind, **fields, "ts": ts}, crc)  # NotSerializable
        if given is not None:
            fields[given[0]] = given[1]
        return line, out

    def _store(self, kind: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        """fields with each payload larger than the threshold stored as a blob; None when none is."""
        named: dict[str, Any] = {}
        for name in _blobs.FIELDS.get(kind, ()):
            if name not in fields:
                continue
            try:
                data = orjson.dumps(fields[name], default=refuse, option=DUMPS_OPTIONS)
            except TypeError as e:
                raise unstorable({name: fields[name]}, e) from None
            if len(data) > self.blob_threshold:
                if self._deferred is not None:  # owed records (owe()): stored when they are written
                    self._deferred.append(data)
                    named[name] = {"sha256": _blobs.digest(data), "size": len(data)}
                else:
                    named[name] = {"sha256": self.put_blob(data), "size": len(data)}
        if not named:
            return None
        return {**{k: v for k, v in fields.items() if k not in named}, "blobs": named}

    def put_blob(self, data: bytes) -> str:
        """Store data as a blob beside the trace (before any line names it); its sha256."""
        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        folder = _blobs.folder_of(self.path)
        try:
            name = _blobs.put(folder, data, sync_dir=self.fsync)
        except OSError as e:
            raise JournalError(self.path, f"cannot store a blob in {folder}: {why(e)}") from None
        self.digests.add(name)
        return name

    def finish(
        self, kind: str, fields: dict[str, Any], *, state: str, key: bytes | None, user: tuple[str, ...] = ()
    ) -> int:
        """Write the record that ends the run and its seal, in one synced write; returns the end's seq.

        In a run with agents the end is one more event of main, with its clock
        (its agents are joined by then); the seal is no agent's event and has none.
        """
        if self._lock is not None:
            if self._stamp is None or self._tick is None:
                raise internal("a shared journal without its clocks", self.path, self.seq + 1)
            vc = fields["vc"] = self._stamp(None)[1]
            with self._lock:
                seq = self._finish(kind, fields, state, key, user)
            self._tick(vc)
            return seq
        return self._finish(kind, fields, state, key, user)

    def _finish(self, kind: str, fields: dict[str, Any], state: str, key: bytes | None, user: tuple[str, ...]) -> int:
        seq = self.seq + 1
        line, crc = self._encode(seq, kind, fields, self.crc, user)
        lead = self._lead  # records owed (owe()): the seal covers them, written before this line
        before, end = (line, None) if lead is None else (lead[0] + line, lead[1])
        seal_line, seal_crc = self._seal_line(seq + 1, before, crc, state, key, end)
        self._write(line + seal_line, seq + 1, seal_crc, True)
        return seq

    def seal_fields(self, end: int, *, state: str, key: bytes | None) -> dict[str, Any]:
        """The fields of a seal over the file's first `end` bytes (a run whose writer died before its seal)."""
        from . import seal as _seal

        return _seal.fields(self._content_hash(b"", end), self.digests, state, key)

    def _seal_line(
        self, seq: int, before: bytes, crc: int, state: str, key: bytes | None, end: int | None = None
    ) -> tuple[bytes, int]:
        from . import seal as _seal

        seal = _seal.fields(self._content_hash(before, end), self.digests, state, key)
        return encode({"seq": seq, "kind": "seal", **seal, "ts": self.now()}, crc)

    def _content_hash(self, tail: bytes, end: int | None = None) -> str:
        """The seal's content hash of the file's bytes up to end (all of them by default: on disk, under our lock),
        then tail. The blocks in `blocks` are not read again; the digests of the blocks hashed join them."""
        from .seal import BLOCK, content_hash_of

        size = self.size() if end is None else end
        known = self.blocks[: size // BLOCK]
        h = content_hash_of(lambda off, n: os.pread(self.fd, n, off), size, known, tail)
        self.blocks[len(known) :] = h.blocks[len(known) : size // BLOCK]  # those of bytes on file only
        return h.hexdigest()

    def append_many(self, records: Iterable[tuple[Any, ...]], *, sync: bool = False) -> int:
        """Write records that follow each other with nothing done between them, in one write.

        Each is (kind, fields) or (kind, fields, user). All are encoded before
        any byte is written: one that cannot be stored raises NotSerializable
        and none is written. Returns the last seq.
        """
        if self._lock is not None:
            return self._append_shared(records, sync)
        seq, crc, lines = self.seq, self.crc, []
        for record in records:
            seq += 1
            line, crc = self._encode(seq, record[0], record[1], crc, record[2] if len(record) > 2 else ())
            lines.append(line)
        self._write(b"".join(lines), seq, crc, sync)
        return seq

    def _redact(
        self, record: dict[str, Any], line: bytes, out: int, fields: dict[str, Any], user: tuple[str, ...], crc: int
    ) -> tuple[bytes, int, tuple[str, Any] | None]:
        """record's line (and its crc), encoded from crc, with its fields `user` redacted; fields gets their values;
        and the served field's value as given, when it was redacted (see `_keep`).

        The search runs on the line already encoded; only when it finds
        something are the user fields walked and the record encoded again.
        """
        if self.redact is None:
            raise internal("redacting with no redaction rules", self.path, record.get("seq"))
        redacted = self.redact.record(user_text(line, user), record, user)
        if redacted is None:
            return line, out, None
        given = self._keep(record["seq"], record["kind"], record, redacted)
        for name in user:
            if name in fields:
                fields[name] = redacted[name]
        return (*encode(redacted, crc), given)

    def redacted(self, fields: dict[str, Any], user: tuple[str, ...]) -> dict[str, Any] | None:
        """Give fields `user` their redacted values, as they are written (for a writer that compares first);
        the fields as they were given when something was redacted (for `_keep`), else None."""
        if not user or self.redact is None:
            return None
        try:
            data = orjson.dumps(fields, default=refuse, option=DUMPS_OPTIONS)
        except TypeError:
            data = b"\\"  # not JSON (encoding it will say so): walk it
        redacted = self.redact.record(user_text(data, user), fields, user)
        if redacted is None:
            return None
        before = dict(fields)
        fields.update(redacted)
        return before

    def _keep(self, seq: int, kind: str, before: dict[str, Any], after: dict[str, Any]) -> tuple[str, Any] | None:
        """Keep the secrets redaction took out of the served field of record seq (vault.py), before it is written.

        Returns that field and its value as given, with `give`: the live code
        that made it gets it back, secrets and all (a resume serves it so, from
        the sidecar, or refuses), never the marker. None when the field was
        not redacted, or without `give`.
        """
        name = SERVED.get(kind)
        if name is None or name not in before or before[name] is after.get(name):
            return None
        if self.keeper is not None:
            self.keeper.keep(seq, name, before[name], after[name])
        return (name, before[name]) if self.give else None

    def _append_shared(self, records: Iterable[tuple[Any, ...]], sync: bool) -> int:
        """Append for one of several agents: stamp and encode here, in the agent's thread; lock only
        around what must be serial (the seq, the crc chain, the write).

        The agent's records are stamped in the agent's own order (only its thread
        writes them); another agent's records may land between two of its writes.
        """
        if self._stamp is None or self._tick is None or self._lock is None:
            raise internal("a shared append on a journal that is not shared", self.path, self.seq + 1)
        stamp, annotate = self._stamp, type(self).annotate is not Journal.annotate
        tails: list[memoryview] = []
        vc: dict[str, int] | None = None  # the clock of the record before, in this write (not taken yet)
        kept: list[tuple[int, str, dict[str, Any], dict[str, Any]]] = []  # secrets to keep once seqs are known
        for record in records:  # (kind, fields) or (kind, fields, user)
            kind, fields = record[0], record[1]
            if len(record) > 2 and record[2] and self.redact is not None:
                before = self.redacted(fields, record[2])
                if before is not None and kind in SERVED:
                    kept.append((len(tails), kind, before, fields))
            agent, vc = stamp(vc)
            head = {"kind": kind} if agent == "main" else {"kind": kind, "agent": agent}
            ts = self.now()
            rec = {**head, **fields, "vc": vc, "ts": ts}
            tail: memoryview | None
            try:
                tail = encode_tail(rec)
            except NotSerializable:
                if kind not in _blobs.FIELDS:
                    raise
                tail = None  # too long for a line: it may fit once its payloads are blobs
            if tail is None or len(tail) > self.blob_threshold:
                stored = self._store(kind, fields)
                if stored is not None:
                    rec, tail = {**head, **stored, "vc": vc, "ts": ts}, None
                elif tail is None:
                    encode_tail(rec)  # raises NotSerializable, naming the record
            if annotate:
                del rec["ts"]
                rec = self.annotate(rec, agent, vc)
                rec["ts"], tail = ts, None
            tails.append(tail if tail is not None else encode_tail(rec))
        if vc is not None:
            self._tick(vc)  # every record encoded: only now does the agent's clock move on
        crc32 = zlib.crc32
        with self._lock:
            if self.fd < 0:  # the run ended (closed its trace) while this agent went on
                raise JournalError(self.path, "an agent wrote after the run had closed its trace (join your agents)")
            seq, crc = self.seq, self.crc
            for i, kind, before, after in kept:
                given = self._keep(seq + 1 + i, kind, before, after)
                if given is not None:  # (its line is encoded: the caller gets the value as given)
                    after[given[0]] = given[1]
            parts: list[bytes | memoryview] = []
            for tail in tails:
                seq += 1
                lead = b'{"seq":%d,' % seq
                crc = crc32(tail, crc32(lead, crc))
                parts += (lead, tail, b',"crc":"%08x"}\n' % crc)
            self._write(b"".join(parts), seq, crc, sync)
        return seq

    def annotate(self, record: dict[str, Any], agent: str, vc: dict[str, int]) -> dict[str, Any]:
        """A shared record about to be written, once its clock is known (a fork marks its lineage here)."""
        return record

    def _write(self, data: bytes, seq: int, crc: int, sync: bool) -> None:
        """Write data, the lines up to seq, and acknowledge them only once they are where durability says."""
        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        if self._lead is not None:  # the first write after owe(): the owed records go with it
            self._pay(data, seq, crc)
            return
        whole = data
        try:
            written = os.write(self.fd, data)
            while written < len(data):  # a short write: send the rest
                data = data[written:]
                written = os.write(self.fd, data)
        except OSError as e:
            raise self._failed(e, seq) from None
        self.dirty = True
        if self.watcher is not None:
            self.watcher.wrote(whole)
        if sync or self._truncated:  # a truncation is made durable with the record that follows it
            self._guard(lambda: _fsync(self.fd), "fsync")
            self._truncated = self.dirty = False
        self.seq, self.crc = seq, crc

    def _failed(self, e: OSError, seq: int) -> JournalError:
        """The error of a failed write of the lines up to seq; the journal accepts nothing more."""
        self._broken = "write"
        seqs = f"seq {seq}" if seq == self.seq + 1 else f"seqs {self.seq + 1}..{seq}"
        return JournalError(self.path, f"write of {seqs} failed: {why(e)}")

    def _guard(self, op: Any, name: str) -> None:
        try:
            op()
        except OSError as e:
            self._broken = name
            raise JournalError(self.path, f"{name} failed after seq {self.seq}: {why(e)}") from None

    def close(self) -> None:
        """Close, releasing the lock; with durability="fsync", sync what is not yet synced first."""
        if self._lock is not None:  # an agent may be writing: not in the middle of its write
            with self._lock:
                self._close()
        else:
            self._close()

    def _close(self) -> None:
        if self.fd >= 0:
            if self.watcher is not None:
                self.watcher.closed(self.seq)
            try:
                if self.fsync and self.dirty and not self._broken:
                    self._sync()
            finally:
                fd, self.fd = self.fd, -1
                os.close(fd)  # also releases the flock
                if self.keeper is not None:
                    self.keeper.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is None:
            self.close()
            return
        with contextlib.suppress(JournalError):  # the exception in flight says more than a failed last sync
            self.close()
