"""The writer of a trace on object storage: a local spool, shipped as segments.

`RemoteJournal` is a `Journal` whose file is a local spool (in a temporary
folder) and whose `path` is the trace's URL. Opening it lists the run's
segments and downloads them into the spool, so the spool starts as exactly
the bytes in the bucket; every record is then appended to the spool as a
local trace's would be, and at the ship points the bytes written since the
last segment go up as segment N+1, created only if it does not exist yet.

Ship points (a segment holds whole lines only):
- a record written with sync=True, and `sync()`: the header, a tool's intent
  (a declared tool's; every tool's with durability="fsync"), a reconcile
  record: on the bucket before the tool runs;
- a step's checkpoint record: an acknowledged checkpoint;
- a `resume` record (written with the resumed run's first record, see
  Journal.owe()): the resuming writer claims the run at once;
- the end of the run (DONE, FAILED, PAUSED, with its seal: `finish()`) and close();
- with durability="fsync", every write.

Liveness: the writer keeps a lease object beside its segments while it is
open, so that a lister can tell a live writer from a dead one (_lease.py);
it fences nothing.

Fencing: segment numbers are the fence. A writer that finds its next segment
already there with other bytes (another writer advanced the run; the same
bytes are its own upload, retried by the client) raises FenceLost, refuses
everything after, and leaves nothing behind: no lock to go stale. A failed
upload breaks the journal (whether the segment landed is unknown) and the
run stops; a resume reads the truth from the bucket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable
from typing import Any, cast

from .. import _state as S
from .._errors import JournalError
from .._journal import Journal
from ._lease import Lease
from ._location import FenceLost, Location, open_location, segment_name

_SHIP_KINDS = frozenset({"header", "checkpoint", "resume", "reconcile", "seal"})
_SHIP_STATES = frozenset({S.DONE, S.FAILED, S.PAUSED})
SPOOLS: dict[str, str] = {}  # url -> spool of the writer this process holds: its readers see what it wrote


def _ships(kind: str, fields: dict[str, Any]) -> bool:
    """Whether a record of this kind is a ship point of its own (see the module docstring)."""
    return kind in _SHIP_KINDS or (kind == "transition" and fields.get("to") in _SHIP_STATES)


class RemoteJournal(Journal):
    """The single writer of a trace on object storage. Open with `RemoteJournal.open_url()`."""

    __slots__ = ("_ship_lock", "lease", "location", "next_segment", "ship_every", "shipped", "spool")

    lease: Lease
    location: Location
    spool: str
    next_segment: int
    shipped: int
    ship_every: bool
    _ship_lock: threading.Lock

    @classmethod
    def open_url(
        cls,
        url: str,
        *,
        durability: str = "flush",
        redact: Any = None,
        storage_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> RemoteJournal:
        """Open the trace at url: download its segments into a fresh spool and continue after them."""
        if durability not in ("flush", "fsync"):
            raise ValueError(f"durability must be 'flush' or 'fsync', not {durability!r}")
        location = open_location(url, storage_options)
        lease = Lease(location)  # ($HARNESS_LEASE_SECONDS checked before anything is made)
        folder = tempfile.mkdtemp(prefix="harness-spool-")
        spool = os.path.join(folder, "trace.jsonl")
        try:
            with open(spool, "wb") as f:
                last, size, _ = location.download(f)  # the last segment number the objects hold
            location.fetch_blobs(spool)  # the blobs its lines name, beside the spool: replay() reads them
            # the spool itself needs no fsync: the bucket is the durable copy
            journal = cast(RemoteJournal, cls.open(spool, redact=redact, **options))
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        journal.path, journal.spool, journal.location = location.url, spool, location
        journal.next_segment, journal.shipped = last + 1, size
        journal.ship_every = durability == "fsync"
        journal._ship_lock = threading.Lock()
        journal.lease = lease
        SPOOLS[location.url] = spool
        return journal

    def append(
        self,
        kind: str,
        fields: dict[str, Any],
        *,
        sync: bool = False,
        check: tuple[str, ...] = (),
        user: tuple[str, ...] = (),
    ) -> int:
        claim = self.owes  # this write carries a resume record
        seq = super().append(kind, fields, check=check, user=user)  # synced by shipping, below
        if claim or sync or self.ship_every or _ships(kind, fields):
            self.ship()
        return seq

    def sync(self) -> None:
        """What the executor calls before a tool runs: everything written so far goes to the bucket."""
        super().sync()
        self.ship()

    def finish(self, *args: Any, **kwargs: Any) -> int:
        seq = super().finish(*args, **kwargs)  # the end of the run and its seal: shipped at once
        self.ship()
        return seq

    def append_many(self, records: Iterable[tuple[Any, ...]], *, sync: bool = False) -> int:
        """Several records in one write (a re-execution writes every record so), shipped at the same ship points."""
        batch = list(records)
        claim = self.owes  # this write carries a resume record
        seq = super().append_many(batch)
        if claim or sync or self.ship_every or any(_ships(r[0], r[1]) for r in batch):
            self.ship()
        return seq

    def put_blob(self, data: bytes) -> str:
        """Store data as a blob: in the spool's blobs folder, and on the store before any line names it."""
        from .. import _blobs

        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        name = _blobs.put(_blobs.folder_of(self.spool), data, sync_dir=False)  # what replay() of the spool reads
        store = self.location.blobs()
        try:
            if not store.create(name, data) and _blobs.digest(store.read(f"{store.root}/{name}")) != name:
                store.fs.pipe_file(f"{store.root}/{name}", data)  # an altered copy: replaced by the right bytes
        except Exception as e:
            self._broken = "upload"
            raise JournalError(self.path, f"upload of blob {name} failed: {e}") from None
        self.digests.add(name)
        return name

    def ship(self) -> None:
        """Create the next segment from the spool's bytes not shipped yet (nothing when there are none)."""
        with self._ship_lock:
            if self._broken:
                raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
            # several agents may append at once (Journal.share()): read whole writes, under their lock
            with getattr(self, "_lock", None) or contextlib.nullcontext():
                size = self.size()
                if size == self.shipped:
                    return
                data = os.pread(self.fd, size - self.shipped, self.shipped)
            n = self.next_segment
            self.lease.shipping()  # the first segment of this writer takes the run's lease (store/_lease.py)
            try:
                created = self.location.create(segment_name(n), data)
            except Exception as e:  # the store did not answer: the segment may or may not be there
                self._broken = "upload"
                raise JournalError(self.path, f"upload of segment {segment_name(n)} failed: {e}") from None
            if not created and not self._landed(n, data):
                self._broken = "fence"
                raise FenceLost(self.path, n)
            self.next_segment, self.shipped = n + 1, size
            self.lease.shipped()

    def _landed(self, n: int, data: bytes) -> bool:
        """Whether segment n, found already there, holds exactly data: this writer's own upload, retried.

        A client that retries a PUT whose answer was lost gets 412 for the
        object its first try created. Its lines carry this writer's crc chain
        and timestamps, so another writer's segment is never byte-equal.
        """
        try:
            return self.location.read(f"{self.location.root}/{segment_name(n)}") == data
        except Exception:  # unreadable now: not known to be ours
            return False

    def continue_after(self, seq: int, crc: int, end: int, *args: Any, **kwargs: Any) -> Any:
        if end < self.shipped:  # the segments are immutable: never cut into them
            raise JournalError(self.path, f"cannot continue at byte {end}: segments hold {self.shipped} bytes")
        return super().continue_after(seq, crc, end, *args, **kwargs)

    def close(self) -> None:
        """Ship what is left (the end of the run), then drop the spool; an unshipped tail is lost on a failure."""
        if self.fd < 0:
            return
        try:
            if not self._broken:
                self.ship()
        finally:
            self.lease.release(delete=self._broken != "fence")  # a writer that lost its fence leaves it to the winner
            super().close()
            if SPOOLS.get(self.path) == self.spool:  # another writer of this URL here may have taken over
                del SPOOLS[self.path]
            shutil.rmtree(os.path.dirname(self.spool), ignore_errors=True)


def open_journal(
    path: str | os.PathLike[str],
    *,
    durability: str = "flush",
    redact: Any = None,
    storage_options: dict[str, Any] | None = None,
    **options: Any,
) -> Journal:
    """The writer of the trace at path: a local `Journal`, or a `RemoteJournal` for a URL.

    `redact` and `options` (blob_threshold=...) go to `Journal.open` as it takes them.
    """
    from ._location import is_url

    if is_url(path):
        return RemoteJournal.open_url(
            str(path), durability=durability, redact=redact, storage_options=storage_options, **options
        )
    return Journal.open(path, durability=durability, redact=redact, **options)
