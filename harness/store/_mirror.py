"""A local folder that follows a runs URL: what `harness serve s3://...` shows.

Each run under the URL becomes `<folder>/<run>.jsonl`, the concatenation of
its segments; `sync()` appends the segments that appeared since the last
sync, in order, to the run's file. Segments are immutable and only ever
added, so each file grows exactly as a local trace grows while its writer
appends: the viewer reads, tails and validates it as any trace. A run whose
next segment is missing (a gap) is left as it is until the gap is filled.

`follow()` syncs every `interval` seconds on a daemon thread. The folder is
a temporary one, removed when the process exits; nothing is ever written to
the store.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from typing import Any

from ._location import Location, open_location
from ._runs import run_segments


class Mirror:
    """The local copy of every run under a runs URL. `sync()` brings it up to date."""

    def __init__(self, location: Location, folder: str):
        self.location, self.folder = location, folder
        self.shipped: dict[str, int] = {}  # run file name -> segments copied
        self._stop = threading.Event()

    def sync(self) -> int:
        """Copy the segments added since the last sync; the number copied."""
        copied = 0
        for name, segments in run_segments(self.location).items():
            n = self.shipped.get(name, 0) + 1
            if n not in segments:
                continue
            with open(os.path.join(self.folder, name), "ab") as f:
                while n in segments:
                    f.write(self.location.read(segments[n]))
                    f.flush()  # a whole segment at a time: readers see whole lines
                    self.shipped[name] = n
                    n, copied = n + 1, copied + 1
            self.location.child(name).fetch_blobs(os.path.join(self.folder, name))
        return copied

    def follow(self, interval: float = 1.0) -> threading.Thread:
        """Sync every `interval` seconds on a daemon thread, until stop()."""

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sync()
                except Exception:  # the store did not answer (or a run is odd): try again at the next tick
                    continue

        thread = threading.Thread(target=loop, daemon=True, name="harness-mirror")
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()


def mirror(url: str, *, storage_options: dict[str, Any] | None = None, interval: float = 1.0) -> Mirror:
    """A Mirror of the runs at url in a fresh temporary folder, synced once and then followed."""
    location = open_location(url, storage_options)
    folder = tempfile.mkdtemp(prefix="harness-mirror-")
    atexit.register(shutil.rmtree, folder, True)
    m = Mirror(location, folder)
    m.sync()
    m.follow(interval)
    return m
