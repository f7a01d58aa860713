"""User mistakes fail before anything is written, and agent code cannot bend the recorded story."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import harness
from harness import Executor, HarnessError, Recorder, Step, Tool, ToolError, replay
from harness.runtime.boundary import rebuild
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
        "import sys; from harness.runtime.boundary import rebuild\n"
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
    with pytest.raises(harness.TraceUnreadable, match="cannot hold runs") as info:
        Executor(planner=fixed_plan(steps(1)), tools={"work": ScriptedTool()}, runs_dir=afile).run("g")
    assert info.value.path == str(afile)
    assert afile.read_text() == "not a folder"
    assert os.listdir(tmp_path) == ["runs"]


def test_tools_given_as_a_list_say_what_tools_must_be() -> None:
    def search(q: str) -> str:
        return q

    with pytest.raises(TypeError, match=r"^tools must be a dict of name -> callable or harness\.Tool, not a list"):
        Executor(planner=fixed_plan([]), tools=[search])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key 1 is not a str"):
        Executor(planner=fixed_plan([]), tools={1: search})  # type: ignore[dict-item]


class Stamp:
    pass


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"hits": [{"when": 1}] * 3 + [{"when": datetime(2026, 1, 1)}]}, ".hits[3].when is a datetime, not a JSON"),
        ({"hits": Stamp()}, ".hits is a Stamp, not a JSON"),
        ({"hits": object()}, ".hits is an object, not a JSON"),
        ({"hits": {2: "x"}}, ".hits is a dict with the key 2, which is an int, not a str"),
        ({"hits": float("nan")}, ".hits is nan, not a finite number"),
    ],
    ids=["datetime", "class", "object", "int-key", "nan"],
)
def test_a_result_that_cannot_be_stored_names_tool_step_and_field_path(trace: Path, value: Any, said: str) -> None:
    def search(**args: Any) -> Any:
        return value if args["i"] == 2 else {"hits": []}

    ex = Executor(planner=fixed_plan(steps(3, tool="search")), tools={"search": search}, trace=trace)
    with pytest.raises(harness.NotSerializable) as info:
        ex.run("g")
    e = info.value
    assert str(e).startswith(f"result of tool 'search' at step 2: {said}")
    assert (e.field, e.tool, e.step) == ("result", "search", 2)
    assert replay(trace).state == "ACT"  # nothing of the result was written


def test_args_that_cannot_be_stored_name_tool_step_and_field_path(trace: Path) -> None:
    planner = fixed_plan([Step("a", "work", {"at": (1, 2)})])
    with pytest.raises(harness.NotSerializable, match=r"^args of tool 'work' at step 0: \.at is a tuple, not a JSON"):
        Executor(planner=planner, tools={"work": ScriptedTool()}, trace=trace).run("g")
    assert replay(trace).state == "PLAN"


@pytest.mark.parametrize("answer", [None, 1, "yes", {"ok": True}], ids=["None", "int", "str", "dict"])
def test_a_verifier_answer_other_than_true_or_false_stops_the_run_naming_the_step(trace: Path, answer: Any) -> None:
    tool = ScriptedTool()
    seen: list[int] = []

    def verify(step: Step, result: Any) -> Any:
        seen.append(result["i"])
        return True if result["i"] == 0 else answer  # step 1: a forgotten return, or a truthy non-bool

    ex = Executor(planner=fixed_plan(steps(3)), tools={"work": tool}, verifier=verify, trace=trace)
    with pytest.raises(HarnessError) as info:
        ex.run("g")
    assert str(info.value).startswith(f"the verifier returned {answer!r} for step 1 ('step-1', tool 'work'); only True")
    r = replay(trace)  # stopped as a crash: the result is recorded, not judged, and the run resumes
    assert (r.state, len(r.checkpoints), len(tool.calls)) == ("VERIFY", 1, 2)
    fixed = Executor(planner=fixed_plan(steps(3)), tools={"work": tool}, trace=trace, resume=True).run("g")
    assert fixed.state == "DONE" and len(tool.calls) == 3  # step 1 is verified from the trace, not called again


def test_a_false_verifier_answer_is_still_a_rejection(trace: Path) -> None:
    out = Executor(
        planner=fixed_plan(steps(1)), tools={"work": ScriptedTool()}, verifier=lambda s, r: False, trace=trace
    ).run("g")
    assert out.state == "FAILED" and out.error == {"type": "VerificationFailed", "message": "rejected by the verifier"}


async def async_tool(**args: Any) -> dict[str, Any]:
    return args


async def async_planner(goal: Any, progress: list[Any]) -> Step | None:
    return None


async def async_verifier(step: Step, result: Any) -> bool:
    return True


class AsyncCallable:
    async def __call__(self, **args: Any) -> dict[str, Any]:
        return args


ARUN = r"is async, and run\(\) calls it without awaiting it: use `await executor.arun\(goal\)`"
ASYNC_PARTS: dict[str, tuple[dict[str, Any], str]] = {
    "planner": ({"planner": async_planner}, "the planner"),
    "verifier": ({"verifier": async_verifier}, "the verifier"),
    "tool": ({"tools": {"work": async_tool}}, "tool 'work'"),
    "tool object": ({"tools": {"work": AsyncCallable()}}, "tool 'work'"),
    "declared tool": ({"tools": {"work": Tool(async_tool, idempotent=True)}}, "tool 'work'"),
}


@pytest.mark.parametrize("part", ASYNC_PARTS, ids=ASYNC_PARTS.keys())
def test_an_async_part_given_to_run_points_to_arun_before_anything_is_written(trace: Path, part: str) -> None:
    given, what = ASYNC_PARTS[part]
    parts: dict[str, Any] = {"planner": fixed_plan(steps(1)), "tools": {"work": ScriptedTool()}, **given}
    with pytest.raises(HarnessError, match=f"^{what} {ARUN}"):
        Executor(**parts, trace=trace).run("g")
    assert not trace.exists()


NEVER_AWAITED = """
import warnings, sys
warnings.simplefilter("error")  # a "never awaited" RuntimeWarning would fail here, or print on stderr
from harness import Executor, HarnessError, Step
from harness.testing import fixed_plan, steps

async def make(**args):
    return args

def planner(goal, progress):  # plain functions that return coroutines: only the call reveals them
    return make() if goal == "planner" else fixed_plan(steps(1))(goal, progress)

tools = {"work": (lambda **args: make(**args)) if sys.argv[2] == "tool" else (lambda **args: args)}
verifier = (lambda step, result: make()) if sys.argv[2] == "verifier" else None
try:
    Executor(planner=planner, tools=tools, verifier=verifier, trace=sys.argv[1]).run(sys.argv[2])
except HarnessError as e:
    print(e)
"""


@pytest.mark.parametrize("part", ["planner", "tool", "verifier"])
def test_a_coroutine_returned_to_run_is_closed_and_points_to_arun(trace: Path, part: str) -> None:
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", NEVER_AWAITED, str(trace), part], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr
    what = {"planner": "the planner", "tool": "tool 'work'", "verifier": "the verifier"}[part]
    assert out.stdout.startswith(f"{what} is async, and run() calls it without awaiting it")
    assert "never awaited" not in out.stdout + out.stderr


def test_a_planner_cannot_change_progress(trace: Path) -> None:
    def planner(goal: Any, progress: list[Any]) -> Step | None:
        if len(progress) == 1:
            progress.clear()  # would make a naive planner start over, forever
        return fixed_plan(steps(3))(goal, progress)

    with pytest.raises(TypeError, match="progress is read only"):
        Executor(planner=planner, tools={"work": ScriptedTool()}, trace=trace).run("g")
    assert len(replay(trace).checkpoints) == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p.append(1),
        lambda p: p.pop(),
        lambda p: p.__setitem__(0, 1),
        lambda p: p.__delitem__(0),
        lambda p: p.extend([1]),
        lambda p: p.insert(0, 1),
        lambda p: p.remove(p[0]),
        lambda p: p.sort(),
        lambda p: p.reverse(),
        lambda p: p.__iadd__([1]),
        lambda p: p.__imul__(2),
    ],
)
def test_progress_refuses_every_change_and_reads_as_a_list(trace: Path, change: Callable[[Any], Any]) -> None:
    seen: list[Any] = []

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        if len(progress) == 2:
            seen.extend([isinstance(progress, list), progress[-1].step, [c.step for c in progress], progress[:1]])
            with pytest.raises(TypeError, match="read only"):
                change(progress)
            return None
        return steps(2)[len(progress)]

    assert Executor(planner=planner, tools={"work": ScriptedTool()}, trace=trace).run("g").state == "DONE"
    assert seen[:3] == [True, 1, [0, 1]] and seen[3][0].step == 0


def test_copies_of_progress_are_the_planners_own_lists(trace: Path) -> None:
    copies: list[Any] = []

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        if len(progress) == 2:
            copies.extend([copy.copy(progress), copy.deepcopy(progress), pickle.loads(pickle.dumps(progress))])
            copies.extend([list(progress), progress[:], [*progress]])
            for mine in copies:
                mine.append("mine")  # each is a plain list, free to change
            return None
        return steps(2)[len(progress)]

    out = Executor(planner=planner, tools={"work": ScriptedTool()}, trace=trace).run("g")
    assert all(type(c) is list and [x.step for x in c[:2]] == [0, 1] and c[2] == "mine" for c in copies)
    assert len(copies) == 6 and len(out.checkpoints) == 2


def test_no_exception_is_swallowed_without_a_reason() -> None:
    """No silent `except`: a handler that does nothing with what it caught (its body only `pass`, `continue` or
    `...`), and a `contextlib.suppress` of Exception or BaseException, carries a comment saying why ignoring it
    is right (on its line or in its body). Any other handler logs, re-raises, returns or records the error."""
    import ast

    root = Path(harness.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines), str(path))):
            if isinstance(node, ast.ExceptHandler) and all(
                isinstance(s, ast.Pass | ast.Continue) or (isinstance(s, ast.Expr) and ast.unparse(s) == "...")
                for s in node.body
            ):
                said = lines[node.lineno - 1 : node.body[-1].end_lineno or node.lineno]
            elif (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).endswith("suppress")
                and any(ast.unparse(a) in ("Exception", "BaseException") for a in node.args)
            ):
                said = [lines[node.lineno - 1]]
            else:
                continue
            if not any("#" in line for line in said):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    assert found == []


def test_no_assert_in_the_library_decides_what_happens_to_a_run() -> None:
    """`python -O` strips asserts, and an AssertionError tells a user nothing: a state harness believes
    impossible raises HarnessError("internal error, please report: ...") naming the trace and the seq."""
    import ast

    root = Path(harness.__file__).parent
    found = [
        f"{path.relative_to(root.parent)}:{node.lineno}"
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Assert)
    ]
    assert found == []
    e = harness._errors.internal("a checkpoint in state ACT", "run.jsonl", 7)
    assert isinstance(e, HarnessError)
    assert str(e) == "internal error, please report: run.jsonl: seq 7: a checkpoint in state ACT"
