"""harness.mcp against a real MCP server (tests/mcp_server.py) over stdio in a process of its own: a workflow records a
read-only, an idempotent and a destructive tool call with the contracts their annotations say; a SIGKILL in
each call, resumed in a new process: the read made again with no pause, the idempotent call made again with the
same key in its `_meta`, the destructive one PAUSED until `harness reconcile`, its effect made once; a rerun
with the server gone reaches nothing. In-process (`mcp.Client(server)`): overrides, pass-through, bad input.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from children import AGENTS, Forked, kill_when

import harness

# One xdist worker runs test_frameworks, test_frameworks_crash and test_mcp: it alone imports the frameworks and
# the MCP SDK (seconds of CPU), and starts their zygote (children.AGENTS), once.
pytestmark = pytest.mark.xdist_group("frameworks")

mcp: Any = None
mcp_agent: Any = None
CallToolResult: Any = None
TextContent: Any = None


@pytest.fixture(scope="module", autouse=True)
def sdk() -> None:
    """The MCP SDK, imported by the process that runs these tests, not at collection (seconds of CPU in every
    xdist worker): its names here are set once, before the first test."""
    global mcp, mcp_agent, CallToolResult, TextContent
    mcp = pytest.importorskip("mcp")
    import mcp_agent as agent
    from mcp.types import CallToolResult as Result
    from mcp.types import TextContent as Text

    import harness.mcp  # noqa: F401 - harness.mcp below

    mcp_agent, CallToolResult, TextContent = agent, Result, Text


TESTS = Path(__file__).resolve().parent
SERVER = str(TESTS / "mcp_server.py")
DONE = {
    "tools": ["lookup", "refund", "send_email", "wipe"],
    "status": '{\n  "order": 7,\n  "status": "paid"\n}',
    "mail": None,  # filled in per run: the key is the run's
    "refund": [False, "refunded 7"],
    "missing": [True, "Unknown tool: nope"],
}


# The children (tests/mcp_agent.py's child()) and the servers they start (its params()) are new processes forked
# from children.AGENTS, a zygote that imported the SDK's client and server once.
CHILD = "import json, sys, mcp_agent; mcp_agent.child(*json.loads(sys.argv[1]))"


def env(tmp: Path, **more: str) -> dict[str, str]:
    """The variables a child sets (tests/mcp_agent.py reads them)."""
    return {"MCP_SERVER": SERVER, "TOOL_LOG": str(tmp / "tool.log"), "MCP_ZYGOTE": AGENTS.socket(), **more}


def log(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "tool.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def intents(trace: Path) -> list[dict[str, Any]]:
    return [r for r in map(orjson.loads, trace.read_bytes().splitlines()) if r.get("to") == "ACT"]


def start(trace: Path, environ: dict[str, str]) -> Forked:
    """A process running the workflow over trace (run or resume)."""
    out = trace.parent / "outcome"
    out.unlink(missing_ok=True)
    return AGENTS.Popen([sys.executable, "-c", CHILD, json.dumps([str(trace), environ, str(out)])])


def resumed(trace: Path, environ: dict[str, str]) -> dict[str, Any]:
    out = trace.parent / "outcome"
    child = start(trace, environ)
    child.wait(300)  # a hang guard, not a timing assertion
    assert child.returncode == 0, out.read_text() if out.exists() else f"exit {child.returncode}"
    return dict(json.loads(out.read_text()))


def expected(key: str) -> dict[str, Any]:
    return {**DONE, "mail": {"result": f"sent to ann@example.com with key {key}"}}


def rerun_with_the_server_gone(trace: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = log(tmp)
    monkeypatch.setenv("MCP_SERVER", str(tmp / "no-such-server.py"))
    monkeypatch.setenv("TOOL_LOG", str(tmp / "tool.log"))
    sys.path.insert(0, str(TESTS))
    import mcp_agent

    assert harness.rerun(trace, workflow=mcp_agent.support).equal
    assert log(tmp) == before  # zero tool calls reached a server


def test_a_workflow_records_the_three_contracts_and_reruns_with_the_server_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "run.jsonl"
    out = resumed(trace, env(tmp_path))
    rep = harness.replay(trace)
    made = intents(trace)
    assert [(i["tool"], i["args"], i["contract"]["effect"]) for i in made] == [
        ("mcp.lookup", {"order": 7}, "at-least-once"),
        ("mcp.send_email", {"to": "ann@example.com"}, "idempotent"),
        ("mcp.refund", {"order": 7}, "unsafe"),
        ("mcp.nope", {}, "unsafe"),  # not listed: the MCP default; the server's error is its result
    ]
    key = made[1]["key"]
    assert out == {"state": "DONE", "result": expected(key), "pending": None, "error": None}
    assert [c.kind for c in rep.crossings if c.kind != "tool"] == ["mcp.list_tools"]
    seen = log(tmp_path)
    assert [c["tool"] for c in seen] == ["lookup", "send_email", "refund"]  # "nope" never reached a tool
    assert seen[1]["meta"] == {"harness/idempotency_key": key} and "harness/idempotency_key" not in seen[0]["meta"]
    # the recorded result is the wire JSON, an error result among them
    results = [r["result"] for r in map(orjson.loads, trace.read_bytes().splitlines()) if r.get("to") == "VERIFY"]
    assert results[3]["isError"] is True and CallToolResult.model_validate(results[3]).is_error
    rerun_with_the_server_gone(trace, tmp_path, monkeypatch)


def test_the_otlp_export_names_each_mcp_call_and_its_server(tmp_path: Path) -> None:
    """`harness export --otlp`: an MCP tool's step is `execute_tool {tool}` with `mcp.method.name` and its server,
    an `isError` result an ERROR span (`tool_error`), the listing a `tools/list` span."""
    from harness.ops.otlp import spans

    trace = tmp_path / "run.jsonl"
    resumed(trace, env(tmp_path))
    found = [s for rs in spans(trace)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    attrs = [{a["key"]: next(iter(a["value"].values())) for a in s["attributes"]} for s in found]
    assert [s["name"] for s in found] == [
        "invoke_workflow support", "tools/list", "execute_tool lookup", "execute_tool send_email",
        "execute_tool refund", "execute_tool nope",
    ]  # fmt: skip
    assert attrs[1]["mcp.method.name"] == "tools/list" and attrs[1]["harness.mcp.server"] == "mcp"
    for a in attrs[2:]:
        assert (a["mcp.method.name"], a["harness.mcp.server"], a["gen_ai.operation.name"]) == (
            "tools/call", "mcp", "execute_tool",
        )  # fmt: skip
    assert [s["status"].get("code") for s in found[2:]] == [1, 1, 1, 2]  # "nope": the server's isError result
    assert attrs[5]["error.type"] == "tool_error"


@pytest.mark.parametrize("tool", ["lookup", "send_email", "refund"])
def test_sigkill_in_a_call_then_resume_in_a_new_process(
    tmp_path: Path, tool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = start(trace, env(tmp_path, MCP_KILL=tool, MCP_MARK=str(mark)))
    kill_when(mark.exists, child)  # the server made the effect and waits
    os.kill(int(mark.read_text()), signal.SIGKILL)  # the server the killed client started
    assert log(tmp_path)[-1]["tool"] == tool

    out = resumed(trace, env(tmp_path))
    if tool == "refund":  # unsafe and in flight: never made again blindly
        assert out["state"] == "PAUSED" and out["pending"]["tool"] == "mcp.refund"
        before = trace.read_bytes()
        assert resumed(trace, env(tmp_path))["state"] == "PAUSED" and trace.read_bytes() == before
        happened = [c for c in log(tmp_path) if c["tool"] == "refund"] != []  # the operator's evidence
        result = CallToolResult(content=[TextContent(type="text", text="refunded 7")])
        harness.reconcile(
            trace, happened=happened, evidence="the shop's refund log",
            result=result.model_dump(mode="json", by_alias=True, exclude_none=True),
        )  # fmt: skip
        out = resumed(trace, env(tmp_path))
    made = intents(trace)
    key = next(i["key"] for i in made if i["tool"] == "mcp.send_email")
    assert out == {"state": "DONE", "result": expected(key), "pending": None, "error": None}
    calls = [c["tool"] for c in log(tmp_path)]
    assert calls.count("lookup") == 1 + (tool == "lookup")  # a read made again after the crash, nothing else
    assert calls.count("refund") == 1  # the effect made once
    mails = [c["meta"] for c in log(tmp_path) if c["tool"] == "send_email"]
    assert mails == [{"harness/idempotency_key": key}] * (1 + (tool == "send_email"))  # the same key both times
    rep = harness.replay(trace)
    assert rep.state == "DONE" and rep.sealed and rep.resumes >= 1
    rerun_with_the_server_gone(trace, tmp_path, monkeypatch)


# --- in-process: mcp.Client(server), no subprocess -------------------------------------------------------------


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tool.log"))
    monkeypatch.delenv("MCP_KILL", raising=False)
    sys.path.insert(0, str(TESTS))
    import mcp_server

    return mcp_server.server


def test_contracts_override_the_annotations(tmp_path: Path, shop: Any) -> None:
    @harness.workflow
    async def flow() -> list[Any]:
        async with mcp.Client(shop) as client:
            s = harness.mcp.record(client, contracts={"lookup": "unsafe", "wipe": "idempotent"}, name="shop")
            a = await s.call_tool("lookup", {"order": 1})
            b = await s.call_tool("wipe")
            c = await s.call_tool("refund", {"order": -1})
        return [a.is_error, b.content[0].text, c.is_error]

    out = flow.run(trace=tmp_path / "run.jsonl")
    assert out.state == "DONE" and out.result == [False, "wiped", True]  # an error result is a result
    made = intents(tmp_path / "run.jsonl")
    assert [(i["tool"], i["contract"]["effect"]) for i in made] == [
        ("shop.lookup", "unsafe"), ("shop.wipe", "idempotent"), ("shop.refund", "unsafe"),
    ]  # fmt: skip
    assert log(tmp_path)[1]["meta"]["harness/idempotency_key"] == made[1]["key"]


def test_no_annotations_is_unsafe(tmp_path: Path, shop: Any) -> None:
    @harness.workflow
    async def flow() -> str:
        async with mcp.Client(shop) as client:
            return str((await harness.mcp.record(client).call_tool("wipe")).content[0].text)

    assert flow.run(trace=tmp_path / "run.jsonl").result == "wiped"
    assert intents(tmp_path / "run.jsonl")[0]["contract"] == {"effect": "unsafe", "version": None}


def test_outside_a_run_every_call_passes_through(tmp_path: Path, shop: Any) -> None:
    async def main() -> tuple[Any, Any]:
        async with mcp.Client(shop) as client:
            s = harness.mcp.record(client)
            listed = await s.list_tools()
            sent = await s.call_tool("send_email", {"to": "bo"}, meta={"mine": 1})
            return listed, sent

    listed, sent = asyncio.run(main())
    assert {t.name for t in listed.tools} == {"lookup", "send_email", "refund", "wipe"}
    assert sent.structured_content == {"result": "sent to bo with key None"}
    meta = log(tmp_path)[0]["meta"]  # (mcp.Client adds keys of its own)
    assert meta["mine"] == 1 and "harness/idempotency_key" not in meta  # no key: nothing makes this call again


def test_an_answer_given_by_the_caller_in_meta_is_kept_beside_the_key(tmp_path: Path, shop: Any) -> None:
    @harness.workflow
    async def flow() -> str:
        async with mcp.Client(shop) as client:
            s = harness.mcp.record(client)
            return str((await s.call_tool("send_email", {"to": "x"}, meta={"trace": "t1"})).content[0].text)

    flow.run(trace=tmp_path / "run.jsonl")
    (made,) = intents(tmp_path / "run.jsonl")
    assert made["args"] == {"to": "x"}  # the _meta is not the call's arguments
    meta = log(tmp_path)[0]["meta"]
    assert meta["trace"] == "t1" and meta["harness/idempotency_key"] == made["key"]


@pytest.mark.parametrize(
    ("session", "kwargs", "match"),
    [
        (42, {}, "needs an MCP client session"),
        ("client", {"contracts": {"lookup": "maybe"}}, 'a contract is "read"'),
        ("client", {"contracts": ["lookup"]}, "contracts is a dict"),
        ("client", {"name": ""}, "name is the non-empty str"),
    ],
)
def test_bad_input_is_refused_by_record(shop: Any, session: Any, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        harness.mcp.record(mcp.Client(shop) if session == "client" else session, **kwargs)


def test_the_core_imports_without_mcp() -> None:
    code = "import sys, harness; assert 'mcp' not in sys.modules and 'harness.mcp' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_in_an_executors_planner_a_read_is_a_crossing_and_an_effect_is_refused(tmp_path: Path, shop: Any) -> None:
    async def main(tool: str, trace: Path) -> harness.Outcome:
        async with mcp.Client(shop) as client:
            s = harness.mcp.record(client)

            async def planner(goal: Any, progress: list[Any]) -> harness.Step | None:
                if progress:
                    return None
                status = await s.call_tool(tool, {"order": 3})
                return harness.Step("note", "note", {"status": status.content[0].text})

            ex = harness.Executor(planner=planner, tools={"note": lambda status: status}, trace=trace)
            return await ex.arun("g")

    out = asyncio.run(main("lookup", tmp_path / "read.jsonl"))
    assert out.state == "DONE" and out.checkpoints[0].result.startswith('{\n  "order": 3')
    rep = harness.replay(tmp_path / "read.jsonl")
    assert [c.kind for c in rep.crossings if c.kind != "tool"] == ["mcp.list_tools", "mcp.call_tool"]
    assert [c["tool"] for c in log(tmp_path)] == ["lookup"]
    with pytest.raises(BaseExceptionGroup) as info:  # (raised through mcp.Client's task group)
        asyncio.run(main("refund", tmp_path / "unsafe.jsonl"))
    assert info.group_contains(harness.HarnessError, match=r"'refund' is unsafe .* outside a workflow's own code")
    assert [c["tool"] for c in log(tmp_path)] == ["lookup"]  # the refund was never made


class Paged:
    """A session (duck-typed, as record() allows) whose tools come in two pages; `refund` is on the second."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def list_tools(self, *, cursor: str | None = None) -> Any:
        from mcp.types import ListToolsResult, Tool, ToolAnnotations

        self.calls.append(("list", cursor))
        schema = {"type": "object"}
        if cursor is None:
            hint = ToolAnnotations(read_only_hint=True)
            return ListToolsResult(tools=[Tool(name="peek", input_schema=schema, annotations=hint)], next_cursor="p2")
        hint = ToolAnnotations(idempotent_hint=True)
        return ListToolsResult(tools=[Tool(name="refund", input_schema=schema, annotations=hint)])

    async def call_tool(self, name: str, arguments: Any = None, *, meta: Any = None) -> Any:
        self.calls.append((name, meta))
        return CallToolResult(content=[TextContent(type="text", text=f"{name} done")])


def test_the_contracts_are_read_from_every_page_of_the_tools(tmp_path: Path) -> None:
    paged = Paged()

    @harness.workflow
    async def flow() -> str:
        return str((await harness.mcp.record(paged).call_tool("refund", {"order": 1})).content[0].text)

    assert flow.run(trace=tmp_path / "run.jsonl").result == "refund done"
    (made,) = intents(tmp_path / "run.jsonl")
    assert made["contract"]["effect"] == "idempotent"
    assert paged.calls == [("list", None), ("list", "p2"), ("refund", {"harness/idempotency_key": made["key"]})]
    paged.calls.clear()
    assert harness.rerun(tmp_path / "run.jsonl", workflow=flow).equal and paged.calls == []  # all served
