"""The executor: retries under the RetryPolicy, FAILED on the file, crashes left as crashes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import harness
from harness import Executor, HarnessError, RetryPolicy, Step, TraceExists, VerificationFailed, replay
from harness.testing import counter, fixed_plan, flaky, power_cut, read_records, steps

Run = Callable[..., harness.Outcome]  # the `run` fixture of conftest.py


def moves(trace: Path) -> list[tuple[str, str, int, int]]:
    """The state moves of the trace; a checkpoint record is VERIFY -> CHECKPOINT -> PLAN at the attempt verified."""
    out: list[tuple[str, str, int, int]] = []
    for r in read_records(trace):
        if r["kind"] == "transition":
            out.append((r["from"], r["to"], r["step"], r.get("attempt", 1)))
        elif r["kind"] == "checkpoint":
            attempt = out[-1][3]
            out += [("VERIFY", "CHECKPOINT", r["step"], attempt), ("CHECKPOINT", "PLAN", r["step"], attempt)]
    return out


def test_a_run_walks_plan_act_verify_checkpoint_for_every_step(trace: Path, run: Run) -> None:
    tool = counter()
    out = run(tool, n=2)
    assert out.state == "DONE" and out.error is None
    assert [(c.step, c.name, c.result) for c in out.checkpoints] == [(0, "step-0", {"i": 0}), (1, "step-1", {"i": 1})]
    assert tool.calls == [{"i": 0}, {"i": 1}]
    assert moves(trace) == [
        ("INIT", "PLAN", 0, 1),
        ("PLAN", "ACT", 0, 1), ("ACT", "VERIFY", 0, 1), ("VERIFY", "CHECKPOINT", 0, 1), ("CHECKPOINT", "PLAN", 0, 1),
        ("PLAN", "ACT", 1, 1), ("ACT", "VERIFY", 1, 1), ("VERIFY", "CHECKPOINT", 1, 1), ("CHECKPOINT", "PLAN", 1, 1),
        ("PLAN", "DONE", 2, 1),
    ]  # fmt: skip
    assert list(replay(trace).checkpoints) == list(out.checkpoints)


def test_a_tool_error_is_retried_and_the_failure_is_on_the_file(trace: Path, run: Run) -> None:
    tool = flaky(2)
    out = run(tool, n=1)
    assert out.state == "DONE" and len(tool.calls) == 3
    assert moves(trace)[1:8] == [
        ("PLAN", "ACT", 0, 1), ("ACT", "PLAN", 0, 1),
        ("PLAN", "ACT", 0, 2), ("ACT", "PLAN", 0, 2),
        ("PLAN", "ACT", 0, 3), ("ACT", "VERIFY", 0, 3), ("VERIFY", "CHECKPOINT", 0, 3),
    ]  # fmt: skip
    errors = [r["error"] for r in read_records(trace) if "error" in r]
    assert errors == [{"type": "ToolError", "message": "flaky: failure 1 of 2"},
                      {"type": "ToolError", "message": "flaky: failure 2 of 2"}]  # fmt: skip


def rejecting(times: int, how: str) -> Callable[[Step, Any], bool]:
    seen: list[Any] = []

    def verify(step: Step, result: Any) -> bool:
        seen.append(result)
        if len(seen) > times:
            return True
        if how == "raise":
            raise VerificationFailed(f"not good enough ({len(seen)})")
        return False

    return verify


@pytest.mark.parametrize(("how", "message"), [("false", "rejected by the verifier"), ("raise", "not good enough (1)")])
def test_a_rejected_verification_is_retried(trace: Path, run: Run, how: str, message: str) -> None:
    tool = counter()
    out = run(tool, n=1, verifier=rejecting(1, how))
    assert out.state == "DONE" and len(tool.calls) == 2
    assert moves(trace)[1:5] == [
        ("PLAN", "ACT", 0, 1), ("ACT", "VERIFY", 0, 1), ("VERIFY", "PLAN", 0, 1), ("PLAN", "ACT", 0, 2),
    ]  # fmt: skip
    errors = [r["error"] for r in read_records(trace) if "error" in r]
    assert errors == [{"type": "VerificationFailed", "message": message}]


@pytest.mark.parametrize("cause", ["tool", "verifier"])
def test_when_attempts_run_out_the_run_ends_failed_on_the_file(trace: Path, run: Run, cause: str) -> None:
    tool = flaky(5) if cause == "tool" else counter()
    options: dict[str, Any] = {"retry": RetryPolicy(max_attempts=2)}
    if cause == "verifier":
        options["verifier"] = rejecting(5, "raise")
    out = run(tool, **options)
    assert out.state == "FAILED" and len(tool.calls) == 2 and out.checkpoints == ()
    last, seal = read_records(trace)[-2:]
    assert (seal["kind"], seal["state"]) == ("seal", "FAILED")
    assert (last["from"], last["to"], last["attempt"]) == ("ACT" if cause == "tool" else "VERIFY", "FAILED", 2)
    assert last["error"] == out.error and out.error is not None
    assert out.error["message"] == ("flaky: failure 2 of 5" if cause == "tool" else "not good enough (2)")
    r = replay(trace)
    assert (r.state, r.complete, len(r.checkpoints)) == ("FAILED", True, 0)


def test_the_default_policy_gives_three_attempts(run: Run) -> None:
    tool = flaky(3)
    assert run(tool, n=1).state == "FAILED"
    assert len(tool.calls) == 3
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(max_attempts=0)


def test_any_other_exception_propagates_and_leaves_the_file_as_a_crash_would(trace: Path, run: Run) -> None:
    with pytest.raises(RuntimeError, match="power cut"):
        run(power_cut(at=2))
    r = replay(trace)
    assert (r.state, r.complete, r.torn_tail, len(r.checkpoints)) == ("ACT", False, False, 1)
    last = read_records(trace)[-1]  # a crash record says why the run stopped; it is no transition
    assert (last["kind"], last["state"], last["step"], last["error"]["message"]) == ("crash", "ACT", 1, "power cut")
    assert last["error"]["type"].endswith("RuntimeError") and "RuntimeError: power cut" in last["traceback"]


def test_a_planner_exception_also_propagates(trace: Path) -> None:
    def plan(goal: Any, progress: list[Any]) -> Step:
        raise KeyError("oops")

    with pytest.raises(KeyError):
        Executor(planner=plan, tools={"work": counter()}, trace=trace).run("g")
    assert replay(trace).state == "PLAN"


def test_trace_exists_leaves_the_file_byte_identical(trace: Path, run: Run) -> None:
    run(counter())
    before = trace.read_bytes()
    tool = counter()
    with pytest.raises(TraceExists, match="resume=True") as info:
        run(tool)
    assert isinstance(info.value, FileExistsError) and info.value.path == str(trace)
    assert trace.read_bytes() == before and tool.calls == []


def test_a_planner_must_name_a_tool_the_executor_has(trace: Path) -> None:
    ex = Executor(planner=fixed_plan(steps(1, tool="nope")), tools={"work": counter()}, trace=trace)
    with pytest.raises(HarnessError, match=r"'nope'.*it has: work"):
        ex.run("g")


def test_a_planner_must_return_a_step_or_none(trace: Path) -> None:
    ex = Executor(planner=lambda goal, progress: {"tool": "work"}, tools={"work": counter()}, trace=trace)  # type: ignore[arg-type, return-value]
    with pytest.raises(HarnessError, match="must return a Step or None"):
        ex.run("g")


def test_the_planner_sees_the_verified_checkpoints_in_order(trace: Path) -> None:
    seen: list[list[Any]] = []

    def plan(goal: Any, progress: list[Any]) -> Step | None:
        seen.append([(c.step, c.name, c.result) for c in progress])
        return fixed_plan(steps(2))(goal, progress)

    Executor(planner=plan, tools={"work": counter()}, trace=trace).run("g")
    assert seen == [[], [(0, "step-0", {"i": 0})], [(0, "step-0", {"i": 0}), (1, "step-1", {"i": 1})]]


def test_without_a_trace_path_the_run_gets_its_own_file_in_runs_dir(tmp_path: Path) -> None:
    out = Executor(planner=fixed_plan(steps(1)), tools={"work": counter()}, runs_dir=tmp_path / "runs").run("g")
    assert Path(out.trace) == tmp_path / "runs" / f"{out.run_id}.jsonl"
    assert replay(out.trace).run_id == out.run_id


def test_bad_options_are_refused_before_anything_is_written(trace: Path) -> None:
    with pytest.raises(ValueError, match="durability"):
        Executor(planner=fixed_plan([]), tools={}, trace=trace, durability="sometimes")
    with pytest.raises(ValueError, match="trace="):
        Executor(planner=fixed_plan([]), tools={}, resume=True)
    assert not trace.exists()
