"""OpenAI Agents SDK agents made durable: `harness.openai_agents.Runner`, a drop-in for `agents.Runner`.

`Runner.run`, `Runner.run_sync` and `Runner.run_streamed` take what
`agents.Runner`'s do and run the same agent, on copies of it (the caller's
objects are not changed) in which every model the run can reach and every
function tool goes through harness. Inside a harness run (a
`@harness.workflow`, a Recorder, an Executor's planner):

- a model call is recorded at the SDK's `Model` interface, so any provider
  works: `get_response` is a crossing of kind `openai_agents.model` whose
  response is the SDK's `ModelResponse` as its own pydantic types write it
  (rebuilt by them when served), `stream_response` one of kind
  `openai_agents.stream` holding the stream's events, served event for
  event. Models reached: `run_config.model`, the provider's models (the
  user's provider is wrapped, not replaced), every agent's `model`, through
  handoffs (agents, and the agents a `Handoff` returns) and agents-as-tools;
- a function tool call is a tool call: inside a workflow a step of it
  (`harness.acall`) with the contract of a function made with `@harness.tool`
  (or carrying a `__harness_tool__` spec), at-least-once otherwise; in a
  Recorder or a planner a crossing of kind `openai_agents.tool`. The SDK
  turns a tool's exception into text for the model before harness sees it:
  that text is the recorded result, as the model saw it;
- an MCP server of an agent is wrapped too: its tool list and its calls are
  crossings (`openai_agents.mcp`), served on rerun with the server down.

A request leaves out what the SDK makes up per run (a random
`prompt_cache_key`: the wrapper does not ask for one) and the `tracing`
flag; the SDK's trace export is turned off for the run (`tracing_disabled`):
the harness trace is the record, and nothing is sent to a network service.
Outside a harness run the copies call straight through. Importing this
module checks the installed openai-agents first: an older one is a
HarnessError saying which version is needed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import orjson

from ._errors import NotSerializable
from .runtime.environment import require

NEEDS = (0, 24)
require("openai-agents", NEEDS, "openai-agents")

from agents import Agent, Handoff, Model, ModelProvider, RunConfig  # noqa: E402  (after the version check)
from agents import Runner as _Runner  # noqa: E402
from agents.items import ModelResponse, TResponseStreamEvent  # noqa: E402
from agents.mcp import MCPServer  # noqa: E402
from agents.models.multi_provider import MultiProvider  # noqa: E402
from agents.tool import FunctionTool  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from .runtime.boundary import aboundary  # noqa: E402
from .runtime.calls import acall, stepping  # noqa: E402
from .runtime.tool import PLAIN, ToolSpec  # noqa: E402

MODEL, STREAM, TOOL, MCP = "openai_agents.model", "openai_agents.stream", "openai_agents.tool", "openai_agents.mcp"
_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)
_EVENT: TypeAdapter[Any] = TypeAdapter(TResponseStreamEvent)


def _json(value: Any) -> Any:
    """A value of the SDK as JSON: its pydantic models dumped by alias, with only the fields that were set."""
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json", by_alias=True, exclude_unset=True)
    return value


def _tool(t: Any) -> Any:
    if isinstance(t, FunctionTool):
        return {"name": t.name, "description": t.description, "parameters": t.params_json_schema}
    return {"type": type(t).__name__, "name": getattr(t, "name", None)}


_ARGS = ("system_instructions", "input", "model_settings", "tools", "output_schema", "handoffs", "tracing")


def _named(args: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any]:
    """A Model call's arguments by name, however the SDK passed them."""
    return {**dict(zip(_ARGS, args, strict=False)), **kw}


def _request(model: str, args: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any]:
    """A model call as recorded: what the model is asked, without the tracing flag or a per-run cache key."""
    a = _named(args, kw)
    settings, output_schema, handoffs = a.get("model_settings"), a.get("output_schema"), a.get("handoffs")
    shown = settings.to_json_dict() if settings is not None else {}
    extra = shown.get("extra_args")
    if isinstance(extra, dict) and "prompt_cache_key" in extra:
        shown = {**shown, "extra_args": {k: v for k, v in extra.items() if k != "prompt_cache_key"} or None}
    request: dict[str, Any] = {"model": model, "instructions": a.get("system_instructions")}
    request["input"] = _json(a.get("input"))
    request["settings"] = {k: v for k, v in shown.items() if v is not None}
    request["tools"] = [_tool(t) for t in a.get("tools") or ()]
    if output_schema is not None and not output_schema.is_plain_text():
        request["output"] = output_schema.json_schema()
    if handoffs:
        request["handoffs"] = [{"name": h.tool_name, "parameters": h.input_json_schema} for h in handoffs]
    for k in ("previous_response_id", "conversation_id", "prompt"):
        if a.get(k) is not None:
            request[k] = _json(a[k])
    return request


class HarnessModel(Model):
    """A model whose calls are crossings (the module docstring); `wrapped` makes them when they go live."""

    def __init__(self, wrapped: Model, name: str):
        self.wrapped, self.name = wrapped, name

    async def get_response(self, *args: Any, **kw: Any) -> ModelResponse:
        async def live() -> Any:
            response = await self.wrapped.get_response(*args, **kw)
            return _RESPONSE.dump_python(response, mode="json", by_alias=True, exclude_unset=True)

        return _RESPONSE.validate_python(await aboundary(MODEL, _request(self.name, args, kw), live))

    async def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        async def live() -> Any:
            return [_json(event) async for event in self.wrapped.stream_response(*args, **kw)]

        for event in await aboundary(STREAM, _request(self.name, args, kw), live):
            yield _EVENT.validate_python(event)

    def get_retry_advice(self, request: Any) -> Any:
        return self.wrapped.get_retry_advice(request)

    async def close(self) -> None:
        await self.wrapped.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.wrapped._cleanup_on_run_end(owner)


def _wrap_model(model: Model, name: str | None = None) -> Model:
    if isinstance(model, HarnessModel):
        return model
    return HarnessModel(model, name or str(getattr(model, "model", None) or type(model).__name__))


class _Provider(ModelProvider):
    """The run's model provider, each of its models wrapped (the user's provider is kept)."""

    def __init__(self, wrapped: ModelProvider):
        self.wrapped = wrapped

    def get_model(self, model_name: str | None) -> Model:
        return _wrap_model(self.wrapped.get_model(model_name), model_name or "default")


def _contract(tool: FunctionTool) -> dict[str, Any]:
    try:
        fn = tool.__wrapped__  # the function given to @function_tool (the SDK's public descriptor)
    except AttributeError:
        return dict(PLAIN)
    spec = getattr(fn, "__harness_tool__", None)
    return spec.contract if isinstance(spec, ToolSpec) else dict(PLAIN)


def _wrap_tool(tool: Any, seen: dict[int, Any]) -> Any:
    if not isinstance(tool, FunctionTool) or getattr(tool.on_invoke_tool, "__harness__", False):
        return tool
    inner, name, contract = tool.on_invoke_tool, tool.name, _contract(tool)

    async def on_invoke_tool(ctx: ToolContext[Any], input: str) -> Any:
        try:
            args = orjson.loads(input or "{}")
        except orjson.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            args = {"input": input}
        if not stepping():
            return await aboundary(TOOL, {"tool": name, "args": args}, lambda: _call(inner, ctx, input, name))

        async def run(**_: Any) -> Any:  # the args (and an idempotency key) are the invoker's own already
            return await _call(inner, ctx, input, name)

        return await acall(ToolSpec(name, contract, run, is_async=True), **args)

    on_invoke_tool.__harness__ = True  # type: ignore[attr-defined]
    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


async def _call(inner: Any, ctx: Any, input: str, name: str) -> Any:
    """A tool's call: NotSerializable naming the tool for a result that is not JSON, raised as the call's own error
    (the SDK catches what a tool raises: harness.acall's own refusal would leave the step open under it)."""
    out = await inner(ctx, input)
    try:
        orjson.dumps(out)
    except TypeError:
        dump = getattr(out, "model_dump", None)
        if dump is None:
            raise NotSerializable("result", "", f"a {type(out).__name__}, not a JSON value", tool=name) from None
        raise NotSerializable(
            "result", "", f"a {type(out).__name__} (a pydantic model), not a JSON value: return its text", tool=name
        ) from None
    return out


class _MCP(MCPServer):
    """An agent's MCP server whose tool list and calls are crossings; everything else is the server's own."""

    def __init__(self, inner: MCPServer):
        self.__dict__.update(inner.__dict__)  # the base's policy fields (approvals, meta resolver, ...)
        self._harness_inner = inner

    @property
    def name(self) -> str:
        return self._harness_inner.name

    async def connect(self) -> None:
        await self._harness_inner.connect()  # type: ignore[no-untyped-call]

    async def cleanup(self) -> None:
        await self._harness_inner.cleanup()  # type: ignore[no-untyped-call]

    async def list_prompts(self, *a: Any, **k: Any) -> Any:
        return await self._harness_inner.list_prompts(*a, **k)

    async def get_prompt(self, *a: Any, **k: Any) -> Any:
        return await self._harness_inner.get_prompt(*a, **k)

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> Any:
        from mcp.types import Tool as McpTool

        async def live() -> Any:
            return _json(await self._harness_inner.list_tools(run_context, agent))

        listed = await aboundary(MCP, {"server": self.name, "op": "list_tools"}, live)
        return [McpTool.model_validate(t) for t in listed]

    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None, meta: Any = None) -> Any:
        from mcp.types import CallToolResult

        async def live() -> Any:
            return _json(await self._harness_inner.call_tool(tool_name, arguments, meta=meta))

        request = {"server": self.name, "op": "call_tool", "tool": tool_name, "args": arguments}
        return CallToolResult.model_validate(await aboundary(MCP, request, live))


def wrap_agent(agent: Agent[Any], seen: dict[int, Any] | None = None) -> Agent[Any]:
    """A copy of agent whose model, tools, MCP servers and handoffs (recursively) go through harness."""
    seen = {} if seen is None else seen
    done = seen.get(id(agent))
    if done is not None:
        return done  # type: ignore[no-any-return]
    changes: dict[str, Any] = {}
    if isinstance(agent.model, Model):
        changes["model"] = _wrap_model(agent.model)
    clone = agent.clone(**changes)
    seen[id(agent)] = clone
    clone.tools = [_wrap_tool(t, seen) for t in agent.tools]
    clone.mcp_servers = [s if isinstance(s, _MCP) else _MCP(s) for s in agent.mcp_servers]
    handoffs: list[Any] = []
    for h in agent.handoffs:
        if isinstance(h, Agent):
            handoffs.append(wrap_agent(h, seen))
        elif isinstance(h, Handoff):
            handoffs.append(dataclasses.replace(h, on_invoke_handoff=_handoff(h.on_invoke_handoff, seen)))
        else:
            handoffs.append(h)
    clone.handoffs = handoffs
    return clone


def _handoff(invoke: Any, seen: dict[int, Any]) -> Any:
    async def on_invoke_handoff(*args: Any, **kwargs: Any) -> Any:
        return wrap_agent(await invoke(*args, **kwargs), seen)

    return on_invoke_handoff


def _config(run_config: RunConfig | dict[str, Any] | None) -> RunConfig:
    rc = run_config if isinstance(run_config, RunConfig) else RunConfig(**(run_config or {}))
    model = rc.model
    if isinstance(model, Model):
        model = _wrap_model(model)
    provider = rc.model_provider if rc.model_provider is not None else MultiProvider()
    if not isinstance(provider, _Provider):
        provider = _Provider(provider)
    return dataclasses.replace(rc, model=model, model_provider=provider, tracing_disabled=True)


class Runner:
    """`agents.Runner` with its runs recorded by harness (the module docstring); the same arguments."""

    @classmethod
    async def run(cls, starting_agent: Agent[Any], input: Any, *, run_config: Any = None, **kwargs: Any) -> Any:
        return await _Runner.run(wrap_agent(starting_agent), input, run_config=_config(run_config), **kwargs)

    @classmethod
    def run_sync(cls, starting_agent: Agent[Any], input: Any, *, run_config: Any = None, **kwargs: Any) -> Any:
        return _Runner.run_sync(wrap_agent(starting_agent), input, run_config=_config(run_config), **kwargs)

    @classmethod
    def run_streamed(cls, starting_agent: Agent[Any], input: Any, *, run_config: Any = None, **kwargs: Any) -> Any:
        return _Runner.run_streamed(wrap_agent(starting_agent), input, run_config=_config(run_config), **kwargs)


__all__ = ["HarnessModel", "Runner", "wrap_agent"]
