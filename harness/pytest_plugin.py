"""pytest plugin: the `golden_trace` fixture, a syrupy extension for golden traces.

`assert golden_trace == "run.jsonl"` (a path, an Outcome, a Replay or a list
of records) normalizes the trace and compares it with
`golden/<test module>/<test name>.jsonl` beside the test module;
`pytest --snapshot-update` records or re-records it, and syrupy reports
goldens whose test is gone as unused (under pytest-xdist too: the extension
is importable by name, which is how xdist's controller rebuilds it).

The first line of a failure says what moved: the seq (in the received
trace), kind, from -> to, step and attempt of the first record that differs,
then its changed fields, then every other difference, compact, because
pytest cuts long assertion messages. A golden written in another format
version is reported as stale with how to re-record it, never crashed on.

Registered through the `pytest11` entry point (`harness.pytest_plugin`), so
it loads wherever harness is installed: without syrupy (not a runtime
dependency) pytest still starts, and the fixture says what to install.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._diff import diff
from ._errors import HarnessError
from ._normalize import RERECORD, Loaded, normalize, parse_golden, render, stale

try:  # syrupy is optional: without it pytest still starts, and golden_trace says what to install
    from syrupy.assertion import SnapshotAssertion
    from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

    HAVE_SYRUPY = True
except ImportError:
    HAVE_SYRUPY = False

if TYPE_CHECKING:
    from syrupy.location import PyTestLocation
    from syrupy.types import PropertyFilter, PropertyMatcher, SerializableData, SerializedData

__all__ = ["GoldenTraceExtension", "golden_trace"]


if HAVE_SYRUPY:

    class GoldenTraceExtension(SingleFileSnapshotExtension):
        """One golden trace per file: the normalized records as JSONL, after a format line."""

        _write_mode = WriteMode.TEXT
        file_extension = "jsonl"
        snapshot_dirname = "golden"

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
            return render(normalize(data))

        def matches(self, *, serialized_data: SerializableData, snapshot_data: SerializableData) -> bool:
            if serialized_data == snapshot_data:
                return True
            try:  # same records written differently (hand-edited spacing, key order) still match
                received = parse_golden(str(serialized_data), "received")
                return bool(received == parse_golden(str(snapshot_data), "golden"))
            except HarnessError:
                return False

        def diff_lines(self, serialized_data: SerializedData, snapshot_data: SerializedData) -> Iterator[str]:
            """What moved, most important first: pytest keeps only the first lines of a message."""
            golden = str(snapshot_data)
            if not golden:
                yield "the golden trace is missing or empty; record it with `pytest --snapshot-update`"
                return
            why = stale(golden.splitlines()[0])
            if why:
                yield f"stale golden trace: {why}; {RERECORD}"
                return
            try:
                result = diff(Loaded.golden(golden, "golden"), Loaded.golden(str(serialized_data), "received"))
            except HarnessError as e:
                yield f"unreadable golden trace: {e}"
                return
            if result.equal:  # the records match; only their spelling differs
                yield "golden trace equal record for record, not byte for byte; re-record it with `--snapshot-update`"
                return
            lines = result.lines(a="golden", b="received", limit=30)
            yield f"golden trace differs: {next(lines)}"
            yield from lines


@pytest.fixture
def golden_trace(request: pytest.FixtureRequest) -> Any:
    """Compare a trace with its golden: `assert golden_trace == outcome` (or a path, a Replay, records).

    Name several goldens in one test with `golden_trace(name="crash")`.
    """
    if not HAVE_SYRUPY:
        pytest.fail("golden_trace needs syrupy: pip install 'syrupy>=4.6' (or 'harness-trace[pytest]')", pytrace=False)
    snapshot: SnapshotAssertion = request.getfixturevalue("snapshot")
    return snapshot.use_extension(GoldenTraceExtension)


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
    result = assertion.executions[assertion.num_executions - 1]
    location = result.snapshot_location
    if result.exception is not None:
        return [f"golden trace not compared: {result.exception}"]
    if result.recalled_data is None:
        return [f"golden trace missing: {location} does not exist; record it with `pytest --snapshot-update`"]
    lines = list(assertion.extension.diff_lines(result.asserted_data or "", result.recalled_data))
    return [*lines, f"golden: {location}"] if detailed else lines[:1]
