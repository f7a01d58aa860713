"""A local OpenAI-compatible chat-completions server for the framework examples: no network, no key.

`serve()` starts it on 127.0.0.1 and returns (its base URL, a stop function).
It answers with a call of the first tool offered until the conversation
holds one tool result, then with a sentence naming that result.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def answer(body: dict[str, Any], n: int) -> dict[str, Any]:
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    tools = [t["function"]["name"] for t in body.get("tools") or []]
    if not results and tools:
        call = {"id": f"call_{n}", "type": "function",
                "function": {"name": tools[0], "arguments": json.dumps({"city": "Paris"})}}  # fmt: skip
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": f"The forecast says: {results[-1] if results else 'nothing'}."}


def serve() -> tuple[str, Callable[[], None]]:
    count = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            count[0] += 1
            message = answer(body, count[0])
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            out = json.dumps({
                "id": f"chatcmpl-{count[0]}", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # stop() waits until the serving loop looks at its flag: every 0.05 s here (the default is 0.5 s)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()  # the port closed too: a later request is refused at once

    return f"http://127.0.0.1:{server.server_address[1]}/v1", stop
