"""Shared fixtures: a fresh trace path, and a four-step run over it; the S3 tests' `server` and `runs` (s3server.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import Executor, Outcome
from harness.testing import fixed_plan, steps

pytest_plugins = ["s3server"]  # the local S3 server and a runs URL in a fresh bucket, for the tests that ask


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
