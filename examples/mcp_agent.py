"""An agent whose tools live on an MCP server, its contracts read from the server's tool annotations.

    pip install 'harness-trace[mcp]'
    python examples/mcp_agent.py [FOLDER]

Offline, no keys. The agent (a workflow) looks an order up (a read-only tool), emails the customer (an
idempotent one: harness sends its key in the request's `_meta`) and refunds the order (a destructive one).
It runs in a child process that loses power right after the server made the refund. This process resumes
the run: the refund was in flight, so harness never makes it again blindly: the run PAUSES. An operator
checks the shop's log, reconciles (the refund happened), and the resumed run finishes with one refund.
Last, the run is rerun with the server gone: zero tool calls. The files go to FOLDER, or to a new
temporary folder. Exits 1 if anything turns out other than described here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters
from mcp.types import CallToolResult, TextContent

import harness
import harness.mcp

HERE = Path(__file__).resolve().parent


def shop() -> StdioServerParameters:
    server = os.environ.get("SHOP_SERVER", str(HERE / "shop_server.py"))
    env = {k: os.environ[k] for k in ("SHOP_LOG", "SHOP_POWER_CUT") if k in os.environ}
    return StdioServerParameters(command=sys.executable, args=[server], env=env)


@harness.workflow
async def support(order: int, to: str) -> dict[str, Any]:
    """The agent: a plain async function; its MCP calls are the run's steps."""
    async with harness.mcp.stdio(shop()) as tools:
        status = await tools.call_tool("lookup", {"order": order})
        mail = await tools.call_tool("send_email", {"to": to, "body": "your refund is on its way"})
        refund = await tools.call_tool("refund", {"order": order})
    return {"status": status.content[0].text, "mail": mail.content[0].text, "refund": refund.content[0].text}


def check(ok: bool, what: str) -> None:
    if not ok:
        print(f"UNEXPECTED: {what}", file=sys.stderr)
        raise SystemExit(1)


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="harness-mcp-"))
    folder.mkdir(parents=True, exist_ok=True)
    trace, log = folder / "support.jsonl", folder / "shop.log"
    os.environ["SHOP_LOG"] = str(log)
    child = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import mcp_agent; "
        f"mcp_agent.support.run(7, 'ann@example.com', trace={str(trace)!r})"
    )
    print("1. the agent runs in a child process, which loses power right after the server refunded")
    done = subprocess.run([sys.executable, "-c", child], env={**os.environ, "SHOP_POWER_CUT": "1"}, check=False)
    check(done.returncode == -signal.SIGKILL, f"the child should have been killed, exit {done.returncode}")
    print(f"   the shop saw: {[c['tool'] for c in calls(log)]}")

    print("2. this process resumes it: the refund was in flight, and it is never made again blindly")
    out = support.run(7, "ann@example.com", trace=trace, resume=True)
    print(f"   {out.state}, waiting on {out.pending and out.pending['tool']}")
    check(out.state == "PAUSED", "the run should pause on the refund")

    print("3. an operator reads the shop's log: the refund happened; harness reconcile says so")
    refunds = [c for c in calls(log) if c["tool"] == "refund"]
    result = CallToolResult(content=[TextContent(type="text", text="refunded order 7")])
    wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    harness.reconcile(trace, happened=bool(refunds), result=wire, evidence="shop.log: one refund of order 7")
    out = support.run(7, "ann@example.com", trace=trace, resume=True)
    print(f"   {out.state}: {out.result}")
    made = [c["tool"] for c in calls(log)]
    check(out.state == "DONE" and made.count("refund") == 1, "the run should finish with one refund")
    keys = {c["key"] for c in calls(log) if c["tool"] == "send_email"}
    check(len(keys) == 1 and None not in keys, "the email's key reaches the server in _meta")

    print("4. a rerun with the server gone: every call served, none made")
    os.environ["SHOP_SERVER"] = str(folder / "no-such-server.py")
    r = harness.rerun(trace, workflow=support)
    print(f"   equal: {r.equal}, live calls: {r.live_calls}, shop calls: {len(calls(log))}")
    check(r.equal and r.live_calls == 0 and calls(log)[-1]["tool"] == "refund", "the rerun should reach no server")
    print(f"trace: {trace}")


if __name__ == "__main__":
    main()
