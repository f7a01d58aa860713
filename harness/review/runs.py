"""List the runs in a runs folder, reading only the two ends of each trace.

For each `*.jsonl` file: the header line (id, entrypoint, start time,
parent) and the last complete line (record count from its seq, end time,
terminal state) are read; nothing in between. Only regular files are read
(a FIFO or device named `*.jsonl` is listed as `unreadable`, never waited
on), and a read error lists that one file as `unreadable`. So listing stays fast with
thousands of runs, and it validates nothing: `harness replay` does that.

Status: `done` / `failed` from the last record (a transition into DONE or
FAILED, a Recorder's `end`, or the seal after either); otherwise `running` when a live writer holds
the trace's lock, else `paused` (waiting for an operator: last record a
transition into PAUSED, its reconcile or answer) or `interrupted` (the
writer is gone without a terminal record: a crash, a kill). `detail` says
more, from the same last line: why a run failed or crashed (a `crash`
record), the question a paused run waits on, that it waits for an
operator's reconcile, or for a larger budget. A file whose header cannot be read is listed as
`unreadable` rather than stopping the listing.

A live writer is seen in /proc/locks (Linux), which takes no lock and so
can never make a writer opening the trace at that instant fail. Elsewhere a
shared flock is tried without waiting and dropped at once.

A runs URL on object storage (`list_runs_url`): one recursive listing finds
every run (storage/listing.py); for each, the first line of segment 1 (the
header) and the last line of the last segment are read with ranged reads,
as for the two ends of a file. Status as for a local folder, except that a
store has no lock to see: a run without a terminal record is `running`
while its writer's lease is fresh, else `paused` or `interrupted`.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from .._errors import TraceUnreadable
from ..runtime.fingerprint import status as code_status
from ..storage import runs_dir
from ..storage.blobs import FOLDER
from ..storage.files import open_regular
from ..storage.listing import Found, _fresh, _runs
from ..storage.location import cover, is_url, open_location
from ..trace.line import HEADER_START, MAX_LINE, line_ok
from ..trace.reader import wall_clock

_HEAD = 64 * 1024
_TAIL = 8 * 1024


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run of a runs folder, as `harness runs` shows it."""

    id: str
    path: str
    entrypoint: str | None
    status: str
    started: datetime | None
    ended: datetime | None
    records: int
    parent: str | None = None
    branch: int | None = None
    detail: str | None = None  # why it stands there: a crash, a question, a failure (see _detail)
    code: str | None = None  # "same" or "changed": its header's code fingerprint against today's files (None: none)

    def to_json(self) -> dict[str, Any]:
        """The run as JSON values. A file name that is not UTF-8 shows each undecodable byte as `\\xNN`."""
        return {
            "id": shown(self.id),
            "entrypoint": self.entrypoint,
            "status": self.status,
            "started": _iso(self.started),
            "ended": _iso(self.ended),
            "records": self.records,
            "parent": self.parent,
            "branch": self.branch,
            "path": shown(self.path),
            "detail": self.detail,
            "code": self.code,
        }


def shown(name: str) -> str:
    """A file name as valid UTF-8 text: the bytes os.fsdecode() could not decode become `\\xNN` escapes.

    `run-\\xff.jsonl` (backslash, x, two hex digits) stands for a name holding
    the byte 0xff; a name that is valid UTF-8 is returned as it is.
    """
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def list_runs(folder: str | os.PathLike[str] | None = None, *, recursive: bool = False) -> list[RunInfo]:
    """The runs in `folder` (see runs_dir()), oldest first; with `recursive`, those in its subfolders too.

    A subfolder is entered only as a folder, never through a symlink (no
    loop, no way out of the runs folder); one whose name starts with a dot
    (an import's staging folder) and the `blobs` folders are skipped. A
    subfolder that cannot be listed is skipped too; the folder itself must be.
    """
    path = runs_dir(folder)
    if is_url(path):  # a runs URL on object storage
        return list_runs_url(path)
    try:
        paths = _traces(path, recursive)
    except FileNotFoundError:
        raise TraceUnreadable(path, "no such runs folder") from None
    except NotADirectoryError:
        raise TraceUnreadable(path, "is not a folder") from None
    except OSError as e:
        raise TraceUnreadable(path, f"cannot list: {e.strerror}") from None
    locked = _flocked()
    runs = [run_info(p, locked) for p in paths]
    runs.sort(key=lambda r: (r.started is None, r.started or datetime.min.replace(tzinfo=UTC), r.id))
    return runs


def _traces(folder: str, recursive: bool) -> list[str]:
    """The `*.jsonl` files in folder (and, recursive, in its subfolders, as list_runs() says)."""
    out, todo = [], [folder]
    while todo:
        where = todo.pop()
        try:
            entries = list(os.scandir(where))
        except OSError:
            if where == folder:
                raise
            continue
        for e in entries:
            if e.name.endswith(".jsonl") and e.is_file():
                out.append(os.path.join(where, e.name))
            elif recursive and not e.name.startswith(".") and e.name != FOLDER and e.is_dir(follow_symlinks=False):
                todo.append(os.path.join(where, e.name))
    return out


def run_info(path: str, locked: set[tuple[int, int, int]] | None = None) -> RunInfo:
    """What the two ends of the trace at `path` say about its run.

    `locked`: the files held by a writer, from `_flocked()`; None to probe the lock.
    """
    fallback = os.path.basename(path).removesuffix(".jsonl")
    try:
        fd = open_regular(path)  # a FIFO or a device is refused before any read, never waited on
    except TraceUnreadable:
        return RunInfo(fallback, path, None, "unreadable", None, None, 0)
    try:
        return _info(fd, path, fallback, locked)
    except OSError:  # a read error (EIO) on this one file: listed, not fatal to the listing
        return RunInfo(fallback, path, None, "unreadable", None, None, 0)
    finally:
        os.close(fd)


def _info(fd: int, path: str, fallback: str, locked: set[tuple[int, int, int]] | None) -> RunInfo:
    """What the two ends of an open trace say (see run_info())."""
    size = os.fstat(fd).st_size
    header = _header(fd)
    if header is None:
        head = os.pread(fd, _HEAD, 0)
        torn = HEADER_START.startswith(head[: len(HEADER_START)]) and b"\n" not in head  # died writing it
        status = "running" if _locked(fd, locked) else "interrupted" if torn else "unreadable"
        return RunInfo(fallback, path, None, status, None, None, 0)
    last = _last(fd, size) or header
    env = header.get("env")
    status = _terminal(last) or ("running" if _locked(fd, locked) else _waiting(last))
    ended = _time(wall_clock(header, last)) if status in ("done", "failed") else None
    parent, branch = header.get("parent"), header.get("branch")
    return RunInfo(
        id=str(header.get("run_id", fallback)),
        path=path,
        entrypoint=env.get("entrypoint") if isinstance(env, dict) else None,
        status=status,
        started=_time(header.get("ts")),
        ended=ended,
        records=last["seq"] if type(last.get("seq")) is int else 1,
        parent=parent if isinstance(parent, str) else None,
        branch=branch if type(branch) is int else None,
        detail=_detail(last),
        code=code_status(env.get("code"), env.get("cwd")) if isinstance(env, dict) else None,
    )


def _header(fd: int) -> dict[str, Any] | None:
    """The first line, when it is a header whose crc checks; else None."""
    data, n = b"", _HEAD
    while True:
        data = os.pread(fd, n, 0)
        end = data.find(b"\n")
        if end >= 0 or len(data) < n or n > MAX_LINE:
            break
        n *= 4
    return header_line(data[:end]) if end >= 0 else None


def header_line(line: bytes) -> dict[str, Any] | None:
    """The header a trace's first line (without its newline) holds, when its crc checks; else None."""
    if not line_ok(line, 0):
        return None
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) and rec.get("kind") == "header" and rec.get("seq") == 1 else None


def _last(fd: int, size: int) -> dict[str, Any] | None:
    """The last complete line (a torn tail after it is ignored), parsed; None if there is none."""
    n = _TAIL
    while True:
        start = max(0, size - n)
        data = os.pread(fd, size - start, start)
        end = data.rfind(b"\n")
        if end < 0:
            if start == 0 or n > MAX_LINE:
                return None
            n *= 4
            continue
        begin = data.rfind(b"\n", 0, end) + 1
        if begin > 0 or start == 0:
            try:
                rec = orjson.loads(data[begin:end])
            except orjson.JSONDecodeError:
                return None
            return rec if isinstance(rec, dict) else None
        if n > MAX_LINE:
            return None
        n *= 4


def _terminal(last: dict[str, Any]) -> str | None:
    kind = last.get("kind")
    if kind == "seal" and last.get("state") in ("DONE", "FAILED"):
        return "done" if last["state"] == "DONE" else "failed"
    if kind == "end":
        return "done" if last.get("status") == "success" else "failed"
    if kind == "transition" and last.get("to") in ("DONE", "FAILED"):
        return "done" if last["to"] == "DONE" else "failed"
    return None


def _waiting(last: dict[str, Any]) -> str:
    kind = last.get("kind")
    if kind in ("reconcile", "answer") or (kind == "transition" and last.get("to") == "PAUSED"):
        return "paused"
    return "interrupted"


def _detail(last: dict[str, Any]) -> str | None:
    """A few words on why the run stands where its last record leaves it."""
    kind, error = last.get("kind"), last.get("error")
    said = f"{error.get('type')}: {error.get('message')}" if isinstance(error, dict) else None
    if kind == "crash":
        return f"crashed in {last.get('state')}: {said}"
    if kind == "transition" and last.get("to") == "PAUSED":
        if "question" in last:
            return f"waiting for an answer: {_short(last['question'])}"
        if last.get("reason") == "budget" and isinstance(last.get("budget"), dict):
            what = last["budget"].get("exceeded")
            return f"paused on its budget ({what}): resume it with a larger one"
        return f"uncertain operation ({said}): reconcile it" if said else "uncertain operation: reconcile it"
    if kind == "transition" and last.get("to") == "FAILED":
        return said
    if kind == "reconcile":
        return "reconciled: resume it"
    if kind == "answer":
        return "answered: resume it"
    return None


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= width else text[: width - 3] + "..."


def _flocked() -> set[tuple[int, int, int]] | None:
    """(major, minor, inode) of every file under an exclusive flock, or None without /proc/locks."""
    try:
        with open("/proc/locks") as f:
            text = f.read()
    except OSError:
        return None
    held = set()
    for line in text.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 18764 fe:00:2181361 0 EOF"; waiters read "1: -> FLOCK ..."
        parts = line.split()
        if len(parts) > 5 and parts[1] == "FLOCK" and parts[3] == "WRITE":
            major, minor, inode = parts[5].split(":")
            held.add((int(major, 16), int(minor, 16), int(inode)))
    return held


def _locked(fd: int, held: set[tuple[int, int, int]] | None) -> bool:
    """Whether a live writer holds the trace."""
    if held is not None:
        st = os.fstat(fd)
        return (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino) in held
    try:  # no /proc/locks: a shared flock, tried without waiting, is refused while a writer holds it
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without flock: we cannot tell
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _time(ts: Any) -> datetime | None:
    """The wall-clock time ts (seconds since the epoch) stands for; None when it is none, or no date can hold it."""
    if type(ts) is float or type(ts) is int:
        try:
            return datetime.fromtimestamp(ts, UTC)
        except (OverflowError, OSError, ValueError):  # 1e20, nan: listed with no time, never a crash of the listing
            return None
    return None


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z") if t is not None else None


# --- a runs URL on object storage: the same two ends, read from its segment objects ---


def list_runs_url(url: str, *, storage_options: dict[str, Any] | None = None) -> list[RunInfo]:
    """The runs under url, oldest first."""
    location = open_location(url, storage_options)
    runs, alive = _runs(location)
    if not runs and not location.fs.exists(location.root):
        raise TraceUnreadable(location.url, "no such runs folder on the store")
    live = _fresh(alive)
    infos = [_url_info(location, name, segs, name in live) for name, segs in runs.items()]
    infos.sort(key=lambda r: (r.started is None, r.started or datetime.min.replace(tzinfo=UTC), r.id))
    return infos


def _url_info(location: Any, name: str, found: Found, live: bool) -> RunInfo:
    url = f"{location.url}/{name}"
    fallback = name.removesuffix(".jsonl")
    held = cover(url, found, strict=False)  # the objects a reader reads: a planted span beside segments is not one
    header = _first_line(location, held[0][1]) if held else None
    if header is None:
        return RunInfo(fallback, url, None, "unreadable", None, None, 0)
    last = _last_line(location, held[-1][1]) or header
    env = header.get("env")
    status = _terminal(last) or ("running" if live else _waiting(last))
    parent, branch = header.get("parent"), header.get("branch")
    return RunInfo(
        id=str(header.get("run_id", fallback)), path=url,
        entrypoint=env.get("entrypoint") if isinstance(env, dict) else None,
        status=status, started=_time(header.get("ts")),
        ended=_time(wall_clock(header, last)) if status in ("done", "failed") else None,
        records=last["seq"] if type(last.get("seq")) is int else 1,
        parent=parent if isinstance(parent, str) else None,
        branch=branch if type(branch) is int else None,
        detail=None if status == "running" else _detail(last),
    )  # fmt: skip


def _first_line(location: Any, path: str) -> dict[str, Any] | None:
    try:
        data = location.read(path, 0, _HEAD)
        end = data.find(b"\n")
        if end < 0:
            data = location.read(path)
            end = data.find(b"\n")
    except TraceUnreadable:
        return None
    return header_line(data[:end]) if end >= 0 else None


def _last_line(location: Any, path: str) -> dict[str, Any] | None:
    try:
        data = location.read(path, -_TAIL, None)
        if data.count(b"\n") < 2 and len(data) >= _TAIL:  # a long last line: read the whole segment
            data = location.read(path)
    except TraceUnreadable:
        return None
    lines = data.rstrip(b"\n").rsplit(b"\n", 1)
    try:
        rec = orjson.loads(lines[-1])
    except orjson.JSONDecodeError:
        return None
    return rec if isinstance(rec, dict) else None
