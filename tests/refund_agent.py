"""A refund agent for the CLI tests: looks an order up, asks a model whether to refund, then runs that path.

The model answers from a rule, or, when $MODEL_URL is set, from a model server
at that address (a test points it at a closed port: a server that is down).
`python refund_agent.py TRACE` records a run; `--agent refund_agent:make_agent`
loads it into `harness fork` and `harness rerun`.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import Any

import harness
from harness import Checkpoint, Step

SYSTEM = "You are a refund agent for a small shop. Read the order, then answer refund or deny, nothing else. " * 3

PATHS = {  # each decision's steps: (name, tool, argument)
    "refund": [("refund", "pay", "order"), ("notify", "email", "refunded"), ("close", "close", "summary")],
    "deny": [("explain", "email", "denied"), ("review", "ticket", "order"), ("close", "close", "summary")],
}


def model(request: Any) -> str:
    url = os.environ.get("MODEL_URL")
    if url:
        with urllib.request.urlopen(url, data=json.dumps(request).encode(), timeout=5) as r:
            return str(r.read().decode())
    last = request["messages"][-1]["content"]
    return "refund" if last.startswith("decide") else f"summary: {last}"


def planner(goal: Any, done: list[Checkpoint]) -> Step | None:
    if not done:
        return Step("lookup", "lookup", {"order": goal["order"]})
    if len(done) == 1:
        ask = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"decide {done[0].result}"}]
        path = PATHS.get(harness.llm({"messages": ask}, model), PATHS["deny"])
    else:
        path = PATHS["refund" if done[1].name == "refund" else "deny"]
    if len(done) - 1 >= len(path):
        return None
    name, tool, arg = path[len(done) - 1]
    if arg == "summary":
        text = harness.llm({"messages": [{"role": "user", "content": f"summarize {[c.name for c in done]}"}]}, model)
        return Step(name, tool, {"text": text})
    return Step(name, tool, {"order": goal["order"]} if arg == "order" else {"text": arg})


def tool(name: str) -> Any:
    return lambda **args: {"tool": name, **args}


def make_agent() -> tuple[Any, dict[str, Any], None]:
    return planner, {name: tool(name) for name in ("lookup", "pay", "email", "ticket", "close")}, None


def make_broken() -> tuple[Any, dict[str, Any], None]:
    """The agent after a bad edit: its planner fails once the order is looked up."""

    def broken(goal: Any, done: list[Checkpoint]) -> Step | None:
        if done:
            raise KeyError("amount")
        return planner(goal, done)

    return broken, make_agent()[1], None


def record(trace: Any) -> None:
    """Record a run of the agent (the model answering) at trace."""
    harness.Executor(planner=planner, tools=make_agent()[1], trace=trace).run({"order": 42})


if __name__ == "__main__":
    record(sys.argv[1])
