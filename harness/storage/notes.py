"""Notes on a run on object storage: one immutable object per note, numbered, beside the run's segments.

A note on the run at `<runs>/<run>.jsonl` is the object
`<run>.jsonl/notes/NNNNNN.json` holding `{"key", "value", "at"}` (what one
entry of a local `TRACE.annotations.json` holds). Notes are outside the
trace and its seal, as a local annotations file is: a seal vouches that
nothing follows it, so a note cannot be a segment of the trace. Like a
segment, a note is created with the store's conditional create and never
rewritten; an annotator that finds its number taken (another annotator got
there first) takes the next one, so two annotators racing both keep their
note. Readers list the notes and read them in number order.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from .._errors import HarnessError, TraceUnreadable
from .location import Location, open_location

FOLDER = "notes"
_NOTE = re.compile(r"^(\d{6,})\.json$")
_TRIES = 100  # numbers taken one after the other by racing annotators before giving up


def _notes(url: str, storage_options: dict[str, Any] | None) -> tuple[Location, list[tuple[int, str]]]:
    folder = open_location(url, storage_options).child(FOLDER)
    found = []
    for path in folder.listing():
        m = _NOTE.match(path.rstrip("/").rsplit("/", 1)[-1])
        if m:
            found.append((int(m[1]), path))
    return folder, sorted(found)


def read_notes(url: str, *, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The notes on the run at url, oldest first ([] when it has none)."""
    folder, found = _notes(url, storage_options)
    notes = []
    for _, path in found:
        try:
            note = orjson.loads(folder.read(path))
        except orjson.JSONDecodeError as e:
            raise HarnessError(f"{folder.url}/{path.rsplit('/', 1)[-1]}: not a harness note ({e}); remove it") from None
        if not isinstance(note, dict) or "key" not in note:
            raise HarnessError(f"{folder.url}/{path.rsplit('/', 1)[-1]}: not a harness note; remove it")
        notes.append(note)
    return notes


def add_note(url: str, note: dict[str, Any], *, storage_options: dict[str, Any] | None = None) -> str:
    """Create the next note object of the run at url holding note; its URL."""
    folder, found = _notes(url, storage_options)
    data = orjson.dumps(note) + b"\n"
    n = found[-1][0] + 1 if found else 1
    for _ in range(_TRIES):
        name = f"{n:06d}.json"
        try:
            if folder.create(name, data):
                return f"{folder.url}/{name}"
        except OSError as e:
            raise TraceUnreadable(url, f"cannot write note {name}: {e}; the notes are as they were") from None
        n += 1  # another annotator took this number: the next one
    raise HarnessError(f"{url}: {_TRIES} note numbers taken one after the other; the notes are as they were, try again")
