"""A live writer's sign of life on object storage: how `harness runs URL` tells `running` from `interrupted`.

A store has no lock a lister could see, and the newest segment alone cannot
say it: a writer inside a long tool call ships nothing for minutes, and a
writer that paused or crashed cleanly shipped its last segment a moment
ago. So a writer keeps a lease object, `<run>.jsonl/lease`:

- it is written (one PUT) just before the writer's first segment, and
  deleted when the writer closes (a DELETE; S3 does not charge for it);
- while the writer is open, a daemon thread renews it every EVERY seconds
  (`$HARNESS_LEASE_SECONDS`, 30 by default), but only when no segment was
  shipped in the last EVERY seconds: a shipped segment is itself a sign of
  life, so a busy run costs no renewal, an idle one one PUT per EVERY
  seconds (120 an hour with the default);
- a lister calls a run without a terminal record `running` when its lease
  is there and the newer of the lease and the last segment was modified
  less than STALE = 3 x EVERY seconds ago, by the store's clock against the
  lister's (clocks that disagree by more than a few seconds skew this).

A writer killed with SIGKILL leaves its lease, which goes stale: the run
shows `running` for at most STALE seconds, then `interrupted`. The lease
decides nothing else: it is no lock, the fence is still the segment numbers,
and a resume neither reads nor waits for it. The writer that lost its fence
leaves the lease to the one that won.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from datetime import datetime
from typing import Any

import orjson

from .._errors import HarnessError
from .location import Location

NAME = "lease"
ENV = "HARNESS_LEASE_SECONDS"
EVERY = 30.0  # seconds between renewals of an idle writer's lease
STALE_FACTOR = 3  # a lease older than this many renewal periods: its writer is gone


def every() -> float:
    """The renewal period: $HARNESS_LEASE_SECONDS, else 30 seconds. Writers and listers must agree on it."""
    text = os.environ.get(ENV)
    if not text:
        return EVERY
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise HarnessError(f"${ENV}={text!r}: give the seconds between lease renewals, a number above 0")
    return value


def modified(detail: dict[str, Any]) -> float | None:
    """When the object fsspec describes with detail was last written (seconds since the epoch), if it says."""
    value = detail.get("LastModified", detail.get("mtime", detail.get("last_modified")))
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    return None


class Lease:
    """The lease of one writer of the trace at location."""

    def __init__(self, location: Location, interval: float | None = None):
        self.location = location
        self.interval = interval if interval is not None else every()
        self.writer = uuid.uuid4().hex
        self.last = 0.0  # time.monotonic() of the last sign of life given (a renewal or a segment)
        self.written = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def renew(self) -> None:
        """Write the lease now (errors ignored: a lease is advisory; the run's own writes say if the store is down)."""
        body = {"writer": self.writer, "host": socket.gethostname(), "pid": os.getpid(), "renewed": time.time()}
        with contextlib.suppress(Exception):  # advisory: the run's own writes say if the store is down
            self.location.fs.pipe_file(f"{self.location.root}/{NAME}", orjson.dumps({**body, "every": self.interval}))
            self.written = True
        self.last = time.monotonic()

    def shipping(self) -> None:
        """Called before each segment is created: the first one takes the lease and starts its renewals."""
        if self._thread is None:
            self.renew()
            self._thread = threading.Thread(target=self._loop, daemon=True, name="harness-lease")
            self._thread.start()

    def shipped(self) -> None:
        """Called after a segment was created: a sign of life of its own."""
        self.last = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval / 2):  # checked twice a period: renewed at most 1.5 periods apart
            if time.monotonic() - self.last >= self.interval:
                self.renew()

    def release(self, *, delete: bool) -> None:
        """Stop renewing; delete the lease when this writer ends cleanly (not when it lost its fence)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if delete and self.written:
            with contextlib.suppress(Exception):  # a lease left behind goes stale: readers see a run not live
                self.location.fs.rm_file(f"{self.location.root}/{NAME}")
