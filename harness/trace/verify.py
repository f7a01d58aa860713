"""Sealing a finished run after the fact, and checking a seal: `seal()` and `verify()`.

`seal()` seals a run that ended unsealed (written before seals existed, or
migrated): the trace is copied with the seal appended to a temporary file,
fsynced and renamed into place, so an interrupted seal leaves the original.
On object storage the seal is shipped as the run's next segment, through
the fenced writer: no segment is ever rewritten.
`verify()` checks every line, every blob's bytes, and the seal.

What a seal holds and proves, and the content hash, are in seal.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import HarnessError, TraceCorruption, TraceUnreadable
from ..storage import blobs as _blobs
from ..storage import is_url, local_copy
from . import state as S
from .journal import Journal
from .line import encode, since
from .seal import ENV, ContentHash, content_hash, fields, hmac_ok, key_of

if TYPE_CHECKING:
    from .reader import Replay


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
            data = f.read(rep.tail.end)
        content = ContentHash()
        content.update(data)
        sealed = fields(content.hexdigest(), rep.tail.blobs, rep.state, key)
        line, _ = encode(
            {"seq": rep.last_seq + 1, "kind": "seal", **sealed, "ts": since(rep.header["ts"])}, rep.tail.crc
        )
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
    from .reader import replay
    from .remote import open_journal

    url = url.rstrip("/")
    with open_journal(url) as journal:  # its segments, downloaded into the writer's spool
        if not journal.size():
            raise TraceUnreadable(url, "no such trace on the store; nothing was written")
        rep = replay(url)  # the spool: the bytes the seal will vouch for
        if _sealed_already(url, rep):
            return Sealed(url, rep.last_seq, "hmac" in (rep.seal or {}), True)
        sealed = fields(content_hash(local_copy(url), rep.tail.end), rep.tail.blobs, rep.state, key)
        start = rep.header["ts"]  # (the seal is shipped at once)
        journal.continue_after(rep.last_seq, rep.tail.crc, rep.tail.end, ("seal", sealed), start=start)
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
    ended: bool = True  # the run reached DONE or FAILED; only such a run can be sealed (seal())
    run_state: str | None = None  # the state the run is in (`state` is only a sealed or ended run's)
    torn_tail: bool = False  # an unfinished run's last line is torn: a crash while writing it, not an alteration

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
        if self.torn_tail:
            out.append("  the last line is torn (the process died writing it): resuming the run sets it aside")
        out += [f"  problem: {p}" for p in self.problems]
        if self.ok:
            out.append("  verdict: sealed and intact")
        elif not self.sealed and not self.problems and not self.ended:  # what seal() says of it, too
            out.append(
                f"  verdict: intact but NOT sealed: the run has not ended (state {self.run_state}); "
                "a run is sealed when it ends: resume it to its end"
            )
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
    for name, (size, line) in sorted(rep.tail.blobs.items()):
        try:
            _blobs.read(local_copy(path), line, name, size)  # a URL: the copy replay() read, blobs beside it
        except TraceCorruption as e:
            problems.append(str(e))
    ended = rep.seal is not None or rep.complete
    if rep.torn_tail and ended:  # bytes after a run's end: no writer leaves them
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
    return Verification(
        path, rep.records, len(rep.tail.blobs), seal is not None, keyed, state, tuple(problems),
        ended=ended, run_state=rep.state, torn_tail=rep.torn_tail and not ended,
    )  # fmt: skip
