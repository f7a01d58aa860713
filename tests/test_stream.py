"""The stream assembler: any chunking of a model's stream reads as the same message, and a message writes back.

The streams here are written by encoders of this file, the way OpenAI-compatible
servers write them (deltas of any length, `data:` with and without its space,
CRLF or LF, keep-alive comments, usage in a chunk of its own, `[DONE]`; for the
responses API the named `response.*` events), then cut into chunks at any byte,
as harness.http records them (a chunk that splits a character is stored as
base64). The end-to-end tests, with the real openai client, are in test_http.py.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.trace.stream import (
    CHAT,
    RESPONSES,
    assemble,
    decode,
    events,
    http_unview,
    http_view,
    rechunk,
    reply,
    said,
)

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
NAME = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)
ARGS = st.dictionaries(NAME, st.integers(-1000, 1000) | TEXT, max_size=3).map(lambda d: orjson.dumps(d).decode())
CALL = st.fixed_dictionaries(
    {"id": st.from_regex(r"call_[a-z0-9]{4}", fullmatch=True), "name": NAME, "arguments": ARGS}
)
USAGE = st.none() | st.fixed_dictionaries({"prompt_tokens": st.integers(0, 99), "total_tokens": st.integers(0, 999)})


def pieces(draw: Any, text: str) -> list[str]:
    """text cut into deltas at any characters (at least one delta, which may be empty)."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=6))) if len(text) > 1 else []
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def wire(draw: Any, payloads: list[Any], *, named: bool = False, done: bool = True) -> list[Any]:
    """SSE text of payloads, the way a server may spell it, cut into chunks at any byte as harness.http keeps them."""
    end = draw(st.sampled_from(["\n", "\r\n"]))
    data = draw(st.sampled_from(["data: ", "data:"]))
    out = []
    for p in payloads:
        if draw(st.booleans()):
            out.append(f": keep-alive{end}{end}")  # a comment, and an empty event: both skipped
        head = f"event: {p['type']}{end}" if named else ""
        out.append(f"{head}{data}{orjson.dumps(p).decode()}{end}{end}")
    if done:
        out.append(f"{data}[DONE]{end}{end}")
    raw = "".join(out).encode()
    cuts = sorted(draw(st.sets(st.integers(1, len(raw) - 1), max_size=12)))
    chunks = []
    for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        try:
            chunks.append(raw[a:b].decode("utf-8"))
        except UnicodeDecodeError:  # a character cut in two: harness.http stores the chunk as base64
            chunks.append({"base64": base64.b64encode(raw[a:b]).decode()})
    return chunks


@st.composite
def chat_streams(draw: Any) -> tuple[list[Any], dict[str, Any]]:
    """(chunks, the view they must assemble to) of a chat completions stream."""
    meta = {"id": draw(st.from_regex(r"chatcmpl-[a-z0-9]{6}", fullmatch=True)), "created": draw(st.integers(0, 2**31))}
    model = draw(NAME)
    role = draw(st.none() | st.just("assistant"))
    content = draw(st.none() | TEXT)
    calls = draw(st.lists(CALL, max_size=3))
    finish = draw(st.none() | st.sampled_from(["stop", "length", "tool_calls"]))
    usage = draw(USAGE)

    def chunk(delta: dict[str, Any], **more: Any) -> dict[str, Any]:
        return {**meta, "object": "chat.completion.chunk", "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, **more}]}  # fmt: skip

    deltas: list[dict[str, Any]] = [{"role": role}] if role else []
    if content is not None:
        parts = pieces(draw, content)
        if deltas and draw(st.booleans()):  # the first piece in the role's chunk, as OpenAI sends it
            deltas[0]["content"] = parts.pop(0)
        deltas += [{"content": p} for p in parts]
    for i, call in enumerate(calls):
        args = pieces(draw, call["arguments"])
        fn = {"name": call["name"], "arguments": args[0]}
        deltas.append({"tool_calls": [{"index": i, "id": call["id"], "type": "function", "function": fn}]})
        deltas += [{"tool_calls": [{"index": i, "function": {"arguments": a}}]} for a in args[1:]]
    payloads = [chunk(d) for d in deltas]
    if finish is not None:
        payloads.append(chunk({}, finish_reason=finish))
    if usage is not None:
        payloads.append({**meta, "object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage})
    if not payloads:
        payloads.append(chunk({}))
    message: dict[str, Any] = {"role": role} if role else {}
    message["content"] = content
    if calls:
        message["tool_calls"] = calls
    view = {"api": CHAT, "model": model, "message": message, "finish_reason": finish}
    if usage is not None:
        view["usage"] = usage
    return wire(draw, payloads, done=draw(st.booleans())), {**view, **meta}


@st.composite
def responses_streams(draw: Any) -> tuple[list[Any], dict[str, Any]]:
    """(chunks, the view they must assemble to) of a responses API stream."""
    rid, created, model = (
        draw(st.from_regex(r"resp_[a-z0-9]{6}", fullmatch=True)),
        draw(st.integers(0, 2**31)),
        draw(NAME),
    )
    content = draw(st.none() | TEXT)
    calls = draw(st.lists(CALL, max_size=2))
    usage = draw(USAGE)
    status = draw(st.sampled_from(["completed", "incomplete"]))
    base = {"id": rid, "object": "response", "created_at": created, "model": model, "instructions": "be brief"}
    seq = iter(range(1000))
    out: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        out.append({"type": kind, "sequence_number": next(seq), **fields})

    emit("response.created", response={**base, "status": "in_progress", "output": [], "usage": None})
    output: list[dict[str, Any]] = []
    if content is not None:
        i, item_id = len(output), f"msg_{rid}"
        part = {"type": "output_text", "text": content, "annotations": []}
        item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        emit("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "content": []})
        where = {"item_id": item_id, "output_index": i, "content_index": 0}
        emit("response.content_part.added", **where, part={**part, "text": ""})
        for p in pieces(draw, content):
            emit("response.output_text.delta", **where, delta=p)
        emit("response.output_text.done", **where, text=content)
        emit("response.content_part.done", **where, part=part)
        emit("response.output_item.done", output_index=i, item=item)
        output.append(item)
    for call in calls:
        i = len(output)
        item = {"id": f"fc_{i}", "type": "function_call", "status": "completed", "call_id": call["id"],
                "name": call["name"], "arguments": call["arguments"]}  # fmt: skip
        emit("response.output_item.added", output_index=i, item={**item, "arguments": ""})
        for p in pieces(draw, call["arguments"]):
            emit("response.function_call_arguments.delta", item_id=item["id"], output_index=i, delta=p)
        emit("response.output_item.done", output_index=i, item=item)
        output.append(item)
    final = {**base, "status": status, "output": output, "usage": usage}
    emit(f"response.{status}", response=final)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    view: dict[str, Any] = {"api": RESPONSES, "model": model, "message": message, "finish_reason": status}
    if usage is not None:
        view["usage"] = usage
    return wire(draw, out, named=draw(st.booleans()), done=False), {**view, "id": rid, "created": created}


STREAMS = chat_streams() | responses_streams()


@settings(max_examples=150, deadline=None)
@given(STREAMS)
def test_any_chunking_of_a_stream_assembles_to_its_message(stream: tuple[list[Any], dict[str, Any]]) -> None:
    chunks, view = stream
    assert assemble(chunks) == view
    assert reply({"status": 200, "chunks": chunks}) == {
        "message": view["message"],
        "finish_reason": view["finish_reason"],
    }
    shown = http_view({"status": 200, "headers": {}, "chunks": chunks})
    assert shown == {"status": 200, "headers": {}, "stream": view}
    assert (
        http_unview(shown, {"status": 200, "headers": {}, "chunks": chunks})["chunks"] == chunks
    )  # unchanged: as recorded


@settings(max_examples=100, deadline=None)
@given(STREAMS, st.none() | TEXT, st.lists(CALL, max_size=2))
def test_a_changed_message_is_written_back_as_a_stream_of_the_same_kind(
    stream: tuple[list[Any], dict[str, Any]], text: str | None, calls: list[dict[str, Any]]
) -> None:
    chunks, view = stream
    message = {**view["message"], "content": text}
    message.pop("tool_calls", None)
    if calls:
        message["tool_calls"] = calls
    changed = {**view, "message": message}
    again = rechunk(changed, chunks)
    assert again is not None and assemble(again) == changed
    named = "\nevent: " in "\n" + (decode(chunks) or "")  # a named stream stays named
    assert all(c.startswith("event: ") == named for c in again)
    if view["api"] == CHAT:  # the recorded stream's [DONE], or none, as recorded
        assert (again[-1] == "data: [DONE]\n\n") == (decode(chunks) or "").rstrip().endswith("[DONE]")


def test_events_follow_the_sse_rules_the_openai_client_follows() -> None:
    text = "event: a\r\ndata: 1\r\ndata:2\r\n\r\n: comment\n\nid: 7\nretry: 5\ndata: x\n\ndata: cut"
    assert events(text) == [("a", "1\n2"), ("", "x")]  # the last event has no blank line after it: not complete
    assert events("data: y\r\rdata: z\n\n") == [("", "y"), ("", "z")]  # a lone CR ends a line too


def test_what_is_not_one_message_is_not_assembled() -> None:
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    two = {**chunk, "choices": [{"index": 1, "delta": {"content": "b"}}]}
    error = {"error": {"message": "overloaded", "type": "server_error"}}
    audio = {**chunk, "choices": [{"index": 0, "delta": {"audio": {"id": "a"}}}]}
    custom = {**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "type": "custom"}]}}]}
    for payloads in ([two], [error], [audio], [custom], [{"type": "error", "message": "x"}], [{"hello": 1}]):
        assert assemble([f"data: {orjson.dumps(p).decode()}\n\n" for p in payloads]) is None, payloads
    for chunks in ([], ["data: {not json\n\n"], [{"base64": base64.b64encode(b"data: \xff\n\n").decode()}], [7], "x"):
        assert assemble(chunks) is None
    web = {"type": "response.completed", "response": {"id": "r", "output": [{"type": "web_search_call", "id": "w"}]}}
    assert assemble([f"data: {orjson.dumps(web).decode()}\n\n"]) is None  # an output this module does not read
    plain = {"status": 200, "headers": {}, "chunks": ["just some text"]}
    assert http_view(plain) is plain and reply(plain) is None


def test_a_view_that_is_no_message_is_not_written() -> None:
    chunks = ['data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n']
    view = assemble(chunks)
    assert view is not None
    for message in ({"content": 42}, {"content": "x", "tool_calls": ["not a call"]}, {"content": {"a": 1}}):
        assert rechunk({**view, "message": message}, chunks) is None, message
    assert rechunk({**view, "api": "other"}, chunks) is None
    shown = http_view({"status": 200, "chunks": chunks})
    assert http_unview({**shown, "stream": {**shown["stream"], "message": {"content": 42}}}, {"chunks": chunks}) is None


def test_a_reply_in_one_line() -> None:
    assert said({"message": {"content": "hello"}}) == "hello"
    calls = [{"name": "search", "arguments": '{"q": "x"}'}, {"name": "open", "arguments": "{}"}]
    assert said({"message": {"content": None, "tool_calls": calls}}) == '→ search {"q": "x"}; → open {}'
    assert said({"message": {"content": None, "refusal": "no"}}) == "refused: no"
    body = {"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            "finish_reason": "tool_calls"}]}  # fmt: skip
    assert reply({"status": 200, "body": body}) == {
        "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "name": "f", "arguments": "{}"}]},
        "finish_reason": "tool_calls",
    }
    response = {"object": "response", "status": "completed", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "message", "content": [{"type": "output_text", "text": "done"}]}]}  # fmt: skip
    assert reply({"status": 200, "body": response}) == {
        "message": {"role": "assistant", "content": "done", "reasoning": "think"},
        "finish_reason": "completed",
    }
    assert reply({"status": 200, "body": {"object": "list"}}) is None and reply("text") is None
