"""asyncio: async planners, tools and verifiers, async crossings, tasks as agents, and SIGKILL under arun."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from children import ZYGOTE, Forked, kill_at

import harness
from harness import Executor, Step
from harness.runtime.boundary import _active
from harness.testing import read_records

HARNESS = [sys.executable, "-m", "harness.cli"]  # the command line, in a process of its own (children.ZYGOTE)


async def amodel(request: Any) -> Any:
    await asyncio.sleep(0)
    return {"answer": request["q"].upper()}


def refuse(**args: Any) -> Any:
    raise AssertionError("called live during a rerun")


async def arefuse(request: Any) -> Any:
    raise AssertionError("called live during a rerun")


def fan_async(n: int) -> Any:
    async def planner(goal: Any, done: list[Any]) -> Step | list[Step] | None:
        if not done:
            found = await harness.allm({"q": goal}, amodel)
            return [Step(f"call{i}", "work", {"i": i, "q": found["answer"]}) for i in range(n)]
        return None

    return planner


def test_arun_runs_a_parallel_step_as_concurrent_tasks(tmp_path: Path) -> None:
    started = 0
    all_started = asyncio.Event()

    async def work(i: int, q: str) -> Any:
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), 30)  # only tasks that run concurrently get past this
        return {"i": i, "q": q, "t": await harness.aboundary("clock", None, _one)}

    async def verify(step: Step, result: Any) -> bool:
        await asyncio.sleep(0)
        return bool(result["q"] == "TEA")

    trace = tmp_path / "t.jsonl"
    ex = Executor(planner=fan_async(3), tools={"work": work}, verifier=verify, trace=trace)
    out = asyncio.run(ex.arun("tea"))
    assert out.state == "DONE" and [c.result["i"] for c in out.checkpoints] == [0, 1, 2]
    rep = harness.replay(trace)
    assert [c.kind for c in rep.agents["main"]] == ["llm"]
    # the tools' own crossings belong to their calls (nested): the calls are what is recorded
    assert {a: [c.kind for c in cs] for a, cs in rep.agents.items() if a != "main"} == {
        "step-0": ["tool"], "step-1": ["tool"], "step-2": ["tool"]
    }  # fmt: skip
    # rerun and fork accept async agents
    r = harness.rerun(trace, planner=fan_async(3), tools={"work": refuse}, verifier=verify)
    assert r.equal and r.live_calls == 0
    call = rep.agents["step-1"][0]
    f = harness.fork(trace, at=call.seq, value={"i": 1, "q": "TEA", "t": 0}, planner=fan_async(3),
                     tools={"work": refuse}, verifier=verify)  # fmt: skip
    assert f.live_calls == 0 and f.state == "DONE"


async def _one() -> int:
    return 1


def test_aspawn_makes_tasks_agents_with_their_own_clocks(tmp_path: Path) -> None:
    async def worker(topic: str) -> str:
        await asyncio.sleep(0.001 if topic == "a" else 0)
        found = await harness.allm({"q": topic}, amodel)
        return f"{harness.current_agent()}:{found['answer']}"

    async def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        a = harness.aspawn("worker_a", worker, "a")
        b = harness.aspawn("worker_b", worker, "b")
        return Step("both", "keep", {"r": [await a.join(), await b]})

    trace = tmp_path / "t.jsonl"
    out = asyncio.run(Executor(planner=planner, tools={"keep": dict}, trace=trace).arun("g"))
    assert out.checkpoints[0].result == {"r": ["worker_a:A", "worker_b:B"]}
    rep = harness.replay(trace)
    assert [c.request for c in rep.agents["worker_a"]] == [{"q": "a"}]
    assert rep.agents["worker_b"][0].vc["worker_b"] == 1
    r = harness.rerun(trace, planner=planner, tools={"keep": refuse})
    assert r.equal and r.live_calls == 0
    # drift in a task surfaces from rerun with its agent

    async def drifting(topic: str) -> str:
        return str(await harness.allm({"q": topic + "?"}, amodel))

    async def other(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        a = harness.aspawn("worker_a", worker, "a")
        b = harness.aspawn("worker_b", drifting, "b")
        return Step("both", "keep", {"r": [await a, await b]})

    with pytest.raises(harness.ReplayDrift) as e:
        harness.rerun(trace, planner=other, tools={"keep": refuse})
    assert e.value.agent == "worker_b"


KILLED = """
import asyncio, os, sys
from pathlib import Path
from harness import Executor, Step

trace, log, marker = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])

async def planner(goal, done):
    if not done:
        return [Step(f"call{i}", "work", {"i": i}) for i in range(3)]
    return None

async def work(i):
    with open(log, "a") as f:
        f.write(f"{i}\\n")
    if i == 0:  # call 0 waits until calls 1 and 2 are checkpointed, then the process dies in it
        while sum(1 for line in open(sys.argv[1]) if '"kind":"checkpoint"' in line) < 2:
            await asyncio.sleep(0.005)
        marker.write_text(str(os.getpid()))
        await asyncio.sleep(600)
    return {"i": i}

asyncio.run(Executor(planner=planner, tools={"work": work}, trace=trace).arun("g"))
"""


def test_a_sigkill_under_arun_resumes_without_running_a_finished_call(tmp_path: Path) -> None:
    trace, log, marker = tmp_path / "t.jsonl", tmp_path / "calls.log", tmp_path / "inside"
    child = ZYGOTE.Popen([sys.executable, "-c", KILLED, str(trace), str(log), str(marker)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    kill_at(marker, child, "call 0")
    calls: list[int] = []

    async def work(i: int) -> Any:
        calls.append(i)
        return {"i": i}

    async def planner(goal: Any, done: list[Any]) -> Any:
        return [Step(f"call{i}", "work", {"i": i}) for i in range(3)] if not done else None

    ex = Executor(planner=planner, tools={"work": work}, trace=trace, resume=True)
    out = asyncio.run(ex.arun("g"))
    assert out.state == "DONE" and calls == [0]
    assert [c.result for c in harness.replay(trace).checkpoints] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert sum(1 for r in read_records(trace) if r["kind"] == "resume") == 1


def test_tasks_exchange_messages(tmp_path: Path) -> None:
    async def producer() -> None:
        harness.send("consumer", {"n": 1})

    async def consumer() -> Any:
        got = await asyncio.to_thread(harness.receive, timeout=30)  # receive blocks: off the loop
        return [got.sender, got.body]

    async def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        c = harness.aspawn("consumer", consumer)
        p = harness.aspawn("producer", producer)
        return Step("got", "keep", {"r": [await c, await p]})

    trace = tmp_path / "t.jsonl"
    out = asyncio.run(Executor(planner=planner, tools={"keep": dict}, trace=trace).arun("g"))
    assert out.checkpoints[0].result == {"r": [["producer", {"n": 1}], None]}
    (received,) = harness.replay(trace).agents["consumer"]
    assert received.vc["producer"] == 1  # the receive knows its send
    r = harness.rerun(trace, planner=planner, tools={"keep": refuse})
    assert r.equal and r.live_calls == 0


def test_a_cancelled_agent_task_writes_its_exit_and_join_like_a_thread(tmp_path: Path) -> None:
    """aspawn catches what spawn catches (BaseException): a cancelled task still writes its exit record."""
    seen: list[str] = []

    async def forever() -> None:
        await asyncio.sleep(3600)

    async def planner(goal: Any, done: list[Any]) -> Any:
        if not done:
            h = harness.aspawn("w", forever)
            await asyncio.sleep(0)  # the task starts, and waits
            assert h._task is not None
            h._task.cancel()  # as asyncio.timeout() or a TaskGroup would
            try:
                await h.join()
            except asyncio.CancelledError:
                seen.append("cancelled")
            return Step("x", "t", {})
        return None

    trace = tmp_path / "r.jsonl"
    out = asyncio.run(Executor(planner=planner, tools={"t": dict}, trace=trace).arun("g"))
    assert out.state == "DONE" and seen == ["cancelled"]
    records = read_records(trace)
    exit_ = next(r for r in records if r["kind"] == "exit")
    assert exit_["agent"] == "w" and exit_["status"] == "error"
    assert exit_["error"]["type"] == "asyncio.exceptions.CancelledError"
    assert [r["child"] for r in records if r["kind"] == "join"] == ["w"]
    assert harness.replay(trace).state == "DONE"


def test_concurrent_crossings_of_one_agent_are_each_recorded_in_start_order(tmp_path: Path) -> None:
    """asyncio.gather of two allm() calls: both recorded (one was taken for a call nested in the other),
    written in the order they started although the second finishes first, and the rerun serves both."""
    order: list[str] = []

    async def main() -> Path:
        b_done = asyncio.Event()

        async def model(request: Any) -> Any:
            if request["q"] == "a":
                await b_done.wait()  # a finishes only after b
            order.append(request["q"])
            if request["q"] == "b":
                b_done.set()
            return f"answer to {request['q']}"

        async def planner(goal: Any, done: list[Any]) -> Any:
            if not done:
                a, b = await asyncio.gather(harness.allm({"q": "a"}, model), harness.allm({"q": "b"}, model))
                return Step("s", "t", {"a": a, "b": b})
            return None

        trace = tmp_path / "r.jsonl"
        out = await Executor(planner=planner, tools={"t": lambda **k: k}, trace=trace).arun("g")
        assert out.state == "DONE"
        rerun = await asyncio.to_thread(harness.rerun, trace, planner=planner, tools={"t": refuse})
        assert rerun.equal and rerun.live_calls == 0
        return trace

    trace = asyncio.run(main())
    assert order == ["b", "a"]
    assert [c.request for c in harness.replay(trace).crossings if c.kind == "llm"] == [{"q": "a"}, {"q": "b"}]


def test_a_recorder_on_the_loop_of_an_unjoined_agent_task_says_to_await_it(tmp_path: Path) -> None:
    """Joining the task from its own loop's thread blocked that loop for good; now a HarnessError says what to do."""

    async def worker() -> int:
        await asyncio.sleep(0)
        return 1

    async def main() -> None:
        refused = pytest.raises(harness.HarnessError, match=r"agent 'w' \(an aspawn\(\) task\) was not joined")
        with refused as e, harness.Recorder(tmp_path / "r.jsonl", entrypoint="x") as rec:
            harness.aspawn("w", worker)  # forgotten join
            rec.log("input", "hi")
        assert "`await` its handle" in str(e.value)
        assert not _active  # the refused run is no longer in progress
        with harness.Recorder(tmp_path / "ok.jsonl", entrypoint="x"):
            h = harness.aspawn("w", worker)
            assert await h == 1

    errors: list[BaseException] = []

    def guarded() -> None:
        try:
            asyncio.run(main())
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=guarded, daemon=True)
    t.start()
    t.join(60)  # a hang guard, not a timing assertion: it blocked for good
    assert not t.is_alive() and not errors, errors
    assert harness.replay(tmp_path / "ok.jsonl").state == "DONE"


def test_a_crossing_whose_earlier_sibling_waits_on_its_caller_is_written_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task b sets the event task a's model waits on, once b's own crossing returned: written in start order,
    b's record would wait for a's and a for b's caller, for ever. After TURN_WAIT b is written out of order."""
    monkeypatch.setattr(harness.runtime.boundary, "TURN_WAIT", 0.2)

    async def main() -> Any:
        ev = asyncio.Event()

        async def model(request: Any) -> Any:
            if request["q"] == "a":
                await ev.wait()
            return f"answer to {request['q']}"

        async def b() -> Any:
            answer = await harness.allm({"q": "b"}, model)
            ev.set()
            return answer

        async def planner(goal: Any, done: list[Any]) -> Any:
            if not done:
                x, y = await asyncio.gather(harness.allm({"q": "a"}, model), b())
                return Step("s", "t", {"a": x, "b": y})
            return None

        return await Executor(planner=planner, tools={"t": lambda **k: k}, trace=tmp_path / "r.jsonl").arun("g")

    out = asyncio.run(asyncio.wait_for(main(), 60))  # (a hang guard, not a timing assertion)
    assert out.state == "DONE"
    assert [c.request for c in harness.replay(tmp_path / "r.jsonl").crossings if c.kind == "llm"] == [
        {"q": "b"},
        {"q": "a"},
    ]

    async def rerun_planner(goal: Any, done: list[Any]) -> Any:  # the same calls, started a before b
        if not done:
            x, y = await asyncio.gather(harness.allm({"q": "a"}, arefuse), harness.allm({"q": "b"}, arefuse))
            return Step("s", "t", {"a": x, "b": y})
        return None

    r = harness.rerun(tmp_path / "r.jsonl", planner=rerun_planner, tools={"t": refuse})  # each served its own,
    assert (r.equal, r.live_calls) == (True, 0)  # and written where the recording has it


# --- concurrent crossings resumed: served by what they are, whatever order they start in ----------------

GATHER = Path(__file__).with_name("gather_agent.py")


def gather_child(trace: Path, mode: str, folder: Path, **env: str) -> Forked:
    """tests/gather_agent.py in a new process (children.ZYGOTE): start, answer or resume the run in trace."""
    environ = {**os.environ, "GATHER_DIR": str(folder), **env}
    return ZYGOTE.Popen(
        [sys.executable, str(GATHER), str(trace), mode], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def outcome_of(child: Forked) -> dict[str, Any]:
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err.decode()
    return dict(orjson.loads(out.splitlines()[-1]))


def test_gathered_model_calls_are_served_again_in_every_fresh_process(tmp_path: Path) -> None:
    """The reported shape: an async planner gathers three drafts (random start order, random latency), a
    human approves one, the process is killed, and every resume in a fresh process saves that very draft with
    no model call made again; a rerun of each resumed trace is equal, with no live call."""
    import gather_agent

    first = outcome_of(gather_child(tmp_path / "run.jsonl", "start", tmp_path))
    assert first["state"] == "PAUSED"
    drafts = first["pending"]["question"]["pick one"]
    assert len(gather_agent_calls(tmp_path)) == 3 and len(set(drafts)) == 3
    answered = gather_child(tmp_path / "run.jsonl", "answer", tmp_path, GATHER_KILL="answered")
    kill_at(tmp_path / "answered", answered, "the answer")
    trace_after_kill = (tmp_path / "run.jsonl").read_bytes()
    assert harness.replay(tmp_path / "run.jsonl").state == "PLAN"
    assert len(gather_agent_calls(tmp_path)) == 3  # the answered process served the drafts again

    for i in range(20):
        copy = tmp_path / f"copy-{i}"
        copy.mkdir()
        (copy / "run.jsonl").write_bytes(trace_after_kill)
        done = outcome_of(gather_child(copy / "run.jsonl", "resume", tmp_path))
        assert done["state"] == "DONE" and done["results"] == [{"saved": drafts[1]}], (i, done)
        assert len(gather_agent_calls(tmp_path)) == 3, i  # zero live model calls
        planner, tools, _ = make_gather(tmp_path)
        r = harness.rerun(copy / "run.jsonl", planner=planner, tools=tools)
        assert (r.equal, r.live_calls, r.state) == (True, 0, "DONE"), i
    assert gather_agent.saved() == [drafts[1]] * 20
    rerun = ZYGOTE.run(
        [*HARNESS, "rerun", str(tmp_path / "copy-0" / "run.jsonl"), "--agent", "gather_agent:make_agent"],
        capture_output=True, text=True, timeout=120, cwd=GATHER.parent, env={**os.environ, "GATHER_DIR": str(tmp_path)},
    )  # fmt: skip
    assert rerun.returncode == 0 and "equal" in rerun.stdout and "0 live calls" in rerun.stdout, rerun.stdout


def gather_agent_calls(folder: Path) -> list[Any]:
    log = folder / "calls.log"
    return [orjson.loads(line) for line in log.read_bytes().splitlines()] if log.exists() else []


def make_gather(folder: Path) -> Any:
    import gather_agent

    os.environ["GATHER_DIR"] = str(folder)  # (read by the agent at each call)
    return gather_agent.make_agent()


def test_a_gather_killed_before_all_its_calls_were_written_makes_only_the_missing_one(tmp_path: Path) -> None:
    """Killed while the "plan" draft's call is in flight (the other two written), resumed in a process that
    starts "plan" first: it waits for the two recorded ones to be served, then only it is made live."""
    child = gather_child(tmp_path / "run.jsonl", "start", tmp_path, GATHER_KILL="plan", GATHER_ORDER="cost,risk,plan")
    kill_at(tmp_path / "in-call", child, "the plan draft's call")
    recorded = [c.request["topic"] for c in harness.replay(tmp_path / "run.jsonl").crossings if c.kind == "llm"]
    assert recorded == ["cost", "risk"] and len(gather_agent_calls(tmp_path)) == 3
    paused = outcome_of(gather_child(tmp_path / "run.jsonl", "resume", tmp_path, GATHER_ORDER="plan,risk,cost"))
    assert paused["state"] == "PAUSED"
    assert [c["topic"] for c in gather_agent_calls(tmp_path)] == ["cost", "risk", "plan", "plan"]
    cost, risk, plan = paused["pending"]["question"]["pick one"]
    assert (cost, risk, plan) == ("cost draft, call 1", "risk draft, call 2", "plan draft, call 4")
    done = outcome_of(gather_child(tmp_path / "run.jsonl", "answer", tmp_path))
    assert done["results"] == [{"saved": risk}] and len(gather_agent_calls(tmp_path)) == 4


def test_an_async_crossing_that_changed_on_resume_is_a_drift_and_nothing_is_written(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crash = [True]
    model_calls: list[Any] = []

    async def model(request: Any) -> Any:
        model_calls.append(request)
        return {"text": request["q"]}

    def make(topics: list[str]) -> Any:
        async def planner(goal: Any, done: list[Any]) -> Step | None:
            if done:
                return None
            said = await asyncio.gather(*(harness.allm({"q": t}, model) for t in topics))
            if crash:
                crash.pop()
                raise RuntimeError("power cut after the drafts")
            return Step("s", "keep", {"drafts": [s["text"] for s in said]})

        return planner

    with pytest.raises(RuntimeError):
        asyncio.run(Executor(planner=make(["a", "b", "c"]), tools={"keep": dict}, trace=trace).arun("g"))
    before = trace.read_bytes()
    b = [c for c in harness.replay(trace).crossings if c.kind == "llm"][1]
    with pytest.raises(harness.ReplayDrift) as e:
        asyncio.run(Executor(planner=make(["a", "B", "c"]), tools={"keep": dict}, trace=trace, resume=True).arun("g"))
    assert (e.value.seq, e.value.fields) == (b.seq, {"q": ("b", "B")}) and len(model_calls) == 3
    assert trace.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]
    out = asyncio.run(Executor(planner=make(["c", "b", "a"]), tools={"keep": dict}, trace=trace, resume=True).arun("g"))
    assert out.checkpoints[0].result == {"drafts": ["c", "b", "a"]} and len(model_calls) == 3
