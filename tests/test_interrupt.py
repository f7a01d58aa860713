"""harness.interrupt(): a run pauses on a question, a resume brings the answer, a rerun serves it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import in_process
import orjson
import pytest
from children import ZYGOTE

import harness
from harness import Executor, HarnessError, Step, TraceCorruption, replay
from harness.testing import FakeLLM, counter, read_records, write_trace


def asking_agent(model: FakeLLM | None = None) -> tuple[Any, dict[str, Any], list[Any]]:
    """Step 0 is `pay` for the amount a human approves; the planner asks first (after one model call)."""
    model = model or FakeLLM(lambda request: {"suggest": 5})
    answers: list[Any] = []
    pay = counter()

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        said = harness.llm("how much?", model)
        answer = harness.interrupt({"approve": said["suggest"]})
        answers.append(answer)
        return Step("pay", "work", {"i": answer["amount"]})

    return planner, {"work": pay}, answers


def test_the_planner_asks_the_run_pauses_and_the_answer_finishes_it(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    model = FakeLLM(lambda request: {"suggest": 5})
    planner, tools, answers = asking_agent(model)
    out = Executor(planner=planner, tools=tools, trace=trace).run("refund")
    assert out.state == "PAUSED" and answers == [] and tools["work"].calls == []
    pause = read_records(trace)[-1]
    assert (pause["from"], pause["to"], pause["question"]) == ("PLAN", "PAUSED", {"approve": 5})
    assert out.pending == {"seq": pause["seq"], "step": 0, "state": "PLAN", "question": {"approve": 5}}
    assert replay(trace).pending == out.pending

    before = trace.read_bytes()  # resuming without an answer writes nothing and asks nobody
    again = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund")
    assert again.pending == out.pending and trace.read_bytes() == before

    done = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund", answer={"amount": 4})
    assert done.state == "DONE" and answers == [{"amount": 4}] and tools["work"].calls == [{"i": 4}]
    assert len(model.requests) == 1  # the model call made before the question is served again, not made again
    kinds = [(r["kind"], r.get("from"), r.get("to"), r.get("boundary")) for r in read_records(trace)]
    n = kinds.index(("transition", "PLAN", "PAUSED", None))
    assert kinds[n + 1 : n + 5] == [
        ("resume", None, None, None),
        ("answer", None, None, None),
        ("transition", "PAUSED", "PLAN", None),
        ("crossing", None, None, "interrupt"),
    ]
    answer = read_records(trace)[n + 2]
    assert (answer["op"], answer["answer"]) == (pause["seq"], {"amount": 4})


def test_a_rerun_of_an_interrupted_and_answered_run_is_equal_with_no_live_call(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    planner, tools, _ = asking_agent()
    Executor(planner=planner, tools=tools, trace=trace).run("refund")
    Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund", answer={"amount": 4})

    model = FakeLLM(lambda request: pytest.fail("a rerun must not call the model"))
    planner2, tools2, answers = asking_agent(model)
    r = harness.rerun(trace, planner=planner2, tools=tools2, out=tmp_path / "again.jsonl")
    assert (r.equal, r.live_calls, r.state) == (True, 0, "DONE")
    assert answers == [{"amount": 4}] and tools2["work"].calls == []  # the recorded answer is served
    assert harness.diff(trace, tmp_path / "again.jsonl").equal


def test_a_rerun_of_a_run_still_waiting_stops_at_the_question(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    planner, tools, _ = asking_agent()
    Executor(planner=planner, tools=tools, trace=trace).run("refund")
    r = harness.rerun(trace, planner=planner, tools=tools)
    assert (r.equal, r.live_calls, r.state) == (True, 0, "PAUSED")


def test_a_fork_at_the_answer_changes_what_the_human_said(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    planner, tools, _ = asking_agent()
    Executor(planner=planner, tools=tools, trace=trace).run("refund")
    Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund", answer={"amount": 4})
    at = next(r["seq"] for r in read_records(trace) if r.get("boundary") == "interrupt")
    planner2, tools2, answers = asking_agent()
    child = harness.fork(trace, at=at, value={"amount": 9}, planner=planner2, tools=tools2, out=tmp_path / "c.jsonl")
    assert child.state == "DONE" and answers == [{"amount": 9}] and tools2["work"].calls == [{"i": 9}]


def tool_asking(calls: list[Any], crash_once: list[bool] | None = None) -> Any:
    def ship(i: int) -> dict[str, Any]:
        calls.append(i)
        first = harness.interrupt(f"ship order {i}?")
        second = harness.interrupt("by air?")
        if crash_once:
            crash_once.pop()
            raise RuntimeError("power cut after both answers")
        return {"i": i, "ship": first, "air": second}

    return ship


def one_step(goal: Any, done: list[Any]) -> Step | None:
    return None if done else Step("ship", "ship", {"i": 1})


def test_a_tool_that_asks_twice_gets_each_answer_in_order_also_after_a_crash(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    calls: list[Any] = []
    tools = {"ship": tool_asking(calls, crash_once=[True])}
    out = Executor(planner=one_step, tools=tools, trace=trace).run("g")
    assert (out.state, out.pending and out.pending["state"], out.pending and out.pending["question"]) == (
        "PAUSED", "ACT", "ship order 1?",
    )  # fmt: skip
    out = Executor(planner=one_step, tools=tools, trace=trace, resume=True).run("g", answer=True)
    assert out.pending is not None and out.pending["question"] == "by air?"
    with pytest.raises(RuntimeError, match="power cut"):  # both answered, then the process dies
        Executor(planner=one_step, tools=tools, trace=trace, resume=True).run("g", answer=False)
    out = Executor(planner=one_step, tools=tools, trace=trace, resume=True).run("g")  # nobody is asked again
    assert out.state == "DONE" and out.checkpoints[0].result == {"i": 1, "ship": True, "air": False}
    assert calls == [1, 1, 1, 1]

    r = harness.rerun(trace, planner=one_step, tools={"ship": tool_asking(served := [])})
    assert (r.equal, r.live_calls, served) == (True, 0, [])


def test_the_verifier_can_ask_and_is_run_again_with_the_answer(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    work = counter()
    seen: list[Any] = []

    def verifier(step: Step, result: Any) -> bool:
        ok = harness.interrupt({"check": result})
        seen.append(ok)
        return bool(ok)

    def plan(goal: Any, done: list[Any]) -> Step | None:
        return None if done else Step("s", "work", {"i": 3})

    out = Executor(planner=plan, tools={"work": work}, verifier=verifier, trace=trace).run("g")
    assert out.state == "PAUSED" and out.pending is not None and out.pending["state"] == "VERIFY"
    out = Executor(planner=plan, tools={"work": work}, verifier=verifier, trace=trace, resume=True).run(
        "g", answer=True
    )
    assert out.state == "DONE" and seen == [True] and work.calls == [{"i": 3}]  # the tool is not called again
    r = harness.rerun(trace, planner=plan, tools={"work": counter()}, verifier=verifier)
    assert (r.equal, r.live_calls) == (True, 0)


def test_an_answer_for_a_run_that_asks_nothing_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    planner, tools, _ = asking_agent()
    Executor(planner=planner, tools=tools, trace=trace).run("refund")
    Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund", answer={"amount": 4})
    before = trace.read_bytes()
    with pytest.raises(HarnessError, match="waits for none"):
        Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund", answer={"amount": 1})
    with pytest.raises(harness.TraceMissing):
        Executor(planner=planner, tools=tools, trace=tmp_path / "no.jsonl", resume="auto").run("x", answer=1)
    with pytest.raises(harness.NotSerializable):
        Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund", answer={1, 2})
    assert trace.read_bytes() == before and not (tmp_path / "no.jsonl").exists()


def test_a_question_is_not_an_uncertain_operation_to_reconcile(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    planner, tools, _ = asking_agent()
    Executor(planner=planner, tools=tools, trace=trace).run("refund")
    before = trace.read_bytes()
    with pytest.raises(HarnessError, match=r"waits for an answer.*--answer"):
        harness.reconcile(trace, happened=False)
    assert trace.read_bytes() == before


def test_interrupt_outside_a_run_is_a_clear_error() -> None:
    with pytest.raises(HarnessError, match="outside a run"):
        harness.interrupt("anyone?")


def test_agent_code_catching_exception_cannot_swallow_the_pause(tmp_path: Path) -> None:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        try:
            harness.interrupt("ok?")
        except Exception:  # a careless catch-all
            pytest.fail("interrupt() must not raise an Exception")
        return None

    assert Executor(planner=planner, tools={}, trace=tmp_path / "t.jsonl").run("g").state == "PAUSED"


# --- replay enforces the new edges and records -------------------------------------------------


def asked_records(tmp_path: Path) -> list[dict[str, Any]]:
    trace = tmp_path / "asked.jsonl"
    planner, tools, _ = asking_agent()
    Executor(planner=planner, tools=tools, trace=trace).run("refund")
    Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund", answer={"amount": 4})
    return read_records(trace)


def forged(tmp_path: Path, records: list[dict[str, Any]]) -> TraceCorruption:
    path = tmp_path / "forged.jsonl"
    write_trace(path, [{**r, "seq": i} for i, r in enumerate(records, start=1)])
    with pytest.raises(TraceCorruption) as info:
        replay(path)
    return info.value


def test_replay_refuses_a_pause_left_without_its_answer(tmp_path: Path) -> None:
    records = asked_records(tmp_path)
    n = next(i for i, r in enumerate(records) if r["kind"] == "answer")
    e = forged(tmp_path, records[:n] + records[n + 1 :])
    assert e.reason == "bad-transition" and "before it was answered" in e.detail


def test_replay_refuses_a_return_to_another_state_than_the_one_that_asked(tmp_path: Path) -> None:
    records = asked_records(tmp_path)
    back = next(r for r in records if r.get("from") == "PAUSED")
    back.update({"to": "ACT", "name": "pay", "tool": "work", "args": {"i": 4}})
    e = forged(tmp_path, records)
    assert e.reason == "bad-transition" and "asked in PLAN" in e.detail


def test_replay_refuses_an_answer_with_no_question(tmp_path: Path) -> None:
    records = asked_records(tmp_path)
    answer = next(r for r in records if r["kind"] == "answer")
    e = forged(tmp_path, [*records[:2], answer])
    assert e.reason == "bad-answer"
    wrong = [dict(r, op=1) if r["kind"] == "answer" else r for r in records]
    assert forged(tmp_path, wrong).reason == "bad-answer"


def test_replay_refuses_a_pause_from_the_planner_without_its_question(tmp_path: Path) -> None:
    records = asked_records(tmp_path)
    pause = next(r for r in records if r.get("to") == "PAUSED")
    del pause["question"]
    e = forged(tmp_path, records)
    assert e.reason == "malformed" and "without the question" in e.detail


# --- the command line ------------------------------------------------------------------------

AGENT = """
import harness
from harness import Step

paid = []

def make():
    def planner(goal, done):
        if done:
            return None
        answer = harness.interrupt({"approve": goal})
        return Step("pay", "pay", {"amount": answer["amount"]})

    def pay(amount):
        paid.append(amount)
        return {"paid": amount}

    return planner, {"pay": pay}, None
"""


def test_harness_resume_answers_from_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "asking_agent.py").write_text(AGENT)
    sys.path.insert(0, str(tmp_path))
    try:
        import asking_agent  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    trace = tmp_path / "run.jsonl"
    planner, tools, _ = asking_agent.make()
    assert Executor(planner=planner, tools=tools, trace=trace).run("refund 7").state == "PAUSED"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        """`harness ARGS` in tmp_path: the console script's main() called in this process."""
        return in_process.harness(*args, cwd=tmp_path)  # type: ignore[no-any-return]

    summary = cli("replay", str(trace))
    assert summary.returncode == 0 and 'waiting for an answer to {"approve":"refund 7"}' in summary.stdout
    waiting = cli("resume", str(trace), "--agent", "asking_agent:make")
    assert waiting.returncode == 3, waiting.stderr
    assert '"approve":"refund 7"' in waiting.stdout and "--answer JSON" in waiting.stdout
    done = cli("resume", str(trace), "--agent", "asking_agent:make", "--answer", '{"amount": 7}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{trace}: DONE, 1 checkpoints")
    assert replay(trace).checkpoints[0].result == {"paid": 7}
    bad = cli("resume", str(trace), "--agent", "asking_agent:make", "--answer", "{nope")
    assert bad.returncode == 2 and "--answer is not valid JSON" in bad.stderr and not bad.stdout
    runs = orjson.loads(cli("runs", str(tmp_path), "--json").stdout)
    assert [r["status"] for r in runs] == ["done"]


def test_a_question_after_a_retry_keeps_its_step_and_attempt(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    tool = harness.testing.ScriptedTool({2: harness.ToolError("blink")})

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if len(done) == 2:
            return None
        if len(done) == 1 and len(tool.calls) == 2:  # step 1, after its first attempt failed
            harness.interrupt("try step 1 again?")
        return Step(f"s{len(done)}", "work", {"i": len(done)})

    out = Executor(planner=planner, tools={"work": tool}, trace=trace).run("g")
    pause = read_records(trace)[-1]
    assert (out.state, pause["step"], pause["attempt"]) == ("PAUSED", 1, 2)
    out = Executor(planner=planner, tools={"work": tool}, trace=trace, resume=True).run("g", answer="yes")
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [{"i": 0}, {"i": 1}]
    assert replay(trace).state == "DONE"


def test_a_run_killed_right_after_its_answer_is_resumed_with_that_answer(tmp_path: Path) -> None:
    records = asked_records(tmp_path)
    n = next(i for i, r in enumerate(records) if r["kind"] == "answer")
    trace = tmp_path / "killed.jsonl"
    write_trace(trace, records[: n + 1])  # what a SIGKILL right after the answer's fsync leaves
    runs = harness.list_runs(tmp_path)
    killed = next(r for r in runs if r.path == str(trace))
    assert (killed.status, killed.detail) == ("paused", "answered: resume it")
    planner, tools, answers = asking_agent()
    out = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund")
    assert out.state == "DONE" and answers == [{"amount": 4}] and tools["work"].calls == [{"i": 4}]


def test_a_secret_in_an_answer_reaches_the_agent_and_never_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    got: list[Any] = []

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        got.append(harness.interrupt({"need": "the vault password"}))
        return Step("open", "work", {"i": 1})

    assert Executor(planner=planner, tools={"work": counter()}, trace=trace, redact=["password"]).run("g").pending
    out = Executor(planner=planner, tools={"work": counter()}, trace=trace, redact=["password"], resume=True).run(
        "g", answer={"password": "hunter2"}
    )
    assert out.state == "DONE" and got == [{"password": "hunter2"}]
    assert b"hunter2" not in trace.read_bytes()
    answer = next(r for r in read_records(trace) if r["kind"] == "answer")
    assert answer["answer"] == {"password": harness.MARKER}


def test_interrupt_in_a_call_of_a_parallel_step_is_a_clear_error_recorded_as_a_crash(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"

    def asks(i: int) -> Any:
        return harness.interrupt({"ok": i})

    def planner(goal: Any, done: list[Any]) -> Any:
        return None if done else [Step(f"call{i}", "asks", {"i": i}) for i in range(2)]

    with pytest.raises(HarnessError, match="not supported in parallel steps yet"):
        Executor(planner=planner, tools={"asks": asks}, trace=trace).run("g")
    crash = read_records(trace)[-1]
    assert crash["kind"] == "crash" and "not supported in parallel steps" in crash["error"]["message"]
    assert "agent" not in crash and crash["vc"]["main"] > 0  # the run's own record, with main's clock
    assert replay(trace).state == "PLAN"  # a well-formed trace: no pause on a question was written
    assert not any(r.get("to") == "PAUSED" for r in read_records(trace))


def test_arun_pauses_on_a_question_and_a_resume_finishes_it(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"

    async def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        answer = harness.interrupt({"q": 1})
        return Step("s", "echo", {"a": answer})

    def echo(a: Any) -> Any:
        return a

    out = asyncio.run(Executor(planner=planner, tools={"echo": echo}, trace=trace).arun("g"))
    assert out.state == "PAUSED" and out.pending is not None and out.pending["question"] == {"q": 1}
    resumed = Executor(planner=planner, tools={"echo": echo}, trace=trace, resume=True)
    done = asyncio.run(resumed.arun("g", answer=7))
    assert done.state == "DONE" and [c.result for c in done.checkpoints] == [7]
    assert replay(trace).state == "DONE"


# --- an answer after agents: the answer (and resume) records are events of main, with their clocks ----------


def asks_after(shape: str, model: FakeLLM) -> tuple[Any, dict[str, Any], list[Any]]:
    """A planner whose run has agents before it asks: a parallel step at step 0, or in the planner of step 0 an
    agent spawned and joined (which asks the model), or an agent that sends main a message. Then it asks."""
    answers: list[Any] = []

    def helper() -> str:
        said = harness.llm({"helper": 1}, model)
        if shape == "message":
            harness.send("main", {"found": said})
        return str(said)

    def planner(goal: Any, done: list[Any]) -> Any:
        if shape == "parallel" and not done:
            return [Step(f"call{i}", "work", {"i": i}) for i in range(2)]
        if len(done) == (2 if shape == "parallel" else 0):
            if shape != "parallel":
                h = harness.spawn("helper", helper)
                if shape == "message":
                    assert harness.receive("helper").body == {"found": {"draft": 1}}
                harness.join(h)
            answer = harness.interrupt({"approve": goal})
            answers.append(answer)
            return Step("pay", "work", {"i": answer["amount"]})
        return None

    return planner, {"work": counter()}, answers


def viewer_summary(trace: Path) -> dict[str, Any]:
    pytest.importorskip("starlette", reason="the viewer needs the web extra")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from harness.viewer import create_app

    with TestClient(create_app(trace.parent), base_url="http://127.0.0.1") as c:
        return dict(c.get(f"/api/runs/{trace.stem}/summary").json())


@pytest.mark.parametrize("shape", ["parallel", "spawn", "message"])
def test_an_answer_after_agents_carries_its_clock_and_the_run_finishes(tmp_path: Path, shape: str) -> None:
    trace = tmp_path / "run.jsonl"
    model = FakeLLM(lambda request: {"draft": 1})
    planner, tools, answers = asks_after(shape, model)
    out = Executor(planner=planner, tools=tools, trace=trace).run("refund")
    assert out.state == "PAUSED" and out.pending is not None and out.pending["question"] == {"approve": "refund"}
    (row,) = harness.list_runs(tmp_path)
    shown = viewer_summary(trace)
    assert (row.status, shown["status"], shown["state"]) == ("paused", "paused", "PAUSED")
    assert row.detail == shown["detail"] == 'waiting for an answer: {"approve":"refund"}'

    done = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund", answer={"amount": 7})
    assert done.state == "DONE" and answers == [{"amount": 7}]
    assert tools["work"].calls[-1] == {"i": 7} and len(tools["work"].calls) == (3 if shape == "parallel" else 1)
    assert len(model.requests) == (0 if shape == "parallel" else 1)  # the helper's model call is served again
    records = read_records(trace)
    first_spawn = next(i for i, r in enumerate(records) if r["kind"] == "spawn")
    assert all("vc" in r for r in records[first_spawn:] if r["kind"] != "seal")  # the answer too
    answer = next(r for r in records if r["kind"] == "answer")
    resume = next(r for r in records if r["kind"] == "resume")
    assert answer["seq"] == resume["seq"] + 1 and answer["vc"]["main"] == resume["vc"]["main"] + 1
    assert replay(trace).state == "DONE"
    (row,) = harness.list_runs(tmp_path)
    shown = viewer_summary(trace)
    assert (row.status, shown["status"], shown["state"], shown["error"]) == ("done", "done", "DONE", None)


# --- an answered question, then a tool in flight at a SIGKILL ---------------------------------------------

ANSWERED = """
import os, sys, time
from pathlib import Path
import orjson
import harness
from harness import Executor, Step, Tool

HERE = Path(__file__).parent


def make(effect):
    def planner(goal, done):
        if done:
            return None
        said = harness.interrupt({"approve": goal})
        return Step("pay", "pay", {"amount": said["amount"]})

    def pay(amount, idempotency_key=None):
        with open(HERE / "calls.log", "ab") as f:
            f.write(orjson.dumps({"amount": amount, "key": idempotency_key}) + b"\\n")
        marker = HERE / "in-call"
        if os.environ.get("KILL_IN_CALL") and not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(600)  # the parent's SIGKILL lands here
        return {"paid": amount}

    tool = pay if effect == "plain" else Tool(pay, idempotent=effect == "idempotent")
    return planner, {"pay": tool}, None


def unsafe():
    return make("unsafe")


if __name__ == "__main__":  # resume with the answer, to be killed inside the tool
    planner, tools, _ = make(sys.argv[2])
    Executor(planner=planner, tools=tools, trace=sys.argv[1], resume=True).run("refund", answer={"amount": 5})
"""


def folder_state(folder: Path) -> dict[str, bytes]:
    """Every file of the folder and its bytes: a resume that cannot go on must leave them all as they were."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != "calls.log"}


@pytest.mark.parametrize("effect", ["unsafe", "idempotent", "plain"])
def test_an_answered_question_then_a_tool_in_flight_at_a_sigkill(tmp_path: Path, effect: str) -> None:
    from children import wait_for

    (tmp_path / "answered_agent.py").write_text(ANSWERED)
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("answered_agent", None)  # each case's own copy, writing its own calls.log
    try:
        import answered_agent  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    trace = tmp_path / "run.jsonl"
    planner, tools, _ = answered_agent.make(effect)
    assert Executor(planner=planner, tools=tools, trace=trace).run("refund").state == "PAUSED"
    child = ZYGOTE.Popen(
        [sys.executable, str(tmp_path / "answered_agent.py"), str(trace), effect],
        env={**os.environ, "KILL_IN_CALL": "1"}, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(tmp_path / "in-call", child, "the call after the answer")
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
    calls = lambda: [orjson.loads(line) for line in (tmp_path / "calls.log").read_bytes().splitlines()]  # noqa: E731
    assert replay(trace).state == "ACT" and len(calls()) == 1
    ex = Executor(planner=planner, tools=tools, trace=trace, resume=True)
    out = ex.run("refund")
    if effect != "unsafe":  # called again (an idempotent tool with the same key), and the run finishes
        assert out.state == "DONE" and [c.result for c in out.checkpoints] == [{"paid": 5}]
        keys = [c["key"] for c in calls()]
        assert len(keys) == 2 and keys[0] == keys[1] and (keys[0] is None) is (effect == "plain")
        return
    assert out.state == "PAUSED" and out.pending is not None and out.pending["tool"] == "pay"
    before = folder_state(tmp_path)
    for _ in range(3):  # the uncertain operation waits for an operator: nothing is written, however often
        again = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund")
        assert again.state == "PAUSED" and again.pending == out.pending
        assert folder_state(tmp_path) == before
    row = harness.list_runs(tmp_path)[0]
    assert row.status == "paused" and "reconcile" in (row.detail or "")
    done = in_process.harness(
        "reconcile", trace, "--happened", "--result", '{"paid": 5}', "--evidence", "the bank says"
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("refund")
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [{"paid": 5}] and len(calls()) == 1
    kinds = [r["kind"] for r in read_records(trace)]
    assert kinds.count("resume") == 3 and kinds.count("answer") == 1  # answer, pause, after the reconcile


def test_two_answers_in_one_run_each_delivered_once(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    model = FakeLLM(lambda request: {"draft": request["n"]})
    asked: list[Any] = []

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if len(done) == 2:
            return None
        said = harness.llm({"n": len(done)}, model)
        answer = harness.interrupt({"step": len(done), "draft": said})
        asked.append(answer)
        return Step(f"s{len(done)}", "work", {"i": answer})

    tools = {"work": counter()}
    assert Executor(planner=planner, tools=tools, trace=trace).run("g").pending is not None
    first = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g", answer=1)
    assert first.state == "PAUSED" and first.pending is not None and first.pending["question"]["step"] == 1
    before = trace.read_bytes()
    assert Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g").state == "PAUSED"
    assert trace.read_bytes() == before  # (no answer: the same pause, nothing written)
    done = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g", answer=2)
    assert done.state == "DONE" and tools["work"].calls == [{"i": 1}, {"i": 2}] and asked == [1, 2]
    assert len(model.requests) == 2  # each draft asked once: served again on each resume
    records = read_records(trace)
    assert [r["answer"] for r in records if r["kind"] == "answer"] == [1, 2]
    assert [r["response"] for r in records if r.get("boundary") == "interrupt"] == [1, 2]
    r = harness.rerun(trace, planner=planner, tools={"work": counter()})
    assert (r.equal, r.live_calls) == (True, 0)


PAY_CHILD = """
import os, sys, time
from pathlib import Path
import harness
from harness import Executor, Step, Tool

trace, marker = sys.argv[1], Path(sys.argv[2])

def plan(goal, progress):
    return None if progress else Step("pay", "pay", {"amount": 5})

def pay(amount):
    ok = harness.interrupt("pay?")       # asked inside the unsafe tool
    if Path(f"{marker}.go").exists():     # the resumed call: killed after the answer is delivered
        Path(f"{marker}.tmp").write_text("x"); os.replace(f"{marker}.tmp", marker); time.sleep(600)
    return {"paid": amount, "ok": ok}

ex = Executor(planner=plan, tools={"pay": Tool(pay, idempotent=False)}, trace=trace, resume="auto")
answer = sys.argv[3] if len(sys.argv) > 3 else None
print(ex.run("g", **({"answer": answer} if answer else {})).state)
"""


def _pay_plan(goal: Any, progress: Any) -> Step | None:
    return None if progress else Step("pay", "pay", {"amount": 5})


def test_an_answer_survives_a_reconcile_of_the_unsafe_call_that_asked(tmp_path: Path) -> None:
    from children import kill_at

    trace, marker, script = tmp_path / "t.jsonl", tmp_path / "m", tmp_path / "child.py"
    script.write_text(PAY_CHILD)
    cwd = str(Path(__file__).parent.parent)
    first = ZYGOTE.run([sys.executable, str(script), str(trace), str(marker)], capture_output=True, cwd=cwd)
    assert first.stdout.strip() == b"PAUSED", first.stderr  # asked "pay?"
    Path(f"{marker}.go").write_text("")
    child = ZYGOTE.Popen(
        [sys.executable, str(script), str(trace), str(marker), "yes"], cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    kill_at(marker, child, "the resumed call, after its answer")  # killed inside the unsafe call
    calls: list[object] = []

    def pay(amount: int) -> dict[str, object]:
        calls.append(harness.interrupt("pay?"))
        return {"paid": amount}

    ex = Executor(planner=_pay_plan, tools={"pay": harness.Tool(pay, idempotent=False)}, trace=trace, resume=True)
    out = ex.run("g")
    assert out.state == "PAUSED" and "question" not in out.pending  # in doubt: waits for a reconcile
    assert replay(trace).tail.answers == ("yes",)  # the pause without a question keeps what was answered
    harness.reconcile(trace, happened=False, evidence="no charge at the bank")
    assert replay(trace).tail.answers == ("yes",)
    out = ex.run("g")
    assert calls == ["yes"], (calls, out.state, out.pending)  # every answer since its intent, again; none asked
    assert out.state == "DONE"
    assert replay(trace).tail.answers == ()


def test_an_answer_to_a_torn_header_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    torn = b'{"seq":1,"kind":"header","schema":2,"run_'  # the writer died creating it
    trace.write_bytes(torn)
    ex = Executor(planner=_pay_plan, tools={"pay": lambda amount: amount}, trace=trace, resume=True)
    with pytest.raises(HarnessError, match="no run asked a question; nothing was written"):
        ex.run("g", answer="yes")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]  # no .torn-1
    assert trace.read_bytes() == torn
    assert ex.run("g").state == "DONE"  # without the answer, the torn header is set aside and a run starts


def test_an_answer_to_an_ended_run_missing_its_seal_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    ex = Executor(planner=_pay_plan, tools={"pay": lambda amount: amount}, trace=trace, resume=True)
    Executor(planner=_pay_plan, tools={"pay": lambda amount: amount}, trace=trace).run("g")
    lines = trace.read_bytes().splitlines(keepends=True)
    assert b'"kind":"seal"' in lines[-1]
    data = b"".join(lines[:-1])
    trace.write_bytes(data)  # the writer died writing its end: the seal is missing
    with pytest.raises(HarnessError, match=r"waits for none \(its state is DONE\); nothing was written"):
        ex.run("g", answer="yes")
    assert trace.read_bytes() == data
    assert ex.run("g").state == "DONE" and b'"kind":"seal"' in trace.read_bytes()  # without it: the seal repaired


LOGIN_CHILD = """
import os, sys, time
from pathlib import Path
import harness
from harness import Executor, Step

trace, marker = sys.argv[1], Path(sys.argv[2])

def plan(goal, progress):
    return None if progress else Step("login", "login", {})

def login():
    creds = harness.interrupt("credentials?")
    if Path(f"{marker}.go").exists():
        Path(f"{marker}.tmp").write_text("x"); os.replace(f"{marker}.tmp", marker); time.sleep(600)
    return {"user": creds["user"]}

ex = Executor(planner=plan, tools={"login": login}, trace=trace, resume="auto")
answer = {"user": "ann", "api_key": "s3cret"} if len(sys.argv) > 3 else None
print(ex.run("g", **({"answer": answer} if answer else {})).state)
"""


def test_a_tool_called_again_after_a_crash_is_never_given_a_redacted_answer(tmp_path: Path) -> None:
    from children import kill_at

    trace, marker, script = tmp_path / "t.jsonl", tmp_path / "m", tmp_path / "child.py"
    script.write_text(LOGIN_CHILD)
    cwd = str(Path(__file__).parent.parent)
    first = ZYGOTE.run([sys.executable, str(script), str(trace), str(marker)], capture_output=True, cwd=cwd)
    assert first.stdout.strip() == b"PAUSED", first.stderr
    Path(f"{marker}.go").write_text("")
    child = ZYGOTE.Popen(
        [sys.executable, str(script), str(trace), str(marker), "answer"], cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    kill_at(marker, child, "the tool called after its answer")
    assert replay(trace).tail.answers == ({"user": "ann", "api_key": "[REDACTED]"},)  # the trace holds it redacted
    got: list[object] = []

    def login() -> dict[str, object]:
        got.append(harness.interrupt("credentials?"))
        return {"ok": True}

    def plan(goal: Any, progress: Any) -> Step | None:
        return None if progress else Step("login", "login", {})

    ex = Executor(planner=plan, tools={"login": login}, trace=trace, resume=True)
    data = trace.read_bytes()
    with pytest.raises(HarnessError, match=r"marker at answer\.api_key.*Resume with that answer again"):
        ex.run("g")  # the marker is never handed to a live call
    with pytest.raises(HarnessError, match="waits for none"):
        ex.run("g", answer={"user": "bob", "api_key": "other"})  # not the answer recorded
    assert trace.read_bytes() == data and got == []  # refused before anything was written or called
    out = ex.run("g", answer={"user": "ann", "api_key": "s3cret"})  # the same answer, given again
    assert out.state == "DONE" and got == [{"user": "ann", "api_key": "s3cret"}]
    assert b"s3cret" not in trace.read_bytes()
    assert sum(r["kind"] == "answer" for r in read_records(trace)) == 1  # given again, not recorded again
    harness.replay(trace)


def test_an_answer_after_a_parallel_step_finishes_the_run(tmp_path: Path) -> None:
    def plan(goal: Any, progress: Any) -> Any:
        if not progress:
            return [Step("a", "work", {"i": 1}), Step("b", "work", {"i": 2})]
        if len(progress) == 2:
            return Step("c", "work", {"i": harness.interrupt("go on?")})
        return None

    ex = Executor(planner=plan, tools={"work": lambda i: {"i": i}}, trace=tmp_path / "t.jsonl", resume="auto")
    assert ex.run("g").state == "PAUSED"
    out = ex.run("g", answer=3)
    assert out.state == "DONE", out
    replay(out.trace)  # the answer's and resume's clocks are main's events
    assert [c.result for c in out.checkpoints] == [{"i": 1}, {"i": 2}, {"i": 3}]


def test_an_answer_after_a_spawned_agent_in_the_asking_step_finishes_the_run(tmp_path: Path) -> None:
    def helper(x: int) -> float:
        return harness.random() + x  # a recorded crossing of agent "helper"

    def plan(goal: Any, progress: Any) -> Step | None:
        if progress:
            return None
        v = harness.join(harness.spawn("helper", helper, 1))[0]
        return Step("c", "work", {"i": harness.interrupt(f"go with {v:.3f}?")})  # asked after the join

    ex = Executor(planner=plan, tools={"work": lambda i: i}, trace=tmp_path / "t.jsonl", resume="auto")
    assert ex.run("g").state == "PAUSED"
    out = ex.run("g", answer=3)
    assert out.state == "DONE", out
    replay(out.trace)


@pytest.mark.parametrize("where", ["planner", "verifier"])
def test_an_answer_then_a_drift_writes_nothing_and_says_nothing_ran(tmp_path: Path, where: str) -> None:
    """The answer, the resume and the way back out of PAUSED are owed with the resumed run's first new record: a
    re-run planner (or verifier) that drifts before it leaves them all unwritten, and says so."""
    trace, model, seen = tmp_path / "run.jsonl", FakeLLM(lambda request: {"suggest": 5}), []
    pay = counter()
    changed = False

    def asks() -> Any:
        said = harness.llm("how much now?" if changed else "how much?", model)  # the changed code asks otherwise
        return harness.interrupt({"approve": said["suggest"]})

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        amount = asks()["amount"] if where == "planner" else 5
        return Step("pay", "work", {"i": amount})

    def verifier(step: Any, result: Any) -> bool:
        if where == "verifier":
            seen.append(asks())
        return True

    agent = {"planner": planner, "tools": {"work": pay}, "verifier": verifier}
    assert Executor(**agent, trace=trace).run("refund").state == "PAUSED"
    changed, before, calls = True, trace.read_bytes(), len(pay.calls)
    with pytest.raises(harness.ReplayDrift) as e:
        Executor(**agent, trace=trace, resume=True).run("refund", answer={"amount": 4})
    assert trace.read_bytes() == before and len(pay.calls) == calls and seen == []
    said = str(e.value)
    assert "how much?" in said and "how much now?" in said  # what it found
    assert "nothing was called live and nothing was written" in said and "gone live" not in said
    assert not list(tmp_path.glob("*.torn-*"))
