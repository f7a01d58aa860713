"""Where a trace lives on object storage, and the segment objects that hold it.

A run's trace at URL `<runs>/<run>.jsonl` is a prefix holding immutable
segment objects `000001.seg`, `000002.seg`, ...: their concatenation, in
number order, is exactly the bytes a local trace of the same run holds (same
lines, same crc chain). A segment holds whole lines only and is never
rewritten. A writer creates segment N with the store's conditional create
(S3 `If-None-Match: *`, a local file's O_EXCL), so segment numbers are the
fence that keeps two writers from both advancing one run.

`open_location(url)` resolves a URL through fsspec (the `s3` extra); the
credentials and endpoint come from the usual places (the environment,
AWS_ENDPOINT_URL, ~/.aws) or `storage_options=`; the CLI also reads
$HARNESS_STORAGE_OPTIONS (a JSON object). fsspec is imported here only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import HarnessError, MissingExtra, TraceCorruption, TraceUnreadable, internal

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SEGMENT = re.compile(r"^(\d{6,})(?:-(\d{6,}))?\.seg$")  # NNNNNN.seg, or a compacted span FFFFFF-LLLLLL.seg
_RETRIES = 3  # listings, unchanged, a reader takes again when an object it listed vanished (compacted meanwhile)


def is_url(path: str | os.PathLike[str] | None) -> bool:
    """Whether path is an fsspec URL (`s3://bucket/runs`, `memory://x`, `file:///tmp/runs`) rather than a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def segment_name(n: int) -> str:
    return f"{n:06d}.seg"


def span_name(first: int, last: int) -> str:
    """The name of a compacted object holding segments first..last: `000001-000037.seg`."""
    return f"{first:06d}-{last:06d}.seg"


def segment_span(name: str) -> tuple[int, int] | None:
    """(first, last) segment numbers the object named `name` holds, or None when it is no segment.

    Only the names harness writes count: `segment_name(n)` and `span_name(first, last)` with
    first >= 1 and last > first. An alias (`0000001.seg`, `000001-000001.seg`) is no segment.
    """
    m = _SEGMENT.match(name)
    if not m:
        return None
    first = int(m[1])
    last = int(m[2]) if m[2] else first
    canonical = span_name(first, last) if m[2] else segment_name(first)
    return (first, last) if first >= 1 and name == canonical and (not m[2] or last > first) else None


def cover(url: str, found: list[tuple[int, int, str, str]], *, strict: bool = True) -> list[tuple[int, str, str]]:
    """The objects that hold segments 1..N in order, as (last segment held, path, tag).

    found: (first, last, path, tag) of every segment object. A segment is
    read from its own object whenever that is there: those are the originals,
    and no span planted beside them changes what is read. A compacted span is
    read only from a number whose own object is gone (a compaction deletes
    them in order, first to last), the longest span starting there; what it
    must agree with is checked when it is read (`span_problem`).
    TraceCorruption `segment-gap` when a number is held by no object (with
    strict=False: the objects up to the gap).
    """
    plain: dict[int, tuple[str, str]] = {}
    spans: dict[int, tuple[int, str, str]] = {}
    for first, last, path, tag in found:
        if first == last:
            plain[first] = (path, tag)
        elif first not in spans or last > spans[first][0]:
            spans[first] = (last, path, tag)
    out, n = [], 1
    while n in plain or n in spans:
        last, path, tag = (n, *plain[n]) if n in plain else spans[n]
        out.append((last, path, tag))
        n = last + 1
    beyond = sorted(first for first, last, _, _ in found if last >= n)
    if beyond and strict:
        raise TraceCorruption(
            url, 1, "segment-gap", f"segment {segment_name(n)} is missing (the next is {segment_name(beyond[0])})"
        )
    return out


def span_problem(location: Location, path: str, data: bytes, found: list[tuple[int, int, str, str]]) -> str | None:
    """None when the span object at path (holding data) agrees with every other object it stands for, else what
    does not. found: (first, last, path, tag) of every segment object of the run.

    A span is read only where the segments it holds are gone (cover()), so
    what is left of them are the originals it must equal: after a compaction
    killed between its deletes, the segments first to last are deleted in
    order, and those left (m..last) must be its last bytes. A shorter span
    starting where it does must be its first bytes. Anything else is a
    forgery or a mix of two runs: not read. An object that vanished since
    the listing raises FileNotFoundError (a reader lists again).
    """
    span = segment_span(object_name(path))
    if span is None or span[0] == span[1]:
        return None
    first, last = span
    inside = sorted((f, end, p) for f, end, p, _ in found if first <= f and end <= last and p != path)
    left = [(f, p) for f, end, p in inside if f == end]
    if left:
        names = f"{segment_name(left[0][0])}..{segment_name(last)}"
        if [f for f, _ in left] != list(range(left[0][0], last + 1)):
            return f"{object_name(path)} stands for segments that are there but are not its last ones ({names})"
        if not data.endswith(b"".join(bytes(location.fs.cat_file(p)) for _, p in left)):
            return f"{object_name(path)} does not end with the bytes of the segments {names} it stands for"
    for f, end, p in inside:
        if f == first and end > f and not data.startswith(bytes(location.fs.cat_file(p))):
            return f"{object_name(path)} does not start with the bytes of {object_name(p)}, which it stands for too"
    return None


def object_name(path: str) -> str:
    """The last part of an object's path: `000001.seg`."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def blob_names(trace_file: str) -> list[str]:
    """The sha256 names of the blobs and artifacts the lines of a local trace file name, sorted."""
    from . import blobs as _blobs

    names: set[str] = set()
    with open(trace_file, "rb") as f:
        for line in f:
            if b'"blobs":' in line or b'"kind":"artifact"' in line:
                try:
                    names.update(name for _, name, _ in _blobs.refs(orjson.loads(line)))
                except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
                    continue  # replay() names what is wrong with the line
    return sorted(names)


def storage_options_from_env() -> dict[str, Any]:
    """$HARNESS_STORAGE_OPTIONS as a dict (a JSON object), else {}."""
    text = os.environ.get("HARNESS_STORAGE_OPTIONS")
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise HarnessError(f"$HARNESS_STORAGE_OPTIONS is not valid JSON ({e}); give a JSON object") from None
    if not isinstance(value, dict):
        raise HarnessError("$HARNESS_STORAGE_OPTIONS must be a JSON object of fsspec storage options")
    return value


@dataclass(frozen=True, slots=True)
class Location:
    """A URL resolved to an fsspec file system and the path inside it."""

    url: str
    fs: Any
    root: str

    def child(self, name: str) -> Location:
        return Location(f"{self.url}/{name}", self.fs, f"{self.root}/{name}")

    def blobs(self) -> Location:
        """The blobs folder beside the trace here (`<runs>/blobs`), where a local trace's blobs would be."""
        return Location(f"{self.url.rsplit('/', 1)[0]}/blobs", self.fs, f"{self.root.rsplit('/', 1)[0]}/blobs")

    def fetch_blobs(self, trace_file: str) -> int:
        """Copy the blobs that the local copy trace_file of this trace names into its blobs folder; how many.

        A blob already there is kept; one missing on the store is left for replay() to name.
        """
        from . import blobs as _blobs

        folder, source, copied = _blobs.folder_of(trace_file), self.blobs(), 0
        for name in blob_names(trace_file):
            path = os.path.join(folder, name)
            if os.path.exists(path):
                continue
            try:
                data = source.read(f"{source.root}/{name}")
            except TraceUnreadable:  # not on the store: the trace's replay names the blob missing, with its seq
                continue
            os.makedirs(folder, exist_ok=True)
            part = f"{path}.{os.getpid()}.part"
            with open(part, "wb") as out:
                out.write(data)
            os.replace(part, path)
            copied += 1
        return copied

    @property
    def local(self) -> bool:
        protocol = self.fs.protocol
        return bool({"file", "local"} & set((protocol,) if isinstance(protocol, str) else protocol))

    def listing(self, recursive: bool = False) -> list[str]:
        """The object paths under this location (fresh: fsspec's listing cache is dropped first)."""
        return list(self.details(recursive))

    def details(self, recursive: bool = False) -> dict[str, dict[str, Any]]:
        """path -> fsspec's details (size, ETag or mtime, ...) of the objects under this location, fresh."""
        self.fs.invalidate_cache(self.root)
        try:
            if recursive:
                return dict(self.fs.find(self.root, detail=True))
            return {d["name"]: d for d in self.fs.ls(self.root, detail=True)}
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise TraceUnreadable(self.url, f"cannot list: {e}") from None

    def segments(self) -> list[tuple[int, str]]:
        """(number, object path) of the objects holding the trace here, in order; checks they hold 1..N.

        The number is the last segment an object holds: its own for a
        segment, the last of its span for a compacted object.
        """
        return [(n, path) for n, path, _ in self.versions()]

    def versions(self) -> list[tuple[int, str, str]]:
        """segments() with what identifies each one's bytes (size and ETag, or size and mtime)."""
        return cover(self.url, self.segment_objects())

    def segment_objects(self) -> list[tuple[int, int, str, str]]:
        """(first, last, path, tag) of every segment object here, a span hiding others or not, sorted."""
        found = []
        for path, d in self.details().items():
            span = segment_span(path.rstrip("/").rsplit("/", 1)[-1])
            if span:
                tag = f"{d.get('size')}:{d.get('ETag') or d.get('mtime') or d.get('LastModified') or ''}"
                found.append((*span, path, tag))
        return sorted(found)

    def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
        try:
            return bytes(self.fs.cat_file(path, start=start, end=end))
        except OSError as e:
            raise TraceUnreadable(self.url, f"cannot read {path}: {e}") from None

    def create(self, name: str, data: bytes) -> bool:
        """Create object `name` here holding data, only if it does not exist yet; False if it did.

        Raises OSError when the store did not answer (the object may or may not exist then).
        """
        path = f"{self.root}/{name}"
        for first in (True, False):
            try:
                with self.fs.open(path, "xb") as f:
                    f.write(data)
                return True
            except FileExistsError:
                return False
            except FileNotFoundError:
                if not (first and self.local):  # a bucket that does not exist: say so
                    raise
                self.fs.makedirs(self.root, exist_ok=True)  # a local folder is made; a bucket never is
        raise internal(f"creating {name} neither succeeded nor raised on its second try", self.url)

    def download(self, dest: Any, segments: list[tuple[int, str]] | None = None) -> tuple[int, int, int]:
        """Write the concatenated segments (default: all) to the binary file dest; returns (last segment, bytes, lines).

        TraceCorruption when a segment does not end with a whole line (segments only ever hold whole lines).
        An object that vanished since it was listed (a compaction replaced it
        by a span holding the same bytes) makes it list again and start over.
        """
        start = dest.tell()
        listed, stale = segments if segments is not None else self.segments(), 0
        while True:
            try:
                return self._download(dest, listed)
            except FileNotFoundError:
                dest.seek(start)
                dest.truncate()
            # a compaction deletes the segments it replaced one by one, so a listing that changed is progress
            # (finitely many: no hang); only listings that stop changing while objects still vanish count
            again = self.segments()
            stale = stale + 1 if again == listed else 0
            if stale > _RETRIES:
                raise TraceUnreadable(self.url, "its segments kept vanishing while being read") from None
            listed = again

    def _download(self, dest: Any, segments: list[tuple[int, str]]) -> tuple[int, int, int]:
        last = size = lines = 0
        found: list[tuple[int, int, str, str]] | None = None
        for n, path in segments:
            try:
                data = bytes(self.fs.cat_file(path))
            except FileNotFoundError:
                raise
            except OSError as e:
                raise TraceUnreadable(self.url, f"cannot read {path}: {e}") from None
            span = segment_span(object_name(path))
            if span is not None and span[0] < span[1]:  # a compacted span: it must equal what it stands for
                found = self.segment_objects() if found is None else found
                why = span_problem(self, path, data, found)
                if why is not None:
                    raise TraceCorruption(self.url, lines + 1, "segment-span", f"{why}; it is not read")
            lines += data.count(b"\n")
            if not data.endswith(b"\n"):
                name = path.rstrip("/").rsplit("/", 1)[-1]
                why = f"segment {name} does not end with a whole line (segments hold whole lines only)"
                raise TraceCorruption(self.url, lines + 1, "torn-segment", why)
            dest.write(data)
            last, size = n, size + len(data)
        return last, size, lines


def open_location(url: str, storage_options: dict[str, Any] | None = None) -> Location:
    """Resolve url through fsspec. HarnessError saying what to install when the extra or protocol is missing."""
    try:
        import fsspec  # type: ignore[import-untyped]  # the `s3` extra (fsspec, s3fs); fsspec ships no type hints
    except ImportError:
        raise MissingExtra(
            f"{url}: traces on object storage (fsspec, s3fs)", "s3", "pip install 'harness-trace[s3]'"
        ) from None
    options = storage_options if storage_options is not None else storage_options_from_env()
    url = url.rstrip("/")
    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except ImportError as e:  # fsspec is there, not the protocol's package (s3fs for s3://)
        raise MissingExtra(f"{url}: {e};", "s3", "pip install 'harness-trace[s3]'") from None
    except ValueError as e:
        raise HarnessError(f"{url}: not a URL fsspec can open ({e})") from None
    return Location(url, fs, str(root).rstrip("/"))
