"""A small OpenAI-compatible chat-completions server for the tests, on 127.0.0.1.

POST /v1/chat/completions answers "echo: <last message>" (in words, one SSE
event per word when `stream` is true, sent with chunked transfer encoding).
POST /v1/responses does the same in the responses API's shape (its stream:
named `response.*` events as OpenAI sends them, a delta per word), and when
the request offers a tool and the input says "call <name>", the answer is a
call of that tool instead. Every answer carries a fresh id and the time, so
two live runs differ. `ChatServer(fresh=True)` makes up more, as a hosted
model does: random ids (`chatcmpl-<hex>`, `resp_<hex>`, `call_<hex>`, item
ids), a random time, a random request id, and a random latency before each
answer (up to 40 ms). The server notes each request's path, Authorization
header and JSON body in `seen`. POST /echo answers its JSON body and query
back (for plain httpx tests). Anything else is a 404.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


class ChatServer:
    def __init__(self, port: int = 0, *, fresh: bool = False) -> None:  # 0: a free port
        self.fresh = fresh
        self.seen: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._open: set[Any] = set()  # live connections, closed by stop() (keep-alive would outlive shutdown)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                server._open.add(self.connection)

            def finish(self) -> None:
                server._open.discard(self.connection)
                super().finish()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:  # not JSON: kept as it came
                    body = raw.decode("latin-1")
                url = urlsplit(self.path)
                if server.fresh:  # a hosted model's latency: replies to concurrent requests come in any order
                    time.sleep(random.uniform(0, 0.04))
                server.seen.append({"path": url.path, "authorization": self.headers.get("authorization"), "body": body})
                if url.path == "/v1/chat/completions":
                    server.chat(self, body)
                elif url.path == "/v1/responses":
                    server.responses(self, body)
                elif url.path == "/echo":
                    self.send_json(200, {"body": body, "query": dict(parse_qsl(url.query))}, cookie=True)
                else:
                    self.send_json(404, {"error": {"message": f"no route {url.path}"}})

            def send_json(self, status: int, data: Any, *, cookie: bool = False) -> None:
                out = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.send_header("x-request-id", server.made_up("req-", next(server._ids)))
                if cookie:
                    self.send_header("set-cookie", "session=s3cr3t-cookie; HttpOnly")
                self.end_headers()
                self.wfile.write(out)

            def send_chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        self.Handler = Handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # stop() waits for the serving loop to look at its flag: every 0.05 s, not every 0.5 s (the default)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def made_up(self, prefix: str, n: int) -> str:
        """An id the server makes up: counted, or (fresh) random, as a hosted model's are."""
        return f"{prefix}{uuid.uuid4().hex if self.fresh else n}"

    def now(self) -> int:
        return int(time.time()) + (random.randrange(1 << 20) if self.fresh else 0)

    def chat(self, h: Any, body: dict[str, Any]) -> None:
        last = body["messages"][-1]["content"]
        answer = f"echo: {last}"
        n = next(self._ids)
        base = {"id": self.made_up("chatcmpl-", n), "created": self.now(), "model": body["model"]}
        if not body.get("stream"):
            h.send_json(200, {
                **base, "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": len(answer.split()), "total_tokens": 9},
            })  # fmt: skip
            return
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        words = answer.split(" ")
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            event = {**base, "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}  # fmt: skip
            h.send_chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
        h.send_chunk(b"data: [DONE]\n\n")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def responses(self, h: Any, body: dict[str, Any]) -> None:
        given = body["input"]
        last = given if isinstance(given, str) else given[-1]["content"]
        n = next(self._ids)
        tools = [t["name"] for t in body.get("tools") or [] if t.get("type") == "function"]
        called = next((t for t in tools if f"call {t}" in last), None)
        if called is not None:
            arguments = json.dumps({"about": last})
            item: dict[str, Any] = {
                "id": self.made_up("fc_", n), "type": "function_call", "status": "completed",
                "call_id": self.made_up("call_", n), "name": called, "arguments": arguments,
            }  # fmt: skip
        else:
            item = {"id": self.made_up("msg_", n), "type": "message", "status": "completed", "role": "assistant",
                    "content": [{"type": "output_text", "text": f"echo: {last}", "annotations": []}]}  # fmt: skip
        usage = {"input_tokens": 3, "output_tokens": len(last.split()) + 1, "total_tokens": 9}
        response = {
            "id": self.made_up("resp_", n), "object": "response", "created_at": self.now(), "status": "completed",
            "model": body["model"], "output": [item], "usage": usage, "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "tools": body.get("tools") or [], "parallel_tool_calls": True,
        }  # fmt: skip
        if not body.get("stream"):
            h.send_json(200, response)
            return
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        seq = itertools.count()

        def event(kind: str, **fields: Any) -> None:
            data = json.dumps({"type": kind, "sequence_number": next(seq), **fields})
            h.send_chunk(f"event: {kind}\ndata: {data}\n\n".encode())

        event("response.created", response={**response, "status": "in_progress", "output": [], "usage": None})
        event("response.in_progress", response={**response, "status": "in_progress", "output": [], "usage": None})
        if item["type"] == "message":
            event("response.output_item.added", output_index=0, item={**item, "status": "in_progress", "content": []})
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
            event("response.content_part.added", **where, part={**part, "text": ""})
            words = part["text"].split(" ")
            for i, word in enumerate(words):
                event("response.output_text.delta", **where, delta=word if i == 0 else " " + word, logprobs=[])
            event("response.output_text.done", **where, text=part["text"], logprobs=[])
            event("response.content_part.done", **where, part=part)
        else:
            event("response.output_item.added", output_index=0, item={**item, "arguments": "", "status": "in_progress"})
            where = {"item_id": item["id"], "output_index": 0}
            half = len(item["arguments"]) // 2
            for piece in (item["arguments"][:half], item["arguments"][half:]):
                event("response.function_call_arguments.delta", **where, delta=piece)
            event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        event("response.output_item.done", output_index=0, item=item)
        event("response.completed", response=response)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def stop(self) -> None:
        """Stop serving and close the port: a later request is refused."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
        for conn in list(self._open):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
