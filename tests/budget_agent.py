"""Runs with a budget, for tests/test_budget.py (`budget_agent:loop`, `budget_agent.planner`).

`loop(questions, max_tokens, pad)` asks a model `questions` times: OpenAI's chat completions API of
billed_agent's `BilledServer` ($BILLED_MODEL), over httpx through `harness.http`, each call an `http` crossing
with the usage the server bills. `planner` is an Executor's planner that asks it once per step.
With $BUDGET_SEEN set (a file), the process SIGKILLs itself right after each live model call: the answer's
number (the server counts the calls it answered) is one it never saw; a served answer is one it did. A crash
loop that, resumed again and again without a budget, would call the model for ever.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
from billed_agent import MODEL

import harness
import harness.http


def ask(prompt: str, max_tokens: int | None = None) -> int:
    """Ask the model; the number of the server's answer."""
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    with httpx.Client(transport=harness.http.transport()) as client:
        r = client.post(os.environ["BILLED_MODEL"] + "/v1/chat/completions", json=body)
    n = int(r.json()["id"].removeprefix("chatcmpl-"))
    seen = os.environ.get("BUDGET_SEEN")
    if seen is not None and n > int(Path(seen).read_text() if Path(seen).exists() else 0):  # a live call
        Path(seen).write_text(str(n))
        os.kill(os.getpid(), signal.SIGKILL)
    return n


@harness.workflow
def loop(questions: int, max_tokens: int | None = None, pad: int = 0) -> list[int]:
    return [ask(f"question {i}" + " " * pad, max_tokens) for i in range(questions)]


def planner(goal: int, progress: list[Any]) -> harness.Step | None:
    """One model call per step, `goal` steps."""
    if len(progress) >= goal:
        return None
    n = ask(f"plan step {len(progress)}")
    return harness.Step(f"s{len(progress)}", "note", {"answer": n})


def note(answer: int) -> int:
    return answer


def canned(request: Any) -> dict[str, Any]:
    """A model that answers at once: 3 input and 2 output tokens."""
    return {
        "model": MODEL,
        "choices": [{"message": {"content": "ok"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }


@harness.workflow
def chat(n: int) -> int:
    """n model calls of harness.llm, each asking for at most 10 tokens."""
    for i in range(n):
        harness.llm({"model": MODEL, "messages": [f"q{i}"], "max_tokens": 10}, canned)
    return n
