"""A workflow over a real MCP server (tests/mcp_server.py over stdio), importable by name for children and reruns.

$MCP_SERVER is the server script (a path that does not exist proves a rerun never starts it); $TOOL_LOG,
$MCP_KILL and $MCP_MARK are handed to the server. With $MCP_ZYGOTE (a socket of tests/zygote.py) the server is
started through `zygote.py exec`: a process forked from a zygote that imported the MCP SDK once (seconds of CPU
per server otherwise), speaking over the stdio pipes the client made. `child` is a test's process (forked:
tests/children.py).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

import harness
import harness.mcp


def params() -> StdioServerParameters:
    env = {
        k: os.environ[k] for k in ("TOOL_LOG", "MCP_KILL", "MCP_MARK", "MCP_ZYGOTE", "MCP_CHANGE") if k in os.environ
    }
    script = os.environ["MCP_SERVER"]
    if "MCP_ZYGOTE" in env:  # the server forked from the tests' zygote that imported the SDK (its stdio, our pipes)
        zygote = str(Path(__file__).with_name("zygote.py"))
        return StdioServerParameters(command=sys.executable, args=[zygote, "exec", env["MCP_ZYGOTE"], script], env=env)
    return StdioServerParameters(command=sys.executable, args=[script], env=env)


@harness.workflow
async def support(order: int) -> dict[str, Any]:
    async with harness.mcp.stdio(params()) as shop:
        listed = await shop.list_tools()
        status = await shop.call_tool("lookup", {"order": order})
        mail = await shop.call_tool("send_email", {"to": "ann@example.com"})
        refund = await shop.call_tool("refund", {"order": order})
        missing = await shop.call_tool("nope", {})
    return {
        "tools": sorted(t.name for t in listed.tools),
        "status": status.content[0].text,
        "mail": mail.structured_content,
        "refund": [refund.is_error, refund.content[0].text],
        "missing": [missing.is_error, missing.content[0].text],
    }


@harness.workflow
async def owned(order: int) -> list[Any]:
    """A refund over a session the function opens itself: its call runs inside the MCP client's anyio task groups."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async with stdio_client(params()) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        refund = await harness.mcp.record(session).call_tool("refund", {"order": order})
    return [refund.is_error, refund.content[0].text]


@harness.workflow
async def toolset(order: int) -> str:
    """The same server through Pydantic AI's own MCP client (MCPToolset, made durable by HarnessDurability): its
    model looks the order up, then sends the email."""
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from harness.pydantic_ai import HarnessDurability, mcp_meta

    plan = [("lookup", {"order": order}), ("send_email", {"to": "ann@example.com"})]

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages for p in m.parts if p.part_kind == "tool-return")
        return ModelResponse(parts=[ToolCallPart(*plan[done])] if done < len(plan) else [TextPart("all done")])

    p = params()
    shop = MCPToolset(
        StdioTransport(p.command, p.args, env=p.env), id="shop", process_tool_call=mcp_meta, init_timeout=120
    )
    agent = Agent(FunctionModel(model), name="support", toolsets=[shop], capabilities=[HarnessDurability()])
    return (await agent.run(f"email about order {order}")).output


def child(trace: str, environ: dict[str, str], out: str, which: str = "support") -> None:
    """Run (or resume) support(7) (or `which`) over trace with environ's variables set; its outcome as JSON in out
    (or why not)."""
    os.environ.update(environ)
    try:
        o = globals()[which].run(7, trace=trace, resume="auto")
        Path(out).write_text(json.dumps({"state": o.state, "result": o.result, "pending": o.pending, "error": o.error}))
    except BaseException:
        Path(out).write_text(traceback.format_exc())
        raise
