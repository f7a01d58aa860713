"""The step limit: a planner that never says the goal is met ends FAILED, recorded, instead of filling the disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import Executor, Step, TraceCorruption, replay, rerun
from harness.testing import ScriptedTool, counter, read_records, write_trace


def endless(goal: Any, progress: list[Any]) -> Step:
    return Step(name=f"step-{len(progress)}", tool="work", args={"i": len(progress)})


def test_a_planner_that_never_ends_fails_at_the_limit_with_a_recorded_error(trace: Path) -> None:
    tool = counter()
    out = Executor(planner=endless, tools={"work": tool}, trace=trace, max_steps=5).run("g")
    assert out.state == "FAILED" and len(out.checkpoints) == 5 and len(tool.calls) == 5
    assert out.error == {
        "type": "MaxSteps",
        "message": "the planner planned step 5 ('step-5') after 5 steps, the limit "
        "(Executor(max_steps=...), None for no limit)",
        "max_steps": 5,
    }
    last, seal = read_records(trace)[-2:]
    assert seal["kind"] == "seal"
    assert (last["from"], last["to"], last["step"], last.get("attempt", 1), last["error"]) == (
        "PLAN", "FAILED", 5, 1, out.error
    )  # fmt: skip
    r = replay(trace)  # the table has the edge, and replay accepts it
    assert (r.state, len(r.checkpoints), r.complete) == ("FAILED", 5, True)
    again = Executor(planner=endless, tools={"work": tool}, trace=trace, resume=True, max_steps=5).run("g")
    assert (again.state, again.error, len(tool.calls)) == ("FAILED", out.error, 5)  # finished: nothing more runs


def test_a_planner_that_ends_at_the_limit_is_done(trace: Path) -> None:
    def five(goal: Any, progress: list[Any]) -> Step | None:
        return None if len(progress) == 5 else endless(goal, progress)

    assert Executor(planner=five, tools={"work": counter()}, trace=trace, max_steps=5).run("g").state == "DONE"


def test_retries_do_not_count_as_steps(trace: Path) -> None:
    from harness import ToolError

    tool = ScriptedTool({1: ToolError("no"), 2: ToolError("no")})

    def two(goal: Any, progress: list[Any]) -> Step | None:
        return None if len(progress) == 2 else endless(goal, progress)

    out = Executor(planner=two, tools={"work": tool}, trace=trace, max_steps=2).run("g")
    assert out.state == "DONE" and len(tool.calls) == 4


def test_the_default_limit_and_no_limit() -> None:
    assert Executor(planner=endless, tools={}).max_steps == 10_000
    assert Executor(planner=endless, tools={}, max_steps=None).max_steps is None


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10", True])
def test_a_limit_that_is_not_a_positive_int_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_steps must be a positive int, or None for no limit"):
        Executor(planner=endless, tools={}, max_steps=bad)


def test_a_rerun_of_a_run_that_hit_the_limit_hits_it_again(trace: Path) -> None:
    Executor(planner=endless, tools={"work": counter()}, trace=trace, max_steps=3).run("g")
    again = rerun(trace, planner=endless, tools={"work": counter()})
    assert (again.state, again.equal, again.live_calls) == ("FAILED", True, 0)


@pytest.mark.parametrize(
    ("error", "said"),
    [(None, "a transition record without a valid 'error' field"), ("boom", "FAILED without its error object")],
    ids=["missing", "not-an-object"],
)
def test_replay_refuses_a_transition_into_failed_without_its_error(trace: Path, error: Any, said: str) -> None:
    Executor(planner=endless, tools={"work": counter()}, trace=trace, max_steps=1).run("g")
    records = read_records(trace)[:-1]  # the run without its seal: the last record moves into FAILED
    del records[-1]["error"]
    if error is not None:
        records[-1]["error"] = error
    write_trace(trace, records)
    with pytest.raises(TraceCorruption) as info:
        replay(trace)
    assert (info.value.reason, info.value.line) == ("malformed", len(records))
    assert said in str(info.value)
