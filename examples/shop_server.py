"""A small MCP server for examples/mcp_agent.py: a shop with a read-only, an idempotent and a destructive tool.

    python examples/shop_server.py      # speaks MCP over stdio; examples/mcp_agent.py starts it

Each call is noted in $SHOP_LOG (the tool, its arguments, the harness key from the request's `_meta`).
`send_email` dedupes on that key, as a real service would. With $SHOP_POWER_CUT set, `refund` refunds and
then kills the client that called it (its parent process): the crash examples/mcp_agent.py recovers from.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("shop")
SENT: dict[str, str] = {}


def note(tool: str, args: dict[str, Any], ctx: Context) -> str | None:
    key = (ctx.request_context.meta or {}).get("harness/idempotency_key")
    with open(os.environ.get("SHOP_LOG", "shop.log"), "a") as f:
        f.write(json.dumps({"tool": tool, "args": args, "key": key}) + "\n")
    return key


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(order: int, ctx: Context) -> str:
    """Read an order's status."""
    note("lookup", {"order": order}, ctx)
    return f"order {order}: paid, not shipped"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def send_email(to: str, body: str, ctx: Context) -> str:
    """Send an email, once per key."""
    key = note("send_email", {"to": to}, ctx) or "no-key"
    SENT.setdefault(key, to)
    return f"sent to {to}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def refund(order: int, ctx: Context) -> str:
    """Refund an order: money leaves the shop."""
    note("refund", {"order": order}, ctx)
    if os.environ.get("SHOP_POWER_CUT"):  # the refund is made; then the client loses power
        os.kill(os.getppid(), signal.SIGKILL)
    return f"refunded order {order}"


if __name__ == "__main__":
    server.run()
