"""Budgets: a live model call that would pass the run's budget pauses the run before it is made, across resumes.

The model is billed_agent's BilledServer (a real HTTP server on 127.0.0.1 that counts the calls it answered: what
a provider bills), called through harness.http (tests/budget_agent.py). The crash loop is real processes that
SIGKILL themselves right after each live model call, resumed again and again as a supervisor would.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import billed_agent
import budget_agent
import pytest
from billed_agent import ANSWERED_BY, MODEL, BilledServer
from children import ZYGOTE

import harness
from harness.cli import main


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[BilledServer]:
    for s in billed_agent.serving():
        monkeypatch.setenv("BILLED_MODEL", s.url)
        yield s


CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import budget_agent, harness
given = json.loads(sys.argv[2])
budget = harness.Budget(**given["budget"]) if given["budget"] else None
out = budget_agent.loop.run(given["questions"], trace=sys.argv[1], resume="auto", budget=budget)
print(json.dumps({{"state": out.state, "pending": out.pending, "result": out.result}}))
"""


def child(trace: Path, questions: int, budget: dict[str, Any] | None, seen: Path) -> dict[str, Any] | None:
    """loop in a new process that SIGKILLs itself after each live model call: its outcome, None when killed."""
    script = CHILD.format(tests=str(Path(__file__).resolve().parent))
    given = json.dumps({"questions": questions, "budget": budget})
    env = {**os.environ, "BUDGET_SEEN": str(seen)}
    done = ZYGOTE.run([sys.executable, "-c", script, str(trace), given], env=env, capture_output=True, text=True,
                      timeout=120, check=False)  # fmt: skip
    if done.returncode == -9:
        return None
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "seen"}


def test_a_budget_stops_a_crash_loop_before_it_overspends(
    tmp_path: Path, server: BilledServer, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, seen = tmp_path / "run.jsonl", tmp_path / "seen"
    outs = [child(trace, 6, {"model_calls": 3}, seen) for _ in range(4)]  # killed after each live call, resumed
    assert outs[:3] == [None, None, None]  # three processes, each killed right after its one live model call
    paused = outs[3]
    assert paused is not None and paused["state"] == "PAUSED"
    assert server.billed == 3  # the fourth would have passed the budget: it was never made
    budget = paused["pending"]["budget"]
    assert paused["pending"]["reason"] == "budget" and paused["pending"]["state"] == "PLAN"
    assert budget["exceeded"] == "model_calls" and budget["limit"] == {"model_calls": 3}
    assert budget["spent"]["model_calls"] == 3 and budget["call"]["boundary"] == "http"
    rep = harness.replay(trace)
    assert rep.state == "PAUSED" and rep.pending == paused["pending"]
    assert rep.resumes == 3  # the pause was written by the fourth process, after its resume record

    before = files(tmp_path)
    for _ in range(3):  # the supervisor resumes it again with the same budget: refused, nothing written
        again = child(trace, 6, {"model_calls": 3}, seen)
        assert again is not None and again["state"] == "PAUSED" and again["pending"]["budget"] == budget
    assert files(tmp_path) == before and server.billed == 3

    assert main(["replay", str(trace)]) == 0  # says why it paused
    said = capsys.readouterr().out
    assert "paused on its budget: model_calls 3 spent, its next model call would add 1, limit 3" in said
    assert main(["runs", str(tmp_path)]) == 0
    assert "paused on its budget (model_calls)" in capsys.readouterr().out

    # a larger budget goes on (from the CLI), counting what the trace spent: two more calls, then it pauses again
    how = ["--workflow", "budget_agent:loop"]
    assert main(["resume", str(trace), *how, "--budget-model-calls", "5"]) == 3
    assert "paused on its budget" in capsys.readouterr().out and server.billed == 5
    assert main(["resume", str(trace), *how, "--budget-model-calls", "6"]) == 0
    assert server.billed == 6 and harness.replay(trace).state == "DONE"
    (run,) = harness.ledger([trace]).to_json()["runs"]
    assert [(m["how"], m["calls"]) for m in run["models"]] == [("live", 6)]  # each billed call counted once


def test_a_resume_given_no_budget_keeps_to_the_one_the_run_started_with(
    tmp_path: Path, server: BilledServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The header records the budget (FORMAT.md): `harness recover`, which gives none, and a supervisor that
    resumes with none cannot spend past it; a resume that gives one keeps to that one."""
    runs = tmp_path / "runs"
    runs.mkdir()
    trace, seen = runs / "run.jsonl", tmp_path / "seen"
    assert child(trace, 6, {"model_calls": 2}, seen) is None  # killed right after its first live call
    assert harness.replay(trace).header["budget"] == {"model_calls": 2}
    (row,) = harness.recover(runs, workflow=budget_agent.loop)  # an interrupted run: resumed, with no budget given
    assert (row.action, row.state, server.billed) == ("resumed", "PAUSED", 2)  # one more call, then the pause
    assert harness.replay(trace).pending["budget"]["limit"] == {"model_calls": 2}
    seen.write_text("2")  # the answers this process was given (the children SIGKILL themselves on a new one)
    before = files(runs)
    again = child(trace, 6, None, seen)  # a supervisor's resume with none: still paused, nothing written
    assert again is not None and again["state"] == "PAUSED" and files(runs) == before and server.billed == 2
    assert main(["resume", str(trace), "--workflow", "budget_agent:loop", "--budget-model-calls", "3"]) == 3
    assert server.billed == 3  # the budget given, not the recorded one
    capsys.readouterr()


def test_a_rerun_fork_and_check_of_a_run_with_a_budget_carry_its_budget(tmp_path: Path) -> None:
    """A rerun's and a fork's header copy their parent's budget (as its redaction rules): a rerun is equal, a
    fork goes on, `harness check` finds no drift."""
    trace = tmp_path / "run.jsonl"
    out = budget_agent.chat.run(3, trace=trace, budget=harness.Budget(tokens=100))
    assert out.state == "DONE" and harness.replay(trace).header["budget"] == {"tokens": 100}
    again = harness.rerun(trace, workflow=budget_agent.chat, out=tmp_path / "again.jsonl")
    assert again.equal and harness.replay(tmp_path / "again.jsonl").header["budget"] == {"tokens": 100}
    first = harness.replay(trace).crossings[0].seq
    other = {"model": "m", "choices": [{"message": {"content": "other"}}]}
    forked = harness.fork(trace, at=first, value=other, workflow=budget_agent.chat, out=tmp_path / "fork.jsonl")
    assert forked.state == "DONE" and harness.replay(tmp_path / "fork.jsonl").header["budget"] == {"tokens": 100}
    (checked,) = harness.check([trace], workflow=budget_agent.chat)
    assert checked.status == "ok", checked


def test_without_a_budget_the_same_loop_calls_on(tmp_path: Path, server: BilledServer) -> None:
    """The test above can fail: the same crash loop resumed without a budget calls the model every time."""
    trace, seen = tmp_path / "run.jsonl", tmp_path / "seen"
    outs = [child(trace, 6, None, seen) for _ in range(5)]
    assert outs == [None] * 5 and server.billed == 5


def test_tokens_count_max_tokens_before_the_call_and_usage_after(tmp_path: Path, server: BilledServer) -> None:
    trace = tmp_path / "run.jsonl"
    # each answer bills 100 + n input and 7 output tokens (108, then 109); each request asks for up to 50
    out = budget_agent.loop.run(4, 50, trace=trace, budget=harness.Budget(tokens=200))
    assert out.state == "PAUSED" and server.billed == 2  # 108 + 50 fits; 217 + 50 would pass 200
    assert out.pending is not None
    assert out.pending["budget"] == {
        "exceeded": "tokens", "limit": {"tokens": 200}, "spent": {"model_calls": 2, "tokens": 108 + 109},
        "call": {"boundary": "http", "model": MODEL, "tokens": 50, "model_calls": 1},
    }  # fmt: skip
    out = budget_agent.loop.run(4, 50, trace=trace, resume=True, budget=harness.Budget(tokens=1000))
    assert out.state == "DONE" and out.result == [1, 2, 3, 4] and server.billed == 4


def test_without_max_tokens_the_prompt_size_counts(tmp_path: Path, server: BilledServer) -> None:
    trace = tmp_path / "run.jsonl"
    # a prompt of about 4,000 bytes: about 1,000 tokens asked before the call, whatever it is billed after
    out = budget_agent.loop.run(2, None, 4000, trace=trace, budget=harness.Budget(tokens=1000))
    assert out.state == "PAUSED" and server.billed == 0  # the first call alone would pass it: never made
    assert out.pending is not None and 1000 < out.pending["budget"]["call"]["tokens"] < 1050
    asked = out.pending["budget"]["call"]["tokens"]
    before = trace.read_bytes()
    out = budget_agent.loop.run(2, None, 4000, trace=trace, resume=True, budget=harness.Budget(tokens=asked - 1))
    assert out.state == "PAUSED" and server.billed == 0 and trace.read_bytes() == before  # still too small
    out = budget_agent.loop.run(2, None, 4000, trace=trace, resume=True, budget=harness.Budget(tokens=asked))
    assert out.state == "PAUSED" and server.billed == 1  # the first fit exactly (billed 108); 108 + asked would not
    assert out.pending is not None and out.pending["budget"]["spent"]["tokens"] == 108


def test_usd_prices_the_call_at_its_model(tmp_path: Path, server: BilledServer) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[models."{MODEL}"]\ninput = 1.0\noutput = 10.0\n[models."{ANSWERED_BY}"]\ninput = 1.0\n'
                      "output = 10.0\n")  # fmt: skip
    trace = tmp_path / "run.jsonl"
    # asked: 1,000 tokens at the output price, $0.01; billed: (100 + n) x $1 + 7 x $10 per million
    out = budget_agent.loop.run(4, 1000, trace=trace, budget=harness.Budget(usd=0.0102, prices=prices))
    assert out.state == "PAUSED" and server.billed == 2 and out.pending is not None
    assert out.pending["budget"]["spent"] == {"model_calls": 2, "tokens": 217, "usd": 0.000343}
    assert out.pending["budget"]["call"]["usd"] == 0.01
    out = budget_agent.loop.run(4, 1000, trace=trace, resume=True, budget=harness.Budget(usd=1, prices=prices))
    assert out.state == "DONE" and server.billed == 4


def test_an_executor_pauses_in_its_planner_and_takes_no_answer(tmp_path: Path, server: BilledServer) -> None:
    trace = tmp_path / "run.jsonl"

    def executor() -> harness.Executor:
        return harness.Executor(planner=budget_agent.planner, tools={"note": budget_agent.note}, trace=trace,
                                resume="auto")  # fmt: skip

    out = executor().run(4, budget=harness.Budget(model_calls=2))
    assert out.state == "PAUSED" and len(out.checkpoints) == 2 and server.billed == 2
    before = trace.read_bytes()
    with pytest.raises(harness.HarnessError, match=r"waits for none \(it paused on its budget"):
        executor().run(4, answer="go on", budget=harness.Budget(model_calls=9))
    assert trace.read_bytes() == before and server.billed == 2
    out = executor().run(4, budget=harness.Budget(model_calls=3))  # the planner's 3rd call; its 4th is not made
    assert out.state == "PAUSED" and server.billed == 3 and len(out.checkpoints) == 3
    before = trace.read_bytes()
    out = executor().run(4)  # no budget given: the one the run started with (2) holds, nothing written
    assert out.state == "PAUSED" and server.billed == 3 and trace.read_bytes() == before
    out = executor().run(4, budget=harness.Budget(model_calls=4))
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [1, 2, 3, 4] and server.billed == 4


def test_a_verifier_that_asks_a_model_pauses_in_verify_and_is_asked_again(tmp_path: Path) -> None:
    from harness.testing import counter, fixed_plan, steps

    judged: list[int] = []

    def verifier(step: harness.Step, result: Any) -> bool:
        harness.llm({"model": "judge", "messages": [step.name]}, lambda r: judged.append(1) or {"ok": True})
        return True

    tool = counter()
    trace = tmp_path / "run.jsonl"

    def executor() -> harness.Executor:
        return harness.Executor(planner=fixed_plan(steps(2)), tools={"work": tool}, verifier=verifier, trace=trace,
                                resume="auto")  # fmt: skip

    out = executor().run("g", budget=harness.Budget(model_calls=1))
    assert out.state == "PAUSED" and out.pending is not None and out.pending["state"] == "VERIFY"
    assert len(judged) == 1 and len(tool.calls) == 2 and len(out.checkpoints) == 1  # step 1's result is kept
    out = executor().run("g", budget=harness.Budget(model_calls=2))
    assert out.state == "DONE" and len(judged) == 2 and len(tool.calls) == 2  # the tool is not called again


def test_a_pydantic_ai_agent_is_gated_at_its_model(tmp_path: Path) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from harness.pydantic_ai import HarnessDurability

    asked: list[int] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(messages))
        done = sum(1 for m in messages for p in m.parts if p.part_kind == "tool-return")
        if done < 2:
            return ModelResponse(parts=[ToolCallPart("add", {"a": done, "b": 1})])
        return ModelResponse(parts=[TextPart(f"done after {done} tools")])

    agent = Agent(FunctionModel(model), name="adder", capabilities=[HarnessDurability()])

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    @harness.workflow
    async def flow() -> str:
        return (await agent.run("add twice")).output

    trace = tmp_path / "run.jsonl"
    out = flow.run(trace=trace, budget=harness.Budget(model_calls=2))
    assert out.state == "PAUSED" and len(asked) == 2  # the third model request was never made
    assert out.pending is not None and out.pending["budget"]["call"]["boundary"] == "pydantic_ai.model"
    out = flow.run(trace=trace, resume=True, budget=harness.Budget(model_calls=3))
    assert out.state == "DONE" and out.result == "done after 2 tools" and len(asked) == 3  # two served


def test_a_bad_budget_is_refused_before_anything_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="needs a limit"):
        harness.Budget()
    with pytest.raises(ValueError, match="needs prices="):
        harness.Budget(usd=1)
    with pytest.raises(ValueError, match="int >= 0"):
        harness.Budget(tokens=-1)
    with pytest.raises(harness.HarnessError, match="cannot read the price list"):
        harness.Budget(usd=1, prices=tmp_path / "missing.toml")
    trace = billed_agent.one_run(tmp_path / "run.jsonl")
    before = trace.read_bytes()
    assert main(["resume", str(trace), "--agent", "x:y", "--budget-usd", "1"]) == 2
    assert "--budget-usd needs --prices" in capsys.readouterr().err and trace.read_bytes() == before
    assert main(["resume", str(trace), "--agent", "x:y", "--budget-tokens", "-1"]) == 2
    assert "int >= 0" in capsys.readouterr().err and trace.read_bytes() == before


def test_the_viewer_and_recover_say_it_waits_for_a_larger_budget(tmp_path: Path, server: BilledServer) -> None:
    from starlette.testclient import TestClient

    from harness.viewer import create_app

    runs = tmp_path / "runs"
    runs.mkdir()
    out = budget_agent.loop.run(3, trace=runs / "run.jsonl", budget=harness.Budget(model_calls=1))
    assert out.state == "PAUSED" and server.billed == 1
    with TestClient(create_app(runs), base_url="http://127.0.0.1") as c:
        s = c.get("/api/runs/run/summary").json()
    assert s["status"] == "paused" and s["pending"]["reason"] == "budget" and s["reconcile"] is None
    assert s["resume"] == f"harness resume {runs / 'run.jsonl'} --workflow budget_agent:loop --budget-model-calls N"
    before = files(runs)
    (row,) = harness.recover(runs, workflow=budget_agent.loop)  # recover gives no budget: it leaves the run alone
    assert row.action == "left" and "--budget-model-calls N" in row.detail
    assert files(runs) == before and server.billed == 1


def answered(request: Any) -> dict[str, Any]:
    """A model's reply, with its usage."""
    return {"model": "m", "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


@harness.workflow
def twice() -> int:
    """Two model calls: a budget of one pauses it before the second."""
    harness.llm({"model": "m", "messages": ["a"]}, answered)
    harness.llm({"model": "m", "messages": ["b"]}, answered)
    return 2


def paused_records(tmp_path: Path) -> list[dict[str, Any]]:
    """A run paused on its budget, then resumed with a larger one to its end: its records."""
    from harness.testing import read_records

    trace = tmp_path / "paused.jsonl"
    assert twice.run(trace=trace, budget=harness.Budget(model_calls=1)).state == "PAUSED"
    assert twice.run(trace=trace, resume=True, budget=harness.Budget(model_calls=2)).state == "DONE"
    return [r for r in read_records(trace) if r["kind"] != "seal"]


def forged(tmp_path: Path, records: list[dict[str, Any]]) -> harness.TraceCorruption:
    from harness.testing import write_trace

    path = tmp_path / "forged.jsonl"
    write_trace(path, [{**r, "seq": i} for i, r in enumerate(records, start=1)])
    with pytest.raises(harness.TraceCorruption) as info:
        harness.replay(path)
    return info.value


def test_the_reader_takes_a_budget_pause_only_as_the_format_says(tmp_path: Path) -> None:
    records = paused_records(tmp_path)
    pause = next(r for r in records if r.get("to") == "PAUSED")
    assert pause["from"] == "PLAN" and pause["reason"] == "budget" and pause["budget"]["exceeded"] == "model_calls"
    back = next(r for r in records if r.get("from") == "PAUSED")
    assert back["to"] == "PLAN"  # after the resume record, no answer
    for bad, why in [
        ({"budget": None}, "without the budget object"),
        ({"budget": {"limit": {}}}, "without the budget object"),
        ({"reason": "tired"}, 'reason other than "budget"'),
        ({"question": "why?"}, "budget beside a question"),
    ]:
        changed = [dict(r, **bad) if r is pause else r for r in records]
        e = forged(tmp_path, changed)
        assert e.reason == "malformed" and why in e.detail, (bad, e)
    answer = {"kind": "answer", "op": pause["seq"], "answer": 1, "ts": back["ts"]}
    answered = [*records[: records.index(back)], answer, back]
    assert forged(tmp_path, answered).reason == "bad-answer"  # a budget's pause takes no answer
    elsewhere = [dict(r, to="VERIFY") if r is back else r for r in records]
    e = forged(tmp_path, elsewhere)
    assert e.reason == "bad-transition" and "paused on its budget in PLAN" in e.detail
    header = records[0]  # the budget it started with: limits, and the prices a usd limit is counted at
    assert header["budget"] == {"model_calls": 1}
    for bad in [
        {},
        {"usd": 1},
        {"tokens": -1},
        {"model_calls": 1.0},
        {"model_calls": 1, "prices": {"m": {"input": 1}}},
    ]:
        e = forged(tmp_path, [dict(header, budget=bad), *records[1:]])
        assert e.reason == "malformed" and "a header whose budget" in e.detail, (bad, e)


def test_a_workflow_started_over_a_torn_header_records_its_budget(tmp_path: Path) -> None:
    """A resume that finds a torn header starts the run anew in the emptied file: its header records the budget
    given, as a new run's does, so a later resume given none (`harness recover`) keeps to it."""
    trace = tmp_path / "run.jsonl"
    trace.write_bytes(b'{"seq":1,"kind":"header","schema":2,"run_')  # its writer died creating it
    out = twice.run(trace=trace, resume=True, budget=harness.Budget(model_calls=1))
    assert out.state == "PAUSED" and len(harness.replay(trace).crossings) == 1
    assert harness.replay(trace).header.get("budget") == {"model_calls": 1}
    before = trace.read_bytes()
    assert twice.run(trace=trace, resume=True).state == "PAUSED"  # given none: the recorded one, nothing written
    assert trace.read_bytes() == before


def test_a_run_paused_on_its_budget_reruns_equal_and_checks_ok(tmp_path: Path) -> None:
    """A rerun (and `harness check`) of a run that paused on its budget pauses where it did, as one paused on a
    question does: the model call it paused before is not made (a live call in a re-execution was a
    ReplayViolation; check said drift)."""
    from harness.testing import counter, fixed_plan, steps

    trace = tmp_path / "flow.jsonl"
    assert twice.run(trace=trace, budget=harness.Budget(model_calls=1)).state == "PAUSED"
    again = harness.rerun(trace, workflow=twice, out=tmp_path / "flow-again.jsonl")
    assert again.equal and harness.replay(tmp_path / "flow-again.jsonl").pending == harness.replay(trace).pending
    (checked,) = harness.check([trace], workflow=twice)
    assert checked.status == "ok", checked

    def verifier(step: harness.Step, result: Any) -> bool:
        harness.llm({"model": "judge", "messages": [step.name]}, answered)
        return True

    tools = {"work": counter()}
    trace = tmp_path / "executor.jsonl"
    ex = harness.Executor(planner=fixed_plan(steps(2)), tools=tools, verifier=verifier, trace=trace)
    assert ex.run("g", budget=harness.Budget(model_calls=1)).state == "PAUSED"
    again = harness.rerun(trace, planner=fixed_plan(steps(2)), tools=tools, verifier=verifier,
                          out=tmp_path / "executor-again.jsonl")  # fmt: skip
    assert again.equal, again


def test_reconcile_refuses_a_run_paused_on_its_budget_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run paused on its budget has no operation in doubt: `harness reconcile` says what it waits for (a larger
    budget), with no traceback, and writes nothing."""
    trace = tmp_path / "paused.jsonl"
    assert twice.run(trace=trace, budget=harness.Budget(model_calls=1)).state == "PAUSED"
    before = files(tmp_path)
    with pytest.raises(harness.HarnessError, match="budget"):
        harness.reconcile(trace, happened=False)
    assert main(["reconcile", str(trace), "--not-happened"]) != 0
    assert "budget" in capsys.readouterr().err and files(tmp_path) == before


@harness.workflow
def then_asks() -> str:
    """Two model calls, then a question."""
    harness.llm({"model": "m", "messages": ["a"]}, answered)
    harness.llm({"model": "m", "messages": ["b"]}, answered)
    return str(harness.interrupt("go on?"))


def test_a_workflow_resumed_past_its_budget_pause_asks_its_question(tmp_path: Path) -> None:
    """A resume of a workflow paused on its budget in PLAN goes back there with no question waiting: the function's
    first interrupt() after it is a new question (the run ended FAILED with KeyError 'question': the resume took
    the budget pause for a question asked in PLAN, to be asked again)."""
    trace = tmp_path / "paused.jsonl"
    assert then_asks.run(trace=trace, budget=harness.Budget(model_calls=1)).state == "PAUSED"
    out = then_asks.run(trace=trace, resume=True, budget=harness.Budget(model_calls=2))
    assert out.state == "PAUSED" and out.pending is not None and out.pending["question"] == "go on?", out
    out = then_asks.run(trace=trace, resume=True, answer="yes")
    assert out.state == "DONE" and out.result == "yes"
