"""harness.expect(): readable assertions on what a run did, on real traces of every door.

An Executor with harness.llm(), a workflow with @harness.tool and harness.call (retries, a failure, a crash, a
pause, a torn tail), harness.http against a real chat-completions server on 127.0.0.1, a real MCP server (the
SDK's in-memory client, and a stdio server forked from the tests' zygote) inside a workflow and inside an
Executor's planner, Pydantic AI (its FunctionModel; a Recorder) and the OpenAI Agents SDK (over a real server).
The four tool modes are checked against a reference implementation with hypothesis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness
from harness import ANY, Executor, ExpectationFailed, Step, expect
from harness.review.expect import Calls, Expectation, ToolCall
from harness.testing import FakeLLM, power_cut

TESTS = Path(__file__).resolve().parent


def answer(text: str, tokens: int) -> dict[str, Any]:
    return {"model": "m-1", "text": text, "usage": {"prompt_tokens": tokens - 1, "completion_tokens": 1}}


def shop_run(trace: Path, plan: list[tuple[str, dict[str, Any]]], tools: dict[str, Any] | None = None) -> Any:
    """An Executor whose planner asks harness.llm() before each step (10 tokens a call) and runs `plan`."""
    model = FakeLLM(lambda request: answer("ok", 10))

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        harness.llm({"model": "m-1", "prompt": f"step {len(progress)}"}, model)
        if len(progress) == len(plan):
            return None
        tool, args = plan[len(progress)]
        return Step(tool, tool, args)

    tools = tools or {name: (lambda **a: {"ok": True, **a}) for name, _ in plan}
    return Executor(planner=planner, tools=tools, trace=trace).run("shop")


PLAN = [("search", {"q": "tide pools", "limit": 5}), ("send_email", {"to": "ann@example.com"}), ("search", {"q": "x"})]


@pytest.fixture
def shop(tmp_path: Path) -> Any:
    return shop_run(tmp_path / "run.jsonl", PLAN)


def failure(rule: Any) -> ExpectationFailed:
    with pytest.raises(ExpectationFailed) as info:
        rule()
    assert isinstance(info.value, AssertionError) and isinstance(info.value, harness.HarnessError)
    return info.value


# --- the calls ------------------------------------------------------------------------------------------------


def test_an_executors_calls_are_read_with_their_seq_args_results_and_tokens(shop: Any) -> None:
    e = expect(shop)
    records = harness.testing.read_records(shop.trace)
    assert [(c.name, c.args, c.result, c.served) for c in e.tool_calls] == [
        ("search", {"q": "tide pools", "limit": 5}, {"ok": True, "q": "tide pools", "limit": 5}, False),
        ("send_email", {"to": "ann@example.com"}, {"ok": True, "to": "ann@example.com"}, False),
        ("search", {"q": "x"}, {"ok": True, "q": "x"}, False),
    ]
    for c in e.tool_calls:  # each call's seq is its intent's
        assert records[c.seq - 1]["to"] == "ACT" and records[c.seq - 1]["tool"] == c.name
    assert [(m.name, m.kind, m.tokens) for m in e.model_calls] == [("m-1", "llm", 10)] * 4
    assert all(records[m.seq - 1]["boundary"] == "llm" for m in e.model_calls)
    # the same from a path and from a Replay
    assert expect(shop.trace).tool_calls == expect(harness.replay(shop.trace)).tool_calls == e.tool_calls


def test_the_four_modes(shop: Any) -> None:
    e = expect(shop)
    e.tools("search", "send_email", "search")  # strict by default
    e.tools("search", "search", "send_email", mode="unordered")
    e.tools("search", "search", "send_email", "delete", mode="subset")
    e.tools("search", "send_email", mode="superset")
    assert "tool call 2 is 'send_email', expected 'search'" in str(failure(lambda: e.tools("search", "search")))
    f = failure(lambda: e.tools("search", "send_email", mode="unordered"))
    assert f.seq == records_seq(e, 2) and "one more than the 1 listed" in str(f)
    f = failure(lambda: e.tools("search", "search", mode="subset"))
    assert f.seq == records_seq(e, 1) and "'send_email': not among the names" in str(f)
    f = failure(lambda: e.tools("search", "search", "search", mode="superset"))
    assert f.seq is None and "'search' was called 2 time(s), expected 3" in str(f)
    f = failure(lambda: e.tools("search", "send_email", "search", "refund"))
    assert "3 tool calls made, expected 4: 'refund' is missing" in str(f)


def records_seq(e: Expectation, i: int) -> int:
    return e.tool_calls[i].seq


def test_a_failure_names_the_seq_and_the_field_and_lists_the_calls_made(shop: Any) -> None:
    e = expect(shop)
    f = failure(lambda: e.called("send_email", to="bob@example.com"))
    first = str(f).splitlines()[0]
    seq = e.tool_calls[1].seq
    assert first == (
        f"expect(run.jsonl).called('send_email', to='bob@example.com') failed at seq {seq}, field args.to: "
        f"no call of 'send_email' matches: at seq {seq} args.to is 'ann@example.com', expected 'bob@example.com'"
    )
    assert (f.seq, f.path, f.calls) == (seq, "args.to", e.tool_calls)
    listing = str(f).splitlines()[1:]
    assert listing[0] == "calls made (3 tool, 4 model; the run is DONE):"
    assert f'  seq {seq:<5} tool  send_email {{"to":"ann@example.com"}}' in listing
    assert sum("model m-1 (10 tokens)" in line for line in listing) == 4


def test_called_matches_equal_a_callable_a_type_and_any(shop: Any) -> None:
    e = expect(shop)
    e.called("search").called("search", q="tide pools").called("search", limit=lambda n: n <= 5)
    e.called("search", q=str, limit=int).called("search", q=ANY).called("search", times=2)
    e.called("search", q="x", times=1).called("refund", times=0)
    assert "args.limit is 5: <lambda>() is false" in str(failure(lambda: e.called("search", limit=lambda n: n > 5)))
    f = failure(lambda: e.called("search", q=int))
    assert str(f).startswith("expect(run.jsonl).called('search', q=int) failed at seq ")  # a matcher by its name
    assert "args.q is 'tide pools', not an instance of int" in str(f)
    assert "called('search', limit=small)" in str(failure(lambda: e.called("search", limit=small)))
    assert "args.limit is absent" in str(failure(lambda: e.called("send_email", limit=ANY)))
    assert "no call of 'refund'" in str(failure(lambda: e.called("refund")))
    f = failure(lambda: e.called("search", times=1))
    assert f.seq == e.tool_calls[2].seq and "2 matching calls, expected 1" in str(f)
    f = failure(lambda: e.called("search", q="x", times=2))
    assert "1 matching call(s), expected 2" in str(f)
    boom = failure(lambda: e.called("search", q=lambda v: v["no"]))  # a predicate that raises: no match, said so
    assert "raised TypeError" in str(boom)


def test_never_and_at_most(shop: Any) -> None:
    e = expect(shop)
    e.never("delete*", "refund").at_most(model_calls=4, tool_calls=3, tokens=40)
    f = failure(lambda: e.never("send_*"))
    assert (f.seq, f.path) == (e.tool_calls[1].seq, "name") and "'send_email' was called (matches 'send_*')" in str(f)
    f = failure(lambda: e.at_most(model_calls=3))
    assert f.seq == e.model_calls[3].seq and "4 made, at most 3" in str(f)
    f = failure(lambda: e.at_most(tool_calls=2))
    assert f.seq == e.tool_calls[2].seq and f.path == "tool_calls"
    f = failure(lambda: e.at_most(tokens=25))
    assert f.seq == e.model_calls[2].seq and "40 tokens used, at most 25" in str(f)


def small(n: int) -> bool:
    return n < 3


def test_state_and_result(shop: Any, tmp_path: Path) -> None:
    e = expect(shop).state("DONE").result({"ok": True, "q": "x"}).result(lambda r: r["ok"])
    assert "the run is DONE, expected FAILED" in str(failure(lambda: e.state("FAILED")))
    assert "field result" in str(failure(lambda: e.result(3)))
    e.result(dict).result({"ok": ANY, "q": "x"})  # a type as in called(): an instance of it; ANY nested in a value
    assert "result is {'ok': True, 'q': 'x'}, not an instance of list" in str(failure(lambda: e.result(list)))
    f = failure(lambda: e.result(lambda r: r["missing"]))  # a predicate that raises: a failure saying so
    assert "expect(run.jsonl).result(<lambda>) failed at seq" in str(f) and "raised KeyError('missing')" in str(f)


def test_bad_arguments_are_clear_errors(shop: Any, tmp_path: Path) -> None:
    with pytest.raises(harness.HarnessError, match="a trace path, an Outcome or a Replay"):
        expect(42)  # type: ignore[arg-type]
    with pytest.raises(harness.HarnessError, match="give one of 'strict'"):
        expect(shop).tools("search", mode="sorted")
    with pytest.raises(harness.HarnessError, match="times is an int"):
        expect(shop).called("search", times=-1)
    for limit in ({"tokens": -1}, {"tool_calls": "3"}, {"model_calls": 2.5}):
        with pytest.raises(harness.HarnessError, match=r"at_most\(\w+=.*\): a limit is an int >= 0"):
            expect(shop).at_most(**limit)
    with pytest.raises(harness.TraceUnreadable, match=r"nope\.jsonl: no such file"):
        expect(tmp_path / "nope.jsonl")
    (tmp_path / "bad.jsonl").write_text("not a trace\n")
    with pytest.raises(harness.TraceCorruption):
        expect(tmp_path / "bad.jsonl")


# --- workflows: @harness.tool, harness.call, retries, failures, unfinished runs --------------------------------


@harness.tool
def look_up(point: str) -> dict[str, Any]:
    if point == "bad":
        raise harness.ToolError("no such point")
    return {"point": point}


TRIES = {"n": 0}


def flaky(x: int) -> int:
    """A plain function called through harness.call: its first two calls raise."""
    TRIES["n"] += 1
    if TRIES["n"] < 3:
        raise harness.ToolError("busy")
    return x * 2


def test_a_workflows_tool_calls_from_each_door_retries_folded(tmp_path: Path) -> None:
    TRIES["n"] = 0

    @harness.workflow
    def flow() -> Any:
        look_up("tides")
        doubled = None
        for _ in range(3):  # the code retries the same call: one call, three attempts
            try:
                doubled = harness.call(flaky, x=4)
                break
            except harness.ToolError:
                continue
        with contextlib.suppress(harness.ToolError):
            look_up("bad")
        return doubled

    out = flow.run(trace=tmp_path / "run.jsonl")
    e = expect(out).state("DONE").result(8)
    assert [(c.name, c.attempts, c.result, c.error) for c in e.tool_calls] == [
        ("look_up", 1, {"point": "tides"}, None),
        ("flaky", 3, 8, None),
        ("look_up", 1, None, {"type": "harness._errors.ToolError", "message": "no such point"}),
    ]
    e.tools("look_up", "flaky", "look_up").called("look_up", point="bad").at_most(tool_calls=3, model_calls=0)


def test_an_unfinished_run_crashed_paused_or_torn(tmp_path: Path) -> None:
    plan = [("charge", {"n": 1}), ("charge", {"n": 2})]
    with pytest.raises(RuntimeError, match="power cut"):
        shop_run(tmp_path / "crashed.jsonl", plan, {"charge": power_cut(2)})
    e = expect(tmp_path / "crashed.jsonl").state("ACT").tools("charge", "charge")
    assert [c.done for c in e.tool_calls] == [True, False] and e.tool_calls[1].result is None
    assert "(unfinished)" in str(failure(lambda: e.never("charge")))

    @harness.workflow
    def asks() -> Any:
        look_up("tides")
        return harness.interrupt("go on?")

    assert asks.run(trace=tmp_path / "paused.jsonl").state == "PAUSED"
    expect(tmp_path / "paused.jsonl").state("PAUSED").tools("look_up").result(None)

    torn = tmp_path / "torn.jsonl"
    torn.write_bytes((tmp_path / "crashed.jsonl").read_bytes() + b'{"seq":99,"kind":"trans')  # a writer cut mid-line
    assert expect(torn).tool_calls == e.tool_calls


def test_a_run_still_being_written(tmp_path: Path) -> None:
    inside, go = threading.Event(), threading.Event()

    @harness.tool(name="slow")
    def slow(x: int) -> int:
        inside.set()
        go.wait(60)  # a hang guard, not a timing assertion
        return x

    @harness.workflow
    def flow() -> int:
        look_up("tides")
        return slow(1)

    writer = threading.Thread(target=flow.run, kwargs={"trace": tmp_path / "run.jsonl"})
    writer.start()
    try:
        assert inside.wait(60)
        e = expect(tmp_path / "run.jsonl").state("ACT").tools("look_up", "slow")  # the writer holds its lock
        assert [c.done for c in e.tool_calls] == [True, False]
    finally:
        go.set()
        writer.join(60)
    expect(tmp_path / "run.jsonl").state("DONE").result(1)


def test_the_calls_of_a_rerun_are_served_and_a_forks_after_its_branch_live(shop: Any, tmp_path: Path) -> None:
    model = FakeLLM(lambda request: answer("ok", 10))

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        harness.llm({"model": "m-1", "prompt": f"step {len(progress)}"}, model)
        return Step(*PLAN[len(progress)][:1] * 2, PLAN[len(progress)][1]) if len(progress) < len(PLAN) else None

    tools = {name: (lambda **a: {"ok": True, **a}) for name, _ in PLAN}
    again = harness.rerun(shop.trace, planner=planner, tools=tools, out=tmp_path / "again.jsonl")
    assert again.equal
    e = expect(tmp_path / "again.jsonl")
    assert all(c.served for c in e.tool_calls) and all(not m.live for m in e.model_calls)
    branch = expect(shop).model_calls[2].seq
    child = harness.fork(shop.trace, at=branch, value=answer("changed", 3), planner=planner, tools=tools)
    f = expect(str(child.trace))
    assert [m.served for m in f.model_calls] == [True, True, False, False]
    assert [(m.answered, m.live) for m in f.model_calls[2:]] == [(True, False), (False, True)]  # the branch: by hand
    assert [c.served for c in f.tool_calls] == [True, True, False] and f.tool_calls[2].live
    f.at_most(tokens=33)


# --- harness.http: a model reached over HTTP --------------------------------------------------------------------


def test_an_http_model_call_is_a_model_call_with_its_usage(tmp_path: Path) -> None:
    httpx = pytest.importorskip("httpx")
    openai = pytest.importorskip("openai")
    from chat_server import ChatServer

    from harness import http as hhttp

    server = ChatServer()
    try:
        client = openai.OpenAI(
            base_url=server.url + "/v1", api_key="sk-test", max_retries=0,
            http_client=httpx.Client(transport=hhttp.transport()),
        )  # fmt: skip

        def planner(goal: Any, progress: list[Any]) -> Step | None:
            if progress:
                return None
            said = client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "hi"}])
            return Step("note", "note", {"said": said.choices[0].message.content})

        with httpx.Client(transport=hhttp.transport()) as plain:
            out = Executor(planner=planner, tools={"note": lambda said: said}, trace=tmp_path / "run.jsonl").run("g")
            del plain
    finally:
        server.stop()
    e = expect(out).tools("note").called("note", said="echo: hi")
    [m] = e.model_calls
    assert (m.name, m.kind, m.tokens) == ("test-model", "http", 9) and m.args["body"]["model"] == "test-model"
    e.at_most(model_calls=1, tokens=9)
    assert "9 tokens used, at most 8" in str(failure(lambda: e.at_most(tokens=8)))


# --- MCP ------------------------------------------------------------------------------------------------------


@pytest.mark.xdist_group("frameworks")
def test_mcp_tools_are_named_as_the_model_saw_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mcp = pytest.importorskip("mcp")
    import harness.mcp

    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tool.log"))
    monkeypatch.delenv("MCP_KILL", raising=False)
    sys.path.insert(0, str(TESTS))
    import mcp_server

    @harness.workflow
    async def support() -> str:
        async with mcp.Client(mcp_server.server) as client:
            shop = harness.mcp.record(client, name="shop")
            await shop.call_tool("lookup", {"order": 7})
            await shop.call_tool("refund", {"order": 7})
        return "done"

    out = support.run(trace=tmp_path / "run.jsonl")
    e = expect(out).state("DONE")
    assert [(c.name, c.tool, c.server) for c in e.tool_calls] == [
        ("lookup", "shop.lookup", "shop"), ("refund", "shop.refund", "shop"),
    ]  # fmt: skip
    e.tools("lookup", "refund").tools("shop.lookup", "shop.refund").called("refund", order=7).never("wipe")
    assert "'refund' was called (matches 'shop.ref*')" in str(failure(lambda: e.never("shop.ref*")))
    assert e.tool_calls[0].result["content"][0]["type"] == "text"

    async def planned() -> Any:  # in an Executor's planner, a read is an mcp.call_tool crossing
        async with mcp.Client(mcp_server.server) as client:
            shop = harness.mcp.record(client)

            async def planner(goal: Any, progress: list[Any]) -> Step | None:
                if progress:
                    return None
                status = await shop.call_tool("lookup", {"order": 3})
                return Step("note", "note", {"status": status.content[0].text})

            ex = Executor(planner=planner, tools={"note": lambda status: status}, trace=tmp_path / "planner.jsonl")
            return await ex.arun("g")

    out = asyncio.run(planned())
    e = expect(out).tools("lookup", "note").called("lookup", order=3).called("mcp.lookup")
    assert e.tool_calls[0].server == "mcp" and e.tool_calls[0].tool == "mcp.lookup"


@pytest.mark.xdist_group("frameworks")
def test_mcp_over_stdio_in_a_process_of_its_own(tmp_path: Path) -> None:
    """tests/mcp_agent.py's workflow, in a child process, over a real MCP server on stdio (as test_mcp.py runs it)."""
    pytest.importorskip("mcp")
    from children import AGENTS

    trace, out = tmp_path / "run.jsonl", tmp_path / "outcome"
    env = {
        "MCP_SERVER": str(TESTS / "mcp_server.py"),
        "TOOL_LOG": str(tmp_path / "tool.log"),
        "MCP_ZYGOTE": AGENTS.socket(),
    }
    code = "import json, sys, mcp_agent; mcp_agent.child(*json.loads(sys.argv[1]))"
    child = AGENTS.Popen([sys.executable, "-c", code, json.dumps([str(trace), env, str(out)])])
    child.wait(300)  # a hang guard, not a timing assertion
    assert child.returncode == 0, out.read_text() if out.exists() else child.returncode
    e = expect(trace).state("DONE").tools("lookup", "send_email", "refund", "nope")
    e.called("send_email", to="ann@example.com").called("mcp.refund", order=7).never("wipe", "mcp.wipe")
    assert {c.server for c in e.tool_calls} == {"mcp"} and e.tool_calls[3].result["isError"] is True


# --- Pydantic AI and the OpenAI Agents SDK ------------------------------------------------------------------------


@pytest.mark.xdist_group("frameworks")
def test_pydantic_ai_tools_and_model_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pydantic_ai")
    monkeypatch.setenv("FRAMEWORK_LOG", str(tmp_path / "tools.log"))
    import framework_agent as fa

    out = fa.pai_flow.run("", "function", trace=tmp_path / "run.jsonl")
    e = expect(out).state("DONE").result("done after 2 tools")
    e.tools("charge", "charge").called("charge", a=0, b=1).called("charge", a=1).never("reserve")
    assert [m.kind for m in e.model_calls] == ["pydantic_ai.model"] * 3
    assert all(m.tokens is not None and m.tokens > 0 for m in e.model_calls)
    e.at_most(model_calls=3, tokens=sum(m.tokens or 0 for m in e.model_calls))

    with harness.Recorder(tmp_path / "recorded.jsonl", entrypoint="t", goal=None):  # outside a workflow: crossings
        assert fa.pai_agent("", "function").run_sync("charge twice").output == "done after 2 tools"
    r = expect(tmp_path / "recorded.jsonl").tools("charge", "charge").called("charge", a=1, b=1)
    assert r.tool_calls[1].result == {"kind": "tool_return", "result": 2}


@pytest.mark.xdist_group("frameworks")
def test_agents_sdk_tools_and_model_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("agents")
    monkeypatch.setenv("FRAMEWORK_LOG", str(tmp_path / "tools.log"))
    import framework_agent as fa
    from agent_server import AgentServer

    server = AgentServer()
    try:
        out = fa.oa_flow.run(server.url, trace=tmp_path / "run.jsonl")
    finally:
        server.stop()
    e = expect(out).state("DONE").tools("charge", "charge").called("charge", a=ANY, b=1, times=2)
    assert [(m.kind, m.name) for m in e.model_calls] == [("openai_agents.model", "stub-model")] * 3
    assert [m.tokens for m in e.model_calls] == [15, 15, 15]  # (the usage the server reports, total_tokens)
    assert "45 tokens used, at most 20" in str(failure(lambda: e.at_most(tokens=20)))


# --- in a test: pytest shows a failed assertion ----------------------------------------------------------------


def test_pytest_reports_a_broken_rule_as_a_failed_assertion(pytester: pytest.Pytester, shop: Any) -> None:
    pytester.makepyfile(
        test_agent=f"""
        import harness

        def test_it():
            harness.expect({str(shop.trace)!r}).tools("search").never("send_*")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ExpectationFailed: expect(run.jsonl).tools('search', mode='strict') failed at*"])


# --- the four modes against a reference ---------------------------------------------------------------------------

NAMES = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=7)


def reference(mode: str, wanted: list[str], made: list[str]) -> bool:
    """What each mode means, said the plainest way."""
    if mode == "strict":
        return wanted == made
    if mode == "unordered":
        return Counter(wanted) == Counter(made)
    if mode == "subset":  # every call made is among the names (each listed name allows one call)
        return not Counter(made) - Counter(wanted)
    return not Counter(wanted) - Counter(made)  # superset: every listed name was called (as often as listed)


@settings(max_examples=300, deadline=None)
@given(wanted=NAMES, made=NAMES, mode=st.sampled_from(["strict", "unordered", "subset", "superset"]))
def test_the_modes_agree_with_the_reference(wanted: list[str], made: list[str], mode: str) -> None:
    calls = tuple(ToolCall(n, {}, None, 10 + i, False, n) for i, n in enumerate(made))
    e = Expectation(Calls("run.jsonl", "DONE", calls, ()))
    try:
        e.tools(*wanted, mode=mode)
        passed = True
    except ExpectationFailed as f:
        passed = False
        assert f.seq is None or f.seq in {c.seq for c in calls}  # a seq it names is a call's
    assert passed == reference(mode, wanted, made)
