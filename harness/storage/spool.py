"""The writer's side of a trace on object storage: a local spool, shipped as segments.

A `Spool` is the local file the journal of a trace URL appends to, and what
has gone up of it. Opening one lists the run's segments and downloads them
into the spool, so the spool starts as exactly the bytes in the bucket; the
journal (trace/remote.py) appends every record to it as to a local trace,
and at its ship points calls `ship()`: the bytes written since the last
segment go up as segment N+1, created only if it does not exist yet. Which
records are ship points is the journal's to say (trace/remote.py).

Liveness: the writer keeps a lease object beside its segments while it is
open, so that a lister can tell a live writer from a dead one (lease.py);
it fences nothing.

Fencing: segment numbers are the fence. A writer that finds its next segment
already there with other bytes (another writer advanced the run; the same
bytes are its own upload, retried by the client) raises FenceLost, refuses
everything after, and leaves nothing behind: no lock to go stale. A failed
upload breaks the writer (whether the segment landed is unknown) and the
run stops; a resume reads the truth from the bucket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from typing import Any

from .._errors import FenceLost, JournalError
from . import blobs as _blobs
from .lease import Lease
from .location import Location, open_location, segment_name

SPOOLS: dict[str, str] = {}  # url -> spool of the writer this process holds: its readers see what it wrote


class Spool:
    """The spool and the shipped segments of the single writer of a trace on object storage. `Spool.open(url)`."""

    __slots__ = ("_ship_lock", "broken", "lease", "location", "next_segment", "path", "shipped")

    def __init__(self, location: Location, lease: Lease, path: str, next_segment: int, shipped: int):
        self.location, self.lease, self.path = location, lease, path
        self.next_segment, self.shipped = next_segment, shipped  # the next segment's number; the bytes shipped
        self.broken: str | None = None  # "upload" or "fence" once one failed: nothing more is shipped
        self._ship_lock = threading.Lock()

    @property
    def url(self) -> str:
        return self.location.url

    @classmethod
    def open(cls, url: str, storage_options: dict[str, Any] | None = None) -> Spool:
        """The spool of the trace at url: its segments downloaded into a fresh local file, blobs beside it."""
        location = open_location(url, storage_options)
        lease = Lease(location)  # ($HARNESS_LEASE_SECONDS checked before anything is made)
        folder = tempfile.mkdtemp(prefix="harness-spool-")
        spool = os.path.join(folder, "trace.jsonl")
        try:
            with open(spool, "wb") as f:
                last, size, _ = location.download(f)  # the last segment number the objects hold
            location.fetch_blobs(spool)  # the blobs its lines name, beside the spool: replay() reads them
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        SPOOLS[location.url] = spool
        return cls(location, lease, spool, last + 1, size)

    def put_blob(self, data: bytes) -> str:
        """Store data as a blob: in the spool's blobs folder, and on the store before any line names it."""
        name = _blobs.put(_blobs.folder_of(self.path), data, sync_dir=False)  # what replay() of the spool reads
        store = self.location.blobs()
        try:
            if not store.create(name, data) and _blobs.digest(store.read(f"{store.root}/{name}")) != name:
                store.fs.pipe_file(f"{store.root}/{name}", data)  # an altered copy: replaced by the right bytes
        except Exception as e:
            self.broken = "upload"
            raise JournalError(self.url, f"upload of blob {name} failed: {e}") from None
        return name

    def ship(self, fd: int, lock: Any = None) -> None:
        """Create the next segment from the spool's bytes not shipped yet (nothing when there are none).

        `fd` is the writer's descriptor on the spool; `lock`, once several
        agents append, the writer's: whole writes are read under it.
        """
        with self._ship_lock:
            if self.broken:
                raise JournalError(self.url, f"an earlier {self.broken} failed; this journal accepts nothing more")
            with lock or contextlib.nullcontext():
                size = os.fstat(fd).st_size
                if size == self.shipped:
                    return
                data = os.pread(fd, size - self.shipped, self.shipped)
            n = self.next_segment
            self.lease.shipping()  # the first segment of this writer takes the run's lease (lease.py)
            try:
                created = self.location.create(segment_name(n), data)
            except Exception as e:  # the store did not answer: the segment may or may not be there
                self.broken = "upload"
                raise JournalError(self.url, f"upload of segment {segment_name(n)} failed: {e}") from None
            if not created and not self._landed(n, data):
                self.broken = "fence"
                raise FenceLost(self.url, n)
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

    def close(self) -> None:
        """Stop the lease and drop the spool (after the writer's last ship); an unshipped tail is lost."""
        try:
            self.lease.release(delete=self.broken != "fence")  # a writer that lost its fence leaves it to the winner
        finally:
            if SPOOLS.get(self.url) == self.path:  # another writer of this URL here may have taken over
                del SPOOLS[self.url]
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)
