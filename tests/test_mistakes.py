"""User mistakes fail before anything is written, and agent code cannot bend the recorded story."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import harness
from harness import Executor, HarnessError, Recorder, Step, Tool, ToolError, replay
from harness._boundary import rebuild
from harness.testing import ScriptedTool, fixed_plan, steps


def test_a_verifier_that_edits_the_result_cannot_change_what_was_recorded(trace: Path) -> None:
    def meddling(step: Step, result: Any) -> bool:
        result["checked"] = True  # edits the copy it is shown
        return True

    out = Executor(planner=fixed_plan(steps(2)), tools={"work": ScriptedTool()}, verifier=meddling, trace=trace).run(
        "g"
    )
    r = replay(trace)  # the executor's own trace still supports its story
    assert out.state == r.state == "DONE"
    assert [c.result for c in r.checkpoints] == [c.result for c in out.checkpoints]
    assert all("checked" not in c.result for c in r.checkpoints)


def test_a_tool_that_keeps_mutating_its_result_does_not_change_the_checkpoint(trace: Path) -> None:
    kept: list[dict[str, Any]] = []

    def work(**args: Any) -> dict[str, Any]:
        out = dict(args)
        kept.append(out)
        return out

    def verify(step: Step, result: Any) -> bool:
        kept[-1]["late"] = 1  # the tool's object changes after it returned
        return True

    Executor(planner=fixed_plan(steps(1)), tools={"work": work}, verifier=verify, trace=trace).run("g")
    assert "late" not in replay(trace).checkpoints[0].result


@pytest.mark.parametrize(
    "fields", [("a", "work", [1]), (5, "work", {}), ("a", 2, {})], ids=["list-args", "int-name", "int-tool"]
)
def test_a_malformed_step_is_refused_when_it_is_made(fields: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError, match="Step needs"):
        Step(*fields)


def test_non_str_args_keys_are_refused_and_the_trace_stays_valid(trace: Path) -> None:
    ex = Executor(planner=lambda g, p: Step("a", "work", {1: 2}), tools={"work": ScriptedTool()}, trace=trace)
    with pytest.raises(harness.NotSerializable):
        ex.run("g")
    assert replay(trace).state == "PLAN"


def test_tool_declarations_are_checked(trace: Path) -> None:
    with pytest.raises(TypeError):
        Tool(None, idempotent=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Tool(print, True)  # type: ignore[misc]  # the contract is keyword-only
    with pytest.raises(TypeError, match="'work'"):
        Executor(planner=fixed_plan(steps(1)), tools={"work": 42}, trace=trace)  # type: ignore[dict-item]
    assert not trace.exists()


def test_a_crossing_interrupted_by_a_base_exception_does_not_hide_later_crossings(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"

    def interrupted() -> None:
        raise KeyboardInterrupt

    with Recorder(path, entrypoint="t", goal="g"):
        with pytest.raises(KeyboardInterrupt):
            harness.boundary("slow", {"q": 1}, interrupted)
        harness.llm({"prompt": "after"}, lambda req: "answer")
    assert [c.kind for c in replay(path).crossings] == ["llm"]


def test_rebuilding_a_recorded_error_never_imports_a_module(tmp_path: Path) -> None:
    code = (
        "import sys; from harness._boundary import rebuild\n"
        "e = rebuild({'type': 'this.Nothing', 'message': 'm'})\n"
        "print(type(e).__name__, 'this' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["ToolError", "False"]  # and no Zen of Python was printed


def test_a_recorded_error_comes_back_with_its_class_even_when_its_constructor_wants_more() -> None:
    e = rebuild({"type": "subprocess.CalledProcessError", "message": "boom"})
    assert type(e) is subprocess.CalledProcessError or isinstance(e, ToolError)
    assert "boom" in str(e)
    assert type(rebuild({"type": "builtins.TimeoutError", "message": "slow"})) is TimeoutError
    assert type(rebuild({"type": "harness._errors.ToolError", "message": "no"})) is ToolError


def test_runs_dir_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    afile = tmp_path / "runs"
    afile.write_text("not a folder")
    with pytest.raises(HarnessError, match="runs"):
        Executor(planner=fixed_plan(steps(1)), tools={"work": ScriptedTool()}, runs_dir=afile).run("g")
    assert afile.read_text() == "not a folder"
    assert os.listdir(tmp_path) == ["runs"]
