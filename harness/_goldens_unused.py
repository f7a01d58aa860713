"""Which goldens a pytest session may call unused, delete or write: only those of tests that passed.

A test that failed, errored (in setup, call or teardown) or was skipped
says nothing about its goldens: it may have stopped before its assertion,
or failed after it. So a session judges goldens by the tests that passed:

- `Outcomes` keeps, per test, whether every phase passed (from
  `pytest_runtest_logreport`: on the xdist controller too, which sees every
  worker's reports), and which golden each assertion asked to write;
- `write_passed()` writes, when a test's teardown is reported, the goldens
  its assertions queued (not at the assertion: a test may fail after it),
  and only if the test passed (so a session killed later has written the
  goldens of every test that passed before); the rest are listed in
  `Outcomes.not_written`;
- `holding()` is in force while syrupy ends its session: its discovery of
  snapshots leaves out the goldens a test that did not pass could own (so
  syrupy never calls them unused, nor deletes them), and what is still
  queued is written only for tests that passed;
- `unused_goldens()` finds the goldens syrupy did not judge (folders of
  modules that no longer assert any, modules that no longer exist), and
  calls one unused only when every test that could own it passed.

An owner is found by name (`_owns`): `test_x` owns `test_x`, `test_x[label]`,
`test_x.1`, and a cut long name. Only files that start with the golden
format line are ever judged.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

GOLDEN_START = b'{"format":"harness-golden"'  # the first bytes of every golden file, any version


class Outcomes:
    """What each test of a session did, and the goldens its assertions asked to write."""

    def __init__(self) -> None:
        self.ok: dict[str, bool] = {}  # node id -> every phase so far passed
        self.wrote: dict[str, str] = {}  # golden path -> node id of the test whose assertion asked to write it
        self.not_written: list[str] = []  # the goldens left out, as they are (their test did not pass)

    def record(self, report: pytest.TestReport) -> None:
        self.ok[report.nodeid] = self.ok.get(report.nodeid, True) and report.passed

    def passed(self, nodeid: str) -> bool:
        """True when the test ran and every phase passed (a skip, an xfail, an error at teardown: False)."""
        return self.ok.get(nodeid, False)


@dataclass(frozen=True)
class Held:
    """What syrupy may not touch as it ends this session (see the module docstring)."""

    locations: frozenset[str]  # goldens an assertion asked to write, for a test that did not pass
    owners: dict[str, list[str]]  # golden folder (resolved) -> the golden base names of tests that did not pass
    not_written: list[str]  # the writes left out, as they happen (the session's Outcomes.not_written)


_HELD: ContextVar[Held | None] = ContextVar("harness_goldens_held", default=None)


@contextlib.contextmanager
def holding(session: pytest.Session, outcomes: Outcomes, extension: Any) -> Iterator[list[str]]:
    """While syrupy ends the session: `writable` and `visible` leave out the goldens of tests that did not pass;
    yields the list of the goldens not written (so far and as syrupy ends)."""
    from syrupy.location import PyTestLocation

    owners: dict[str, list[str]] = {}
    for item in session.items:  # on an xdist controller none: its workers discover and write
        if outcomes.passed(item.nodeid):
            continue
        try:
            where = PyTestLocation(item)
        except Exception:  # an item syrupy cannot place (a doctest of another kind) owns no golden
            continue
        folder = os.path.realpath(extension.dirname(test_location=where))
        owners.setdefault(folder, []).append(extension.get_snapshot_name(test_location=where, index=0))
    token = _HELD.set(Held(_not_passed(outcomes), owners, outcomes.not_written))
    try:
        yield outcomes.not_written
    finally:
        _HELD.reset(token)


def write_passed(config: pytest.Config, outcomes: Outcomes, extension: type) -> None:
    """Write now the goldens queued by the test that just ended, if it passed (at its teardown report).

    So a session killed later (SIGKILL, a crashed xdist worker) has already
    written the goldens of the tests that passed before; what a test that did
    not pass queued is dropped (listed as not written). With a syrupy that
    lacks the queue, they are written when the session ends.
    """
    session = getattr(config, "_syrupy", None)
    queued, flush = (
        getattr(session, "_queued_snapshot_writes", None),
        getattr(session, "_flush_snapshot_write_queue_key", None),
    )
    if not queued or flush is None:  # none queued (an xdist controller's), or another syrupy
        return
    token = _HELD.set(Held(_not_passed(outcomes), {}, outcomes.not_written))
    try:
        for key in [k for k in queued if isinstance(k, tuple) and issubclass(k[0], extension)]:
            flush(key)
    finally:
        _HELD.reset(token)


def _not_passed(outcomes: Outcomes) -> frozenset[str]:
    """The goldens an assertion asked to write, for a test that did not pass."""
    return frozenset(path for path, nodeid in outcomes.wrote.items() if not outcomes.passed(nodeid))


def writable(location: str) -> bool:
    """False for a golden whose test did not pass (while `holding`); it is listed as not written."""
    held = _HELD.get()
    if held is None or location not in held.locations:
        return True
    held.not_written.append(location)
    return False


def visible(collections: Any) -> Any:
    """syrupy's discovered snapshot collections without the goldens a test that did not pass could own."""
    held = _HELD.get()
    if held is None or not held.owners:
        return collections
    out = type(collections)()
    for collection in collections:
        path = Path(collection.location)
        names = held.owners.get(os.path.realpath(path.parent), [])
        if not any(_owns(name, path.stem) for name in names):
            out.add(collection)
    return out


def unused_goldens(config: pytest.Config, outcomes: Outcomes, extension: Any) -> list[Path]:
    """The goldens that syrupy did not judge and that no test of this session uses, by module.

    Reads the report syrupy builds at the end of the session (merged from
    the workers under xdist); with a syrupy that lacks what is needed, finds nothing.
    """
    report: Any = getattr(getattr(config, "_syrupy", None), "report", None)
    if getattr(config.option, "lf", False) or getattr(report, "lf_filtered", False):
        return []  # --lf leaves out tests that passed before: they would look like tests that assert nothing
    if getattr(report, "disable_unused_snapshots", False):
        return []
    try:  # None, or a syrupy that does not keep these: AttributeError, and nothing is judged
        collected, selected, provided = report.collected_items, report.selected_items, report._provided_test_paths
        seen = {*(c.location for c in report.discovered), *(c.location for c in report.used)}
    except AttributeError:
        return []
    from syrupy.location import PyTestLocation

    judged = {os.path.realpath(loc) for loc in seen}
    by_module: dict[str, list[Any]] = {}
    for item in collected:
        by_module.setdefault(_module_key(Path(item.path)), []).append(item)
    narrowed = {_module_key(Path(p)) for p, nodes in provided.items() if nodes}
    modules = getattr(report, "collected_modules", None) or by_module  # syrupy >= 7.0.2 also has item-less ones
    full = [
        m
        for m in sorted(modules)
        if m not in narrowed and all(item.nodeid in selected for item in by_module.get(m, []))
    ]
    found: list[Path] = []
    for module in full:
        owners = []
        for item in by_module.get(module, []):
            name = extension.get_snapshot_name(test_location=PyTestLocation(item), index=0)
            owners.append((name, outcomes.passed(item.nodeid)))
        path = Path(module)
        found += _unjudged(path.parent / extension.snapshot_dirname / path.stem, judged, owners)
    for folder in _orphans(full, provided, extension.snapshot_dirname):
        found += _unjudged(folder, judged, [])
    return found


def _module_key(path: Path) -> str:
    """A test module's identity as syrupy spells it: its folder resolved, its own name kept."""
    return str(path.parent.resolve() / path.name)


def _unjudged(folder: Path, judged: set[str], owners: list[tuple[str, bool]]) -> list[Path]:
    """The goldens in folder that syrupy did not judge and whose possible owners all passed."""
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix == ".jsonl" and p.is_file())
    except OSError:  # no such folder
        return []
    unused = []
    for path in files:
        if os.path.realpath(path) in judged or not _is_golden(path):
            continue
        stem = path.stem
        mine = [ok for name, ok in owners if _owns(name, stem)]
        if all(mine):  # no owner left, or every owner ran, passed, and asserted something else
            unused.append(path)
    return unused


def _owns(name: str, stem: str) -> bool:
    """Whether the test whose golden base name is `name` could have written the golden `stem`.

    `test_x` writes `test_x`, `test_x[label]` (golden_trace(name=...)) and
    `test_x.1` (a second assertion); a long name is cut, so a cut stem is owned too.
    """
    if stem.startswith(name):
        return len(stem) == len(name) or stem[len(name)] in "[."
    return name.startswith(stem)


def _orphans(full: list[str], provided: dict[str, list[str]], dirname: str) -> list[Path]:
    """Golden folders beside collected test modules whose own module no longer exists."""
    dirs = sorted({os.path.dirname(m) for m in full})
    asked = [os.path.realpath(p) for p, nodes in provided.items() if not nodes and os.path.isdir(p)]
    out = []
    for d in dirs:
        if provided and not any(d == a or d.startswith(a + os.sep) for a in asked):
            continue  # a run narrowed to some files of this folder says nothing about the others
        root = Path(d) / dirname
        try:
            folders = sorted(p for p in root.iterdir() if p.is_dir())
        except OSError:  # no goldens folder here (or one that cannot be listed): none of its goldens is unused
            continue
        out += [f for f in folders if not any(Path(d).glob(f"{f.name}.*"))]
    return out


def _is_golden(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(GOLDEN_START)) == GOLDEN_START
    except OSError:
        return False
