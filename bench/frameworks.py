"""Pydantic AI's durable execution: the same agent under harness's HarnessDurability and DBOS's DBOSDurability.

Usage: python bench/frameworks.py [--smoke | --quick] [--json PATH]
(also run by `python bench/run.py --peers`; needs `pip install -e '.[peers]'` for DBOS)

The agent: Pydantic AI's FunctionModel calling a tool `add` N times, then
answering (N tool calls, N + 1 model requests). Three variants, each in its
own child process (DBOS is a process-wide singleton), rounds interleaved:

- plain: the agent with no durability (what the framework itself costs: its
  per-request cost grows with the history, so the overhead of a durable
  variant is measured against this, not as an absolute time);
- harness: `Agent(..., capabilities=[HarnessDurability()])` run inside a
  `@harness.workflow`, durability "fsync" (every record synced);
- dbos: `DBOSDurability()` with a SQLite system database, the agent run in a
  `@DBOS.workflow`, the tool a `@DBOS.step` (DBOSDurability does not wrap
  function tools: a tool is durable only as a step).

Measured per variant: the run's wall time (after imports and set-up), the
overhead per durable call, (variant - plain) / (2N + 1), and bytes per call
(the trace and its blobs; the SQLite files, less the same database with no
run). Resume: the run is killed (os._exit) inside tool call N + 1 of N + 10,
then a new process resumes it (harness: `W.run(resume=True)`; DBOS:
`DBOS.launch()` recovers it) and the time from the resume's start to the
result is taken (imports excluded). Keys: `pydantic_ai_step_vs_dbos`
(harness overhead per call / DBOS's) and `pydantic_ai_resume_vs_dbos`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

SIZES = {"smoke": (5, 1), "quick": (50, 3), "full": (200, 3)}  # (tool calls, rounds)
EXTRA = 10  # tool calls after the crash point, made by the resume


def _agent(capability: Any, n: int, crash_at: int | None) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages for p in m.parts if p.part_kind == "tool-return")
        if done < n:
            return ModelResponse(parts=[ToolCallPart("add", {"a": done, "b": 1})])
        return ModelResponse(parts=[TextPart(f"done after {done} tools")])

    agent = Agent(FunctionModel(model), name="bench", capabilities=[capability] if capability else [])
    calls = [0]

    def add(a: int, b: int) -> int:
        calls[0] += 1
        if crash_at is not None and calls[0] == crash_at:
            os._exit(0)  # the crash: no close, no flush
        return a + b

    return agent, add


def child(variant: str, phase: str, folder: str, n: int) -> dict[str, Any]:
    """One process: a run (`run`), a run killed inside tool call n + 1 (`crash`), its resume (`resume`), or (DBOS)
    a database set up with no run (`empty`)."""
    import asyncio

    from pydantic_ai.usage import UsageLimits

    total = n + EXTRA if phase != "run" else n
    crash = n + 1 if phase == "crash" else None
    limits = UsageLimits(request_limit=None)
    if variant == "plain":
        agent, add = _agent(None, total, crash)
        agent.tool_plain(add)
        t0 = time.perf_counter()
        out = agent.run_sync("go", usage_limits=limits).output
        return {"s": time.perf_counter() - t0, "out": out, "bytes": 0}
    if variant == "harness":
        import harness
        from harness.pydantic_ai import HarnessDurability

        agent, add = _agent(HarnessDurability(), total, crash)
        agent.tool_plain(add)

        @harness.workflow
        async def run() -> str:
            return (await agent.run("go", usage_limits=limits)).output

        trace = os.path.join(folder, "run.jsonl")
        t0 = time.perf_counter()
        outcome = run.run(trace=trace, durability="fsync", resume=phase == "resume")
        took = time.perf_counter() - t0
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
        return {"s": took, "out": outcome.result, "bytes": size}
    from dbos import DBOS, SetWorkflowID
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    db = os.path.join(folder, "dbos.sqlite")
    DBOS(config={"name": "pai-bench", "system_database_url": f"sqlite:///{db}", "log_level": "WARNING"})
    agent, add = _agent(DBOSDurability(), total, crash)
    agent.tool_plain(DBOS.step()(add))

    @DBOS.workflow()
    async def run_agent() -> str:
        return (await agent.run("go", usage_limits=limits)).output

    try:
        t0 = time.perf_counter()
        DBOS.launch()  # a resume: recovery of this executor's pending workflow starts here
        if phase == "empty":
            out = None
        elif phase == "resume":

            async def recovered() -> Any:
                return await (await DBOS.retrieve_workflow_async("wf-1")).get_result()

            out = asyncio.run(recovered())
        else:
            with SetWorkflowID("wf-1"):
                out = asyncio.run(run_agent())
        took = time.perf_counter() - t0
    finally:
        DBOS.destroy()
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if not f.endswith("-shm"))
    return {"s": took, "out": out, "bytes": size}


def _spawn(variant: str, phase: str, folder: str, n: int) -> dict[str, Any]:
    env = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    args = [sys.executable, os.path.abspath(__file__), "--child", variant, phase, folder, str(n)]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
    if phase == "crash":
        return {}
    if done.returncode != 0:
        raise RuntimeError(f"bench/frameworks.py child {variant} {phase} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def check_installed() -> str | None:
    """None when every variant can run, else what to install."""
    try:
        import dbos  # noqa: F401
        import pydantic_ai.durable_exec.dbos  # noqa: F401
    except ImportError as e:
        return f"{e.name} is missing: pip install -e '.[peers]'"
    return None


def run(mode: str, folder: str, log: Callable[[str], None]) -> dict[str, Any]:
    n, rounds = SIZES[mode]
    calls = 2 * n + 1
    times: dict[str, list[float]] = {"plain": [], "harness": [], "dbos": []}
    resumes: dict[str, list[float]] = {"harness": [], "dbos": []}
    sizes: dict[str, float] = {}
    variants = ["plain", "harness", "dbos"]
    for r in range(rounds):
        order = variants[r % 3 :] + variants[: r % 3]
        for v in order:
            where = tempfile.mkdtemp(dir=folder)
            got = _spawn(v, "run", where, n)
            assert got["out"] == f"done after {n} tools", got
            times[v].append(got["s"])
            if v == "dbos" and "dbos" not in sizes:  # less the same database with no run in it
                empty = tempfile.mkdtemp(dir=folder)
                sizes[v] = (got["bytes"] - _spawn("dbos", "empty", empty, 0)["bytes"]) / calls
            elif v == "harness":
                sizes[v] = got["bytes"] / calls
            shutil.rmtree(where, ignore_errors=True)
        for v in ("harness", "dbos"):
            where = tempfile.mkdtemp(dir=folder)
            _spawn(v, "crash", where, n)
            got = _spawn(v, "resume", where, n)
            assert got["out"] == f"done after {n + EXTRA} tools", got
            resumes[v].append(got["s"])
            shutil.rmtree(where, ignore_errors=True)
        log(f"pydantic ai round {r + 1}/{rounds}: " + ", ".join(f"{k} {t[-1]:.2f}s" for k, t in times.items()))
    plain = statistics.median(times["plain"])
    over = {v: max(statistics.median(times[v]) - plain, 1e-9) / calls for v in ("harness", "dbos")}
    resume = {v: statistics.median(t) for v, t in resumes.items()}
    return {
        "keys": {
            "pydantic_ai_step_vs_dbos": over["harness"] / over["dbos"],
            "pydantic_ai_resume_vs_dbos": resume["harness"] / resume["dbos"],
        },
        "detail": {
            "tool_calls": n,
            "durable_calls": calls,
            "run_s": {k: statistics.median(t) for k, t in times.items()},
            "overhead_ms_per_call": {k: v * 1e3 for k, v in over.items()},
            "resume_s": resume,
            "bytes_per_call": sizes,
        },
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        variant, phase, folder, n = argv[1], argv[2], argv[3], int(argv[4])
        print(json.dumps(child(variant, phase, folder, n)))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true")
    g.add_argument("--smoke", action="store_true")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    missing = check_installed()
    if missing:
        print(f"bench/frameworks.py: {missing}", file=sys.stderr)
        return 2
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    folder = tempfile.mkdtemp(prefix="harness-bench-pai-")
    try:
        result = run(mode, folder, lambda m: print(m, file=sys.stderr, flush=True))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
