"""What a run called, read from its records: model calls (provider, model, tokens, messages) and tool calls.

This module is the one place that knows how each door records a call: the
behavior view (`behavior.py`), `harness.expect`, the OTLP export and the cost
ledger read calls through it and keep only their own rules.

Each door records a model call its own way; `model_call(rec)` reads any of
them into one `ModelCall` (the operation, the provider, the models asked
for and answered by, the `Usage`, the finish reason): it lives in
trace/usage.py, below the runtime, whose budget gate reads calls with it
too (one reader), and is re-exported here. `messages_in(rec)` and
`messages_out(rec)` give the messages in the OpenTelemetry GenAI shape
(`[{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call",
"id", "name", "arguments"}, {"type": "tool_call_response", "id",
"response"}]}]`); `exchange(rec)` gives an OpenAI (http), Pydantic AI or
Agents SDK model call whole in harness's own message shape (`Exchange`:
model, settings, tools offered, output asked for, messages with their
provider ids, reply, finish, usage as recorded), what the behavior view is
made of. `tool_call(rec)` reads a tool call made as a crossing (outside a
workflow's steps: name, args, server, the response and its `outcome()`) and
`mcp_tool(name, servers)` tells an MCP tool's step by its server's name.

`role(rec, header)` (trace/usage.py's too) says whether a record was served
from a parent's recording, is a fork's branch, or ran `live`.
`traces(paths)` names the traces of paths that are traces or runs folders,
and `read(trace, visit)` hands `visit` each record of one, its payloads read
back from their blobs: by default each line checked against the checksum
chain (an accident, a torn, edited, swapped, inserted or foreign line, is
`TraceCorruption` naming the line, as replay() would name it), its seq the
one before + 1, from a schema-2 header; with `full=True` through replay(),
every rule of the story checked too, at about two thirds of the speed (the
export and the ledger read what a run recorded; they resume nothing).

Rules kept here: pure functions of the records (no I/O but those two), and
a record this module does not read is None, never an exception.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import HarnessError, TraceCorruption, TraceUnreadable
from ..storage import blobs as _blobs
from ..storage import is_url, local_copy
from ..storage.files import open_regular, read_error
from ..trace.line import SCHEMA, SUFFIX
from ..trace.reader import replay, replay_url
from ..trace.stream import FRAMEWORK_MODELS, assemble, reply
from ..trace.usage import MODEL_KINDS, UNKNOWN, ModelCall, Usage, _agents_response, _str, model_call, role

# read in trace/usage.py (one reader, which the runtime's budget gate uses too), re-exported here
__all__ = ["MODEL_KINDS", "UNKNOWN", "ModelCall", "Usage", "model_call", "role"]

# the boundaries a tool call (or an MCP listing) may be recorded as, outside a workflow's steps
TOOL_KINDS = frozenset(
    {"pydantic_ai.tool", "openai_agents.tool", "openai_agents.mcp", "mcp.call_tool", "mcp.list_tools"}
)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call recorded as a crossing (outside a workflow's steps), or an MCP listing (`method` tools/list)."""

    name: str  # as the model used it: an MCP tool's own name
    args: Any
    server: str | None = None  # an MCP tool's server (as named to harness.mcp or the Agents SDK)
    method: str | None = None  # MCP's method: tools/call, tools/list
    response: Any = None  # as recorded: an MCP CallToolResult, a Pydantic AI tool return, a tool's value
    returned: bool = False  # whether the record holds a response (else it raised, or is unfinished)
    error: Any = None  # the crossing's error ({"type", "message"}) when it raised

    @property
    def tool(self) -> str:
        """The name as recorded: an MCP tool's is `<server>.<name>`."""
        return f"{self.server}.{self.name}" if self.server is not None else self.name

    def outcome(self) -> tuple[Any, bool]:
        """(what the tool gave back, whether it says it failed): an MCP result's structured content, else its
        text (`isError` its failure); a Pydantic AI tool return's value; anything else as recorded."""
        response = self.response
        if self.method is not None:
            return _mcp_result(response)
        if isinstance(response, dict) and response.get("kind") == "tool_return" and "result" in response:
            return response["result"], False
        return response, False


# --- messages, in the GenAI conventions' shape -----------------------------------------------------------------


def messages_in(rec: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The messages a model call sent (the system prompt among them), or None when its request is not read.

    A Pydantic AI request holds only the messages new since the agent run's
    previous request (`new`): those are what is given here.
    """
    kind, request = rec.get("boundary"), rec.get("request")
    if not isinstance(request, dict):
        return None
    if kind == "http":
        request = request.get("body")
        if not isinstance(request, dict):
            return None
    if kind == "pydantic_ai.model":
        return _pydantic_messages(request.get("new"))
    out: list[dict[str, Any]] = []
    system = request.get("instructions") if kind in FRAMEWORK_MODELS else request.get("system")
    if isinstance(system, str) and system:
        out.append({"role": "system", "parts": [_gen_text(system)]})
    source = request.get("input") if "input" in request else request.get("messages")
    if isinstance(source, str):
        return [*out, {"role": "user", "parts": [_gen_text(source)]}]
    if not isinstance(source, list):
        prompt = request.get("prompt")
        return [*out, {"role": "user", "parts": [_gen_text(str(prompt))]}] if isinstance(prompt, str) else out or None
    for m in source:
        if isinstance(m, dict):
            out.append(_gen_message(m))
    return out


def messages_out(rec: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """What the model answered, one message per choice (one here), or None when the response is not read."""
    response = rec.get("response")
    if rec.get("boundary") == "llm":
        if isinstance(response, str):
            return [{"role": "assistant", "parts": [_gen_text(response)], "finish_reason": "stop"}]
        if isinstance(response, dict) and isinstance(response.get("choices"), list):  # an OpenAI-shaped answer
            response = {"body": {**response, "object": "chat.completion"}}
    said = reply(response)
    if said is None:
        body = response.get("body") if isinstance(response, dict) else None
        if isinstance(body, dict) and body.get("type") == "message" and isinstance(body.get("content"), list):
            m = _gen_message({"role": "assistant", "content": body["content"]})  # Anthropic's
            return [{**m, "finish_reason": _str(body.get("stop_reason")) or "stop"}]
        return None
    message = said["message"]
    parts = _gen_parts(message.get("content"))
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            parts.append(_gen_call(call.get("id"), call.get("name"), call.get("arguments")))
    return [{"role": "assistant", "parts": parts, "finish_reason": _str(said.get("finish_reason")) or "stop"}]


def asked(rec: Mapping[str, Any]) -> list[tuple[Any, Any, Any]]:
    """The tool calls a model call's answer asks for, as (name, arguments, id): what tool spans are matched to.

    A chat completion without tool calls (the most common answer) is told at once, without reading it whole.
    """
    response = rec.get("response")
    if rec.get("boundary") in ("llm", "http") and isinstance(response, dict):
        body = response.get("body", response)
        choices = body.get("choices") if isinstance(body, dict) else None
        if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict) and not message.get("tool_calls"):
                return []
    return [
        (p.get("name"), p.get("arguments"), p.get("id"))
        for m in messages_out(rec) or ()
        for p in m["parts"]
        if p.get("type") == "tool_call"
    ]


def _gen_text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def _gen_call(id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):  # the APIs send arguments as JSON text: the conventions want the object
        with contextlib.suppress(orjson.JSONDecodeError):
            arguments = orjson.loads(arguments)
    return {"type": "tool_call", "id": id if isinstance(id, str) else None, "name": str(name), "arguments": arguments}


def _gen_parts(content: Any) -> list[dict[str, Any]]:
    """Message content (a str, or a list of typed parts of any of the APIs) as GenAI parts."""
    if isinstance(content, str):
        return [_gen_text(content)] if content else []
    out: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if isinstance(part.get("text"), str):  # text, input_text, output_text
            out.append(_gen_text(part["text"]))
        elif kind == "tool_use":  # Anthropic
            out.append(_gen_call(part.get("id"), part.get("name"), part.get("input")))
        elif kind == "tool_result":
            out.append({"type": "tool_call_response", "id": part.get("tool_use_id"), "response": part.get("content")})
        elif isinstance(kind, str):
            out.append({"type": kind})  # an image, a file: its kind, not its bytes
    return out


def _gen_message(m: dict[str, Any]) -> dict[str, Any]:
    """One message or input item of the chat completions, responses or Anthropic APIs."""
    kind = m.get("type")
    if kind == "function_call":  # the responses API's items (and the Agents SDK's)
        return {"role": "assistant", "parts": [_gen_call(m.get("call_id"), m.get("name"), m.get("arguments"))]}
    if kind == "function_call_output":
        response = {"type": "tool_call_response", "id": m.get("call_id"), "response": m.get("output")}
        return {"role": "tool", "parts": [response]}
    role = m["role"] if isinstance(m.get("role"), str) else "user"
    if role == "tool":
        response = {"type": "tool_call_response", "id": m.get("tool_call_id"), "response": m.get("content")}
        return {"role": "tool", "parts": [response]}
    parts = _gen_parts(m.get("content"))
    for call in m.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            parts.append(_gen_call(call.get("id"), fn.get("name"), fn.get("arguments")))
    return {"role": "system" if role == "developer" else role, "parts": parts}


def _pydantic_messages(new: Any) -> list[dict[str, Any]] | None:
    """Pydantic AI's messages (requests of system, user and tool-return parts; responses of text and tool calls)."""
    if not isinstance(new, list):
        return None
    out: list[dict[str, Any]] = []
    for m in new:
        if not isinstance(m, dict) or not isinstance(m.get("parts"), list):
            continue
        by_role: dict[str, list[dict[str, Any]]] = {}
        for p in m["parts"]:
            if not isinstance(p, dict):
                continue
            kind, content = p.get("part_kind"), p.get("content")
            if kind == "system-prompt":
                by_role.setdefault("system", []).append(_gen_text(str(content)))
            elif kind == "user-prompt":
                said = [_gen_text(content)] if isinstance(content, str) else _gen_parts(content)
                by_role.setdefault("user", []).extend(said)
            elif kind in ("tool-return", "retry-prompt"):
                response = {"type": "tool_call_response", "id": p.get("tool_call_id"), "response": content}
                by_role.setdefault("tool", []).append(response)
            elif kind == "text":
                by_role.setdefault("assistant", []).append(_gen_text(str(content)))
            elif kind == "tool-call":
                call = _gen_call(p.get("tool_call_id"), p.get("tool_name"), p.get("args"))
                by_role.setdefault("assistant", []).append(call)
        instructions = m.get("instructions")
        if isinstance(instructions, str) and instructions:
            out.append({"role": "system", "parts": [_gen_text(instructions)]})
        out.extend({"role": r, "parts": parts} for r, parts in by_role.items())
    return out


# --- a model call's exchange, in harness's own shape ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Exchange:
    """What one model call sent and got back, in harness's own message shape, provider ids kept.

    A message is `{"role": "system" | "user" | "assistant" | "tool", "text", "reasoning", "refusal",
    "tool_calls": [{"id", "name", "args"}], "call", "name", "result" | "error", "item"}`, each field only when
    it has a value. `messages` are those the request sent: for a door that sends the whole conversation, all
    of it; for Pydantic AI, only those new since the request its `continues` digest names (`digest` is this
    request's, which the next one names). `tools` and `output` are None when the request offered none, and
    `declared` is False when the request did not say (Pydantic AI sends them when they change).
    """

    door: str  # the crossing's boundary
    model: Any  # the model that answered, else the one asked for
    settings: Mapping[str, Any]
    tools: Any
    output: Any
    messages: list[dict[str, Any]]
    reply: dict[str, Any] | None
    finish: Any = None
    usage: Any = None  # as recorded: each provider spells it its own way (`model_call().usage` reads it)
    failure: dict[str, Any] | None = None  # an http error status, or a body not read: what came back
    declared: bool = True
    continues: str | None = None  # Pydantic AI: the digest of the history this request continues
    digest: str | None = None  # Pydantic AI: the digest of everything sent so far, with this request


EXCHANGE_KINDS = frozenset({"http", *FRAMEWORK_MODELS})  # the boundaries exchange() reads
# the fields of an OpenAI request body that are not settings (what is asked, how it is sent, who asks)
_NOT_SETTINGS = frozenset({
    "model", "messages", "input", "instructions", "tools", "response_format", "text", "stream", "stream_options",
    "user", "metadata", "store", "prompt_cache_key", "safety_identifier", "previous_response_id", "include",
    "functions", "background",
})  # fmt: skip
_CHAT_PATHS = ("/chat/completions",)
_RESPONSES_PATHS = ("/responses",)
_SYSTEM = frozenset({"system", "developer"})


def exchange(rec: Mapping[str, Any]) -> Exchange | None:
    """The exchange of a model call recorded by `http` (OpenAI chat completions or responses API), Pydantic AI or
    the Agents SDK; None for any other record, or a shape not read (never an exception)."""
    boundary = rec.get("boundary")
    if rec.get("kind") != "crossing" or boundary not in EXCHANGE_KINDS:
        return None
    request, response = rec.get("request"), rec.get("response")
    try:
        if boundary == "http":
            return _http_exchange(request, response)
        if boundary == "pydantic_ai.model":
            return _pai_exchange(request, response)
        return _agents_exchange(str(boundary), request, response)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError):  # a shape this module does not read
        return None


def _http_exchange(request: Any, response: Any) -> Exchange | None:
    """An OpenAI chat completions or responses API exchange; None for any other http call."""
    if not isinstance(request, dict) or not isinstance(request.get("body"), dict):
        return None
    url, body = str(request.get("url", "")).split("?")[0], request["body"]
    if url.endswith(_CHAT_PATHS) and isinstance(body.get("messages"), list):
        sent = [m for msg in body["messages"] for m in _chat_message(msg)]
        tools = [_chat_tool(t) for t in body.get("tools") or []] or None
        output = _response_format(body.get("response_format"))
    elif url.endswith(_RESPONSES_PATHS) and "input" in body:
        sent = _instructions(body.get("instructions")) + _items(body["input"])
        tools = [_flat_tool(t) for t in body.get("tools") or []] or None
        fmt = body.get("text", {}).get("format") if isinstance(body.get("text"), dict) else None
        output = _response_format(fmt)
    else:
        return None
    settings = {k: v for k, v in body.items() if k not in _NOT_SETTINGS and v is not None}
    reply, finish, usage, model = _http_reply(response)
    failure = None
    if reply is None and isinstance(response, dict):
        failure = {k: response[k] for k in ("status", "body", "chunks") if k in response}
    return Exchange("http", model or body.get("model"), settings, tools, output, sent, reply, finish, usage, failure)


def _pai_exchange(request: Any, response: Any) -> Exchange:
    """A Pydantic AI model request: its new messages, the digest of the history they continue."""
    history, new = request.get("history"), request.get("new") or []
    sent = [m for msg in new for m in _pai_message(msg)]
    parameters = request.get("parameters")
    declared = isinstance(parameters, dict)  # written when it changed: else the previous call's still hold
    tools = output = None
    if declared:
        tools = [_pai_tool(t) for t in parameters.get("function_tools") or []] or None
        output = _pai_output(parameters)
    reply = finish = usage = model = None
    if isinstance(response, dict):
        replies = _pai_message(response)
        reply = replies[0] if replies else {"role": "assistant"}
        finish, usage, model = response.get("finish_reason"), response.get("usage"), response.get("model_name")
    # harness.pydantic_ai's digest of everything sent so far: the next request of the run names it
    digest = hashlib.sha256(f"{history or ''}{orjson.dumps(new).decode()}".encode()).hexdigest()[:32]
    settings = request.get("settings") or {}
    continues = history if isinstance(history, str) else None
    return Exchange("pydantic_ai.model", model, settings, tools, output, sent, reply, finish, usage, None, declared,
                    continues, digest)  # fmt: skip


def _agents_exchange(boundary: str, request: Any, response: Any) -> Exchange:
    """An Agents SDK model call: its instructions and input items, the output items of its response."""
    streamed = boundary == "openai_agents.stream"
    sent = _instructions(request.get("instructions")) + _items(request.get("input"))
    tools = [_flat_tool(t) for t in request.get("tools") or []] or None
    handoffs = [{"name": h.get("name"), "parameters": h.get("parameters")} for h in request.get("handoffs") or []]
    if handoffs:
        tools = [*(tools or []), *({"handoff": True, **h} for h in handoffs)]
    output = {"schema": request["output"]} if request.get("output") is not None else None
    response = _agents_response(response)  # a stream's: the one its last event completes
    reply = finish = usage = None
    if response is not None:
        reply = _merge(_items(response.get("output") or []))
        usage = response.get("usage")
        finish = response.get("status") if streamed else None
    settings = request.get("settings") or {}
    return Exchange(boundary, request.get("model"), settings, tools, output, sent, reply, finish, usage)


# --- messages in harness's own shape ----------------------------------------------------------------------------------


def _args(value: Any) -> Any:
    """Tool-call arguments as JSON: a JSON text read, anything else as it is."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _text(content: Any) -> Any:
    """Message content as text: a string as it is, a list of parts joined when all are text, else the parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") if isinstance(p, dict) else p if isinstance(p, str) else None for p in content]
        if all(isinstance(t, str) for t in texts):
            return "".join(texts)  # type: ignore[arg-type]
        return [_part(p) for p in content]
    return content


def _part(part: Any) -> Any:
    """A non-text content part (an image, a file) as what it refers to, without ids."""
    if not isinstance(part, dict):
        return part
    return {k: v for k, v in part.items() if k not in ("id", "file_id", "annotations", "logprobs") and v is not None}


def _message(role: str, **fields: Any) -> dict[str, Any]:
    return {"role": role, **{k: v for k, v in fields.items() if v is not None and v != []}}


def _chat_message(msg: Any) -> list[dict[str, Any]]:
    """An OpenAI chat message."""
    role = msg.get("role")
    if role in _SYSTEM:
        return [_message("system", text=_text(msg.get("content")))]
    if role == "tool":
        return [_message("tool", call=msg.get("tool_call_id"), result=_text(msg.get("content")))]
    if role == "assistant":
        calls = [
            {"id": c.get("id"), "name": c["function"].get("name"), "args": _args(c["function"].get("arguments"))}
            for c in msg.get("tool_calls") or []
        ]
        reasoning = msg.get("reasoning_content", msg.get("reasoning"))
        return [
            _message("assistant", text=_text(msg.get("content")), reasoning=reasoning, refusal=msg.get("refusal"),
                     tool_calls=calls)
        ]  # fmt: skip
    return [_message(str(role), text=_text(msg.get("content")))]


def _chat_tool(tool: Any) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(fn, dict):
        return _part(tool)  # type: ignore[no-any-return]
    return {k: v for k in ("name", "description", "parameters") if (v := fn.get(k)) is not None}


def _flat_tool(tool: Any) -> dict[str, Any]:
    """A responses API or Agents SDK tool: {name, description, parameters}; another kind as what it is."""
    if not isinstance(tool, dict):
        return {"tool": tool}
    if tool.get("type", "function") == "function" and "name" in tool:
        return {k: v for k in ("name", "description", "parameters") if (v := tool.get(k)) is not None}
    return _part(tool)  # type: ignore[no-any-return]


def _response_format(fmt: Any) -> dict[str, Any] | None:
    """A structured output the request asks for (a JSON schema); None for text."""
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    schema: dict[str, Any] = fmt["json_schema"] if isinstance(fmt.get("json_schema"), dict) else fmt
    out = {"type": fmt.get("type"), "name": schema.get("name"), "schema": schema.get("schema")}
    return {k: v for k, v in out.items() if v is not None}


def _instructions(text: Any) -> list[dict[str, Any]]:
    return [_message("system", text=text)] if isinstance(text, str) and text else []


def _items(given: Any) -> list[dict[str, Any]]:
    """Responses API input or output items (the Agents SDK's too) as messages; a text input is one user message."""
    if isinstance(given, str):
        return [_message("user", text=given)]
    out: list[dict[str, Any]] = []
    for item in given or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role", "user")
            content = item.get("content")
            if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "refusal" for p in content):
                refusal = "".join(p.get("refusal", "") for p in content if p.get("type") == "refusal")
                content = [p for p in content if p.get("type") != "refusal"]
                out.append(_message(role, text=_text(content) or None, refusal=refusal))
            else:
                out.append(_message("system" if role in _SYSTEM else role, text=_text(content)))
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "name": item.get("name"), "args": _args(item.get("arguments"))}
            out.append(_message("assistant", tool_calls=[call]))
        elif kind == "function_call_output":
            out.append(_message("tool", call=item.get("call_id"), result=_args_text(item.get("output"))))
        elif kind == "reasoning":
            texts = [p.get("text") for p in item.get("summary") or [] if isinstance(p, dict)]
            texts += [p.get("text") for p in item.get("content") or [] if isinstance(p, dict)]
            out.append(_message("assistant", reasoning="\n\n".join(t for t in texts if isinstance(t, str)) or None))
        else:  # a web search, a handoff, a computer call: what it is, without its ids
            out.append(_message("assistant", item={k: v for k, v in _part(item).items() if k not in ("call_id",)}))
    return _joined(out)


def _args_text(value: Any) -> Any:
    return _text(value) if not isinstance(value, str) else value


def _joined(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive assistant items (reasoning, text, tool calls) as one assistant message, as a chat model sends."""
    out: list[dict[str, Any]] = []
    for m in messages:
        last = out[-1] if out else None
        if last is not None and last["role"] == "assistant" and m["role"] == "assistant" and _joinable(last, m):
            merged = {**last, **{k: v for k, v in m.items() if k != "tool_calls"}}
            calls = [*(last.get("tool_calls") or []), *(m.get("tool_calls") or [])]
            if calls:
                merged["tool_calls"] = calls
            out[-1] = merged
        else:
            out.append(m)
    return out


def _joinable(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """b adds to a: no field of b's but tool calls is set in a already, and a's calls come last."""
    if "tool_calls" in a and set(b) - {"role", "tool_calls"}:
        return False
    return not (set(a) & set(b) - {"role", "tool_calls"})


def _merge(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A response's output items as one reply."""
    if len(messages) == 1:
        return messages[0]
    reply: dict[str, Any] = {"role": "assistant"}
    for m in messages:
        for k, v in m.items():
            if k == "tool_calls":
                reply["tool_calls"] = [*reply.get("tool_calls", []), *v]
            elif k in ("text", "reasoning") and isinstance(reply.get(k), str):
                reply[k] += "\n\n" + v
            elif k != "role":
                reply[k] = v
    return reply


def _http_reply(response: Any) -> tuple[Any, Any, Any, Any]:
    """An OpenAI response (a JSON body or a stream) as (reply, finish, usage, model); Nones when it is neither."""
    if not isinstance(response, dict):
        return None, None, None, None
    if "chunks" in response:
        view = assemble(response["chunks"])
        if view is None:
            return None, None, None, None
        message = view["message"]
        if view["api"] == "chat.completions":
            msg = {**message, "tool_calls": [
                {"id": c.get("id"), "function": {"name": c.get("name"), "arguments": c.get("arguments")}}
                for c in message.get("tool_calls") or []
            ]}  # fmt: skip
            reply = _chat_message({"role": "assistant", **{k: v for k, v in msg.items() if k != "role"}})[0]
        else:
            calls = [{"id": c.get("id"), "name": c.get("name"), "args": _args(c.get("arguments"))}
                     for c in message.get("tool_calls") or []]  # fmt: skip
            reply = _message("assistant", text=message.get("content"), reasoning=message.get("reasoning"),
                             refusal=message.get("refusal"), tool_calls=calls)  # fmt: skip
        return reply, view.get("finish_reason"), view.get("usage"), view.get("model")
    body = response.get("body")
    if not isinstance(body, dict):
        return None, None, None, None
    if body.get("object") == "chat.completion" and body.get("choices"):
        choice = body["choices"][0]
        reply = _chat_message({**choice["message"], "role": "assistant"})[0]
        return reply, choice.get("finish_reason"), body.get("usage"), body.get("model")
    if body.get("object") == "response" and isinstance(body.get("output"), list):
        return _merge(_items(body["output"])), body.get("status"), body.get("usage"), body.get("model")
    return None, None, None, None


# --- Pydantic AI ------------------------------------------------------------------------------------------------


def _pai_message(message: Any) -> list[dict[str, Any]]:
    """A Pydantic AI ModelRequest (several messages: instructions, prompts, tool returns) or ModelResponse (one)."""
    if not isinstance(message, dict):
        return []
    parts = [p for p in message.get("parts") or [] if isinstance(p, dict)]
    if message.get("kind") == "response":
        texts, thoughts, calls = [], [], []
        for p in parts:
            kind = p.get("part_kind")
            if kind == "text":
                texts.append(p.get("content"))
            elif kind == "thinking":
                thoughts.append(p.get("content"))
            elif kind in ("tool-call", "builtin-tool-call"):
                calls.append({"id": p.get("tool_call_id"), "name": p.get("tool_name"),
                              "args": _args(p.get("args"))})  # fmt: skip
        text = "".join(t for t in texts if isinstance(t, str)) if texts else None
        reasoning = "\n\n".join(t for t in thoughts if isinstance(t, str)) if thoughts else None
        return [_message("assistant", text=text, reasoning=reasoning, tool_calls=calls)]
    out = _instructions(message.get("instructions"))
    for p in parts:
        kind = p.get("part_kind")
        if kind == "system-prompt":
            out.append(_message("system", text=p.get("content")))
        elif kind == "user-prompt":
            out.append(_message("user", text=_text(p.get("content"))))
        elif kind in ("tool-return", "builtin-tool-return"):
            call = p.get("tool_call_id")
            out.append(_message("tool", call=call, name=p.get("tool_name"), result=p.get("content")))
        elif kind == "retry-prompt":
            call = p.get("tool_call_id") if p.get("tool_name") else None
            out.append(_message("tool" if call else "user", call=call, name=p.get("tool_name"), error=p.get("content")))
    return out


def _pai_tool(tool: Any) -> dict[str, Any]:
    return {k: v for k, v in (("name", tool.get("name")), ("description", tool.get("description")),
                               ("parameters", tool.get("parameters_json_schema"))) if v is not None}  # fmt: skip


def _pai_output(parameters: dict[str, Any]) -> dict[str, Any] | None:
    """What output the agent asks for: None for text; else its mode and the output tools' or object's schema."""
    mode = parameters.get("output_mode")
    tools = [_pai_tool(t) for t in parameters.get("output_tools") or []]
    obj = parameters.get("output_object")
    if mode in (None, "text") and not tools and obj is None:
        return None
    out: dict[str, Any] = {"mode": mode}
    if tools:
        out["tools"] = tools
    if isinstance(obj, dict):
        out["schema"] = obj.get("json_schema")
    return out


# --- tool calls made as crossings ------------------------------------------------------------------------------


def tool_call(rec: Mapping[str, Any]) -> ToolCall | None:
    """A tool call (or an MCP tool listing) a crossing record holds; None for any other crossing."""
    kind, request = rec.get("boundary"), rec.get("request")
    if rec.get("kind") != "crossing" or kind not in TOOL_KINDS or not isinstance(request, dict):
        return None
    tool, server = request.get("tool"), _str(request.get("server"))
    done = rec.get("response"), "response" in rec, rec.get("error")
    if kind in ("pydantic_ai.tool", "openai_agents.tool") and isinstance(tool, str):
        return ToolCall(tool, request.get("args"), None, None, *done)
    if kind == "mcp.call_tool" and isinstance(tool, str):
        return ToolCall(tool, request.get("arguments"), server, "tools/call", *done)
    if kind == "mcp.list_tools":
        return ToolCall("", None, server, "tools/list")
    if kind == "openai_agents.mcp":
        if request.get("op") == "call_tool" and isinstance(tool, str):
            return ToolCall(tool, request.get("args"), server, "tools/call", *done)
        return ToolCall("", None, server, "tools/list")
    return None


def _mcp_result(result: Any) -> tuple[Any, bool]:
    """An MCP CallToolResult as (its value, whether it is an error): structured content, else its text."""
    if not isinstance(result, dict):
        return result, False
    error = result.get("isError") is True
    if result.get("structuredContent") is not None:
        return result["structuredContent"], error
    content = [_part(p) for p in result.get("content") or []]
    texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    if len(texts) == len(content) and texts:
        return "".join(t for t in texts if isinstance(t, str)), error
    return content, error


def mcp_tool(name: str, servers: Iterable[str], result: Any = None) -> tuple[str, str] | None:
    """(server, tool) when a workflow step's tool `name` is `<server>.<tool>` of an MCP server: one this run
    listed, or one whose `result` is a CallToolResult's wire JSON (a dict with a `content` list)."""
    server, dot, tool = name.partition(".")
    if not dot or not tool:
        return None
    answered = isinstance(result, dict) and isinstance(result.get("content"), list)
    return (server, tool) if answered or server in servers else None


def tool_error(result: Any) -> bool:
    """Whether an MCP tool's result says it failed (`isError`: the call went through, the tool did not)."""
    return isinstance(result, dict) and result.get("isError") is True


# --- where the traces are --------------------------------------------------------------------------------------


def traces(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The traces `paths` name: each a trace, or a runs folder (every `*.jsonl` in it, by name) or runs URL."""
    out: list[str] = []
    for given in paths:
        path = os.fspath(given)
        if is_url(path) and not path.rstrip("/").endswith(".jsonl"):
            from ..storage import open as open_store
            from ..storage.listing import run_segments

            out.extend(sorted(f"{path.rstrip('/')}/{name}" for name in run_segments(open_store(path))))
        elif os.path.isdir(path):
            try:
                out.extend(sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".jsonl")))
            except OSError as e:
                raise HarnessError(f"{path}: cannot list runs: {e.strerror}") from None
        else:
            out.append(path)
    return out


def read(trace: str, visit: Callable[[dict[str, Any]], None], *, full: bool = False) -> None:
    """Hand `visit` each record of the trace, blob-stored payloads read back in place (see the module docstring).

    A trace URL is read from its local copy; its damage is named against the URL. A torn tail (a last line
    without its newline: a writer died mid-line) is left out, as replay() leaves it.
    """
    local = local_copy(trace) if is_url(trace) else trace

    def each(line: bytes, rec: dict[str, Any]) -> None:
        visit(_blobs.inline(local, rec) if "blobs" in rec else rec)

    if full:
        if local is trace:
            replay(trace, on_record=each)
        else:
            replay_url(trace, on_record=each)
        return
    try:
        with os.fdopen(open_regular(local), "rb") as f:
            _chain(trace, f, visit, local)
    except OSError as e:
        raise read_error(trace, e) from None


def _chain(trace: str, f: Any, visit: Callable[[dict[str, Any]], None], local: str) -> None:
    """Each complete line of f checked against the checksum chain and the seq, then parsed, its blob-stored
    payloads read back from beside `local`, and handed to visit."""
    crc, n, cut = 0, 0, -SUFFIX - 1
    for raw in f:
        if raw[-1:] != b"\n":
            return  # a torn tail
        n += 1
        crc = zlib.crc32(raw[:cut], crc)  # line_ok(), inline: this loop is the export's hot path
        if raw[cut:-1] != b',"crc":"%08x"}' % crc:
            why = "the line's checksum does not chain on the line before (edited, torn, moved, or from another trace)"
            raise TraceCorruption(trace, n, "crc", f"{why}; `harness replay` says more", None)
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise TraceCorruption(trace, n, "not-json", str(e), None) from None
        if type(rec) is not dict or rec.get("seq") != n:
            raise TraceCorruption(trace, n, "seq", f"the record's seq is not {n}, its line number", None)
        if n == 1 and (rec.get("kind") != "header" or rec.get("schema") != SCHEMA):
            found = rec.get("schema")
            raise TraceCorruption(trace, 1, "schema", f"not a schema-{SCHEMA} trace header (schema {found!r})", 1)
        visit(_blobs.inline(local, rec) if "blobs" in rec else rec)
    if n == 0:
        raise TraceUnreadable(trace, "empty: no header line")
