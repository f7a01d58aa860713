"""A workflow that spawns two agents (model calls over a real HTTP server, a message between them) and makes
an idempotent tool call, SIGKILLed at eight points (before the spawns, inside and after an agent's model call,
between the agents' exits and their joins, after the joins, inside and after the tool call), each resumed in a
new process: no recorded model call is made again, the tool sees one key, the result is an uncrashed run's,
replay() accepts the file, and rerun (with the model server stopped) and fork re-execute it. A resume whose
agent's code changed is a ReplayDrift that leaves the file byte for byte as it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_server import ChatServer
from children import ZYGOTE, kill_at

import harness

TESTS = Path(__file__).resolve().parent
CHILD = f"""
import json, os, sys
sys.path.insert(0, {str(TESTS)!r})
import harness, workflow_agent
if os.environ.get("WF_CHANGED"):  # agent b's code changed since the run was recorded
    real = workflow_agent.ask
    workflow_agent.ask = lambda prompt, where: real(prompt.replace("b on", "b, briefly, on"), where)
out = workflow_agent.team.run("owls", trace=sys.argv[1], resume="auto")
print(json.dumps({{"state": out.state, "result": out.result}}))
"""
POINTS = [
    "before-spawn", "in-llm-a-1", "after-llm-a-1", "in-llm-b-2", "exited", "after-join", "in-reserve",
    "after-reserve",
]  # fmt: skip
EXPECTED = {
    "a": ["echo: a on owls", "echo: a again, having heard nothing"],
    "b": ["echo: b on owls", "echo: b again, having heard echo: a on owls"],
    "held": "echo: b again, having heard echo: a on owls",
}


@pytest.fixture
def server() -> Iterator[ChatServer]:
    s = ChatServer()
    try:
        yield s
    finally:
        s.stop()


def env(server: ChatServer, ledger: Path, **more: str) -> dict[str, str]:
    return {**os.environ, "WF_MODEL": server.url, "WF_LEDGER": str(ledger), **more}


def run(trace: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run (or resume) the workflow in a new process."""
    return ZYGOTE.run(
        [sys.executable, "-c", CHILD, str(trace)], env=environ, capture_output=True, text=True, timeout=120, check=False
    )


def outcome(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def prompts(server: ChatServer) -> Counter[str]:
    return Counter(seen["body"]["messages"][-1]["content"] for seen in server.seen)


def recorded(trace: Path) -> list[str]:
    """The prompts of the model calls the trace holds."""
    out = []
    for line in trace.read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "crossing" and rec["boundary"] == "llm":
            out.append(rec["request"]["messages"][-1]["content"])
    return out


def killed(tmp_path: Path, server: ChatServer, point: str) -> Path:
    """The trace of a run SIGKILLed at point."""
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = ZYGOTE.Popen(
        [sys.executable, "-c", CHILD, str(trace)],
        env=env(server, tmp_path, WF_KILL=point, WF_MARK=str(mark)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    kill_at(mark, child, point)
    assert child.returncode == -9
    return trace


def test_an_uncrashed_run_records_its_agents(tmp_path: Path, server: ChatServer) -> None:
    trace = tmp_path / "run.jsonl"
    assert outcome(run(trace, env(server, tmp_path))) == {"state": "DONE", "result": EXPECTED}
    rep = harness.replay(trace)
    assert rep.sealed and rep.returned == EXPECTED
    assert {json.loads(line).get("agent", "main") for line in trace.read_text().splitlines()} == {"main", "a", "b"}
    assert sum(prompts(server).values()) == 4
    assert outcome(run(trace, env(server, tmp_path))) == {"state": "DONE", "result": EXPECTED}  # finished: nothing
    assert sum(prompts(server).values()) == 4


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_then_resume_in_a_new_process(tmp_path: Path, server: ChatServer, point: str) -> None:
    trace = killed(tmp_path, server, point)
    before = recorded(trace)
    out = outcome(run(trace, env(server, tmp_path)))
    assert out == {"state": "DONE", "result": EXPECTED}

    asked = prompts(server)
    assert all(asked[p] == 1 for p in before)  # no recorded model call was made again
    assert all(n <= 2 for n in asked.values()) and set(asked) == {p for p in asked if "owls" in p or "heard" in p}
    rep = harness.replay(trace)  # the resumed trace passes every rule
    assert rep.state == "DONE" and rep.sealed and rep.returned == EXPECTED
    assert rep.resumes == 1
    (key,) = (tmp_path / "reserve").read_text().split()  # the idempotent tool saw one key
    assert key == f"{rep.run_id}-0-1"
    if before:  # a run killed before it spawned has no agents' records from its first process
        assert sorted(recorded(trace)[: len(before)]) == sorted(before)

    server.stop()  # rerun and fork with the model server down: nothing can be called live
    again = harness.rerun(trace, workflow=_team())
    assert again.equal and again.live_calls == 0 and again.live_calls_by_agent == {}


def test_a_resumed_run_forks_at_an_agents_model_call(tmp_path: Path, server: ChatServer) -> None:
    trace = killed(tmp_path, server, "in-llm-b-2")
    outcome(run(trace, env(server, tmp_path)))
    first_of_a = next(
        json.loads(line)["seq"]
        for line in trace.read_text().splitlines()
        if '"agent":"a"' in line and '"boundary":"llm"' in line
    )
    os.environ["WF_MODEL"], os.environ["WF_LEDGER"] = server.url, str(tmp_path)  # the fork calls live after its branch
    try:
        child = harness.fork(trace, at=first_of_a, value="a hoot", workflow=_team(), out=tmp_path / "fork.jsonl")
    finally:
        del os.environ["WF_MODEL"], os.environ["WF_LEDGER"]
    rep = harness.replay(tmp_path / "fork.jsonl")
    assert child.state == "DONE" and rep.returned["a"][0] == "a hoot"
    assert rep.returned["b"] == ["echo: b on owls", "echo: b again, having heard a hoot"]


@pytest.mark.parametrize("point", ["in-llm-b-2", "exited", "after-join"])
def test_a_resume_whose_agent_changed_drifts_and_writes_nothing(tmp_path: Path, server: ChatServer, point: str) -> None:
    trace = killed(tmp_path, server, point)
    before, asked = trace.read_bytes(), sum(prompts(server).values())
    done = run(trace, env(server, tmp_path, WF_CHANGED="1"))
    assert done.returncode != 0 and "ReplayDrift" in done.stderr and "(agent b)" in done.stderr, done.stderr
    assert "nothing was written" in done.stderr
    assert trace.read_bytes() == before  # byte for byte
    assert sum(prompts(server).values()) == asked  # and nothing called live
    assert outcome(run(trace, env(server, tmp_path))) == {"state": "DONE", "result": EXPECTED}  # the old code goes on


def _team() -> Any:
    sys.path.insert(0, str(TESTS))
    import workflow_agent

    return workflow_agent.team


# --- in this process: a crash after every record, threads and tasks ---------------------------------------

LIVE: list[Any] = []


def answer(request: dict[str, Any]) -> str:
    LIVE.append(request["q"])
    return "re: " + request["q"]


def scout(name: str) -> list[str]:
    first = harness.llm({"q": name}, answer)
    if name == "a":
        harness.send("b", first)
        heard = "-"
    else:
        heard = harness.receive("a").body
    return [first, harness.llm({"q": f"{name} after {heard}"}, answer)]


def note(item: str) -> dict[str, str]:
    LIVE.append("note " + item)
    return {"noted": item}


@harness.workflow
def pair() -> Any:
    a, b = harness.spawn("a", scout, "a"), harness.spawn("b", scout, "b")
    found = harness.join(a, b)
    return [found, harness.call(note, item=found[1][1])]


async def ascout(name: str) -> list[str]:
    async def ask(q: str) -> str:
        await asyncio.sleep(random.uniform(0, 0.003))
        return answer({"q": q})

    first = await harness.allm({"q": name}, lambda r: ask(r["q"]))
    return [first, await harness.allm({"q": name + " again"}, lambda r: ask(r["q"]))]


@harness.workflow
async def apair() -> Any:
    a, b = harness.aspawn("a", ascout, "a"), harness.aspawn("b", ascout, "b")
    found = [await a, await b]
    return [found, await harness.acall(note, item=found[1][1])]


@pytest.mark.parametrize("w", [pair, apair], ids=["threads", "tasks"])
def test_a_crash_after_any_record_resumes_to_the_same_result(tmp_path: Path, w: Any) -> None:
    trace = tmp_path / "run.jsonl"
    LIVE.clear()
    whole = w.run(trace=trace)
    made, lines = list(LIVE), trace.read_bytes().splitlines(keepends=True)
    assert whole.state == "DONE" and len(made) == 5
    for n in range(1, len(lines) - 1):
        cut = tmp_path / f"cut{n}.jsonl"
        cut.write_bytes(b"".join(lines[:n]))
        kept = [json.loads(line) for line in lines[:n]]
        held = {r["request"]["q"] for r in kept if r["kind"] == "crossing" and r["boundary"] == "llm"}
        noted = any(r["kind"] == "transition" and r["to"] == "VERIFY" for r in kept)  # the call's result is held
        LIVE.clear()
        out = w.run(trace=cut, resume=True)
        assert out.state == "DONE" and out.result == whole.result, n
        # only what the trace does not hold is made again: no recorded model call, the tool once in all
        assert sorted(LIVE) == sorted(q for q in made if q not in held and not (noted and q.startswith("note"))), n
        assert harness.replay(cut).state == "DONE"
        assert harness.rerun(cut, workflow=w).equal


def test_a_resume_ends_an_executors_agents_not_a_workflows() -> None:
    from harness.trace.clock import ClockRules

    records = [
        ("spawn", {"child": "a", "vc": {"main": 3}}),
        ("crossing", {"agent": "a", "boundary": "now", "vc": {"a": 1, "main": 3}}),
        ("resume", {"vc": {"main": 4}}),
        ("crossing", {"agent": "a", "boundary": "now", "vc": {"a": 2, "main": 3}}),
        ("exit", {"agent": "a", "status": "ok", "vc": {"a": 3, "main": 3}}),
        ("join", {"child": "a", "vc": {"a": 3, "main": 5}}),
    ]
    for reexecuted in (False, True):
        rules = ClockRules(3, reexecuted=reexecuted)
        said = [rules.see(rec, kind) for kind, rec in records]
        if reexecuted:  # a workflow's agent goes on after the resume: it was re-executed
            assert said == [None] * len(records)
        else:  # an Executor's process died with its agents
            assert said[:3] == [None] * 3 and "not running" in (said[3] or "")


CHANGED: list[bool] = []


async def late(tag: str) -> str:
    await asyncio.sleep(0.3 if CHANGED else 0.01)  # slower this time: main goes live before it drifts
    return await harness.allm({"q": tag + ("-changed" if CHANGED else "")}, lambda r: asyncio.sleep(0, "re"))


@harness.workflow
async def goes_live_first() -> Any:
    a = harness.aspawn("a", late, "a")
    await asyncio.sleep(0.1)
    m = await harness.allm({"q": "m"}, lambda r: asyncio.sleep(0, "re"))
    return [await a, m]


@pytest.mark.parametrize("exited", [True, False], ids=["exit-recorded", "no-exit-yet"])
def test_an_agent_that_drifts_after_main_went_live_leaves_a_trace_replay_accepts(tmp_path: Path, exited: bool) -> None:
    trace = tmp_path / "run.jsonl"
    assert goes_live_first.run(trace=trace).state == "DONE"
    lines = trace.read_bytes().splitlines(keepends=True)
    kinds = [(r["kind"], r.get("agent"), (r.get("request") or {}).get("q")) for r in map(json.loads, lines)]
    # a crash before main's model call was written, or before the agent's exit too
    cut = kinds.index(("crossing", None, "m")) if exited else kinds.index(("crossing", "a", "a")) + 1
    trace.write_bytes(b"".join(lines[:cut]))
    CHANGED.append(True)
    try:
        with pytest.raises(harness.ReplayDrift, match=r"\(agent a\)") as drift:
            goes_live_first.run(trace=trace, resume=True)
    finally:
        CHANGED.clear()
    assert "had gone live before it: the trace keeps what that wrote" in str(drift.value)
    harness.replay(trace)  # main's live records stay; no exit written for the agent that drifted
    out = goes_live_first.run(trace=trace, resume=True)  # and the code that made the run takes it up
    assert (out.state, out.result) == ("DONE", ["re", "re"])
