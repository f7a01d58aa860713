"""Operations and the safety fixes of issue 13: rejected unsafe results, crash records, `harness recover`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import in_process
import orjson
import pytest
from children import wait_for

import harness
from harness import Executor, Step, Tool, TraceCorruption, replay
from harness.testing import counter, fixed_plan, power_cut, read_records, steps, write_trace


def cli(cwd: Path, *args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` in cwd, env added: the console script's main() called in this process."""
    return in_process.harness(*args, cwd=cwd, env={**os.environ, **(env or {})})  # type: ignore[no-any-return]


# --- (1) a rejected result of an unsafe tool is never re-invoked by default ----------------------


def refund_once(goal: Any, done: list[Any]) -> Step | None:
    return None if done else Step("refund", "refund", {"amount": 5})


def test_a_rejected_unsafe_result_ends_the_run_failed_after_one_call(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    refund = counter()
    out = Executor(
        planner=refund_once, tools={"refund": Tool(refund, idempotent=False)}, verifier=lambda s, r: False, trace=trace
    ).run("g")
    assert out.state == "FAILED" and refund.calls == [{"amount": 5}]  # one refund, not three
    assert out.error is not None and out.error["type"] == "VerificationFailed"
    assert "idempotent=False" in out.error["message"] and "retry_rejected=True" in out.error["message"]
    last = [r for r in read_records(trace) if r["kind"] == "transition"][-1]
    assert (last["from"], last["to"], last.get("attempt", 1)) == ("VERIFY", "FAILED", 1)


def test_retry_rejected_opts_a_tool_in_and_other_tools_are_retried_as_before(tmp_path: Path) -> None:
    for tool in (Tool(counter(), idempotent=False, retry_rejected=True), Tool(counter(), idempotent=True), counter()):
        trace = tmp_path / f"run-{id(tool)}.jsonl"
        out = Executor(planner=refund_once, tools={"refund": tool}, verifier=lambda s, r: False, trace=trace).run("g")
        calls = tool.fn.calls if isinstance(tool, Tool) else tool.calls
        assert out.state == "FAILED" and len(calls) == 3
    header = read_records(trace)[0]
    assert Tool(counter(), idempotent=False, retry_rejected=True).contract == {
        "effect": "unsafe", "version": None, "retry_rejected": True,
    }  # fmt: skip
    assert "retry_rejected" not in header["tools"]["refund"]  # traces of other tools are unchanged


def test_replay_refuses_a_trace_that_retried_a_rejected_unsafe_result(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    refund = Tool(counter(), idempotent=False, retry_rejected=True)
    Executor(planner=refund_once, tools={"refund": refund}, verifier=lambda s, r: False, trace=trace).run("g")
    records = read_records(trace)
    del records[0]["tools"]["refund"]["retry_rejected"]  # as if the tool had not opted in
    write_trace(tmp_path / "forged.jsonl", records)
    with pytest.raises(TraceCorruption) as info:
        replay(tmp_path / "forged.jsonl")
    assert info.value.reason == "bad-transition" and "unsafe tool 'refund'" in info.value.detail


# --- (3) an exception escaping run() leaves a crash record; runs and show tell it -----------------


def test_a_crash_record_says_why_and_resume_goes_on_as_before(tmp_path: Path) -> None:
    trace = tmp_path / "runs" / "r.jsonl"
    trace.parent.mkdir()
    boom = [True]

    def tool(i: int) -> int:
        if boom:
            boom.pop()
            raise KeyError("no such account")
        return i

    plan = harness.testing.fixed_plan(harness.testing.steps(2))
    with pytest.raises(KeyError):
        Executor(planner=plan, tools={"work": tool}, trace=trace).run("g")
    crash = read_records(trace)[-1]
    assert (crash["kind"], crash["state"], crash["step"], crash["error"]["type"]) == (
        "crash", "ACT", 0, "builtins.KeyError",
    )  # fmt: skip
    assert "KeyError: 'no such account'" in crash["traceback"] and replay(trace).tail.crash == crash
    listed = orjson.loads(cli(tmp_path, "runs", trace.parent, "--json").stdout)
    assert listed[0]["status"] == "interrupted"
    assert listed[0]["detail"] == "crashed in ACT: builtins.KeyError: 'no such account'"
    table = cli(tmp_path, "runs", trace.parent).stdout
    assert "DETAIL" in table.splitlines()[0] and "crashed in ACT: builtins.KeyError" in table
    shown = cli(tmp_path, "show", trace).stdout
    assert "crash, step 0, attempt 1" in shown and "KeyError" in shown

    out = Executor(planner=plan, tools={"work": tool}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [0, 1]
    kinds = [r["kind"] for r in read_records(trace)]
    assert kinds[kinds.index("crash") + 1] == "resume"
    r = harness.rerun(trace, planner=plan, tools={"work": lambda i: pytest.fail("served")})
    assert (r.equal, r.live_calls) == (True, 0)  # the crash seam is reproduced


# --- harness recover ---------------------------------------------------------------------------

AGENT = """
import os, time
from pathlib import Path
import harness
from harness import Step, Tool

def make():
    def planner(goal, done):
        if goal.get("ask") and not done:
            harness.interrupt("approve?")
        if len(done) == goal["steps"]:
            return None
        tool = "pay" if goal.get("pay") and len(done) == 1 else "work"
        return Step(f"s{len(done)}", tool, {"i": len(done)})

    def work(i):
        if os.environ.get("FAIL_TOOL"):
            raise ValueError("the ledger is down")
        hold = os.environ.get("HOLD_FILE")
        if hold and i == 0 and not Path(hold).exists():
            Path(hold + ".inside").write_text(str(os.getpid()))
            while not Path(hold).exists():
                time.sleep(0.01)
        return {"i": i}

    def pay(i):
        return {"paid": i}

    return planner, {"work": work, "pay": Tool(pay, idempotent=False)}, None
"""


def stopped(trace: Path, goal: dict[str, Any], *, at: int) -> None:
    """A run of the test agent whose process died in its tool call number `at` (an exception here)."""
    sys.path.insert(0, str(trace.parent.parent))
    try:
        import recover_agent  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    planner, tools, _ = recover_agent.make()
    calls = [0]

    def dying(name: str) -> Any:
        fn = tools[name].fn if isinstance(tools[name], Tool) else tools[name]

        def call(**kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] == at:
                raise SystemError("killed")
            return fn(**kwargs)

        return Tool(call, idempotent=tools[name].idempotent) if isinstance(tools[name], Tool) else call

    with pytest.raises(SystemError):
        Executor(planner=planner, tools={n: dying(n) for n in tools}, trace=trace).run(goal)


def test_recover_resumes_what_stopped_leaves_what_waits_for_a_human_and_skips_a_live_writer(tmp_path: Path) -> None:
    (tmp_path / "recover_agent.py").write_text(AGENT)
    runs = tmp_path / "runs"
    runs.mkdir()
    stopped(runs / "crashed.jsonl", {"steps": 3}, at=2)  # resumed to DONE
    stopped(runs / "unsafe.jsonl", {"steps": 3, "pay": True}, at=2)  # resumed: pauses on the unsafe pay in flight
    stopped(runs / "crashed-too.jsonl", {"steps": 2}, at=1)
    sys.path.insert(0, str(tmp_path))
    try:
        import recover_agent
    finally:
        sys.path.pop(0)
    planner, tools, _ = recover_agent.make()
    assert Executor(planner=planner, tools=tools, trace=runs / "asks.jsonl").run({"steps": 1, "ask": True}).pending
    assert Executor(planner=planner, tools=tools, trace=runs / "done.jsonl").run({"steps": 1}).state == "DONE"

    hold = tmp_path / "hold"  # a live writer: a child process inside its first tool call
    child = subprocess.Popen(
        [sys.executable, "-c", "import recover_agent, harness, sys; p, t, v = recover_agent.make(); "
         "harness.Executor(planner=p, tools=t, trace=sys.argv[1]).run({'steps': 1})", str(runs / "live.jsonl")],
        cwd=tmp_path, env={**os.environ, "HOLD_FILE": str(hold), "PYTHONPATH": str(tmp_path)}, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_for(Path(f"{hold}.inside"), child, "its tool")
        live_before = (runs / "live.jsonl").read_bytes()

        first = cli(tmp_path, "recover", runs, "--agent", "recover_agent:make", "--parallel", "2", "--json")
        assert first.returncode == 0, first.stderr
        rows = {Path(r["path"]).stem: r for r in orjson.loads(first.stdout)}
        assert set(rows) == {"crashed", "unsafe", "crashed-too", "asks", "live"}  # done.jsonl had ended
        assert (rows["crashed"]["action"], rows["crashed"]["state"]) == ("resumed", "DONE")
        assert (rows["crashed-too"]["action"], rows["crashed-too"]["state"]) == ("resumed", "DONE")
        assert (rows["unsafe"]["action"], rows["unsafe"]["state"]) == ("resumed", "PAUSED")
        assert f"harness reconcile {runs / 'unsafe.jsonl'}" in rows["unsafe"]["detail"]
        assert rows["asks"]["action"] == "left" and "--answer JSON" in rows["asks"]["detail"]
        assert (rows["live"]["was"], rows["live"]["action"]) == ("running", "skipped")
        assert (runs / "live.jsonl").read_bytes() == live_before

        before = {p.name: p.read_bytes() for p in runs.iterdir()}
        second = cli(tmp_path, "recover", runs, "--agent", "recover_agent:make")
        assert second.returncode == 0, second.stderr
        assert "resumed" not in second.stdout and "2 left, 1 skipped" in second.stdout
        assert f"harness reconcile {runs / 'unsafe.jsonl'}" in second.stdout
        assert {p.name: p.read_bytes() for p in runs.iterdir()} == before  # nothing written the second time
        os.kill(child.pid, signal.SIGKILL)  # the live writer dies inside its tool: now its run is stopped
    finally:
        child.kill()
        child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL and replay(runs / "live.jsonl").state == "ACT"

    harness.reconcile(runs / "unsafe.jsonl", happened=True, result={"paid": 1}, evidence="bank statement")
    third = orjson.loads(cli(tmp_path, "recover", runs, "--agent", "recover_agent:make", "--json").stdout)
    assert sorted((Path(r["path"]).stem, r["was"], r["action"], r["state"]) for r in third) == [
        ("asks", "paused", "left", "PAUSED"),
        ("live", "interrupted", "resumed", "DONE"),
        ("unsafe", "paused", "resumed", "DONE"),
    ]
    assert replay(runs / "unsafe.jsonl").checkpoints[1].result == {"paid": 1}
    assert replay(runs / "live.jsonl").resumes == 1


def test_recover_of_a_folder_with_nothing_to_do_says_so(tmp_path: Path) -> None:
    (tmp_path / "recover_agent.py").write_text(AGENT)
    runs = tmp_path / "runs"
    runs.mkdir()
    out = cli(tmp_path, "recover", runs, "--agent", "recover_agent:make")
    assert (out.returncode, out.stdout) == (0, "nothing to recover: every run has ended\n")
    missing = cli(tmp_path, "recover", tmp_path / "nope", "--agent", "recover_agent:make")
    assert missing.returncode == 2 and "no such runs folder" in missing.stderr


def test_harness_resume_of_a_crashed_run_takes_the_goal_from_the_trace(tmp_path: Path) -> None:
    (tmp_path / "recover_agent.py").write_text(AGENT)
    (tmp_path / "runs").mkdir()
    trace = tmp_path / "runs" / "crashed.jsonl"
    stopped(trace, {"steps": 3}, at=3)
    failing = cli(tmp_path, "resume", trace, "--agent", "recover_agent:make", env={"FAIL_TOOL": "1"})
    assert failing.returncode == 1 and not failing.stdout
    assert (
        failing.stderr
        == f"harness resume: the agent raised ValueError: the ledger is down; its crash record is in {trace}\n"
    )
    assert read_records(trace)[-1]["error"] == {"type": "builtins.ValueError", "message": "the ledger is down"}
    out = cli(tmp_path, "resume", trace, "--agent", "recover_agent:make", "--key", "k3y", "--durability", "fsync")
    assert out.returncode == 0 and out.stdout == f"{trace}: DONE, 3 checkpoints\n", out.stderr
    assert harness.verify(trace, seal_key="k3y").ok  # sealed with the key given to the resume
    typo = cli(tmp_path, "resume", tmp_path / "runs" / "crashd.jsonl", "--agent", "recover_agent:make")
    assert typo.returncode == 2 and "no such trace" in typo.stderr and not (tmp_path / "runs" / "crashd.jsonl").exists()


def test_recover_reports_a_run_it_cannot_resume_and_goes_on_with_the_others(tmp_path: Path) -> None:
    (tmp_path / "recover_agent.py").write_text(AGENT)
    runs = tmp_path / "runs"
    runs.mkdir()
    stopped(runs / "ours.jsonl", {"steps": 2}, at=2)
    with pytest.raises(RuntimeError):  # another agent's run: its tools are not this agent's
        Executor(
            planner=fixed_plan(steps(2, tool="other")), tools={"other": power_cut(1)}, trace=runs / "theirs.jsonl"
        ).run({"steps": 2})
    (runs / "junk.jsonl").write_bytes(b"not a trace\n")
    out = cli(tmp_path, "recover", runs, "--agent", "recover_agent:make", "--json")
    assert out.returncode == 1, out.stderr
    rows = {Path(r["path"]).stem: r for r in orjson.loads(out.stdout)}
    assert (rows["ours"]["action"], rows["ours"]["state"]) == ("resumed", "DONE")
    assert rows["theirs"]["action"] == "error" and "cannot resume with another tools" in rows["theirs"]["detail"]
    assert (rows["junk"]["was"], rows["junk"]["action"]) == ("unreadable", "skipped")


def test_resume_writes_with_the_redaction_rules_the_header_records_and_the_options_it_is_given(tmp_path: Path) -> None:
    """harness.resume() is Executor(resume=True) with the trace's own goal and rules, plus the options given."""
    trace = tmp_path / "r.jsonl"
    dying = [True]

    def verifier(step: Step, result: Any) -> bool:
        if dying[0]:
            raise KeyboardInterrupt  # the process dies while verifying step 0
        return True

    plan = [Step("a", "t", {"ssn": "123-45-6781"}), Step("b", "t", {"ssn": "123-45-6782"})]

    def planner(goal: Any, done: list[Any]) -> Step | None:
        return plan[len(done)] if len(done) < len(plan) else None

    tools = {"t": lambda ssn: 1}
    with pytest.raises(KeyboardInterrupt):
        Executor(planner=planner, tools=tools, verifier=verifier, trace=trace, redact=["ssn"], seal_key="k3y").run("g")
    dying[0] = False
    out = harness.resume(trace, planner=planner, tools=tools, verifier=verifier, seal_key="k3y")
    assert out.state == "DONE" and len(out.checkpoints) == 2
    assert b"123-45" not in trace.read_bytes()  # step b's args, written after the resume, hid the ssn too
    assert harness.verify(trace, seal_key="k3y").ok  # sealed with the key it was given
