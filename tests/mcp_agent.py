"""A workflow over a real MCP server (tests/mcp_server.py over stdio), importable by name for children and reruns.

$MCP_SERVER is the server script (a path that does not exist proves a rerun never starts it); $TOOL_LOG,
$MCP_KILL and $MCP_MARK are handed to the server. `child` is a test's process (forked: tests/children.py).
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
    env = {k: os.environ[k] for k in ("TOOL_LOG", "MCP_KILL", "MCP_MARK") if k in os.environ}
    return StdioServerParameters(command=sys.executable, args=[os.environ["MCP_SERVER"]], env=env)


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


def child(trace: str, environ: dict[str, str], out: str) -> None:
    """Run (or resume) support(7) over trace with environ's variables set; its outcome as JSON in out (or why not)."""
    os.environ.update(environ)
    try:
        o = support.run(7, trace=trace, resume="auto")
        Path(out).write_text(json.dumps({"state": o.state, "result": o.result, "pending": o.pending, "error": o.error}))
    except BaseException:
        Path(out).write_text(traceback.format_exc())
        raise
