"""The journal of a trace on object storage, and `open_journal(path)`, which picks the journal for a path.

`RemoteJournal` is a `Journal` whose file is the local spool of a
`storage.spool.Spool` and whose `path` is the trace's URL: every record is
appended to the spool as a local trace's would be (the same encoding, chain
and redaction), and at the ship points the bytes written since the last
segment go up as the next segment (`Spool.ship()`, fenced by the store's
conditional create: storage/spool.py).

Ship points (a segment holds whole lines only):
- a record written with sync=True, and `sync()`: the header, a tool's intent
  (a declared tool's; every tool's with durability="fsync"), a reconcile
  record: on the bucket before the tool runs;
- a step's checkpoint record: an acknowledged checkpoint;
- a `resume` record (written with the resumed run's first record, see
  Journal.owe()): the resuming writer claims the run at once;
- the end of the run (DONE, FAILED, PAUSED, with its seal: `finish()`) and close();
- with durability="fsync", every write.

A failed upload or a lost fence (FenceLost) breaks the journal: it accepts
nothing more, and the run stops; a resume reads the truth from the bucket.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

from .._errors import JournalError
from ..storage import is_url
from . import state as S
from .journal import Journal

if TYPE_CHECKING:
    from ..storage.spool import Spool

_SHIP_KINDS = frozenset({"header", "checkpoint", "resume", "reconcile", "seal"})
_SHIP_STATES = frozenset({S.DONE, S.FAILED, S.PAUSED})


def _ships(kind: str, fields: dict[str, Any]) -> bool:
    """Whether a record of this kind is a ship point of its own (see the module docstring)."""
    return kind in _SHIP_KINDS or (kind == "transition" and fields.get("to") in _SHIP_STATES)


class RemoteJournal(Journal):
    """The single writer of a trace on object storage. Open with `RemoteJournal.open_url()`."""

    __slots__ = ("remote", "ship_every")

    remote: Spool
    ship_every: bool

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
        from ..storage.spool import Spool  # (with shutil, tempfile and socket: for a URL only, not every local run)

        remote = Spool.open(url, storage_options)
        try:  # the spool itself needs no fsync: the bucket is the durable copy
            journal = cast(RemoteJournal, cls.open(remote.path, redact=redact, **options))
        except BaseException:
            remote.close()
            raise
        journal.path, journal.remote = remote.url, remote
        journal.keeper = None  # (a sidecar beside the spool dies with it: on a bucket a secret is redacted only)
        journal.ship_every = durability == "fsync"
        return journal

    @property
    def spool(self) -> str:
        """The local file this journal appends to."""
        return self.remote.path

    @property
    def next_segment(self) -> int:
        """The number of the next segment to ship."""
        return self.remote.next_segment

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
        with self._remote():
            name = self.remote.put_blob(data)
        self.digests.add(name)
        return name

    def ship(self) -> None:
        """Create the next segment from the spool's bytes not shipped yet (nothing when there are none)."""
        with self._remote():
            # several agents may append at once (Journal.share()): whole writes are read under their lock
            self.remote.ship(self.fd, self._lock)

    @contextlib.contextmanager
    def _remote(self) -> Iterator[None]:
        """Around a call to the store: refused once the journal is broken; a failed upload or fence breaks it."""
        if self._broken:
            raise JournalError(self.path, f"an earlier {self._broken} failed; this journal accepts nothing more")
        try:
            yield
        finally:
            self._broken = self._broken or self.remote.broken

    def continue_after(self, seq: int, crc: int, end: int, *args: Any, **kwargs: Any) -> Any:
        if end < self.remote.shipped:  # the segments are immutable: never cut into them
            raise JournalError(self.path, f"cannot continue at byte {end}: segments hold {self.remote.shipped} bytes")
        return super().continue_after(seq, crc, end, *args, **kwargs)

    def close(self) -> None:
        """Ship what is left (the end of the run), then drop the spool; an unshipped tail is lost on a failure."""
        if self.fd < 0:
            return
        try:
            if not self._broken:
                self.ship()
        finally:
            try:
                super().close()
            finally:
                self.remote.close()


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
    if is_url(path):
        return RemoteJournal.open_url(
            str(path), durability=durability, redact=redact, storage_options=storage_options, **options
        )
    return Journal.open(path, durability=durability, redact=redact, **options)
