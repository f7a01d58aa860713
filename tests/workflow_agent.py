"""Workflows for the tests, importable by name (`workflow_agent:order`), so children and the CLI can run them.

`order(topic)` asks a model (a real HTTP server: $WF_MODEL, tests/chat_server.py), reserves stock with an
idempotent tool, asks again, and ships with an unsafe tool. Its tools note each effect in $WF_LEDGER (one
line a call that took effect: the idempotency key, or the item shipped), so a test can count effects across
processes. `point(name)`: when $WF_KILL is that name, the process tells the test ($WF_MARK) and waits to be
killed there.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import urllib.request
from pathlib import Path
from typing import Any

import harness


def point(name: str) -> None:
    """Where a crash test can SIGKILL the process: it says it is here, then waits for the signal."""
    if os.environ.get("WF_KILL") != name:
        return
    mark = Path(os.environ["WF_MARK"])
    tmp = mark.with_suffix(".tmp")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, mark)
    time.sleep(600)


def note(kind: str, value: str) -> None:
    """One effect that happened, appended (and synced) to the ledger before the tool returns."""
    with open(Path(os.environ["WF_LEDGER"]) / kind, "a") as f:
        f.write(value + "\n")
        f.flush()
        os.fsync(f.fileno())


def ask(prompt: str, where: str) -> str:
    """A model call over HTTP, recorded as an `llm` crossing; `where` names its kill points."""

    def call(request: dict[str, Any]) -> str:
        body = json.dumps(request).encode()
        req = urllib.request.Request(
            os.environ["WF_MODEL"] + "/v1/chat/completions", body, {"content-type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            reply = json.load(r)
        point(f"in-{where}")  # the server answered; the crossing is not recorded yet
        return str(reply["choices"][0]["message"]["content"])

    return harness.llm({"model": "test-model", "messages": [{"role": "user", "content": prompt}]}, call)


def reserve(item: str, idempotency_key: str) -> dict[str, Any]:
    point("in-reserve")
    ledger = Path(os.environ["WF_LEDGER"]) / "reserve"
    seen = ledger.read_text().split() if ledger.exists() else []
    if idempotency_key not in seen:  # the tool dedupes by its key, as a real one does
        note("reserve", idempotency_key)
    point("in-reserve-after-effect")
    return {"reserved": item, "key": idempotency_key}


def ship(item: str) -> dict[str, Any]:
    point("in-ship")
    note("ship", item)
    point("in-ship-after-effect")
    return {"shipped": item}


RESERVE = harness.Tool(reserve, idempotent=True)
SHIP = harness.Tool(ship, idempotent=False)


@harness.workflow
def order(topic: str) -> dict[str, Any]:
    point("start")
    first = ask(f"which {topic}?", "llm-1")
    point("after-llm-1")
    held = harness.call(RESERVE, item=first)
    point("after-reserve")
    second = ask(f"ship {held['reserved']}?", "llm-2")
    point("after-llm-2")
    sent = harness.call(SHIP, item=second)
    point("after-ship")
    return {"first": first, "held": held["reserved"], "second": second, "sent": sent}


# --- a gather of three model calls at once, with random latencies -----------------------------------


async def slow_model(request: dict[str, Any]) -> str:
    """A model that answers after a random latency; each live call noted in $WF_LEDGER/model."""
    prompt = request["prompt"]
    if os.environ.get("WF_HANG") == prompt:  # this one never answers: the test kills the process meanwhile,
        await asyncio.sleep(0.3)  # once the others have answered
        mark = Path(os.environ["WF_MARK"])
        mark.with_suffix(".tmp").write_text("hanging")
        os.replace(mark.with_suffix(".tmp"), mark)
        await asyncio.sleep(600)
    await asyncio.sleep(random.uniform(0.001, 0.05))
    note("model", prompt)
    return f"answer to {prompt}"


@harness.workflow
async def fan_out(topics: list[str]) -> dict[str, Any]:
    answers = await asyncio.gather(*(harness.allm({"prompt": t}, slow_model) for t in topics))
    summary = await harness.allm({"prompt": "summarize " + ", ".join(answers)}, slow_model)
    return {"answers": answers, "summary": summary}


@harness.workflow
async def nested(topics: list[str]) -> list[str]:
    """Each branch asks twice, the second time once its first answer came. Live, a call returns once every
    call started before it was written, so the outer calls return in their start order and the trace reads
    x, y, z, x?, y?, z?; re-executed, a served call returns at once, so x? is asked before y."""

    async def branch(t: str) -> str:
        a = await harness.allm({"prompt": t}, slow_model)
        return await harness.allm({"prompt": a + "?"}, slow_model)

    return list(await asyncio.gather(*(branch(t) for t in topics)))


# --- a workflow whose agents make model calls and talk -------------------------------------------------


def researcher(name: str, topic: str) -> list[str]:
    """Agent a asks, sends its answer to b, asks again; b asks, waits for a's answer, asks with it."""
    first = ask(f"{name} on {topic}", f"llm-{name}-1")
    point(f"after-llm-{name}-1")
    if name == "a":
        harness.send("b", first)
        heard = "nothing"
    else:
        heard = harness.receive("a").body
    return [first, ask(f"{name} again, having heard {heard}", f"llm-{name}-2")]


@harness.workflow
def team(topic: str) -> dict[str, Any]:
    point("before-spawn")
    a = harness.spawn("a", researcher, "a", topic)
    b = harness.spawn("b", researcher, "b", topic)
    a.wait()
    b.wait()
    point("exited")  # both agents ended, neither is joined yet
    found = harness.join(a, b)
    point("after-join")
    held = harness.call(RESERVE, item=found[1][1])
    point("after-reserve")
    return {"a": found[0], "b": found[1], "held": held["reserved"]}
