"""A workflow whose model calls a provider bills, for the OTLP export and cost tests (`billed_agent:shop`).

`shop(item)` asks a model (the OpenAI chat completions API of `BilledServer`, over httpx through
`harness.http`, so each call is an `http` crossing with its usage), reserves the item with an idempotent
tool, asks again, and ships it with another idempotent tool. `BilledServer` answers every request with a
usage of its own (cached tokens among the input) and counts the requests it answered: what a provider bills.
`point(name)`: when $BILLED_KILL is that name, the process says so ($BILLED_MARK) and waits to be killed
(with live spans on, once the spans written so far are sent: what reached the endpoint before the kill is known).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

import harness
import harness.http
import harness.otel
import harness.testing

MODEL = "gpt-4o-mini"
ANSWERED_BY = "gpt-4o-mini-2024-07-18"


def point(name: str) -> None:
    if os.environ.get("BILLED_KILL") != name:
        return
    if harness.otel.enabled():
        harness.otel.flush(60)
    mark = Path(os.environ["BILLED_MARK"])
    mark.with_suffix(".tmp").write_text(str(os.getpid()))
    os.replace(mark.with_suffix(".tmp"), mark)
    time.sleep(600)


def ask(prompt: str) -> str:
    with httpx.Client(transport=harness.http.transport()) as client:
        r = client.post(
            os.environ["BILLED_MODEL"] + "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": prompt}]},
            headers={"authorization": "Bearer sk-billed-SECRET-0123456789abcdef"},
        )  # fmt: skip
    return str(r.json()["choices"][0]["message"]["content"])


def reserve(item: str, idempotency_key: str) -> dict[str, Any]:
    return {"reserved": item}


def ship(item: str, idempotency_key: str) -> dict[str, Any]:
    point("in-ship")
    return {"shipped": item}


RESERVE = harness.Tool(reserve, idempotent=True)
SHIP = harness.Tool(ship, idempotent=True)


@harness.workflow
def shop(item: str) -> dict[str, Any]:
    first = ask(f"which {item}?")
    point("after-chat-1")
    held = harness.call(RESERVE, item=first)
    second = ask(f"ship {held['reserved']}?")
    point("after-chat-2")
    sent = harness.call(SHIP, item=second)
    return {"first": first, "second": second, "sent": sent}


class Served:
    """An HTTP server on a free port of 127.0.0.1, on a thread, for as long as a test needs it."""

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.httpd.shutdown()
            self.httpd.server_close()


class BilledServer(Served):
    """OpenAI's chat completions on 127.0.0.1: answer n has 100 + n input tokens (40 cached) and 7 output tokens."""

    def __init__(self) -> None:
        self.billed = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                server.billed += 1
                n = server.billed
                said = {"role": "assistant", "content": f"answer {n} to {body['messages'][-1]['content']}"}
                answer = {
                    "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                    "model": ANSWERED_BY,
                    "choices": [{"index": 0, "finish_reason": "stop", "message": said}],
                    "usage": {"prompt_tokens": 100 + n, "completion_tokens": 7, "total_tokens": 107 + n,
                              "prompt_tokens_details": {"cached_tokens": 40}},
                }  # fmt: skip
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.serve(Handler)


def serving() -> Iterator[BilledServer]:
    """A BilledServer for a fixture's life."""
    s = BilledServer()
    yield s
    s.stop()


def one_run(trace: Path, steps: int = 1) -> Path:
    """A small Executor run (no model call) at `trace`."""
    harness.Executor(planner=harness.testing.fixed_plan(harness.testing.steps(steps)),
                     tools={"work": harness.testing.counter()}, trace=trace).run(0)  # fmt: skip
    return trace


CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
import billed_agent, harness.otel
live = {live!r}
if live is not None:
    harness.otel.enable(live, protocol="http/json")
out = billed_agent.shop.run("widgets", trace=sys.argv[1], resume="auto")
print(json.dumps({{"state": out.state, "result": out.result}}))
"""


def run_child(
    trace: Path, server: BilledServer, kill: str | None = None, live: str | None = None
) -> dict[str, Any] | None:
    """Run (or resume) shop in a new process; with `kill`, SIGKILL it at that point (None), else its outcome.
    With `live` (an OTLP/HTTP endpoint), the child sends its spans there live (`harness.otel`)."""
    import subprocess
    import sys

    from children import ZYGOTE, kill_at

    env = {**os.environ, "BILLED_MODEL": server.url, "BILLED_MARK": str(trace) + ".mark"}
    env.pop("BILLED_KILL", None)
    script = CHILD.format(tests=str(Path(__file__).resolve().parent), live=live)
    if kill is None:
        done = ZYGOTE.run([sys.executable, "-c", script, str(trace)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return {**json.loads(done.stdout.splitlines()[-1]), "stderr": done.stderr}
    Path(env["BILLED_MARK"]).unlink(missing_ok=True)
    child = ZYGOTE.Popen([sys.executable, "-c", script, str(trace)], env={**env, "BILLED_KILL": kill},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    kill_at(Path(env["BILLED_MARK"]), child, kill)
    return None


def crash_twice(trace: Path, server: BilledServer, live: str | None = None) -> list[bytes]:
    """shop SIGKILLed after its first model call, resumed and SIGKILLed inside its last tool, resumed to the end
    (each process sending its spans to `live`, if given).

    Returns the trace's bytes after each process (three snapshots)."""
    snapshots = []
    for kill in ("after-chat-1", "in-ship", None):
        out = run_child(trace, server, kill, live)
        snapshots.append(trace.read_bytes())
        if kill is None:
            assert out is not None and out["state"] == "DONE", out
    return snapshots
