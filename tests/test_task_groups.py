"""Harness's control exceptions inside exception groups: a pause, a question and a drift raised inside an anyio or
asyncio TaskGroup (or put in a group by hand) end the run exactly as raised bare: PAUSED, PAUSED on the question,
the drift raised with nothing written. A group that also holds real errors keeps them (control.decisive's
precedence). The MCP client's own task groups: tests/test_mcp.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from children import ZYGOTE, kill_when
from hypothesis import given
from hypothesis import strategies as st

import harness
from harness.runtime.control import Paused, decisive

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
import group_agent  # noqa: E402 - after its folder is on the path

CHILD = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import group_agent; group_agent.child(*sys.argv[1:])"
KINDS = ["anyio", "asyncio", "body"]


def killed_in_charge(tmp: Path, kind: str) -> Path:
    """A run of group_agent.pay SIGKILLed inside its unsafe call (the charge made); its trace."""
    trace, mark = tmp / "run.jsonl", tmp / "mark"
    environ = {**os.environ, "GROUP": kind, "GROUP_LEDGER": str(tmp / "ledger"), "GROUP_KILL": "1"}
    child = ZYGOTE.Popen(
        [sys.executable, "-c", CHILD, str(trace), str(tmp / "out")], env={**environ, "GROUP_MARK": str(mark)}
    )
    kill_when(mark.exists, child)
    return trace


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GROUP_LEDGER", str(tmp_path / "ledger"))
    monkeypatch.delenv("GROUP_KILL", raising=False)
    return tmp_path / "ledger"


@pytest.mark.parametrize("kind", KINDS)
def test_an_unsafe_call_in_flight_pauses_the_resume_inside_a_task_group(
    tmp_path: Path, kind: str, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = killed_in_charge(tmp_path, kind)
    monkeypatch.setenv("GROUP", kind)
    out = group_agent.pay.run(500, trace=trace, resume=True)
    assert out.state == "PAUSED" and out.pending is not None and out.pending["tool"] == "charge"
    before = trace.read_bytes()
    assert group_agent.pay.run(500, trace=trace, resume=True).state == "PAUSED"
    assert trace.read_bytes() == before  # paused again, nothing written
    harness.reconcile(trace, happened=True, result="charged 500", evidence="the ledger")
    out = group_agent.pay.run(500, trace=trace, resume=True)
    assert out.state == "DONE" and out.result == "charged 500"
    assert ledger.read_text().split() == ["500"]  # charged once


def test_a_pause_beside_a_real_error_stays_paused_and_the_error_is_raised(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = killed_in_charge(tmp_path, "anyio")
    monkeypatch.setenv("GROUP", "mixed")
    with pytest.raises(ExceptionGroup) as raised:  # the real error is not lost ...
        group_agent.pay.run(500, trace=trace, resume=True)
    assert [str(e) for e in raised.value.exceptions] == ["a sibling task failed"]
    rep = harness.replay(trace)
    assert rep.state == "PAUSED" and rep.pending is not None  # ... and the pause is on the file
    harness.reconcile(trace, happened=True, result="charged 500", evidence="the ledger")
    monkeypatch.setenv("GROUP", "anyio")
    assert group_agent.pay.run(500, trace=trace, resume=True).result == "charged 500"
    assert ledger.read_text().split() == ["500"]


def asks(kind: str) -> Any:
    @harness.workflow
    async def flow() -> Any:
        return await group_agent.grouped(kind, lambda: asyncio.sleep(0, harness.interrupt("ship it?")))

    return flow


@pytest.mark.parametrize("kind", KINDS)
def test_a_question_asked_inside_a_task_group_pauses_the_run_on_it(tmp_path: Path, kind: str) -> None:
    flow, trace = asks(kind), tmp_path / "run.jsonl"
    out = flow.run(trace=trace)
    assert out.state == "PAUSED" and out.pending is not None and out.pending["question"] == "ship it?"
    out = flow.run(trace=trace, resume=True, answer="yes")
    assert out.state == "DONE" and out.result == "yes"


def test_a_question_beside_a_real_error_is_a_failure_of_the_function(tmp_path: Path) -> None:
    out = asks("mixed").run(trace=tmp_path / "run.jsonl")
    assert out.state == "FAILED" and out.error is not None
    assert out.error["type"] == "builtins.ExceptionGroup" and "1 sub-exception" in out.error["message"]


def drifts(kind: str) -> Any:
    @harness.workflow
    async def flow() -> Any:
        said = await group_agent.grouped(kind, lambda: asyncio.sleep(0, harness.llm({"p": os.environ["P"]}, str)))
        return [said, harness.interrupt("go on?")]

    return flow


@pytest.mark.parametrize("kind", KINDS)
def test_a_drift_inside_a_task_group_is_raised_as_a_drift_and_writes_nothing(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow, trace = drifts(kind), tmp_path / "run.jsonl"
    monkeypatch.setenv("P", "one")
    assert flow.run(trace=trace).state == "PAUSED"
    before = trace.read_bytes()
    monkeypatch.setenv("P", "two")  # the function now asks the model another thing
    with pytest.raises(harness.ReplayDrift):
        flow.run(trace=trace, resume=True, answer="yes")
    assert trace.read_bytes() == before
    monkeypatch.setenv("P", "one")
    assert flow.run(trace=trace, resume=True, answer="yes").result == ["{'p': 'one'}", "yes"]


def test_an_executors_tool_that_asks_inside_a_task_group_pauses_the_run(tmp_path: Path) -> None:
    def plan(goal: Any, progress: Any) -> Any:
        return None if progress else harness.Step("ask", "check", {})

    def check() -> Any:
        async def inside() -> Any:
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.sleep, 0)
                return harness.interrupt("really?")

        return asyncio.run(inside())

    def executor(**kw: Any) -> Any:
        return harness.Executor(planner=plan, tools={"check": check}, trace=tmp_path / "run.jsonl", **kw)

    out = executor().run("go")
    assert out.state == "PAUSED" and out.pending is not None and out.pending["question"] == "really?"
    assert executor(resume=True).run("go", answer="yes").state == "DONE"


def test_an_executors_planner_that_drifts_inside_a_task_group_raises_the_drift_with_no_crash_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def plan(goal: Any, progress: Any) -> Any:
        if progress:
            return None
        ask = lambda: asyncio.sleep(0, harness.llm({"p": os.environ["P"]}, str))  # noqa: E731
        said = asyncio.run(group_agent.grouped("anyio", ask))
        return harness.Step("s", "check", {"said": said, "go": harness.interrupt("go on?")})

    def check(said: str, go: str) -> Any:
        return [said, go]

    def executor(**kw: Any) -> Any:
        return harness.Executor(planner=plan, tools={"check": check}, trace=tmp_path / "run.jsonl", **kw)

    monkeypatch.setenv("P", "one")
    assert executor().run("go").state == "PAUSED"
    monkeypatch.setenv("P", "two")
    with pytest.raises(harness.ReplayDrift):  # the drift itself, not a group: `except ReplayDrift` catches it
        executor(resume=True).run("go", answer="yes")
    kinds = [r["kind"] for r in map(orjson.loads, (tmp_path / "run.jsonl").read_bytes().splitlines())]
    assert "crash" not in kinds  # a drift is harness's own verdict, not the agent's crash


# --- decisive(): the precedence, over any nesting --------------------------------------------------------------

LEAVES = {
    "drift": lambda: harness.ReplayDrift("drifted", seq=3, line=3, fields={}),
    "pause": lambda: Paused("outcome"),
    "question": lambda: harness.Interrupted("q?"),
    "error": lambda: ValueError("real"),
    "stop": lambda: KeyboardInterrupt(),
}


def nest(tree: Any) -> BaseException:
    if isinstance(tree, str):
        e = LEAVES[tree]()
        e.kind = tree  # type: ignore[attr-defined]
        return e
    return BaseExceptionGroup("g", [nest(t) for t in tree])


trees = st.recursive(st.sampled_from(sorted(LEAVES)), lambda kids: st.lists(kids, min_size=1, max_size=3), max_leaves=8)


def kinds(e: BaseException) -> list[str]:
    if isinstance(e, BaseExceptionGroup):
        return [k for x in e.exceptions for k in kinds(x)]
    return [e.kind]  # type: ignore[attr-defined]


@given(trees)
def test_decisive_takes_a_stop_then_a_verdict_then_the_real_errors_then_a_pause_then_a_question(tree: Any) -> None:
    raised = nest(tree)
    got = decisive(raised)
    if not isinstance(raised, BaseExceptionGroup):
        assert got is raised
        return
    found = kinds(raised)
    if "stop" in found:  # Ctrl-C (or sys.exit) stops the process, as asyncio.TaskGroup raises it bare
        assert isinstance(got, KeyboardInterrupt)
    elif "drift" in found:
        assert isinstance(got, harness.ReplayDrift)
    elif "error" in found:
        assert isinstance(got, BaseExceptionGroup)  # every real error, nothing of harness's
        assert sorted(kinds(got)) == sorted(k for k in found if k == "error")
    elif "pause" in found:
        assert isinstance(got, Paused)
    else:
        assert isinstance(got, harness.Interrupted)


def test_a_verdict_names_the_rest_of_its_group() -> None:
    drift = LEAVES["drift"]()
    got = decisive(BaseExceptionGroup("g", [ValueError("lost?"), ExceptionGroup("h", [drift])]))
    assert got is drift and got.__notes__ == ["raised in an exception group beside: ValueError: lost?"]


def test_outside_a_group_an_exception_is_decisive_as_it_is() -> None:
    e = ValueError("x")
    assert decisive(e) is e


def test_a_verdict_that_a_tools_task_group_raised_names_the_rest_of_its_group_once(tmp_path: Path) -> None:
    """The call asks decisive() of the group its tool raised (the step's failed attempt), then the workflow's end
    asks again of the same group: the verdict comes out with its note once, not once per asking."""

    async def tool() -> None:
        async def misuse() -> None:
            raise harness.HarnessError("not callable like that")

        async def fails() -> None:
            raise ValueError("a sibling failed")

        async with asyncio.TaskGroup() as group:
            group.create_task(misuse())
            group.create_task(fails())

    @harness.workflow
    async def flow() -> None:
        await harness.acall(tool)

    with pytest.raises(harness.HarnessError) as raised:
        flow.run(trace=tmp_path / "run.jsonl")
    assert raised.value.__notes__ == ["raised in an exception group beside: ValueError: a sibling failed"]


def test_ctrl_c_inside_an_anyio_group_stops_the_run_as_ctrl_c_outside_one(tmp_path: Path) -> None:
    """anyio puts a KeyboardInterrupt raised in its group's body (Ctrl-C during sync code there) in a group: the run
    raises the KeyboardInterrupt itself, with its crash record, as when it is raised bare (the CLI's exit 130)."""

    def stopped() -> None:
        raise KeyboardInterrupt

    @harness.workflow
    async def flow() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep, 0)
            harness.call(harness.Tool(stopped, idempotent=False))

    trace = tmp_path / "run.jsonl"
    with pytest.raises(KeyboardInterrupt):
        flow.run(trace=trace)
    crash = [r for r in map(orjson.loads, trace.read_bytes().splitlines()) if r["kind"] == "crash"]
    assert len(crash) == 1 and crash[0]["error"]["type"] == "builtins.KeyboardInterrupt", crash
