"""rerun(): the agent's code runs again, every boundary comes from the recording, drift is caught."""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import harness
from harness import Executor, HarnessError, ReplayDrift, ReplayViolation, RetryPolicy, Step, Tool
from harness.testing import counter, flaky, power_cut, read_records

GOAL = {"task": "three steps"}

# An agent whose planner reads the clock, draws randomness and asks a model through harness.
# Used in-process, as a script killed by SIGKILL, and by the CLI through --agent.
AGENT = """
import os, signal, sys
import harness
from harness import Step

def make_agent(model=None, kill_at=None, steps=3, bump=0):
    def planner(goal, done):
        n = len(done)
        if n >= steps:
            return None
        harness.now()
        said = harness.llm({"prompt": f"step {n}", "seed": harness.random()}, model or live_model)
        if kill_at == n:
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies with crossings after its last transition
        return Step(f"s{n}", "work", {"n": n + (bump if n == 1 else 0), "said": said})

    def work(n, said):
        return {"n": n, "chars": len(said)}

    return planner, {"work": work}, None

def make_drifting_agent():
    return make_agent(bump=100)

def live_model(request):
    return f"answer {request['seed']:.6f}"

if __name__ == "__main__":
    planner, tools, verifier = make_agent(kill_at=int(sys.argv[2]) if len(sys.argv) > 2 else None)
    harness.Executor(planner=planner, tools=tools, verifier=verifier, trace=sys.argv[1]).run({"task": "three steps"})
"""


def refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("called live during a rerun")


@pytest.fixture
def agent(tmp_path: Path) -> ModuleType:
    path = tmp_path / "rerun_agent.py"
    path.write_text(AGENT)
    spec = importlib.util.spec_from_file_location(f"rerun_agent_{abs(hash(tmp_path))}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(agent: ModuleType, trace: Path, **options: Any) -> harness.Outcome:
    planner, tools, verifier = agent.make_agent(**options)
    return Executor(planner=planner, tools=tools, verifier=verifier, trace=trace).run(GOAL)


def offline(agent: ModuleType, **options: Any) -> dict[str, Any]:
    """The agent with a model and tools that raise if called."""
    planner, tools, verifier = agent.make_agent(model=refuse, **options)
    return {"planner": planner, "tools": {name: refuse for name in tools}, "verifier": verifier}


# --- a faithful rerun ---------------------------------------------------------------------


def test_a_faithful_rerun_makes_zero_live_calls_and_equals_the_recording(agent: ModuleType, trace: Path) -> None:
    record(agent, trace)
    out = trace.parent / "again.jsonl"
    r = harness.rerun(trace, out=out, **offline(agent))
    assert (r.equal, r.live_calls, r.unused, r.state) == (True, 0, 0, "DONE")
    assert harness.normalize(out) == harness.normalize(trace)
    assert r.trace == str(out) and list(r.records) == read_records(out)
    again, recorded = harness.replay(out), harness.replay(trace)
    assert again.header["parent"] == recorded.run_id and again.run_id == r.run_id != recorded.run_id
    assert [c.response for c in again.crossings] == [c.response for c in recorded.crossings]
    assert [rec["seq"] for rec in r.records] == list(range(1, recorded.records + 1))


def test_two_live_runs_differ_but_a_rerun_does_not(agent: ModuleType, tmp_path: Path) -> None:
    record(agent, tmp_path / "a.jsonl")
    record(agent, tmp_path / "b.jsonl")
    assert not harness.diff(tmp_path / "a.jsonl", tmp_path / "b.jsonl").equal  # the seeds differ
    assert harness.rerun(tmp_path / "a.jsonl", **offline(agent)).equal


def test_a_rerun_without_out_leaves_no_file(agent: ModuleType, trace: Path) -> None:
    record(agent, trace)
    before = sorted(os.listdir(trace.parent))
    r = harness.rerun(trace, **offline(agent))
    assert r.equal and r.trace is None and r.records
    assert sorted(os.listdir(trace.parent)) == before


def test_a_recording_is_never_written_to(agent: ModuleType, trace: Path) -> None:
    record(agent, trace)
    data = trace.read_bytes()
    harness.rerun(trace, out=trace.parent / "x.jsonl", **offline(agent))
    with pytest.raises(ReplayDrift):
        harness.rerun(trace, **offline(agent, bump=1))
    assert trace.read_bytes() == data


# --- drift: non-determinism that did not go through harness, and changed agents -------------


def test_reading_the_clock_directly_is_caught(trace: Path) -> None:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        return None if done else Step("stamp", "work", {"at": time.time_ns()})

    Executor(planner=planner, tools={"work": lambda at: at}, trace=trace).run("g")
    recorded = harness.replay(trace).crossings[0]
    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, planner=planner, tools={"work": refuse})
    assert e.value.seq == e.value.line == recorded.seq
    was, now = e.value.fields["args.at"]
    assert was == recorded.request["args"]["at"] and now != was
    assert f"seq {recorded.seq}" in str(e.value) and str(was) in str(e.value) and str(now) in str(e.value)


def test_randomness_drawn_directly_is_caught(trace: Path) -> None:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        return Step("ask", "work", {"said": harness.llm({"seed": random.random()}, lambda r: "ok")})

    Executor(planner=planner, tools={"work": lambda said: said}, trace=trace).run("g")
    llm = harness.replay(trace).crossings[0]
    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, planner=planner, tools={"work": refuse})
    assert e.value.seq == llm.seq and list(e.value.fields) == ["seed"]
    assert repr(llm.request["seed"]) in str(e.value)


def test_a_clock_read_that_stopped_going_through_harness_is_caught(agent: ModuleType, trace: Path) -> None:
    record(agent, trace)

    def planner(goal: Any, done: list[Any]) -> Step | None:  # the agent, but reading time.time()
        if len(done) >= 3:
            return None
        time.time()
        said = harness.llm({"prompt": f"step {len(done)}", "seed": harness.random()}, refuse)
        return Step(f"s{len(done)}", "work", {"n": len(done), "said": said})

    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, planner=planner, tools={"work": refuse})
    first = harness.replay(trace).crossings[0]  # the random and llm crossings are served by what they are; the
    assert (first.kind, e.value.seq, e.value.fields) == ("now", first.seq, {"request": (None, None)})  # clock's
    assert "moved on without making the now crossing" in str(e.value)  # is missing when the step moves on


def test_a_planner_passing_other_args_is_caught(agent: ModuleType, trace: Path) -> None:
    record(agent, trace)
    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, **offline(agent, bump=100))
    second_tool = [c for c in harness.replay(trace).crossings if c.kind == "tool"][1]
    assert e.value.seq == second_tool.seq and e.value.fields == {"args.n": (1, 101)}
    assert f"seq {second_tool.seq}" in str(e.value) and "args.n: recorded 1, now 101" in str(e.value)


def test_a_planner_calling_an_extra_tool_is_caught(trace: Path) -> None:
    plan = [Step("a", "search", {"q": "x"}), Step("b", "fetch", {"url": "u"})]
    tools = {"search": lambda q: [q], "fetch": lambda url: url}
    Executor(planner=lambda g, d: plan[len(d)] if len(d) < 2 else None, tools=tools, trace=trace).run("g")
    extra = [plan[0], Step("a2", "search", {"q": "y"}), plan[1]]
    offline_tools = {"search": refuse, "fetch": refuse}
    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, planner=lambda g, d: extra[len(d)] if len(d) < 3 else None, tools=offline_tools)
    fetch = harness.replay(trace).crossings[1]
    assert e.value.seq == fetch.seq
    assert e.value.fields == {"tool": ("fetch", "search"), "args.url": ("u", None), "args.q": (None, "y")}
    # one more call after the recording ends: a violation, at the seq it would have taken
    more = [*plan, Step("c", "search", {"q": "z"})]
    with pytest.raises(ReplayViolation) as v:
        harness.rerun(trace, planner=lambda g, d: more[len(d)] if len(d) < 3 else None, tools=offline_tools)
    n = harness.replay(trace).records - 1  # PLAN -> DONE, before the seal: the rerun wrote the extra intent there
    assert v.value.seq == v.value.line == n + 1
    assert f"seq {v.value.seq}" in str(v.value) and "'z'" in str(v.value)


def test_drift_swallowed_by_agent_code_still_fails_the_rerun(trace: Path) -> None:
    def make(seed: float) -> Any:
        def planner(goal: Any, done: list[Any]) -> Step | None:
            if done:
                return None
            try:
                said = harness.llm({"seed": seed}, lambda r: "live")
            except Exception:  # a catch-all in agent code must not hide the drift
                said = "fallback"
            return Step("s", "work", {"said": said})

        return planner

    Executor(planner=make(0.25), tools={"work": lambda said: said}, trace=trace).run("g")
    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, planner=make(0.5), tools={"work": refuse})
    assert e.value.fields == {"seed": (0.25, 0.5)}


def test_recorded_crossings_left_unused_make_the_rerun_unequal(agent: ModuleType, trace: Path) -> None:
    record(agent, trace)
    r = harness.rerun(trace, **offline(agent, steps=2))
    assert not r.equal and r.unused == 4 and r.live_calls == 0  # now, random, llm and the tool of step 2


def test_a_changed_verifier_makes_the_rerun_unequal_without_drift(agent: ModuleType, trace: Path) -> None:
    record(agent, trace)
    parts = offline(agent)
    parts["verifier"] = lambda step, result: step.args["n"] != 2  # rejects the last step's result
    r = harness.rerun(trace, retry=RetryPolicy(1), **parts)  # no retry: a retry would ask for crossings not recorded
    assert not r.equal and r.live_calls == 0 and r.unused == 0 and r.state == "FAILED"
    d = harness.diff(trace, list(r.records))
    assert d.first is not None and (d.first.op, d.first.kind, d.first.step) == ("removed", "checkpoint", 2)
    assert [(m.from_, m.to) for m in d.inserted] == [("VERIFY", "FAILED")]


# --- retries and failures: the retry policy is read from the recording ------------------------


@pytest.mark.parametrize(("fails", "attempts", "state"), [(3, 5, "DONE"), (1, 1, "FAILED"), (4, 2, "FAILED")])
def test_retries_and_failed_runs_rerun_equal(trace: Path, fails: int, attempts: int, state: str) -> None:
    plan = [Step(f"s{i}", "work", {"i": i}) for i in range(2)]

    def planner(g: Any, d: list[Any]) -> Step | None:
        return plan[len(d)] if len(d) < 2 else None

    ex = Executor(planner=planner, tools={"work": flaky(fails)}, trace=trace, retry=RetryPolicy(attempts))
    assert ex.run("g").state == state
    r = harness.rerun(trace, planner=planner, tools={"work": refuse})
    assert r.equal and r.state == state and r.live_calls == 0


# --- resume seams: a recording made by more than one process ------------------------------------


def test_a_crash_then_resume_reruns_equal(trace: Path) -> None:
    plan = [Step(f"s{i}", "work", {"i": i}) for i in range(3)]

    def planner(g: Any, d: list[Any]) -> Step | None:
        return plan[len(d)] if len(d) < 3 else None

    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools={"work": power_cut(2)}, trace=trace).run("g")
    assert Executor(planner=planner, tools={"work": counter()}, trace=trace, resume=True).run("g").state == "DONE"
    assert harness.replay(trace).resumes == 1
    r = harness.rerun(trace, planner=planner, tools={"work": refuse})
    assert r.equal and r.live_calls == 0 and [x["kind"] for x in r.records].count("resume") == 1


def test_an_interrupted_recording_reruns_up_to_where_it_stopped(trace: Path) -> None:
    plan = [Step(f"s{i}", "work", {"i": i}) for i in range(3)]

    def planner(g: Any, d: list[Any]) -> Step | None:
        return plan[len(d)] if len(d) < 3 else None

    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools={"work": power_cut(3)}, trace=trace).run("g")
    r = harness.rerun(trace, planner=planner, tools={"work": refuse})
    assert r.equal and r.state == "ACT" and len(r.records) == harness.replay(trace).records


def test_an_exception_that_crashed_the_run_is_raised_again_then_the_resume_is_replayed(trace: Path) -> None:
    answers = iter([TimeoutError("model down"), "up again"])

    def model(request: Any) -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def make(client: Any) -> Any:
        def planner(goal: Any, done: list[Any]) -> Step | None:
            return None if done else Step("s", "work", {"said": harness.llm({"p": "hi"}, client)})

        return planner

    with pytest.raises(TimeoutError):  # not caught by the agent: the process would have died here
        Executor(planner=make(model), tools={"work": lambda said: said}, trace=trace).run("g")
    Executor(planner=make(model), tools={"work": lambda said: said}, trace=trace, resume=True).run("g")
    kinds = [(r["kind"], r.get("error", {}).get("type")) for r in read_records(trace)]
    assert ("crossing", "builtins.TimeoutError") in kinds and ("resume", None) in kinds
    r = harness.rerun(trace, planner=make(refuse), tools={"work": refuse})
    assert r.equal and r.live_calls == 0


def test_a_sigkill_after_crossings_then_resume_reruns_equal(agent: ModuleType, trace: Path) -> None:
    script = Path(agent.__file__ or "")
    proc = subprocess.run([sys.executable, str(script), str(trace), "1"], capture_output=True, timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()
    pending = harness.replay(trace).resumable_crossings()
    assert [c.kind for c in pending] == ["now", "random", "llm"]
    planner, tools, _ = agent.make_agent()
    assert Executor(planner=planner, tools=tools, trace=trace, resume=True).run(GOAL).state == "DONE"
    crossings = [c for c in harness.replay(trace).crossings if c.kind != "tool"]
    assert len(crossings) == 9  # the resume served those three again rather than calling anew
    r = harness.rerun(trace, **offline(agent))
    assert r.equal and r.live_calls == 0


@pytest.mark.parametrize("happened", [True, False])
def test_a_paused_reconciled_and_resumed_run_reruns_equal(trace: Path, happened: bool) -> None:
    plan = [Step(f"s{i}", "pay", {"i": i}) for i in range(3)]

    def planner(g: Any, d: list[Any]) -> Step | None:
        return plan[len(d)] if len(d) < 3 else None

    unsafe = {"pay": Tool(refuse, idempotent=False)}

    def resume() -> harness.Outcome:
        tools = {"pay": Tool(counter(), idempotent=False)}
        return Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g")

    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools={"pay": Tool(power_cut(2), idempotent=False)}, trace=trace).run("g")
    assert resume().state == "PAUSED"
    r = harness.rerun(trace, planner=planner, tools=unsafe)
    assert r.equal and r.state == "PAUSED"
    harness.reconcile(trace, happened=happened, result={"i": 1} if happened else None, evidence="bank statement")
    r = harness.rerun(trace, planner=planner, tools=unsafe)
    assert r.equal and r.state == "PAUSED"
    assert resume().state == "DONE"
    r = harness.rerun(trace, planner=planner, tools=unsafe)
    assert r.equal and r.state == "DONE" and r.live_calls == 0
    assert [x["kind"] for x in r.records].count("resume") == 2


# --- bad input ----------------------------------------------------------------------------------


def test_bad_input_gets_a_clear_error_and_leaves_files_alone(agent: ModuleType, trace: Path, tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="no such file"):
        harness.rerun(tmp_path / "missing.jsonl", **offline(agent))
    record(agent, trace)
    taken = tmp_path / "taken.jsonl"
    taken.write_text("mine\n")
    with pytest.raises(HarnessError, match=f"{taken} already exists"):
        harness.rerun(trace, out=taken, **offline(agent))
    assert taken.read_text() == "mine\n"
    with harness.Recorder(tmp_path / "rec.jsonl", entrypoint="loop.py") as rec:
        rec.log("input", {"x": 1})
    with pytest.raises(HarnessError, match="Recorder"):
        harness.rerun(tmp_path / "rec.jsonl", **offline(agent))
    (tmp_path / "junk.jsonl").write_text('{"not": "a trace"}\n')
    with pytest.raises(harness.TraceCorruption):
        harness.rerun(tmp_path / "junk.jsonl", **offline(agent))


# --- the command line, as real processes ----------------------------------------------------------


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("harness")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "harness.cli"]
    return subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_cli_rerun_with_an_agent_factory(agent: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "my_agent.py").write_text(AGENT)
    subprocess.run([sys.executable, "my_agent.py", "run.jsonl"], cwd=tmp_path, check=True, timeout=60)
    ok = cli("rerun", "run.jsonl", "--agent", "my_agent:make_agent", "--out", "again.jsonl", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "equal" in ok.stdout and "0 live calls" in ok.stdout
    assert harness.normalize(tmp_path / "again.jsonl") == harness.normalize(tmp_path / "run.jsonl")
    drift = cli("rerun", "run.jsonl", "--agent", "my_agent:make_drifting_agent", cwd=tmp_path)
    tool = [c for c in harness.replay(tmp_path / "run.jsonl").crossings if c.kind == "tool"][1]
    assert drift.returncode == 1 and f"run.jsonl:{tool.seq}: ReplayDrift" in drift.stderr
    assert "args.n: recorded 1, now 101" in drift.stderr
    bad_specs = [
        ("my_agent", "module:factory"),
        ("nowhere:make", "cannot import nowhere"),
        ("my_agent:nope", "no callable nope"),
    ]
    for spec, why in bad_specs:
        bad = cli("rerun", "run.jsonl", "--agent", spec, cwd=tmp_path)
        assert bad.returncode == 2 and why in bad.stderr and "Traceback" not in bad.stderr
        assert bad.stderr.count("\n") == 1


def test_cli_rerun_reports_an_unequal_rerun_with_the_first_difference(tmp_path: Path) -> None:
    (tmp_path / "short_agent.py").write_text(AGENT + "\ndef make_short():\n    return make_agent(steps=2)\n")
    subprocess.run([sys.executable, "short_agent.py", "run.jsonl"], cwd=tmp_path, check=True, timeout=60)
    r = cli("rerun", "run.jsonl", "--agent", "short_agent:make_short", cwd=tmp_path)
    assert r.returncode == 1 and r.stdout.startswith("different:") and "4 recorded crossings unused" in r.stdout
    assert "first difference at recording seq 15: crossing now removed" in r.stdout  # step 2 never planned


ROOT = Path(__file__).resolve().parents[1]


def test_the_research_agent_example_records_reruns_forks_and_diffs(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "research_agent.py"), str(runs)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "a second live run differs" in r.stdout and "rerun: equal=True, live calls=0" in r.stdout
    listed = harness.list_runs(runs)
    assert [x.status for x in listed] == ["done"] * 3 and listed[2].parent == listed[0].id
    branch = listed[2].branch
    assert f"first difference at seq {branch}: transition ACT -> VERIFY" in r.stdout
    again = cli("rerun", listed[0].path, "--agent", "examples.research_agent:make_agent", cwd=ROOT)
    assert again.returncode == 0 and again.stdout.startswith("equal:") and "0 live calls" in again.stdout


def test_a_crossing_reached_at_another_position_is_drift(agent: ModuleType, trace: Path) -> None:
    record(agent, trace)
    parts = offline(agent)
    checked: list[int] = []

    def verifier(step: Step, result: Any) -> bool:  # reads the clock on step 0, which the recording did not
        checked.append(step.args["n"])
        if len(checked) == 1:
            harness.now()
        return True

    parts["verifier"] = verifier
    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, **parts)
    now = [c for c in harness.replay(trace).crossings if c.kind == "now"][1]  # step 1's clock read, same request
    # recorded: step 0's checkpoint, then step 1's clock read; now: the clock read where the checkpoint was
    assert e.value.seq == now.seq and e.value.fields == {"seq": (now.seq, now.seq - 1)}
    assert f"seq {now.seq}: the re-execution reached this now crossing at seq {now.seq - 1}" in str(e.value)


def test_a_verifier_that_changes_the_result_changes_no_checkpoint_in_a_run_or_its_rerun(tmp_path: Path) -> None:
    """The checkpoint holds the trace's own copy of a result; the verifier is shown the tool's object."""
    trace = tmp_path / "r.jsonl"

    def verifier(step: Step, result: Any) -> bool:
        result["seen"] = True  # a verifier that writes on what it is shown
        return True

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if len(done) == 2:
            return None
        return Step(f"s{len(done)}", "t", {"saw": bool(done) and "seen" in done[-1].result})

    tools = {"t": lambda saw: {"v": 1}}
    out = Executor(planner=planner, tools=tools, verifier=verifier, trace=trace).run("g")
    assert [c.result for c in out.checkpoints] == [{"v": 1}, {"v": 1}]
    again = harness.rerun(trace, planner=planner, tools=tools, verifier=verifier)
    assert again.state == "DONE" and again.equal


def _three(goal: Any, progress: Any) -> Step | None:
    return None if len(progress) >= 3 else Step(f"s{len(progress)}", "work", {"i": len(progress)})


def _padded(i: int) -> dict[str, Any]:
    return {"i": i, "pad": "x" * 10}


def test_rerun_and_fork_of_a_resumed_trace_with_a_torn_tail(tmp_path: Path) -> None:
    from children import kill_in_call

    trace = tmp_path / "t.jsonl"
    kill_in_call(trace, tmp_path / "m", steps=3, at=1, pad=10)
    with open(trace, "ab") as f:
        f.write(b'{"seq":99,"kind":"transi')  # a torn tail
    out = Executor(planner=_three, tools={"work": _padded}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and os.path.exists(f"{trace}.torn-1")
    other = tmp_path / "elsewhere"
    other.mkdir()
    done = harness.rerun(trace, planner=_three, tools={"work": _padded}, out=other / "r.jsonl")
    assert done.equal and done.live_calls == 0, done
    harness.replay(other / "r.jsonl")
    at = harness.replay(trace).crossings[0].seq
    forked = harness.fork(
        trace, at=at, value={"i": 7, "pad": ""}, planner=_three, tools={"work": _padded}, out=other / "f.jsonl"
    )
    harness.replay(forked.trace)


def test_rerun_of_a_killed_trace_with_a_torn_tail(tmp_path: Path) -> None:
    from children import kill_in_call

    trace = tmp_path / "t.jsonl"
    kill_in_call(trace, tmp_path / "m", steps=3, at=1, pad=10)
    with open(trace, "ab") as f:
        f.write(b'{"seq":99,"kind":"transi')  # a torn tail
    done = harness.rerun(trace, planner=_three, tools={"work": _padded}, out=tmp_path / "r.jsonl")
    assert done.equal and done.live_calls == 0 and done.unused == 0, done
    assert harness.replay(tmp_path / "r.jsonl").state == "ACT"


def test_rerun_and_fork_of_answered_questions(tmp_path: Path) -> None:
    def planner(goal: Any, progress: Any) -> Step | None:
        return None if progress else Step("ask", "work", {"i": harness.interrupt("how many?")})

    def asking(i: int) -> dict[str, Any]:
        return {"i": i, "ok": harness.interrupt("sure?")}

    trace = tmp_path / "t.jsonl"
    ex = Executor(planner=planner, tools={"work": asking}, trace=trace, resume="auto")
    assert ex.run("g").state == "PAUSED"
    assert ex.run("g", answer=3).state == "PAUSED"
    assert ex.run("g", answer="yes").state == "DONE"
    done = harness.rerun(trace, planner=planner, tools={"work": asking}, out=tmp_path / "r.jsonl")
    assert done.equal and done.live_calls == 0, done
    at = next(c.seq for c in harness.replay(trace).crossings if c.kind == "interrupt")
    forked = harness.fork(trace, at=at, value=4, planner=planner, tools={"work": asking}, out=tmp_path / "f.jsonl")
    assert harness.replay(forked.trace).state in ("DONE", "PAUSED")
