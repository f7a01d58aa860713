"""Opening the files of a run: the trace, and every file beside it, one way.

A trace and everything harness reads beside it (blobs, annotations, `.torn-N`
files, the index, a bundle's entries) are opened here and nowhere else:
read-only with O_NONBLOCK and checked with fstat before a byte is read, so a
FIFO, a device or a socket is refused at once instead of blocking the reader;
a file beside a trace must also lie inside the run's folder (no symlink out,
to /dev/zero or to someone else's file), and is never read past the size it
had when opened or past the limit its reader names.

Every refusal is a TraceUnreadable naming the file and what is wrong with it.
"""

from __future__ import annotations

import errno
import os
import stat

from .._errors import TooLarge, TraceUnreadable


def why(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "the disk is full (ENOSPC)"
    return e.strerror or str(e)


def open_regular(path: str, *, within: str | None = None) -> int:
    """A read-only descriptor on path, refused (TraceUnreadable) unless it is a regular file.

    Opened with O_NONBLOCK and checked with fstat before anything is read, so
    a FIFO, a device or a socket given as a trace is refused at once instead
    of blocking the reader. O_NONBLOCK changes nothing for a regular file.
    With `within` (a folder), path is also refused unless its real path
    (symlinks resolved) lies inside the folder's real path: how every file
    beside a trace is opened (blobs, annotations, `.torn-N` files, the
    index, see open_beside()), so a symlink cannot lead a reader out of the
    run's folder (to /dev/zero, or to a file of someone else's).
    """
    target, flags = path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if within is not None:
        target = _within(path, within)
        flags |= os.O_NOFOLLOW  # a symlink put there since it was checked is refused, not followed
    try:
        fd = os.open(target, flags)
    except FileNotFoundError:
        raise _Missing(path, "no such file") from None
    except IsADirectoryError:
        raise unreadable(path, "is a directory, not a trace file") from None
    except OSError as e:
        raise unreadable(path, f"cannot read: {why(e)}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        os.close(fd)
        raise unreadable(path, f"cannot read: {why(e)}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else KINDS.get(stat.S_IFMT(mode), "not a regular file")
        if within is not None:
            raise unreadable(path, f"is {what}, not a regular file; harness reads only regular files beside a trace")
        raise unreadable(path, f"is {what}, not a trace file; a trace is a regular file")
    return fd


def _within(path: str, folder: str) -> str:
    """What to open for path, a file in folder: a path that is no symlink and whose every folder from `folder`
    on is none either; TraceUnreadable when path's real path lies outside folder's.

    The common case costs no resolving: path below folder with no symlink on the way (one lstat per folder
    between them). A symlink on the way is resolved, and followed only when it stays inside.
    """
    full, root = os.path.abspath(path), os.path.abspath(folder)
    parts = os.path.relpath(full, root).split(os.sep)
    if parts[0] != os.pardir:
        try:
            plain = not any(
                stat.S_ISLNK(os.lstat(os.path.join(root, *parts[:i])).st_mode) for i in range(1, len(parts))
            )
            if plain and not stat.S_ISLNK(os.lstat(full).st_mode):
                return full
        except OSError:  # nothing there (the open says so), or a folder that cannot be looked at: resolve it
            pass
    target, real_root = os.path.realpath(path), os.path.realpath(folder)
    if os.path.commonpath([real_root, target]) != real_root:
        raise unreadable(path, f"leads to {target}, outside {real_root}: harness reads no file beside a trace "
                               "that lies outside the run's folder (a symlink out?)")  # fmt: skip
    return target


class _Missing(TraceUnreadable):
    """open_regular() found nothing at the path (open_beside() answers None for it)."""


def open_beside(path: str, folder: str) -> int | None:
    """open_regular(path, within=folder) for a file beside a trace in `folder`; None when nothing is there.

    The one way harness opens a file that sits beside a trace: a blob, the
    annotations, a `.torn-N` file, the index, a bundle's file on export.
    A dangling symlink counts as nothing there.
    """
    try:
        return open_regular(path, within=folder)
    except _Missing:
        return None


def read_beside(path: str, folder: str, limit: int | None = None) -> bytes | None:
    """The bytes of the file beside a trace at path (opened by open_beside()); None when nothing is there.

    Never more than `limit` bytes, or than the file's size when it was
    opened (limit None): a file that holds more than `limit` is refused
    (TraceUnreadable naming the limit), never read whole.
    """
    fd = open_beside(path, folder)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise TooLarge(path, size, limit)
        return read_all(fd, 0, size)
    except OSError as e:
        raise read_error(path, e) from None
    finally:
        os.close(fd)


KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket"}  # fmt: skip


def unreadable(path: str, problem: str) -> TraceUnreadable:
    """The error for a trace that cannot be read at all (as opposed to a corrupt one)."""
    return TraceUnreadable(path, problem)


def read_error(path: str, e: OSError) -> TraceUnreadable:
    """A read that failed after the open (EIO, a vanished network file): named, never a raw OSError."""
    return unreadable(path, f"read failed: {why(e)}")


def read_all(fd: int, offset: int, end: int | None = None) -> bytes:
    """The bytes of fd from offset to end (to its end when None): never past end, however the file grows."""
    parts = []
    while end is None or offset < end:
        chunk = os.pread(fd, 1 << 20 if end is None else min(1 << 20, end - offset), offset)
        if not chunk:
            break
        parts.append(chunk)
        offset += len(chunk)
    return b"".join(parts)
