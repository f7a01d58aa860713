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
from hypothesis import given
from hypothesis import strategies as st

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


def start(trace: Path, environ: dict[str, str], which: str = "support") -> Forked:
    """A process running the workflow (mcp_agent's `which`) over trace (run or resume)."""
    out = trace.parent / "outcome"
    out.unlink(missing_ok=True)
    return AGENTS.Popen([sys.executable, "-c", CHILD, json.dumps([str(trace), environ, str(out), which])])


def resumed(trace: Path, environ: dict[str, str], which: str = "support") -> dict[str, Any]:
    out = trace.parent / "outcome"
    child = start(trace, environ, which)
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


@pytest.mark.parametrize("change", ["unsafe", "gone"])
def test_a_call_in_flight_is_not_made_again_when_the_restarted_server_changed_the_tool(
    tmp_path: Path, change: str
) -> None:
    """SIGKILL inside the idempotent send_email; the server comes back as another release (send_email now
    destructive, or gone): the resume lists the tools live again, does not call it, and PAUSES with the reason."""
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = start(trace, env(tmp_path, MCP_KILL="send_email", MCP_MARK=str(mark)))
    kill_when(mark.exists, child)
    os.kill(int(mark.read_text()), signal.SIGKILL)
    out = resumed(trace, env(tmp_path, MCP_CHANGE=change))
    assert out["state"] == "PAUSED" and out["pending"]["tool"] == "mcp.send_email"
    assert [c["tool"] for c in log(tmp_path)] == ["lookup", "send_email"]  # not called again
    paused = [r for r in map(orjson.loads, trace.read_bytes().splitlines()) if r.get("to") == "PAUSED"]
    said = "changed its annotations since" if change == "unsafe" else "is no longer listed by the server"
    assert len(paused) == 1 and said in paused[0]["reason"] and "'send_email'" in paused[0]["reason"]
    before = trace.read_bytes()
    assert resumed(trace, env(tmp_path, MCP_CHANGE=change))["state"] == "PAUSED" and trace.read_bytes() == before
    key = intents(trace)[1]["key"]
    harness.reconcile(trace, happened=True, result=f"sent to ann@example.com with key {key}", evidence="the outbox")
    out = resumed(trace, env(tmp_path, MCP_CHANGE=change))
    assert out["state"] == "DONE" and out["result"]["refund"] == [False, "refunded 7"]
    assert [c["tool"] for c in log(tmp_path)].count("send_email") == 1


def test_a_call_in_flight_is_made_again_when_the_restarted_server_says_the_same_in_other_words(tmp_path: Path) -> None:
    """SIGKILL inside the idempotent send_email; the server comes back with its hints spelled otherwise (MCP's
    default readOnlyHint=false left out, a title added): the same contract, so the resume makes the call again with
    its key (the server dedupes) and the run ends DONE, with no pause."""
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = start(trace, env(tmp_path, MCP_KILL="send_email", MCP_MARK=str(mark)))
    kill_when(mark.exists, child)
    os.kill(int(mark.read_text()), signal.SIGKILL)
    out = resumed(trace, env(tmp_path, MCP_CHANGE="same"))
    assert out["state"] == "DONE", out
    sent = [c for c in log(tmp_path) if c["tool"] == "send_email"]
    assert len(sent) == 2 and sent[0]["meta"] == sent[1]["meta"]  # made again with the same key
    assert not [r for r in map(orjson.loads, trace.read_bytes().splitlines()) if r.get("to") == "PAUSED"]


@pytest.mark.parametrize("change", ["unsafe", "gone", "same"])
def test_a_pydantic_ai_mcp_toolset_call_in_flight_is_made_again_only_if_the_restarted_server_kept_the_tool(
    tmp_path: Path, change: str
) -> None:
    """The same rule through Pydantic AI's own MCP client (MCPToolset): SIGKILL inside its idempotent send_email;
    the server comes back as another release. Changed or gone: the resume lists the toolset's tools live, does not
    call it, PAUSES with the reason; reconciled with what the tool returned, it ends DONE with send_email made once.
    The same hints in other words: made again with its key, DONE, no pause."""
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = start(trace, env(tmp_path, MCP_KILL="send_email", MCP_MARK=str(mark)), "toolset")
    kill_when(mark.exists, child)
    os.kill(int(mark.read_text()), signal.SIGKILL)
    out = resumed(trace, env(tmp_path, MCP_CHANGE=change), "toolset")
    paused = [r for r in map(orjson.loads, trace.read_bytes().splitlines()) if r.get("to") == "PAUSED"]
    if change == "same":
        assert out["state"] == "DONE" and out["result"] == "all done" and not paused, out
        sent = [c for c in log(tmp_path) if c["tool"] == "send_email"]
        keys = [c["meta"]["harness/idempotency_key"] for c in sent]
        assert len(keys) == 2 and keys[0] == keys[1] == intents(trace)[1]["key"]  # made again with the same key
        return
    assert out["state"] == "PAUSED" and out["pending"]["tool"] == "send_email", out
    assert [c["tool"] for c in log(tmp_path)] == ["lookup", "send_email"]  # not called again
    said = "changed its annotations since" if change == "unsafe" else "is no longer listed by the server"
    assert len(paused) == 1 and said in paused[0]["reason"] and "toolset 'shop'" in paused[0]["reason"]
    key = intents(trace)[1]["key"]
    harness.reconcile(trace, happened=True, result=f"sent to ann@example.com with key {key}", evidence="the outbox")
    out = resumed(trace, env(tmp_path, MCP_CHANGE=change), "toolset")
    assert out["state"] == "DONE" and out["result"] == "all done", out
    assert [c["tool"] for c in log(tmp_path)].count("send_email") == 1


def test_a_pause_inside_the_mcp_clients_own_task_groups_ends_the_run_paused(tmp_path: Path) -> None:
    """The function opens stdio_client and ClientSession itself: the resumed refund, in flight at the SIGKILL,
    pauses inside their anyio task groups, which raise it in an exception group; the run ends PAUSED all the same."""
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = start(trace, env(tmp_path, MCP_KILL="refund", MCP_MARK=str(mark)), "owned")
    kill_when(mark.exists, child)
    os.kill(int(mark.read_text()), signal.SIGKILL)
    out = resumed(trace, env(tmp_path), "owned")
    assert out["state"] == "PAUSED" and out["pending"]["tool"] == "mcp.refund"
    harness.reconcile(trace, happened=True, evidence="the shop's refund log", result="refunded 7")  # one text item
    assert resumed(trace, env(tmp_path), "owned") == {
        "state": "DONE", "result": [False, "refunded 7"], "pending": None, "error": None,
    }  # fmt: skip
    assert [c["tool"] for c in log(tmp_path)] == ["refund"]  # made once


def test_reconcile_takes_what_the_tool_returned_and_refuses_what_an_mcp_call_cannot_return(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], core_only: dict[str, str]
) -> None:
    """`harness show` and the refusal name the shape a paused MCP call's result takes, with a command line; a
    value of another shape is refused (exit 2) and nothing is written; one that fits is what the function gets."""
    from harness.cli import main

    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = start(trace, env(tmp_path, MCP_KILL="refund", MCP_MARK=str(mark)))
    kill_when(mark.exists, child)
    os.kill(int(mark.read_text()), signal.SIGKILL)
    assert resumed(trace, env(tmp_path))["state"] == "PAUSED"
    assert main(["show", str(trace)]) == 0
    shown = capsys.readouterr().out.splitlines()[-1]
    assert shown.startswith("        PAUSED on an uncertain call: reconcile it: harness reconcile ")
    assert """--result '{"content": [{"type": "text", "text": "done"}]}'""" in shown and "CallToolResult" in shown
    before = trace.read_bytes()
    without = subprocess.run(  # where the MCP SDK is not installed: the door that checks the result says so
        [sys.executable, "-S", "-m", "harness", "reconcile", str(trace), "--happened", "--result", '"done"'],
        capture_output=True, text=True, env=core_only, timeout=60,
    )  # fmt: skip
    assert without.returncode == 2 and "Traceback" not in without.stderr, without.stderr
    assert "needs the 'mcp' extra, which is not installed: pip install 'harness-trace[mcp]'" in without.stderr
    assert trace.read_bytes() == before
    for bad in ("2", '{"text": "refunded 7"}', "[]"):
        assert main(["reconcile", str(trace), "--happened", "--result", bad]) == 2
        said = capsys.readouterr().err
        assert "does not fit" in said and "CallToolResult" in said and "Nothing was written" in said, said
        assert trace.read_bytes() == before
    result = CallToolResult(content=[TextContent(type="text", text="refunded 7")], structured_content={"r": 7})
    wire = json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    assert main(["reconcile", str(trace), "--happened", "--result", wire, "--evidence", "the refund log"]) == 0
    out = resumed(trace, env(tmp_path))
    assert out["state"] == "DONE" and out["result"]["refund"] == [False, "refunded 7"]


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


# --- what the reader accepts as a recorded CallToolResult, the door rebuilds (issue 34) ----------------------------


def test_every_result_the_reader_accepts_the_door_rebuilds() -> None:
    """The reader's own check of an MCP step's result (orjson only) is never looser than CallToolResult's: a
    recorded result it accepts is one a resume or rerun can rebuild, so what it refuses is corruption, not drift."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from harness.trace.reader import _mcp_result_problem

    scalar = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3) | st.just([]) | st.just({})
    keys = st.sampled_from(["text", "data", "mimeType", "name", "uri", "annotations", "_meta", "title", "size"])
    kinds = st.sampled_from(["text", "image", "audio", "resource_link", "resource", "video"])
    resource = st.dictionaries(st.sampled_from(["uri", "text", "blob", "mimeType"]), scalar, max_size=3)
    block = st.builds(
        lambda kind, fields, inner: {**fields, "type": kind, **({"resource": inner} if inner is not None else {})},
        kinds, st.dictionaries(keys, scalar, max_size=4), st.none() | scalar | resource,
    )  # fmt: skip
    result = st.dictionaries(
        st.sampled_from(["content", "isError", "structuredContent", "_meta"]),
        scalar | st.lists(block, max_size=3),
        max_size=4,
    )

    @settings(max_examples=1500, deadline=None)
    @given(result)
    def agrees(value: dict[str, Any]) -> None:
        if _mcp_result_problem(value) is None:
            CallToolResult.model_validate(value)  # raises if the reader was looser than the door

    agrees()
    assert _mcp_result_problem({"content": [{"type": "text", "text": "ok"}]}) is None


def test_a_tool_of_the_workflows_own_named_mcp_x_returns_what_it_likes(tmp_path: Path, shop: Any) -> None:
    """Before: the reader took every step whose tool starts with `mcp.` for an MCP call, and refused this run's trace
    (bad-result): `mcp.note` returns a dict of its own. An MCP step is one of a server the run listed (`shop` here)."""

    @harness.tool(name="mcp.note")
    async def note(text: str) -> dict[str, str]:
        return {"noted": text}

    @harness.workflow
    async def flow() -> list[Any]:
        async with mcp.Client(shop) as client:
            looked = await harness.mcp.record(client, name="shop").call_tool("lookup", {"order": 1})
        return [looked.is_error, await note("x")]

    assert flow.run(trace=tmp_path / "run.jsonl").result == [False, {"noted": "x"}]
    assert [i["tool"] for i in intents(tmp_path / "run.jsonl")] == ["shop.lookup", "mcp.note"]
    assert harness.replay(tmp_path / "run.jsonl").state == "DONE"
    assert harness.rerun(tmp_path / "run.jsonl", workflow=flow).equal


def test_a_resume_after_a_reconcile_with_another_shape_leaves_a_trace_that_reads(tmp_path: Path) -> None:
    """Before: the operator reconciled the refund with `"refunded 7"` (what the tool says, not its CallToolResult);
    the resume wrote it as the step's result and failed, and then every reader refused the trace (bad-result), so
    not even `harness show` could say what happened. Now the door takes the string as the result's one text item
    (reconcile in the tool's own shape), and the reader checks only a result the tool returned, never an operator's."""
    trace, mark = tmp_path / "run.jsonl", tmp_path / "mark"
    child = start(trace, env(tmp_path, MCP_KILL="refund", MCP_MARK=str(mark)))
    kill_when(mark.exists, child)
    os.kill(int(mark.read_text()), signal.SIGKILL)  # the server the killed client started
    assert resumed(trace, env(tmp_path))["state"] == "PAUSED"
    harness.reconcile(trace, happened=True, evidence="the shop's refund log", result="refunded 7")
    assert resumed(trace, env(tmp_path))["state"] == "DONE"
    rep = harness.replay(trace)
    assert rep.state == "DONE" and rep.sealed


def cut_after_the_intent(trace: Path) -> int:
    """Cut a finished in-process run's trace right after its first intent (what a SIGKILL inside that call leaves:
    the intent is synced before the call); the number of records kept."""
    lines = trace.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if orjson.loads(line).get("to") == "ACT") + 1
    trace.write_bytes(b"".join(lines[:cut]))
    return cut


def release(monkeypatch: pytest.MonkeyPatch, change: str) -> Any:
    """Another release of tests/mcp_server.py (MCP_CHANGE=change), as a second in-process server."""
    import importlib.util

    monkeypatch.setenv("MCP_CHANGE", change)
    spec = importlib.util.spec_from_file_location(f"mcp_server_{change}", SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv("MCP_CHANGE")
    return module.server


class Gated:
    """A client whose calls and live listings let a sibling task go first (`busy`) and wait until it crossed
    (`crossed`): the interleaving a slow server gives, made certain."""

    def __init__(self, client: Any, *, relist: bool):
        self.client, self.relist = client, relist
        self.busy, self.crossed = asyncio.Event(), asyncio.Event()

    async def list_tools(self, **kwargs: Any) -> Any:
        if self.relist:  # (a resume's live listing: the trace serves the first one)
            self.busy.set()
            await self.crossed.wait()
        return await self.client.list_tools(**kwargs)

    async def call_tool(self, *args: Any, **kwargs: Any) -> Any:
        self.busy.set()
        return await self.client.call_tool(*args, **kwargs)


def test_a_relist_that_pauses_after_a_sibling_tasks_crossing_leaves_a_trace_that_reads(
    tmp_path: Path, shop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """send_email in flight at the crash (the trace cut after its intent); a sibling task makes a new crossing while
    the resume lists the tools live again, and the restarted server no longer says send_email is idempotent: the
    resume pauses, and the trace, a crossing between its resume record and the pause, still reads."""
    servers = {"now": shop}

    @harness.workflow
    async def flow() -> list[Any]:
        async with mcp.Client(servers["now"]) as client:
            gated = Gated(client, relist="relist" in servers)
            s = harness.mcp.record(gated)

            async def mail() -> str:
                return str((await s.call_tool("send_email", {"to": "ann@example.com"})).content[0].text)

            async def note() -> str:
                await gated.busy.wait()
                said = await harness.aboundary("note", {"n": 1}, lambda: asyncio.sleep(0, "noted"))
                gated.crossed.set()
                return said

            return list(await asyncio.gather(mail(), note()))

    trace = tmp_path / "run.jsonl"
    assert flow.run(trace=trace).state == "DONE"
    cut = cut_after_the_intent(trace)  # what a SIGKILL inside send_email leaves (its intent synced)
    servers.update(now=release(monkeypatch, "unsafe"), relist="yes")
    out = flow.run(trace=trace, resume=True)
    assert out.state == "PAUSED" and out.pending is not None and out.pending["tool"] == "mcp.send_email"
    kinds = [r["kind"] for r in map(orjson.loads, trace.read_bytes().splitlines()[cut:])]
    assert kinds == ["resume", "crossing", "transition"]  # the sibling's crossing, then the pause
    assert harness.replay(trace).state == "PAUSED"
    assert [c["tool"] for c in log(tmp_path)] == ["send_email"]  # not made again


def test_reconcile_where_the_mcp_sdk_is_not_installed_says_which_extra_checks_the_result(
    tmp_path: Path, shop: Any
) -> None:
    """An operator reconciles a run paused on an MCP call from a machine without the `mcp` extra: a clear error
    naming the extra (exit 2, nothing written), not a traceback of a missing module."""

    @harness.workflow
    async def flow() -> str:
        async with mcp.Client(shop) as client:
            return str((await harness.mcp.record(client).call_tool("refund", {"order": 7})).content[0].text)

    trace = tmp_path / "run.jsonl"
    assert flow.run(trace=trace).state == "DONE"
    cut_after_the_intent(trace)  # what a SIGKILL inside refund leaves
    assert flow.run(trace=trace, resume=True).state == "PAUSED"
    before = trace.read_bytes()
    without = "import sys; sys.modules['mcp'] = None; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", without, "reconcile", str(trace), "--happened", "--result", '"refunded 7"']
    said = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert said.returncode == 2 and "Traceback" not in said.stderr, said.stderr
    assert "pip install 'harness-trace[mcp]'" in said.stderr and "nothing was written" in said.stderr, said.stderr
    assert trace.read_bytes() == before


def test_a_rerun_reaches_the_crash_inside_the_mcp_clients_task_group_and_goes_on_as_the_resume_did(
    tmp_path: Path, shop: Any
) -> None:
    """The call in flight at the crash ran inside mcp.Client's anyio task group: a rerun of the resumed trace
    stops there as the crashed process did (its seam, raised inside the group) and goes on as the resume did, with
    zero live calls; it crashed with the group before."""

    @harness.workflow
    async def flow() -> str:
        async with mcp.Client(shop) as client:
            return str(
                (await harness.mcp.record(client).call_tool("send_email", {"to": "ann@example.com"})).content[0].text
            )

    trace = tmp_path / "run.jsonl"
    assert flow.run(trace=trace).state == "DONE"
    cut_after_the_intent(trace)  # what a SIGKILL inside send_email leaves
    assert flow.run(trace=trace, resume=True).state == "DONE"  # made again with its key
    made = len(log(tmp_path))
    again = harness.rerun(trace, workflow=flow)
    assert again.equal and again.live_calls == 0
    assert len(log(tmp_path)) == made


HINT = st.sampled_from([True, False, None, "yes"])  # None: left out of the wire JSON (exclude_none)
ANNOTATIONS = st.fixed_dictionaries(
    {}, optional={"readOnlyHint": HINT, "destructiveHint": HINT, "idempotentHint": HINT, "openWorldHint": HINT,
                  "title": st.text(max_size=5)},
).map(lambda a: {k: v for k, v in a.items() if v is not None})  # fmt: skip


@given(ANNOTATIONS, ANNOTATIONS)
def test_a_relisted_tool_is_unchanged_only_when_its_contract_is(was: dict[str, Any], now: dict[str, Any]) -> None:
    """The relist's rule: hints that read the same (another spelling, another order, other fields) are no change;
    any change of the contract they give is one, so a call is never made again under another contract."""
    from harness.runtime.tool import relisted

    reason = relisted("tool 't'", "t", was, {"other": None, "t": now})
    if harness.mcp.contract_of(was) != harness.mcp.contract_of(now):
        assert reason is not None and "changed its annotations" in reason
    spelled = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, **was}  # MCP's defaults
    assert relisted("tool 't'", "t", was, {"t": spelled}) is None
    shuffled = dict(reversed(list(was.items())))
    assert relisted("tool 't'", "t", was, {"t": {**shuffled, "title": "another"}}) is None
    assert (
        relisted("tool 't'", "t", was, {"other": was})
        == "tool 't', whose call was in flight at the crash, is no longer listed by the server"
    )


def test_a_call_whose_contract_was_given_and_never_listed_takes_a_reconciled_string(tmp_path: Path, shop: Any) -> None:
    """contracts= gives refund its contract, so the run never lists the tools and the trace cannot tell reconcile
    that the paused call is an MCP one: the string it records as given is one text item to the resumed call (the
    run FAILED with a ValidationError of the group before)."""

    @harness.workflow
    async def flow() -> str:
        async with mcp.Client(shop) as client:
            s = harness.mcp.record(client, contracts={"refund": "unsafe"})
            return str((await s.call_tool("refund", {"order": 7})).content[0].text)

    trace = tmp_path / "run.jsonl"
    assert flow.run(trace=trace).state == "DONE"
    cut_after_the_intent(trace)  # what a SIGKILL inside refund leaves
    assert flow.run(trace=trace, resume=True).state == "PAUSED"
    harness.reconcile(trace, happened=True, result="refunded 7", evidence="the refund log")
    out = flow.run(trace=trace, resume=True)
    assert out.state == "DONE" and out.result == "refunded 7", out
    assert len(log(tmp_path)) == 1  # refunded once
