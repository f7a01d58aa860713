"""This project's own golden traces: each scenario re-runs the executor and must match tests/golden/.

Re-record after an intended change with `pytest tests/test_goldens.py --snapshot-update`
and review the golden diff like code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

import harness
from harness import Executor, RetryPolicy, Step, Tool, ToolError, VerificationFailed, normalize
from harness.review.normalize import render
from harness.testing import FakeLLM, ScriptedTool, counter, fixed_plan, power_cut, read_records, steps


def happy_path(trace: Path) -> None:
    """Three steps; the planner asks a (fake) model for each query; one tool is idempotent and versioned."""
    model = FakeLLM(lambda request: f"query {request['done'] + 1}")

    def plan(goal: Any, progress: list[Any]) -> Step | None:
        if len(progress) == goal["steps"]:
            return None
        query = harness.llm({"ask": "next query", "done": len(progress)}, model)
        return Step(name=f"search {len(progress)}", tool="search", args={"q": query})

    def search(q: str, idempotency_key: str) -> dict[str, Any]:
        return {"q": q, "hits": len(q)}

    tools = {"search": Tool(search, idempotent=True, version="1")}
    Executor(planner=plan, tools=tools, trace=trace).run({"steps": 3})


def retry_after_tool_error(trace: Path) -> None:
    tool = ScriptedTool({2: ToolError("rate limited")})
    Executor(planner=fixed_plan(steps(3)), tools={"work": tool}, trace=trace).run("retry")


def rejected_verification(trace: Path) -> None:
    rejected: list[Any] = []

    def verify(step: Step, result: Any) -> bool:
        if step.name == "step-1" and not rejected:
            rejected.append(result)
            raise VerificationFailed("step-1 must be checked twice")
        return True

    Executor(planner=fixed_plan(steps(2)), tools={"work": counter()}, verifier=verify, trace=trace).run("verify")


def ends_failed(trace: Path) -> None:
    tool = ScriptedTool({n: ToolError(f"down ({n})") for n in range(2, 10)})
    ex = Executor(planner=fixed_plan(steps(3)), tools={"work": tool}, trace=trace, retry=RetryPolicy(max_attempts=2))
    assert ex.run("fail").state == "FAILED"


def crash(trace: Path) -> None:
    """The tool's second call raises RuntimeError: to run() that is a crash, left on the file as one."""
    with pytest.raises(RuntimeError, match="power cut"):
        Executor(planner=fixed_plan(steps(3)), tools={"work": power_cut(2)}, trace=trace).run("crash")


def crash_then_resume(trace: Path) -> None:
    crash(trace)
    out = Executor(planner=fixed_plan(steps(3)), tools={"work": counter()}, trace=trace, resume=True).run("crash")
    assert out.state == "DONE"


SCENARIOS: dict[str, Callable[[Path], None]] = {
    "happy_path": happy_path,
    "retry_after_tool_error": retry_after_tool_error,
    "rejected_verification": rejected_verification,
    "ends_failed": ends_failed,
    "crash_then_resume": crash_then_resume,
}


def test_happy_path(tmp_path: Path, golden_trace: SnapshotAssertion) -> None:
    happy_path(tmp_path / "run.jsonl")
    assert golden_trace == tmp_path / "run.jsonl"


def test_retry_after_tool_error(tmp_path: Path, golden_trace: SnapshotAssertion) -> None:
    retry_after_tool_error(tmp_path / "run.jsonl")
    assert golden_trace == tmp_path / "run.jsonl"


def test_rejected_verification(tmp_path: Path, golden_trace: SnapshotAssertion) -> None:
    rejected_verification(tmp_path / "run.jsonl")
    assert golden_trace == tmp_path / "run.jsonl"


def test_ends_failed(tmp_path: Path, golden_trace: SnapshotAssertion) -> None:
    ends_failed(tmp_path / "run.jsonl")
    assert golden_trace == tmp_path / "run.jsonl"


def test_crash_then_resume(tmp_path: Path, golden_trace: SnapshotAssertion) -> None:
    trace = tmp_path / "run.jsonl"
    crash(trace)
    assert golden_trace(name="crashed") == trace
    out = Executor(planner=fixed_plan(steps(3)), tools={"work": counter()}, trace=trace, resume=True).run("crash")
    assert out.state == "DONE"
    assert golden_trace(name="resumed") == out


@pytest.mark.parametrize("name", SCENARIOS)
def test_two_runs_of_a_scenario_render_to_the_same_bytes(tmp_path: Path, name: str) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    SCENARIOS[name](first)
    SCENARIOS[name](second)
    raw = read_records(first), read_records(second)
    assert raw[0][0]["run_id"] != raw[1][0]["run_id"]  # the runs really are two
    assert render(normalize(first)) == render(normalize(second))


def test_the_golden_files_are_the_normalized_view_with_a_format_line() -> None:
    folder = Path(__file__).parent / "golden" / "test_goldens"
    names = sorted(p.name for p in folder.glob("*.jsonl"))
    assert names == [
        "test_crash_then_resume[crashed].jsonl", "test_crash_then_resume[resumed].jsonl", "test_ends_failed.jsonl",
        "test_happy_path.jsonl", "test_rejected_verification.jsonl", "test_retry_after_tool_error.jsonl",
    ]  # fmt: skip
    for name in names:
        lines = (folder / name).read_text().splitlines()
        assert lines[0] == '{"format":"harness-golden","version":3,"view":1}'
        for line in lines[1:]:
            assert not any(f'"{k}"' in line for k in ("seq", "ts", "crc", "run_id", "env", "hash", "key"))
