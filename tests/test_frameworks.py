"""Pydantic AI (HarnessDurability) and the OpenAI Agents SDK (harness.openai_agents.Runner) inside harness runs.

Each framework's real classes: Pydantic AI's FunctionModel and its OpenAI
chat model, the Agents SDK's OpenAIChatCompletionsModel, the two OpenAI ones
over a real chat-completions server on 127.0.0.1 (tests/agent_server.py).
The agents are tests/framework_agent.py's; the crash tests are in
test_frameworks_crash.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import zygote
from agent_server import AgentServer
from children import AGENTS, ZYGOTE

import harness

# The frameworks are imported by the tests that use them, not at collection: every xdist worker collects this
# module, and importing them costs seconds of CPU. One xdist worker runs test_frameworks, test_frameworks_crash
# and test_mcp: it alone imports the frameworks and the MCP SDK, and starts their zygote (children.AGENTS), once.
pytestmark = pytest.mark.xdist_group("frameworks")

# name: (workflow in framework_agent, its args after the server url)
FLOWS: dict[str, tuple[str, tuple[str, ...]]] = {
    "pai-function": ("pai_flow", ("function",)),
    "pai-openai": ("pai_flow", ("openai",)),
    "pai-stream": ("pai_flow", ("openai-stream",)),
    "oa": ("oa_flow", ()),
}
MODEL_KIND = {"pai": "pydantic_ai.model", "oa": "openai_agents.model"}


@pytest.fixture(scope="module")
def fa() -> Any:
    """tests/framework_agent.py (it imports both frameworks)."""
    import framework_agent

    return framework_agent


def flow_of(name: str) -> harness.Workflow[Any, Any]:
    import framework_agent

    return getattr(framework_agent, FLOWS[name][0])  # type: ignore[no-any-return]


@pytest.fixture
def server() -> Any:
    s = AgentServer()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "tools.log"
    monkeypatch.setenv("FRAMEWORK_LOG", str(log))
    return log


def effects(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def records(trace: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in trace.read_text().splitlines()]


def record(name: str, server: AgentServer, trace: Path) -> harness.Outcome:
    return flow_of(name).run(server.url, *FLOWS[name][1], trace=trace)


@pytest.mark.parametrize("name", list(FLOWS))
def test_a_run_is_recorded_and_reruns_with_the_server_stopped(
    name: str, server: AgentServer, tmp_path: Path, fa: Any
) -> None:
    trace = tmp_path / "run.jsonl"
    outcome = record(name, server, trace)
    assert (outcome.state, outcome.result) == ("DONE", "done after 2 tools")
    assert effects(tmp_path / "tools.log") == ["charge 0 1", "charge 1 1"]
    recs = records(trace)
    kind = MODEL_KIND[name[:3].rstrip("-")]
    assert [r["boundary"] for r in recs if r["kind"] == "crossing"] == [kind] * 3
    intents = [r for r in recs if r["kind"] == "transition" and r["to"] == "ACT"]
    assert [(r["tool"], r["args"], r["contract"]["effect"]) for r in intents] == [
        ("charge", {"a": 0, "b": 1}, "unsafe"),
        ("charge", {"a": 1, "b": 1}, "unsafe"),
    ]
    assert fa.KEY not in trace.read_text()  # the client's API key never reaches the trace
    if name != "pai-function":
        assert server.chats == 3 and server.seen[0]["authorization"] == f"Bearer {fa.KEY}"
    server.stop()  # its port closed: a live call would fail, not hang

    again = harness.rerun(trace, workflow=flow_of(name))
    assert (again.state, again.equal, again.live_calls) == ("DONE", True, 0)
    assert effects(tmp_path / "tools.log") == ["charge 0 1", "charge 1 1"]  # no tool called again


@pytest.mark.parametrize("name", ["pai-function", "pai-openai", "oa"])
def test_two_runs_give_the_same_normalized_trace(name: str, tmp_path: Path) -> None:
    views = []
    for n in range(2):
        s = AgentServer()
        try:
            record(name, s, tmp_path / f"{n}.jsonl")
        finally:
            s.stop()
        # the goal names the model server's URL; its port is the test's, not the agent's (the loopback-port
        # default covers http exchanges only, so a port in a goal or a tool's args still counts)
        views.append(harness.normalize(tmp_path / f"{n}.jsonl", ignore=["goal.args[0]"]))
    assert views[0] == views[1]
    raw = [records(tmp_path / f"{n}.jsonl") for n in range(2)]
    assert raw[0] != raw[1]  # the files do differ (run ids, times, made-up tool call ids): normalize leaves them out


@pytest.mark.parametrize("name", list(FLOWS))
def test_the_golden_of_each_framework_holds_what_the_agent_did_whatever_its_release(
    name: str, tmp_path: Path, golden_trace: Any
) -> None:
    """The behavior view only (no framework's own serialization): the compat job runs this at both ends of the
    ranges pyproject allows, against the goldens recorded once; the server makes up its ids, times and latency."""
    s = AgentServer(fresh=True)
    try:
        record(name, s, tmp_path / "run.jsonl")
    finally:
        s.stop()
    assert golden_trace(ignore=["goal.args[0]"]) == tmp_path / "run.jsonl"  # the goal names the server's URL


def test_a_served_response_is_the_same_object(tmp_path: Path, fa: Any) -> None:
    from pydantic import TypeAdapter
    from pydantic_ai.messages import ModelResponse

    adapter = TypeAdapter(ModelResponse)
    agent = fa.pai_agent("", "function")

    @harness.workflow
    async def answers() -> list[Any]:
        result = await agent.run("charge twice")
        got = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
        assert all(type(m) is ModelResponse for m in got)
        return [adapter.dump_python(m, mode="json") for m in got]

    live = answers.run(trace=tmp_path / "run.jsonl")
    again = harness.rerun(tmp_path / "run.jsonl", workflow=answers)
    assert again.equal and again.live_calls == 0
    assert live.result and len(live.result) == 3


def test_a_fork_at_the_second_model_answer_runs_the_rest_live(tmp_path: Path, fa: Any) -> None:
    trace = tmp_path / "run.jsonl"
    assert fa.pai_flow.run("", "function", trace=trace).state == "DONE"
    models = [c for c in harness.replay(trace).crossings if c.kind == "pydantic_ai.model"]
    fork = harness.fork(
        trace, at=models[1].seq, set={"parts[0].args.a": 40}, workflow=fa.pai_flow, out=tmp_path / "fork.jsonl"
    )
    assert fork.state == "DONE" and fork.live_calls == 2  # the tool call it changed, then the last model answer
    assert effects(tmp_path / "tools.log") == ["charge 0 1", "charge 1 1", "charge 40 1"]
    intents = [r["args"] for r in records(tmp_path / "fork.jsonl") if r["kind"] == "transition" and r["to"] == "ACT"]
    assert intents[-1] == {"a": 40, "b": 1}


def test_an_agents_sdk_fork_at_the_second_model_answer(server: AgentServer, tmp_path: Path, fa: Any) -> None:
    trace = tmp_path / "run.jsonl"
    assert record("oa", server, trace).state == "DONE"
    models = [c for c in harness.replay(trace).crossings if c.kind == "openai_agents.model"]
    text = models[2].response["output"][0]["content"][0]["text"]
    assert text == "done after 2 tools"
    fork = harness.fork(
        trace, at=models[1].seq, set={"output[0].arguments": '{"a": 7, "b": 1}'}, workflow=fa.oa_flow,
        out=tmp_path / "fork.jsonl",
    )  # fmt: skip
    assert fork.state == "DONE" and fork.live_calls == 2
    assert effects(tmp_path / "tools.log")[-1] == "charge 7 1"
    assert server.chats == 4  # the three of the recording, and the last answer of the fork


def test_a_changed_prompt_drifts_at_the_new_message(tmp_path: Path, fa: Any) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from harness.pydantic_ai import HarnessDurability

    trace = tmp_path / "run.jsonl"
    agent = Agent(FunctionModel(fa.scripted), name="shop", capabilities=[HarnessDurability()])
    agent.tool_plain(fa.charge)
    prompt = {"text": "charge twice"}

    @harness.workflow
    async def flow() -> str:
        return (await agent.run(prompt["text"])).output

    flow.run(trace=trace)
    prompt["text"] = "charge thrice"
    with pytest.raises(harness.ReplayDrift, match=r"new\[0\]\.parts\[0\]\.content.*charge twice.*charge thrice"):
        harness.rerun(trace, workflow=flow)


def test_outside_a_harness_run_nothing_changes(tmp_path: Path, server: AgentServer, monkeypatch: Any, fa: Any) -> None:
    from harness.openai_agents import Runner

    monkeypatch.chdir(tmp_path)
    result = fa.pai_agent("", "function").run_sync("charge twice")
    assert result.output == "done after 2 tools"
    assert not result.run_id.startswith("harness-")  # the framework's own uuid7: the capability gave none
    oa = Runner.run_sync(fa.oa_agent(server.url), "charge twice")
    assert oa.final_output == "done after 2 tools"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tools.log"]  # nothing but the tool's own effects


def test_streams_are_recorded_and_served(server: AgentServer, tmp_path: Path, fa: Any) -> None:
    from harness.openai_agents import Runner

    trace = tmp_path / "run.jsonl"

    @harness.workflow
    async def streamed(url: str) -> list[str]:
        result = Runner.run_streamed(fa.oa_agent(url), "charge twice")
        kinds = [event.type async for event in result.stream_events()]
        return [str(result.final_output), str(len(kinds))]

    live = streamed.run(server.url, trace=trace)
    assert live.state == "DONE" and live.result[0] == "done after 2 tools"
    streams = [c for c in harness.replay(trace).crossings if c.kind == "openai_agents.stream"]
    assert len(streams) == 3 and all(isinstance(c.response, list) and c.response for c in streams)
    server.stop()
    again = harness.rerun(trace, workflow=streamed)
    assert again.equal and again.live_calls == 0


def test_inside_a_recorder_a_tool_call_is_a_crossing(tmp_path: Path, fa: Any) -> None:
    trace = tmp_path / "run.jsonl"
    agent = fa.pai_agent("", "function")
    with harness.Recorder(trace, entrypoint="t", goal=None):
        assert agent.run_sync("charge twice").output == "done after 2 tools"
    kinds = [c.kind for c in harness.replay(trace).crossings]
    assert kinds == ["pydantic_ai.model", "pydantic_ai.tool"] * 2 + ["pydantic_ai.model"]
    tool = harness.replay(trace).crossings[1]
    assert tool.request["tool"] == "charge" and tool.response == {"kind": "tool_return", "result": 1}


def test_a_tool_result_that_is_not_json_names_the_tool(tmp_path: Path, server: AgentServer, fa: Any) -> None:
    from agents import Agent as OAAgent
    from agents import OpenAIChatCompletionsModel, function_tool
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from harness.openai_agents import Runner
    from harness.pydantic_ai import HarnessDurability

    agent = Agent(FunctionModel(fa.scripted), name="shop", capabilities=[HarnessDurability()])

    @agent.tool_plain(name="charge")
    def opaque(a: int, b: int) -> Any:
        return object()

    @harness.workflow
    async def flow() -> str:
        return (await agent.run("go")).output

    with pytest.raises(harness.NotSerializable, match="tool 'charge'"):
        flow.run(trace=tmp_path / "pai.jsonl")

    def receipt(a: int, b: int) -> Any:
        return {1, 2}  # a set: not JSON

    oa = OAAgent(
        name="shop", model=OpenAIChatCompletionsModel(model="m", openai_client=fa.client(server.url)),
        tools=[function_tool(receipt)],
    )  # fmt: skip

    @harness.workflow
    async def oa_flow() -> str:
        return str((await Runner.run(oa, "go")).final_output)

    outcome = oa_flow.run(trace=tmp_path / "oa.jsonl")  # the SDK wraps the error its tool raised in a UserError
    assert (
        outcome.state == "FAILED" and "result of tool 'receipt' is a set, not a JSON value" in outcome.error["message"]
    )
    intents = [r for r in records(tmp_path / "oa.jsonl") if r["kind"] == "transition" and r["to"] == "ACT"]
    assert [r["tool"] for r in intents] == ["receipt"]
    recorder = harness.Recorder(tmp_path / "oa-recorder.jsonl", entrypoint="t", goal=None)
    with recorder, pytest.raises(Exception, match="result of tool 'receipt' is a set"):  # as a crossing: the same
        await_sync(Runner.run(oa.clone(model=OpenAIChatCompletionsModel("m", fa.client(server.url))), "go"))


def await_sync(coro: Any) -> Any:
    return asyncio.new_event_loop().run_until_complete(coro)


@pytest.mark.parametrize(
    ("module", "dist", "old", "needs"),
    [
        ("harness.pydantic_ai", "pydantic_ai_slim", "2.59.0", "2.68"),
        ("harness.openai_agents", "openai_agents", "0.23.1", "0.24"),
    ],
)
def test_an_older_framework_is_refused_with_the_version_it_needs(
    module: str, dist: str, old: str, needs: str, tmp_path: Path
) -> None:
    info = tmp_path / f"{dist}-{old}.dist-info"
    info.mkdir()
    name = dist.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {old}\n")
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import {module}"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert child.returncode == 1
    last = child.stderr.strip().splitlines()[-1]
    assert last.startswith("harness._errors.HarnessError") and f"{needs} or newer, and {old} is installed" in last


def test_show_reads_a_model_answer_as_text(tmp_path: Path, fa: Any) -> None:
    trace = tmp_path / "run.jsonl"
    fa.pai_flow.run("", "function", trace=trace)
    out = ZYGOTE.run([sys.executable, "-m", "harness.cli", "show", str(trace)], capture_output=True, text=True).stdout
    assert 'said=→ charge {"a":0,"b":1}' in out and "said=done after 2 tools" in out


def test_an_async_workflow_may_run_two_agents_and_gather_them(tmp_path: Path, fa: Any) -> None:
    trace = tmp_path / "run.jsonl"
    one, two = fa.pai_agent("", "function"), fa.pai_agent("", "function")

    @harness.workflow
    async def both() -> list[str]:
        a, b = await asyncio.gather(one.run("charge twice"), two.run("charge twice"))
        return [a.output, b.output]

    assert both.run(trace=trace).result == ["done after 2 tools"] * 2
    assert len(effects(tmp_path / "tools.log")) == 4
    again = harness.rerun(trace, workflow=both)
    assert again.equal and again.live_calls == 0
    assert os.path.getsize(trace) > 0


def test_parallel_tool_calls_of_gathered_agents_each_name_their_own_task(tmp_path: Path, fa: Any) -> None:
    """Pydantic AI runs a response's tool calls in tasks of its own, its graph in a copy of a scoped task's
    context: each call must still get a task of its own, the same on a rerun (a shared name would match them by
    what they carry, issue 34), and a rerun holds each to its own task's recorded place (held to the place of
    the first equal call of any task, a rerun drifted when the recording had interleaved the two agents' calls)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from harness.pydantic_ai import HarnessDurability

    def both_at_once(messages: list[Any], info: Any) -> ModelResponse:
        if any(p.part_kind == "tool-return" for m in messages for p in m.parts):
            return ModelResponse(parts=[TextPart("ok")])
        return ModelResponse(parts=[ToolCallPart("charge", {"a": 1, "b": 1}, tool_call_id=i) for i in ("x", "y")])

    agent = Agent(FunctionModel(both_at_once), name="shop", capabilities=[HarnessDurability()])
    agent.tool_plain(fa.charge)

    @harness.workflow
    async def twice() -> list[str]:
        runs = await asyncio.gather(agent.run("go"), agent.run("go"))
        return [r.output for r in runs]

    for n in range(3):  # the tools run in threads: the recorded order of the four calls varies, any must rerun
        trace = tmp_path / f"run{n}.jsonl"
        assert twice.run(trace=trace).result == ["ok", "ok"]
        tasks = [r.get("task") for r in records(trace) if r["kind"] == "transition" and r["to"] == "ACT"]
        assert len(tasks) == 4 and len(set(tasks)) == 4 and None not in tasks  # each its own task
        again = harness.rerun(trace, workflow=twice, out=tmp_path / f"again{n}.jsonl")
        assert again.equal and again.live_calls == 0
        assert [r.get("task") for r in records(tmp_path / f"again{n}.jsonl") if r.get("to") == "ACT"] == tasks


def test_an_idempotent_tool_gets_its_step_key_from_harness_idempotency_key(
    server: AgentServer, tmp_path: Path, fa: Any
) -> None:
    from agents import Agent as OAAgent
    from agents import OpenAIChatCompletionsModel, function_tool
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from harness.openai_agents import Runner
    from harness.pydantic_ai import HarnessDurability

    agent = Agent(FunctionModel(fa.scripted), name="shop", capabilities=[HarnessDurability()])
    agent.tool_plain(name="charge")(fa.reserve)  # the model calls "charge": here it is the idempotent reserve
    oa = OAAgent(
        name="shop", model=OpenAIChatCompletionsModel("m", fa.client(server.url)), tools=[function_tool(fa.reserve)]
    )

    @harness.workflow
    async def both() -> str:
        return (await agent.run("go")).output + " / " + str((await Runner.run(oa, "go")).final_output)

    trace = tmp_path / "run.jsonl"
    assert both.run(trace=trace).result == "done after 2 tools / done after 2 tools"
    keys = [r["key"] for r in records(trace) if r["kind"] == "transition" and r["to"] == "ACT"]
    contracts = [r["contract"]["effect"] for r in records(trace) if r["kind"] == "transition" and r["to"] == "ACT"]
    assert len(keys) == 4 and len(set(keys)) == 4 and set(contracts) == {"idempotent"}
    assert [line.split()[-1] for line in effects(tmp_path / "tools.log")] == keys  # the step's own key, each time


def test_a_question_a_tool_asks_inside_a_task_group_pauses_the_run_in_each_framework(
    server: AgentServer, tmp_path: Path, fa: Any
) -> None:
    """A function tool asks with harness.interrupt() while each framework's agent runs inside an anyio TaskGroup:
    the question comes out in an exception group, and the run pauses on it all the same; the answer resumes it."""
    import anyio
    from agents import Agent as OAAgent
    from agents import OpenAIChatCompletionsModel, function_tool
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from harness.openai_agents import Runner
    from harness.pydantic_ai import HarnessDurability

    def charge(a: int, b: int) -> int:
        """Charge a + b, once a human said yes."""
        return a + b if harness.interrupt(f"charge {a} {b}?") == "yes" else 0

    agent = Agent(FunctionModel(fa.scripted), name="shop", capabilities=[HarnessDurability()])
    agent.tool_plain(charge)

    @harness.workflow
    async def both() -> list[str]:
        said: list[str] = []

        async def pai() -> None:
            said.append((await agent.run("go")).output)

        async def sdk() -> None:  # (a client of this run's event loop: each run has its own)
            model = OpenAIChatCompletionsModel("m", fa.client(server.url))
            oa = OAAgent(name="shop", model=model, tools=[function_tool(charge)])
            said.append(str((await Runner.run(oa, "go")).final_output))

        for run in (pai, sdk):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
        return said

    trace, out = tmp_path / "run.jsonl", None
    questions = []
    for _ in range(5):  # two tool calls per agent, each asks once
        out = both.run(trace=trace, resume="auto") if out is None else both.run(trace=trace, resume=True, answer="yes")
        if out.state != "PAUSED":
            break
        questions.append(out.pending["question"])
    assert out is not None and out.state == "DONE" and out.result == ["done after 2 tools"] * 2
    assert questions == ["charge 0 1?", "charge 1 1?", "charge 0 1?", "charge 1 1?"]


SHOP = Path(__file__).resolve().parent.parent / "examples" / "shop_server.py"


def test_an_mcp_toolset_calls_are_steps_with_the_contracts_of_their_annotations(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from harness.pydantic_ai import HarnessDurability, mcp_meta

    monkeypatch.setenv("SHOP_LOG", str(tmp_path / "shop.log"))
    plan = [("lookup", {"order": 7}), ("send_email", {"to": "a@b.c", "body": "hi"}), ("refund", {"order": 7})]

    def model(messages: list[Any], info: Any) -> ModelResponse:
        done = sum(1 for m in messages for p in m.parts if p.part_kind == "tool-return")
        if done < len(plan):
            return ModelResponse(parts=[ToolCallPart(*plan[done])])
        return ModelResponse(parts=[TextPart("all done")])

    # the server: a process forked from children.AGENTS (the MCP SDK imported once), over this client's stdio pipes
    command = [sys.executable, zygote.__file__, "exec", AGENTS.socket(), str(SHOP)]

    def agent() -> Agent[None, str]:
        transport = StdioTransport(command[0], command[1:], env=dict(os.environ))
        shop = MCPToolset(transport, id="shop", process_tool_call=mcp_meta, init_timeout=120)
        return Agent(FunctionModel(model), name="support", toolsets=[shop], capabilities=[HarnessDurability()])

    @harness.workflow
    async def support() -> str:
        return (await agent().run("refund order 7")).output

    trace = tmp_path / "run.jsonl"
    assert support.run(trace=trace).result == "all done"
    intents = [r for r in records(trace) if r["kind"] == "transition" and r["to"] == "ACT"]
    assert [(r["tool"], r["contract"]["effect"]) for r in intents] == [
        ("lookup", "at-least-once"), ("send_email", "idempotent"), ("refund", "unsafe"),
    ]  # fmt: skip
    calls = [json.loads(line) for line in (tmp_path / "shop.log").read_text().splitlines()]
    assert [c["tool"] for c in calls] == ["lookup", "send_email", "refund"]
    assert calls[1]["key"] == intents[1]["key"] and calls[0]["key"] is None  # the key went in the request's _meta
    command[-1] = str(tmp_path / "no-such-server.py")  # the server cannot even start: a rerun must not need it
    again = harness.rerun(trace, workflow=support)
    assert again.equal and again.live_calls == 0
    assert len((tmp_path / "shop.log").read_text().splitlines()) == 3


def test_the_viewer_reads_what_each_framework_model_said(server: AgentServer, tmp_path: Path) -> None:
    from harness.trace.stream import reply, said
    from harness.viewer._index import note  # the What column of the viewer's timeline

    for name in ("pai-openai", "oa"):
        trace = tmp_path / f"{name}.jsonl"
        record(name, server, trace)
        answers = [r for r in records(trace) if r["kind"] == "crossing"]
        shown = [said(reply(r["response"]) or {}) for r in answers]
        assert shown[0] == '→ charge {"a": 0, "b": 1}' and shown[-1] == "done after 2 tools", name
        assert note(answers[-1]) == "done after 2 tools"
