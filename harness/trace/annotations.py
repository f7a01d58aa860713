"""Annotations: notes added to a run after the fact, beside its trace and outside its seal.

`annotate(trace, key, value)` appends `{"key", "value", "at"}` to
`TRACE.annotations.json` ({"format": "harness-annotations", "version": 1,
"notes": [...]}), written atomically (a temporary file, fsynced, renamed),
so a reader sees the old notes or the new ones, never half a file. The trace
itself is never touched: annotating a sealed run does not break its seal.
Two annotators racing may lose one note (the last rename wins). A run on
object storage keeps one immutable object per note instead
(`<run>.jsonl/notes/NNNNNN.json`, storage/notes.py): none is lost there.

The file is read as every file beside a trace is (`storage.files.read_beside`):
a regular file inside the run's folder, at most MAX_BYTES; anything else
(a FIFO, a symlink out, a file that is not this format) is a HarnessError
naming the file, and `annotate` then writes nothing.
"""

import os  # no `from __future__ import annotations`: this module's function of that name would shadow it
from datetime import UTC, datetime
from typing import Any

import orjson

from .._errors import HarnessError, TraceUnreadable
from ..storage import exists, is_url
from ..storage.files import read_beside
from .line import check_value

SUFFIX = ".annotations.json"
FORMAT, VERSION = "harness-annotations", 1
MAX_BYTES = 16 << 20  # an annotations file larger than this is refused, never read whole


def annotations_path(trace: str | os.PathLike[str]) -> str:
    """Where the notes on the run at trace are: a file beside it, or for a URL the folder of note objects."""
    if is_url(trace):
        from ..storage.notes import FOLDER

        return f"{str(trace).rstrip('/')}/{FOLDER}/"
    return os.fspath(trace) + SUFFIX


def annotations(trace: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The notes on a run, oldest first ([] when it has none)."""
    if is_url(trace):
        from ..storage.notes import read_notes

        return read_notes(str(trace))
    path = annotations_path(trace)
    try:
        data = read_beside(path, os.path.dirname(os.path.abspath(path)), MAX_BYTES)
    except TraceUnreadable as e:
        raise HarnessError(f"{path}: not a readable annotations file ({e.problem}); fix or remove it") from None
    return [] if data is None else parse(data, path)


def parse(data: bytes, path: str) -> list[dict[str, Any]]:
    """The notes of an annotations file's bytes; HarnessError naming path when they are not such a file."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise HarnessError(f"{path}: not a readable annotations file (not JSON: {e}); fix or remove it") from None
    notes = body.get("notes") if isinstance(body, dict) and body.get("format") == FORMAT else None
    if not isinstance(notes, list) or not all(isinstance(n, dict) and isinstance(n.get("key"), str) for n in notes):
        raise HarnessError(f"{path}: not a {FORMAT} file (as `harness annotate` writes it); fix or remove it")
    return notes


def annotate(trace: str | os.PathLike[str], key: str, value: Any) -> dict[str, Any]:
    """Add a note `key: value` (any JSON value) to the run at `trace`; returns the note."""
    from ..storage.blobs import write_atomically

    path = os.fspath(trace)
    if is_url(path):
        if not exists(path):
            raise TraceUnreadable(path, "no such trace on the store; nothing was written")
    elif not os.path.isfile(path):
        raise HarnessError(f"{path}: no such trace file; nothing was written")
    if not isinstance(key, str) or not key:
        raise HarnessError(f"{path}: an annotation needs a non-empty str key, not {key!r}")
    check_value("value", value)
    note = {"key": key, "value": value, "at": datetime.now(UTC).isoformat(timespec="milliseconds")}
    if is_url(path):  # one immutable object per note, beside the segments (storage/notes.py)
        from ..storage.notes import add_note

        add_note(path, note)
        return note
    notes = annotations(path)
    notes.append(note)
    body = {"format": FORMAT, "version": VERSION, "notes": notes}
    try:
        write_atomically(annotations_path(path), orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    except OSError as e:
        raise HarnessError(
            f"{annotations_path(path)}: cannot write ({e.strerror}); the notes are as they were"
        ) from None
    return note
