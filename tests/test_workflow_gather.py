"""Two agents gathered in one async workflow (tests/pair_agent.py): model crossings of one in flight while the
other's tool step runs. Their records interleave differently in every run; a rerun writes every record where
the recording has it (zero live calls, `.equal`), a fork at one agent's crossing keeps the parent's records
before it, and a run SIGKILLed at any point resumes in a new process to an uncrashed run's result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pair_agent
import pytest
from children import ZYGOTE, kill_at

import harness

TESTS = Path(__file__).resolve().parent
CHILD = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import pair_agent
out = pair_agent.pair.run(trace=sys.argv[1], resume="auto")
print(json.dumps({{"state": out.state, "result": out.result}}))
"""


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("WF_LEDGER", str(tmp_path))
    monkeypatch.delenv("WF_KILL", raising=False)
    yield tmp_path


def records(trace: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in trace.read_bytes().splitlines()]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def interleaved(trace: Path) -> bool:
    """Whether a model crossing was written inside a tool step (between its intent and its result)."""
    inside = False
    for r in records(trace):
        if r["kind"] == "transition":
            inside = r["to"] == "ACT"
        elif r["kind"] == "crossing" and inside:
            return True
    return False


def test_a_rerun_writes_every_record_where_the_recording_has_it_whatever_the_interleaving(ledger: Path) -> None:
    orders, mixed = set(), 0
    for n in range(12):
        trace = ledger / f"run{n}.jsonl"
        pair_agent.seed(n)
        out = pair_agent.pair.run(trace=trace)
        assert out.state == "DONE" and out.result == pair_agent.expected()
        orders.add(tuple(r.get("boundary") or r.get("tool") or r["kind"] for r in records(trace)))
        mixed += interleaved(trace)
        made = (lines(ledger / "model"), lines(ledger / "act"))
        again = harness.rerun(trace, workflow=pair_agent.pair, out=ledger / f"rerun{n}.jsonl")
        assert again.equal and again.live_calls == 0 and again.unused == 0, n
        assert (lines(ledger / "model"), lines(ledger / "act")) == made  # nothing was called
        assert harness.replay(ledger / f"rerun{n}.jsonl").returned == pair_agent.expected()
    assert mixed > 0 and len(orders) > 1  # the runs did interleave, and not the same way each time


def test_a_rerun_of_changed_code_is_a_drift_not_a_live_call(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = ledger / "run.jsonl"
    assert pair_agent.pair.run(trace=trace).state == "DONE"
    made = len(lines(ledger / "model"))

    async def changed(who: str) -> list[str]:  # asks its first question with other words
        said = await harness.allm({"who": who, "turn": 0, "heard": "something else"}, pair_agent.model)
        return [said["text"]]

    monkeypatch.setattr(pair_agent, "agent", changed)
    with pytest.raises(harness.ReplayDrift):
        harness.rerun(trace, workflow=pair_agent.pair)
    assert len(lines(ledger / "model")) == made


def test_a_fork_at_one_agents_crossing_keeps_the_parents_records_before_it(ledger: Path) -> None:
    trace = ledger / "run.jsonl"
    pair_agent.seed(3)
    assert pair_agent.pair.run(trace=trace).state == "DONE"
    parent = records(trace)
    at = next(c.seq for c in harness.replay(trace).crossings if c.kind == "llm" and c.request["who"] == "b"
              and c.request["turn"] == 1)  # fmt: skip
    acts = len(lines(ledger / "act"))
    child = ledger / "fork.jsonl"
    r = harness.fork(trace, at=at, value={"text": "b was told otherwise"}, workflow=pair_agent.pair, out=child)
    assert r.state == "DONE" and r.branch == at and r.live_calls >= 2  # b's tool step and last question, at least
    forked = records(child)
    own = ("ts", "crc", "reused", "key")  # (a key names its run)
    assert [{k: v for k, v in x.items() if k not in own} for x in forked[1 : at - 1]] == [
        {k: v for k, v in x.items() if k not in own} for x in parent[1 : at - 1]
    ]  # the parent's records before the branch, each marked reused
    assert all(x.get("reused") for x in forked[1 : at - 1]) and forked[at - 1].get("mutated")
    assert harness.replay(child).returned == pair_agent.expected(b_1="b was told otherwise")
    after = [x for x in parent if x["kind"] == "transition" and x["from"] == "ACT" and x["seq"] > at]
    assert len(lines(ledger / "act")) == acts + len(after)  # the calls that returned after the branch: live
    again = harness.rerun(child, workflow=pair_agent.pair)  # the fork's own trace reruns as any other
    assert again.equal and again.live_calls == 0


POINTS = [
    "in-model-a-0", "in-act-a-0", "acted-a-0", "acted-b-0", "in-model-b-1",
    "in-act-a-1", "in-act-b-1", "acted-b-1", "in-model-a-2", "in-model-b-2",
]  # fmt: skip


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_anywhere_then_resume_in_a_new_process(tmp_path: Path, point: str) -> None:
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    env = {**os.environ, "WF_LEDGER": str(tmp_path)}
    child = ZYGOTE.Popen(
        [sys.executable, "-c", CHILD, str(trace)],
        env={**env, "WF_KILL": point, "WF_MARK": str(mark)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    kill_at(mark, child, point)
    assert child.returncode == -9
    recorded = [f"{c.request['who']}-{c.request['turn']}" for c in harness.replay(trace).crossings if c.kind == "llm"]
    made = lines(tmp_path / "model")

    done = ZYGOTE.run([sys.executable, "-c", CHILD, str(trace)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"state": "DONE", "result": pair_agent.expected()}
    again = lines(tmp_path / "model")[len(made) :]
    assert not set(again) & set(recorded)  # no recorded model call was made again
    assert sorted([*recorded, *again]) == sorted(f"{w}-{t}" for w in "ab" for t in range(3))
    rep = harness.replay(trace)
    keys = [r["key"] for r in records(trace) if r["kind"] == "transition" and r["to"] == "ACT" and "key" in r]
    assert sorted(lines(tmp_path / "act")) == sorted(set(keys)) and len(set(keys)) == 4  # one effect per step
    assert rep.state == "DONE" and rep.resumes == 1
    r = harness.rerun(trace, workflow=pair_agent.pair)  # the two processes' history, reproduced
    assert r.equal and r.live_calls == 0
