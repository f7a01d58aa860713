"""A local folder that follows a runs URL: what `harness serve s3://...` shows.

Each run under the URL becomes `<folder>/<run>.jsonl`, the concatenation of
its segments; `sync()` appends the segments that appeared since the last
sync, in order, to the run's file. Segments are immutable and only ever
added, so each file grows exactly as a local trace grows while its writer
appends: the viewer reads, tails and validates it as any trace. A run whose
next segment is missing (a gap) is left as it is until the gap is filled.
A compacted span (`harness compact`) holds the same bytes as the segments it
replaced: it is read whole, checked against what was copied of them (and
against what is left of them, `span_problem`), and only its rest appended;
a span that does not agree is never appended. While
a run's writer keeps its lease fresh (lease.py), the mirror holds the lock
of the run's copy, so the viewer lists it `running`, as a local live run.

`follow()` syncs every `interval` seconds on a daemon thread. The folder is
a temporary one, removed when the process exits; nothing is ever written to
the store.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import shutil
import tempfile
import threading
from typing import Any

from .._errors import internal
from .listing import live_runs
from .location import Location, object_name, open_location, segment_span, span_problem

log = logging.getLogger(__name__)


class Mirror:
    """The local copy of every run under a runs URL. `sync()` brings it up to date."""

    def __init__(self, location: Location, folder: str):
        self.location, self.folder = location, folder
        self.shipped: dict[str, int] = {}  # run file name -> bytes copied (whole segments)
        self.ends: dict[str, dict[int, int]] = {}  # run file name -> {segment: byte where it ends in our copy}
        self.held: dict[str, int] = {}  # run file name -> descriptor holding its copy's lock while its writer lives
        self._stop = threading.Event()

    def sync(self) -> int:
        """Copy the segments added since the last sync; the number copied."""
        copied = 0
        runs, live, found = live_runs(self.location)
        for name, objects in runs.items():
            size = self.shipped.get(name, 0)  # bytes copied: a segment boundary, never inside a line
            ends = self.ends.setdefault(name, {})
            path = os.path.join(self.folder, name)
            new = False
            with open(path, "ab") as f:
                for first, source in objects:
                    last = self._last(source)
                    if last in ends and ends[last] <= size:
                        continue  # copied already (or a compacted span of segments copied already)
                    start = 0 if first == 1 else ends.get(first - 1)  # where this object's bytes begin in ours
                    if start is None or start > size:
                        break  # an object we cannot place yet: wait for the next sync
                    data = self.location.read(source)
                    if last > first:  # a span: read whole and checked, then only its rest appended
                        try:
                            why = span_problem(self.location, source, data, found.get(name, []))
                        except FileNotFoundError:  # compacted meanwhile: the next sync lists again
                            break
                        if why is None and size > start and not _starts_as(path, start, data[: size - start]):
                            why = f"{object_name(source)} does not start with the bytes copied from its segments"
                        if why is not None:
                            break  # never appended: the run stays as copied (a reader of the URL is refused too)
                    if size > start:
                        data = data[size - start :]  # what is not copied yet
                    f.write(data)
                    f.flush()  # a whole object at a time: readers see whole lines
                    size, new, copied = size + len(data), True, copied + 1
                    ends[last] = size
                    self.shipped[name] = size
            if new:
                self.location.child(name).fetch_blobs(path)
        self._hold(live & set(runs))
        return copied

    def _hold(self, live: set[str]) -> None:
        """Hold the lock of the copy of each run whose writer's lease is fresh, and only those.

        A local listing (the viewer's) calls a trace whose lock is held
        `running`: so the page shows a live writer on the store as it shows a
        local one, and `interrupted` once its lease goes stale.
        """
        for name in set(self.held) - live:
            os.close(self.held.pop(name))  # also releases the lock
        for name in live - set(self.held):
            fd = os.open(os.path.join(self.folder, name), os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held already (another mirror of this folder?): leave it
                os.close(fd)
                continue
            self.held[name] = fd

    @staticmethod
    def _last(source: str) -> int:
        span = segment_span(source.rstrip("/").rsplit("/", 1)[-1])
        if span is None:  # run_segments gives segment objects only
            raise internal(f"{source} is not a segment object")
        return span[1]

    def follow(self, interval: float = 1.0) -> threading.Thread:
        """Sync every `interval` seconds on a daemon thread, until stop()."""

        def loop() -> None:
            said = ""  # the failure logged last: a store that stays down is said once, not every tick
            while not self._stop.wait(interval):
                try:
                    self.sync()
                    said = ""
                except Exception as e:  # the store did not answer (or a run is odd): logged, tried again next tick
                    what = f"{type(e).__name__}: {e}"
                    if what != said:
                        url = self.location.url
                        log.warning("%s: following it failed, trying again every %g s: %s", url, interval, what)
                    said = what

        thread = threading.Thread(target=loop, daemon=True, name="harness-mirror")
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()


def _starts_as(path: str, start: int, data: bytes) -> bool:
    """Whether the file at path holds data from byte start on (what was copied of the segments a span holds)."""
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(len(data)) == data


def mirror(url: str, *, storage_options: dict[str, Any] | None = None, interval: float = 1.0) -> Mirror:
    """A Mirror of the runs at url in a fresh temporary folder, synced once and then followed."""
    location = open_location(url, storage_options)
    folder = tempfile.mkdtemp(prefix="harness-mirror-")
    atexit.register(shutil.rmtree, folder, True)
    m = Mirror(location, folder)
    m.sync()
    m.follow(interval)
    return m
