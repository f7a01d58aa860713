"""Put a whole trace made locally on object storage as a new run: its blobs, then its bytes as segment 1.

Some traces are made whole before they go anywhere: an imported bundle's
runs, a migrated copy, the new trace of a rerun or a fork. `publish(file,
url)` places one under a trace URL: first every blob its lines name goes to
`<runs>/blobs/<sha256>` (created only if absent; one already there must hold
bytes that hash to its name), then the trace's bytes become the run's
segment `000001.seg`, created with the store's conditional create. So the
run appears whole or not at all, a reader never sees a line before the
blobs it names, and a run already at that URL (or one another writer
created meanwhile) is never overwritten: `TraceExists`, nothing of the
trace written (blobs already placed are content-addressed and harmless).
Segments hold whole lines, so a file that ends in a torn line is refused.
"""

from __future__ import annotations

import os
from typing import Any

from .._errors import HarnessError, TraceExists, TraceUnreadable
from . import blobs as _blobs
from .files import read_beside
from .location import blob_names, open_location, segment_name


def publish(
    trace_file: str,
    url: str,
    *,
    blobs: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> int:
    """Place the local trace_file at the trace URL url as a new run; the bytes placed.

    `blobs`: the local folder holding the blobs it names (default: the one
    beside trace_file). HarnessError naming a blob that is missing or whose
    bytes are altered, before anything of the trace is written.
    """
    url = url.rstrip("/")
    location = open_location(url, storage_options)
    if location.segments():
        raise TraceExists(url)
    with open(trace_file, "rb") as f:
        data = f.read()
    if not data.endswith(b"\n"):
        why = "ends in a torn line (a segment holds whole lines); nothing was written"
        raise HarnessError(f"{url}: the trace to place {why}")
    folder = blobs if blobs is not None else _blobs.folder_of(trace_file)
    blobs_wanted = [(name, os.path.join(folder, name)) for name in blob_names(trace_file)]
    place_blobs(url.rsplit("/", 1)[0], blobs_wanted, storage_options)
    try:
        created = location.create(segment_name(1), data)
    except OSError as e:
        raise HarnessError(f"{url}: cannot create its first segment: {e}; the run is not there") from None
    if not created:  # another writer created the run since the check above
        raise TraceExists(url)
    return len(data)


def place_blobs(runs: str, blobs: list[tuple[str, str]], storage_options: dict[str, Any] | None = None) -> int:
    """Create each (sha256 name, local file) in `<runs>/blobs` (runs: a runs URL); how many were created.

    A blob already there is kept when its bytes hash to its name, else it is
    replaced by the right bytes (a blob's name says what it must hold).
    """
    url = runs.rstrip("/")
    store = open_location(url, storage_options).child(_blobs.FOLDER)
    created = 0
    for name, path in blobs:
        try:  # as every file beside a trace: a regular file inside the runs folder (the blobs folder's parent)
            data = read_beside(path, os.path.dirname(os.path.dirname(os.path.abspath(path))))
        except HarnessError as e:
            raise HarnessError(f"{url}: blob {name} cannot be read ({e}); nothing of the trace was written") from None
        if data is None:
            raise HarnessError(f"{url}: blob {name} is not in {os.path.dirname(path)}; "
                               "nothing of the trace was written")  # fmt: skip
        if _blobs.digest(data) != name:
            raise HarnessError(f"{path}: its bytes do not hash to its name; nothing of the trace was written")
        try:
            if store.create(name, data):
                created += 1
                continue
            try:
                same = _blobs.digest(store.read(f"{store.root}/{name}")) == name
            except TraceUnreadable:
                same = False
            if not same:
                store.fs.pipe_file(f"{store.root}/{name}", data)  # an altered copy: replaced by the right bytes
        except OSError as e:
            raise HarnessError(f"{url}: cannot store blob {name}: {e}; nothing of the trace was written") from None
    return created
