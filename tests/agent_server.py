"""A chat-completions server that drives an agent's loop, for the framework tests, on 127.0.0.1.

POST /v1/chat/completions answers with a call of the first tool the request
offers (arguments `{"a": n, "b": 1}`, n the number of tool results in the
conversation) until the conversation holds `tools` results, then with the
text "done after n tools" (as SSE chunks when `stream` is true, the tool
call's arguments in two deltas). Its ids count per server from 1, so two
fresh servers answer two equal runs alike; `seen` holds each request's body
and Authorization header. `fresh=True` makes up its ids and times at random
and answers after a random latency (see chat_server.py); `b` is the second
argument of every tool call (default 1). `hold_at=k` makes the k-th request (from 1) wait
until `release()` (the test SIGKILLs the client meanwhile): `held` is set
when it arrives.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

from chat_server import ChatServer


class AgentServer(ChatServer):
    def __init__(self, tools: int = 2, hold_at: int | None = None, *, fresh: bool = False, b: int = 1) -> None:
        self.tools, self.hold_at, self.b = tools, hold_at, b
        self.held, self._release = threading.Event(), threading.Event()
        self.chats = 0
        super().__init__(fresh=fresh)

    def release(self) -> None:
        self._release.set()

    def chat(self, h: Any, body: dict[str, Any]) -> None:
        self.chats += 1
        if self.hold_at == self.chats:
            self.held.set()
            self._release.wait(120)
        n = sum(1 for m in body["messages"] if m["role"] == "tool")
        offered = [t["function"]["name"] for t in body.get("tools") or []]
        k = self.chats
        base = {"id": self.made_up("chatcmpl-", k), "created": 1700000000 + k, "model": body["model"]}
        if self.fresh:
            base["created"] = self.now()
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if n < self.tools and offered:
            call = {"id": self.made_up("call_", k), "type": "function",
                    "function": {"name": offered[0], "arguments": json.dumps({"a": n, "b": self.b})}}  # fmt: skip
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": f"done after {n} tools"}, "stop"
        with contextlib.suppress(OSError):  # a held request's client may be gone
            if not body.get("stream"):
                choice = {"index": 0, "message": message, "finish_reason": finish}
                h.send_json(200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage})
                return
            h.send_response(200)
            h.send_header("content-type", "text/event-stream")
            h.send_header("transfer-encoding", "chunked")
            h.end_headers()

            def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
                event = {**base, "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
                h.send_chunk(b"data: " + json.dumps(event).encode() + b"\n\n")

            if message.get("tool_calls"):
                call = message["tool_calls"][0]
                args = call["function"]["arguments"]
                half = len(args) // 2
                head = {"index": 0, "id": call["id"], "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": args[:half]}}  # fmt: skip
                chunk({"role": "assistant", "tool_calls": [head]})
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]})
            else:
                for i, word in enumerate(message["content"].split(" ")):
                    chunk({"role": "assistant", "content": word} if i == 0 else {"content": " " + word})
            chunk({}, finish)
            h.send_chunk(b"data: [DONE]\n\n")
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
