"""The behavior view: what an agent did, the same bytes however the servers and the scheduler behaved.

Every door against servers that make up fresh ids, times and latencies on
every call (tests/chat_server.py and agent_server.py with `fresh=True`, real
sockets on 127.0.0.1, the real openai client and the frameworks' real
classes): two runs normalize to identical bytes, while their raw records
differ. Gathered calls over real sockets, eight runs, give one view; a diff
of two Pydantic AI runs that differ in one tool argument says only that.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from agent_server import AgentServer
from chat_server import ChatServer
from hypothesis import given, settings
from hypothesis import strategies as st

import harness
from harness.review.behavior import Behavior, model_calls, tool_calls
from harness.review.normalize import behave, by_task

httpx = pytest.importorskip("httpx", reason="harness.http needs httpx: pip install -e '.[test]'")
openai = pytest.importorskip("openai", reason="the doors are driven by the real openai client")

import stream_agent  # noqa: E402  # after the skips: it needs both

from harness import Executor  # noqa: E402
from harness import http as hhttp  # noqa: E402

pytestmark = pytest.mark.xdist_group("frameworks")  # the framework doors import the frameworks: one worker does


def view_bytes(trace: Path, **options: Any) -> bytes:
    """The view's bytes; a goal that names the test server's URL (its port is the test's, not the agent's: a port
    outside an exchange with a server counts, as in a tool's args) left out."""
    ignore = ["goal.args[0]"] if b'"workflow"' in trace.read_bytes()[:4096] else None
    return b"\n".join(orjson.dumps(r) for r in harness.normalize(trace, ignore=ignore, **options))


# --- the doors --------------------------------------------------------------------------------------------------


@harness.workflow
async def gathered(url: str, questions: list[str]) -> list[str]:
    """Three questions asked at once (asyncio.gather) through harness.http: they start, and end, in any order."""
    transport = hhttp.async_transport()
    async with openai.AsyncOpenAI(
        base_url=url + "/v1", api_key="sk-test-x", max_retries=0, http_client=httpx.AsyncClient(transport=transport)
    ) as client:

        async def ask(question: str) -> str:
            await asyncio.sleep(random.uniform(0, 0.03))  # as a real client's request waits to leave: any order
            reply = await client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": question}], temperature=0
            )
            return reply.choices[0].message.content or ""

        return list(await asyncio.gather(*(ask(q) for q in questions)))


def run_http(api: str, asynchronous: bool) -> Any:
    def run(trace: Path) -> None:
        with_server = ChatServer(fresh=True)
        try:
            planner, tools, _ = stream_agent.make_agent(with_server.url, api, asynchronous)
            out = Executor(planner=planner, tools=tools, trace=trace).run({"questions": stream_agent.QUESTIONS[:2]})
            assert out.state == "DONE"
        finally:
            with_server.stop()

    return run


def run_gathered(trace: Path) -> None:
    server = ChatServer(fresh=True)
    try:
        assert gathered.run(server.url, ["tides", "rock pools", "anemones"], trace=trace).state == "DONE"
    finally:
        server.stop()


def run_framework(flow: str, *args: str) -> Any:
    def run(trace: Path) -> None:
        import framework_agent

        server = AgentServer(fresh=True)
        try:
            assert getattr(framework_agent, flow).run(server.url, *args, trace=trace).state == "DONE"
        finally:
            server.stop()

    return run


@harness.workflow
async def oa_streamed(url: str) -> str:
    """The Agents SDK agent of tests/framework_agent.py, its model calls streamed (`openai_agents.stream`)."""
    import framework_agent

    from harness.openai_agents import Runner

    result = Runner.run_streamed(framework_agent.oa_agent(url), "charge twice")
    async for _ in result.stream_events():
        pass
    return str(result.final_output)


def run_oa_streamed(trace: Path) -> None:
    server = AgentServer(fresh=True)
    try:
        assert oa_streamed.run(server.url, trace=trace).result == "done after 2 tools"
    finally:
        server.stop()


def run_mcp(trace: Path) -> None:
    """A workflow over a real MCP server over stdio (tests/mcp_server.py): its idempotent call's key names the run."""
    import mcp_agent

    assert mcp_agent.support.run(7, trace=trace).state == "DONE"


DOORS = {
    "executor-http-chat": run_http("chat", False),
    "executor-http-async": run_http("chat", True),
    "executor-http-responses": run_http("responses", False),
    "workflow-http-gather": run_gathered,
    "pydantic-ai-function": run_framework("pai_flow", "function"),
    "pydantic-ai-openai": run_framework("pai_flow", "openai"),
    "pydantic-ai-stream": run_framework("pai_flow", "openai-stream"),
    "agents-sdk": run_framework("oa_flow"),
    "agents-sdk-stream": run_oa_streamed,
    "workflow-mcp": run_mcp,
}


@pytest.fixture(autouse=True)
def tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRAMEWORK_LOG", str(tmp_path / "tools.log"))
    monkeypatch.setenv("MCP_SERVER", str(Path(__file__).with_name("mcp_server.py")))  # for tests/mcp_agent.py
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "mcp-tools.log"))


@pytest.mark.parametrize("door", list(DOORS))
def test_two_runs_against_servers_that_make_up_ids_times_and_latency_give_the_same_bytes(
    door: str, tmp_path: Path
) -> None:
    traces = [tmp_path / "1.jsonl", tmp_path / "2.jsonl"]
    for trace in traces:
        DOORS[door](trace)
    assert view_bytes(traces[0]) == view_bytes(traces[1])
    raw = [view_bytes(t, view="raw", defaults=False) for t in traces]
    assert raw[0] != raw[1]  # what the servers made up
    calls = list(model_calls(harness.normalize(traces[0])))
    assert all(c["kind"] == "model_call" and "messages" in c for c in calls) and (calls or door == "workflow-mcp")
    text = traces[0].read_text()
    raw_ids = {w for w in ("chatcmpl-", "call_", "resp_", "pyd_ai_") if w in text}
    shown = view_bytes(traces[0]).decode()
    assert not any(w in shown for w in raw_ids)  # no made-up id reaches the view
    assert '"timestamp"' not in shown and '"duration"' not in shown and '"history":"' not in shown


def test_a_tool_result_points_to_the_call_that_asked_for_it(tmp_path: Path) -> None:
    run_framework("oa_flow")(tmp_path / "run.jsonl")
    calls = list(model_calls(harness.normalize(tmp_path / "run.jsonl")))
    asked = [c["id"] for m in calls if "reply" in m for c in m["reply"].get("tool_calls", [])]
    answered = [m["call"] for c in calls for m in c["messages"] if m["role"] == "tool"]
    assert asked == answered == ["call-1", "call-2"]
    assert [m["name"] for c in calls for m in c["messages"] if m["role"] == "tool"] == ["charge", "charge"]
    assert [c.get("history", 0) for c in calls] == [0, 3, 5]  # each call shows what is new, not the history again
    assert [t["tool"] for t in tool_calls(harness.normalize(tmp_path / "run.jsonl"))] == ["charge", "charge"]


# --- concurrent calls -------------------------------------------------------------------------------------------


def test_eight_runs_of_gathered_calls_over_real_sockets_give_one_view(tmp_path: Path) -> None:
    views, finished = set(), []
    for n in range(8):
        trace = tmp_path / f"{n}.jsonl"
        run_gathered(trace)
        views.add(view_bytes(trace))
        finished.append([r["task"] for r in map(json.loads, trace.read_text().splitlines()) if "task" in r])
    assert len(views) == 1
    (view,) = views
    said = [m["reply"]["text"] for m in map(json.loads, view.splitlines()) if m["kind"] == "model_call"]
    assert said == ["echo: tides", "echo: rock pools", "echo: anemones"]  # the order the tasks were created in
    assert all(sorted(order) == ["1", "2", "3"] for order in finished)  # each run wrote them as they started


def test_a_concurrent_call_s_view_is_its_task_s_place_and_each_task_keeps_its_own_order() -> None:
    def call(task: str, request: str) -> dict[str, Any]:
        return {"kind": "crossing", "task": task, "boundary": "llm", "request": request, "response": 1}

    records: list[dict[str, Any]] = [
        {"kind": "header"}, call("2", "b1"), call("1", "a1"), call("2.1", "b-sub"), call("2", "b2 after its sub"),
        call("1", "a2"), {"kind": "transition", "from": "PLAN", "to": "DONE", "step": 0}, call("1", "c"),
    ]  # fmt: skip
    in_view = [records[i].get("request") for i in by_task(records)]
    assert in_view == [None, "a1", "a2", "b1", "b-sub", "b2 after its sub", None, "c"]


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_interleaving_of_concurrent_tasks_gives_one_order(data: st.DataObject) -> None:
    """Tasks 1..k each make a few calls (some in a subtask they await): however they interleave, one view."""
    k = data.draw(st.integers(1, 4))
    own: list[list[tuple[str, str]]] = []  # each task's records in its program order
    for t in range(1, k + 1):
        calls = data.draw(st.lists(st.sampled_from([f"{t}", f"{t}.1"]), min_size=1, max_size=4))
        own.append([(task, f"t{t}-{n}") for n, task in enumerate(calls)])
    rest, merged = [list(x) for x in own], []
    while any(rest):
        pick = data.draw(st.sampled_from([i for i, r in enumerate(rest) if r]))
        merged.append(rest[pick].pop(0))
    records = [{"kind": "crossing", "task": t, "boundary": "llm", "request": r} for t, r in merged]
    in_view = [records[i]["request"] for i in by_task(records)]
    assert in_view == [r for calls in own for _, r in calls]  # task by task, each in its own order


def test_a_call_found_elsewhere_is_reported_as_moved(tmp_path: Path) -> None:
    def trace(order: list[str]) -> list[dict[str, Any]]:
        calls = [{"kind": "crossing", "boundary": "llm", "request": q, "response": q.upper()} for q in order]
        return [{"kind": "header", "run_id": "x"}, *calls, {"kind": "transition", "from": "PLAN", "to": "DONE"}]

    result = harness.diff(trace(["a", "b", "c", "d"]), trace(["b", "c", "a", "d"]))
    assert [(m.op, m.seq_a, m.seq_b) for m in result.moved] == [("moved", 2, 4)]
    assert result.counts() == "0 changed, 0 inserted, 0 removed, 1 moved"
    assert "moved seq 4 (a seq 2)" in result.text() or result.text().startswith("first difference at seq 4 (a seq 2)")


# --- review: one change, said once --------------------------------------------------------------------------------


def test_a_diff_of_two_pydantic_ai_runs_that_differ_in_one_tool_argument_prints_that_change_alone(
    tmp_path: Path,
) -> None:
    import framework_agent

    traces = [tmp_path / "b1.jsonl", tmp_path / "b2.jsonl"]
    for trace, b in zip(traces, (1, 2), strict=True):
        server = AgentServer(fresh=True, b=b, tools=1)
        try:
            framework_agent.pai_flow.run(server.url, "openai", trace=trace)
        finally:
            server.stop()
    result = harness.diff(*traces, ignore="goal.args[0]")  # the goal names each test server's URL
    changes = [(c.field, c.old, c.new) for m in result.moved for c in m.changes]
    # the model asked for b=2, and the tool was called with it (its result, a + b, follows); nothing else differs
    assert [m.op for m in result.moved] == ["changed"] * len(result.moved)
    assert changes == [
        ("reply.tool_calls[0].args.b", 1, 2),
        ("args.b", 1, 2),
        ("result.result", 1, 2),
        ("messages[0].result", 1, 2),
    ]
    assert len(result.text().splitlines()) == 1 + len(changes) + 3  # the headline, each change, 3 record lines
    raw = harness.diff(*traces, ignore="goal.args[0]", view="raw")
    assert sum(len(m.changes) for m in raw.moved) > len(changes)  # the raw view: ids, times, durations, ...


# --- the view's own rules ---------------------------------------------------------------------------------------


def chat_exchange(ids: list[str]) -> list[dict[str, Any]]:
    """Records of a conversation over harness.http whose made-up tool call ids are `ids`."""
    url = "http://127.0.0.1:9/v1/chat/completions"
    out: list[dict[str, Any]] = [{"kind": "header", "run_id": "run-0123456789"}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n, call_id in enumerate(ids):
        call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": json.dumps({"n": n})}}
        reply = {"role": "assistant", "content": None, "tool_calls": [call]}
        body = {"object": "chat.completion", "id": f"chatcmpl-{call_id}", "model": "m",
                "choices": [{"index": 0, "message": reply, "finish_reason": "tool_calls"}]}  # fmt: skip
        request = {"method": "POST", "url": url, "body": {"model": "m", "messages": list(messages)}}
        out.append({"kind": "crossing", "boundary": "http", "request": request,
                    "response": {"status": 200, "headers": {}, "body": body}})  # fmt: skip
        messages += [reply, {"role": "tool", "tool_call_id": call_id, "content": str(n)}]
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=5, unique=True), st.data())
def test_made_up_tool_call_ids_never_change_the_view(ids: list[str], data: st.DataObject) -> None:
    others = data.draw(st.lists(st.text(min_size=1, max_size=12), min_size=len(ids), max_size=len(ids), unique=True))
    assert harness.normalize(chat_exchange(ids)) == harness.normalize(chat_exchange(others))
    view = harness.normalize(chat_exchange(ids))
    calls = list(model_calls(view))
    assert [c["reply"]["tool_calls"][0]["id"] for c in calls] == [f"call-{n + 1}" for n in range(len(ids))]
    assert [c["messages"] for c in calls[1:]] == [
        [{"call": f"call-{n}", "name": "f", "result": str(n - 1), "role": "tool"}] for n in range(1, len(ids))
    ]


def test_the_view_is_stable_on_its_own_output_and_leaves_other_records_alone() -> None:
    records = chat_exchange(["a", "b"])
    view = harness.normalize(records)
    assert harness.normalize(view) == view
    assert Behavior().view({"kind": "crossing", "boundary": "llm", "request": 1, "response": 2}) is None
    odd = {"kind": "crossing", "boundary": "http", "request": {"url": "http://x/v1/chat/completions", "body": []}}
    assert Behavior().view(odd) is None  # a shape it does not read: shown as it is, never an exception
    assert behave([odd]) == [odd]


def test_the_raw_view_is_today_s_view() -> None:
    records = chat_exchange(["a"])
    raw = harness.normalize(records, view="raw")
    assert raw[1]["kind"] == "crossing" and raw[1]["response"]["body"]["id"] == "<ignored>"
    with pytest.raises(harness.HarnessError, match="view must be one of 'behavior', 'raw'"):
        harness.normalize(records, view="pretty")


def test_show_prints_a_model_call_as_its_new_messages_and_what_it_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "run.jsonl"
    run_framework("oa_flow")(trace)  # the Agents SDK sends the whole conversation on every call
    assert trace.read_text().count('"content":"charge twice"') == 3
    from harness import cli

    assert cli.main(["show", str(trace), "--width", "120"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("charge twice") == 1  # the prompt once, where it was new; not again with every call
    assert 'said=→ charge {"a":0,"b":1}' in shown and "said=done after 2 tools" in shown
    assert "chatcmpl-" not in shown and "__fake_id__" not in shown and "provider_data" not in shown
    calls = [n for n, line in enumerate(shown.splitlines()) if 'model call "stub-model"' in line]
    assert len(calls) == 3 and all(b - a < 24 for a, b in itertools.pairwise([*calls, len(shown.splitlines())]))


def test_a_model_call_the_server_refused_shows_what_came_back() -> None:
    request = {"method": "POST", "url": "http://127.0.0.1:9/v1/chat/completions",
               "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}  # fmt: skip
    refused = {"status": 429, "headers": {}, "body": {"error": {"message": "slow down"}}}
    (call,) = model_calls(harness.normalize([{"kind": "crossing", "boundary": "http", "request": request,
                                              "response": refused}]))  # fmt: skip
    assert "reply" not in call and call["error"] == {"status": 429, "body": {"error": {"message": "slow down"}}}
    gone = {"type": "httpx.ConnectError", "message": "refused"}
    (call,) = model_calls(harness.normalize([{"kind": "crossing", "boundary": "http", "request": request,
                                              "error": gone}]))  # fmt: skip
    assert call["error"] == gone and call["messages"] == [{"role": "user", "text": "hi"}]


def test_reasoning_text_stays_and_its_signature_and_ids_go() -> None:
    thinking = {"part_kind": "thinking", "content": "the user wants two charges", "id": "rs_9f", "signature": "c2ln"}
    call = {"part_kind": "tool-call", "tool_name": "charge", "args": {"a": 0}, "tool_call_id": "pyd_ai_" + "0" * 32}
    output = [{"name": "final_result", "parameters_json_schema": {"type": "object"}}]
    pai = {"kind": "crossing", "boundary": "pydantic_ai.model",
           "request": {"op": "m", "history": None, "new": [{"kind": "request", "parts": [
               {"part_kind": "user-prompt", "content": "charge"}]}], "settings": {"temperature": 0, "stop": ["END"]},
               "parameters": {"function_tools": [], "output_mode": "tool", "output_object": None,
                              "output_tools": output}},
           "response": {"kind": "response", "parts": [thinking, call], "model_name": "m", "finish_reason": "tool_call",
                        "provider_details": {"signature_version": 3}}}  # fmt: skip
    (view,) = model_calls(harness.normalize([pai]))
    assert view["reply"] == {
        "role": "assistant", "reasoning": "the user wants two charges",
        "tool_calls": [{"args": {"a": 0}, "id": "call-1", "name": "charge"}],
    }  # fmt: skip
    assert view["settings"] == {"stop": ["END"], "temperature": 0}
    assert view["output"] == {"mode": "tool", "tools": [{"name": "final_result", "parameters": {"type": "object"}}]}
    item = {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA", "summary": [{"type": "summary_text",
            "text": "look it up first"}]}  # fmt: skip
    body = {
        "object": "response",
        "id": "resp_1",
        "status": "completed",
        "model": "o4",
        "output": [
            item,
            {"type": "function_call", "id": "fc_1", "call_id": "call_x", "name": "look", "arguments": "{}"},
        ],
    }
    request = {"method": "POST", "url": "https://api.openai.com/v1/responses",
               "body": {"model": "o4", "input": "go", "reasoning": {"effort": "low"}}}  # fmt: skip
    http = {"kind": "crossing", "boundary": "http", "request": request,
            "response": {"status": 200, "headers": {}, "body": body}}  # fmt: skip
    (view,) = model_calls(harness.normalize([http]))
    assert view["reply"] == {
        "role": "assistant", "reasoning": "look it up first",
        "tool_calls": [{"args": {}, "id": "call-1", "name": "look"}],
    }  # fmt: skip
    assert view["settings"] == {"reasoning": {"effort": "low"}} and view["finish"] == "completed"
    assert b"gAAAA" not in orjson.dumps(view) and b"rs_" not in orjson.dumps(view)


# --- served, answered or live -----------------------------------------------------------------------------------


def origins(trace: Path) -> list[tuple[str, Any]]:
    """Each model call and each tool call (a step's intent) of a trace's view, with its origin (None: live)."""
    return [
        (r["kind"], r.get("origin"))
        for r in harness.normalize(trace, defaults=False)  # the default rules leave it out
        if r["kind"] == "model_call" or (r["kind"] == "transition" and r.get("to") == "ACT")
    ]


def test_a_fork_and_a_rerun_say_which_calls_were_served_answered_or_made_live(tmp_path: Path) -> None:
    import framework_agent

    trace, fork, rerun = tmp_path / "run.jsonl", tmp_path / "fork.jsonl", tmp_path / "rerun.jsonl"
    assert framework_agent.pai_flow.run("", "function", trace=trace).state == "DONE"
    models = [c for c in harness.replay(trace).crossings if c.kind == "pydantic_ai.model"]
    harness.fork(trace, at=models[1].seq, set={"parts[0].args.a": 40}, workflow=framework_agent.pai_flow, out=fork)
    harness.rerun(trace, workflow=framework_agent.pai_flow, out=rerun)
    plain = origins(trace)
    assert plain and all(o is None for _, o in plain)  # a run made live: the field is not written
    assert origins(fork) == [
        ("model_call", "served"), ("transition", "served"),  # before the branch: from the recording
        ("model_call", "answered"),  # the branch: answered by hand
        ("transition", None), ("model_call", None),  # after it: made live
    ]  # fmt: skip
    assert [o for _, o in origins(rerun)] == ["served"] * len(plain)
    assert [c.get("origin") for c in tool_calls(harness.normalize(fork, defaults=False))] == ["served", None]
    assert harness.diff(trace, rerun).equal  # by default a served call is the same call: a rerun equals its recording
    told = harness.diff(trace, rerun, defaults=False)
    assert not told.equal and "origin" in "\n".join(told.lines())  # compared when asked
    assert all("origin" not in r for r in harness.normalize(fork))


def test_a_golden_of_the_first_view_still_reads_and_says_why_a_served_call_differs(tmp_path: Path) -> None:
    import framework_agent

    from harness.review.normalize import GOLDEN_HEAD, Loaded, Rules, render

    trace, rerun = tmp_path / "run.jsonl", tmp_path / "rerun.jsonl"
    assert framework_agent.pai_flow.run("", "function", trace=trace).state == "DONE"
    harness.rerun(trace, workflow=framework_agent.pai_flow, out=rerun)
    old_head = GOLDEN_HEAD.replace('"view":2', '"view":1')
    assert old_head != GOLDEN_HEAD
    everything = Rules.of(defaults=False)
    served = render(harness.normalize(rerun, defaults=False), everything).split("\n", 1)[1]
    assert ',"origin":"served"' in served
    served = served.replace(',"origin":"served"', "")
    golden = tmp_path / "old.golden.jsonl"
    golden.write_text(old_head + "\n" + served)
    assert Loaded.golden(golden.read_text(), "old").note is not None
    lines = "\n".join(harness.diff(golden, rerun, defaults=False).lines())
    assert "behavior view v1" in lines and "origin" in lines
    assert harness.diff(golden, rerun).equal  # under the default rules `origin` is not compared
    plain = render(harness.normalize(trace, defaults=False), everything).split("\n", 1)[1]
    golden.write_text(old_head + "\n" + plain)
    assert harness.diff(golden, trace, defaults=False).equal  # a run made live: its view 1 golden still holds
