"""Runs as OpenTelemetry GenAI spans: `harness export --otlp` (OTLP/JSON lines) and `--otlp-endpoint` (OTLP/HTTP).

Every line written is decoded with opentelemetry-proto's own classes (tests/otlp_receiver.py's `parsed()`,
independently of harness's code). The run checked span by span is
tests/billed_agent.py's: model calls over real HTTP, SIGKILLed twice, resumed twice, then forked. The endpoint
tests send to a real OTLP/HTTP receiver on 127.0.0.1 that decodes each request with opentelemetry-proto.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import billed_agent
import pytest
from billed_agent import ANSWERED_BY, BilledServer, crash_twice, one_run
from hypothesis import given, settings
from hypothesis import strategies as st
from otlp_receiver import Receiver, parsed

import harness
from harness.cli import main
from harness.ops.otlp import _attrs, span_id, spans, trace_id
from harness.ops.otlp_http import send


def lines(path: Path) -> list[dict[str, Any]]:
    out = [json.loads(line) for line in path.read_text().splitlines()]
    for data in out:
        parsed(data)
    return out


def span_list(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    def plain(v: dict[str, Any]) -> Any:
        (kind, x), *_ = v.items()
        return int(x) if kind == "intValue" else [plain(y) for y in x["values"]] if kind == "arrayValue" else x

    return {a["key"]: plain(a["value"]) for a in span["attributes"]}


@pytest.fixture
def server() -> Iterator[BilledServer]:
    yield from billed_agent.serving()


@pytest.fixture
def crashed(tmp_path: Path, server: BilledServer) -> tuple[Path, list[bytes]]:
    """The billed run, SIGKILLed twice and resumed to its end; its trace and its bytes after each process."""
    trace = tmp_path / "run.jsonl"
    return trace, crash_twice(trace, server)


def test_a_crashed_resumed_run_as_spans(crashed: tuple[Path, list[bytes]], server: BilledServer) -> None:
    trace, _ = crashed
    assert server.billed == 2  # each model call answered once: the resumes served them
    request = spans(trace)
    parsed(request)
    run_id = harness.replay(trace).run_id
    found = span_list(request)
    root = found[0]
    assert root["name"] == "invoke_workflow shop" and "parentSpanId" not in root
    assert root["traceId"] == trace_id(run_id) and root["spanId"] == span_id(run_id, 1)
    assert root["status"] == {"code": 1}
    assert attrs(root)["gen_ai.operation.name"] == "invoke_workflow"
    assert attrs(root)["harness.resumes"] == 2 and attrs(root)["harness.state"] == "DONE"
    assert [e["name"] for e in root["events"]] == ["harness.resume", "harness.resume"]

    names = [s["name"] for s in found[1:]]
    assert names == ["chat gpt-4o-mini", "execute_tool reserve", "chat gpt-4o-mini", "execute_tool ship"]
    for s in found:
        a = attrs(s)
        assert a["harness.run_id"] == run_id and a["harness.served"] is False  # all made live when recorded
        assert s["traceId"] == root["traceId"] and s["spanId"] == span_id(run_id, a["harness.seq"])
        if s is not root:
            assert s["parentSpanId"] == root["spanId"]
    chats = [attrs(s) for s in found if s["name"].startswith("chat")]
    assert [(c["gen_ai.usage.input_tokens"], c["gen_ai.usage.output_tokens"]) for c in chats] == [(101, 7), (102, 7)]
    for c in chats:
        assert c["gen_ai.provider.name"] == "openai" and c["gen_ai.operation.name"] == "chat"
        assert (c["gen_ai.request.model"], c["gen_ai.response.model"]) == ("gpt-4o-mini", ANSWERED_BY)
        assert c["gen_ai.usage.cache_read.input_tokens"] == 40 and c["gen_ai.response.finish_reasons"] == ["stop"]
        assert "gen_ai.input.messages" not in c and "gen_ai.output.messages" not in c  # content: only when asked
    ship = next(s for s in found if s["name"] == "execute_tool ship")
    assert attrs(ship)["gen_ai.tool.name"] == "ship" and attrs(ship)["harness.tool.effect"] == "idempotent"
    assert [e["name"] for e in ship["events"]] == ["harness.resume"]  # it was in flight across the second seam
    assert ship["status"] == {"code": 1}
    resume_seqs = [attrs_of(e)["harness.seq"] for e in root["events"]]
    chat_seqs = [c["harness.seq"] for c in chats]
    assert chat_seqs[0] < resume_seqs[0] < chat_seqs[1] < resume_seqs[1]  # the records after a resume: live


def attrs_of(event: dict[str, Any]) -> dict[str, Any]:
    return attrs(event)


def test_ids_are_the_same_on_export_again_and_after_the_resume(
    crashed: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    trace, snapshots = crashed
    early = tmp_path / "first-process.jsonl"
    early.write_bytes(snapshots[0])  # the run as the first process left it, SIGKILLed after its first model call
    before, after = span_list(spans(early)), span_list(spans(trace))
    by_seq = {attrs(s)["harness.seq"]: s for s in after}
    assert len(before) == 2  # the root and the first model call
    for s in before:
        same = by_seq[attrs(s)["harness.seq"]]
        assert (s["traceId"], s["spanId"], s["name"]) == (same["traceId"], same["spanId"], same["name"])
    out1, out2 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main(["export", str(trace), "--otlp", str(out1)]) == 0
    assert main(["export", str(trace), "--otlp", str(out2)]) == 0
    assert out1.read_bytes() == out2.read_bytes()  # deterministic: a backend de-duplicates a second export


def test_a_fork_and_a_rerun_link_to_their_parent_and_mark_what_they_served(
    crashed: tuple[Path, list[bytes]], tmp_path: Path, server: BilledServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, _ = crashed
    monkeypatch.setenv("BILLED_MODEL", server.url)
    parent = harness.replay(trace).run_id
    second = [c for c in harness.replay(trace).crossings if c.kind == "http"][1]
    fork = tmp_path / "fork.jsonl"
    harness.fork(trace, at=second.seq, set={"body.choices[0].message.content": "ship nothing"},
                 workflow=billed_agent.shop, out=fork)  # fmt: skip
    rerun = tmp_path / "rerun.jsonl"
    harness.rerun(trace, workflow=billed_agent.shop, out=rerun)
    assert server.billed == 2  # neither called the model

    out = tmp_path / "spans.jsonl"
    assert main(["export", str(trace), str(fork), str(rerun), "--otlp", str(out)]) == 0
    recorded, forked, rerun_spans = (span_list(r) for r in lines(out))
    for run in (forked, rerun_spans):
        root = run[0]
        assert root["traceId"] != recorded[0]["traceId"]  # a run of its own
        assert [(k["traceId"], k["spanId"]) for k in root["links"]] == [(trace_id(parent), span_id(parent, 1))]
    served = {s["name"] + f"@{attrs(s)['harness.seq']}": attrs(s)["harness.served"] for s in forked[1:]}
    chats = [s for s in forked if s["name"].startswith("chat")]
    assert [attrs(c)["harness.served"] for c in chats] == [True, False]  # the first served, the branch not
    assert attrs(chats[1]).get("harness.answered") is True
    # no served or answered call is billed again: its recorded tokens are harness's, not gen_ai.usage
    assert not any("gen_ai.usage.input_tokens" in attrs(c) for c in chats)
    assert all("harness.recorded_usage.input_tokens" in attrs(c) for c in chats)
    ship = next(s for s in forked if s["name"] == "execute_tool ship")
    assert attrs(ship)["harness.served"] is False, served  # after the branch: ran live
    assert all(attrs(s)["harness.served"] for s in rerun_spans[1:])  # a rerun serves everything


def test_content_is_opt_in_and_redacted_again(crashed: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    trace, _ = crashed
    plain = span_list(spans(trace))
    assert not any("gen_ai.input.messages" in attrs(s) for s in plain)
    out = tmp_path / "content.jsonl"
    assert main(["export", str(trace), "--otlp", str(out), "--content", "--redact", "re:widgets"]) == 0
    found = span_list(lines(out)[0])
    chat = attrs(next(s for s in found if s["name"].startswith("chat")))
    said = json.loads(chat["gen_ai.input.messages"])
    assert said == [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": "which [REDACTED]?"}]},
    ]
    answered = json.loads(chat["gen_ai.output.messages"])
    assert answered[0]["role"] == "assistant" and answered[0]["finish_reason"] == "stop"
    assert answered[0]["parts"] == [{"type": "text", "content": "answer 1 to which [REDACTED]?"}]
    assert "widgets" in trace.read_text() and "widgets" not in out.read_text()
    assert "sk-billed-SECRET" not in out.read_text()
    tool = attrs(next(s for s in found if s["name"] == "execute_tool reserve"))
    assert json.loads(tool["gen_ai.tool.call.result"]) == {"reserved": "answer 1 to which [REDACTED]?"}


def test_every_kind_of_run_parses(tmp_path: Path) -> None:
    """An Executor's retries, a verifier's rejection and a pause answered; a Recorder; a workflow's agents."""
    from harness.testing import flaky

    tries = {"n": 0}

    def verify(step: Any, result: Any) -> bool:
        tries["n"] += 1
        return tries["n"] > 1  # the first result is rejected

    def plan(goal: Any, progress: list[Any]) -> Any:
        if len(progress) == 1 and not harness.interrupt("go on?"):
            return None
        return None if len(progress) >= 2 else harness.Step(f"s{len(progress)}", "work", {"i": len(progress)})

    ex = tmp_path / "executor.jsonl"
    agent = {"planner": plan, "tools": {"work": flaky(1)}, "verifier": verify, "retry": harness.RetryPolicy(backoff=0)}
    assert harness.Executor(**agent, trace=ex).run("g").state == "PAUSED"
    assert harness.Executor(**agent, trace=ex, resume=True).run("g", answer=True).state == "DONE"

    rec = tmp_path / "recorder.jsonl"
    with harness.Recorder(rec, entrypoint="loop.py") as r:
        r.log("input", {"q": "hi"})
        harness.llm({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, lambda req: "hello")

    team = tmp_path / "team.jsonl"
    assert TEAM.run(trace=team).state == "DONE"

    out = tmp_path / "all.jsonl"
    assert main(["export", str(tmp_path), "--otlp", str(out)]) == 0
    runs = lines(out)
    assert len(runs) == 3
    by_root = {span_list(r)[0]["name"]: span_list(r) for r in runs}
    executor = next(v for k, v in by_root.items() if k.startswith("invoke_agent") and k != "invoke_agent loop")
    tools = [s for s in executor if s["name"] == "execute_tool work"]
    assert [s["status"].get("code") for s in tools] == [2, 1, 1, 1]  # failed once, then OK (one rejected)
    events = [e["name"] for e in executor[0]["events"]]
    assert {"harness.pause", "harness.answer", "harness.resume", "harness.verification_failed"} <= set(events)
    recorder = by_root["invoke_agent loop"]
    assert [s["name"] for s in recorder] == ["invoke_agent loop", "chat m"]
    assert [e["name"] for e in recorder[0]["events"]] == ["harness.event"]
    spans_of_team = by_root["invoke_workflow team"]
    agents = {s["name"]: s for s in spans_of_team if s["name"].startswith("invoke_agent")}
    assert set(agents) == {"invoke_agent a", "invoke_agent b"}
    assert all(a["status"] == {"code": 1} for a in agents.values())
    drawn = [s for s in spans_of_team if s["name"] == "random"]
    assert len(drawn) == 2 and {s["parentSpanId"] for s in drawn} == {a["spanId"] for a in agents.values()}


def _scout(name: str) -> float:
    return harness.random()


@harness.workflow
def team() -> list[float]:
    a, b = harness.spawn("a", _scout, "a"), harness.spawn("b", _scout, "b")
    return list(harness.join(a, b))


TEAM = team


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )
)
def test_any_attribute_value_decodes(value: Any) -> None:
    """Whatever a record holds, the attribute harness makes of it is a valid OTLP AnyValue."""
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "x", "kind": 1, "status": {},
            "startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": _attrs({"v": value})}  # fmt: skip
    parsed({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [span]}]}]})


# --- the endpoint: a real OTLP/HTTP receiver on 127.0.0.1 ------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_the_endpoint_receives_the_same_spans(
    crashed: tuple[Path, list[bytes]], receiver: Receiver, protocol: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, _ = crashed
    code = main(["export", str(trace), "--otlp-endpoint", receiver.url, "--otlp-protocol", protocol,
                 "--otlp-header", "x-api-key=k1"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert receiver.kinds == ["application/x-protobuf" if protocol == "http/protobuf" else "application/json"]
    assert receiver.headers[0]["x-api-key"] == "k1"
    expected = parsed(spans(trace))
    assert receiver.got == [expected]  # the very spans the file export writes
    names = [s.name for s in receiver.spans()]
    assert names[0] == "invoke_workflow shop" and names.count("chat gpt-4o-mini") == 2


def test_batches_hold_whole_runs(tmp_path: Path, receiver: Receiver) -> None:
    for i in range(3):
        one_run(tmp_path / f"r{i}.jsonl", steps=2)
    done = send([tmp_path], receiver.url, batch=4)
    assert (done.runs, done.spans, done.requests) == (3, 9, 3)  # 3 spans a run: 2 fit a batch of 4 alone
    traces = [{s.trace_id for rs in m.resource_spans for ss in rs.scope_spans for s in ss.spans} for m in receiver.got]
    assert all(len(t) == 1 for t in traces) and len(set().union(*traces)) == 3
    done = send([tmp_path], receiver.url, batch=100)
    assert done.requests == 1 and len(receiver.got) == 4


def test_a_busy_endpoint_is_tried_again(tmp_path: Path) -> None:
    r = Receiver(fail=[503, 429])
    try:
        trace = one_run(tmp_path / "r.jsonl")
        done = send([trace], r.url, attempts=3, backoff=0.01)
        assert done.runs == 1 and len(r.got) == 1 and r.fail == []
    finally:
        r.stop()


def test_an_endpoint_that_is_down_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = Receiver()
    url = r.url
    r.stop()  # its port closed: connections are refused
    trace = one_run(tmp_path / "r.jsonl")
    code = main(["export", str(trace), "--otlp-endpoint", url, "--retries", "2"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{url}/v1/traces: spans not delivered (cannot connect" in err and "after 2 attempt(s)" in err
    assert "0 run(s) were sent" in err and "Traceback" not in err


def test_an_endpoint_that_refuses_the_request_is_not_tried_again(tmp_path: Path) -> None:
    r = Receiver(fail=[400, 400])
    try:
        trace = one_run(tmp_path / "r.jsonl")
        with pytest.raises(harness.HarnessError, match="HTTP 400"):
            send([trace], r.url, attempts=5, backoff=0.01)
        assert r.fail == [400]  # asked once: a 400 is final
    finally:
        r.stop()


def test_bad_options_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = one_run(tmp_path / "r.jsonl")
    assert main(["export", str(trace)]) == 2
    assert "give one of -o ZIP" in capsys.readouterr().err
    assert main(["export", str(trace), "--otlp-endpoint", "localhost:4318"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err
    out = tmp_path / "out.jsonl"
    assert main(["export", str(trace), str(tmp_path / "missing.jsonl"), "--otlp", str(out)]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]  # nothing left behind


def test_a_damaged_line_is_named_and_nothing_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = one_run(tmp_path / "r.jsonl", steps=2)
    data = trace.read_bytes().split(b"\n")
    data[3] = data[3].replace(b'"step":0', b'"step":7')  # an edit: the checksum no longer chains
    trace.write_bytes(b"\n".join(data))
    out = tmp_path / "out.jsonl"
    assert main(["export", str(trace), "--otlp", str(out)]) == 2
    assert f"{trace}:4: crc" in capsys.readouterr().err and not out.exists()
    assert main(["cost", str(trace)]) == 2
    assert f"{trace}:4: crc" in capsys.readouterr().err


def test_a_torn_tail_is_left_out_as_replay_leaves_it(tmp_path: Path) -> None:
    trace = one_run(tmp_path / "r.jsonl", steps=2)
    whole = span_list(spans(trace))
    trace.write_bytes(trace.read_bytes() + b'{"seq":99,"kind":"cra')  # a writer died mid-line
    assert span_list(spans(trace)) == whole


def test_check_reads_through_replay_and_refuses_a_story_that_cannot_be_true(tmp_path: Path) -> None:
    """By default export checks the checksum chain (accidents); --check runs replay()'s rules too (a forgery)."""
    from harness.testing import read_records, write_trace

    trace = one_run(tmp_path / "r.jsonl", steps=2)
    records = [r for r in read_records(trace) if r["kind"] != "seal"]
    forged = tmp_path / "forged.jsonl"
    kept = [r for r in records if not (r["kind"] == "transition" and r["to"] == "VERIFY")]  # checkpoints of nothing
    write_trace(forged, [{**r, "seq": i} for i, r in enumerate(kept, start=1)])
    assert span_list(spans(forged))  # its chain is whole: exported as it reads
    with pytest.raises(harness.TraceCorruption):
        spans(forged, full=True)
    assert main(["export", str(forged), "--check", "--otlp", str(tmp_path / "o.jsonl")]) == 2
    assert main(["cost", str(forged), "--check"]) == 2


def crossing(boundary: str, request: Any, response: Any) -> dict[str, Any]:
    return {"seq": 3, "kind": "crossing", "boundary": boundary, "request": request, "hash": "0", "response": response}


CALL = {"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "x"}}
ANSWER = {"type": "tool_call_response", "id": "c1", "response": "found"}


@pytest.mark.parametrize(
    ("rec", "sent", "got"),
    [
        (crossing("llm", {"model": "m", "messages": [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "found"}]},
            {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}),
         [{"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
          {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
          {"role": "assistant", "parts": [CALL]}, {"role": "tool", "parts": [ANSWER]}],
         [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "finish_reason": "stop"}]),
        (crossing("openai_agents.model", {"model": "m", "instructions": "Be brief.", "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q": "x"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "found"}]},
            {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
             "usage": {"input_tokens": 1, "output_tokens": 1}}),
         [{"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
          {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
          {"role": "assistant", "parts": [CALL]}, {"role": "tool", "parts": [ANSWER]}],
         [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "finish_reason": "stop"}]),
        (crossing("pydantic_ai.model", {"op": "a__model.request", "new": [
            {"kind": "request", "parts": [{"part_kind": "system-prompt", "content": "Be brief."},
                                          {"part_kind": "user-prompt", "content": "hi"}]},
            {"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": "search", "args": {"q": "x"},
                                            "tool_call_id": "c1"}]},
            {"kind": "request", "parts": [{"part_kind": "tool-return", "tool_name": "search", "content": "found",
                                           "tool_call_id": "c1"}]}]},
            {"kind": "response", "parts": [{"part_kind": "text", "content": "ok"}], "finish_reason": "stop"}),
         [{"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
          {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
          {"role": "assistant", "parts": [CALL]}, {"role": "tool", "parts": [ANSWER]}],
         [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "finish_reason": "stop"}]),
        (crossing("http", {"method": "POST", "url": "https://api.anthropic.com/v1/messages", "body": {
            "model": "claude", "system": "Be brief.", "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant",
                 "content": [{"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "x"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "found"}]}]}},
            {"status": 200, "body": {"type": "message", "content": [{"type": "text", "text": "ok"}],
                                     "stop_reason": "end_turn"}}),
         [{"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
          {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
          {"role": "assistant", "parts": [CALL]}, {"role": "user", "parts": [ANSWER]}],
         [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "finish_reason": "end_turn"}]),
    ],
)  # fmt: skip
def test_each_doors_messages_in_the_conventions_shape(rec: dict[str, Any], sent: Any, got: Any) -> None:
    from harness.review.calls import messages_in, messages_out

    assert messages_in(rec) == sent
    assert messages_out(rec) == got


def test_a_crash_record_and_its_resume_are_events_of_the_root(tmp_path: Path) -> None:
    trace = tmp_path / "r.jsonl"
    calls = {"n": 0}

    def plan(goal: Any, progress: list[Any]) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("the planner fell over")
        return None if len(progress) >= 2 else harness.Step(f"s{len(progress)}", "work", {"i": len(progress)})

    tools = {"work": harness.testing.counter()}
    with pytest.raises(RuntimeError):
        harness.Executor(planner=plan, tools=tools, trace=trace).run("g")
    assert harness.Executor(planner=plan, tools=tools, trace=trace, resume=True).run("g").state == "DONE"
    root = span_list(spans(trace))[0]
    events = {e["name"]: attrs(e) for e in root["events"]}
    assert list(events) == ["harness.crash", "harness.resume"]
    crash = events["harness.crash"]
    assert crash["exception.type"] == "builtins.RuntimeError" and crash["exception.message"] == "the planner fell over"
    assert "Traceback" in crash["exception.stacktrace"] or "RuntimeError" in crash["exception.stacktrace"]
    assert crash["harness.seq"] < events["harness.resume"]["harness.seq"]
    assert root["status"] == {"code": 1} and attrs(root)["harness.resumes"] == 1


def test_protobuf_without_the_extra_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.trace.v1.trace_service_pb2", None)  # not installed
    r = Receiver()
    try:
        trace = one_run(tmp_path / "r.jsonl")
        assert main(["export", str(trace), "--otlp-endpoint", r.url]) == 2
        err = capsys.readouterr().err
        assert "pip install 'harness-trace[otel]'" in err and "--otlp-protocol http/json" in err and not r.got
        assert main(["export", str(trace), "--otlp-endpoint", r.url, "--otlp-protocol", "http/json"]) == 0
        assert len(r.got) == 1
    finally:
        r.stop()
