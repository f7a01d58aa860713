"""Parallel tool calls: a planner returns a list of steps, the executor runs their tools side by side."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from children import kill_at
from test_forgeries import forge

import harness
from harness import Executor, Step, Tool, ToolError
from harness.testing import read_records


def fan(n: int, tool: str = "work", then: Step | None = None) -> Any:
    def planner(goal: Any, done: list[Any]) -> Step | list[Step] | None:
        if not done:
            return [Step(f"call{i}", tool, {"i": i}) for i in range(n)]
        if then is not None and len(done) == n:
            return then
        return None

    return planner


def refuse(**args: Any) -> Any:
    raise AssertionError("called live during a rerun")


def test_calls_overlap_and_progress_keeps_planner_order(tmp_path: Path) -> None:
    """Each call waits until every call has started: only concurrent calls get through."""
    started = threading.Barrier(4, timeout=30)
    finished: list[int] = []

    def work(i: int) -> Any:
        started.wait()  # raises BrokenBarrierError if the calls ran one after another
        time.sleep(0.01 * (4 - i))
        finished.append(i)
        return {"i": i}

    trace = tmp_path / "t.jsonl"
    out = Executor(planner=fan(4, then=Step("after", "work2", {})), tools={"work": work, "work2": dict},
                   trace=trace).run("g")  # fmt: skip
    assert out.state == "DONE"
    assert [c.name for c in out.checkpoints] == ["call0", "call1", "call2", "call3", "after"]
    assert [c.step for c in out.checkpoints] == [0, 1, 2, 3, 4]
    rep = harness.replay(trace)
    assert [c.result for c in rep.checkpoints][:4] == [{"i": i} for i in range(4)]
    # each call's intent is on the file before its result, and results were written as they arrived
    records = read_records(trace)
    for i in range(4):
        intent = next(n for n, r in enumerate(records) if r.get("to") == "ACT" and r["step"] == i)
        result = next(n for n, r in enumerate(records) if r.get("to") == "VERIFY" and r["step"] == i)
        assert intent < result
    assert sorted(finished) == [0, 1, 2, 3]


def test_at_most_max_parallel_calls_run_at_once(tmp_path: Path) -> None:
    lock = threading.Lock()
    running, peak = [0], [0]

    def work(i: int) -> Any:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.005)
        with lock:
            running[0] -= 1
        return i

    out = Executor(planner=fan(9), tools={"work": work}, trace=tmp_path / "t.jsonl", max_parallel=2).run("g")
    assert out.state == "DONE" and len(out.checkpoints) == 9 and peak[0] <= 2


def test_a_call_retries_on_its_own(tmp_path: Path) -> None:
    calls: list[int] = []

    def work(i: int) -> Any:
        calls.append(i)
        if i == 1 and calls.count(1) == 1:
            raise ToolError("transient")
        return i

    trace = tmp_path / "t.jsonl"
    out = Executor(planner=fan(3), tools={"work": work}, trace=trace).run("g")
    assert out.state == "DONE" and sorted(calls) == [0, 1, 1, 2]
    attempts = [(r["step"], r.get("attempt", 1)) for r in read_records(trace) if r.get("to") == "ACT"]
    assert sorted(attempts) == [(0, 1), (1, 1), (1, 2), (2, 1)]
    r = harness.rerun(trace, planner=fan(3), tools={"work": refuse})
    assert r.equal and r.live_calls == 0


def test_a_call_that_fails_for_good_fails_the_run_with_its_error(tmp_path: Path) -> None:
    def work(i: int) -> Any:
        if i in (1, 2):
            raise ToolError(f"no {i}")
        return i

    trace = tmp_path / "t.jsonl"
    out = Executor(planner=fan(4), tools={"work": work}, trace=trace, retry=harness.RetryPolicy(2)).run("g")
    assert out.state == "FAILED" and out.error == {"type": "ToolError", "message": "no 1"}  # the first in planner order
    rep = harness.replay(trace)
    assert rep.state == "FAILED" and [c.result for c in rep.checkpoints] == [0, 3]
    last = read_records(trace)[-2]  # (the seal follows)
    assert (last["from"], last["to"], last["step"], last.get("attempt", 1)) == ("PLAN", "FAILED", 1, 2)
    assert harness.rerun(trace, planner=fan(4), tools={"work": refuse}).equal


def test_a_parallel_run_reruns_with_zero_live_calls_and_forks_one_call(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    Executor(planner=fan(3, then=Step("sum", "total", {})), tools={"work": lambda i: i * 10, "total": dict},
             trace=trace).run("g")  # fmt: skip
    r = harness.rerun(trace, planner=fan(3, then=Step("sum", "total", {})), tools={"work": refuse, "total": refuse})
    assert r.equal and r.live_calls == 0
    call1 = next(c for c in harness.replay(trace).crossings if c.agent == "step-1")
    f = harness.fork(trace, at=call1.seq, value=99, planner=fan(3, then=Step("sum", "total", {})),
                     tools={"work": refuse, "total": dict})  # fmt: skip
    assert f.live_calls_by_agent == {"main": 1}  # only the step after the join; calls 0 and 2 are served
    assert [c.result for c in harness.replay(f.trace or "").checkpoints][:3] == [0, 99, 20]


KILLED = """
import os, sys, time
from pathlib import Path
from harness import Executor, Step

trace, log, marker = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

def planner(goal, done):
    if not done:
        return [Step(f"call{i}", "work", {"i": i}) for i in range(3)]
    return None if len(done) == 3 else Step("after", "work", {"i": 9})

def work(i):
    with open(log, "a") as f:
        f.write(f"{i}\\n")
    if i == 1:  # call 1 waits until call 0 and call 2 are checkpointed, then the process dies in it
        while sum(1 for line in open(sys.argv[1]) if '"kind":"checkpoint"' in line) < 2:
            time.sleep(0.005)
        marker.write_text(str(os.getpid()))
        time.sleep(600)
    return {"i": i}

Executor(planner=planner, tools={"work": work}, trace=trace).run("g")
"""


def test_a_sigkill_in_a_parallel_step_resumes_without_running_a_finished_call(tmp_path: Path) -> None:
    trace, log, marker = tmp_path / "t.jsonl", tmp_path / "calls.log", tmp_path / "inside"
    child = subprocess.Popen([sys.executable, "-c", KILLED, str(trace), str(log), str(marker)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    kill_at(marker, child, "call 1")
    assert sorted(log.read_text().split()) == ["0", "1", "2"]
    rep = harness.replay(trace)
    assert [(c.agent, c.state, c.done) for c in rep.tail.group] == [
        ("step-0", "PLAN", True), ("step-1", "ACT", False), ("step-2", "PLAN", True)
    ]  # fmt: skip

    calls: list[int] = []

    def work(i: int) -> Any:
        calls.append(i)
        return {"i": i}

    planner = fan(3, then=Step("after", "work", {"i": 9}))
    out = Executor(planner=planner, tools={"work": work}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and calls == [1, 9]  # calls 0 and 2 finished before the kill: not run again
    rep = harness.replay(trace)
    assert [c.result for c in rep.checkpoints] == [{"i": 0}, {"i": 1}, {"i": 2}, {"i": 9}]
    assert rep.resumes == 1


def test_an_unsafe_call_in_flight_pauses_the_run_until_reconciled(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    gate = threading.Event()

    class Crash(BaseException):
        pass

    def pay(i: int) -> Any:
        if i == 1:
            gate.wait(30)
            raise Crash  # the process "dies" inside the payment: nothing after its intent is written
        gate.set()
        return {"paid": i}

    tools: dict[str, Any] = {"pay": Tool(pay, idempotent=False)}
    with pytest.raises(Crash):
        Executor(planner=fan(2, "pay"), tools=tools, trace=trace).run("g")
    out = Executor(planner=fan(2, "pay"), tools={"pay": Tool(refuse, idempotent=False)}, trace=trace,
                   resume=True).run("g")  # fmt: skip
    assert out.state == "PAUSED" and out.pending is not None and out.pending["step"] == 1
    harness.reconcile(trace, happened=True, result={"paid": 1}, evidence="bank statement")
    out = Executor(planner=fan(2, "pay"), tools={"pay": Tool(refuse, idempotent=False)}, trace=trace,
                   resume=True).run("g")  # fmt: skip
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [{"paid": 0}, {"paid": 1}]


def test_recover_takes_up_a_parallel_step_once_its_paused_call_is_reconciled(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    trace, gate = runs / "t.jsonl", threading.Event()

    class Crash(BaseException):
        pass

    def pay(i: int) -> Any:
        if i == 1:
            gate.wait(30)
            raise Crash  # the process "dies" inside the payment
        gate.set()
        return {"paid": i}

    with pytest.raises(Crash):
        Executor(planner=fan(2, "pay"), tools={"pay": Tool(pay, idempotent=False)}, trace=trace).run("g")
    agent: dict[str, Any] = {"planner": fan(2, "pay"), "tools": {"pay": Tool(refuse, idempotent=False)}}
    [row] = harness.recover(runs, **agent)
    assert (row.action, row.state) == ("resumed", "PAUSED") and "reconcile" in row.detail  # the call in doubt
    [row] = harness.recover(runs, **agent)
    assert (row.action, row.state) == ("left", "PAUSED") and "seq None" not in row.detail
    harness.reconcile(trace, happened=True, result={"paid": 1}, evidence="bank statement")
    [row] = harness.recover(runs, **agent)  # the operator's word is there: the step goes on, as resume() does
    assert (row.action, row.state) == ("resumed", "DONE"), row
    assert [c.result for c in harness.replay(trace).checkpoints] == [{"paid": 0}, {"paid": 1}]


# --- replay() keeps the lanes honest ---------------------------------------------------------------


def forged_parallel(tmp_path: Path, how: str) -> tuple[Path, int]:
    trace = tmp_path / "t.jsonl"
    Executor(planner=fan(3, then=Step("after", "work", {"i": 9})), tools={"work": lambda i: i}, trace=trace).run("g")
    records = read_records(trace)[:-1]  # without the seal: a forged run ends at its terminal record
    harness.replay(forge(tmp_path / "same.jsonl", records, reclock=True))  # reclocking a valid trace keeps it valid
    joins = [i for i, r in enumerate(records) if r["kind"] == "join"]
    if how == "joined out of planner order":
        records[joins[0]], records[joins[1]] = records[joins[1]], records[joins[0]]
        at = joins[0]
    elif how == "moved on before every join":
        after = records.pop(joins[2])
        records.insert(joins[2] + 1, after)  # the run's next transition comes before the last join
        at = joins[2]
    elif how == "a transition after its checkpoint":
        ck = next(i for i, r in enumerate(records) if r["kind"] == "checkpoint" and r.get("agent") == "step-1")
        records.insert(ck + 1, {"kind": "transition", "agent": "step-1", "from": "CHECKPOINT", "to": "PLAN",
                                "step": 1, "ts": 0.0})  # fmt: skip
        at = ck + 1
    elif how == "a call spawned out of step order":
        spawn = next(i for i, r in enumerate(records) if r["kind"] == "spawn" and r["child"] == "step-1")
        records[spawn]["step"] = 5
        at = spawn
    return forge(tmp_path / "forged.jsonl", records, reclock=True), at + 1


@pytest.mark.parametrize(
    "how",
    ["joined out of planner order", "moved on before every join", "a transition after its checkpoint",
     "a call spawned out of step order"],
)  # fmt: skip
def test_replay_refuses_a_parallel_step_that_breaks_its_lanes(tmp_path: Path, how: str) -> None:
    path, line = forged_parallel(tmp_path, how)
    with pytest.raises(harness.TraceCorruption) as e:
        harness.replay(path)
    assert (e.value.reason, e.value.line) == ("bad-transition", line), e.value


DIES_IN_CALL_0 = """
import os, sys
from harness import Executor, Step, Tool

def work(n, idempotency_key):
    if n == 1:
        os._exit(9)  # the process dies inside the first call, as early as a call can
    return n

def planner(goal, done):
    return [Step("a", "work", {"n": 1}), Step("b", "work", {"n": 2})] if not done else None

Executor(planner=planner, tools={"work": Tool(work, idempotent=True)}, trace=sys.argv[1]).run("g")
"""


def test_every_spawn_of_a_parallel_step_is_on_the_file_before_any_call_starts(tmp_path: Path) -> None:
    """A crash in call 0 finds the whole plan on the file: the resume runs call b too (it was lost before)."""
    trace = tmp_path / "t.jsonl"
    done = subprocess.run([sys.executable, "-c", DIES_IN_CALL_0, str(trace)], capture_output=True)
    assert done.returncode == 9, done.stderr.decode()
    records = read_records(trace)
    spawns = [n for n, r in enumerate(records) if r["kind"] == "spawn"]
    first_of_a_call = min(n for n, r in enumerate(records) if r.get("agent", "main") != "main")
    assert len(spawns) == 2 and max(spawns) < first_of_a_call
    assert [c.agent for c in harness.replay(trace).tail.group] == ["step-0", "step-1"]
    calls: list[int] = []

    def work(n: int, idempotency_key: str) -> int:
        calls.append(n)
        return n

    def again(goal: Any, done: list[Any]) -> Any:
        return [Step("a", "work", {"n": 1}), Step("b", "work", {"n": 2})] if not done else None

    out = Executor(planner=again, tools={"work": Tool(work, idempotent=True)}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and [c.name for c in out.checkpoints] == ["a", "b"]
    assert sorted(calls) == [1, 2]


def test_a_bad_arg_in_a_later_call_starts_no_call_and_names_tool_and_step(tmp_path: Path) -> None:
    calls: list[Any] = []

    def planner(goal: Any, done: list[Any]) -> Any:
        return None if done else [Step("a", "slow", {"n": 1}), Step("b", "slow", {"when": object()})]

    trace = tmp_path / "t.jsonl"
    with pytest.raises(harness.NotSerializable) as e:
        Executor(planner=planner, tools={"slow": lambda **k: calls.append(k)}, trace=trace).run("g")
    assert (e.value.tool, e.value.step) == ("slow", 1) and "'slow'" in str(e.value) and "step 1" in str(e.value)
    assert [r["kind"] for r in read_records(trace)] == ["header", "transition", "crash"]  # no spawn: nothing started
    assert calls == [] and not any(t.name.startswith("harness-agent-step") for t in threading.enumerate())


SECRET = "sk-" + "A1b2C3d4E5f6G7h8J9k0"  # a token shape the default rules redact


def test_a_secret_in_a_step_or_artifact_name_is_redacted_as_its_args_are(tmp_path: Path) -> None:
    """A step's name (a call's too) and an artifact's name were written in clear (issue 25); the run still
    resumes and reruns on the redacted names."""
    crash = [True]

    def planner(goal: Any, done: list[Any]) -> Any:
        if not done:
            harness.artifact(f"report for {SECRET}", b"data")
            return Step(f"charge {SECRET}", "work", {"i": 0})
        if len(done) == 1:
            return [Step(f"refund {SECRET}", "work", {"i": 1}), Step("log", "work", {"i": 2})]
        if crash[0]:
            crash[0] = False
            raise KeyboardInterrupt  # the process stops; the resume reads the names back redacted
        return None

    def work(i: int) -> int:
        return i

    trace = tmp_path / "t.jsonl"
    with pytest.raises(KeyboardInterrupt):
        Executor(planner=planner, tools={"work": work}, trace=trace).run("g")
    out = Executor(planner=planner, tools={"work": work}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and SECRET.encode() not in trace.read_bytes()
    assert [c.name for c in harness.replay(trace).checkpoints] == ["charge [REDACTED]", "refund [REDACTED]", "log"]
    assert [a.name for a in harness.replay(trace).artifacts] == ["report for [REDACTED]"]
    again = tmp_path / "again.jsonl"  # (a run with agents reruns when it went from start to end in one process)
    assert Executor(planner=planner, tools={"work": work}, trace=again).run("g").state == "DONE"
    assert harness.rerun(again, planner=planner, tools={"work": refuse}).equal


TWICE = """
import os, sys, time
from pathlib import Path
from harness import Executor, Step

trace, log, marker = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

def planner(goal, done):  # two parallel steps back to back, with no step between them
    return [Step(f"call{len(done) + i}", "work", {"i": len(done) + i}) for i in range(2)] if len(done) < 4 else None

def work(i):
    with open(log, "a") as f:
        f.write(f"{i}\\n")
    if i == 3 and sys.argv[4] == "kill":  # the second step's call 3, once call 2 is checkpointed: the process dies
        while sum(1 for line in open(sys.argv[1]) if '"kind":"checkpoint"' in line) < 3:
            time.sleep(0.005)
        marker.write_text(str(os.getpid()))
        time.sleep(600)
    return {"i": i}

Executor(planner=planner, tools={"work": work}, trace=trace).run("g")
"""


def test_two_parallel_steps_back_to_back_read_resume_and_rerun(tmp_path: Path) -> None:
    """Before: the second list's spawns followed the first list's joins with no transition between them (the
    executor's way), and the reader refused the trace it had just written (bad-transition: `call 'step-2' of step
    2; step 2 comes next`): no replay, show, rerun or resume of a planner that returns a list twice in a row."""
    trace, log, marker = tmp_path / "t.jsonl", tmp_path / "calls.log", tmp_path / "inside"
    child = subprocess.Popen([sys.executable, "-c", TWICE, str(trace), str(log), str(marker), "kill"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    kill_at(marker, child, "call 3")
    rep = harness.replay(trace)
    assert [c.step for c in rep.checkpoints] == [0, 1] and [(c.agent, c.done) for c in rep.tail.group] == [
        ("step-2", True), ("step-3", False)
    ]  # fmt: skip
    calls: list[int] = []

    def work(i: int) -> Any:
        calls.append(i)
        return {"i": i}

    def planner(goal: Any, done: list[Any]) -> Any:
        return [Step(f"call{len(done) + i}", "work", {"i": len(done) + i}) for i in range(2)] if len(done) < 4 else None

    out = Executor(planner=planner, tools={"work": work}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and calls == [3]  # only the call in flight at the kill again
    rep = harness.replay(trace)
    assert [c.result for c in rep.checkpoints] == [{"i": i} for i in range(4)] and rep.resumes == 1
    whole = tmp_path / "whole.jsonl"  # (a resumed run with agents is not re-executed yet: one run in one process)
    subprocess.run([sys.executable, "-c", TWICE, str(whole), str(log), str(marker), "run"], check=True, timeout=120)
    assert harness.rerun(whole, planner=planner, tools={"work": refuse}).equal
