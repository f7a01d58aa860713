"""The git set-up of docs/guides/diff-rerun-fork.md: `git diff` and `git log -p` show traces as normalized records.

A real repository in tmp_path, with the committed `.gitattributes` line and
the local textconv setting, and the real console script as the textconv.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import Executor, ToolError
from harness.testing import fixed_plan, read_records, steps

HARNESS = shutil.which("harness") or str(Path(sys.executable).parent / "harness")
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "HOME": str(repo.parent), "GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat", "LC_ALL": "C"}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def record(trace: Path, *, bump: int = 0, fail_once: bool = False) -> None:
    """A fresh three-step run over trace: new run id, new timestamps, same story unless told otherwise."""
    failed: list[int] = []

    def work(i: int) -> dict[str, int]:
        if fail_once and i == 1 and not failed:
            failed.append(i)
            raise ToolError("flaky")
        return {"value": i * 10 + (bump if i == 1 else 0)}

    trace.unlink(missing_ok=True)
    Executor(planner=fixed_plan(steps(3)), tools={"work": work}, trace=trace).run("three steps")


def changes(diff_text: str) -> tuple[list[str], list[str]]:
    lines = diff_text.splitlines()
    removed = [line[1:] for line in lines if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in lines if line.startswith("+") and not line.startswith("+++")]
    return removed, added


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "Dev")
    (repo / ".gitattributes").write_text("*.jsonl diff=harness-trace\n")
    git(repo, "config", "diff.harness-trace.textconv", f"{shlex.quote(HARNESS)} show --golden")
    return repo


def test_git_diff_and_log_show_the_one_record_that_moved(repo: Path) -> None:
    trace = repo / "traces" / "run.jsonl"
    trace.parent.mkdir()
    record(trace)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "record the run")

    record(trace)  # the same story again: only run id, timestamps and checksums differ
    assert git(repo, "diff") == ""
    raw_removed, _ = changes(git(repo, "diff", "--no-textconv"))
    assert len(raw_removed) == len(read_records(trace))  # without the set-up, every line changed

    record(trace, bump=1)  # step 1's result moves from 10 to 11
    removed, added = changes(git(repo, "diff"))
    assert removed == ['{"kind":"transition","from":"ACT","to":"VERIFY","step":1,"result":{"value":10}}']
    assert added == ['{"kind":"transition","from":"ACT","to":"VERIFY","step":1,"result":{"value":11}}']

    git(repo, "commit", "-q", "-am", "bump step 1")
    assert changes(git(repo, "log", "-p", "-1", "--format=%s")) == (removed, added)


def test_an_inserted_retry_is_an_insertion_in_git_diff(repo: Path) -> None:
    trace = repo / "run.jsonl"
    record(trace)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "record the run")

    record(trace, fail_once=True)  # step 1 fails once with a ToolError and is retried
    removed, added = changes(git(repo, "diff"))
    error = '"error":{"message":"flaky","type":"ToolError"}'
    assert '{"kind":"transition","from":"ACT","to":"PLAN","step":1,' + error + "}" in added
    assert len(added) == len(removed) + 2  # two records inserted; the rest of step 1 only changes its attempt
    assert all('"step":1' in line for line in removed + added)
