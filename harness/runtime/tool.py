"""What a tool is: `Tool` (a tool with a declared effect contract, as the executor runs it), and `ToolSpec`.

`spec_of(tool)` turns what a workflow may call into a `ToolSpec`:

- an object that carries its own spec: its `__harness_tool__` attribute is
  a `ToolSpec` (what `@harness.tool` and the MCP wrapper produce), or a
  `ToolSpec` itself;
- a `harness.Tool`: its function's name, the contract it declares
  (idempotent, or unsafe);
- a plain callable: its name, at-least-once (`{"effect": "at-least-once",
  "version": null}`), as a plain function is in an Executor's tools.

The name is the function's `__qualname__` (`search`, `Shop.order`), else
its `__name__`, else its type's name; it is what a workflow trace records
as the intent's `tool`, beside the `contract`. Within one run a name keeps
one contract: `harness.call` refuses another before writing anything.

Guarantees: `spec_of` never calls the tool, and refuses anything it cannot
call with a TypeError (a `HarnessError`) that says what it got.

`relisted()` is the rule both MCP doors (harness.mcp, and harness.pydantic_ai
for an MCPToolset) give as a spec's `recheck`: a tool the server no longer
lists, or whose hints now read otherwise (`mcp_hints`: by meaning, not by
spelling), is not called again after a crash.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

from .._errors import NotATool

PLAIN: dict[str, Any] = {"effect": "at-least-once", "version": None}  # a plain function's contract


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool with a declared effect contract.

    idempotent=True: on resume after an interrupted call it is called again
    with the same `idempotency_key` keyword argument, so it can dedupe.
    idempotent=False: never re-invoked blindly; the run PAUSES until reconciled.
    A declared tool's intent, and everything before it, is fsynced before the
    tool is called, whatever the durability; its result is synced with the
    next sync point (see docs/FORMAT.md "Durability").
    A result of it that the verifier rejects ends the run FAILED (the effect
    happened: calling it again would repeat it) unless retry_rejected=True.
    """

    fn: Callable[..., Any]
    _: KW_ONLY
    idempotent: bool
    version: str | None = None
    retry_rejected: bool = False

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"Tool needs a callable, not {self.fn!r}")
        if type(self.idempotent) is not bool or not (self.version is None or type(self.version) is str):
            raise TypeError("Tool(fn, idempotent=True|False, version=None|str)")
        if type(self.retry_rejected) is not bool:
            raise TypeError("Tool(..., retry_rejected=True|False)")

    @property
    def contract(self) -> dict[str, Any]:
        contract: dict[str, Any] = {"effect": "idempotent" if self.idempotent else "unsafe", "version": self.version}
        if self.retry_rejected:
            contract["retry_rejected"] = True
        return contract


EFFECTS = ("at-least-once", "idempotent", "unsafe")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a workflow calls it.

    `contract` is `{"effect": "at-least-once" | "idempotent" | "unsafe",
    "version": str | None}`, plus `"retry_rejected": True` for an unsafe tool
    that says so: the shape of a header's `tools` entries (docs/FORMAT.md).
    An idempotent tool is called with an `idempotency_key` keyword argument.
    `is_async`: `fn` returns an awaitable (call it with `harness.acall`).
    `recheck` (async tools): asked before a call the trace left in flight is
    made again on resume; a reason (str) pauses the run instead (harness.mcp
    lists the server's tools again: a tool gone, or its annotations changed).
    """

    name: str
    contract: dict[str, Any]
    fn: Callable[..., Any]
    is_async: bool = False
    recheck: Callable[[], Awaitable[str | None]] | None = None

    def __post_init__(self) -> None:
        if type(self.name) is not str or not self.name:
            raise NotATool(self, f"a ToolSpec's name must be a non-empty str, not {self.name!r}")
        c = self.contract
        if (
            type(c) is not dict
            or c.get("effect") not in EFFECTS
            or not (c.get("version") is None or type(c["version"]) is str)
            or set(c) - {"effect", "version", "retry_rejected"}
            or c.get("retry_rejected", True) is not True
        ):
            raise NotATool(
                self,
                f'tool {self.name!r}: a contract is {{"effect": one of {", ".join(EFFECTS)}, "version": str or '
                f'None}} (and "retry_rejected": true for an unsafe tool that allows it), not {c!r}',
            )
        if not callable(self.fn):
            raise NotATool(self, f"tool {self.name!r}: its fn {self.fn!r:.80} is not callable")


def mcp_hints(annotations: Mapping[str, Any] | None) -> dict[str, bool]:
    """What an MCP tool's annotations (wire JSON) say about its effect, in one spelling: the spec's defaults filled
    in (`readOnlyHint` false, `destructiveHint` true, `idempotentHint` false), the two others left out of a read-only
    tool (they mean nothing there), every other field (`title`, `openWorldHint`) left out."""
    given = annotations or {}
    if given.get("readOnlyHint") is True:
        return {"readOnlyHint": True}
    return {
        "readOnlyHint": False,
        "destructiveHint": given.get("destructiveHint") is not False,
        "idempotentHint": given.get("idempotentHint") is True,
    }


def relisted(what: str, tool: str, was: Mapping[str, Any] | None, live: Mapping[str, Any]) -> str | None:
    """Why the call of MCP tool `tool` (`what`: how a message names it) a crash left in flight must not be made
    again, from the annotations the trace's listing had (`was`) and the server's live listing (`live`: name ->
    annotations): gone, or its hints changed (mcp_hints: another spelling of the same hints is no change, nor is
    another order). None when it may be made again. Both MCP doors ask it (ToolSpec.recheck)."""
    where = f"{what}, whose call was in flight at the crash,"
    if tool not in live:
        return f"{where} is no longer listed by the server"
    then, now = mcp_hints(was), mcp_hints(live[tool])
    if then != now:
        return f"{where} changed its annotations since: {then} then, {now} now"
    return None


def name_of(fn: Any) -> str:
    """The name a trace gives a callable: its qualified name, else its name, else its type's name."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name if type(name) is str and name else type(fn).__name__


def is_async_fn(fn: Any) -> bool:
    """Whether calling fn returns a coroutine (an `async def`, or an object whose __call__ is one)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


_SPECS: dict[Any, ToolSpec] = {}  # spec_of's answers, by tool: a call's hot path asks again and again
_KEPT = 4096  # answers kept at most (then forgotten all at once): a tool made per call must not grow it


def spec_of(tool: Any) -> ToolSpec:
    """The ToolSpec of what a workflow calls; NotATool (a TypeError) when it cannot be called."""
    if type(tool) is ToolSpec:  # (an @harness.tool's or an MCP call's: unhashable, its contract is a dict)
        return tool
    try:
        return _SPECS[tool]
    except (KeyError, TypeError):  # (TypeError: unhashable, asked every time)
        pass
    spec = _spec_of(tool)
    try:
        if len(_SPECS) >= _KEPT:
            _SPECS.clear()
        _SPECS[tool] = spec
    except TypeError:  # unhashable: not kept, made again the next time (as the lookup above says)
        pass
    return spec


def _spec_of(tool: Any) -> ToolSpec:
    if isinstance(tool, ToolSpec):
        return tool
    own = getattr(tool, "__harness_tool__", None)
    if own is not None:
        if not isinstance(own, ToolSpec):
            raise NotATool(tool, f"its __harness_tool__ is {own!r:.80}, not a harness ToolSpec")
        return own
    if isinstance(tool, Tool):
        return ToolSpec(name_of(tool.fn), tool.contract, tool.fn, is_async_fn(tool.fn))
    if not callable(tool):
        raise NotATool(tool, f"it was given {tool!r:.80}, which is not callable")
    return ToolSpec(name_of(tool), dict(PLAIN), tool, is_async_fn(tool))
