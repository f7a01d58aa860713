"""examples/workflow.py, run as a user would, and its golden tests: a live run (the model is a local stand-in)
and a recording committed beside the tests, rerun offline with zero live calls, as the README shows for CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import harness

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "examples"))  # after tests/: its mcp_agent.py must not hide tests/mcp_agent.py

import workflow  # noqa: E402 - examples/ is a folder of scripts, not a package

RECORDING = Path(__file__).resolve().parent / "fixtures" / "workflow" / "research.jsonl"


def test_the_example_crashes_resumes_and_reruns(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "workflow.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "equal: True, live calls: 0" in done.stdout
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls.count("send_email: team@example.com") == 1  # the email went out once
    keys = {c for c in calls if c.startswith("reserve_printer")}
    assert len(keys) == 1 and calls.count(next(iter(keys))) == 2  # the reservation made again, with its one key
    assert sum(c.startswith("model:") for c in calls) == 4  # no model call made again
    rep = harness.replay(tmp_path / "research.jsonl")
    assert rep.state == "DONE" and rep.resumes == 1 and rep.sealed


def test_the_research_run(tmp_path: Path, golden_trace: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workflow, "LEDGER", tmp_path)
    outcome = workflow.research.run("tide pools", to="team@example.com", trace=tmp_path / "run.jsonl")
    assert outcome.state == "DONE"
    assert golden_trace == outcome


def test_the_recorded_research_reruns_offline(golden_trace: Any) -> None:
    """What the README's CI test does: the recording (a crash and its resume) rerun, zero live calls."""
    r = harness.rerun(RECORDING, workflow=workflow.research)
    assert r.equal and r.live_calls == 0 and r.state == "DONE"
    assert golden_trace == list(r.records)
