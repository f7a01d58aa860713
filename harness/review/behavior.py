"""The behavior view: what an agent did, in harness's own shape, the same across runs and framework releases.

A model call or a tool call reaches a trace through one of several doors,
each recording it in its own shape: `harness.http` keeps the OpenAI chat
completions or responses API exchange; `harness.pydantic_ai` Pydantic AI's
`ModelRequest`/`ModelResponse` as its codec writes them; `harness.openai_agents`
the Agents SDK's items; `harness.mcp` an MCP `CallToolResult`. `Behavior`
maps each of those records, read in trace order, to one view record of its
own shape (`VIEW`, documented field by field in docs/FORMAT.md):

    {"kind": "model_call", "via": "http" | "pydantic_ai" | "openai_agents",
     "model": ..., "settings": {...}, "tools": [{"name", "description", "parameters"}],
     "output": {...}, "history": n, "messages": [...], "reply": {...}, "finish": ...,
     "usage": {...}}
    {"kind": "tool_call", "via": ..., "tool": ..., "args": {...}, "result": ... | "error": ...}

A message is `{"role": "system" | "user" | "assistant" | "tool", "text",
"reasoning", "tool_calls": [{"id", "name", "args"}], "call", "name",
"result" | "error"}` (each field only when it has a value). Tool-call
arguments are JSON objects (a door that sends them as a JSON string is read).

Rules kept here:
- the view holds what the agent did, never a framework's serialization: a
  field is mapped by name from each door's shape, and one it does not know is
  left out, so a framework release that adds a field changes no view;
- what a framework or a server makes up is gone: response, message, item and
  reasoning ids, signatures, timestamps, durations, provider details, the
  history digest; tool-call ids are renamed `call-1`, `call-2`, ... in order
  of first appearance in the trace, the same name wherever the same call is
  named, so a tool result still points to its call;
- a call's `messages` are only those its conversation did not already hold:
  the earlier messages (the previous call's messages and its reply, sent
  again) are counted in `history`; `tools` and `output` are written when they
  differ from the conversation's previous call. So a change reads once, where
  it happened, and one call fits on a screen;
- `usage` (tokens) stays in its own field: goldens mark it ignored by default;
- pure: `Behavior` holds only the trace's ids and conversations so far, reads
  records, never files; a record that is none of these is not its business
  (`view()` returns None) and bad input is never an exception.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from .stream import assemble

VIEW = 1  # the behavior view's version: golden files name it (`"view": 1`)

# the crossings mapped here, by door
PAI_MODEL, PAI_TOOL = "pydantic_ai.model", "pydantic_ai.tool"
OA_MODEL, OA_STREAM = "openai_agents.model", "openai_agents.stream"
OA_TOOL, OA_MCP = "openai_agents.tool", "openai_agents.mcp"
MCP_CALL = "mcp.call_tool"
BOUNDARIES = frozenset({"http", PAI_MODEL, PAI_TOOL, OA_MODEL, OA_STREAM, OA_TOOL, OA_MCP, MCP_CALL})
# the fields of an OpenAI request body that are not settings (what is asked, how it is sent, who asks)
_NOT_SETTINGS = frozenset({
    "model", "messages", "input", "instructions", "tools", "response_format", "text", "stream", "stream_options",
    "user", "metadata", "store", "prompt_cache_key", "safety_identifier", "previous_response_id", "include",
    "functions", "background",
})  # fmt: skip
_CHAT_PATHS = ("/chat/completions",)
_RESPONSES_PATHS = ("/responses",)
_SYSTEM = frozenset({"system", "developer"})


@dataclass
class _Conversation:
    """One conversation's latest call: what it sent and got back, its tools and output (view form, raw ids)."""

    transcript: list[dict[str, Any]] = field(default_factory=list)  # messages sent, then the reply
    sent: list[dict[str, Any]] = field(default_factory=list)  # messages sent (Pydantic AI: to extend with `new`)
    tools: Any = None
    output: Any = None
    scope: str = ""  # Pydantic AI's per-run tool call names (`<tool-call-0>`) are unique within it


class Behavior:
    """Maps the records of one trace, in order, to their behavior view (the module docstring)."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}  # a raw tool-call id -> call-N
        self._calls: list[_Conversation] = []  # every model call so far, latest last (full-history doors)
        self._digests: dict[str, _Conversation] = {}  # Pydantic AI: the history digest a next request names
        self._scopes = 0
        self._named_so_far = 0
        self._tools: dict[str, Any] = {}  # a raw tool-call id -> the tool it called (a result names it too)

    # --- records ------------------------------------------------------------------------------------------------

    def view(self, record: Mapping[str, Any]) -> dict[str, Any] | None:
        """The view of a crossing this module maps, else None (the record is shown as it is)."""
        if record.get("kind") != "crossing" or record.get("boundary") not in BOUNDARIES:
            return None
        boundary, request = record["boundary"], record.get("request")
        has_response = "response" in record
        response = record.get("response")
        try:
            if boundary == "http":
                out = self._http(request, response)
            elif boundary == PAI_MODEL:
                out = self._pydantic_ai(request, response)
            elif boundary in (OA_MODEL, OA_STREAM):
                out = self._agents(request, response, boundary == OA_STREAM)
            else:
                out = _tool(boundary, request, response, has_response)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError):  # a shape this module does not read
            return None
        if out is None:
            return None
        if not has_response and "error" in record:
            out.pop("reply", None)
            out.pop("result", None)
            out["error"] = record["error"]
        return out

    # --- doors --------------------------------------------------------------------------------------------------

    def _http(self, request: Any, response: Any) -> dict[str, Any] | None:
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
        out = self._call("http", model or body.get("model"), settings, tools, output, sent, reply, finish, usage)
        if reply is None and isinstance(response, dict):  # an error status, a body it does not read: what came back
            out["error"] = {k: response[k] for k in ("status", "body", "chunks") if k in response}
        return out

    def _pydantic_ai(self, request: Any, response: Any) -> dict[str, Any]:
        """A Pydantic AI model request: its new messages on the conversation its history digest names."""
        history, new = request.get("history"), request.get("new") or []
        prior = self._digests.get(history) if isinstance(history, str) else None
        conversation = prior if prior is not None else _Conversation(scope=self._scope())
        sent = conversation.sent + [m for msg in new for m in _pai_message(msg, conversation.scope)]
        parameters = request.get("parameters")
        tools, output = conversation.tools, conversation.output
        if isinstance(parameters, dict):  # written when it changed: else the previous call's still hold
            tools = [_pai_tool(t) for t in parameters.get("function_tools") or []] or None
            output = _pai_output(parameters)
        reply = finish = usage = model = None
        if isinstance(response, dict):
            replies = _pai_message(response, conversation.scope)
            reply = replies[0] if replies else {"role": "assistant"}
            finish, usage, model = response.get("finish_reason"), response.get("usage"), response.get("model_name")
        settings, scope = request.get("settings") or {}, conversation.scope
        out = self._call("pydantic_ai", model, settings, tools, output, sent, reply, finish, usage, prior, scope)
        digest = hashlib.sha256(f"{history or ''}{orjson.dumps(new).decode()}".encode()).hexdigest()[:32]
        self._digests[digest] = self._calls[-1]  # harness.pydantic_ai's digest of everything sent so far
        if len(self._digests) > 1024:  # a request continues a recent one: the oldest are let go
            del self._digests[next(iter(self._digests))]
        return out

    def _agents(self, request: Any, response: Any, streamed: bool) -> dict[str, Any]:
        """An Agents SDK model call: its instructions and input items, the output items of its response."""
        sent = _instructions(request.get("instructions")) + _items(request.get("input"))
        tools = [_flat_tool(t) for t in request.get("tools") or []] or None
        handoffs = [{"name": h.get("name"), "parameters": h.get("parameters")} for h in request.get("handoffs") or []]
        if handoffs:
            tools = [*(tools or []), *({"handoff": True, **h} for h in handoffs)]
        output = {"schema": request["output"]} if request.get("output") is not None else None
        if streamed:  # the events: the response the last one completes
            done = [e for e in response or [] if isinstance(e, dict) and e.get("type") == "response.completed"]
            response = done[-1].get("response") if done else None
        reply = finish = usage = None
        if isinstance(response, dict):
            replies = _items(response.get("output") or [])
            reply = _merge(replies)
            usage = response.get("usage")
            finish = response.get("status") if streamed else None
        settings = request.get("settings") or {}
        return self._call("openai_agents", request.get("model"), settings, tools, output, sent, reply, finish, usage)

    # --- one model call -----------------------------------------------------------------------------------------

    def _scope(self) -> str:
        self._scopes += 1
        return f"{self._scopes}:"

    def _call(
        self, via: str, model: Any, settings: Any, tools: Any, output: Any, sent: list[dict[str, Any]],
        reply: Any, finish: Any, usage: Any, prior: _Conversation | None = None, scope: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        """The view of a model call that sent `sent` (the whole conversation) and got `reply` back."""
        if prior is None:  # a door that sends the whole history: the latest call whose transcript it extends
            prior = next((c for c in reversed(self._calls) if _extends(sent, c.transcript)), None)
        history = len(prior.transcript) if prior is not None and _extends(sent, prior.transcript) else 0
        if history:  # the same calls named again (Pydantic AI renames its own ids in a request): one name each
            for old, now in zip(prior.transcript, sent[:history], strict=True):  # type: ignore[union-attr]
                self._unify(old, now)
        transcript = sent + ([reply] if reply is not None else [])
        self._calls.append(_Conversation(transcript, sent, tools, output, scope))
        if len(self._calls) > 64:  # a conversation continues one of the latest calls; older ones are not looked at
            del self._calls[:-64]
        out: dict[str, Any] = {"kind": "model_call", "via": via, "model": model}
        if settings:
            out["settings"] = settings
        if tools is not None and (prior is None or tools != prior.tools):
            out["tools"] = tools
        if output is not None and (prior is None or output != prior.output):
            out["output"] = output
        if history:
            out["history"] = history
        out["messages"] = [self._named(m) for m in sent[history:]]
        if reply is not None:
            out["reply"] = self._named(reply)
        if finish is not None:
            out["finish"] = finish
        if usage is not None:
            out["usage"] = usage
        return out

    def _unify(self, old: dict[str, Any], now: dict[str, Any]) -> None:
        """Give a call named again under another raw id (Pydantic AI's `<tool-call-0>`) the name it had."""
        for a, b in zip(old.get("tool_calls") or [], now.get("tool_calls") or [], strict=False):
            if a.get("id") is not None and b.get("id") is not None and b["id"] not in self._ids:
                self._ids[b["id"]] = self.name(a["id"])
        if old.get("call") is not None and now.get("call") is not None and now["call"] not in self._ids:
            self._ids[now["call"]] = self.name(old["call"])

    def name(self, raw: Any) -> Any:
        """A tool call's name in the view: call-1, call-2, ... in order of first appearance."""
        if not isinstance(raw, str):
            return raw
        known = self._ids.get(raw)
        if known is None:
            self._named_so_far += 1
            known = self._ids[raw] = f"call-{self._named_so_far}"
        return known

    def _named(self, message: dict[str, Any]) -> dict[str, Any]:
        out = dict(message)
        if "tool_calls" in out:
            for c in out["tool_calls"]:
                if isinstance(c.get("id"), str):
                    self._tools[c["id"]] = c.get("name")
            out["tool_calls"] = [{**c, "id": self.name(c.get("id"))} for c in out["tool_calls"]]
        if "call" in out:
            if "name" not in out and self._tools.get(out["call"]) is not None:  # a door whose result names no tool
                out = {**out, "name": self._tools[out["call"]]}
            out["call"] = self.name(out["call"])
        return out


def _extends(sent: list[dict[str, Any]], transcript: list[dict[str, Any]]) -> bool:
    """Whether sent begins with transcript, tool-call ids aside (a framework may rename its own)."""
    if not transcript or len(transcript) > len(sent):
        return False
    return all(_bare(a) == _bare(b) for a, b in zip(transcript, sent, strict=False))


def _bare(message: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k != "call"}
    if "tool_calls" in out:
        out["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} for c in out["tool_calls"]]
    return out


# --- messages ---------------------------------------------------------------------------------------------------


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


def _pai_message(message: Any, scope: str) -> list[dict[str, Any]]:
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
                calls.append({"id": _pai_id(p.get("tool_call_id"), scope), "name": p.get("tool_name"),
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
            call = _pai_id(p.get("tool_call_id"), scope)
            out.append(_message("tool", call=call, name=p.get("tool_name"), result=p.get("content")))
        elif kind == "retry-prompt":
            call = _pai_id(p.get("tool_call_id"), scope) if p.get("tool_name") else None
            out.append(_message("tool" if call else "user", call=call, name=p.get("tool_name"), error=p.get("content")))
    return out


def _pai_id(raw: Any, scope: str) -> Any:
    """A Pydantic AI tool-call id: its own renaming (`<tool-call-0>`, per agent run) scoped to the run."""
    return f"{scope}{raw}" if isinstance(raw, str) and raw.startswith("<tool-call-") else raw


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


# --- tool calls -------------------------------------------------------------------------------------------------


def _tool(boundary: str, request: Any, response: Any, has_response: bool) -> dict[str, Any] | None:
    """A tool call made as a crossing (a Recorder's or a planner's): name, args, and result."""
    if not isinstance(request, dict):
        return None
    if boundary == OA_MCP and request.get("op") != "call_tool":
        return None  # a tool list: shown as it is
    via = boundary.partition(".")[0]
    name = request.get("tool")
    args = request.get("arguments") if boundary == MCP_CALL else request.get("args")
    if boundary in (MCP_CALL, OA_MCP):
        name = f"{request.get('server')}.{name}"
    out: dict[str, Any] = {"kind": "tool_call", "via": via, "tool": name, "args": args}
    if not has_response:
        return out
    if boundary in (MCP_CALL, OA_MCP):
        result, error = _mcp_result(response)
        out["error" if error else "result"] = result
    elif boundary == PAI_TOOL and isinstance(response, dict) and response.get("kind") == "tool_return":
        out["result"] = response.get("result")
    else:
        out["result"] = response
    return out


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


# --- the calls of a view, for tests -----------------------------------------------------------------------------


def model_calls(view: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The model calls of a behavior view (`normalize(trace)`), in its order."""
    return (r for r in view if r.get("kind") == "model_call")


def tool_calls(view: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The tool calls of a behavior view, in its order: a workflow's steps and tool crossings alike.

    Each is {"tool", "args", and "result" or "error"} (a step's from its ACT
    and VERIFY transitions; a step that never finished has neither), plus
    "via" for a crossing ("pydantic_ai", "openai_agents", "mcp") and "step".
    """
    open_: dict[Any, dict[str, Any]] = {}
    for r in view:
        kind = r.get("kind")
        if kind == "tool_call":
            yield {k: v for k, v in r.items() if k != "kind"}
        elif kind == "transition" and r.get("to") == "ACT":
            key = (r.get("agent"), r.get("step"))
            if key in open_:
                yield open_.pop(key)
            open_[key] = {"tool": r.get("tool"), "args": r.get("args"), "step": r.get("step")}
        elif kind == "transition" and r.get("from") == "ACT":
            call = open_.pop((r.get("agent"), r.get("step")), None)
            if call is not None:
                if "error" in r:
                    call["error"] = r["error"]
                elif "result" in r:
                    call["result"] = r["result"]
                yield call
    yield from open_.values()
