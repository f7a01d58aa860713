"""pytest plugin: the `golden_trace` fixture, a syrupy extension for golden traces.

`assert golden_trace == "run.jsonl"` (a path, an Outcome, a Replay or a list
of records) normalizes the trace and compares it with
`golden/<test module>/<test name>.jsonl` beside the test module;
`pytest --snapshot-update` records or re-records it, and syrupy reports
goldens whose test is gone as unused (under pytest-xdist too: the extension
is importable by name, which is how xdist's controller rebuilds it).

What is compared is `normalize()`'s view under the project's rules:
`[tool.harness]` in the rootdir's pyproject.toml (`golden_ignore`, field
paths marked `<ignored>`; `golden_defaults = false` turns the default rules
off; `golden_view = "raw"` compares each record as the trace holds it, not
its behavior view), plus what one assertion adds: `golden_trace(ignore=[...],
defaults=..., view=...)`. A golden is read through the same rules and view
before it is compared, so one recorded before a rule was added (or by an
older harness: a model stream as its chunks, a port, the raw view of golden
format 2) still matches; `--snapshot-update` writes it again as it would be
written today, and a golden of format 2 that differs says so first.

The first line of a failure says what moved: the seq (in the received
trace), kind, from -> to, step and attempt of the first record that differs,
then its changed fields, then every other difference, compact, because
pytest cuts long assertion messages. A golden written in another format
version is reported as stale with how to re-record it, never crashed on.

Only a test that passed speaks for its goldens (`_goldens_unused`): the
golden of a test that failed, errored or was skipped is never deleted nor
written by `--snapshot-update` (goldens are written when their test ends,
once that is known; the summary lists those left as they were).

Unused goldens. syrupy finds snapshots through the extensions a session
used, so a golden whose test module stopped asserting golden traces is
found only while some other test still asserts one, and never when none
does. At the end of the session (on the xdist controller, from the report
syrupy merged from its workers) this plugin looks at the golden folders
that syrupy did not: those of test modules collected in full (not left out
by --ignore or a path, no test deselected by -k, -m or a node id, --lf not
filtering) and those of test modules that no longer exist. A golden there is
unused when no test asserted it and every test that could own it (by name)
ran and passed. It is reported like syrupy's own, fails the run unless
--snapshot-warn-unused, and is deleted by --snapshot-update (not with
--snapshot-no-cleanup). Only files that start with the golden format line
are ever judged.

Registered through the `pytest11` entry point (`harness.pytest_plugin`), so
it loads wherever harness is installed: without syrupy (not a runtime
dependency) pytest still starts, and the fixture says what to install.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from ._errors import HarnessError, MissingExtra
from ._goldens_unused import Outcomes, holding, unused_goldens, visible, writable, write_passed
from .review.diff import diff_with
from .review.normalize import (
    RERECORD,
    RULES,
    Loaded,
    Rules,
    normalize_record,
    normalize_with,
    parse_golden,
    project_rules,
    render,
    stale,
)  # fmt: skip

try:  # syrupy is optional: without it pytest still starts, and golden_trace says what to install
    from syrupy.assertion import SnapshotAssertion
    from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

    HAVE_SYRUPY = True
except ImportError:
    HAVE_SYRUPY = False

if TYPE_CHECKING:
    from syrupy.location import PyTestLocation
    from syrupy.types import PropertyFilter, PropertyMatcher, SerializableData, SerializedData

__all__ = ["GoldenTrace", "GoldenTraceExtension", "golden_trace"]

_UNUSED = pytest.StashKey[tuple[list[Path], bool]]()  # the unused goldens found, and whether they were deleted
_OUTCOMES = pytest.StashKey[Outcomes]()  # what each test did: only a test that passed says its goldens are unused
_NOT_WRITTEN = pytest.StashKey[list[str]]()  # goldens --snapshot-update left as they were: their test did not pass
_RULES = pytest.StashKey[Rules]()  # the project's rules, read once per session


if HAVE_SYRUPY:

    class GoldenTraceExtension(SingleFileSnapshotExtension):
        """One golden trace per file: the normalized records as JSONL, after a format line."""

        _write_mode = WriteMode.TEXT
        file_extension = "jsonl"
        snapshot_dirname = "golden"
        rules: Rules = RULES  # set per assertion by the fixture: the project's, plus golden_trace(ignore=...)
        updating = False  # --snapshot-update: a golden that matches only through today's rules is written again
        # written when the test ends (write_passed), not at the assertion: by then it is known whether it passed
        # (a test that fails after its assertion keeps its golden as it was: _goldens_unused)
        write_immediately = False

        @classmethod
        def write_snapshot_collection(cls, *, snapshot_collection: Any, name_order: Any = None) -> None:
            if writable(snapshot_collection.location):
                super().write_snapshot_collection(snapshot_collection=snapshot_collection, name_order=name_order)

        def discover_snapshots(self, *, test_location: PyTestLocation, ignore_extensions: Any = None) -> Any:
            # the goldens of a test that did not pass are not this session's to call unused
            return visible(super().discover_snapshots(test_location=test_location, ignore_extensions=ignore_extensions))

        @classmethod
        def dirname(cls, *, test_location: PyTestLocation) -> str:
            # syrupy's own dirname reads the base class's snapshot_dirname (set from
            # --snapshot-dirname); goldens live in golden/ whatever that option says
            return str(Path(test_location.filepath).parent / cls.snapshot_dirname / test_location.basename)

        def serialize(
            self,
            data: SerializableData,
            *,
            exclude: PropertyFilter | None = None,
            include: PropertyFilter | None = None,
            matcher: PropertyMatcher | None = None,
        ) -> SerializedData:
            return render(normalize_with(data, self.rules), self.rules)

        def matches(self, *, serialized_data: SerializableData, snapshot_data: SerializableData) -> bool:
            if serialized_data == snapshot_data:
                return True
            if self.updating:  # not byte for byte: written again as today's rules and harness write it
                return False
            try:  # the golden read through today's rules and view; spelling (spacing, key order) does not count
                received = parse_golden(str(serialized_data), "received")
                golden = Loaded.golden(str(snapshot_data), "golden", self.rules)
                return received == [normalize_record(golden.record(i), rules=self.rules) for i in range(len(golden))]
            except HarnessError:
                return False

        def diff_lines(self, serialized_data: SerializedData, snapshot_data: SerializedData) -> Iterator[str]:
            """What moved, most important first: pytest keeps only the first lines of a message."""
            return explain(str(serialized_data), str(snapshot_data), self.rules)

    class GoldenTrace(SnapshotAssertion):
        """syrupy's assertion with harness's options: `golden_trace(ignore=[...], defaults=False, view="raw")`."""

        __hash__ = SnapshotAssertion.__hash__

        @property
        def golden(self) -> GoldenTraceExtension:
            return cast(GoldenTraceExtension, self.extension)

        def __call__(
            self,
            *,
            ignore: str | list[str] | tuple[str, ...] | None = None,
            defaults: bool | None = None,
            view: str | None = None,
            **options: Any,
        ) -> GoldenTrace:  # syrupy's options, and three of harness's
            if ignore is None and defaults is None and view is None:
                return super().__call__(**options)  # type: ignore[return-value]
            rules = self.golden.rules.plus(ignore, defaults, view)  # FieldPathError for a path it cannot read
            super().__call__(extension_class=GoldenTraceExtension, **options)  # a fresh extension, this once
            self.golden.rules, self.golden.updating = rules, self.update_snapshots
            return self

        def __eq__(self, other: Any) -> bool:
            rules = self.golden.rules  # before syrupy puts the options back
            try:
                return super().__eq__(other)
            finally:
                n = self.num_executions - 1
                self.__dict__.setdefault("rules_used", {})[n] = rules
                outcomes, done = self.__dict__.get("outcomes"), self.executions.get(n)
                if self.update_snapshots and outcomes is not None and done is not None:
                    outcomes.wrote[done.snapshot_location] = self.test_location.nodeid  # written if it passes


def explain(received: str, golden: str, rules: Rules) -> Iterator[str]:
    """The lines of a golden trace failure: what moved, most important first."""
    if not golden:
        yield "the golden trace is missing or empty; record it with `pytest --snapshot-update`"
        return
    why = stale(golden.splitlines()[0])
    if why:
        yield f"stale golden trace: {why}; {RERECORD}"
        return
    try:
        result = diff_with(Loaded.golden(golden, "golden", rules), Loaded.golden(received, "received", rules))
    except HarnessError as e:
        yield f"unreadable golden trace: {e}"
        return
    if result.equal:  # the records match; only their spelling (or an older format's head) differs
        yield "golden trace equal record for record, not byte for byte; re-record it with `--snapshot-update`"
        return
    lines = result.lines(a="golden", b="received", limit=30)
    yield f"golden trace differs: {next(lines)}"  # then the notes: a golden of an older format says so
    yield from lines


@pytest.fixture
def golden_trace(request: pytest.FixtureRequest) -> Any:
    """Compare a trace with its golden: `assert golden_trace == outcome` (or a path, a Replay, records).

    Name several goldens in one test with `golden_trace(name="crash")`; leave
    fields out with `golden_trace(ignore=["response.body.usage"])` (added to
    the project's `[tool.harness] golden_ignore`), the default rules with
    `defaults=False`; compare each record as the trace holds it, not its
    behavior view, with `view="raw"` (or `golden_view = "raw"`).
    """
    if not HAVE_SYRUPY:
        missing = MissingExtra(
            "golden_trace", "pytest", "pip install 'harness-trace[pytest]' (or pip install 'syrupy>=6')"
        )
        pytest.fail(str(missing), pytrace=False)
    snapshot: SnapshotAssertion = request.getfixturevalue("snapshot")
    config = request.config
    if _RULES not in config.stash:
        try:
            config.stash[_RULES] = project_rules(config.rootpath)[0]
        except HarnessError as e:
            pytest.fail(f"golden_trace: {e}", pytrace=False)
    options = {f.name: getattr(snapshot, f.name) for f in dataclasses.fields(SnapshotAssertion) if f.init}
    options["extension_class"] = GoldenTraceExtension
    assertion = GoldenTrace(**options)
    assertion.golden.rules, assertion.golden.updating = config.stash[_RULES], snapshot.update_snapshots
    assertion.__dict__["outcomes"] = _outcomes(config)
    return assertion


def _outcomes(config: pytest.Config) -> Outcomes:
    if _OUTCOMES not in config.stash:
        config.stash[_OUTCOMES] = Outcomes()
    return config.stash[_OUTCOMES]


class _Outcomes:
    """A plugin for one session: whether each test passed every phase (on an xdist controller too, which gets
    every worker's reports)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.outcomes = config, _outcomes(config)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.outcomes.record(report)
        if report.when == "teardown" and HAVE_SYRUPY:  # the test is over: its goldens are written now, if it passed
            write_passed(self.config, self.outcomes, GoldenTraceExtension)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Outcomes(config), "harness-golden-outcomes")


@pytest.hookimpl(wrapper=True)
def pytest_assertrepr_compare(config: pytest.Config, op: str, left: Any, right: Any) -> Generator[None, Any, Any]:
    """Put our explanation first: syrupy's starts with `[- snapshot] == [+ received]`, which says nothing."""
    results = yield
    if not HAVE_SYRUPY:
        return results
    assertion = left if isinstance(left, SnapshotAssertion) else right
    if op != "==" or not isinstance(assertion, SnapshotAssertion):
        return results
    if not isinstance(assertion.extension, GoldenTraceExtension) or not assertion.executions:
        return results
    return [_explain(assertion, detailed=str(config.option.diff_mode) != "disabled"), *results]


def _explain(assertion: SnapshotAssertion, *, detailed: bool) -> list[str]:
    n = assertion.num_executions - 1
    result = assertion.executions[n]
    location = result.snapshot_location
    if result.exception is not None:
        return [f"golden trace not compared: {result.exception}"]
    if result.recalled_data is None:
        return [f"golden trace missing: {location} does not exist; record it with `pytest --snapshot-update`"]
    rules = assertion.__dict__.get("rules_used", {}).get(n, RULES)  # what this assertion compared under
    lines = list(explain(str(result.asserted_data or ""), str(result.recalled_data), rules))
    return [*lines, f"golden: {location}"] if detailed else lines[:1]


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
    """Around syrupy's own accounting: it writes and deletes only the goldens of tests that passed; after it,
    report (or delete) the unused goldens it could not see."""
    config = session.config
    if not HAVE_SYRUPY:
        return (yield)
    with holding(session, _outcomes(config), GoldenTraceExtension) as not_written:
        result = yield
    config.stash.setdefault(_NOT_WRITTEN, []).extend(not_written)
    if hasattr(config, "workerinput"):  # an xdist worker: the controller judges, and says what was not written
        config.workeroutput["harness_goldens_not_written"] = not_written  # type: ignore[attr-defined]
        return result
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
        return result  # interrupted, or a usage error: not every test ran
    found = unused_goldens(config, _outcomes(config), GoldenTraceExtension)
    if not found:
        return result
    option = config.option
    delete = bool(option.update_snapshots) and not getattr(option, "no_cleanup", False)
    if delete:
        for path in found:
            path.unlink(missing_ok=True)
            if not any(path.parent.iterdir()):
                path.parent.rmdir()
    elif not option.update_snapshots and not option.warn_unused_snapshots:
        session.exitstatus = int(session.exitstatus) | 1  # what syrupy's unused snapshots do
    config.stash[_UNUSED] = (found, delete)
    return result


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the xdist controller: the goldens a worker did not write, for the summary."""
    left = getattr(node, "workeroutput", {}).get("harness_goldens_not_written", [])
    node.config.stash.setdefault(_NOT_WRITTEN, []).extend(left)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    kept = sorted(os.path.relpath(p, config.rootpath) for p in config.stash.get(_NOT_WRITTEN, []))
    if kept:
        terminalreporter.write_sep("-", "golden traces")
        n = len(kept)
        terminalreporter.write_line(
            f"{n} golden trace{'s' if n > 1 else ''} not written: {'their tests' if n > 1 else 'its test'} did not "
            "pass (the golden stays as it was; fix the test, then run --snapshot-update again)"
        )
        for path in kept:
            terminalreporter.write_line(f"  {path}")
    found, deleted = config.stash.get(_UNUSED, ([], False))
    if not found:
        return
    shown = [os.path.relpath(p, config.rootpath) for p in found]
    many = len(found) > 1
    terminalreporter.write_sep("-", "golden traces")
    if deleted:
        terminalreporter.write_line(f"{len(found)} unused golden trace{'s' if many else ''} deleted.")
        for path in shown:
            terminalreporter.write_line(f"Deleted {path}")
        return
    it = "them" if many else "it"
    terminalreporter.write_line(
        f"{len(found)} golden trace{'s' if many else ''} unused: no test of this run asserts {it} "
        "(the test is gone, or no longer asserts a golden trace)"
    )
    for path in shown:
        terminalreporter.write_line(f"  {path}")
    terminalreporter.write_line("Re-run pytest with --snapshot-update to delete unused golden traces.")
