"""A real MCP server for the tests, run over stdio in a subprocess: a read-only, an idempotent and a destructive tool.

Each call is noted in $TOOL_LOG (one JSON line: the tool, its arguments, the request's `_meta`), synced before
the tool returns, so a test counts what reached the server across processes. When $MCP_KILL names a tool, that
tool, after its effect, writes the server's pid to $MCP_MARK and waits to be killed (with the client that
called it). $MCP_CHANGE makes another release of the server: "unsafe" (send_email annotated destructive),
"gone" (no send_email) or "same" (send_email's hints spelled otherwise with the same meaning: MCP's default
left out, a title added).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("shop")


def note(tool: str, args: dict[str, Any], ctx: Context) -> dict[str, Any]:
    meta = dict(ctx.request_context.meta or {})
    with open(os.environ["TOOL_LOG"], "a") as f:
        f.write(json.dumps({"tool": tool, "args": args, "meta": meta}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return meta


def point(tool: str) -> None:
    """A crash point: the effect is made; the test kills the client (and this server) here."""
    if os.environ.get("MCP_KILL") != tool:
        return
    mark = Path(os.environ["MCP_MARK"])
    mark.with_suffix(".tmp").write_text(str(os.getpid()))
    os.replace(mark.with_suffix(".tmp"), mark)
    time.sleep(600)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(order: int, ctx: Context) -> dict[str, Any]:
    """Read an order."""
    note("lookup", {"order": order}, ctx)
    point("lookup")
    return {"order": order, "status": "paid"}


def send_email(to: str, ctx: Context) -> str:
    """Send an email, once per key (the key the client sent in the request's _meta)."""
    key = note("send_email", {"to": to}, ctx).get("harness/idempotency_key")
    point("send_email")
    return f"sent to {to} with key {key}"


if os.environ.get("MCP_CHANGE") == "unsafe":  # a new release of the server: send_email no longer dedupes
    server.tool(annotations=ToolAnnotations(destructive_hint=True))(send_email)
elif os.environ.get("MCP_CHANGE") == "same":  # a new release that says the same: the defaults left out, a title
    server.tool(annotations=ToolAnnotations(title="Send an email", idempotent_hint=True, destructive_hint=False))(
        send_email
    )
elif os.environ.get("MCP_CHANGE") != "gone":  # (gone: a release without it)
    server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False))(
        send_email
    )


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def refund(order: int, ctx: Context) -> str:
    """Refund an order."""
    note("refund", {"order": order}, ctx)
    point("refund")
    if order < 0:
        raise ValueError("no such order")
    return f"refunded {order}"


@server.tool()
def wipe(ctx: Context) -> str:
    """No annotations: MCP's default reading is destructive."""
    note("wipe", {}, ctx)
    return "wiped"


if __name__ == "__main__":
    server.run()
