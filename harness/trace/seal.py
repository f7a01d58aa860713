"""The seal: the last record of a finished run, vouching for every byte and blob before it.

A run that ends in DONE or FAILED writes its terminal record and a `seal`
record in one write. The seal holds `state` (the terminal state),
`content_hash` (of every byte of the trace before the seal's line), `digests`
(the sorted sha256 of every blob and artifact the trace names) and, when a
key is given (`seal_key=` or $HARNESS_SEAL_KEY), `hmac`: HMAC-SHA256 with
that key of the canonical JSON of {"content_hash", "digests", "state"}. A
sealed trace is immutable: nothing may follow the seal.

The content hash is Dropbox's content_hash scheme: the bytes are cut into
BLOCK (4 MiB) blocks, the last one possibly short, each block is hashed with
sha256, and the value is the hex sha256 of the concatenated raw block
digests. `ContentHash` is the one implementation, used by every writer and
checker. A writer may take the digests of the first whole blocks as given
and hash only the rest: the executor takes those it hashed as the run wrote
(kept in the index, _index.py) and, after a resume, those of the index mark
the resume trusted (Journal.blocks). `replay()` and `verify()` recompute
every block from the bytes, so a block changed after its digest was
recorded makes the seal fail there.

What it proves (the threat model, also in docs/FORMAT.md):
- the per-line CRC chain catches accidents, not forgers: anyone can rewrite
  a line and recompute the chain;
- an unkeyed seal adds a digest of the whole file and of every blob, which
  catches accidents anywhere (a blob swapped, a byte flipped) but not a
  forger, who can recompute it too;
- a keyed seal cannot be recomputed without the key: a trace or blob changed
  by someone without the key fails `verify()`.

`seal()` seals a run that ended unsealed (written before seals existed, or
migrated): the trace is copied with the seal appended to a temporary file,
fsynced and renamed into place, so an interrupted seal leaves the original.
On object storage the seal is shipped as the run's next segment, through
the fenced writer: no segment is ever rewritten.
`verify()` checks every line, every blob's bytes, and the seal.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import HarnessError, TraceCorruption, TraceUnreadable
from ..storage import blobs as _blobs
from ..storage import is_url, local_copy
from . import state as S
from .journal import Journal, encode, since

if TYPE_CHECKING:
    from .reader import Replay

ENV = "HARNESS_SEAL_KEY"


def key_of(seal_key: str | bytes | None) -> bytes | None:
    """The key to seal (or verify) with: seal_key, else $HARNESS_SEAL_KEY, else None (unkeyed)."""
    if seal_key is None:
        seal_key = os.environ.get(ENV) or None
    if seal_key is None:
        return None
    key = seal_key.encode() if isinstance(seal_key, str) else bytes(seal_key)
    if not key:
        raise HarnessError(f"an empty seal key seals nothing; unset {ENV} or give a key")
    return key


BLOCK = 4 << 20  # bytes per block of the content hash (Dropbox's content_hash block size)


class ContentHash:
    """The content hash of bytes fed in pieces of any size, as hashlib's objects are fed.

    `blocks` holds the raw sha256 of every whole block fed so far, after the
    `known` digests given at the start: those stand for the first
    len(known) blocks, which are then not fed (feeding starts at byte
    len(known) * BLOCK).
    """

    __slots__ = ("_h", "_left", "blocks")

    def __init__(self, known: Sequence[bytes] = ()):
        self.blocks: list[bytes] = list(known)
        self._h = hashlib.sha256()
        self._left = BLOCK  # bytes until the block being fed is whole

    def update(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while len(view) >= self._left:
            self._h.update(view[: self._left])
            self.blocks.append(self._h.digest())
            view, self._h, self._left = view[self._left :], hashlib.sha256(), BLOCK
        if view:
            self._h.update(view)
            self._left -= len(view)

    def hexdigest(self) -> str:
        last = [self._h.digest()] if self._left < BLOCK else []
        return hashlib.sha256(b"".join(self.blocks + last)).hexdigest()


def content_hash_of(
    read: Callable[[int, int], bytes], end: int, known: Sequence[bytes] = (), tail: bytes = b""
) -> ContentHash:
    """The content hash of the first `end` bytes `read(offset, size)` gives, then `tail`.

    The first len(known) blocks are taken as `known` says, and not read.
    """
    h = ContentHash(known)
    offset = len(known) * BLOCK
    while offset < end:
        chunk = read(offset, min(BLOCK - offset % BLOCK, end - offset))  # block by block
        if not chunk:
            break  # the file is shorter: the hash is of what is there, and will not match
        h.update(chunk)
        offset += len(chunk)
    h.update(tail)
    return h


def content_hash(path: str, end: int) -> str:
    """The content hash of the first `end` bytes of the file, every block read and hashed."""
    with open(path, "rb", buffering=0) as f:
        return content_hash_of(lambda off, n: os.pread(f.fileno(), n, off), end).hexdigest()


def _message(content: str, digests: list[str], state: str) -> bytes:
    return orjson.dumps({"content_hash": content, "digests": digests, "state": state}, option=orjson.OPT_SORT_KEYS)


def fields(content: str, digests: Iterable[str], state: str, key: bytes | None) -> dict[str, Any]:
    """The fields of a seal record over a prefix whose content hash is given."""
    blobs = sorted(set(digests))
    out: dict[str, Any] = {"state": state, "content_hash": content, "digests": blobs}
    if key is not None:
        out["hmac"] = hmac.new(key, _message(content, blobs, state), hashlib.sha256).hexdigest()
    return out


def mismatch(rec: dict[str, Any], content: str, digests: Iterable[str], state: str) -> str | None:
    """None when the seal record matches the trace before it, else what differs (accidents; no key needed)."""
    if rec.get("state") != state:
        return f"the seal says the run ended {rec.get('state')!r}, the trace says {state}"
    if rec.get("content_hash") != content:
        return "the bytes before the seal are not the ones it sealed (content_hash differs)"
    if rec.get("digests") != sorted(set(digests)):
        return "the seal lists other blobs than the trace names"
    if "hmac" in rec and type(rec["hmac"]) is not str:
        return "the seal's hmac is not a str"
    return None


def hmac_ok(rec: dict[str, Any], key: bytes) -> bool:
    expected = hmac.new(key, _message(rec["content_hash"], rec["digests"], rec["state"]), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, str(rec.get("hmac")))


@dataclass(frozen=True, slots=True)
class Sealed:
    """What `seal()` did: `seq` of the seal record, `already` when the trace was sealed before."""

    path: str
    seq: int
    keyed: bool
    already: bool


def seal(trace: str | os.PathLike[str], *, seal_key: str | bytes | None = None) -> Sealed:
    """Seal a run that ended (DONE or FAILED) without a seal. A sealed trace is left as it is."""
    from .reader import replay

    path = os.fspath(trace)
    key = key_of(seal_key)
    if is_url(path):
        return _seal_url(path, key)
    if not os.path.isfile(path):
        raise TraceUnreadable(path, "no such trace file (or not a file); nothing was written")
    with Journal.open(path):  # the writer's lock: no run may be appending while we seal
        rep = replay(path)
        if _sealed_already(path, rep):
            return Sealed(path, rep.last_seq, "hmac" in (rep.seal or {}), True)
        if rep.torn_tail:
            raise HarnessError(f"{path}: bytes after the run's end; nothing was written")
        with open(path, "rb") as f:
            data = f.read(rep.end)
        content = ContentHash()
        content.update(data)
        sealed = fields(content.hexdigest(), rep.blobs, rep.state, key)
        line, _ = encode({"seq": rep.last_seq + 1, "kind": "seal", **sealed, "ts": since(rep.header["ts"])}, rep.crc)
        try:
            _blobs.write_atomically(path, data + line)
        except OSError as e:
            raise HarnessError(
                f"{path}: cannot write the sealed trace ({e.strerror}); the trace is unchanged"
            ) from None
    replay(path)  # the sealed trace reads back
    return Sealed(path, rep.last_seq + 1, key is not None, False)


def _sealed_already(path: str, rep: Replay) -> bool:
    """Whether the run is sealed already; HarnessError (nothing written) when it has not ended."""
    if rep.seal is not None:
        return True
    if not rep.complete:
        raise HarnessError(
            f"{path}: the run has not ended (state {rep.state}); only a run that ended DONE or FAILED can be "
            "sealed. Resume it to the end first; nothing was written"
        )
    return False


def _seal_url(url: str, key: bytes | None) -> Sealed:
    """seal() of a trace on object storage: the seal goes up as the run's next segment, through the fenced writer.

    The segments are never rewritten: the writer downloads them into its
    spool, the seal is computed over those bytes, and the seal line is
    shipped as segment N+1 with the store's conditional create. A writer
    that advanced the run meanwhile makes it FenceLost, nothing written.
    """
    from ..storage import open_journal
    from .reader import replay

    url = url.rstrip("/")
    with open_journal(url) as journal:  # its segments, downloaded into the writer's spool
        if not journal.size():
            raise TraceUnreadable(url, "no such trace on the store; nothing was written")
        rep = replay(url)  # the spool: the bytes the seal will vouch for
        if _sealed_already(url, rep):
            return Sealed(url, rep.last_seq, "hmac" in (rep.seal or {}), True)
        sealed = fields(content_hash(local_copy(url), rep.end), rep.blobs, rep.state, key)
        start = rep.header["ts"]  # (the seal is shipped at once)
        journal.continue_after(rep.last_seq, rep.crc, rep.end, ("seal", sealed), start=start)
    replay(url)  # the sealed trace reads back from the bucket
    return Sealed(url, rep.last_seq + 1, key is not None, False)


@dataclass(frozen=True, slots=True)
class Verification:
    """What `verify()` checked and found. `ok`: sealed, and nothing altered."""

    path: str
    lines: int
    blobs: int
    sealed: bool
    keyed: bool
    state: str | None
    problems: tuple[str, ...]
    unreadable: bool = False

    @property
    def ok(self) -> bool:
        return self.sealed and not self.problems and not self.unreadable

    def report(self) -> list[str]:
        """What was checked, one line each, then the verdict."""
        if self.unreadable:
            return [f"{self.path}: unreadable: {self.problems[0]}"]
        out = [f"{self.path}: {self.lines} lines: checksum chain, seq and state machine checked"]
        out.append(f"  {self.blobs} blobs and artifacts: size and sha256 of each checked")
        if self.sealed:
            how = (
                "keyed seal (HMAC-SHA256) checked with the key" if self.keyed else "unkeyed seal (content hash) checked"
            )
            out.append(f"  {how}: every byte and blob before it, state {self.state}")
        out += [f"  problem: {p}" for p in self.problems]
        if self.ok:
            out.append("  verdict: sealed and intact")
        elif not self.sealed and not self.problems:
            out.append(f"  verdict: intact but NOT sealed; seal it with `harness seal {self.path}`")
        else:
            out.append("  verdict: ALTERED or not provable")
        return out


def verify(trace: str | os.PathLike[str], *, seal_key: str | bytes | None = None) -> Verification:
    """Check every line, every blob's bytes and the seal (with the key when there is one)."""
    from .reader import replay

    path = os.fspath(trace)
    key = key_of(seal_key)
    try:
        rep = replay(path)
    except TraceCorruption as e:
        if e.reason in ("not-a-trace", "torn-header", "schema"):
            return Verification(path, 0, 0, False, False, None, (str(e),), unreadable=True)
        return Verification(path, e.line - 1, 0, False, False, None, (str(e),))
    except HarnessError as e:
        return Verification(path, 0, 0, False, False, None, (str(e),), unreadable=True)
    problems = []
    for name, (size, line) in sorted(rep.blobs.items()):
        try:
            _blobs.read(local_copy(path), line, name, size)  # a URL: the copy replay() read, blobs beside it
        except TraceCorruption as e:
            problems.append(str(e))
    if rep.torn_tail:
        problems.append("the trace ends in a torn line")
    seal = rep.seal
    keyed = False
    if seal is not None:
        if "hmac" in seal:
            if key is None:
                problems.append(f"the seal is keyed (HMAC-SHA256) but no key was given: set {ENV} or pass --key")
            elif not hmac_ok(seal, key):
                problems.append("the keyed seal does not match: the trace was rewritten, or sealed with another key")
            else:
                keyed = True
        elif key is not None:
            problems.append("a key was given but the seal has no HMAC: anyone could have written this seal")
    state = rep.state if rep.state in S.TERMINAL else None
    return Verification(path, rep.records, len(rep.blobs), seal is not None, keyed, state, tuple(problems))
