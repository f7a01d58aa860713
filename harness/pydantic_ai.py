"""Pydantic AI agents made durable: `Agent(model, capabilities=[HarnessDurability()])`.

`HarnessDurability` is a capability on Pydantic AI's public durable-execution
surface (`pydantic_ai.durable_exec`): its operation backend runs each of the
framework's durable units as a harness call, so inside a harness run (a
`@harness.workflow`, a Recorder, an Executor's planner) an agent's run is
recorded and, on resume or rerun, served:

- a model request (`model.request`, `model.request_stream`) is a crossing of
  kind `pydantic_ai.model`. Its request holds only what is new since the same
  agent run's previous request (`new`: the messages appended since, as
  Pydantic AI serializes them) and a digest of everything before (`history`),
  so a run of N requests writes O(N) bytes, not O(N^2); when the framework
  rewrote earlier messages (a history processor) the whole history is written
  once and the digest starts again. The request's `parameters` (the tools
  offered, the output mode) are written when they differ from the previous
  request's. Its response is the `ModelResponse` as
  Pydantic AI's own JSON codec writes it, and a served one is rebuilt by the
  same codec: the same object the live run got. A streamed request records
  the final response (the framework replays its parts as events);
- a function tool call is a tool call: inside a workflow a step of it
  (`harness.acall`), with the contract of a tool made with `@harness.tool` (or
  given a `__harness_tool__` spec), at-least-once otherwise; in a Recorder or a
  planner, a crossing of kind `pydantic_ai.tool`. What is recorded is the
  framework's own tool-call result (`{"kind": "tool_return", "result": ...}`);
  `harness reconcile --result` takes the function's own value and
  `reconciled()` wraps it so;
- an MCP toolset's tool call is a tool call too, its contract read from the
  tool's MCP annotations (`readOnlyHint`: at-least-once; `idempotentHint`:
  idempotent; else unsafe); `MCPToolset(process_tool_call=mcp_meta)` sends
  an idempotent call's key in the request's `_meta` for the server to dedupe.
  Before a resume makes a call again that the crash left in flight, the
  toolset lists its tools live again (`MCPToolset.list_tools()`): a tool
  gone, or whose hints changed since the trace's listing, is not called, the
  run pauses (ACT -> PAUSED with the `reason`) for `harness reconcile`, as
  `harness.mcp` does;
- other units (an MCP toolset's tool list, capability operations) are
  crossings of kind `pydantic_ai`; an event-stream handler runs live (it feeds
  a screen, and is fed again on rerun); custom argument validators run inline.

What the framework makes up on its own does not make a rerun drift: a
request leaves out timestamps, `run_id`s and `conversation_id`s, and what a
provider said about an earlier answer (its url, id, details and usage: that
answer is recorded whole as its own crossing's response); ids of the form
`pyd_ai_<hex>` it generated for tool calls are numbered in order of
appearance (`<tool-call-0>`, ...), and `harness.normalize` marks them, and a
response's `timestamp` and `provider_response_id`, in a response. The agent run's own `run_id` is
`harness-<n>`, counted per harness run, so a re-execution gets the same ones.

Outside a harness run (or inside a harness call, whose crossings belong to
it) the capability changes nothing: every unit just runs. Importing this
module checks the installed pydantic-ai-slim first: an older one is a
HarnessError saying which version is needed.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import weakref
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import orjson

from ._errors import HarnessError, NotSerializable
from .runtime.environment import require

NEEDS = (2, 68)
require("pydantic-ai-slim", NEEDS, "pydantic-ai")

from pydantic_ai.durable_exec import (  # noqa: E402  (after the version check: an old one lacks these names)
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    EventStreamHandlerId,
    JournalCallableOperationBackend,
    ModelRequestId,
    ModelRequestParams,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetCallToolParams,
    ToolsetValidateToolArgumentsId,
    conversation_id_from_run_id,
)
from pydantic_ai.messages import ModelMessage  # noqa: E402
from pydantic_ai.models import ModelRequestParameters  # noqa: E402
from pydantic_ai.toolsets.function import FunctionToolsetTool  # noqa: E402

from .runtime.boundary import Session, aboundary, now  # noqa: E402
from .runtime.calls import acall, stepping  # noqa: E402
from .runtime.context import call_key, current_run, in_call  # noqa: E402
from .runtime.tool import PLAIN, ToolSpec, relisted  # noqa: E402

MODEL, TOOL, OTHER = "pydantic_ai.model", "pydantic_ai.tool", "pydantic_ai"  # the crossings' kinds
# set by the framework from the clock or at random, or what a provider said about its answer (the answer is
# recorded whole as the previous crossing's response: its echo in the next request need not hold them)
_VOLATILE = frozenset(
    {"timestamp", "run_id", "conversation_id", "provider_url", "provider_response_id", "provider_details", "usage"}
)
_GENERATED = re.compile(r"pyd_ai_[0-9a-f]{32}")  # a tool call id the framework made up (uuid4 hex)
_params: ContextVar[Any] = ContextVar("harness_pydantic_ai_params", default=None)


class _Cursor:
    """Where one agent run's model requests got to: the messages sent so far, their digest, the ids numbered."""

    __slots__ = ("digest", "ids", "parameters", "sent")

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.digest = ""
        self.ids: dict[str, str] = {}
        self.parameters: Any = None


class _RunState:
    """What the capability keeps per harness run: its agent runs counted, and each one's cursor."""

    __slots__ = ("count", "cursors")

    def __init__(self) -> None:
        self.count = itertools.count()
        self.cursors: dict[str, _Cursor] = {}


_runs: weakref.WeakKeyDictionary[Session, _RunState] = weakref.WeakKeyDictionary()


def _state() -> _RunState:
    session: Session | None = current_run()
    if session is None:
        raise HarnessError("internal error, please report: harness.pydantic_ai asked for a run outside one")
    state = _runs.get(session)
    if state is None:
        state = _runs[session] = _RunState()
    return state


def stable(value: Any, ids: dict[str, str]) -> Any:
    """A JSON value without the framework's clock readings and run ids, its generated tool ids numbered."""
    if isinstance(value, dict):
        return {k: stable(v, ids) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [stable(v, ids) for v in value]
    if isinstance(value, str) and value.startswith("pyd_ai_") and _GENERATED.fullmatch(value):
        return ids.setdefault(value, f"<tool-call-{len(ids)}>")
    return value


def _model_request(name: str, params: ModelRequestParams) -> dict[str, Any]:
    """A model request as recorded: the new messages and the digest of the ones before (the module docstring)."""
    messages = params.messages
    run_id = params.run_context.run_id if params.run_context is not None else None
    state = _state()
    cursor = state.cursors.get(run_id or "")
    sent = cursor.sent if cursor is not None else []
    if cursor is None or len(sent) > len(messages) or any(a is not b for a, b in zip(sent, messages, strict=False)):
        cursor = state.cursors[run_id or ""] = _Cursor()  # a new run, or its history rewritten: all of it, once
    new = stable(JSON_CODEC.dump(list[ModelMessage], messages[len(cursor.sent) :]), cursor.ids)
    request: dict[str, Any] = {"op": name, "history": cursor.digest or None, "new": new}
    cursor.digest = hashlib.sha256(f"{cursor.digest}{orjson.dumps(new).decode()}".encode()).hexdigest()[:32]
    cursor.sent = list(messages)
    if params.model_settings:
        request["settings"] = stable(dict(params.model_settings), cursor.ids)
    parameters = JSON_CODEC.dump(ModelRequestParameters, params.model_request_parameters)
    if parameters != cursor.parameters:  # the tools and output mode: written when they change, not every time
        request["parameters"] = cursor.parameters = parameters
    return request


def _contract(kind: str, params: ToolsetCallToolParams) -> dict[str, Any]:
    """A tool's contract: a function tool's `__harness_tool__` spec's (`@harness.tool`); an MCP tool's from the
    annotations its server lists (`readOnlyHint`: at-least-once, else `idempotentHint`: idempotent, else unsafe,
    MCP's default reading); at-least-once otherwise."""
    tool = params.tool
    if isinstance(tool, FunctionToolsetTool):
        held = getattr(tool.toolset, "tools", {}).get(tool.original_name or params.name)
        spec = getattr(getattr(held, "function", None), "__harness_tool__", None)
        if isinstance(spec, ToolSpec):
            return spec.contract
    elif kind == "mcp" and tool is not None:
        hints = (tool.tool_def.metadata or {}).get("annotations") or {}
        if hints.get("readOnlyHint") is True:
            return dict(PLAIN)
        return {"effect": "idempotent" if hints.get("idempotentHint") is True else "unsafe", "version": None}
    return dict(PLAIN)


MCP_KEY = "harness/idempotency_key"  # the request _meta field an idempotent MCP call's key travels in (harness.mcp's)


async def mcp_meta(ctx: Any, call_tool: Any, name: str, tool_args: dict[str, Any]) -> Any:
    """A `MCPToolset(process_tool_call=mcp_meta)`: an idempotent MCP tool call's key sent in the request's `_meta`
    as `{"harness/idempotency_key": key}`, so the server can dedupe a call made again after a crash."""
    key = call_key()
    return await call_tool(name, tool_args, metadata={MCP_KEY: key} if key is not None else None)


class _Unjsonable(Exception):
    """The framework's JSON codec failed on a unit's result (mapped by the engine spec; named in execute)."""


def _unjsonable(e: Exception) -> BaseException:
    return _Unjsonable(str(e).splitlines()[0] if str(e) else type(e).__name__)


class _Bound:
    """A bound operation that hands its params to `execute` (the base passes it only an opaque cache key)."""

    __slots__ = ("_bound", "operation")

    def __init__(self, operation: Any, bound: Any):
        self.operation, self._bound = operation, bound

    async def __call__(self, params: Any, *, config: object | None = None) -> Any:
        token = _params.set(params)
        try:
            return await self._bound(params, config=config)
        finally:
            _params.reset(token)


def _inline(operation_id: Any, tool: object | None, name: str) -> Any:
    """Custom argument validators are code, not the world: they run inline, unrecorded."""
    return False if isinstance(operation_id, ToolsetValidateToolArgumentsId) else None


class _Backend(JournalCallableOperationBackend[None]):
    """Runs each durable unit as a harness crossing or tool call (the module docstring)."""

    def bind(self, operation: Any) -> Any:
        return _Bound(operation, super().bind(operation))

    async def execute(self, *, operation_id: Any, name: str, body: Any, cache_key: Any, config: Any) -> object:
        params = _params.get()
        try:
            if isinstance(operation_id, ModelRequestId) and isinstance(params, ModelRequestParams):
                return await aboundary(MODEL, _model_request(name, params), body)
            if isinstance(operation_id, ToolsetCallToolId) and isinstance(params, ToolsetCallToolParams):
                return await _tool_call(name, operation_id.toolset_kind, params, body)
            if isinstance(operation_id, EventStreamHandlerId):
                return await body()
            return await aboundary(OTHER, {"op": name}, body)
        except _Unjsonable as e:
            tool = name.rpartition(":")[2] if ":" in name else name
            raise NotSerializable("result", "", f"not JSON ({e})", tool=tool) from None


async def _tool_call(name: str, kind: str, params: ToolsetCallToolParams, body: Any) -> Any:
    """A tool call: a step of the workflow in progress, else a crossing (a Recorder, a planner)."""
    args = params.tool_args
    if not stepping():
        cursor = _state().cursors.get(params.ctx.run_id or "")
        request = {"op": name, "tool": params.name, "args": stable(args, cursor.ids if cursor else {})}
        return await aboundary(TOOL, request, body)

    async def run(**_: Any) -> Any:  # the args (and an idempotency key) are the body's own already
        return await body()

    spec = ToolSpec(params.name, _contract(kind, params), run, is_async=True, recheck=_recheck(kind, params))
    return await acall(spec, **args)


def _recheck(kind: str, params: ToolsetCallToolParams) -> Callable[[], Awaitable[str | None]] | None:
    """For an MCP toolset's tool (ToolSpec.recheck): before a resume makes a call again that the crash left in
    flight, the toolset's tools listed live again (its public `MCPToolset.list_tools()`, not recorded) and compared
    with the annotations the trace's listing gave the tool: a tool gone, or with other hints, pauses the run."""
    tool = params.tool
    toolset = getattr(tool, "toolset", None)
    listing = getattr(toolset, "list_tools", None)
    if kind != "mcp" or tool is None or not callable(listing):
        return None
    was = (tool.tool_def.metadata or {}).get("annotations")
    what = f"MCP tool {params.name!r} of toolset {getattr(toolset, 'id', None) or type(toolset).__name__!r}"

    async def changed() -> str | None:
        live = {
            t.name: t.annotations.model_dump(mode="json", by_alias=True) if t.annotations else None
            for t in await listing()
        }
        return relisted(what, params.name, was, live)

    return changed


def reconciled(value: Any) -> Any:
    """A tool function's return value as given to `harness reconcile`, as a call of it is recorded: the framework's
    own tool-call result, built and checked by its codec; ValueError saying why a value cannot be one."""
    from pydantic import ValidationError
    from pydantic_ai.durable_exec import CallToolResult

    try:
        return JSON_CODEC.dump(
            CallToolResult, JSON_CODEC.load(CallToolResult, {"kind": "tool_return", "result": value})
        )
    except ValidationError as e:
        first = e.errors()[0]
        raise ValueError(f"Pydantic AI cannot take it as a tool's return value ({first['msg']})") from None


class HarnessDurability(BaseDurabilityCapability[Any]):
    """Pydantic AI's durable execution, on harness: `Agent(model, capabilities=[HarnessDurability()])`.

    `name` names the agent's units in the trace (default: the agent's name,
    else "agent"); `models` and `event_stream_handler` are Pydantic AI's own
    (see `BaseDurabilityCapability`).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="harness",
        durable_unit_noun="crossing",
        durable_container_noun="harness run",
        codec=JSON_CODEC,
        serialization_failure=_unjsonable,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_call_result_upgrade_lenient=False,
        journal_discovery=True,
    )

    def for_agent(self, agent: Any) -> Any:
        if not (self.name or getattr(agent, "name", None)):
            self.name = "agent"
        return super().for_agent(agent)

    @property
    def in_durable_context(self) -> bool:
        return current_run() is not None and not in_call()

    def get_durable_operation_backend(self) -> _Backend:
        backend: _Backend | None = self.__dict__.get("_harness_backend")
        if backend is None or backend._harness_name != self.name:  # type: ignore[attr-defined]
            backend = _Backend(
                agent_name=self.name,
                config=RoleBasedOperationConfig(
                    model=None, event=None, capability=None, tool=None, resolve_tool=_inline
                ),
            )
            backend._harness_name = self.name  # type: ignore[attr-defined]
            self.__dict__["_harness_backend"] = backend
        return backend

    def get_default_run_id(self) -> str | None:
        if not self.in_durable_context:
            return None
        return f"harness-{next(_state().count)}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> Any:
        return now() if self.in_durable_context else None


__all__ = ["HarnessDurability", "mcp_meta"]
