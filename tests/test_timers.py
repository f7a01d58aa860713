"""Durable timers and retries: harness.sleep(), RetryPolicy(backoff=..., timeout=...).

No assertion here is on elapsed time: each is on the recorded wake-up times
and on the calls to the one function a timer waits with (`_timers.pause`).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from children import kill_at

import harness
from harness import Executor, RetryPolicy, Step, Tool, ToolError, replay
from harness.runtime import timers as _timers
from harness.testing import read_records, write_trace


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every wait a timer asks for, in seconds; nothing really waits."""
    asked: list[float] = []
    monkeypatch.setattr(_timers, "pause", asked.append)
    return asked


def sleepy_planner(seconds: float) -> Any:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        if len(done) == 1:
            harness.sleep(seconds)
        return None if len(done) == 2 else Step(f"s{len(done)}", "work", {"i": len(done)})

    return planner


def work(i: int) -> dict[str, int]:
    return {"i": i}


def sleeps(trace: Path) -> list[dict[str, Any]]:
    return [r for r in read_records(trace) if r.get("boundary") == "sleep"]


def test_sleep_records_its_wake_up_time_and_a_rerun_does_not_sleep(tmp_path: Path, waits: list[float]) -> None:
    trace = tmp_path / "run.jsonl"
    before = time.time()
    out = Executor(planner=sleepy_planner(30), tools={"work": work}, trace=trace).run("g")
    after = time.time()
    assert out.state == "DONE"
    [rec] = sleeps(trace)
    assert rec["request"] == {"seconds": 30} and before + 30 <= rec["response"] <= after + 30
    assert len(waits) == 1 and 0 < waits[0] <= 30
    r = harness.rerun(trace, planner=sleepy_planner(30), tools={"work": work})
    assert (r.equal, r.live_calls, len(waits)) == (True, 0, 1)  # no second wait
    Executor(planner=sleepy_planner(30), tools={"work": work}, trace=tmp_path / "later.jsonl").run("g")
    assert harness.diff(trace, tmp_path / "later.jsonl").equal  # a wake-up time is a clock reading: normalized out


def test_sleep_outside_a_run_is_a_plain_sleep_and_bad_seconds_are_refused(waits: list[float]) -> None:
    harness.sleep(2)
    harness.sleep(0)
    assert waits == [2]
    for bad in (-1, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError, match="finite number of seconds"):
            harness.sleep(bad)  # type: ignore[arg-type]


CHILD = """
import os, sys
from pathlib import Path
import harness
from harness import Executor, Step
from harness.runtime import timers as _timers

trace, marker = sys.argv[1], Path(sys.argv[2])
real = _timers.pause

def pause(seconds):
    Path(f"{marker}.tmp").write_text(repr(seconds))
    os.replace(f"{marker}.tmp", marker)  # tell the parent (atomically) we are asleep
    real(seconds)

_timers.pause = pause

def planner(goal, done):
    if len(done) == 1:
        harness.sleep(600)
    return None if len(done) == 2 else Step(f"s{len(done)}", "work", {"i": len(done)})

Executor(planner=planner, tools={"work": lambda i: {"i": i}}, trace=trace).run("g")
"""


def test_a_run_killed_while_asleep_resumes_to_sleep_only_what_is_left(tmp_path: Path, waits: list[float]) -> None:
    trace, marker = tmp_path / "run.jsonl", tmp_path / "asleep"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(trace), str(marker)], stderr=subprocess.PIPE)
    kill_at(marker, child, "its sleep")
    assert child.returncode == -signal.SIGKILL
    [asleep] = sleeps(trace)
    wake = asleep["response"]
    assert 0 < float(marker.read_text()) <= 600 and replay(trace).state == "PLAN"

    resumed_at = time.time()
    out = Executor(planner=sleepy_planner(600), tools={"work": work}, trace=trace, resume=True).run("g")
    assert out.state == "DONE"
    assert len(waits) == 1 and 0 < waits[0] <= wake - resumed_at  # only what is left of the recorded sleep
    assert [r["response"] for r in sleeps(trace)] == [wake]  # the wake-up time was served, not drawn again
    r = harness.rerun(trace, planner=sleepy_planner(600), tools={"work": work})
    assert (r.equal, r.live_calls, len(waits)) == (True, 0, 1)


# --- backoff ----------------------------------------------------------------------------------


def failing(times: int) -> Any:
    calls: list[dict[str, Any]] = []

    def tool(i: int, **key: Any) -> dict[str, int]:
        calls.append({"i": i, **key})
        if len(calls) <= times:
            raise ToolError(f"down ({len(calls)})")
        return {"i": i}

    tool.calls = calls  # type: ignore[attr-defined]
    return tool


def one(goal: Any, done: list[Any]) -> Step | None:
    return None if done else Step("s", "work", {"i": 0})


def backoffs(trace: Path) -> list[dict[str, Any]]:
    return [r for r in read_records(trace) if r.get("boundary") == "backoff"]


def test_backoff_draws_recorded_delays_and_a_rerun_does_not_wait(tmp_path: Path, waits: list[float]) -> None:
    trace = tmp_path / "run.jsonl"
    policy = RetryPolicy(4, backoff=10, max_delay=15)
    out = Executor(planner=one, tools={"work": failing(3)}, trace=trace, retry=policy).run("g")
    assert out.state == "DONE"
    drawn = backoffs(trace)
    assert [d["request"]["attempt"] for d in drawn] == [2, 3, 4]
    for d, cap in zip(drawn, [10, 15, 15], strict=True):  # 10 * 2**(n-1), capped at max_delay
        assert 0 <= d["response"]["delay"] < cap and d["request"] == {**d["request"], "backoff": 10, "max_delay": 15}
    assert len(waits) == 3 and all(0 <= w <= d["response"]["delay"] for w, d in zip(waits, drawn, strict=True))
    r = harness.rerun(trace, planner=one, tools={"work": failing(0)})  # the policy is read from the recording
    assert (r.equal, r.live_calls, len(waits)) == (True, 0, 3)


def test_no_backoff_by_default_records_nothing(tmp_path: Path, waits: list[float]) -> None:
    trace = tmp_path / "run.jsonl"
    assert Executor(planner=one, tools={"work": failing(2)}, trace=trace).run("g").state == "DONE"
    assert backoffs(trace) == [] and waits == []


def test_a_crash_during_the_backoff_wait_resumes_to_wait_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "run.jsonl"
    policy = RetryPolicy(3, backoff=1000, max_delay=1000)

    def killed(seconds: float) -> None:
        raise KeyboardInterrupt  # the operator's Ctrl-C in the middle of the wait

    monkeypatch.setattr(_timers, "pause", killed)
    tool = failing(1)
    with pytest.raises(KeyboardInterrupt):
        Executor(planner=one, tools={"work": tool}, trace=trace, retry=policy).run("g")
    [drawn] = backoffs(trace)
    assert read_records(trace)[-1]["kind"] == "crash"
    waits: list[float] = []
    monkeypatch.setattr(_timers, "pause", waits.append)
    resumed_at = time.time()
    out = Executor(planner=one, tools={"work": tool}, trace=trace, retry=policy, resume=True).run("g")
    assert out.state == "DONE" and len(tool.calls) == 2
    left = drawn["response"]["wake"] - resumed_at
    assert backoffs(trace) == [drawn] and (waits == [] if left <= 0 else len(waits) == 1 and waits[0] <= left)
    r = harness.rerun(trace, planner=one, tools={"work": failing(0)})  # the crash and the resume, reproduced
    assert (r.equal, r.live_calls, len(waits)) == (True, 0, 0 if left <= 0 else 1)


def test_retry_policy_refuses_nonsense() -> None:
    for bad in ({"backoff": -1}, {"max_delay": float("nan")}, {"timeout": 0}, {"timeout": "5"}):
        with pytest.raises(ValueError, match=r"RetryPolicy|timeout"):
            RetryPolicy(3, **bad)  # type: ignore[arg-type]


# --- per-call timeout ---------------------------------------------------------------------------


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Blocked tool calls wait on it; it opens when the test ends, so their threads end too."""
    event = threading.Event()
    yield event
    event.set()


def hangs_first(gate: threading.Event) -> Any:
    calls: list[dict[str, Any]] = []

    def tool(i: int, **key: Any) -> dict[str, int]:
        calls.append({"i": i, **key})
        if len(calls) == 1:
            gate.wait()  # never returns in time: the test's timeout decides, not the machine's speed
        return {"i": i}

    tool.calls = calls  # type: ignore[attr-defined]
    return tool


# Half a second: the call that times out waits on the gate (it never returns in time, however short the limit),
# so the limit only has to be long enough for the calls that do return (a thread running a trivial function).
# RetryPolicy takes any timeout > 0 (0 is refused); these tests need only "a timeout happened", and each timeout
# costs its limit in wall time.
TIMEOUT = RetryPolicy(3, timeout=0.5)


def test_a_plain_tool_that_times_out_is_a_failed_attempt(tmp_path: Path, gate: threading.Event) -> None:
    trace = tmp_path / "run.jsonl"
    tool = hangs_first(gate)
    out = Executor(planner=one, tools={"work": tool}, trace=trace, retry=TIMEOUT).run("g")
    assert out.state == "DONE" and len(tool.calls) == 2
    failed = next(r for r in read_records(trace) if r.get("error"))
    assert (failed["from"], failed["to"], failed["error"]["type"], failed["error"]["timeout"]) == (
        "ACT", "PLAN", "ToolTimeout", TIMEOUT.timeout,
    )  # fmt: skip
    r = harness.rerun(trace, planner=one, tools={"work": hangs_first(gate)}, retry=TIMEOUT)
    assert (r.equal, r.live_calls) == (True, 0)


def test_an_idempotent_tool_that_times_out_is_called_again_with_the_same_key(
    tmp_path: Path, gate: threading.Event
) -> None:
    trace = tmp_path / "run.jsonl"
    tool = hangs_first(gate)
    out = Executor(planner=one, tools={"work": Tool(tool, idempotent=True)}, trace=trace, retry=TIMEOUT).run("g")
    assert out.state == "DONE"
    keys = [c["idempotency_key"] for c in tool.calls]
    intents = [r for r in read_records(trace) if r.get("to") == "ACT"]
    assert len(keys) == 2 and keys[0] == keys[1] == intents[0]["key"] == intents[1]["key"]
    assert [i.get("attempt", 1) for i in intents] == [1, 2]  # a new attempt, the same key: the tool can dedupe
    r = harness.rerun(trace, planner=one, tools={"work": Tool(hangs_first(gate), idempotent=True)}, retry=TIMEOUT)
    assert (r.equal, r.live_calls) == (True, 0)


def test_an_unsafe_tool_that_times_out_pauses_the_run_for_a_reconcile(tmp_path: Path, gate: threading.Event) -> None:
    trace = tmp_path / "run.jsonl"
    tool = hangs_first(gate)
    tools = {"work": Tool(tool, idempotent=False)}
    out = Executor(planner=one, tools=tools, trace=trace, retry=TIMEOUT).run("g")
    assert out.state == "PAUSED" and out.pending is not None and out.pending["tool"] == "work"
    assert read_records(trace)[-1]["error"]["type"] == "ToolTimeout" and len(tool.calls) == 1
    harness.reconcile(trace, happened=True, result={"i": 0}, evidence="the ledger has it")
    out = Executor(planner=one, tools=tools, trace=trace, retry=TIMEOUT, resume=True).run("g")
    assert out.state == "DONE" and len(tool.calls) == 1  # never called again
    r = harness.rerun(trace, planner=one, tools={"work": Tool(hangs_first(gate), idempotent=False)}, retry=TIMEOUT)
    assert (r.equal, r.live_calls) == (True, 0)


def test_a_call_that_outlives_its_timeout_never_writes_to_the_trace(tmp_path: Path, gate: threading.Event) -> None:
    trace = tmp_path / "run.jsonl"
    late, finished = threading.Event(), threading.Event()

    def tool(i: int) -> int:
        if not late.is_set():
            late.set()
            gate.wait()
            harness.now()  # after its timeout: a crossing nobody records
            harness.sleep(0)
            finished.set()
            return -1
        return i

    Executor(planner=one, tools={"work": tool}, trace=trace, retry=TIMEOUT).run("g")
    size = trace.stat().st_size
    gate.set()
    assert finished.wait(60), "the late call never ended"  # a hang guard, not a timing assertion
    assert trace.stat().st_size == size and replay(trace).state == "DONE"


def test_replay_accepts_a_reused_key_only_after_a_timeout_and_a_timeout_pause_only_for_an_unsafe_tool(
    tmp_path: Path, gate: threading.Event
) -> None:
    trace = tmp_path / "run.jsonl"
    tool = Tool(hangs_first(gate), idempotent=True)
    Executor(planner=one, tools={"work": tool}, trace=trace, retry=TIMEOUT).run("g")
    records = read_records(trace)
    failed = next(r for r in records if r.get("error"))
    failed["error"] = {"type": "ToolError", "message": "down"}  # not a timeout: the next attempt needs a new key
    write_trace(tmp_path / "forged.jsonl", records)
    with pytest.raises(harness.TraceCorruption) as info:
        replay(tmp_path / "forged.jsonl")
    assert info.value.reason == "bad-intent" and "idempotency key" in info.value.detail

    plain = tmp_path / "plain.jsonl"
    Executor(planner=one, tools={"work": hangs_first(gate)}, trace=plain, retry=TIMEOUT).run("g")
    records = read_records(plain)
    n = next(i for i, r in enumerate(records) if r.get("error"))
    paused = {**records[n], "to": "PAUSED"}  # as if a plain tool's timeout had paused the run
    write_trace(tmp_path / "forged-pause.jsonl", [*records[:n], paused])
    with pytest.raises(harness.TraceCorruption) as info:
        replay(tmp_path / "forged-pause.jsonl")
    assert info.value.reason == "bad-transition" and "only an unsafe tool's" in info.value.detail


def fan_of(n: int) -> Any:
    def planner(goal: Any, done: list[Any]) -> Any:
        return None if done else [Step(f"call{i}", "work", {"i": i}) for i in range(n)]

    return planner


def test_a_call_of_a_parallel_step_that_times_out_is_retried_in_its_own_lane(
    tmp_path: Path, gate: threading.Event, waits: list[float]
) -> None:
    trace = tmp_path / "run.jsonl"
    policy = RetryPolicy(3, timeout=TIMEOUT.timeout, backoff=0.5)
    tool = hangs_first(gate)
    out = Executor(planner=fan_of(2), tools={"work": tool}, trace=trace, retry=policy).run("g")
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [{"i": 0}, {"i": 1}]
    failed = next(r for r in read_records(trace) if r.get("error"))
    assert failed["agent"].startswith("step-") and failed["error"]["type"] == "ToolTimeout"
    assert len(waits) == 1  # the failed call's backoff, drawn in its lane
    r = harness.rerun(trace, planner=fan_of(2), tools={"work": hangs_first(gate)}, retry=policy)
    assert (r.equal, r.live_calls, len(waits)) == (True, 0, 1)


def test_an_unsafe_call_of_a_parallel_step_that_times_out_pauses_the_run(tmp_path: Path, gate: threading.Event) -> None:
    trace = tmp_path / "run.jsonl"
    tool = hangs_first(gate)
    tools = {"work": Tool(tool, idempotent=False)}
    out = Executor(planner=fan_of(2), tools=tools, trace=trace, retry=TIMEOUT).run("g")
    assert out.state == "PAUSED" and out.pending is not None and out.pending["tool"] == "work"
    assert replay(trace).state == "PAUSED"
    harness.reconcile(trace, happened=True, result={"i": out.pending["args"]["i"]}, evidence="the ledger has it")
    out = Executor(planner=fan_of(2), tools=tools, trace=trace, retry=TIMEOUT, resume=True).run("g")
    assert out.state == "DONE" and len(tool.calls) == 2  # each call once: the one that timed out is not repeated
