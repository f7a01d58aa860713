"""Shared fixtures: a fresh trace path, and a four-step run over it; the S3 tests' `server` and `runs` (s3server.py).

Also the order tests start in: the longest first (FIRST), so that under `-n 2` the two workers end together
instead of one finishing a minute-long test alone while the other idles.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
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

# Secrets a result holds are kept encrypted with a key from the user's config folder (harness/trace/vault.py),
# made on first use: the tests (and every child they start) make theirs in a folder of their own, never the user's.
_CONFIG = tempfile.mkdtemp(prefix="harness-config-")
atexit.register(shutil.rmtree, _CONFIG, ignore_errors=True)
os.environ["XDG_CONFIG_HOME"] = _CONFIG
os.environ.pop("HARNESS_SECRET_KEY", None)

pytest_plugins = ["s3server"]  # the local S3 server and a runs URL in a fresh bucket, for the tests that ask

# The slowest tests and files, slowest first (measured with --durations; the order matters, not the figures):
# collected first, so xdist hands them out first; an xdist group goes where its first test is.
FIRST = (
    "test_frameworks.py",  # the "frameworks" xdist group: these three files on one worker, one preloaded helper
    "test_frameworks_crash.py",
    "test_mcp.py",
    "test_fleet.py",  # the "ray" group: one Ray cluster
    "test_viewer_browser.py",  # one browser tab
    "test_soak.py",
    "test_bench.py::test_smoke_run_writes_every_key",
    "test_store_ops.py::test_runs_of_a_url_tells_a_live_writer_from_a_killed_one",
    "test_plugin.py::test_record_pass_change_fail_update_pass_and_unused[xdist]",
    "test_docs.py::test_the_site_builds_strict",
    "test_example_frameworks.py",
    "test_crash_matrix.py",
    "test_records.py::test_two_imports_racing_into_one_folder_never_lose_a_run",
    "test_example_mcp.py",
    "test_plugin.py::test_project_rules_in_pyproject_and_an_assertion_s_own",
    "test_release.py",
    "test_replay.py::test_a_second_replay_in_one_process_reuses_the_first_ones_memory",
    "test_plugin.py::test_goldens_of_a_module_that_no_longer_asserts_any_are_unused",
    "test_bench.py",
    "test_async.py::test_gathered_model_calls_are_served_again_in_every_fresh_process",
    "test_plugin.py",
    "test_store_ops.py",
    "test_workflow_agents.py",
    "test_http.py",
    "test_faults.py",
    "test_store_spans.py",
    "test_workflow_crash.py",
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


@pytest.fixture(scope="session")
def core_only(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a child Python that has harness and orjson only, no extra (run it with `-S`).

    `-S` leaves site-packages out; PYTHONPATH is a folder with links to the two packages. The import of a
    framework fails for real there, and importlib.metadata finds no distribution of it either.
    """
    import orjson

    import harness

    folder = tmp_path_factory.mktemp("core-only")
    for module in (harness, orjson):
        source = Path(module.__file__ or "").parent
        (folder / source.name).symlink_to(source, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return {**env, "PYTHONPATH": str(folder)}
