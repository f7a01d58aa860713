"""A workflow SIGKILLed at eleven points, before, inside and after a model call, an idempotent and an unsafe
call, each resumed in a new process: nothing recorded is done again, and the result is an uncrashed run's.

The model is a real HTTP server in this process (its requests are counted); the tools note each effect in a
ledger file, synced before they return, so the counts hold across processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chat_server import ChatServer
from children import ZYGOTE, kill_at

import harness

TESTS = Path(__file__).resolve().parent
CHILD = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import workflow_agent
out = workflow_agent.order.run("widgets", trace=sys.argv[1], resume="auto")
print(json.dumps({{"state": out.state, "result": out.result, "pending": out.pending}}))
"""
POINTS = [
    "start", "in-llm-1", "after-llm-1",
    "in-reserve", "in-reserve-after-effect", "after-reserve",
    "in-llm-2", "after-llm-2",
    "in-ship", "in-ship-after-effect", "after-ship",
]  # fmt: skip
EXPECTED = {
    "first": "echo: which widgets?",
    "held": "echo: which widgets?",
    "second": "echo: ship echo: which widgets??",
    "sent": {"shipped": "echo: ship echo: which widgets??"},
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


def resumed(trace: Path, environ: dict[str, str]) -> dict[str, Any]:
    """Run (or resume) the workflow in a new process; its outcome."""
    done = ZYGOTE.run(
        [sys.executable, "-c", CHILD, str(trace)], env=environ, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_an_uncrashed_run(tmp_path: Path, server: ChatServer) -> None:
    out = resumed(tmp_path / "run.jsonl", env(server, tmp_path))
    assert out == {"state": "DONE", "result": EXPECTED, "pending": None}
    assert len(server.seen) == 2 and len(lines(tmp_path / "reserve")) == 1 and lines(tmp_path / "ship") != []
    rep = harness.replay(tmp_path / "run.jsonl")
    assert rep.sealed and rep.workflow == "workflow_agent:order" and rep.returned == EXPECTED


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_then_resume_in_a_new_process(tmp_path: Path, server: ChatServer, point: str) -> None:
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = ZYGOTE.Popen(
        [sys.executable, "-c", CHILD, str(trace)],
        env=env(server, tmp_path, WF_KILL=point, WF_MARK=str(mark)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    kill_at(mark, child, point)
    assert child.returncode == -9
    asked = len(server.seen)

    out = resumed(trace, env(server, tmp_path))
    if out["state"] == "PAUSED":  # an unsafe call was in flight: an operator says whether it happened
        assert point in ("in-ship", "in-ship-after-effect")
        assert out["pending"]["tool"] == "ship"
        before = trace.read_bytes()
        assert resumed(trace, env(server, tmp_path))["state"] == "PAUSED"  # resumed again: still waiting
        assert trace.read_bytes() == before  # and nothing written
        happened = (tmp_path / "ship").exists()
        assert happened == (point == "in-ship-after-effect")
        result = {"shipped": out["pending"]["args"]["item"]} if happened else None
        harness.reconcile(trace, happened=happened, result=result, evidence="the ledger")
        out = resumed(trace, env(server, tmp_path))
    assert out == {"state": "DONE", "result": EXPECTED, "pending": None}

    # no recorded model call was made again: only one the kill cut off before it was recorded
    assert len(server.seen) == 2 + (point in ("in-llm-1", "in-llm-2"))
    assert asked <= len(server.seen)
    rep = harness.replay(trace)
    assert rep.state == "DONE" and rep.sealed and rep.returned == EXPECTED
    (key,) = lines(tmp_path / "reserve")  # the idempotent tool saw one key: the one its intent holds
    assert key == f"{rep.run_id}-0-1"
    assert (tmp_path / "ship").read_text().splitlines() == [EXPECTED["second"]]  # shipped once
    assert rep.resumes >= 1
    assert harness.rerun(trace, workflow=_order()).equal


def _order() -> Any:
    sys.path.insert(0, str(TESTS))
    import workflow_agent

    return workflow_agent.order


GATHER = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import workflow_agent
w = getattr(workflow_agent, sys.argv[2])
out = w.run(json.loads(sys.argv[3]), trace=sys.argv[1], resume="auto")
print(json.dumps({{"state": out.state, "result": out.result}}))
"""


def gathered(trace: Path, name: str, topics: list[str], environ: dict[str, str]) -> dict[str, Any]:
    done = ZYGOTE.run(
        [sys.executable, "-c", GATHER, str(trace), name, json.dumps(topics)],
        env=environ, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize("hang", ["b", "c", "summarize answer to a, answer to b, answer to c"])
def test_a_gather_of_three_model_calls_killed_midway_resumes_in_a_new_process(tmp_path: Path, hang: str) -> None:
    """Three calls at once with random latencies; the process is killed while one of them hangs. The
    resumed process makes no recorded call again, and the run reruns with zero live calls."""
    topics, trace, mark = ["a", "b", "c"], tmp_path / "run.jsonl", tmp_path / "mark"
    base = {**os.environ, "WF_LEDGER": str(tmp_path)}
    child = ZYGOTE.Popen(
        [sys.executable, "-c", GATHER, str(trace), "fan_out", json.dumps(topics)],
        env={**base, "WF_HANG": hang, "WF_MARK": str(mark)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    kill_at(mark, child, f"the call of {hang!r}")
    made = lines(tmp_path / "model")  # the calls that answered before the kill
    recorded = [c.request["prompt"] for c in harness.replay(trace).crossings]
    assert hang not in made and set(recorded) <= set(made)

    for _ in range(3):  # resumed in a fresh process; then again, once it ended: nothing more is called
        out = gathered(trace, "fan_out", topics, base)
        assert out["state"] == "DONE"
        assert out["result"] == {
            "answers": ["answer to a", "answer to b", "answer to c"],
            "summary": "answer to summarize answer to a, answer to b, answer to c",
        }
    again = lines(tmp_path / "model")[len(made) :]
    assert not set(again) & set(recorded)  # no recorded call was made again
    assert len(recorded) == {"b": 1, "c": 2}.get(hang, 3)  # written in the order they started: up to the hung one
    assert len(again) == 4 - len(recorded)  # only the calls not recorded are made again
    r = harness.rerun(trace, workflow=_named("fan_out"))
    assert r.equal and r.live_calls == 0


def test_a_nested_gather_resumes_and_reruns_though_its_inner_calls_start_in_another_order(tmp_path: Path) -> None:
    """Re-executed, served calls return at once, so an inner call is asked before its siblings' outer ones:
    the resume matches each to its recording by what it is, and the rerun waits for each one's turn."""
    trace = tmp_path / "run.jsonl"
    base = {**os.environ, "WF_LEDGER": str(tmp_path)}
    first = gathered(trace, "nested", ["x", "y", "z"], base)
    assert first == {"state": "DONE", "result": ["answer to answer to x?", "answer to answer to y?",
                                                 "answer to answer to z?"]}  # fmt: skip
    lines_before = trace.read_bytes().splitlines()
    cut = [i for i, line in enumerate(lines_before) if b'"boundary":"llm"' in line][-2]  # before the last two
    trace.write_bytes(b"\n".join(lines_before[:cut]) + b"\n")
    made = len(lines(tmp_path / "model"))
    assert gathered(trace, "nested", ["x", "y", "z"], base) == first
    assert len(lines(tmp_path / "model")) == made + 2  # only the two calls the cut removed
    r = harness.rerun(trace, workflow=_named("nested"))
    assert r.equal and r.live_calls == 0


def _named(name: str) -> Any:
    sys.path.insert(0, str(TESTS))
    import workflow_agent

    return getattr(workflow_agent, name)
