"""Agents on real threads: spawn, join, messages, vector clocks, and what replay/rerun/fork make of them."""

from __future__ import annotations

import contextvars
import random
import threading
import time
from pathlib import Path
from typing import Any

import in_process
import pytest

import harness
from harness import Executor, HarnessError, ReplayDrift, Step, TraceCorruption
from harness.review.normalize import render
from harness.testing import read_records, write_trace


def echo_llm(request: Any) -> Any:
    return {"echo": request}


def noop(**args: Any) -> Any:
    return args


def leq(x: dict[str, int], y: dict[str, int]) -> bool:
    """x happened before (or is) y."""
    return all(v <= y.get(k, 0) for k, v in x.items())


def refuse(**args: Any) -> Any:
    raise AssertionError("called live during a rerun")


# --- a crossing on a thread the run did not start ---------------------------------------------------


def test_a_crossing_on_a_thread_the_run_did_not_start_fails_the_run(tmp_path: Path) -> None:
    """Before: recorded nowhere, served nowhere, so a rerun with "0 live calls" had called the model live."""
    seen: list[BaseException] = []

    def helper() -> None:
        try:
            harness.llm({"p": "from a stray thread"}, echo_llm)
        except HarnessError as e:
            seen.append(e)

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        t = threading.Thread(target=helper)
        t.start()
        t.join()
        return Step("only", "noop", {})

    with pytest.raises(HarnessError, match="which the run did not start"):
        Executor(planner=planner, tools={"noop": noop}, trace=tmp_path / "t.jsonl").run("g")
    assert len(seen) == 1 and "harness.spawn()" in str(seen[0])  # the thread saw it too, even if it swallowed it
    assert "llm" not in {r.get("boundary") for r in read_records(tmp_path / "t.jsonl")}


def test_a_helper_thread_of_a_tool_call_belongs_to_the_call(tmp_path: Path) -> None:
    """While a call is in flight, a stray thread's crossings are the call's own, as nested crossings are."""

    def tool() -> Any:
        out: list[Any] = []
        t = threading.Thread(target=lambda: out.append(harness.random()))
        t.start()
        t.join()
        return {"n": len(out)}

    out = Executor(planner=_one("tool"), tools={"tool": tool}, trace=tmp_path / "t.jsonl").run("g")
    assert out.state == "DONE" and out.checkpoints[0].result == {"n": 1}
    # with a timeout the tool runs on a worker thread: the call is in flight all the same
    timed = Executor(planner=_one("tool"), tools={"tool": tool}, trace=tmp_path / "timed.jsonl",
                     retry=harness.RetryPolicy(timeout=60)).run("g")  # fmt: skip
    assert timed.state == "DONE" and timed.checkpoints[0].result == {"n": 1}


def _one(tool: str) -> Any:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        return None if done else Step("only", tool, {})

    return planner


# --- spawn, join, clocks -----------------------------------------------------------------------------


def worker(topic: str, delay: float = 0.0) -> str:
    time.sleep(delay)
    found = harness.llm({"search": topic}, echo_llm)
    return f"{harness.current_agent()}:{found['echo']['search']}"


def fan_out(goal: Any, done: list[Any]) -> Step | None:
    if done:
        return None
    a = harness.spawn("worker_a", worker, "sqlite", random.random() * 0.01)
    b = harness.spawn("worker_b", worker, "postgres", random.random() * 0.01)
    found = harness.join(a, b)
    return Step("report", "noop", {"found": found})


def test_spawned_agents_record_their_crossings_with_agent_and_clock(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    out = Executor(planner=fan_out, tools={"noop": noop}, trace=trace).run("g")
    assert out.state == "DONE"
    assert out.checkpoints[0].result == {"found": ["worker_a:sqlite", "worker_b:postgres"]}
    records = read_records(trace)
    first_spawn = next(i for i, r in enumerate(records) if r["kind"] == "spawn")
    assert all("vc" not in r and "agent" not in r for r in records[:first_spawn])  # a sequential prefix
    assert records[-1]["kind"] == "seal" and "vc" not in records[-1]  # the seal is no agent's event
    assert all("vc" in r for r in records[first_spawn:-1])
    assert records[first_spawn]["vc"] == {"main": first_spawn + 1}  # main's count so far is the seq
    assert all(list(r["vc"]) == sorted(r["vc"]) for r in records[first_spawn:-1])  # keys sorted, as FORMAT.md says
    rep = harness.replay(trace)
    assert set(rep.agents) == {"main", "worker_a", "worker_b"}
    (ca,) = rep.agents["worker_a"]
    assert ca.agent == "worker_a" and ca.request == {"search": "sqlite"} and ca.vc["worker_a"] == 1
    assert ca.vc["main"] == first_spawn + 1  # it starts from its spawn's clock
    exits = {r["agent"]: r for r in records if r["kind"] == "exit"}
    joins = [r for r in records if r["kind"] == "join"]
    assert [j["child"] for j in joins] == ["worker_a", "worker_b"]
    for j in joins:  # a join knows everything its child did
        assert leq(exits[j["child"]]["vc"], j["vc"])


def test_a_run_that_never_spawns_writes_no_clock(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    Executor(planner=_one("noop"), tools={"noop": noop}, trace=trace).run("g")
    assert not any("vc" in r or "agent" in r for r in read_records(trace))
    assert harness.replay(trace).tail.clocks is None


def test_current_agent_and_spawn_outside_a_run() -> None:
    assert harness.current_agent() is None
    h = harness.spawn("plain", lambda x: (harness.current_agent(), x * 2), 21)
    assert h.join() == (None, 42)


def test_a_live_name_cannot_be_spawned_twice(tmp_path: Path) -> None:
    gate = threading.Event()

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        h = harness.spawn("w", gate.wait)
        try:
            with pytest.raises(HarnessError, match="already running"):
                harness.spawn("w", lambda: None)
        finally:
            gate.set()
        h.join()
        again = harness.spawn("w", lambda: "second life")  # the name is free once joined
        return Step("s", "noop", {"r": again.join()})

    out = Executor(planner=planner, tools={"noop": noop}, trace=tmp_path / "t.jsonl").run("g")
    assert out.checkpoints[0].result == {"r": "second life"}
    harness.replay(tmp_path / "t.jsonl")


def test_workers_overlap_in_wall_clock_time(tmp_path: Path) -> None:
    """Each worker waits for the other to have started: only overlapping threads can both get through."""
    started = {"worker_a": threading.Event(), "worker_b": threading.Event()}

    def overlapping(other: str) -> str:
        me = harness.current_agent()
        assert me is not None
        started[me].set()
        if not started[other].wait(timeout=30):
            raise AssertionError(f"{me} ran alone: {other} never started while it was running")
        return harness.llm({"from": me}, echo_llm)["echo"]["from"]  # type: ignore[no-any-return]

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        a = harness.spawn("worker_a", overlapping, "worker_b")
        b = harness.spawn("worker_b", overlapping, "worker_a")
        return Step("both", "noop", {"r": harness.join(a, b)})

    trace = tmp_path / "t.jsonl"
    out = Executor(planner=planner, tools={"noop": noop}, trace=trace).run("g")
    assert out.checkpoints[0].result == {"r": ["worker_a", "worker_b"]}
    # the clocks say the same: neither worker's crossing happened before the other's
    a, b = (harness.replay(trace).agents[w][0].vc for w in ("worker_a", "worker_b"))
    assert not leq(a, b) and not leq(b, a)


# --- errors in threads -------------------------------------------------------------------------------


class Boom(Exception):
    pass


def test_thread_exceptions_are_recorded_and_raised_in_handle_order(tmp_path: Path) -> None:
    def fails(what: str, delay: float) -> None:
        time.sleep(delay)
        raise Boom(what)

    def planner(goal: Any, done: list[Any]) -> Step | None:
        # b fails first in time; a comes first in the join: a's error is the one raised, every time
        a = harness.spawn("a", fails, "from a", 0.05)
        b = harness.spawn("b", fails, "from b", 0.0)
        harness.join(a, b)
        return None

    trace = tmp_path / "t.jsonl"
    with pytest.raises(Boom, match="from a"):
        Executor(planner=planner, tools={}, trace=trace).run("g")
    exits = {r["agent"]: r for r in read_records(trace) if r["kind"] == "exit"}
    assert exits["a"]["status"] == exits["b"]["status"] == "error"
    assert exits["b"]["error"]["message"] == "from b" and exits["b"]["error"]["type"].endswith("Boom")
    assert [r["child"] for r in read_records(trace) if r["kind"] == "join"] == ["a", "b"]  # both joined
    harness.replay(trace)


# --- messages ----------------------------------------------------------------------------------------


def test_messages_merge_clocks_and_are_served_on_rerun(tmp_path: Path) -> None:
    def producer(n: int) -> None:
        for i in range(n):
            harness.send("consumer", {"i": i, "from": harness.current_agent()})

    def consumer(n: int) -> list[Any]:
        got = []
        for _ in range(n):
            m = harness.receive(timeout=30)
            got.append([m.sender, m.body["i"]])
        return got

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        c = harness.spawn("consumer", consumer, 6)
        p1 = harness.spawn("p1", producer, 3)
        p2 = harness.spawn("p2", producer, 3)
        got = harness.join(c, p1, p2)[0]
        return Step("got", "noop", {"got": got})

    trace = tmp_path / "t.jsonl"
    out = Executor(planner=planner, tools={"noop": noop}, trace=trace).run("g")
    got = out.checkpoints[0].result["got"]
    assert sorted(got) == [["p1", 0], ["p1", 1], ["p1", 2], ["p2", 0], ["p2", 1], ["p2", 2]]
    records = read_records(trace)
    sends = {(r["agent"], r["request"]["message"]["i"]): r["vc"] for r in records if "send" in str(r.get("request"))}
    for r in records:
        if r.get("boundary") == "agent_msg" and "receive" in r["request"]:
            sent = sends[(r["response"]["from"], r["response"]["message"]["i"])]
            assert leq(sent, r["vc"])  # a receive knows its send
    for _ in range(3):  # whatever order the threads take this time, the recorded one is served
        r = harness.rerun(trace, planner=planner, tools={"noop": refuse})
        assert r.equal and r.live_calls == 0 and r.state == "DONE"


def test_a_receive_with_nothing_recorded_is_a_violation(tmp_path: Path) -> None:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        h = harness.spawn("w", lambda: None)
        h.join()
        return Step("s", "noop", {})

    trace = tmp_path / "t.jsonl"
    Executor(planner=planner, tools={"noop": noop}, trace=trace).run("g")

    def greedy(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        h = harness.spawn("w", lambda: harness.receive(timeout=1))
        h.join()
        return Step("s", "noop", {})

    with pytest.raises(harness.ReplayViolation) as e:
        harness.rerun(trace, planner=greedy, tools={"noop": refuse})
    assert e.value.agent == "w"


# --- rerun: each agent its own crossings, whatever the threads do ------------------------------------


def slowly(value: Any) -> Any:
    """A call that takes a random while: the threads interleave differently every time."""
    time.sleep(random.random() * 0.004)
    return value


def delayed(topic: str) -> str:
    harness.now()
    hits = harness.boundary("search", {"q": topic}, lambda: slowly([f"{topic}-1", f"{topic}-2"]))
    if topic == "t1":
        harness.send("w2", hits[0])
    if topic == "t2":
        hits.append(harness.receive("w1", timeout=30).body)
    answer = harness.llm({"topic": topic, "hits": hits}, lambda req: slowly(echo_llm(req)))
    return str(answer["echo"]["topic"])


def pair(goal: Any, done: list[Any]) -> Step | None:
    if done:
        return None
    hs = [harness.spawn(f"w{i}", delayed, f"t{i}") for i in range(3)]
    return Step("all", "noop", {"r": harness.join(*hs), "at": harness.boundary("clock", None, lambda: slowly(1))})


def test_fifty_runs_with_random_delays_rerun_equal_and_give_one_golden(tmp_path: Path) -> None:
    goldens = set()
    orders = set()
    for i in range(50):
        trace = tmp_path / f"{i}.jsonl"
        Executor(planner=pair, tools={"noop": noop}, trace=trace).run("g")
        r = harness.rerun(trace, planner=pair, tools={"noop": refuse})
        assert r.equal and r.live_calls == 0, i
        goldens.add(render(harness.normalize(trace)))
        assert render(harness.normalize(list(r.records))) in goldens
        orders.add(tuple(rec.get("agent", "main") for rec in read_records(trace)))
    assert len(goldens) == 1
    assert len(orders) > 1  # the threads did interleave differently (else this test proves nothing)


def test_drift_in_a_worker_thread_surfaces_from_rerun_with_its_agent(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    Executor(planner=pair, tools={"noop": noop}, trace=trace).run("g")

    def drifting(topic: str) -> str:
        harness.now()
        harness.boundary("search", {"q": topic + "!"}, lambda: [])
        return ""

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        hs = [harness.spawn(f"w{i}", delayed if i != 0 else drifting, f"t{i}") for i in range(3)]
        return Step("all", "noop", {"r": harness.join(*hs)})

    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, planner=planner, tools={"noop": refuse})
    assert e.value.agent == "w0"
    assert e.value.fields == {"q": ("t0", "t0!")} and e.value.seq > 0
    assert read_records(trace)[e.value.seq - 1]["agent"] == "w0"


def test_live_calls_by_agent(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    Executor(planner=pair, tools={"noop": noop}, trace=trace).run("g")
    r = harness.rerun(trace, planner=pair, tools={"noop": refuse})
    assert r.live_calls == 0 and r.live_calls_by_agent == {}
    rep = harness.replay(trace)
    w1 = rep.agents["w1"][-1]  # w1's model call
    f = harness.fork(trace, at=w1.seq, value={"echo": {"topic": "forked"}}, planner=pair, tools={"noop": noop})
    # w1's model call is mutated; nothing in w0 or w2 runs live; main's steps after the join are live
    assert f.live_calls_by_agent.get("w0", 0) == 0 and f.live_calls_by_agent.get("w2", 0) == 0
    assert f.live_calls_by_agent.get("main", 0) >= 1
    (checkpoint,) = harness.replay(f.trace or "").checkpoints
    assert checkpoint.result["r"] == ["t0", "forked", "t2"]
    assert all(rec.get("reused") for rec in f.records if rec.get("agent") in ("w0", "w2"))
    (mutated,) = [rec for rec in f.records if rec.get("mutated")]
    assert mutated["agent"] == "w1" and mutated["response"] == {"echo": {"topic": "forked"}}
    live = [rec for rec in f.records if not rec.get("reused") and not rec.get("mutated") and rec["kind"] != "header"]
    assert {rec.get("agent", "main") for rec in live} <= {"main", "w1"}  # the branch's causal future only
    assert harness.replay(f.trace or "").state == "DONE"


# --- replay refuses forged clocks --------------------------------------------------------------------


def _agent_trace(tmp_path: Path) -> list[dict[str, Any]]:
    trace = tmp_path / "t.jsonl"
    Executor(planner=fan_out, tools={"noop": noop}, trace=trace).run("g")
    return read_records(trace)


@pytest.mark.parametrize(
    "forge",
    [
        "own component skips",
        "component falls",
        "clock dropped",
        "first event before spawn",
        "receive before send",
        "join before exit",
        "agent renamed",
    ],
)
def test_replay_refuses_a_forged_clock(tmp_path: Path, forge: str) -> None:
    records = _agent_trace(tmp_path)
    i = next(i for i, r in enumerate(records) if r.get("agent") == "worker_a" and r["kind"] == "crossing")
    line = i + 1
    if forge == "own component skips":
        records[i]["vc"]["worker_a"] += 1
    elif forge == "component falls":
        records[i]["vc"]["main"] -= 1
    elif forge == "clock dropped":
        del records[i]["vc"]
    elif forge == "first event before spawn":
        spawn = next(j for j, r in enumerate(records) if r["kind"] == "spawn" and r["child"] == "worker_a")
        records.insert(spawn, records.pop(i))
        line = spawn + 1
    elif forge == "receive before send":
        records[i] = {**records[i], "boundary": "agent_msg", "request": {"receive": None},
                      "response": {"from": "worker_b", "message": 1, "sent": {"worker_b": 1}}}  # fmt: skip
    elif forge == "join before exit":
        j = next(j for j, r in enumerate(records) if r["kind"] == "join" and r["child"] == "worker_a")
        e = next(j for j, r in enumerate(records) if r["kind"] == "exit" and r["agent"] == "worker_a")
        records.insert(e, records.pop(j))
        line = e + 1
    elif forge == "agent renamed":
        records[i]["agent"] = "worker_c"
    for n, r in enumerate(records, 1):
        r["seq"] = n
    write_trace(tmp_path / "forged.jsonl", records)
    with pytest.raises(TraceCorruption) as e:
        harness.replay(tmp_path / "forged.jsonl")
    assert e.value.reason == "vector-clock" and e.value.line == line, e.value


# --- the pipeline example and the CLI -----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def test_the_pipeline_example_records_reruns_forks_and_diffs(tmp_path: Path) -> None:
    import subprocess
    import sys

    runs = tmp_path / "runs"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "pipeline.py"), str(runs)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "rerun: equal=True, live calls=0" in r.stdout
    assert "worker_b: 0" in r.stdout and "crossing search changed" in r.stdout
    listed = harness.list_runs(runs)
    assert [x.status for x in listed] == ["done"] * 3
    parent, child = listed[0].path, listed[2].path
    # the workers overlapped: each one's first record precedes the other's last (their own timestamps)
    spans = {}
    for rec in read_records(parent):
        if rec.get("agent") in ("worker_a", "worker_b"):
            spans.setdefault(rec["agent"], []).append(rec["ts"])
    assert min(spans["worker_a"]) < max(spans["worker_b"]) and min(spans["worker_b"]) < max(spans["worker_a"])
    assert all(rec.get("reused") for rec in read_records(child) if rec.get("agent") == "worker_b")
    shown = in_process.harness("show", parent, "--vector")
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if "crossing search" in x and "worker_b" in x)
    assert "{main:" in line and "worker_b:1}" in line


def test_a_causal_fork_reaches_the_receiver_of_a_changed_message(tmp_path: Path) -> None:
    """w1 sends its first hit to w2: forking w1's search changes what w2 receives, live; w0 is untouched."""
    trace = tmp_path / "t.jsonl"
    Executor(planner=pair, tools={"noop": noop}, trace=trace).run("g")
    search = next(c for c in harness.replay(trace).agents["w1"] if c.kind == "search")
    f = harness.fork(trace, at=search.seq, value=["forked-hit"], planner=pair, tools={"noop": noop})
    child = harness.replay(f.trace or "")
    (received,) = [c for c in child.agents["w2"] if c.kind == "agent_msg"]
    assert received.response["message"] == "forked-hit"  # received live, from the live send
    (llm,) = [c for c in child.agents["w2"] if c.kind == "llm"]
    assert llm.request["hits"][-1] == "forked-hit"
    assert f.live_calls_by_agent.get("w0", 0) == 0
    records = read_records(f.trace or "")
    assert all(r.get("reused") for r in records if r.get("agent") == "w0")
    w2 = [r for r in records if r.get("agent") == "w2"]
    assert w2[0].get("reused") and not any(r.get("reused") for r in w2[2:])  # its past reused, its future live
    d = harness.diff(trace, f.trace or "")
    first = d.moved[0]
    assert (first.op, first.seq_a, first.kind) == ("changed", search.seq, "crossing")  # the branch, causally first
    assert all(m.op == "changed" for m in d.moved)  # each agent aligned with its own: no spurious insert/remove


class Crash(BaseException):
    """The process dying, as far as the run can tell."""


def test_a_run_with_agents_resumes_serving_each_agent_its_crossings_again(tmp_path: Path) -> None:
    calls: list[Any] = []
    crash = [True]

    def model(request: Any) -> Any:
        calls.append(request)
        if request == {"n": 2} and crash[0]:
            raise Crash
        return {"r": request}

    def work() -> list[Any]:
        return [harness.llm({"n": 1}, model), harness.llm({"n": 2}, model)]

    def planner(goal: Any, done: list[Any]) -> Step | None:
        return None if done else Step("s", "noop", {"r": harness.spawn("w", work).join()})

    trace = tmp_path / "t.jsonl"
    with pytest.raises(Crash):
        Executor(planner=planner, tools={"noop": noop}, trace=trace).run("g")
    crash[0], calls[:] = False, []
    out = Executor(planner=planner, tools={"noop": noop}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and calls == [{"n": 2}]  # w's first model call was served again, not made
    assert out.checkpoints[0].result == {"r": [{"r": {"n": 1}}, {"r": {"n": 2}}]}
    rep = harness.replay(trace)
    assert [c.request for c in rep.agents["w"]] == [{"n": 1}, {"n": 2}]
    assert [c.vc["w"] for c in rep.agents["w"]] == [1, 3]  # its clock went on across the resume


def test_agents_left_running_when_the_run_raises_write_nothing_after_it(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    gate = threading.Event()

    def late() -> None:
        gate.wait(30)
        try:
            harness.llm({"x": 1}, echo_llm)
        except HarnessError as e:
            errors.append(e)

    def waiting() -> None:
        try:
            harness.receive()  # nobody sends, and no timeout
        except HarnessError as e:
            errors.append(e)

    def planner(goal: Any, done: list[Any]) -> Step | None:
        harness.spawn("late", late)
        harness.spawn("waiting", waiting)
        raise Boom("the planner failed with agents running")

    trace = tmp_path / "t.jsonl"
    with pytest.raises(Boom):
        Executor(planner=planner, tools={}, trace=trace).run("g")
    size = trace.stat().st_size
    gate.set()
    for t in threading.enumerate():
        if t.name.startswith("harness-agent-"):
            t.join(30)
    assert len(errors) == 2 and all(isinstance(e, harness.JournalError) for e in errors)  # refused, not written
    assert trace.stat().st_size == size and harness.replay(trace).state == "PLAN"  # as a crash leaves it


def test_show_golden_of_a_run_with_agents_is_its_normalized_view(tmp_path: Path) -> None:
    from harness.review.show import show_trace

    trace = tmp_path / "t.jsonl"
    Executor(planner=pair, tools={"noop": noop}, trace=trace).run("g")
    out: list[str] = []
    show_trace(trace, out.append, view="golden")
    assert "".join(out) == render(harness.normalize(trace))  # the causal order, as goldens hold it
    timeline: list[str] = []
    show_trace(trace, timeline.append, vector=True)
    w0 = next(line for line in "".join(timeline).splitlines() if "search" in line and " w0 " in line)
    assert "{main:" in w0 and ",w0:" in w0


def test_a_recorder_records_its_agents_and_joins_them_before_its_end(tmp_path: Path) -> None:
    trace = tmp_path / "r.jsonl"
    with harness.Recorder(trace, entrypoint="test") as rec:
        h = harness.spawn("helper", lambda: harness.llm({"q": 1}, echo_llm))
        rec.log("started", {"n": 1})
    assert h.done
    rep = harness.replay(trace)
    assert rep.state == "DONE" and [c.request for c in rep.agents["helper"]] == [{"q": 1}]
    assert [r["kind"] for r in read_records(trace)][-3:] == ["join", "end", "seal"]


def test_join_with_a_timeout_and_names_that_are_no_names(tmp_path: Path) -> None:
    gate = threading.Event()

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        h = harness.spawn("slow", gate.wait, 30)
        with pytest.raises(TimeoutError, match="'slow' is still running"):
            h.join(timeout=0.01)
        gate.set()
        for bad in ("", "main", 3):
            with pytest.raises(HarnessError, match="non-empty str name other than 'main'"):
                harness.spawn(bad, lambda: None)  # type: ignore[arg-type]
        return Step("s", "noop", {"r": h.join()})

    out = Executor(planner=planner, tools={"noop": noop}, trace=tmp_path / "t.jsonl").run("g")
    assert out.checkpoints[0].result == {"r": True}
    joins = [r for r in read_records(tmp_path / "t.jsonl") if r["kind"] == "join"]
    assert [j["child"] for j in joins] == ["slow"]  # the timed-out join wrote nothing


def test_send_and_receive_outside_a_run_say_so() -> None:
    with pytest.raises(HarnessError, match="inside a run"):
        harness.send("someone", 1)
    with pytest.raises(HarnessError, match="inside a run"):
        harness.receive()


def test_two_threads_crossing_as_one_agent_at_once_fail_the_run_instead_of_losing_crossings(tmp_path: Path) -> None:
    """Threads run in copies of the run's context are all agent main: their concurrent calls cannot be
    ordered on rerun (one was silently not recorded). The second one is refused, and the run fails."""
    inside, refused = threading.Event(), threading.Event()
    errors: list[HarnessError] = []

    def first() -> None:
        def call() -> float:
            inside.set()
            assert refused.wait(30)  # a hang guard, not a timing assertion
            return 1.0

        harness.boundary("clock", None, call)

    def second() -> None:
        assert inside.wait(30)
        try:
            harness.boundary("clock", None, lambda: 2.0)
        except HarnessError as e:
            errors.append(e)
        refused.set()

    def planner(goal: Any, done: list[Any]) -> Any:
        if not done:
            threads = [threading.Thread(target=contextvars.copy_context().run, args=(f,)) for f in (first, second)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return Step("s", "t", {})
        return None

    with pytest.raises(HarnessError, match="two threads make calls as agent 'main' at once") as e:
        Executor(planner=planner, tools={"t": noop}, trace=tmp_path / "r.jsonl").run("g")
    assert errors and e.value is errors[0] and "harness.spawn()" in str(e.value)
    records = read_records(tmp_path / "r.jsonl")
    assert [r["kind"] for r in records][-2:] == ["crossing", "crash"]  # the first call is recorded; then the crash


def test_the_stray_thread_error_recommends_spawn_only(tmp_path: Path) -> None:
    from harness.runtime.boundary import Session

    message = str(Session(None).stray("now"))
    assert "harness.spawn()" in message and "copy_context" not in message


def test_a_foreign_thread_is_never_blamed_on_one_of_several_runs(tmp_path: Path) -> None:
    """Two runs in one process: run B's tool helper thread does not fail run A (it failed A before); a thread
    no run started, crossing while both plan, gets a HarnessError itself and fails neither run."""
    a_planning, b_planning, helper_done, stray_done = (threading.Event() for _ in range(4))
    seen: list[Any] = []

    def planner_a(goal: Any, done: list[Any]) -> Any:
        if not done:
            a_planning.set()
            assert helper_done.wait(30) and stray_done.wait(30)  # hang guards, not timing assertions
            return Step("s", "t", {})
        return None

    def tool_b() -> Any:
        assert a_planning.wait(30)
        box: list[Any] = []
        t = threading.Thread(target=lambda: box.append(str(harness.now())))  # a helper thread inside B's call
        t.start()
        t.join()
        helper_done.set()
        return len(box)

    def planner_b(goal: Any, done: list[Any]) -> Any:
        if not done:
            return Step("s", "tb", {})
        b_planning.set()  # B plans again (no call in flight) until the stray crossing was refused
        assert stray_done.wait(30)
        return None

    out: dict[str, Any] = {}
    runs = [
        threading.Thread(target=lambda: out.__setitem__("A", Executor(planner=planner_a, tools={"t": noop},
                                                                      trace=tmp_path / "a.jsonl").run("a"))),
        threading.Thread(target=lambda: out.__setitem__("B", Executor(planner=planner_b, tools={"tb": tool_b},
                                                                      trace=tmp_path / "b.jsonl").run("b"))),
    ]  # fmt: skip
    for t in runs:
        t.start()
    assert helper_done.wait(30) and b_planning.wait(30)
    try:
        with pytest.raises(HarnessError, match="2 runs are in progress in this process"):
            harness.now()  # this thread was started by no run, and neither run has a call in flight
        seen.append("refused")
    finally:
        stray_done.set()
        for t in runs:
            t.join()
    assert seen == ["refused"]
    assert out["A"].state == "DONE" and out["B"].state == "DONE"
    assert out["B"].checkpoints[0].result == 1
    assert not any(r["kind"] == "crash" for r in read_records(tmp_path / "a.jsonl"))


def test_a_record_that_cannot_be_stored_takes_no_tick_of_the_clock(tmp_path: Path) -> None:
    """In a run that spawned, a record refused by the encoder (over the line limit) took a clock tick: the
    crash record after it skipped a count and replay() refused the trace for good (vector-clock)."""
    big = {"blob": "x" * (17 << 20)}

    def planner(goal: Any, done: list[Any]) -> Any:
        if not done:
            harness.spawn("w", lambda: 1).join()
            return Step("s", "t", big if big else {})
        return None

    trace = tmp_path / "r.jsonl"
    with pytest.raises(harness.NotSerializable) as e:
        Executor(planner=planner, tools={"t": noop}, trace=trace).run("g")
    assert str(e.value).startswith("the transition record is ") and "bytes long; a trace line holds at most" in str(e)
    rep = harness.replay(trace)  # a valid trace: its crash record carries the next count
    assert rep.state == "PLAN" and read_records(trace)[-1]["kind"] == "crash"
    big.clear()
    out = Executor(planner=planner, tools={"t": noop}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and harness.replay(trace).state == "DONE"


def test_a_receive_from_an_agent_that_ended_gives_up_with_a_clear_error(tmp_path: Path) -> None:
    """receive(sender) after sender ended without sending waited forever; it now raises HarnessError (recorded)."""
    seen: list[str] = []

    def planner(goal: Any, done: list[Any]) -> Any:
        if not done:
            h = harness.spawn("w", lambda: "sent nothing")
            h.wait()  # ended, not joined: its name is still the run's
            with pytest.raises(HarnessError, match="agent 'w', which ended without sending one") as e:
                harness.receive("w", timeout=30)  # (the timeout is a hang guard: it waited forever)
            seen.append(str(e.value))
            h.join()
            return Step("x", "t", {})
        return None

    trace = tmp_path / "r.jsonl"
    assert Executor(planner=planner, tools={"t": noop}, trace=trace).run("g").state == "DONE"
    assert seen and "'main' waits" in seen[0]
    crossing = next(r for r in read_records(trace) if r["kind"] == "crossing" and r["boundary"] == "agent_msg")
    assert crossing["error"]["type"] == "harness._errors.HarnessError"
    assert harness.replay(trace).state == "DONE"


def test_the_run_ends_although_an_unjoined_agent_waits_in_receive(tmp_path: Path) -> None:
    """The run's end joins its agents: one blocked in receive() (nobody will send) hung it; it now gives up."""

    def waiter() -> Any:
        return harness.receive(timeout=30).body  # nobody will send (the timeout is a hang guard)

    def planner(goal: Any, done: list[Any]) -> Any:
        if not done:
            harness.spawn("w", waiter)  # forgotten: never joined
            return Step("x", "t", {})
        return None

    trace = tmp_path / "r.jsonl"
    assert Executor(planner=planner, tools={"t": noop}, trace=trace).run("g").state == "DONE"
    records = read_records(trace)
    exit_ = next(r for r in records if r["kind"] == "exit")
    assert exit_["status"] == "error" and "the run is ending" in exit_["error"]["message"]
    assert [r["child"] for r in records if r["kind"] == "join"] == ["w"]
    assert harness.replay(trace).state == "DONE"


# --- messages as replay() checks them (issue 25) -------------------------------------------------


def test_a_message_sent_before_the_first_spawn_reaches_its_agent_and_replays(tmp_path: Path) -> None:
    """Its send carries no clock (the run had not spawned): the receive's `sent` is null, and that is valid."""

    def worker() -> Any:
        return harness.receive("main", timeout=30).body

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        harness.send("w", {"task": "sum"})
        return Step("s", "noop", {"got": harness.spawn("w", worker).join()})

    trace = tmp_path / "t.jsonl"
    out = Executor(planner=planner, tools={"noop": noop}, trace=trace).run("g")
    assert out.state == "DONE" and out.checkpoints[0].result == {"got": {"task": "sum"}}
    received = next(c for c in harness.replay(trace).agents["w"] if c.kind == "agent_msg")
    assert received.response == {"from": "main", "message": {"task": "sum"}, "sent": None}


def test_a_message_too_large_for_a_line_goes_through_a_blob_and_replays(tmp_path: Path) -> None:
    big = {"text": "x" * 100_000}

    def worker() -> Any:
        harness.send("main", big)

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        h = harness.spawn("w", worker)
        got = harness.receive("w", timeout=30).body
        h.join()
        return Step("s", "noop", {"n": len(got["text"])})

    trace = tmp_path / "t.jsonl"
    assert Executor(planner=planner, tools={"noop": noop}, trace=trace).run("g").state == "DONE"
    assert sum('"blobs":{' in line for line in trace.read_text().splitlines()) == 2  # the send's and the receive's
    assert harness.replay(trace).state == "DONE" and harness.verify(trace).ok
