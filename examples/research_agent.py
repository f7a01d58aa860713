"""A small research agent: record a run, re-execute it offline, fork it, diff the two.

The agent answers a question in three steps. The planner asks a model for a
search query and `search`es a small offline corpus; it asks the model which
hit to `fetch`; then the synthesizer (`synthesize`, a model call behind a
step) writes the answer, citing its source. The verifier checks each result.

The model is a fake (no network, no keys) that is deliberately
non-deterministic: each call samples with a seed the agent draws through
`harness.random()`, so two live runs ask other queries, read other sources
and answer differently. Recorded, the run can still be re-executed exactly:
`harness.rerun()` serves every seed, model answer and tool result from the
trace and makes zero live calls.

    python examples/research_agent.py          # or: python -m examples.research_agent
    harness rerun TRACE --agent examples.research_agent:make_agent
    harness fork TRACE --at SEQ --set '{...}' --agent examples.research_agent:make_agent
"""

from __future__ import annotations

import random
import re
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import harness
from harness import Checkpoint, Executor, Step, ToolError

QUESTION = "Should a small web app store its data in SQLite or in Postgres?"
MODEL = "fake-researcher-1"

CORPUS = {
    "https://notes.example/sqlite-is-enough": (
        "When SQLite is enough",
        "SQLite serves most small web apps well: one file, no server to run, and reads are fast. "
        "Its limit is many concurrent writers.",
    ),
    "https://notes.example/postgres-for-growth": (
        "Postgres for apps that grow",
        "Postgres handles many concurrent writers, replication and rich types; it needs a server to run and back up.",
    ),
    "https://notes.example/concurrency-benchmarks": (
        "Write concurrency, measured",
        "Under heavy concurrent writes Postgres keeps its throughput while SQLite serializes writers; "
        "for read-mostly apps the two are close.",
    ),
    "https://notes.example/ops-cost": (
        "What a database costs to operate",
        "A server database means upgrades, backups and monitoring. SQLite's operating cost is close to zero.",
    ),
}


class FakeModel:
    """A stand-in for an LLM: answers from the prompt and the request's sampling seed, offline."""

    QUERIES = ("{a} vs {b} for a small web app", "when is {a} enough instead of {b}", "{a} {b} concurrency trade-offs")

    def __call__(self, request: dict[str, Any]) -> str:
        rng = random.Random(f"{request['seed']}|{request['prompt']}")  # a private generator: no hidden state
        task = request["task"]
        if task == "query":
            a, b = rng.sample(["sqlite", "postgres"], 2)
            return rng.choice(self.QUERIES).format(a=a, b=b)
        if task == "pick":
            return str(rng.choice(request["options"]))
        if task == "answer":
            verdict = rng.choice(["Use SQLite", "Start with SQLite", "Prefer Postgres", "It depends"])
            return f"{verdict}. {request['prompt'].split('SOURCE: ', 1)[1]}"
        raise ValueError(f"the fake model has no task {task!r}")


def ask(model: Callable[[Any], str], task: str, prompt: str, **extra: Any) -> str:
    """One model call: a sampling seed drawn through harness, then the call itself, both recorded."""
    seed = int(harness.random() * 2**32)
    return harness.llm({"model": MODEL, "task": task, "prompt": prompt, "seed": seed, **extra}, model)


def make_agent(model: Callable[[Any], str] | None = None) -> tuple[Any, dict[str, Any], Any]:
    """(planner, tools, verifier) of the research agent; the factory `harness rerun --agent` calls."""
    model = model or FakeModel()

    def planner(goal: dict[str, Any], done: list[Checkpoint]) -> Step | None:
        question = goal["question"]
        if len(done) == 0:
            return Step("search", "search", {"query": ask(model, "query", f"Write a web search query for: {question}")})
        if len(done) == 1:
            options = [hit["url"] for hit in done[0].result["hits"]]
            url = ask(model, "pick", f"Which source best answers: {question}", options=options)
            return Step("read", "fetch", {"url": url})
        if len(done) == 2:
            return Step("answer", "synthesize", {"question": question, "source": done[1].result})
        return None

    def search(query: str) -> dict[str, Any]:
        words = set(re.findall(r"[a-z]+", query.lower()))
        scored = []
        for url, (title, text) in CORPUS.items():
            score = len(words & set(re.findall(r"[a-z]+", f"{title} {text}".lower())))
            scored.append((-score, url, title))
        hits = [{"url": url, "title": title} for score, url, title in sorted(scored)[:3] if score < 0]
        return {"query": query, "hits": hits}

    def fetch(url: str) -> dict[str, Any]:
        if url not in CORPUS:
            raise ToolError(f"404: {url}")
        title, text = CORPUS[url]
        return {"url": url, "title": title, "text": text}

    def synthesize(question: str, source: dict[str, Any]) -> dict[str, Any]:
        # a model call inside a step belongs to the step: recorded as the step's result, not on its own
        prompt = f"Answer: {question}\nSOURCE: {source['text']} [{source['url']}]"
        return {"answer": ask(model, "answer", prompt), "cites": source["url"]}

    def verifier(step: Step, result: Any) -> bool:
        if step.tool == "search":
            return bool(result["hits"])
        if step.tool == "fetch":
            return bool(result["text"])
        return bool(result["cites"]) and result["cites"] in result["answer"]

    return planner, {"search": search, "fetch": fetch, "synthesize": synthesize}, verifier


def main(folder: str | None = None) -> int:
    """Record two live runs, rerun one offline, fork it at the search result, and diff."""
    folder = folder or tempfile.mkdtemp(prefix="research-runs-")
    goal = {"question": QUESTION}
    runs = []
    for _ in range(2):
        planner, tools, verifier = make_agent()
        runs.append(Executor(planner=planner, tools=tools, verifier=verifier, runs_dir=folder).run(goal))
    parent = runs[0].trace
    print(f"recorded {parent}: {runs[0].state}")
    print(f"a second live run {'matches' if harness.diff(parent, runs[1].trace).equal else 'differs'}")

    def refuse(request: Any) -> str:
        raise AssertionError("the model was called during a rerun")

    planner, tools, verifier = make_agent(refuse)
    offline = {name: _refusing(name) for name in tools}
    again = harness.rerun(parent, planner=planner, tools=offline, verifier=verifier)
    print(f"rerun: equal={again.equal}, live calls={again.live_calls}")

    search = next(c for c in harness.replay(parent).crossings if c.kind == "tool" and c.request["tool"] == "search")
    url = "https://notes.example/postgres-for-growth"
    value = {"query": search.response["query"], "hits": [{"url": url, "title": CORPUS[url][0]}]}
    planner, tools, verifier = make_agent()  # live after the branch
    child = harness.fork(parent, at=search.seq, value=value, planner=planner, tools=tools, verifier=verifier)
    print(f"fork at seq {search.seq} (search result): {child.trace}, {child.live_calls} live calls")
    sys.stdout.write(harness.diff(parent, child.trace).text(limit=5))
    print(f"runs are in {folder}: try `harness runs {folder}`")
    return 0


def _refusing(name: str) -> Callable[..., Any]:
    def tool(**args: Any) -> Any:
        raise AssertionError(f"tool {name} was called during a rerun")

    return tool


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else None))
