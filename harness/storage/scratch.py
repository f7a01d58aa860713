"""Scratch: the temporary file an export writes beside its bundle, the staging folder of an import, and their clean-up.

An operation makes its scratch here, under a name `sweep` knows
(`.<target>.<32 hex>` files, `.import-<32 hex>` folders), and holds an
exclusive flock on it for as long as it runs. The kernel lets go of a lock
when its process dies, SIGKILL included, so a scratch whose lock can be
taken was left by an operation that is over: `sweep(folder)`, called by the
next export or import into that folder and by `harness recover`, removes
those, and never one whose maker is still running. An export's folder is
anyone's (the user's cwd, a downloads folder), so a file is removed only
when it also holds what an export writes first (nothing yet, or a zip's
first bytes): another program's `.name.<32 hex>` file is left alone.

One race is closed by hand: a sweeper that takes the lock between a maker's
create and its flock removes the scratch under it, so the maker checks,
once it holds the lock, that its name still leads to its file, and makes
another otherwise. A file system without flock keeps every scratch (sweep
cannot tell a live one from an abandoned one there, and keeping is safe).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import uuid

_FILE = re.compile(r"\..+\.[0-9a-f]{32}")  # `.out.zip.<hex>`: an export's bundle before its rename
_FOLDER = re.compile(r"\.import-[0-9a-f]{32}")  # an import's staging folder inside the runs folder
_ZIP = b"PK\x03\x04"  # how a zip file starts (its first entry's header): a scratch file holds this, or less
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL)


def file_beside(target: str) -> tuple[str, int]:
    """A new scratch file beside target (its path, and a read-write descriptor holding its lock: close it last)."""
    folder, name = os.path.split(os.path.abspath(target))
    while True:
        path = os.path.join(folder, f".{name}.{uuid.uuid4().hex}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        if _held(path, fd):
            return path, fd


def folder_in(parent: str) -> tuple[str, int]:
    """A new scratch folder in parent, named `.import-<hex>` (its path, and a descriptor holding its lock)."""
    while True:
        path = os.path.join(parent, f".import-{uuid.uuid4().hex}")
        os.mkdir(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:  # swept between the mkdir and the open: make another
            continue
        if _held(path, fd):
            return path, fd


def _held(path: str, fd: int) -> bool:
    """Lock fd; True when path still names its file (a sweeper did not remove it before the lock), else fd closed."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as e:
        if e.errno not in _NO_LOCKS:
            os.close(fd)
            raise
        return True  # no flock here: sweep keeps everything, so nothing was removed
    with contextlib.suppress(FileNotFoundError):
        if os.path.samestat(os.stat(path, follow_symlinks=False), os.fstat(fd)):
            return True
    os.close(fd)
    return False


def sweep(folder: str) -> list[str]:
    """Remove the scratch in folder that no running operation holds; the names removed (none: folder unreadable)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    gone = []
    for name in names:
        is_dir = bool(_FOLDER.fullmatch(name))
        if not is_dir and not _FILE.fullmatch(name):
            continue
        path = os.path.join(folder, name)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if is_dir else os.O_NONBLOCK)
        try:
            fd = os.open(path, flags)
        except OSError:  # gone meanwhile, a symlink, a file where a folder was expected: not ours to remove
            continue
        try:
            mode = os.fstat(fd).st_mode
            if not (stat.S_ISDIR(mode) if is_dir else stat.S_ISREG(mode)) or not _free(fd):
                continue
            if not is_dir and not _ZIP.startswith(os.pread(fd, len(_ZIP), 0)):
                continue  # not a bundle begun (empty, or a zip's first bytes): another program's file, not ours
            if is_dir:
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
            gone.append(name)
        except OSError:  # gone meanwhile, or not ours to remove: the next clean-up looks again
            continue
        finally:
            os.close(fd)  # after the removal: a maker that opened it meanwhile finds its name gone and makes another
    return gone


def _free(fd: int) -> bool:
    """True when no process holds the lock on fd (it is taken, and kept until fd is closed)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:  # held (BlockingIOError), or no flock on this file system: keep it
        return False
