"""Upgrade a trace written by an older schema, in place, with a backup beside it.

`migrate(trace)` reads the old trace (its checksum chain must hold),
applies the numbered migrations in `MIGRATIONS` one schema at a time,
writes the result to a temporary file in the same folder, checks it with
`replay()`, and only then copies the original to
`TRACE.v<old>-backup-<UTC timestamp>` and renames the migrated trace into
place. The rename is atomic: a migration that fails or is killed at any
point leaves the original byte-identical; a refused one leaves nothing
beside it (neither temporary file nor backup), a killed one may leave its
temporary file, named `.TRACE.*.tmp`.

Rules kept here:
- payloads, results, errors and request hashes are copied as they are
  (timestamps are only respelled: seconds since the header's, as schema 2
  writes them, and so is a first attempt's `attempt`); a migration moves
  and renumbers records, it never edits what a record says happened to make
  an old trace replay;
- the checksum chain is computed again (it covers the bytes, which change);
- a torn tail is not migrated: it stays in the backup, and the report says so.

With `out=` the migrated trace goes to a new trace there (a path, or a URL
where it becomes a new run's first segment) and the original, untouched, is
the backup. A trace on object storage is only migrated so: its segments are
immutable, and readers may be reading them. The `.torn-N` files the trace
names (torn tails a resume set aside) go with it, beside the new trace
under the names its records give them, never over another file; a run on
object storage keeps none, so such a trace is migrated to a local path only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from .._errors import HarnessError, TraceCorruption
from ..storage import blobs as _blobs
from ..storage import exists, is_url, local_copy
from ..storage.files import read_beside
from ..storage.location import blob_names
from ..storage.publish import publish
from .journal import Journal
from .line import SCHEMA, encode, line_ok

Records = list[dict[str, Any]]


def _1_to_2(records: Records, path: str) -> Records:
    """Schema 1 -> 2: a step's VERIFY -> CHECKPOINT, checkpoint and CHECKPOINT -> PLAN become one checkpoint record.

    The new record vouches for the result just before it instead of copying
    it; seqs are renumbered, and the seqs that
    records point to (a reconcile's `op`, a fork's `branch`) follow them. A
    first attempt's transitions lose `"attempt": 1`, and every `ts` but the
    header's becomes seconds since the header's. A record it cannot read (a
    field missing or of another type) is TraceCorruption naming its line.
    """
    at = [1]  # the line being read, for the error
    try:
        return _merge_steps(records, path, at)
    except (KeyError, TypeError, ValueError) as e:
        why = f"a record without a valid {e} field; cannot migrate, nothing was changed"
        raise TraceCorruption(path, at[0], "malformed", why, at[0]) from None


def _merge_steps(records: Records, path: str, at: list[int]) -> Records:
    out: Records = []
    new_seq: dict[int, int] = {}
    result: Any = None  # of the last transition into VERIFY
    intent: dict[str, Any] = {}
    merged: dict[str, Any] | None = None  # the checkpoint record made for the step being closed
    old_seq: dict[int, int] = {}  # id of a copied record -> its seq (its line) in the schema-1 trace
    for rec in records:
        at[0] = rec["seq"]
        _readable(path, rec)
        kind, old = rec["kind"], rec["seq"]
        if kind == "transition" and rec["to"] == "VERIFY":
            result = rec.get("result")
        elif kind == "transition" and rec["to"] == "ACT":
            intent = rec
        if kind == "transition" and rec["to"] == "CHECKPOINT":
            merged = {"seq": len(out) + 1, "kind": "checkpoint", "step": rec["step"]}
            if rec.get("reused"):
                merged["reused"] = True
            merged["ts"] = rec["ts"]
            out.append(merged)
            new_seq[old] = merged["seq"]
            continue
        if merged is not None and kind == "checkpoint":
            # by type and value, as schema 1's reader compared them: {"paid": true} does not vouch for {"paid": 1}
            if (
                "result" not in rec
                or _value(rec["result"]) != _value(result)
                or _value(rec.get("name")) != _value(intent.get("name"))
            ):
                raise TraceCorruption(
                    path, old, "unvouched-checkpoint", "the schema-1 checkpoint is not the result that was verified "
                    "(compared by type and value); it cannot be migrated (replay it with harness 0.1 to see why); "
                    "nothing was changed", old
                )  # fmt: skip
            new_seq[old] = merged["seq"]
            continue
        if merged is not None and kind == "transition" and rec["from"] == "CHECKPOINT":
            new_seq[old] = merged["seq"]
            merged = None
            continue
        if kind == "transition":  # the step's records are behind us
            merged = None
        copy = {"seq": len(out) + 1, **{k: v for k, v in rec.items() if k != "seq"}}
        new_seq[old] = copy["seq"]
        old_seq[id(copy)] = old
        out.append(copy)
    header = out[0]
    header["schema"] = 2
    if type(header.get("branch")) is int:  # a fork: the parent's seq, numbered as the parent is now
        header["branch"] = new_seq.get(header["branch"], header["branch"])
    start = header["ts"]
    for rec in out[1:]:
        line = at[0] = old_seq[id(rec)] if id(rec) in old_seq else int(rec["seq"])  # (a checkpoint: made here)
        if rec["kind"] == "reconcile":
            if type(rec.get("op")) is not int or not 0 < rec["op"] < line:
                why = (
                    f"a reconcile whose op {rec.get('op')!r} names no record before it; cannot migrate, nothing changed"
                )
                raise TraceCorruption(path, line, "bad-reconcile", why, line)
            rec["op"] = new_seq[rec["op"]]
        elif rec["kind"] == "transition" and type(rec.get("attempt")) is int and rec["attempt"] == 1:  # left out
            del rec["attempt"]
        if type(rec.get("ts")) is float and type(start) is float:  # seconds since the header's, to the ms
            rec["ts"] = round(rec["ts"] - start, 3)
    return out


def _value(value: Any) -> bytes:
    """A value as canonical JSON bytes (sorted keys): compared so, 1, 1.0 and true are three values."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _readable(path: str, rec: dict[str, Any]) -> None:
    """TraceCorruption (naming the line) unless rec has what a migration reads: a str kind, a transition's states."""
    line = rec["seq"]
    if type(rec.get("kind")) is not str:
        raise TraceCorruption(path, line, "malformed", "a record without its str kind; cannot migrate", line)
    if rec["kind"] == "transition" and (type(rec.get("from")) is not str or type(rec.get("to")) is not str):
        why = "a transition without its str from and to; cannot migrate"
        raise TraceCorruption(path, line, "malformed", why, line)


# (from version, the function that upgrades a trace of that version by one)
MIGRATIONS: list[tuple[int, Callable[[Records, str], Records]]] = [
    (1, _1_to_2),
]


@dataclass(frozen=True, slots=True)
class Migrated:
    """What `migrate()` did. `backup` is None when there was nothing to do (already current)."""

    path: str
    from_schema: int
    to_schema: int
    records_before: int
    records_after: int
    backup: str | None
    torn_bytes: int
    state: str
    out: str | None = None  # with migrate(out=): where the migrated copy went (the original is its backup)


def migrate(trace: str | os.PathLike[str], *, out: str | os.PathLike[str] | None = None) -> Migrated:
    """Upgrade the trace at `trace` to this harness's schema, in place, keeping a backup of the original.

    With `out` (a new trace path or URL), the migrated trace is written there
    instead and the original is left as it is, as the backup. A trace on
    object storage is immutable segments: it is only migrated with `out`.
    """
    from .reader import replay

    path = os.fspath(trace)
    if out is not None or is_url(path):
        return _migrate_to(path, out)
    if not os.path.isfile(path):
        raise HarnessError(f"{path}: no such trace file; nothing was changed")
    with Journal.open(path):  # the writer's lock: no run may be appending while we migrate
        with open(path, "rb") as f:
            data = f.read()
        records, torn = _read(path, data)
        version = records[0].get("schema")
        if version == SCHEMA:
            rep = replay(path)
            return Migrated(path, SCHEMA, SCHEMA, len(records), len(records), None, 0, rep.state)
        if type(version) is not int or version > SCHEMA or version < MIGRATIONS[0][0]:
            raise HarnessError(f"{path}: schema {version!r} cannot be migrated to {SCHEMA} by this harness")
        before = len(records)
        for start, step in MIGRATIONS:  # in memory: a record it cannot read is refused before any file is made
            if start >= version:
                records = step(records, path)
        folder = os.path.dirname(os.path.abspath(path))
        tmp = os.path.join(folder, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        backup = None
        try:
            _write(tmp, records, like=path)
            try:
                rep = _check(tmp)
            except HarnessError as e:
                raise HarnessError(
                    f"{path}: the migrated trace does not replay ({e}); the original is unchanged and no backup "
                    "was kept, please report this with the trace attached"
                ) from None
            try:  # only once the migrated trace is known to replay: a refused migration keeps no backup
                backup = _backup(path, data, version)
            except OSError as e:
                raise HarnessError(f"{path}: cannot write its backup ({e.strerror}); nothing was changed") from None
            os.replace(tmp, path)
        except BaseException as e:
            # the backup too, while the original is still in place (tmp not renamed yet: a copy beside is litter);
            # once the rename is done (a Ctrl-C right after it), the backup is the original's only copy: kept
            gone = [tmp, backup] if backup is not None and os.path.lexists(tmp) else [tmp]
            for left in gone:
                with contextlib.suppress(OSError):
                    os.unlink(left)
            if isinstance(e, OSError):
                raise HarnessError(
                    f"{path}: cannot write the migrated trace ({e.strerror}); the original is unchanged"
                ) from None
            raise
        _sync_dir(folder)
    return Migrated(path, version, SCHEMA, before, len(records), backup, len(torn), rep.state)


def _migrate_to(path: str, out: str | os.PathLike[str] | None) -> Migrated:
    """migrate(path, out=out): the migrated copy is written to out, a new trace (a path, or a URL as a new run)."""
    from .reader import replay

    if out is None:
        raise HarnessError(
            f"{path}: a trace on object storage is immutable segments and is not migrated in place; nothing was "
            "changed. Write the migrated copy as a new run with --out (e.g. `harness migrate "
            f"{path} --out {path.removesuffix('.jsonl')}.v{SCHEMA}.jsonl`); the original stays as its backup"
        )
    target = os.fspath(out)
    if not is_url(path) and not os.path.isfile(path):
        raise HarnessError(f"{path}: no such trace file; nothing was changed")
    source = local_copy(path)  # a URL: its segments (and the blobs they name), copied
    with open(source, "rb") as f:
        data = f.read()
    records, torn = _read(path, data)
    version = records[0].get("schema")
    if version == SCHEMA:
        return Migrated(path, SCHEMA, SCHEMA, len(records), len(records), None, 0, replay(path).state)
    if type(version) is not int or version > SCHEMA or version < MIGRATIONS[0][0]:
        raise HarnessError(f"{path}: schema {version!r} cannot be migrated to {SCHEMA} by this harness")
    if exists(target):
        raise HarnessError(f"{target} already exists; the migrated copy goes to a new trace, choose another --out")
    before = len(records)
    for start, step in MIGRATIONS:
        if start >= version:
            records = step(records, path)
    asides = _torn_named(records)
    if asides and is_url(target):
        raise HarnessError(
            f"{path}: it names {', '.join(asides)} (torn tails a resume set aside), which a run on object storage "
            "cannot keep; migrate it to a local --out; nothing was written"
        )
    scratch = tempfile.mkdtemp(prefix="harness-migrate-")
    try:
        tmp = os.path.join(scratch, "migrated.jsonl")
        _write(tmp, records)
        here = os.path.dirname(os.path.abspath(source))  # the folder of the trace read: its blobs and torn files
        for name in asides:  # beside the copy, where replay() looks for them
            if os.path.basename(name) == name and name not in ("", ".", ".."):  # else replay() of the copy says why
                _copy_beside(path, here, name, os.path.join(scratch, name))
        names = blob_names(tmp)
        for name in names:  # beside the copy, where replay() looks for them; a missing one is named by the check
            _copy_beside(path, here, os.path.join(_blobs.FOLDER, name), os.path.join(_blobs.folder_of(tmp), name))
        try:
            rep = _check(tmp)
        except HarnessError as e:
            raise HarnessError(
                f"{path}: the migrated trace does not replay ({e}); nothing was written, please report this"
            ) from None
        if is_url(target):
            publish(tmp, target)  # a new run: blobs, then its bytes as segment 1, created only if absent
        else:
            _place_file(tmp, target, names, asides)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Migrated(path, version, SCHEMA, before, len(records), path, len(torn), rep.state, target)


def _torn_named(records: Records) -> list[str]:
    """The `.torn-N` files the records name (set_aside), each once, in order."""
    return list(dict.fromkeys(r["set_aside"] for r in records if isinstance(r.get("set_aside"), str)))


def _copy_beside(path: str, folder: str, name: str, dest: str) -> None:
    """Copy folder/name, a file beside the trace at path (a blob, a torn tail), to dest, read as files beside a
    trace are (`storage.files.read_beside`: a regular file inside folder); HarnessError when it cannot be read so."""
    try:
        data = read_beside(os.path.join(folder, name), folder)
    except HarnessError as e:
        raise HarnessError(f"{path}: cannot migrate it: {e}; nothing was written") from None
    if data is not None:  # a missing one is named by the check of the copy
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "xb") as f:
            f.write(data)


def _place_file(tmp: str, target: str, names: list[str], torn: list[str]) -> None:
    """The migrated tmp as the new file target (never over an existing one), its blobs in target's blobs folder,
    the torn files it names beside it (one already there with the same bytes is kept, other bytes refused;
    those placed are taken back when the trace cannot be)."""
    folder = _blobs.folder_of(target)
    where = os.path.dirname(os.path.abspath(target))
    placed: list[tuple[str, os.stat_result]] = []
    try:
        for name in names:
            with open(os.path.join(_blobs.folder_of(tmp), name), "rb") as f:
                _blobs.put(folder, f.read(), sync_dir=True)
        for name in torn:
            with open(os.path.join(os.path.dirname(tmp), name), "rb") as f:
                data = f.read()
            made = _link_new(data, os.path.join(where, name))
            if made is not None:
                placed.append((os.path.join(where, name), made))
            elif read_beside(os.path.join(where, name), where, len(data)) != data:
                raise HarnessError(
                    f"{target}: {os.path.join(where, name)} exists with other bytes than the torn tail the trace "
                    "names; nothing was written, choose another --out folder"
                )
        with open(tmp, "rb") as f:
            if _link_new(f.read(), target) is None:
                raise FileExistsError(target)
        _sync_dir(where)
    except BaseException as e:
        for path, made in placed:  # only the files this call placed, still as it placed them
            with contextlib.suppress(OSError):
                if os.path.samestat(os.lstat(path), made):
                    os.unlink(path)
        if isinstance(e, FileExistsError):
            raise HarnessError(
                f"{target} already exists; the migrated copy goes to a new trace, choose another"
            ) from None
        if isinstance(e, OSError):
            raise HarnessError(f"{target}: cannot write the migrated copy ({e.strerror}); nothing changed") from None
        raise


def _link_new(data: bytes, dest: str) -> os.stat_result | None:
    """data as the new file dest: written fsynced beside it, then linked into place (never over a file); None
    when dest exists. The temporary file is always removed."""
    part = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.{uuid.uuid4().hex}.tmp")
    with open(part, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(part, dest)
        return os.lstat(dest)
    except FileExistsError:
        return None
    finally:
        os.unlink(part)


def _check(tmp: str) -> Any:
    """The migrated trace as replay() reads it (a separate function: tests interrupt a migration here)."""
    from .reader import replay

    return replay(tmp)


def _read(path: str, data: bytes) -> tuple[Records, bytes]:
    """The records of every complete line (the chain checked) and the torn tail after them."""
    lines = data.split(b"\n")
    torn = lines.pop()
    records, crc = [], 0
    for n, line in enumerate(lines, 1):
        if not line_ok(line, crc):
            raise TraceCorruption(path, n, "checksum", "the line does not match its checksum; cannot migrate")
        crc = int(line[-10:-2], 16)
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise TraceCorruption(path, n, "malformed", "not a JSON object; cannot migrate") from None
        if not isinstance(rec, dict) or rec.get("seq") != n:
            raise TraceCorruption(path, n, "seq", "a record out of sequence; cannot migrate")
        records.append(rec)
    if not records or records[0].get("kind") != "header":
        raise TraceCorruption(path, 1, "not-a-trace", "no header line; not a harness trace")
    return records, torn


def _backup(path: str, data: bytes, version: int) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    backup = f"{path}.v{version}-backup-{stamp}"
    tmp = f"{backup}.tmp"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, backup)
    except BaseException:  # a disk full, a Ctrl-C: no half backup left beside the trace
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    shutil.copystat(path, backup)
    _sync_dir(os.path.dirname(os.path.abspath(path)))
    return backup


def _write(tmp: str, records: Records, *, like: str | None = None) -> None:
    """The records as a trace at tmp, fsynced; with the permissions of the file `like` when given (it replaces it)."""
    crc = 0
    with open(tmp, "xb") as f:
        if like is not None:
            _blobs.keep_mode(f.fileno(), like)
        for rec in records:
            line, crc = encode({k: v for k, v in rec.items() if k != "crc"}, crc)
            f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _sync_dir(folder: str) -> None:
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
