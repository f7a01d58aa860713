"""What `reconcile(result=...)` takes for a paused call: the tool's own value, and how its door records it.

An operator gives what the tool itself returned (the value its code
returned, or for an MCP tool the result the server sent back). Most doors
record exactly that (an Executor's tool, `harness.call`, the Agents SDK's
function tools). Two record the framework's own shape instead, and a value
in any other shape would reach the resumed framework as garbage (a
validation error as the tool's reply):

- `harness.mcp` records an MCP `CallToolResult`'s wire JSON: `--result`
  takes that JSON, or a string for a result of one text item;
- `harness.pydantic_ai` records Pydantic AI's own tool-call result
  (`{"kind": "tool_return", "result": ...}`): `--result` takes the value
  the tool function returned, and the door wraps it.

Which door recorded a call is read from the trace, from what only that door
writes before it: a `pydantic_ai.model` crossing whose response asked for a
call of that tool, or an `mcp.list_tools` crossing of the server the tool's
name starts with (`mcp.refund`). `shape_of()` says which, `recorded()`
converts a value and validates it with the door's framework (the door
module is imported by name only then: a plugin lookup, so nothing here
depends on a framework) and raises `BadResult`, before anything is written,
for a value that does not fit (or a MissingExtra naming the extra to install
when the door's framework is not installed where the reconcile runs).
`command()` is the command line a message shows.
"""

from __future__ import annotations

import importlib
import shlex
from dataclasses import dataclass
from typing import Any

from .._errors import BadResult, MissingExtra
from ..trace.reader import Replay


@dataclass(frozen=True, slots=True)
class Shape:
    """How a door records a tool's result: `door` (None: the value as the tool returned it), what `--result`
    takes, said for a person, and an example of it as JSON text."""

    door: str | None
    takes: str
    example: str
    extra: str = ""  # the extra that installs the door's framework: `pip install 'harness-trace[<extra>]'`


PLAIN = Shape(None, "the tool's return value, as JSON", '"done"')
SHAPES = {
    "mcp": Shape(
        "mcp",
        "the MCP CallToolResult the server sent back, as its wire JSON (or a string: a result of one text item)",
        '{"content": [{"type": "text", "text": "done"}]}',
        "mcp",
    ),
    "pydantic_ai": Shape(
        "pydantic_ai",
        "the value the tool function returned, as JSON (the door records it as Pydantic AI's)",
        '"done"',
        "pydantic-ai",
    ),
}


def shape_of(rep: Replay, intent: dict[str, Any]) -> Shape:
    """The shape of the result of the call whose intent is `intent`, by what the trace holds before it."""
    tool, seq = intent["tool"], intent["seq"]
    for c in rep.crossings:
        if c.seq > seq:
            break
        if c.kind == "mcp.list_tools" and isinstance(c.request, dict):
            server = c.request.get("server")
            if isinstance(server, str) and tool.startswith(server + "."):
                return SHAPES["mcp"]
        if c.kind == "pydantic_ai.model" and _asks(c.response, tool):
            return SHAPES["pydantic_ai"]
    return PLAIN


def _asks(response: Any, tool: str) -> bool:
    """Whether a Pydantic AI model response (as its codec writes it) holds a call of tool."""
    parts = response.get("parts") if isinstance(response, dict) else None
    return isinstance(parts, list) and any(
        isinstance(p, dict) and p.get("part_kind") == "tool-call" and p.get("tool_name") == tool for p in parts
    )


def recorded(path: str, tool: str, shape: Shape, value: Any) -> Any:
    """value (what the tool returned) as its door records it; BadResult when it does not fit."""
    if shape.door is None:
        return value
    try:
        door = importlib.import_module(f"harness.{shape.door}")  # the door: it knows its framework
        return door.reconciled(value)
    except ValueError as e:
        raise BadResult(path, tool, shape.takes, command(path, shape), str(e)) from None
    except ImportError as e:  # reconciled on a machine without the framework the run used (the door imports it)
        what = f"{path}: checking the result of {tool!r} (harness.{shape.door}, which imports {e.name or 'its SDK'})"
        install = f"pip install 'harness-trace[{shape.extra}]'; nothing was written"
        raise MissingExtra(what, shape.extra, install) from None


def command(path: str, shape: Shape) -> str:
    """The command that records a paused call as done, with an example --result of its shape."""
    return (
        f"harness reconcile {shlex.quote(path)} --happened --result {shlex.quote(shape.example)} "
        "--evidence 'HOW_YOU_KNOW'"
    )


def hint(path: str, rep: Replay) -> str | None:
    """For a run paused on an operation of uncertain outcome, not reconciled yet: how to reconcile it, its shape
    named; else None."""
    pending = rep.pending
    if pending is None or "tool" not in pending or rep.tail.reconciled:
        return None
    shape = shape_of(rep, pending)
    return (
        f"reconcile it: {command(path, shape)} (or --not-happened); "
        f"--result is what {pending['tool']} returned: {shape.takes}"
    )
