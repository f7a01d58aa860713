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
(kept in the index, index.py) and, after a resume, those of the index mark
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

`seal()` and `verify()`, which seal and check a trace file, are in verify.py.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from .._errors import HarnessError

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
