"""A concurrent pipeline: planner -> worker_a || worker_b -> synthesizer, on real threads.

The planner asks a model which two angles to research. Two workers then run
side by side, each on its own OS thread (`harness.spawn`): each searches
and asks the model to summarize what it found, then sends its summary to the
synthesizer, a third agent that receives both (in whatever order they
arrive) and asks the model for the answer. The planner joins all three and
publishes the answer as the run's last step.

The model is a fake with latency (no network, no keys), so the workers
visibly overlap: a run takes about one worker's time, not two. The search
tool is deliberately non-deterministic: its ranking depends on a seed drawn
afresh for every run, so two live runs differ. Recorded, the run is still
re-executed exactly: `harness.rerun()` serves every agent its own crossings
in its own order, whatever the threads do, and makes zero live calls.
Forking worker_a's search re-runs only its causal future (worker_a's
summary, the synthesis, the publishing step) and makes no call at all for
worker_b.

    python examples/pipeline.py                # or: python -m examples.pipeline
    harness rerun TRACE --agent examples.pipeline:make_agent
    harness show TRACE --vector
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import harness
from harness import Checkpoint, Executor, Step
from harness.testing import read_records

QUESTION = "Should a small web app store its data in SQLite or in Postgres?"
LATENCY = 0.15  # seconds per model call: what makes the overlap visible

CORPUS = {
    "sqlite-is-enough": "SQLite serves most small web apps well: one file, no server, fast reads.",
    "sqlite-writers": "SQLite serializes writers; many concurrent writers is where it stops scaling.",
    "postgres-for-growth": "Postgres handles many concurrent writers, replication and rich types.",
    "postgres-ops": "A server database means upgrades, backups and monitoring to run.",
}


class FakeModel:
    """A stand-in for an LLM with latency: answers from the request alone, offline."""

    def __init__(self, latency: float = LATENCY):
        self.latency = latency

    def __call__(self, request: dict[str, Any]) -> str:
        time.sleep(self.latency)
        task = request["task"]
        if task == "plan":
            return "simplicity|scale"
        if task == "summarize":
            return f"[{request['angle']}] " + " ".join(hit["text"] for hit in request["hits"][:1])
        if task == "synthesize":
            notes = sorted(request["notes"])  # the model is order-insensitive; the delivery order is not
            return "Start with SQLite; move to Postgres when writers multiply. Notes: " + " / ".join(notes)
        raise ValueError(f"the fake model has no task {task!r}")


def search(query: str, seed: int) -> list[dict[str, str]]:
    """A search whose ranking depends on a seed: two live runs rank differently."""
    rng = random.Random(f"{seed}|{query}")
    keys = [k for k in CORPUS if query.split()[0] in k or rng.random() < 0.3]
    rng.shuffle(keys)
    return [{"id": k, "text": CORPUS[k]} for k in keys[:2]]


def make_agent(model: Callable[[Any], str] | None = None) -> tuple[Any, dict[str, Any], Any]:
    """(planner, tools, verifier) of the pipeline; the factory `harness rerun --agent` calls."""
    model = model or FakeModel()
    seed = int.from_bytes(os.urandom(4), "big")  # drawn afresh per run: only record/replay makes runs match

    def worker(angle: str) -> str:
        query = "sqlite simple" if angle == "simplicity" else "postgres scale"
        hits = harness.boundary("search", {"query": query}, lambda: search(query, seed))
        summary = harness.llm({"task": "summarize", "angle": angle, "hits": hits}, model)
        harness.send("synthesizer", summary)
        return summary

    def synthesizer(n: int) -> str:
        notes = [harness.receive(timeout=60).body for _ in range(n)]
        return harness.llm({"task": "synthesize", "notes": notes}, model)

    def planner(goal: dict[str, Any], done: list[Checkpoint]) -> Step | None:
        if len(done) == 0:
            angles = harness.llm({"task": "plan", "question": goal["question"]}, model).split("|")
            return Step("plan", "note", {"angles": angles})
        if len(done) == 1:
            angles = done[0].result["angles"]
            synth = harness.spawn("synthesizer", synthesizer, len(angles))
            a = harness.spawn("worker_a", worker, angles[0])
            b = harness.spawn("worker_b", worker, angles[1])
            answer, *summaries = harness.join(synth, a, b)
            return Step("answer", "publish", {"answer": answer, "summaries": summaries})
        return None

    def note(**args: Any) -> dict[str, Any]:
        return args

    def publish(answer: str, summaries: list[str]) -> dict[str, Any]:
        return {"published": answer, "sources": len(summaries)}

    def verifier(step: Step, result: Any) -> bool:
        return bool(result)

    return planner, {"note": note, "publish": publish}, verifier


def overlap(trace: str) -> float:
    """Seconds during which both workers were running, from the records they wrote themselves."""
    spans = {}
    for rec in read_records(trace):
        agent = rec.get("agent")
        if agent in ("worker_a", "worker_b"):
            start, end = spans.get(agent, (rec["ts"], rec["ts"]))
            spans[agent] = (min(start, rec["ts"]), max(end, rec["ts"]))
    (a0, a1), (b0, b1) = spans["worker_a"], spans["worker_b"]
    return max(0.0, min(a1, b1) - max(a0, b0))


def main(folder: str | None = None) -> int:
    """Record two live runs, rerun one offline, fork worker_a's search, and diff."""
    folder = folder or tempfile.mkdtemp(prefix="pipeline-runs-")
    goal = {"question": QUESTION}
    runs = []
    for _ in range(2):
        planner, tools, verifier = make_agent()
        started = time.monotonic()
        runs.append(Executor(planner=planner, tools=tools, verifier=verifier, runs_dir=folder).run(goal))
        took = time.monotonic() - started
    parent = runs[0].trace
    print(f"recorded {parent}: {runs[0].state}, the last run in {took:.2f} s")
    print(f"worker_a and worker_b overlapped for {overlap(parent):.2f} s (their own records' timestamps)")
    print(f"a second live run {'matches' if harness.diff(parent, runs[1].trace).equal else 'differs'}")

    def refuse(request: Any) -> str:
        raise AssertionError("the model was called during a rerun")

    planner, tools, verifier = make_agent(refuse)
    again = harness.rerun(parent, planner=planner, tools={n: _refusing(n) for n in tools}, verifier=verifier)
    print(f"rerun: equal={again.equal}, live calls={again.live_calls}")

    search_a = next(c for c in harness.replay(parent).agents["worker_a"] if c.kind == "search")
    value = [{"id": "postgres-ops", "text": CORPUS["postgres-ops"]}]
    planner, tools, verifier = make_agent()  # live in the branch's causal future
    child = harness.fork(parent, at=search_a.seq, value=value, planner=planner, tools=tools, verifier=verifier)
    by_agent = ", ".join(f"{a} {n}" for a, n in child.live_calls_by_agent.items())
    print(f"fork of worker_a's search (seq {search_a.seq}): {child.trace}")
    print(f"  live calls by agent: {by_agent}; worker_b: {child.live_calls_by_agent.get('worker_b', 0)}")
    sys.stdout.write(harness.diff(parent, child.trace or "").text(limit=6))
    print(f"runs are in {folder}: try `harness show TRACE --vector`")
    return 0


def _refusing(name: str) -> Callable[..., Any]:
    def tool(**args: Any) -> Any:
        raise AssertionError(f"tool {name} was called during a rerun")

    return tool


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else None))
