"""Durable functions: `@harness.workflow` runs, its trace, resume by re-execution, patched(), rerun and fork,
the CLI's --workflow, and every bad input refused with nothing written."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from children import ZYGOTE

import harness
from harness import Executor, ReplayDrift, ResumeMismatch, Step, ToolError, TraceCorruption, TraceMissing, replay
from harness._errors import NotATool

# --- agents used below: module level, so their names are their traces' -----------------------------

CALLS: dict[str, list[Any]] = {}


def noted(kind: str, value: Any) -> None:
    CALLS.setdefault(kind, []).append(value)


def search(query: str) -> dict[str, Any]:
    noted("search", query)
    return {"query": query, "hits": [query.upper()]}


def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    noted("charge", idempotency_key)
    return {"charged": amount}


def send(to: str) -> dict[str, Any]:
    noted("send", to)
    return {"sent": to}


CHARGE = harness.Tool(charge, idempotent=True)
SEND = harness.Tool(send, idempotent=False)


def model(request: dict[str, Any]) -> str:
    noted("model", request["prompt"])
    return f"about {request['prompt']}"


@harness.workflow
def research(topic: str, *, budget: int = 3) -> dict[str, Any]:
    idea = harness.llm({"prompt": topic}, model)
    found = harness.call(search, query=idea)
    paid = harness.call(CHARGE, amount=budget)
    sent = harness.call(SEND, to=topic)
    return {"idea": idea, "found": found, "paid": paid, "sent": sent}


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    CALLS.clear()


def records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def cut_after(path: Path, last_seq: int) -> bytes:
    """Keep the first last_seq lines of the trace (a crash right after that record); the bytes kept."""
    kept = b"".join(path.read_bytes().splitlines(keepends=True)[:last_seq])
    path.write_bytes(kept)
    return kept


# --- a run and its trace ---------------------------------------------------------------------------


def test_a_plain_function_runs_as_a_durable_run(trace: Path) -> None:
    out = research.run("ducks", trace=trace, budget=5)
    assert out.state == "DONE" and out.error is None
    assert out.result == {
        "idea": "about ducks",
        "found": {"query": "about ducks", "hits": ["ABOUT DUCKS"]},
        "paid": {"charged": 5},
        "sent": {"sent": "ducks"},
    }
    assert [c.name for c in out.checkpoints] == ["search", "charge", "send"]
    recs = records(trace)
    header = recs[0]
    assert header["workflow"] == "test_workflow:research" and header["tools"] == {}
    assert header["goal"] == {"args": ["ducks"], "kwargs": {"budget": 5}}
    assert list(header)[:6] == ["seq", "kind", "schema", "run_id", "goal", "tools"] and list(header)[6] == "workflow"
    intents = [r for r in recs if r.get("to") == "ACT"]
    assert [(i["tool"], i["contract"]["effect"], i.get("key")) for i in intents] == [
        ("search", "at-least-once", None),
        ("charge", "idempotent", f"{header['run_id']}-1-1"),
        ("send", "unsafe", None),
    ]
    end = recs[-2]
    assert (end["from"], end["to"], end["step"], end["result"]) == ("PLAN", "DONE", 3, out.result)
    rep = replay(trace)
    assert rep.state == "DONE" and rep.sealed and rep.workflow == "test_workflow:research"
    assert rep.returned == out.result
    assert {"model": ["ducks"], "search": ["about ducks"], "charge": [intents[1]["key"]], "send": ["ducks"]} == CALLS


def test_outside_a_run_the_function_and_harness_call_just_call_through() -> None:
    assert research("owls") == {
        "idea": "about owls",
        "found": {"query": "about owls", "hits": ["ABOUT OWLS"]},
        "paid": {"charged": 3},
        "sent": {"sent": "owls"},
    }
    assert harness.call(search, query="x") == {"query": "x", "hits": ["X"]}
    (key,) = CALLS["charge"]  # an idempotent tool outside a run gets a key of its own
    assert len(key) == 32 and int(key, 16) >= 0


@harness.workflow
def boom(n: int) -> None:
    harness.call(search, query=str(n))
    raise ValueError(f"no good: {n}")


def test_an_exception_ends_the_run_failed_and_is_returned_not_raised(trace: Path) -> None:
    out = boom.run(7, trace=trace)
    assert out.state == "FAILED" and out.result is None
    assert out.error == {"type": "builtins.ValueError", "message": "no good: 7"}
    last = records(trace)[-2]
    assert (last["from"], last["to"], last["error"]) == ("PLAN", "FAILED", out.error)
    again = boom.run(7, trace=trace, resume=True)  # a finished run: its outcome, nothing called
    assert again.state == "FAILED" and again.error == out.error and CALLS["search"] == ["7"]


FLAKY: list[int] = []


def flaky(x: int, idempotency_key: str) -> int:
    FLAKY.append(x)
    if len(FLAKY) == 1:
        raise ToolError("busy, try again")
    return x * 2


@harness.workflow
def retrying(x: int) -> dict[str, Any]:
    tool = harness.Tool(flaky, idempotent=True)
    try:
        return {"value": harness.call(tool, x=x)}
    except ToolError as e:
        return {"value": harness.call(tool, x=x), "first": str(e)}


def test_a_tool_error_is_a_failed_attempt_raised_at_the_call_site(trace: Path) -> None:
    FLAKY.clear()
    out = retrying.run(4, trace=trace)
    assert out.state == "DONE" and out.result == {"value": 8, "first": "busy, try again"}
    recs = records(trace)
    moves = [(r["from"], r["to"], r.get("attempt", 1)) for r in recs if r["kind"] == "transition"]
    assert moves == [("INIT", "PLAN", 1), ("PLAN", "ACT", 1), ("ACT", "PLAN", 1), ("PLAN", "ACT", 2),
                     ("ACT", "VERIFY", 2), ("PLAN", "DONE", 1)]  # fmt: skip
    failed = recs[3]
    assert failed["error"] == {"type": "harness._errors.ToolError", "message": "busy, try again"}
    run_id = recs[0]["run_id"]
    assert [r["key"] for r in recs if r.get("to") == "ACT"] == [f"{run_id}-0-1", f"{run_id}-0-2"]
    # crashed after the failed attempt: the resume raises the recorded error again, calls nothing for it
    cut_after(trace, 4)
    FLAKY.clear()
    FLAKY.append(0)  # the tool would now succeed at once: only the second attempt is made live
    again = retrying.run(4, trace=trace, resume=True)
    assert again.state == "DONE" and again.result == out.result and FLAKY == [0, 4]


# --- resume = re-execution ---------------------------------------------------------------------------


@pytest.mark.parametrize("last", range(2, 14))
def test_a_run_cut_after_any_record_resumes_to_the_same_result(trace: Path, last: int) -> None:
    whole = research.run("ducks", trace=trace)
    assert len(records(trace)) == 14
    cut_after(trace, last)
    CALLS.clear()
    out = research.run("ducks", trace=trace, resume=True)
    if last == 10:  # the unsafe call's intent is the last record: it may have happened
        assert out.state == "PAUSED" and out.pending is not None and out.pending["tool"] == "send"
        assert "send" not in CALLS
        harness.reconcile(trace, happened=True, result={"sent": "ducks"}, evidence="the outbox")
        out = research.run("ducks", trace=trace, resume=True)
    assert out.state == "DONE" and out.result == whole.result
    rep = replay(trace)
    assert rep.returned == whole.result and rep.resumes == {10: 2, 13: 0}.get(last, 1)  # (13: only the seal)
    # what the trace held was served: the model asked again only if its answer was cut off, and so on
    assert CALLS.get("model", []) == ([] if last >= 3 else ["ducks"])
    assert len(CALLS.get("charge", [])) == (last < 8)  # called again (same key) while its result was not on file
    assert len(CALLS.get("send", [])) == (last < 10)


def test_a_finished_run_is_returned_and_nothing_is_called_or_written(trace: Path) -> None:
    research.run("ducks", trace=trace)
    before = trace.read_bytes()
    CALLS.clear()
    out = research.run("ducks", trace=trace, resume=True)
    assert out.state == "DONE" and out.result["sent"] == {"sent": "ducks"}
    assert CALLS == {} and trace.read_bytes() == before


@harness.workflow
def research_v2(topic: str, *, budget: int = 3) -> dict[str, Any]:
    idea = harness.llm({"prompt": topic + " (v2)"}, model)  # the code changed
    return {"idea": idea}


def test_drift_on_changed_code_names_the_seq_and_path_and_writes_nothing(trace: Path) -> None:
    research.run("ducks", trace=trace)
    kept = cut_after(trace, 8)
    torn = kept + b'{"seq":9,"kind":"transi'  # and a torn tail, which a resume that goes on sets aside
    trace.write_bytes(torn)
    research_v2.name = research.name  # the same workflow, its code changed
    with pytest.raises(ReplayDrift) as e:
        research_v2.run("ducks", trace=trace, resume=True)
    assert e.value.seq == 3 and e.value.fields == {"prompt": ("ducks", "ducks (v2)")}
    assert "seq 3" in str(e.value) and "nothing was written" in str(e.value)
    assert trace.read_bytes() == torn and not list(trace.parent.glob("*.torn-*"))  # byte for byte, nothing aside
    out = research.run("ducks", trace=trace, resume=True)  # the code that made it goes on
    assert out.state == "DONE" and len(list(trace.parent.glob("*.torn-*"))) == 1


@harness.workflow
def research_short(topic: str, *, budget: int = 3) -> dict[str, Any]:
    return {"idea": harness.llm({"prompt": topic}, model)}


def test_a_function_that_ends_before_its_trace_does_is_a_drift(trace: Path) -> None:
    research.run("ducks", trace=trace)
    kept = cut_after(trace, 10)
    research_short.name = research.name
    with pytest.raises(ReplayDrift) as e:
        research_short.run("ducks", trace=trace, resume=True)
    assert e.value.seq == 4 and "ended" in str(e.value) and trace.read_bytes() == kept


@harness.workflow
def research_sends_more(topic: str, *, budget: int = 3) -> dict[str, Any]:
    idea = harness.llm({"prompt": topic}, model)
    found = harness.call(search, query=idea + "!")  # other args
    return {"found": found}


def test_a_call_with_other_args_is_a_drift_naming_the_arg(trace: Path) -> None:
    research.run("ducks", trace=trace)
    kept = cut_after(trace, 10)
    research_sends_more.name = research.name
    with pytest.raises(ReplayDrift) as e:
        research_sends_more.run("ducks", trace=trace, resume=True)
    assert e.value.seq == 4 and e.value.fields == {"args.query": ("about ducks", "about ducks!")}
    assert trace.read_bytes() == kept


SEND_V2 = harness.Tool(send, idempotent=True, version="2")


@harness.workflow
def research_contract(topic: str, *, budget: int = 3) -> dict[str, Any]:
    harness.llm({"prompt": topic}, model)
    harness.call(search, query="about " + topic)
    harness.call(CHARGE, amount=budget)
    return {"sent": harness.call(SEND_V2, to=topic)}


def test_a_recorded_call_met_with_another_contract_is_refused(trace: Path) -> None:
    research.run("ducks", trace=trace)
    kept = cut_after(trace, 11)
    research_contract.name = research.name
    with pytest.raises(ResumeMismatch) as e:
        research_contract.run("ducks", trace=trace, resume=True)
    assert "contract of tool 'send'" in str(e.value) and trace.read_bytes() == kept


def test_resume_refuses_a_missing_trace_other_arguments_another_workflow_and_an_executors_trace(
    tmp_path: Path,
) -> None:
    with pytest.raises(TraceMissing):
        research.run("ducks", trace=tmp_path / "none.jsonl", resume=True)
    assert not (tmp_path / "none.jsonl").exists()
    trace = tmp_path / "run.jsonl"
    research.run("ducks", trace=trace)
    kept = cut_after(trace, 5)
    with pytest.raises(ResumeMismatch, match="arguments"):
        research.run("geese", trace=trace, resume=True)
    with pytest.raises(ResumeMismatch, match="workflow"):
        boom.run("ducks", trace=trace, resume=True)
    ex_trace = tmp_path / "ex.jsonl"
    Executor(planner=lambda g, p: None, tools={}, trace=ex_trace).run("g")
    with pytest.raises(ResumeMismatch, match="workflow"):
        research.run("ducks", trace=ex_trace, resume=True)
    with pytest.raises(harness.TraceExists):
        research.run("ducks", trace=trace)
    assert trace.read_bytes() == kept
    with pytest.raises(harness.HarnessError, match="workflow"):  # and an Executor will not take a workflow's
        Executor(planner=lambda g, p: None, tools={}, trace=trace, resume=True).run({"args": ["ducks"], "kwargs": {}})
    assert trace.read_bytes() == kept


def test_resume_auto_starts_a_run_or_resumes_it(trace: Path) -> None:
    first = research.run("ducks", trace=trace, resume="auto")
    assert research.run("ducks", trace=trace, resume="auto").result == first.result
    assert replay(trace).resumes == 0


# --- interrupt() ---------------------------------------------------------------------------------------


@harness.workflow
def approve(draft: str) -> dict[str, Any]:
    text = harness.llm({"prompt": draft}, model)
    verdict = harness.interrupt({"approve": text})
    if verdict != "yes":
        return {"rejected": text}
    return {"sent": harness.call(SEND, to=text)}


def test_interrupt_pauses_the_run_and_an_answer_resumes_it(trace: Path) -> None:
    out = approve.run("memo", trace=trace)
    assert out.state == "PAUSED" and out.pending == {
        "seq": 4, "step": 0, "state": "PLAN", "question": {"approve": "about memo"}
    }  # fmt: skip
    before = trace.read_bytes()
    assert approve.run("memo", trace=trace, resume=True).state == "PAUSED"  # no answer: waits, writes nothing
    assert trace.read_bytes() == before and CALLS["model"] == ["memo"]
    done = approve.run("memo", trace=trace, resume=True, answer="yes")
    assert done.state == "DONE" and done.result == {"sent": {"sent": "about memo"}}
    assert CALLS["model"] == ["memo"] and CALLS["send"] == ["about memo"]
    kinds = [(r["kind"], r.get("boundary") or r.get("to")) for r in records(trace)[4:]]
    assert kinds[:4] == [("resume", None), ("answer", None), ("transition", "PLAN"), ("crossing", "interrupt")]
    r = harness.rerun(trace, workflow=approve)
    assert r.equal and r.live_calls == 0
    with pytest.raises(harness.HarnessError, match="waits for none"):
        approve.run("memo", trace=trace, resume=True, answer="again")


def test_an_answer_to_a_torn_header_or_a_missing_seal_writes_nothing(trace: Path) -> None:
    torn = b'{"seq":1,"kind":"header","schema":2,"run_'  # the writer died creating it
    trace.write_bytes(torn)
    with pytest.raises(harness.HarnessError, match="no run asked a question; nothing was written"):
        approve.run("memo", trace=trace, resume=True, answer="yes")
    assert sorted(p.name for p in trace.parent.iterdir()) == [trace.name] and trace.read_bytes() == torn
    trace.unlink()
    assert approve.run("memo", trace=trace).state == "PAUSED"
    assert approve.run("memo", trace=trace, resume=True, answer="yes").state == "DONE"
    unsealed = b"".join(trace.read_bytes().splitlines(keepends=True)[:-1])  # the writer died writing its seal
    trace.write_bytes(unsealed)
    with pytest.raises(harness.HarnessError, match=r"waits for none \(its state is DONE\); nothing was written"):
        approve.run("memo", trace=trace, resume=True, answer="again")
    assert trace.read_bytes() == unsealed
    assert approve.run("memo", trace=trace, resume=True).state == "DONE"  # without it: the seal repaired


@harness.workflow
def approve_v2(draft: str) -> dict[str, Any]:
    text = harness.llm({"prompt": draft + "!"}, model)  # the code changed before the question
    return {"verdict": harness.interrupt({"approve": text})}


@harness.workflow
def approve_other(draft: str) -> dict[str, Any]:
    text = harness.llm({"prompt": draft}, model)
    return {"verdict": harness.interrupt({"approve": text, "urgent": True})}  # another question


def test_a_resume_with_an_answer_that_drifts_writes_nothing(trace: Path) -> None:
    approve.run("memo", trace=trace)
    before = trace.read_bytes()
    approve_v2.name = approve_other.name = approve.name
    with pytest.raises(ReplayDrift) as e:
        approve_v2.run("memo", trace=trace, resume=True, answer="yes")
    assert e.value.seq == 3 and trace.read_bytes() == before  # no resume, no answer, no PAUSED -> PLAN
    with pytest.raises(ReplayDrift) as e:
        approve_other.run("memo", trace=trace, resume=True, answer="yes")
    assert e.value.seq == 4 and "another question" in str(e.value) and trace.read_bytes() == before
    assert CALLS["model"] == ["memo"]  # served, never called again
    assert approve.run("memo", trace=trace, resume=True, answer="yes").state == "DONE"


def ask_in_tool(item: str) -> dict[str, Any]:
    return {"item": item, "ok": harness.interrupt(f"ship {item}?")}


@harness.workflow
def tool_asks(item: str) -> Any:
    return harness.call(ask_in_tool, item=item)


def test_a_question_asked_inside_a_tool_pauses_in_act_and_the_tool_is_called_again(trace: Path) -> None:
    out = tool_asks.run("box", trace=trace)
    assert out.state == "PAUSED" and out.pending is not None and out.pending["state"] == "ACT"
    done = tool_asks.run("box", trace=trace, resume=True, answer=True)
    assert done.state == "DONE" and done.result == {"item": "box", "ok": True}
    moves = [(r["from"], r["to"]) for r in records(trace) if r["kind"] == "transition"]
    assert ("ACT", "PAUSED") in moves and ("PAUSED", "ACT") in moves
    assert replay(trace).state == "DONE"


def use(creds: dict[str, Any]) -> dict[str, Any]:
    noted("use", creds)
    return {"used": sorted(creds)}


@harness.workflow
def login(user: str) -> Any:
    creds = harness.interrupt({"password for": user})
    harness.llm({"prompt": user}, model)
    return harness.call(use, creds=creds)


@pytest.mark.parametrize("cut", ["after the answer's crossing", "between the answer and its crossing"])
def test_a_redacted_answer_is_given_again_never_served_as_the_marker(trace: Path, cut: str) -> None:
    assert login.run("bob", trace=trace, redact=["password"]).state == "PAUSED"
    secret = {"password": "s3cret"}
    assert login.run("bob", trace=trace, redact=["password"], resume=True, answer=secret).state == "DONE"
    assert CALLS["use"] == [secret] and '"[REDACTED]"' in trace.read_text() and "s3cret" not in trace.read_text()
    crossing = next(r["seq"] for r in records(trace) if r.get("boundary") == "interrupt")
    before = cut_after(trace, crossing if cut == "after the answer's crossing" else crossing - 1)
    if cut == "after the answer's crossing":  # the crossing delivered it: kept encrypted beside the trace, served
        done = login.run("bob", trace=trace, redact=["password"], resume=True)
        assert done.state == "DONE" and CALLS["use"] == [secret, secret]  # the real answer, not the marker
        assert "s3cret" not in trace.read_text()
        return
    with pytest.raises(harness.HarnessError, match=r"answer 1 the re-executed function is given again.*marker"):
        login.run("bob", trace=trace, redact=["password"], resume=True)  # the function would get the marker
    assert trace.read_bytes() == before  # nothing written
    with pytest.raises(harness.HarnessError, match="waits for none"):  # not an answer it was given
        login.run("bob", trace=trace, redact=["password"], resume=True, answer={"pin": "1"})
    assert trace.read_bytes() == before
    done = login.run("bob", trace=trace, redact=["password"], resume=True, answer=secret)  # given again
    assert done.state == "DONE" and CALLS["use"] == [secret, secret]  # the real answer, not the marker
    assert replay(trace).state == "DONE" and "s3cret" not in trace.read_text()


# --- patched() ------------------------------------------------------------------------------------------


def old_code(topic: str) -> dict[str, Any]:
    a = harness.llm({"prompt": topic}, model)
    b = harness.llm({"prompt": a}, model)
    return {"a": a, "b": b, "sent": harness.call(SEND, to=b)}


def new_code(topic: str) -> dict[str, Any]:
    a = harness.llm({"prompt": topic}, model)
    if harness.patched("ask-twice"):  # the change: a sharper second question
        b = harness.llm({"prompt": a + ", briefly"}, model)
    else:
        b = harness.llm({"prompt": a}, model)
    return {"a": a, "b": b, "sent": harness.call(SEND, to=b)}


OLD, NEW = harness.workflow(old_code), harness.workflow(new_code)
NEW.name = OLD.name  # one workflow, deployed twice


def test_patched_keeps_old_runs_on_the_old_path_and_new_runs_on_the_new(tmp_path: Path) -> None:
    # a run of the old code that got past the patch point: resumed by the new code, it keeps its old path
    old = tmp_path / "old.jsonl"
    whole = OLD.run("owls", trace=old)
    cut_after(old, 4)  # both model answers recorded, the send not made
    out = NEW.run("owls", trace=old, resume=True)
    assert out.result == whole.result and "patch" not in {c.kind for c in replay(old).crossings}

    # a run of the old code that had not reached it: the new path (the edge: nothing to keep it old)
    early = tmp_path / "early.jsonl"
    OLD.run("owls", trace=early)
    cut_after(early, 3)
    out = NEW.run("owls", trace=early, resume=True)
    assert out.result["b"] == "about about owls, briefly"
    assert [c.request for c in replay(early).crossings if c.kind == "patch"] == ["ask-twice"]

    # a new run: the new path, with its marker; resumed and rerun, it stays there
    new = tmp_path / "new.jsonl"
    fresh = NEW.run("owls", trace=new)
    assert fresh.result["b"] == "about about owls, briefly"
    patch = next(r for r in records(new) if r.get("boundary") == "patch")
    assert (patch["request"], patch["response"]) == ("ask-twice", True)
    cut_after(new, 5)
    assert NEW.run("owls", trace=new, resume=True).result == fresh.result
    assert harness.rerun(new, workflow=NEW).equal
    assert harness.rerun(old, workflow=NEW).equal  # an old recording reruns under the new code, on its path
    assert harness.patched("anything") is True  # outside a run: the code as it is now


# --- rerun, fork ---------------------------------------------------------------------------------------


def test_rerun_calls_nothing_and_fork_changes_one_answer(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    research.run("ducks", trace=trace)
    CALLS.clear()
    r = harness.rerun(trace, workflow=research)
    assert r.equal and r.live_calls == 0 and r.live_calls_by_agent == {} and CALLS == {}
    f = harness.fork(trace, at=3, value="about geese", workflow=research, out=tmp_path / "child.jsonl")
    assert f.state == "DONE" and f.live_calls == 3 and f.branch == 3
    child = replay(tmp_path / "child.jsonl")
    assert child.returned["found"] == {"query": "about geese", "hits": ["ABOUT GEESE"]}
    assert child.header["parent"] == replay(trace).run_id
    assert CALLS["search"] == ["about geese"] and "model" not in CALLS
    with pytest.raises(harness.HarnessError, match="workflow="):
        harness.rerun(trace, planner=lambda g, p: None, tools={})
    with pytest.raises(harness.HarnessError, match="not both"):
        harness.rerun(trace, workflow=research, planner=lambda g, p: None, tools={})


openai = pytest.importorskip("openai", reason="the model call goes through the real openai client")
httpx = pytest.importorskip("httpx")


@harness.workflow
def chat(question: str, url: str) -> str:
    from harness import http as hhttp

    client = openai.OpenAI(
        base_url=url + "/v1", api_key="sk-test-REALKEY0123456789abcdefXYZ", max_retries=0,
        http_client=httpx.Client(transport=hhttp.transport()),
    )  # fmt: skip
    reply = client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": question}])
    answer = reply.choices[0].message.content or ""
    return str(harness.call(search, query=answer)["hits"][0])


def test_rerun_with_the_model_server_stopped(tmp_path: Path) -> None:
    from chat_server import ChatServer

    server = ChatServer()
    trace = tmp_path / "run.jsonl"
    try:
        out = chat.run("hello", server.url, trace=trace)
    finally:
        server.stop()
    assert out.result == "ECHO: HELLO" and len(server.seen) == 1
    assert "REALKEY" not in trace.read_text()  # the key is redacted from the recorded request
    r = harness.rerun(trace, workflow=chat)  # the port refuses connections now: any live call would fail
    assert r.equal and r.live_calls == 0
    live = chat.run("hello", server.url, trace=tmp_path / "live.jsonl")  # (it would, indeed)
    assert live.state == "FAILED" and live.error is not None and "APIConnectionError" in live.error["type"]


# --- async ---------------------------------------------------------------------------------------------


async def amodel(request: dict[str, Any]) -> str:
    await asyncio.sleep(0)
    noted("model", request["prompt"])
    return f"about {request['prompt']}"


async def asearch(query: str) -> dict[str, Any]:
    await asyncio.sleep(0.001)
    noted("search", query)
    return {"query": query}


@harness.workflow
async def agather(topics: list[str]) -> dict[str, Any]:
    ideas = await asyncio.gather(*(harness.allm({"prompt": t}, amodel) for t in topics))
    found = await asyncio.gather(*(harness.acall(asearch, query=i) for i in ideas))
    return {"ideas": list(ideas), "found": list(found)}


def test_an_async_workflow_runs_on_the_callers_loop_and_its_tool_steps_go_one_at_a_time(trace: Path) -> None:
    async def main() -> Any:
        return await agather.arun(["a", "b", "c"], trace=trace)

    out = asyncio.run(main())
    assert out.state == "DONE" and out.result["found"] == [{"query": f"about {t}"} for t in "abc"]
    moves = [(r["from"], r["to"], r["step"]) for r in records(trace) if r["kind"] == "transition"]
    assert moves[1:7] == [("PLAN", "ACT", 0), ("ACT", "VERIFY", 0), ("PLAN", "ACT", 1), ("ACT", "VERIFY", 1),
                          ("PLAN", "ACT", 2), ("ACT", "VERIFY", 2)]  # fmt: skip
    cut_after(trace, 8)
    CALLS.clear()
    again = agather.run(["a", "b", "c"], trace=trace, resume=True)  # run() of an async workflow: asyncio.run
    assert again.result == out.result and CALLS == {"search": ["about b", "about c"]}
    assert harness.rerun(trace, workflow=agather).equal

    async def inside_a_loop() -> Any:
        return agather.run(["a"], trace=trace.with_name("x.jsonl"))

    with pytest.raises(harness.HarnessError, match="arun"):
        asyncio.run(inside_a_loop())
    with pytest.raises(harness.HarnessError, match="acall"):
        harness.call(asearch, query="x")


# --- bad input: a clear error, nothing written ----------------------------------------------------------


def test_arguments_that_are_not_json_are_refused_before_anything_is_written(trace: Path) -> None:
    with pytest.raises(harness.NotSerializable) as e:
        research.run({"when": object()}, trace=trace)
    assert e.value.field == "arguments" and e.value.where == ".args[0].when"
    assert not trace.exists()


@harness.workflow
def returns_a_set(n: int) -> Any:
    harness.call(search, query="q")
    return {"items": {n}}


def test_a_return_value_that_is_not_json_is_refused_and_the_run_left_open(trace: Path) -> None:
    with pytest.raises(harness.NotSerializable) as e:
        returns_a_set.run(1, trace=trace)
    assert e.value.field == "result" and e.value.where == ".items"
    recs = records(trace)
    assert recs[-1]["kind"] == "checkpoint"  # no end, no crash record: the return was refused
    assert replay(trace).state == "PLAN"


@harness.workflow
def calls_a_number() -> Any:
    return harness.call(42)  # type: ignore[arg-type]


def test_harness_call_of_something_not_callable(trace: Path) -> None:
    with pytest.raises(NotATool) as e:
        calls_a_number.run(trace=trace)
    assert isinstance(e.value, TypeError) and isinstance(e.value, harness.HarnessError)
    assert "42" in str(e.value) and "Nothing was written" in str(e.value)
    assert [r["kind"] for r in records(trace)] == ["header", "transition"]


def search_v2(query: str) -> dict[str, Any]:
    return {"q": query}


search_v2.__qualname__ = "search"  # two tools, one name


@harness.workflow
def two_contracts() -> Any:
    harness.call(search, query="a")
    return harness.call(harness.Tool(search_v2, idempotent=False), query="b")


def test_one_name_keeps_one_contract_in_a_run(trace: Path) -> None:
    with pytest.raises(harness.HarnessError, match="keeps one contract"):
        two_contracts.run(trace=trace)
    assert [r.get("tool") for r in records(trace) if r.get("to") == "ACT"] == ["search"]


def test_a_lambda_or_a_closure_cannot_be_given_to_a_command(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(
        "import harness\n"
        "lam = harness.workflow(lambda: 1)\n"
        "def make():\n"
        "    @harness.workflow\n"
        "    def inner():\n"
        "        return 1\n"
        "    return inner\n"
        "closure = make()\n"
    )
    trace = tmp_path / "run.jsonl"
    research.run("ducks", trace=trace)
    for attr, why in (("lam", "lambda"), ("closure", "inside a function")):
        done = ZYGOTE.run(
            [sys.executable, "-m", "harness.cli", "rerun", str(trace), "--workflow", f"flows:{attr}"], cwd=tmp_path,
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert harness.workflow(lambda: 1).run(trace=tmp_path / "lam.jsonl").result == 1  # in-process, it runs


def worker(n: int) -> int:
    harness.llm({"prompt": str(n)}, model)
    return n


@harness.workflow
def spawns(n: int) -> Any:
    h = harness.spawn("helper", worker, n)
    out = h.join()

    def tool_from_agent() -> None:
        harness.call(search, query="x")

    bad = harness.spawn("caller", tool_from_agent)
    try:
        bad.join()
    except harness.HarnessError as e:
        return {"n": out, "refused": "agent 'caller'" in str(e)}
    return {"n": out, "refused": False}


def test_a_spawned_agent_makes_crossings_but_no_tool_calls(trace: Path) -> None:
    out = spawns.run(3, trace=trace)
    assert out.state == "DONE" and out.result == {"n": 3, "refused": True}
    assert harness.rerun(trace, workflow=spawns).equal
    whole = trace.read_bytes()
    for n in range(2, whole.count(b"\n")):  # resumed after each record: the refusal is served again too
        trace.write_bytes(b"".join(whole.splitlines(keepends=True)[:n]))
        again = spawns.run(3, trace=trace, resume=True)
        assert again.state == "DONE" and again.result == out.result
        assert replay(trace).state == "DONE" and harness.rerun(trace, workflow=spawns).equal


# --- the trace format: replay() checks the workflow's fields ---------------------------------------------


PLAIN = {"effect": "at-least-once", "version": None}


def rewrite(trace: Path, seq: int, change: Callable[[dict[str, Any]], None]) -> None:
    """Change record seq, and recompute the crc chain (a forger's edit, not an accident)."""
    import zlib

    out, crc = [], 0
    for rec in records(trace):
        if rec["seq"] == seq:
            change(rec)
        rec.pop("crc")
        body = orjson.dumps(rec)[:-1]
        crc = zlib.crc32(body, crc)
        out.append(body + b',"crc":"%08x"}\n' % crc)
    trace.write_bytes(b"".join(out))


@pytest.mark.parametrize(
    ("seq", "change", "reason", "said"),
    [
        (1, lambda r: r.update(tools={"search": PLAIN}), "malformed", "tools {}"),
        (1, lambda r: r.update(workflow=""), "malformed", "its name"),
        (4, lambda r: r.pop("contract"), "malformed", "without its contract"),
        (4, lambda r: r.update(contract={"effect": "maybe"}), "malformed", "without its contract"),
        (13, lambda r: r.pop("result"), "malformed", "PLAN -> DONE without its result"),
        (13, lambda r: r.update(result={"other": 1}), "seal", "content_hash differs"),
    ],
)
def test_replay_refuses_a_workflow_trace_that_cannot_be_true(
    trace: Path, seq: int, change: Callable[[dict[str, Any]], None], reason: str, said: str
) -> None:
    research.run("ducks", trace=trace)
    rewrite(trace, seq, change)
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert e.value.reason == reason and said in str(e.value)


def test_replay_refuses_a_tool_that_changes_its_contract_in_a_run(trace: Path) -> None:
    @harness.workflow
    def twice() -> Any:
        harness.call(search, query="a")
        return harness.call(search, query="b")

    twice.run(trace=trace)
    rewrite(trace, 6, lambda r: r.update(contract={"effect": "unsafe", "version": None}))
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert e.value.reason == "bad-intent" and "keeps one contract" in str(e.value)


def test_replay_refuses_workflow_fields_in_an_executors_trace(tmp_path: Path) -> None:
    trace = tmp_path / "ex.jsonl"
    Executor(planner=lambda g, p: None if p else Step("s", "t", {}), tools={"t": lambda: 1}, trace=trace).run("g")
    contract = {"effect": "at-least-once", "version": None}
    rewrite(trace, 3, lambda r: r.update(contract=contract))
    with pytest.raises(TraceCorruption, match="names no workflow"):
        replay(trace)
    trace.unlink()
    Executor(planner=lambda g, p: None, tools={}, trace=trace).run("g")
    rewrite(trace, 3, lambda r: r.update(result=1))
    with pytest.raises(TraceCorruption, match="names no workflow"):
        replay(trace)


# --- the rest of harness reads a workflow's trace like any other -----------------------------------------


def test_show_verify_runs_diff_export_and_import_read_a_workflow_trace(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    out = research.run("ducks", runs_dir=runs)
    trace = Path(out.trace)
    assert trace.parent == runs
    for args in (["show", str(trace)], ["verify", str(trace)], ["runs", str(runs)], ["replay", str(trace)]):
        done = ZYGOTE.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True)
        assert done.returncode == 0, (args, done.stderr)
    other = research.run("geese", runs_dir=runs)
    d = harness.diff(trace, other.trace)
    assert not d.equal
    bundle = harness.export([trace], tmp_path / "b.tar.gz")
    assert bundle is not None
    imported = harness.import_bundle(tmp_path / "b.tar.gz", tmp_path / "in")
    assert imported is not None
    assert harness.normalize(next((tmp_path / "in").glob("*.jsonl"))) == harness.normalize(trace)


STOP = [True]


@harness.workflow
def stops_once(topic: str) -> Any:
    idea = harness.llm({"prompt": topic}, model)
    found = harness.call(search, query=idea)
    if STOP[0]:
        raise harness.HarnessError("stopped here (a bug fixed before the resume)")
    return harness.call(SEND, to=found["query"])


def test_a_workflow_run_on_object_storage_resumes_there(runs: str) -> None:
    url = runs + "/flow.jsonl"
    whole = research.run("ducks", trace=url)
    assert whole.state == "DONE" and harness.replay(url).returned == whole.result
    assert research.run("ducks", trace=url, resume=True).result == whole.result
    stopped = runs + "/stopped.jsonl"
    STOP[0] = True
    with pytest.raises(harness.HarnessError, match="stopped here"):
        stops_once.run("eels", trace=stopped)
    assert harness.replay(stopped).tail.crash is not None
    STOP[0] = False
    CALLS.clear()
    out = stops_once.run("eels", trace=stopped, resume=True)
    assert out.state == "DONE" and out.result == {"sent": "about eels"}
    assert CALLS == {"send": ["about eels"]}  # the model and the search were served from the bucket
    rep = harness.replay(stopped)
    assert rep.state == "DONE" and rep.resumes == 1


def test_the_cli_resumes_recovers_reruns_and_forks_a_workflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commands run in this process (harness.cli.main, what the console script calls): `--workflow
    test_workflow:approve` is this module. (A command in a process of its own: test_cli.py, and the two below.)"""
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # (the loader puts the current directory on it)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse's refusal
            code = int(e.code or 0)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    runs = tmp_path / "runs"
    runs.mkdir()
    asked = approve.run("memo", runs_dir=runs)
    trace = asked.trace
    done = cli("resume", trace, "--workflow", "test_workflow:approve")
    assert done.returncode == 3 and "--workflow test_workflow:approve --answer JSON" in done.stdout
    done = cli("resume", trace, "--workflow", "test_workflow:approve", "--answer", '"no"')
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr
    assert replay(trace).returned == {"rejected": "about memo"}

    crashed = research.run("ducks", runs_dir=runs)
    cut_after(Path(crashed.trace), 7)
    Executor(planner=lambda g, p: None, tools={}, trace=runs / "executor.jsonl").run("g")
    done = cli("recover", str(runs), "--workflow", "test_workflow:research", "--json")
    rows = {Path(r["path"]).name: r for r in json.loads(done.stdout)}
    assert rows[Path(crashed.trace).name]["action"] == "resumed" and rows[Path(crashed.trace).name]["state"] == "DONE"
    assert replay(crashed.trace).returned["sent"] == {"sent": "ducks"}

    done = cli("rerun", trace, "--workflow", "test_workflow:approve")
    assert done.returncode == 0 and done.stdout.startswith("equal"), done.stderr
    done = cli("fork", trace, "--workflow", "test_workflow:approve", "--at", "3", "--set-text", "about owls",
               "--out", str(tmp_path / "child.jsonl"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    child = replay(tmp_path / "child.jsonl")  # live after its branch: the question is asked again, of a human
    assert child.state == "PAUSED" and child.pending is not None
    assert child.pending["question"] == {"approve": "about owls"}
    done = cli("rerun", trace, "--workflow", "test_workflow:approve", "--agent", "x:y")
    assert done.returncode == 2 and "not allowed with" in done.stderr


FLOW_TEST = """
import harness

def model(request):
    return "about " + request["prompt"] + {extra!r}

def search(query):
    return {{"hits": [query.upper()]}}

@harness.workflow
def research(topic):
    idea = harness.llm({{"prompt": topic}}, model)
    return harness.call(search, query=idea)

def test_research(tmp_path, golden_trace):
    assert golden_trace == research.run("ducks", trace=tmp_path / "run.jsonl")
"""


def test_a_workflows_golden_trace(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import syrupy
    from syrupy.extensions.base import SnapshotCollectionStorage

    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeini("[pytest]\n")

    def run(extra: str, *args: str) -> pytest.RunResult:
        pytester.makepyfile(test_flow=FLOW_TEST.format(extra=extra))
        saved = SnapshotCollectionStorage.snapshot_dirname, syrupy._syrupy  # type: ignore[attr-defined]
        try:
            return pytester.runpytest("-p", "no:xdist", "-p", "no:cacheprovider", *args)
        finally:
            SnapshotCollectionStorage.snapshot_dirname, syrupy._syrupy = saved  # type: ignore[attr-defined]

    run("", "--snapshot-update").assert_outcomes(passed=1)
    (golden,) = pytester.path.rglob("golden/**/*.jsonl")
    text = golden.read_text()
    assert '"workflow":"test_flow:research"' in text and '"contract"' in text and '"result"' in text
    run("").assert_outcomes(passed=1)  # offline, the same run: equal
    changed = run("!")
    changed.assert_outcomes(failed=1)
    assert "about ducks!" in changed.stdout.str()


# --- artifacts, agents after a resume, Ray's tasks --------------------------------------------------------


@harness.workflow
def with_artifact(topic: str) -> Any:
    text = harness.llm({"prompt": topic}, model)
    digest = harness.artifact("report.txt", text)
    harness.call(SEND, to=topic)
    return digest


def test_an_artifact_is_served_on_resume_not_written_twice(trace: Path) -> None:
    whole = with_artifact.run("eels", trace=trace)
    cut_after(trace, 4)  # the artifact is in the trace, the unsafe call not yet
    before = trace.read_bytes()
    out = with_artifact.run("eels", trace=trace, resume=True)
    assert out.result == whole.result
    kinds = [r["kind"] for r in records(trace)]
    assert kinds.count("artifact") == 1 and trace.read_bytes().startswith(before)


@harness.workflow
def spawns_later(n: int) -> Any:
    first = harness.llm({"prompt": str(n)}, model)
    h = harness.spawn("helper", worker, n + 1)
    return [first, h.join()]


def test_a_resumed_run_that_spawns_once_live_writes_clocks_replay_accepts(trace: Path) -> None:
    whole = spawns_later.run(1, trace=trace)
    cut_after(trace, 3)  # before the spawn
    out = spawns_later.run(1, trace=trace, resume=True)
    assert out.state == "DONE" and out.result == whole.result
    assert replay(trace).state == "DONE"


def test_ray_tasks_of_a_workflow_run_and_resume_in_this_process(tmp_path: Path) -> None:
    from harness.ray import run_one, tasks

    (task,) = tasks(["ducks"], workflow="test_workflow:research", runs=tmp_path)
    assert task.workflow and task.agent == "test_workflow:research"
    out = run_one(task)
    assert out.state == "DONE" and out.result["sent"] == {"sent": "ducks"}
    CALLS.clear()
    assert run_one(task).result == out.result and CALLS == {}  # the retry of a finished task: nothing again
    with pytest.raises(harness.HarnessError, match="one of them"):
        tasks(["x"], agent="a:b", workflow="c:d", runs=tmp_path)


# --- a workflow's name does not depend on how its program was launched ----------------------------------------

AGENT = """\
import sys

import harness


def search(query):
    return {"query": query, "hits": 3}


@harness.workflow
def research(topic):
    found = harness.call(search, query=topic)
    return {"found": found, "ok": harness.interrupt({"approve": topic})}


def main(trace):
    print(research.name, research.run("llamas", trace=trace).state)


if __name__ == "__main__":
    main(sys.argv[1])
"""


@pytest.mark.parametrize("module", ["research_agent", "shop.research_agent"])
def test_a_workflow_is_named_alike_as_a_script_with_dash_m_and_imported(tmp_path: Path, module: str) -> None:
    """Three launches of one program, each a process of its own, name its workflow alike in their headers (a
    script's functions belong to `__main__`: its name is taken from the file, under its package); then
    `harness resume --workflow` resumes the script's run by that name."""
    file = tmp_path / (module.replace(".", "/") + ".py")
    file.parent.mkdir(exist_ok=True)
    if "." in module:
        (file.parent / "__init__.py").write_text("")
    file.write_text(AGENT)
    runs = [tmp_path / f"{how}.jsonl" for how in ("script", "dash-m", "imported")]
    launches = [
        [str(file.relative_to(tmp_path)), runs[0]],
        ["-m", module, runs[1]],
        ["-c", f"import sys, {module} as m; m.main(sys.argv[1])", runs[2]],
    ]
    for args in launches:
        done = subprocess.run([sys.executable, *map(str, args)], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout == f"{module}:research PAUSED\n", done.stdout + done.stderr
    assert {json.loads(t.read_text().splitlines()[0])["workflow"] for t in runs} == {f"{module}:research"}
    resume = ["resume", runs[0], "--workflow", f"{module}:research", "--answer", "true"]
    done = subprocess.run([sys.executable, "-m", "harness.cli", *resume], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr
    assert replay(runs[0]).returned == {"found": {"query": "llamas", "hits": 3}, "ok": True}


def test_a_workflow_of_a_program_with_no_file_keeps_main_as_its_module(tmp_path: Path) -> None:
    """`python -c` has no module file: nothing else could launch that function, and its name says so."""
    code = "import harness\n@harness.workflow\ndef research(topic):\n    return topic\nprint(research.name)"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout == "__main__:research\n"
