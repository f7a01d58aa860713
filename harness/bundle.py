"""Export runs to a zip bundle, and import a bundle safely.

A bundle holds, under relative paths only: each run's trace (`<name>.jsonl`),
its annotations (`<name>.jsonl.annotations.json`, when there are any), the
`.torn-N` files its records name (the torn tails a resume set aside), every
blob and artifact it names (`blobs/<sha256>`), and `manifest.json`:
{"format": "harness-bundle", "version": 1, "files": [{"path", "sha256",
"size"}, ...], "unsealed": [<name>.jsonl, ...]} listing every other file,
and the runs without a seal. A run is exported sealed or not (an unfinished,
paused or crashed run is what a bug report needs): each run is replayed and
each blob's bytes checked first, and a damaged one is refused. An unsealed
run stays unsealed: the manifest says so, import checks that it says so
truly and keeps it unsealed, and `verify` reports it. Every file is read as files
beside a trace always are (`storage.files.open_beside`): a regular file inside
the run's folder, so a FIFO or a symlink out is refused, never bundled.

`import_bundle()` checks everything before anything lands: no absolute
path, no `..`, no symlink or directory entry, no duplicate name, no file
missing from the manifest or the manifest's files missing from the archive,
no digest or size that differs, no more than `max_bytes` unpacked (1 GiB by
default), no entry whose compression ratio is absurd (a zip bomb), none
that zipfile cannot read (encrypted, or compressed other than stored or
deflated), no annotations file that is not one. Files are extracted into a
temporary folder inside the target (`.import-<hex>`, locked while the import
runs: what a killed import or export left, the next import, export or
`harness recover` removes, see `storage.scratch`), every trace is replayed there (its
seal, blobs and `.torn-N` files checked, and whether it is sealed against the
manifest), and only then are they placed:
blobs first, traces last, so a trace is never visible before its blobs.

Placing never replaces a file: each is hard-linked into place (or created
with O_EXCL where the file system has no hard links), under an exclusive
lock on the target folder. A file already there with other bytes is refused
before anything moves; one with the same bytes is left as it is. So of two
imports racing into one folder with different runs of one name, one wins
and the other fails with a BundleError naming the file, after taking back
every run, note and `.torn-N` file it placed (the blobs it placed stay:
they are named by their bytes, and may be shared).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ._errors import BundleError, HarnessError, TraceCorruption, TraceUnreadable
from .storage import blobs as _blobs
from .storage import is_url, scratch
from .storage.files import open_beside, open_regular, read_beside
from .trace.annotations import MAX_BYTES as ANNOTATIONS_MAX
from .trace.annotations import annotations_path
from .trace.annotations import parse as parse_annotations

if TYPE_CHECKING:
    from .trace.reader import Replay

FORMAT, VERSION = "harness-bundle", 1
MANIFEST = "manifest.json"
_BLOB = re.compile("[0-9a-f]{64}")  # a blob's name: its sha256
_TORN = re.compile(r"[^/\\\x00]+\.torn-[1-9][0-9]*")  # a torn tail set aside beside its trace (trace.torn.set_aside)
_READABLE = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # what export writes, and what every Python reads
LOCK_WAIT = 60.0  # seconds an import waits for another one into the same folder before it gives up
MAX_BYTES = 1 << 30  # unpacked bytes an import accepts by default
MAX_RATIO = 200  # unpacked / compressed size of one entry beyond which it is refused as a zip bomb
_DATE = (1980, 1, 1, 0, 0, 0)  # every entry's time: a bundle of the same files is the same bytes


@dataclass(frozen=True, slots=True)
class Bundled:
    """What export or import did: the runs (trace file names) and every file, relative."""

    path: str
    runs: tuple[str, ...]
    files: tuple[str, ...]
    bytes: int
    skipped: tuple[str, ...] = ()  # on import: files already there with the same bytes
    unsealed: tuple[str, ...] = ()  # the runs without a seal (unfinished, paused, crashed, or never sealed)


@dataclass(frozen=True, slots=True)
class _Run:
    """What a run brings to a bundle, found by replaying it: its blobs, and the `.torn-N` files it names."""

    blobs: tuple[str, ...]
    torn: tuple[str, ...]
    sealed: bool


def _replayed(trace: str) -> tuple[Replay, list[str]]:
    """replay() of trace, and the `.torn-N` files its records name (set_aside), in order."""
    from .trace.reader import replay

    torn: list[str] = []

    def aside(line: bytes, rec: dict[str, Any]) -> None:
        if b'"set_aside":"' in line and isinstance(rec.get("set_aside"), str):
            torn.append(rec["set_aside"])

    return replay(trace, on_record=aside), torn


def _exportable(trace: str) -> _Run | str:
    """What the run at trace brings when it is intact (sealed or not), else why not."""
    try:
        rep, torn = _replayed(trace)
    except HarnessError as e:
        return f"{trace}: cannot be exported: {e}"
    for name, (size, line) in rep.tail.blobs.items():
        try:
            _blobs.read(trace, line, name, size)
        except TraceCorruption as e:
            return f"{trace}: cannot be exported: {e}"
    folder = os.path.dirname(os.path.abspath(trace))
    # a rerun or fork names its recording's torn files, which stay beside the recording (replay() knows)
    kept = tuple(
        dict.fromkeys(n for n in torn if "parent" not in rep.header or os.path.lexists(os.path.join(folder, n)))
    )
    return _Run(tuple(rep.tail.blobs), kept, rep.seal is not None)


def export(traces: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Bundled:
    """Write the runs at `traces` (with their blobs, annotations and .torn-N files) to the zip `out`.

    A run need not be sealed: an unfinished or crashed one is exported as it
    stands, and the manifest and the result's `unsealed` name it.
    """
    paths = [os.fspath(t) for t in traces]
    target = os.fspath(out)
    if not paths:
        raise BundleError(target, "no run to export")
    if is_url(target):
        raise BundleError(target, "a bundle is a local zip file; give a local path for --out")
    if any(is_url(p) for p in paths):  # runs on object storage: exported from local copies named as in the bucket
        staging = tempfile.mkdtemp(prefix="harness-export-")
        try:
            copies = {(_fetched(p, staging) if is_url(p) else p): p for p in paths}
            try:
                return export(list(copies), target)
            except BundleError as e:  # name the runs as the user did, not their copies (gone with the staging)
                for copy, url in copies.items():
                    e.problem = e.problem.replace(copy, url)
                raise BundleError(target, e.problem) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    found = [_exportable(p) for p in paths]
    refused = [why for why in found if isinstance(why, str)]
    if refused:
        raise BundleError(target, "refused to export damaged runs:\n  " + "\n  ".join(refused))
    runs = [run for run in found if isinstance(run, _Run)]  # every one, now that none was refused
    names = [os.path.basename(p) for p in paths]
    if len(set(names)) != len(names):
        raise BundleError(target, "two runs with the same file name cannot share a bundle")
    files: dict[str, tuple[str, str | bytes]] = {}  # bundle path -> (the run's folder, a file in it or its bytes)

    def add(rel: str, folder: str, source: str | bytes) -> None:
        there = files.get(rel)
        if there is not None and there != (folder, source) and not rel.startswith(_blobs.FOLDER + "/"):
            raise BundleError(target, f"two runs bring a file named {rel} (their .torn-N files?); export them apart")
        files[rel] = (folder, source)

    for path, name, run in zip(paths, names, runs, strict=True):
        folder = os.path.dirname(os.path.abspath(path))
        add(name, "", path)  # the trace itself: opened as traces are (it may be a symlink the user gave)
        notes = annotations_path(path)
        try:
            data = read_beside(notes, folder, ANNOTATIONS_MAX)
            if data is not None:
                parse_annotations(data, notes)
        except HarnessError as e:
            raise BundleError(target, f"cannot export the annotations of {path}: {e}") from None
        if data is not None:
            add(name + _ANNOTATIONS, folder, data)  # the bytes just checked, not the file again
        for torn in run.torn:
            add(torn, folder, os.path.join(folder, torn))
        for digest in run.blobs:
            add(f"{_blobs.FOLDER}/{digest}", folder, os.path.join(_blobs.folder_of(path), digest))
    entries, total = [], 0
    try:
        scratch.sweep(os.path.dirname(os.path.abspath(target)))  # what a killed export left beside its bundle
        tmp, held = scratch.file_beside(target)
    except OSError as e:
        raise BundleError(target, f"cannot write the bundle: {e.strerror or e}") from None
    try:
        with os.fdopen(os.dup(held), "w+b") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            for rel in sorted(files):
                folder, source = files[rel]
                with zf.open(_info(rel), "w", force_zip64=True) as dst:
                    digest, size = _copy(target, folder, source, dst)
                entries.append({"path": rel, "sha256": digest, "size": size})
                total += size
            unsealed = sorted(n for n, run in zip(names, runs, strict=True) if not run.sealed)
            manifest = {"format": FORMAT, "version": VERSION, "files": entries, "unsealed": unsealed}
            zf.writestr(_info(MANIFEST), orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
        os.replace(tmp, target)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise BundleError(target, f"cannot write the bundle: {e.strerror or e}") from None
        raise
    finally:
        os.close(held)  # the lock goes last: a sweep never removes a bundle still being written
    return Bundled(target, tuple(names), tuple(sorted(files)), total, unsealed=tuple(unsealed))


def _copy(target: str, folder: str, source: str | bytes, dst: Any) -> tuple[str, int]:
    """Write source (a file beside a trace in folder, a trace when folder is "", or bytes) to dst; its sha256 and size.

    A file is opened as every file beside a trace is (open_beside) and read
    up to its size at the open, so a FIFO, a device or a symlink out of the
    run's folder is a BundleError naming it, never a hang or a copy of
    something else.
    """
    if isinstance(source, bytes):
        dst.write(source)
        return hashlib.sha256(source).hexdigest(), len(source)
    try:
        fd = open_beside(source, folder) if folder else open_regular(source)
    except TraceUnreadable as e:
        raise BundleError(target, f"cannot export {source}: {e.problem}") from None
    if fd is None:
        raise BundleError(target, f"cannot export {source}: it is gone (the run names it)")
    h, offset = hashlib.sha256(), 0
    try:
        end = os.fstat(fd).st_size
        while offset < end and (chunk := os.pread(fd, min(1 << 20, end - offset), offset)):
            h.update(chunk)
            dst.write(chunk)
            offset += len(chunk)
    finally:
        os.close(fd)
    return h.hexdigest(), offset


def _fetched(url: str, staging: str) -> str:
    """A local copy of the run at url, under its own name in a folder of staging, with its blobs and notes."""
    from .storage import open as open_store
    from .trace.annotations import annotations

    url = url.rstrip("/")
    location = open_store(url)
    folder = os.path.join(staging, str(len(os.listdir(staging))))  # one folder a run: two runs may share a name
    os.makedirs(folder)
    path = os.path.join(folder, url.rsplit("/", 1)[-1])
    with open(path, "wb") as f:
        if not location.download(f)[0]:
            raise TraceUnreadable(url, "no such trace on the store; nothing was written")
    location.fetch_blobs(path)
    notes = annotations(url)
    if notes:
        body = {"format": "harness-annotations", "version": 1, "notes": notes}
        with open(annotations_path(path), "wb") as f:
            f.write(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    return path


def _info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, _DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    return info


def _safe(name: str) -> bool:
    parts = name.split("/")
    return (
        bool(name)
        and not name.startswith(("/", "\\"))
        and "\\" not in name
        and ":" not in parts[0]
        and all(p not in ("", ".", "..") for p in parts)
    )


def _check_entries(
    path: str, zf: zipfile.ZipFile, max_bytes: int, max_ratio: float
) -> tuple[dict[str, dict[str, object]], set[str]]:
    """The manifest's files by path and the runs it says are unsealed, once every entry has passed the checks.

    (No byte of an entry but the manifest is read yet.) A manifest written
    before bundles held unsealed runs has no "unsealed": none is.
    """
    seen: set[str] = set()
    total = 0
    for info in zf.infolist():
        name = info.filename
        if name in seen:
            raise BundleError(path, f"the name {name!r} appears twice in the archive")
        seen.add(name)
        if not _safe(name):
            raise BundleError(path, f"unsafe path {name!r} (absolute, '..', or not a plain relative path)")
        kind = (info.external_attr >> 16) & 0o170000
        if info.is_dir() or kind not in (0, stat.S_IFREG):
            raise BundleError(path, f"{name!r} is not a regular file (a symlink, a directory or a device)")
        if info.flag_bits & 0x1:
            raise BundleError(path, f"{name!r} is encrypted; a bundle's entries are not (export writes none so)")
        if info.compress_type not in _READABLE:
            raise BundleError(
                path, f"{name!r} is compressed with method {info.compress_type}; a bundle's entries are stored or "
                "deflated (method 0 or 8), as export writes them"
            )  # fmt: skip
        total += info.file_size
        if total > max_bytes:
            raise BundleError(path, f"unpacks to more than {max_bytes} bytes (the limit; pass a larger max_bytes)")
        if info.file_size > 1 << 20 and info.file_size > max_ratio * max(info.compress_size, 1):
            raise BundleError(path, f"{name!r} expands {info.file_size // max(info.compress_size, 1)}x: a zip bomb?")
    if MANIFEST not in seen:
        raise BundleError(path, "no manifest.json: not a harness bundle")
    try:
        manifest = orjson.loads(_read(path, zf, MANIFEST, 16 << 20))
        listed = {f["path"]: f for f in manifest["files"]}
        unsealed = manifest.get("unsealed", [])
        ok = (
            manifest.get("format") == FORMAT
            and all(
                isinstance(p, str) and type(f["size"]) is int and isinstance(f["sha256"], str)
                for p, f in listed.items()
            )
            and isinstance(unsealed, list)
            and all(isinstance(n, str) for n in unsealed)
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise BundleError(path, "manifest.json is not a harness bundle manifest")
    if len(listed) != len(manifest["files"]):
        raise BundleError(path, "the manifest lists a file twice")
    extra = seen - set(listed) - {MANIFEST}
    if extra:
        raise BundleError(path, f"files not in the manifest: {', '.join(sorted(extra))}")
    missing = set(listed) - seen
    if missing:
        raise BundleError(path, f"files in the manifest but not in the archive: {', '.join(sorted(missing))}")
    for name, f in listed.items():
        if zf.getinfo(name).file_size != f["size"]:
            raise BundleError(
                path, f"{name}: the manifest says {f['size']} bytes, the archive {zf.getinfo(name).file_size}"
            )
    odd = [n for n in listed if not _exported(n, listed)]
    if odd:  # only what export writes: anything else would land in the runs folder unchecked
        raise BundleError(
            path,
            f"{', '.join(sorted(odd)[:5])}: not a file export writes (<run>.jsonl, its annotations, blobs/<sha256>)",
        )
    return listed, set(unsealed)


def _exported(name: str, listed: Mapping[str, object]) -> bool:
    """Whether export writes name: a run's trace, the annotations of a run in the bundle, or a blob."""
    if name.startswith(_blobs.FOLDER + "/"):
        return _BLOB.fullmatch(name[len(_blobs.FOLDER) + 1 :]) is not None
    if "/" in name:
        return False
    if name.endswith(".jsonl.annotations.json"):
        return name.removesuffix(".annotations.json") in listed  # notes only for a run the bundle brings
    if _TORN.fullmatch(name):
        return True  # a torn tail set aside: kept only if a run of the bundle names it (checked after replay)
    return name.endswith(".jsonl") and name != ".jsonl"


def _read(path: str, zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """An entry's bytes, never more than limit (whatever its header claims)."""
    try:
        with zf.open(name) as f:
            data = f.read(limit + 1)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError, NotImplementedError) as e:
        # truncated, damaged, bad CRC; encrypted or compressed in a way zipfile cannot read (refused before, too)
        raise BundleError(path, f"{name}: cannot be read from the archive ({e})") from None
    if len(data) > limit:
        raise BundleError(path, f"{name}: more bytes than declared")
    return data


def import_bundle(
    bundle: str | os.PathLike[str],
    into: str | os.PathLike[str],
    *,
    max_bytes: int = MAX_BYTES,
    max_ratio: float = MAX_RATIO,
) -> Bundled:
    """Check the bundle, then add its runs, blobs, annotations and .torn-N files to the runs folder `into`."""
    path, target = os.fspath(bundle), os.fspath(into)
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise BundleError(path, "no such file") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise BundleError(path, f"not a zip archive, or a truncated one ({e})") from None
    with zf:
        listed, claimed = _check_entries(path, zf, max_bytes, max_ratio)
        remote = is_url(target)  # a runs URL: checked in a local staging folder, then placed in the bucket
        held = -1  # the lock on a local staging folder, held until it is removed
        try:
            if remote:
                staging = tempfile.mkdtemp(prefix="harness-import-")
            else:
                os.makedirs(target, exist_ok=True)
                scratch.sweep(target)  # what a killed import or export left here
                staging, held = scratch.folder_in(target)
        except OSError as e:
            raise BundleError(path, f"cannot write into {target}: {e.strerror}") from None
        try:
            for name, f in sorted(listed.items()):
                data = _read(path, zf, name, int(f["size"]))  # type: ignore[call-overload]
                if len(data) != f["size"] or hashlib.sha256(data).hexdigest() != f["sha256"]:
                    raise BundleError(path, f"{name}: its bytes do not match the manifest's sha256")
                if name.startswith(_blobs.FOLDER + "/") and _blobs.digest(data) != name.split("/", 1)[1]:
                    raise BundleError(path, f"{name}: a blob whose bytes do not hash to its name")
                if name.endswith(_ANNOTATIONS):
                    try:
                        parse_annotations(data, name)
                    except HarnessError as e:
                        raise BundleError(path, str(e).replace("; fix or remove it", "")) from None
                dest = os.path.join(staging, *name.split("/"))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with open(dest, "xb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
            runs = sorted(n for n in listed if "/" not in n and n.endswith(".jsonl"))
            named: set[str] = set()  # the .torn-N files the runs name
            unsealed: list[str] = []
            for run in runs:
                torn, sealed = _check_run(path, os.path.join(staging, run), run, remote)
                # replay() found each blob it names with its size; each blob's bytes were hashed to its name above
                named.update(torn)
                if not sealed:
                    unsealed.append(run)
            if set(unsealed) != claimed:  # a bundle does not pass an unsealed run off as sealed, nor the reverse
                raise BundleError(
                    path, f"the manifest says the unsealed runs are {sorted(claimed)}, but they are {unsealed}"
                )
            stray = sorted(n for n in listed if _TORN.fullmatch(n) and n not in named)
            if stray:
                raise BundleError(path, f"{', '.join(stray[:5])}: a .torn-N file that no run of the bundle names")
            if remote:
                if named:
                    raise BundleError(
                        path, f"{', '.join(sorted(named)[:5])}: a run on object storage keeps no .torn-N file; "
                        "import this bundle into a local folder"
                    )  # fmt: skip
                skipped = _place_on_store(path, staging, listed, runs, target)
                total = sum(int(f["size"]) for f in listed.values())  # type: ignore[call-overload]
                return Bundled(path, tuple(runs), tuple(sorted(listed)), total, tuple(sorted(skipped)), tuple(unsealed))
            with _locked(path, target):
                skipped = _place(path, staging, target, listed)
        except OSError as e:  # a full disk, a kill of the file system: the runs not yet moved never appear
            raise HarnessError(
                f"{path}: cannot write into {target}: {e.strerror}; no run was imported that is not whole (blobs "
                "moved already are content-addressed and harmless). Fix the cause and import again"
            ) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if held >= 0:
                os.close(held)
    total = sum(int(f["size"]) for f in listed.values())  # type: ignore[call-overload]
    return Bundled(path, tuple(runs), tuple(sorted(listed)), total, tuple(sorted(skipped)), tuple(unsealed))


def _check_run(path: str, trace: str, run: str, remote: bool) -> tuple[list[str], bool]:
    """The .torn-N files the staged run at trace names and whether it is sealed; BundleError if it does not replay."""
    try:
        rep, torn = _replayed(trace)
    except HarnessError as e:
        raise BundleError(path, f"{run} does not replay: {e}") from None
    if remote and rep.torn_tail:  # a bucket's segments are whole lines: the resume that sets it aside is local
        raise BundleError(path, f"{run} ends in a torn line (a crashed run); import this bundle into a local folder")
    return torn, rep.seal is not None


@contextlib.contextmanager
def _locked(path: str, target: str) -> Any:
    """An exclusive flock on the folder target for as long as the block runs: imports into it take turns.

    Where the file system has no flock, the block runs without it: placing
    never replaces a file anyway (_place), so a race still loses no data.
    """
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise BundleError(
                        path, f"another import into {target} has held it for {LOCK_WAIT:.0f} s; try again once it ends"
                    ) from None
                time.sleep(0.02)
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL):
                    raise
                break  # no flock here: the links alone keep every file
        yield
    finally:
        os.close(fd)  # also releases the lock


def _place(path: str, staging: str, target: str, listed: dict[str, dict[str, Any]]) -> list[str]:
    """Place the checked files of staging in target, never over a file; the names already there with the same bytes.

    Everything is compared before anything moves; then blobs go first, the
    other files next, the traces last, each linked into place (O_EXCL where
    there are no hard links), so a file that appeared meanwhile is never
    replaced. If one did, with other bytes, every file but the blobs that
    this call placed is taken back and BundleError names the file.
    """
    skipped = [name for name in listed if _same(path, os.path.join(target, *name.split("/")), listed[name])]
    order = sorted(listed, key=lambda n: (not n.startswith(_blobs.FOLDER + "/"), n.endswith(".jsonl"), n))
    placed: list[tuple[str, os.stat_result]] = []  # (file, what it is): what this call put in place
    try:
        for name in order:
            if name in skipped:
                continue
            dest = os.path.join(target, *name.split("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            made = _put(os.path.join(staging, *name.split("/")), dest)
            if made is None:  # it appeared since the comparison
                if not _same(path, dest, listed[name]):
                    raise BundleError(path, f"{dest} appeared meanwhile with other bytes; refusing to overwrite it")
                skipped.append(name)
            elif not name.startswith(_blobs.FOLDER + "/"):  # a blob stays: named by its bytes, it may be shared
                placed.append((dest, made))
        _sync(target)
    except BaseException:
        for dest, made in reversed(placed):  # only what this call placed, still as it placed it
            with contextlib.suppress(OSError):
                if os.path.samestat(os.lstat(dest), made):
                    os.unlink(dest)
        raise
    return skipped


def _same(path: str, dest: str, entry: dict[str, Any]) -> bool:
    """Whether dest holds the entry's bytes already (False when nothing is there); BundleError when other ones."""
    if not os.path.lexists(dest):
        return False
    if os.path.isfile(dest) and not os.path.islink(dest) and _file_sha256(dest) == entry["sha256"]:
        return True
    raise BundleError(path, f"{dest} exists with other bytes; refusing to overwrite it")


def _put(source: str, dest: str) -> os.stat_result | None:
    """source as the new file dest: a hard link, or an O_EXCL copy without them; None if dest exists."""
    try:
        os.link(source, dest)
        return os.lstat(dest)
    except FileExistsError:
        return None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV):
            raise
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return None
    try:
        with open(source, "rb") as f:
            while chunk := f.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        os.fsync(fd)
        return os.fstat(fd)
    finally:
        os.close(fd)


def _place_on_store(
    path: str, staging: str, listed: dict[str, dict[str, object]], runs: list[str], target: str
) -> list[str]:
    """Place the checked files of staging under the runs URL target; the names already there with the same bytes.

    As into a folder: everything is compared before anything is written (a
    run or note already there with other bytes is refused), then blobs go
    first, each run's notes next, and each trace last, as its run's first
    segment (created only if absent: storage/publish.py), so a trace is never
    visible before its blobs.
    """
    import io

    from .storage import open as open_store
    from .storage.notes import add_note
    from .storage.publish import place_blobs, publish
    from .trace.annotations import annotations

    target = target.rstrip("/")
    blobs = open_store(target).child(_blobs.FOLDER)
    skipped: list[str] = []
    notes: dict[str, list[dict[str, object]]] = {}  # trace URL -> the bundle's notes to add
    for name in sorted(listed):
        local = os.path.join(staging, *name.split("/"))
        if name.startswith(_blobs.FOLDER + "/"):
            try:
                there = blobs.read(f"{blobs.root}/{name.split('/', 1)[1]}")
            except TraceUnreadable:  # not there yet: place_blobs writes it
                continue
            if hashlib.sha256(there).hexdigest() == listed[name]["sha256"]:
                skipped.append(name)  # an altered blob is replaced by place_blobs: its name says what it holds
        elif name.endswith(_ANNOTATIONS):
            url = f"{target}/{name.removesuffix(_ANNOTATIONS)}"
            with open(local, "rb") as f:
                mine = parse_annotations(f.read(), name)  # (checked once already, as it was staged)
            there_notes = annotations(url)
            if there_notes and there_notes != mine:
                raise BundleError(path, f"{url} has other notes than the bundle's; refusing to add to them")
            if there_notes:
                skipped.append(name)
            else:
                notes[url] = mine
        else:  # a trace
            location = open_store(f"{target}/{name}")
            if location.segments():
                buffer = io.BytesIO()
                location.download(buffer)
                if hashlib.sha256(buffer.getvalue()).hexdigest() != listed[name]["sha256"]:
                    raise BundleError(path, f"{target}/{name} exists with other bytes; refusing to overwrite it")
                skipped.append(name)
    folder = os.path.join(staging, _blobs.FOLDER)
    wanted = [n.split("/", 1)[1] for n in sorted(listed) if n.startswith(_blobs.FOLDER + "/") and n not in skipped]
    place_blobs(target, [(name, os.path.join(folder, name)) for name in wanted])
    for run in runs:
        url = f"{target}/{run}"
        for note in notes.get(url, ()):
            add_note(url, dict(note))
        if run not in skipped:
            publish(os.path.join(staging, run), url, blobs=folder)
    return skipped


_ANNOTATIONS = ".annotations.json"


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _sync(folder: str) -> None:
    for d in (os.path.join(folder, _blobs.FOLDER), folder):
        if os.path.isdir(d):
            fd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def runs_in(folder: str | os.PathLike[str]) -> list[str]:
    """Every trace in a runs folder (or under a runs URL), by name."""
    path = os.fspath(folder)
    if is_url(path):
        from .storage import open as open_store
        from .storage.listing import run_segments

        return sorted(f"{path.rstrip('/')}/{name}" for name in run_segments(open_store(path)))
    try:
        return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".jsonl"))
    except OSError as e:
        raise HarnessError(f"{path}: cannot list runs: {e.strerror}") from None
