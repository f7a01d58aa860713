"""An async research agent for the resume tests: three drafts gathered concurrently, a human picks one, it is saved.

The planner awaits `asyncio.gather` of three `harness.allm` calls. Each task
first waits a random moment (as a real client does before its request
leaves: connection pools, a thread that reads the platform), so the three
start in another order in every process, and the model answers after a
random latency. The model is a function behind `harness.allm` that counts
its calls in `$GATHER_DIR/calls.log` (one JSON line per live call) and
answers with the call's number in the text: a draft asked again is another
draft. Then the planner asks a human which draft to save
(`harness.interrupt`), and saves it (`$GATHER_DIR/saved.log`).

Environment: GATHER_DIR (or a goal {"dir": ...}, for Ray workers that do not
see the test's environment; {"pick": N} saves draft N without asking), GATHER_KILL=answered makes the planner
write `$GATHER_DIR/answered` and wait to be killed right after the answer
came back; GATHER_KILL=plan makes the model's call for the "plan" draft write
`$GATHER_DIR/in-call` and wait to be killed; GATHER_ORDER=plan,cost,risk
starts the drafts' calls in that order (30 ms apart) instead of at random.

    python gather_agent.py TRACE start|answer|resume

runs (start), answers (index 1) or resumes the run in TRACE and prints its
outcome as JSON; `--agent gather_agent:make_agent` loads it into the CLI.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import orjson

import harness
from harness import Executor, Step

TOPICS = ("cost", "risk", "plan")


_DIR: list[str] = []  # a goal's "dir", once a planner saw one


def here() -> Path:
    return Path(_DIR[-1] if _DIR else os.environ["GATHER_DIR"])


def calls() -> list[Any]:
    """The live model calls made so far, by every process."""
    log = here() / "calls.log"
    return [orjson.loads(line) for line in log.read_bytes().splitlines()] if log.exists() else []


def saved() -> list[Any]:
    log = here() / "saved.log"
    return [orjson.loads(line) for line in log.read_bytes().splitlines()] if log.exists() else []


def _wait_to_be_killed(marker: str) -> None:
    (here() / marker).write_text(str(os.getpid()))
    time.sleep(600)


async def model(request: dict[str, Any]) -> dict[str, Any]:
    n = len(calls())
    with open(here() / "calls.log", "ab") as f:
        f.write(orjson.dumps(request) + b"\n")
    if request["topic"] == "plan" and os.environ.get("GATHER_KILL") == "plan":
        _wait_to_be_killed("in-call")
    await asyncio.sleep(random.uniform(0, 0.02))
    return {"text": f"{request['topic']} draft, call {n + 1}"}


async def draft(topic: str) -> str:
    order = os.environ.get("GATHER_ORDER")
    await asyncio.sleep(order.split(",").index(topic) * 0.03 if order else random.uniform(0, 0.02))
    said = await harness.allm({"topic": topic, "words": 50}, model)
    return str(said["text"])


async def planner(goal: Any, done: list[Any]) -> Step | None:
    if isinstance(goal, dict) and "dir" in goal:
        _DIR.append(goal["dir"])
    if done:
        return None
    drafts = await asyncio.gather(*(draft(t) for t in TOPICS))
    unattended = isinstance(goal, dict) and "pick" in goal
    picked = {"index": goal["pick"]} if unattended else harness.interrupt({"pick one": drafts})
    if os.environ.get("GATHER_KILL") == "answered":
        _wait_to_be_killed("answered")
    return Step("save", "save", {"text": drafts[picked["index"]]})


def save(text: str) -> dict[str, Any]:
    with open(here() / "saved.log", "ab") as f:
        f.write(orjson.dumps(text) + b"\n")
    return {"saved": text}


def make_agent() -> tuple[Any, dict[str, Any], None]:
    return planner, {"save": save}, None


if __name__ == "__main__":
    trace, mode = sys.argv[1], sys.argv[2]
    ex = Executor(planner=planner, tools={"save": save}, trace=trace, resume=mode != "start")
    answer = {"answer": {"index": 1}} if mode == "answer" else {}
    out = asyncio.run(ex.arun("report", **answer))
    results = [c.result for c in out.checkpoints]
    print(orjson.dumps({"state": out.state, "pending": out.pending, "results": results}).decode())
