"""A small OpenAI-compatible chat-completions server for the tests, on 127.0.0.1.

POST /v1/chat/completions answers "echo: <last message>" (in words, one SSE
event per word when `stream` is true, sent with chunked transfer encoding).
Every answer carries a fresh id and the time, so two live runs differ. The
server notes each request's path, Authorization header and JSON body in
`seen`. POST /echo answers its JSON body and query back (for plain httpx
tests). Anything else is a 404.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


class ChatServer:
    def __init__(self) -> None:
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
                server.seen.append({"path": url.path, "authorization": self.headers.get("authorization"), "body": body})
                if url.path == "/v1/chat/completions":
                    server.chat(self, body)
                elif url.path == "/echo":
                    self.send_json(200, {"body": body, "query": dict(parse_qsl(url.query))}, cookie=True)
                else:
                    self.send_json(404, {"error": {"message": f"no route {url.path}"}})

            def send_json(self, status: int, data: Any, *, cookie: bool = False) -> None:
                out = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.send_header("x-request-id", f"req-{next(server._ids)}")
                if cookie:
                    self.send_header("set-cookie", "session=s3cr3t-cookie; HttpOnly")
                self.end_headers()
                self.wfile.write(out)

            def send_chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        self.Handler = Handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def chat(self, h: Any, body: dict[str, Any]) -> None:
        last = body["messages"][-1]["content"]
        answer = f"echo: {last}"
        n = next(self._ids)
        base = {"id": f"chatcmpl-{n}", "created": int(time.time()), "model": body["model"]}
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

    def stop(self) -> None:
        """Stop serving and close the port: a later request is refused."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
        for conn in list(self._open):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
