"""Run addresses: a trace's file name without `.jsonl`, relative to the runs folder, and back.

`trace_path(folder, run)` is the only way the viewer turns a name from a
URL into a file. It refuses (RunNotFound, which the server answers with 404)
an empty or absolute name, a `..` or empty part, a backslash or NUL, a name
whose file is missing, and any name whose real path (symlinks resolved)
lies outside the runs folder's real path. So no URL can make the viewer
read outside the runs folder; `inside()` is the same check for the runs
the table lists (a trace that is a symlink out is not listed). Files beside
a trace are read as the library reads them (`storage.files.read_beside`).
"""

from __future__ import annotations

import os

from .._errors import RunNotFound


def well_formed(run: str) -> bool:
    """Whether `run` can name a file under the runs folder at all (it may still not exist)."""
    if not run or "\\" in run or "\x00" in run or run.startswith("/") or os.path.isabs(run):
        return False
    return all(part not in ("", ".", "..") for part in run.split("/"))


def trace_path(folder: str, run: str, *, exists: bool = True) -> str:
    """The trace file of run address `run` in `folder`; RunNotFound if there is none or it lies outside."""
    if not well_formed(run):
        raise RunNotFound(run, "not a run address (a file name without .jsonl, inside the runs folder)")
    path = os.path.join(folder, run + ".jsonl")
    if not inside(folder, path):
        raise RunNotFound(run, "it leads outside the runs folder")
    if exists and not os.path.isfile(path):
        raise RunNotFound(run, "no such trace file")
    return path


def inside(folder: str, path: str) -> bool:
    """Whether the real path of `path` (symlinks resolved) lies inside the real path of `folder`."""
    root = os.path.realpath(folder)
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def address(folder: str, path: str) -> str:
    """The run address of the trace at `path` (a file in `folder`)."""
    head, name = os.path.split(path)
    if head == folder:  # the common case, and a fast one: list_runs() joins folder and name
        return name.removesuffix(".jsonl")
    rel = os.path.relpath(path, folder).replace(os.sep, "/")
    return rel.removesuffix(".jsonl")
