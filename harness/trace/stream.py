"""Model streams read as one message: OpenAI-compatible server-sent events assembled, and written back.

A streamed model reply (`stream=True`) reaches `harness.http` as server-sent
events cut into chunks wherever the network cut them, and the trace keeps
those chunks as received, to serve them again byte for byte. People, goldens
and diffs read the message they add up to instead. `assemble(chunks)` parses
the events (the WHATWG rules the openai client follows) and folds the chat
completions deltas (`chat.completion.chunk`) or the responses API events
(`response.*`) into one view:

    {"api": "chat.completions" | "responses", "model": ...,
     "message": {"role": ..., "content": "the text" | null, "refusal": ...,
                 "tool_calls": [{"id": ..., "name": ..., "arguments": "..."}]},
     "finish_reason": ..., "usage": {...}, "id": ..., "created": ...}

(`role`, `refusal`, a reasoning text, `tool_calls` and `usage` only when the
stream has them; for the responses API `finish_reason` is the response's
status.) `rechunk(view, chunks)` writes a view back as a stream the openai
client reads as that message, taking what the view leaves out (event names,
`[DONE]`, the responses API's echo of the request) from the recorded chunks:
a fork that changes the assistant's text is a valid stream.

`http_view(response)` is an http crossing's response as it is shown (`show`,
goldens, `diff`, the viewer): its `chunks` replaced by `stream`, the view,
when they assemble; `reply(response)` the message of a model call, streamed
or not, for the viewer's one-line summary.

Rules kept here:
- pure functions of their arguments: no I/O, and bad input is never an
  exception: a stream this module does not read whole (another format, an
  error event, a second choice, an output it does not know, bytes that are
  not UTF-8) assembles to None, and callers show its chunks as they are;
- the view does not depend on where the chunks were cut: any chunking of
  the same bytes assembles to the same view;
- assemble(rechunk(view, chunks)) == view for every view assemble() returns
  (and rechunk returns None for a view it cannot write so).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Any

import orjson

CHAT, RESPONSES = "chat.completions", "responses"
_LINE = re.compile(r"\r\n|\r|\n")
_VIEW_KEYS = frozenset({"api", "message", "finish_reason", "logprobs"})
_ENDS = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


def decode(chunks: Sequence[Any]) -> str | None:
    """The text of recorded chunks (each a str, or {"base64": ...}); None when it is not UTF-8 text."""
    parts = []
    for c in chunks:
        if isinstance(c, str):
            parts.append(c.encode("utf-8"))
        elif isinstance(c, dict) and isinstance(c.get("base64"), str):
            try:  # a chunk that cut a character in two is stored as base64: joined, the text is whole
                parts.append(base64.b64decode(c["base64"], validate=True))
            except (binascii.Error, ValueError):
                return None
        else:
            return None
    try:
        return b"".join(parts).decode("utf-8")
    except UnicodeDecodeError:
        return None


def events(text: str) -> list[tuple[str, str]]:
    """The complete events of a server-sent-events text, as (event name, data).

    Lines end in CRLF, LF or CR; a blank line ends an event; `data:` lines
    are joined with newlines; comments and other fields are skipped; an event
    that no blank line ends is not complete and is left out.
    """
    out = []
    name, data = "", list[str]()
    for line in _LINE.split(text)[:-1]:  # the last piece ends in no line break: not a line yet
        if not line:
            if data or name:
                out.append((name, "\n".join(data)))
            name, data = "", []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
    return out


def _payloads(chunks: Any) -> tuple[list[dict[str, Any]], bool, bool] | None:
    """The JSON objects a stream's events carry, whether it ends with [DONE], whether its events are named."""
    if not isinstance(chunks, list) or not chunks:
        return None
    text = decode(chunks)
    if text is None:
        return None
    out: list[dict[str, Any]] = []
    named = False
    for name, data in events(text):
        if data.startswith("[DONE]"):  # what the openai client stops at
            return out, True, named
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(payload, dict):
            return None
        named = named or bool(name)
        out.append(payload)
    return out, False, named


def assemble(chunks: Any) -> dict[str, Any] | None:
    """The message a recorded stream adds up to (see the module docstring), or None when it is not one."""
    parsed = _payloads(chunks)
    if parsed is None or not parsed[0]:
        return None
    payloads = parsed[0]
    first = payloads[0]
    if "choices" in first or first.get("object") == "chat.completion.chunk":
        return _chat(payloads)
    if isinstance(first.get("type"), str) and first["type"].startswith("response."):
        return _responses(payloads)
    return None


# --- chat completions -------------------------------------------------------------------------------------------


def _chat(payloads: list[dict[str, Any]]) -> dict[str, Any] | None:
    top: dict[str, Any] = {}
    role: str | None = None
    texts: dict[str, list[str]] = {"content": []}
    calls: list[dict[str, Any]] = []
    at: dict[Any, int] = {}  # a tool call's index in the stream -> its place in calls
    finish: Any = None
    usage: Any = None
    logprobs: dict[str, list[Any]] = {}
    for p in payloads:
        choices = p.get("choices")
        if not isinstance(choices, list) or p.get("object", "chat.completion.chunk") != "chat.completion.chunk":
            return None  # an error event, or another kind of object
        for k, v in p.items():
            if k in _VIEW_KEYS:
                return None  # a field the view would hide under its own
            if v is None or k in ("choices", "object", "obfuscation"):
                continue
            if k == "usage":
                usage = v
            else:  # id, created, model, system_fingerprint, service_tier, ...: the last value sent
                top[k] = v
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                return None  # n > 1: several messages in one stream
            if any(k not in ("index", "delta", "finish_reason", "logprobs") for k in choice if choice[k] is not None):
                return None
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                return None
            for k, v in delta.items():
                if v is None:
                    continue
                if k == "role" and isinstance(v, str):
                    role = role or v
                elif k == "tool_calls" and isinstance(v, list):
                    if not all(_merge_call(calls, at, c) for c in v):
                        return None
                elif isinstance(v, str):
                    texts.setdefault(k, []).append(v)
                else:
                    return None  # audio, a legacy function_call: not read here
            if choice.get("finish_reason") is not None:
                finish = choice["finish_reason"]
            lp = choice.get("logprobs")
            if lp is not None:
                if not isinstance(lp, dict) or not all(isinstance(x, list) or x is None for x in lp.values()):
                    return None
                for k, x in lp.items():
                    logprobs.setdefault(k, []).extend(x or [])
    message: dict[str, Any] = {} if role is None else {"role": role}
    for k, pieces in texts.items():
        message[k] = "".join(pieces) if pieces else None
    if calls:
        message["tool_calls"] = calls
    view: dict[str, Any] = {"api": CHAT, "model": top.pop("model", None), "message": message, "finish_reason": finish}
    if usage is not None:
        view["usage"] = usage
    if logprobs:
        view["logprobs"] = logprobs
    return {**view, **top}


def _merge_call(calls: list[dict[str, Any]], at: dict[Any, int], delta: Any) -> bool:
    """Fold one tool-call delta into calls; False for a call of another type than function."""
    if not isinstance(delta, dict):
        return False
    if delta.get("type") not in (None, "function"):
        return False
    fn = delta.get("function") or {}
    if not isinstance(fn, dict):
        return False
    key = delta.get("index")
    if key is None:  # some servers send each call whole, without an index: a new id is a new call
        key = ("id", delta.get("id")) if delta.get("id") is not None or not calls else next(reversed(at))
    if key not in at:
        at[key] = len(calls)
        calls.append({"id": None, "name": "", "arguments": ""})
    call = calls[at[key]]
    if isinstance(delta.get("id"), str) and call["id"] is None:
        call["id"] = delta["id"]
    name, arguments = fn.get("name"), fn.get("arguments")
    if isinstance(name, str) and not call["name"]:  # sent whole (some servers repeat it): the first one
        call["name"] = name
    if isinstance(arguments, str):
        call["arguments"] += arguments
    return (name is None or isinstance(name, str)) and (arguments is None or isinstance(arguments, str))


def _chat_chunks(view: dict[str, Any], done: bool) -> list[str]:
    rest = {k: v for k, v in view.items() if k not in _VIEW_KEYS and k != "usage" and v is not None}
    base = {**({"id": rest.pop("id")} if "id" in rest else {}), "object": "chat.completion.chunk", **rest}
    message = view["message"]
    out: list[dict[str, Any]] = []

    def emit(delta: dict[str, Any], **more: Any) -> None:
        out.append({**base, "choices": [{"index": 0, "delta": delta, **more}]})

    if message.get("role") is not None:
        emit({"role": message["role"]})
    for k, v in message.items():
        if k not in ("role", "tool_calls") and v is not None:
            emit({k: v})
    for i, call in enumerate(message.get("tool_calls") or []):
        head = {"index": i} if call.get("id") is None else {"index": i, "id": call["id"]}
        fn = {"name": call["name"], "arguments": call["arguments"]}
        emit({"tool_calls": [{**head, "type": "function", "function": fn}]})
    if view.get("finish_reason") is not None or view.get("logprobs"):
        more = {"logprobs": view["logprobs"]} if view.get("logprobs") else {}
        emit({}, finish_reason=view.get("finish_reason"), **more)
    if not out:  # nothing was said: one empty delta still says who answered
        emit({})
    if "usage" in view:
        out.append({**base, "choices": [], "usage": view["usage"]})
    lines = [f"data: {orjson.dumps(p).decode()}\n\n" for p in out]
    return [*lines, "data: [DONE]\n\n"] if done else lines


# --- the responses API ------------------------------------------------------------------------------------------


def _responses(payloads: list[dict[str, Any]]) -> dict[str, Any] | None:
    response: dict[str, Any] | None = None  # the last lifecycle event's response
    final = False
    items: dict[int, dict[str, Any]] = {}  # output index -> the item (as added, then done)
    deltas: dict[tuple[int, int], list[str]] = {}
    arguments: dict[int, list[str]] = {}
    for p in payloads:
        kind = p.get("type")
        if not isinstance(kind, str) or not kind.startswith("response."):
            return None  # an `error` event, or another stream
        if kind in ("response.created", "response.in_progress", "response.queued", *_ENDS.values()):
            if not isinstance(p.get("response"), dict):
                return None
            response, final = p["response"], kind in _ENDS.values()
        elif kind in ("response.output_item.added", "response.output_item.done"):
            if not isinstance(p.get("item"), dict) or type(p.get("output_index")) is not int:
                return None
            items[p["output_index"]] = p["item"]
        elif kind == "response.output_text.delta" and isinstance(p.get("delta"), str):
            deltas.setdefault((p.get("output_index", 0), p.get("content_index", 0)), []).append(p["delta"])
        elif kind == "response.function_call_arguments.delta" and isinstance(p.get("delta"), str):
            arguments.setdefault(p.get("output_index", 0), []).append(p["delta"])
    if response is None:
        return None
    output = response.get("output")
    if not final or not isinstance(output, list) or (not output and items):
        output = [_filled(items[i], i, deltas, arguments) for i in sorted(items)]  # an unfinished stream
    return _from_response(response, output)


def _filled(item: dict[str, Any], i: int, deltas: dict[Any, list[str]], arguments: dict[int, list[str]]) -> Any:
    """An output item as its deltas left it, for a stream that ended before its last event."""
    if item.get("type") == "function_call" and i in arguments:
        return {**item, "arguments": "".join(arguments[i])}
    if item.get("type") == "message" and isinstance(item.get("content"), list):
        parts = [dict(p) for p in item["content"]]
        for n, part in enumerate(parts):
            if (i, n) in deltas and isinstance(part, dict):
                part["text"] = "".join(deltas[(i, n)])
        if not parts and (i, 0) in deltas:
            parts = [{"type": "output_text", "text": "".join(deltas[(i, 0)]), "annotations": []}]
        return {**item, "content": parts}
    return item


def _from_response(response: dict[str, Any], output: list[Any]) -> dict[str, Any] | None:
    """The view of a responses API response object whose output is `output`; None for one not read here."""
    message: dict[str, Any] = {"role": "assistant", "content": None}
    texts: list[str] = []
    refusals: list[str] = []
    summaries: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in item.get("content") or []:
                ptype = part.get("type") if isinstance(part, dict) else None
                if ptype == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
                elif ptype == "refusal" and isinstance(part.get("refusal"), str):
                    refusals.append(part["refusal"])
                else:
                    return None
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments"), str):
                return None
            calls.append({"id": item.get("call_id"), "name": item["name"], "arguments": item["arguments"]})
        elif kind == "reasoning":
            for part in item.get("summary") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    summaries.append(part["text"])
        else:
            return None  # a web search, a computer call, ...: not read as a message here
    if texts:
        message["content"] = "".join(texts)
    if refusals:
        message["refusal"] = "".join(refusals)
    if summaries:
        message["reasoning"] = "\n\n".join(summaries)
    if calls:
        message["tool_calls"] = calls
    view: dict[str, Any] = {
        "api": RESPONSES, "model": response.get("model"), "message": message, "finish_reason": response.get("status"),
    }  # fmt: skip
    if response.get("usage") is not None:
        view["usage"] = response["usage"]
    if response.get("incomplete_details") is not None:
        view["incomplete_details"] = response["incomplete_details"]
    if response.get("error") is not None:
        view["error"] = response["error"]
    view["id"] = response.get("id")
    view["created"] = response.get("created_at")
    return view


def _responses_chunks(view: dict[str, Any], template: list[dict[str, Any]], named: bool) -> list[str] | None:
    """The responses API events of a view: the recorded final response with the view's message in it."""
    last: dict[str, Any] = next((p["response"] for p in reversed(template) if isinstance(p.get("response"), dict)), {})
    message = view["message"]
    response = {**last, "id": view.get("id"), "object": "response", "created_at": view.get("created")}
    response.update(model=view.get("model"), status=view.get("finish_reason"))
    for k in ("usage", "incomplete_details", "error"):
        response[k] = view.get(k)
    old: list[Any] = response["output"] if isinstance(response.get("output"), list) else []
    kept = [i for i in old if isinstance(i, dict) and i.get("type") not in ("message", "function_call")]
    reasoning = message.get("reasoning")
    if reasoning is not None:
        at = next((n for n, i in enumerate(kept) if i.get("type") == "reasoning"), None)
        if at is None:
            return None
        if reasoning != "\n\n".join(p.get("text", "") for p in kept[at].get("summary") or []):
            kept = [{**i, "summary": []} if i.get("type") == "reasoning" else i for i in kept]
            kept[at] = {**kept[at], "summary": [{"type": "summary_text", "text": reasoning}]}
    old_message = next((i for i in old if isinstance(i, dict) and i.get("type") == "message"), None)
    if message.get("content") is not None or message.get("refusal") is not None:
        parts: list[dict[str, Any]] = []
        if message.get("content") is not None:
            parts.append({"type": "output_text", "text": message["content"], "annotations": _annotations(old_message)})
        if message.get("refusal") is not None:
            parts.append({"type": "refusal", "refusal": message["refusal"]})
        skeleton = {"id": "msg_0", "type": "message", "status": "completed", "role": "assistant"}
        kept.append({**(old_message or skeleton), "content": parts})
    old_calls = [i for i in old if isinstance(i, dict) and i.get("type") == "function_call"]
    for n, call in enumerate(message.get("tool_calls") or []):
        was = old_calls[n] if n < len(old_calls) else {"id": f"fc_{n}", "type": "function_call", "status": "completed"}
        kept.append({**was, "call_id": call.get("id"), "name": call["name"], "arguments": call["arguments"]})
    response["output"] = kept
    status = view.get("finish_reason")
    if status not in _ENDS:
        return None
    seq = iter(range(1 << 62))
    out: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        out.append({"type": kind, **fields, "sequence_number": next(seq)})

    emit("response.created", response={**response, "status": "in_progress", "output": [], "usage": None})
    for i, item in enumerate(kept):
        kind = item.get("type")
        if kind == "message":
            emit("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "content": []})
            for n, part in enumerate(item["content"]):
                empty = {**part, "text": ""} if part["type"] == "output_text" else {**part, "refusal": ""}
                where = {"item_id": item.get("id"), "output_index": i, "content_index": n}
                emit("response.content_part.added", **where, part=empty)
                if part["type"] == "output_text":
                    emit("response.output_text.delta", **where, delta=part["text"], logprobs=[])
                    emit("response.output_text.done", **where, text=part["text"], logprobs=[])
                else:
                    emit("response.refusal.delta", **where, delta=part["refusal"])
                    emit("response.refusal.done", **where, refusal=part["refusal"])
                emit("response.content_part.done", **where, part=part)
        elif kind == "function_call":
            emit("response.output_item.added", output_index=i, item={**item, "arguments": "", "status": "in_progress"})
            where = {"item_id": item.get("id"), "output_index": i}
            emit("response.function_call_arguments.delta", **where, delta=item["arguments"])
            emit("response.function_call_arguments.done", **where, arguments=item["arguments"])
        else:
            emit("response.output_item.added", output_index=i, item=item)
        emit("response.output_item.done", output_index=i, item=item)
    emit(_ENDS[status], response=response)
    if named:
        return [f"event: {p['type']}\ndata: {orjson.dumps(p).decode()}\n\n" for p in out]
    return [f"data: {orjson.dumps(p).decode()}\n\n" for p in out]


def _annotations(message: dict[str, Any] | None) -> list[Any]:
    for part in (message or {}).get("content") or []:
        if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("annotations"), list):
            return list(part["annotations"])
    return []


# --- writing a view back ------------------------------------------------------------------------------------------


def rechunk(view: Any, chunks: Any) -> list[str] | None:
    """A stream (a list of str chunks) that assembles to view, in the form of the recorded chunks; None if none does.

    `chunks` are the recorded ones: they give the API, whether the stream
    ends in `[DONE]`, whether its events are named, and for the responses
    API the final response object the view's message is put into.
    """
    parsed = _payloads(chunks)
    if parsed is None or not isinstance(view, dict) or not isinstance(view.get("message"), dict):
        return None
    template, done, named = parsed
    try:  # a view whose values have the wrong types (a tool call that is no object) is written by neither
        if view.get("api") == CHAT:
            out: list[str] | None = _chat_chunks(view, done)
        elif view.get("api") == RESPONSES:
            out = _responses_chunks(view, template, named)
        else:
            return None
    except (TypeError, KeyError, AttributeError, orjson.JSONEncodeError):
        return None
    return out if out is not None and assemble(out) == view else None


# --- what callers show ------------------------------------------------------------------------------------------


def http_view(response: Any) -> Any:
    """An http crossing's response as shown: `chunks` replaced by `stream` when they assemble; else as it is."""
    if not isinstance(response, dict) or "chunks" not in response:
        return response
    view = assemble(response["chunks"])
    if view is None:
        return response
    return {**{k: v for k, v in response.items() if k != "chunks"}, "stream": view}


def http_unview(shown: Any, recorded: Any) -> Any:
    """The recorded form of a response given as shown (with `stream`): the stream re-chunked when it changed.

    None when `shown` has a `stream` that cannot be written as a stream of the
    recorded kind; `shown` itself when it is not in the shown form.
    """
    if not isinstance(shown, dict) or "stream" not in shown or "chunks" in shown:
        return shown
    if not isinstance(recorded, dict) or "chunks" not in recorded:
        return shown
    view = assemble(recorded["chunks"])
    if view is None:
        return shown
    chunks = recorded["chunks"] if shown["stream"] == view else rechunk(shown["stream"], recorded["chunks"])
    if chunks is None:
        return None
    return {**{k: v for k, v in shown.items() if k != "stream"}, "chunks": chunks}


# crossings of the framework integrations whose response is a model's answer (harness.pydantic_ai, .openai_agents)
FRAMEWORK_MODELS = frozenset({"pydantic_ai.model", "openai_agents.model", "openai_agents.stream"})


def reply(response: Any) -> dict[str, Any] | None:
    """The message of a model call's response, streamed or not: {"message", "finish_reason"}; None otherwise.

    An http crossing's response (chat completions or responses API), or a
    framework's model response as harness.pydantic_ai (Pydantic AI's
    `ModelResponse`: `parts`) and harness.openai_agents (the Agents SDK's:
    `output` items; a stream: its `response.completed` event) record it.
    """
    if isinstance(response, list):  # an Agents SDK stream: the response its last event completes
        done = [e for e in response if isinstance(e, dict) and e.get("type") == "response.completed"]
        response = done[-1].get("response") if done else None
        if isinstance(response, dict) and isinstance(response.get("output"), list):
            view = _from_response(response, response["output"])
            return None if view is None else {"message": view["message"], "finish_reason": view["finish_reason"]}
        return None
    if not isinstance(response, dict):
        return None
    if response.get("kind") == "response" and isinstance(response.get("parts"), list):
        return _pydantic_ai(response)
    if "body" not in response and isinstance(response.get("output"), list) and "usage" in response:
        view = _from_response({}, response["output"])
        return None if view is None else {"message": view["message"], "finish_reason": view["finish_reason"]}
    if "chunks" in response:
        view = assemble(response["chunks"])
        return None if view is None else {"message": view["message"], "finish_reason": view["finish_reason"]}
    body = response.get("body")
    if not isinstance(body, dict):
        return None
    if body.get("object") == "chat.completion" and isinstance(body.get("choices"), list) and body["choices"]:
        choice = body["choices"][0]
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            return None
        message = dict(choice["message"])
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [_call(c) for c in calls]
        return {"message": message, "finish_reason": choice.get("finish_reason")}
    if body.get("object") == "response" and isinstance(body.get("output"), list):
        view = _from_response(body, body["output"])
        return None if view is None else {"message": view["message"], "finish_reason": view["finish_reason"]}
    return None


def _pydantic_ai(response: dict[str, Any]) -> dict[str, Any]:
    """A Pydantic AI ModelResponse as a reply: its text parts joined, its tool-call parts as calls."""
    text, calls = [], []
    for part in response["parts"]:
        if not isinstance(part, dict):
            continue
        if part.get("part_kind") == "text" and isinstance(part.get("content"), str):
            text.append(part["content"])
        elif part.get("part_kind") == "tool-call":
            args = part.get("args")
            arguments = args if isinstance(args, str) else orjson.dumps(args).decode()
            calls.append({"id": part.get("tool_call_id"), "name": part.get("tool_name"), "arguments": arguments})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
    if calls:
        message["tool_calls"] = calls
    return {"message": message, "finish_reason": response.get("finish_reason")}


def _call(call: Any) -> Any:
    if isinstance(call, dict) and isinstance(call.get("function"), dict):
        fn = call["function"]
        return {"id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")}
    return call


def said(reply: dict[str, Any]) -> str:
    """A reply in one line of text: what the model said, else the tools it called (`→ search {"q": "x"}`)."""
    message = reply.get("message") or {}
    content = message.get("content")
    if isinstance(content, str) and content:
        return content
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if calls:
        return "; ".join(f"→ {c.get('name')} {c.get('arguments')}" for c in calls)
    if isinstance(message.get("refusal"), str):
        return f"refused: {message['refusal']}"
    return "" if content is None else str(content)
