"""Shared fixtures: a fresh trace path, and a four-step run over it; the S3 tests' `server` and `runs` (s3server.py).

Also the order tests start in: the longest first (FIRST), so that under `-n 2` the two workers end together
instead of one finishing a minute-long test alone while the other idles.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import Executor, Outcome
from harness.testing import fixed_plan, steps

# Some environments set PYTHONDONTWRITEBYTECODE: then every child process the tests start (hundreds: the crash
# tests' fresh interpreters, the pytester runs) compiles harness again. Let them cache it: a third less CPU there.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

pytest_plugins = ["s3server"]  # the local S3 server and a runs URL in a fresh bucket, for the tests that ask

# The slowest tests and files, slowest first (measured with --durations; the order matters, not the figures):
# collected first, so xdist hands them out first. The Ray tests are one xdist group and go first anyway.
FIRST = (
    "test_soak.py",
    "test_plugin.py::test_record_pass_change_fail_update_pass_and_unused[xdist]",
    "test_mcp.py::test_sigkill_in_a_call_then_resume_in_a_new_process",
    "test_plugin.py::test_goldens_of_a_module_that_no_longer_asserts_any_are_unused",
    "test_workflow.py::test_the_cli_resumes_recovers_reruns_and_forks_a_workflow",
    "test_bench.py",
    "test_release.py",
    "test_frameworks_crash.py",
    "test_viewer_browser.py",
    "test_async.py::test_gathered_model_calls_are_served_again_in_every_fresh_process",
    "test_mcp.py",
    "test_http.py::test_harness_fork_set_path_value_from_the_command_line",
    "test_plugin.py",
    "test_crash_matrix.py",
    "test_viewer_api.py::test_a_window_and_a_stream_hold_their_reply_not_the_records_around_it",
    "test_rerun.py::test_cli_rerun_with_an_agent_factory",
    "test_store_ops.py",
    "test_store.py",
    "test_docs.py",
    "test_seal_blocks.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests FIRST names, in its order, before all others (a stable sort: the rest keep theirs)."""

    def rank(item: pytest.Item) -> int:
        where = item.nodeid.removeprefix("tests/")
        return next((i for i, prefix in enumerate(FIRST) if where.startswith(prefix)), len(FIRST))

    items.sort(key=rank)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """Where the test's run writes; it does not exist yet."""
    return tmp_path / "run.jsonl"


@pytest.fixture
def run(trace: Path) -> Callable[..., Outcome]:
    """run(tool, goal=..., n=4, **executor options): a fixed n-step plan over `trace`, one tool named "work"."""

    def run(tool: Callable[..., Any], *, goal: Any = "four steps", n: int = 4, **options: Any) -> Outcome:
        ex = Executor(planner=fixed_plan(steps(n)), tools={"work": tool}, trace=trace, **options)
        return ex.run(goal)

    return run
