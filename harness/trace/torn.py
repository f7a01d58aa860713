"""A torn tail set aside: the bytes a crash left after a trace's last whole record.

A resume never truncates them away: `set_aside` moves them, durably and
without replacing anything, to a sibling `<trace>.torn-N`, and the record
the resumed run writes over the tail names that file. `torn_name` says,
reading only, which name that would be, so a resume that cannot proceed
can say so without writing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

from .._errors import JournalError, TraceUnreadable
from ..storage.files import open_regular, read_all, why


def torn_name(path: str, data_from: int) -> str | None:
    """The `.torn-N` path set_aside(path, data_from) would place the bytes after data_from in; None for none.

    Reads only: an earlier attempt's copy holding exactly these bytes, else the first name nothing holds.
    """
    tail = _tail(path, data_from)
    return _aside_for(path, tail)[1] if tail else None


def _tail(path: str, data_from: int) -> bytes:
    """The bytes of path after offset data_from (JournalError when they cannot be read)."""
    try:
        fd = open_regular(path)
        try:
            return read_all(fd, data_from)
        finally:
            os.close(fd)
    except (OSError, TraceUnreadable) as e:
        problem = why(e) if isinstance(e, OSError) else e.problem
        raise JournalError(path, f"cannot read its torn tail to set it aside: {problem}") from None


def _aside_for(path: str, tail: bytes) -> tuple[int, str, bool]:
    """(N, `<path>.torn-N`, whether it holds tail already): an earlier attempt's copy, else the first free name."""
    n, aside = _free_torn(path, 1)
    for k in range(1, n):  # an earlier attempt's copy, placed but never named?
        if _holds(f"{path}.torn-{k}", tail):
            return k, f"{path}.torn-{k}", True
    return n, aside, False


def set_aside(path: str, data_from: int) -> str | None:
    """Move the bytes of path after offset data_from to a new sibling `<path>.torn-N`; return its path.

    The caller then names the sibling in the record it writes over the tail
    (`Journal.continue_after(..., record)`). The bytes go to a hidden temporary file first,
    fsynced, which is then linked into place under the first `.torn-N` no
    file or symlink holds (nothing there is ever replaced or deleted) and the
    folder fsynced: a `.torn-N` appears whole or not at all, and nothing is
    lost even if we die in between. If a `.torn-N` already holds exactly
    these bytes (a process died after placing it, before truncating the
    trace and naming it), that one is returned instead of a second copy.
    Only the temporary file, which this call created, is ever unlinked.
    """
    tail = _tail(path, data_from)
    if not tail:
        return None
    n, aside, placed = _aside_for(path, tail)
    if placed:
        return aside
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.torn-{secrets.token_hex(6)}.tmp")
    made = False  # whether tmp, which this call creates, exists
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        made = True
        try:
            view = memoryview(tail)
            while view:  # a short write is not a failure: write the rest
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        while True:
            try:
                os.link(tmp, aside)  # never replaces: a name taken meanwhile raises FileExistsError
                break
            except FileExistsError:
                n, aside = _free_torn(path, n + 1)
            except OSError as e:  # a file system without hard links: rename (the trace's lock keeps harness out)
                if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV):
                    raise
                n, aside = _free_torn(path, n)
                os.rename(tmp, aside)
                made = False
                break
        if made:
            os.unlink(tmp)
            made = False
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:  # the trace is not truncated yet: its tail is still in place
        if made:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise JournalError(path, f"cannot set its torn tail aside in {aside}: {why(e)}") from None
    return aside


def _free_torn(path: str, n: int) -> tuple[int, str]:
    """The first `<path>.torn-N` from n on that nothing holds: no file, no symlink (even a dangling one)."""
    while os.path.lexists(aside := f"{path}.torn-{n}"):
        n += 1
    return n, aside


def _holds(name: str, data: bytes) -> bool:
    """Whether name is a regular file (not a symlink) holding exactly data."""
    try:
        st = os.lstat(name)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
            return False
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            return read_all(fd, 0) == data
        finally:
            os.close(fd)
    except OSError:
        return False
