"""Peers: the same N-step agent on harness, LangGraph, DBOS and Burr, side by side.

Usage: python bench/peers.py [--smoke | --quick] [--steps N] [--rounds R] [--only NAME,...] [--json PATH] [--dir DIR]
(also run by `python bench/run.py --peers`; the peers come from `pip install -e '.[peers]'`)

The agent: a planner that is shown the list of verified results so far and
picks the next tool call (or stops after N steps), a tool whose result is a
~290-byte dict, and a verifier. Every variant runs that agent in its own
recommended durable configuration and gives the planner the same view of
history that harness gives its own (the whole list of verified results):

- harness, flush and fsync: `Executor(trace=..., durability=...)`; the
  planner gets `progress`, rebuilt from the trace on resume;
- LangGraph + SqliteSaver, `durability="sync"` and the default ("async"):
  one node per step, the results kept in the graph state with an
  `operator.add` reducer (what a LangGraph planner needs to see them), so
  every checkpoint stores the whole list and the cost grows with the run
  (quadratically in total); "last result only" is the same graph keeping only
  the last result, a floor for LangGraph whose planner does not see history;
- DBOS with a SQLite system database: a workflow whose step is the tool call;
  the results are a local list of the workflow, rebuilt on recovery from the
  recorded step outputs (linear);
- Burr + SQLitePersister: one action per step, the results kept in the state
  with `State.append` (the persister stores the whole state every step:
  quadratic, like LangGraph); "last result only" as for LangGraph.

Durable functions (the workflow variants): one function, each round a model
call (`decide`: the next call's args, or None when the goal is met) and a
tool call, each a durable call: a harness workflow (`harness.llm` and
`harness.call`), LangGraph's functional API (`@entrypoint` with SqliteSaver,
a `@task` per call, durability="sync"), and a DBOS workflow with a
`@DBOS.step` per call. Each resumes by running the function again over its
recorded calls; the crash lands after the last model call (the one that
said done) was recorded. "The floor" runs the same function writing the
records a workflow writes (four JSON lines a round) with one fdatasync a
round before the tool call, as fsync mode syncs, and nothing else: what
bounds a durable call in fsync mode on this disk, whatever harness does.

Each variant runs in child processes so that none of the peers' global state
(DBOS is a process-wide singleton) leaks into another, and so that the run can
end as a crash does: the "run" child takes N steps and, when its planner is
asked for step N+1, reports its clocks and calls os._exit (no close, no flush,
no clean shutdown). The "resume" child then opens the store and finishes the
run (the planner says done); it times that, checks that the run ended with N
results, closes cleanly and reports the bytes on disk. Rounds are interleaved
(the order of the variants rotated each round); medians and ranges over
rounds are reported, and a ratio is the median of the ratios within rounds.

Measured per variant: µs per step (wall and CPU of the child, all threads),
resume time, bytes per step (every file the store left, `-shm` index
excepted, after the clean close, less the same store set up with no step),
and fsyncs per step: one more run per variant under `strace -f` counting
fsync, fdatasync and sync_file_range between two marker syscalls the child
makes (`statfs` of a path that names the phase), so setup and teardown are not
counted. The SQLite settings each peer actually runs with (journal_mode,
synchronous) are read from the peer's own connection.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import operator
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any, TypedDict

# ---------------------------------------------------------------- the agent

GOAL = {"task": "read the parser's modules one by one", "repo": "acme/parser"}
RUN = "bench-run"  # the run's id in the peers' stores (thread id, app id, workflow id)
_WORDS = """the parser fails on nested quotes because the tokenizer splits escaped strings before the grammar
sees them so a fix belongs in lexer state handling with a regression test covering backslash sequences""".split()  # noqa: SIM905 - prose reads better than a list


CALLS = [0]  # tool calls made by this process: a resume that makes any redoes steps the crash lost
ON_PLAN: list[Callable[[int], None]] = []  # the child's hook, told how many results the planner is shown


def tool(path: str, after: str) -> dict[str, Any]:
    """The tool: a result of about 290 bytes (serialized), the same for every variant at the same step."""
    CALLS[0] += 1
    rng = random.Random(path + after)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < 210:
        words.append(rng.choice(_WORDS))
    return {"ok": True, "path": path, "sha": f"{rng.getrandbits(64):016x}", "lines": rng.randint(40, 400),
            "content": " ".join(words)[:210]}  # fmt: skip


def plan(results: Sequence[dict[str, Any]], steps: int) -> tuple[str, dict[str, Any]] | None:
    """The planner: shown the verified results so far, picks the next call, or None when the goal is met."""
    n = len(results)
    for hook in ON_PLAN:
        hook(n)
    if n >= steps:
        return None
    after = results[-1]["sha"] if results else "start"  # the next call depends on what came before
    return f"read-{n}", {"path": f"src/parser/mod_{n % 40}.py", "after": after}


def verify(result: Any) -> bool:
    return isinstance(result, dict) and result.get("ok") is True


@dataclass(frozen=True)
class Child:
    """What a child process knows: its variant, phase, folder, N, where to report, and the marker prefix."""

    variant: str
    phase: str  # "run", "resume" or "empty"
    folder: str
    steps: int
    report: str

    def mark(self, what: str) -> None:
        """A syscall strace sees (statfs of a path naming the phase and the point), to bracket the counted window."""
        with contextlib.suppress(OSError):  # the path does not exist: strace logs the call all the same
            os.statvfs(os.path.join(self.folder, f".peers-mark-{self.phase}-{what}"))

    def send(self, figures: dict[str, Any]) -> None:
        with open(self.report, "w") as f:
            json.dump(figures, f)
            f.flush()
            os.fsync(f.fileno())


def crash_after(child: Child, t0: tuple[float, float], settings: dict[str, Any]) -> Callable[[], None]:
    """The planner's hook when it is asked for step N+1: report the clocks of the N steps, then die."""

    def die() -> None:
        wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
        child.mark("end")
        child.send({"wall": wall, "cpu": cpu, "settings": settings})
        os._exit(0)

    def steady(n: int) -> None:  # the first step is done: what follows is the steady state
        if n == 1:
            child.mark("steady")

    ON_PLAN.append(steady)
    return die


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def sqlite_settings(con: Any) -> dict[str, Any]:
    """journal_mode and synchronous as the peer's own connection sees them."""
    sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    journal = con.execute("PRAGMA journal_mode").fetchone()[0]
    level = con.execute("PRAGMA synchronous").fetchone()[0]
    return {"journal_mode": str(journal).upper(), "synchronous": sync.get(level, level)}


# ---------------------------------------------------------------- harness


def harness_child(child: Child, durability: str) -> dict[str, Any]:
    from harness import Executor, Step

    path = os.path.join(child.folder, "trace.jsonl")
    settings = {"durability": durability}
    die: list[Callable[[], None]] = []

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        nxt = plan(_Results(progress), child.steps)
        if nxt is None:
            if die:
                die[0]()
            return None
        name, args = nxt
        return Step(name, "read_file", args)

    def verifier(step: Any, result: Any) -> bool:
        return verify(result)

    ex = Executor(planner=planner, tools={"read_file": tool}, verifier=verifier, trace=path,
                  durability=durability, resume=child.phase == "resume")  # fmt: skip
    if child.phase == "empty":
        return {"settings": settings}
    if child.phase == "run":
        child.mark("begin")
        t0 = clocks()
        die.append(crash_after(child, t0, settings))
        ex.run(GOAL)
        raise AssertionError("the run should have ended at step N+1")
    child.mark("begin")
    t0 = clocks()
    out = ex.run(GOAL)
    wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
    child.mark("end")
    assert out.state == "DONE" and len(out.checkpoints) == child.steps, out
    return {"wall": wall, "cpu": cpu, "settings": settings}


class _Results(Sequence[dict[str, Any]]):
    """The planner's view of harness's progress: the verified results, without copying the list each step."""

    def __init__(self, progress: list[Any]):
        self.progress = progress

    def __len__(self) -> int:
        return len(self.progress)

    def __getitem__(self, i: Any) -> Any:
        return self.progress[i].result


# ---------------------------------------------------------------- LangGraph


class History(TypedDict):
    results: Annotated[list[dict[str, Any]], operator.add]
    done: bool


class Last(TypedDict):
    count: int
    last: dict[str, Any] | None
    done: bool


def langgraph_child(child: Child, durability: str | None, history: bool) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, StateGraph

    db = os.path.join(child.folder, "langgraph.db")
    die: list[Callable[[], None]] = []

    def step_history(state: History) -> dict[str, Any]:
        results = state["results"]
        nxt = plan(results, child.steps)
        if nxt is None:
            if die:
                die[0]()
            return {"done": True}
        result = tool(**nxt[1])
        assert verify(result)
        return {"results": [result]}

    def step_last(state: Last) -> dict[str, Any]:
        last = state["last"]
        count = state["count"]
        nxt = plan(_Seen(count, last), child.steps)
        if nxt is None:
            if die:
                die[0]()
            return {"done": True}
        result = tool(**nxt[1])
        assert verify(result)
        return {"count": count + 1, "last": result}

    graph: Any = StateGraph(History) if history else StateGraph(Last)  # type: ignore[arg-type]
    graph.add_node("step", step_history if history else step_last)
    graph.set_entry_point("step")
    graph.add_conditional_edges("step", lambda s: END if s["done"] else "step")
    config: dict[str, Any] = {"configurable": {"thread_id": RUN}, "recursion_limit": child.steps + 10}
    kwargs = {} if durability is None else {"durability": durability}
    first = {"results": [], "done": False} if history else {"count": 0, "last": None, "done": False}
    with SqliteSaver.from_conn_string(db) as saver:
        saver.setup()
        app = graph.compile(checkpointer=saver)
        settings = {"durability": durability or "default (async)", **sqlite_settings(saver.conn)}
        if child.phase == "empty":
            return {"settings": settings}
        child.mark("begin")
        t0 = clocks()
        if child.phase == "run":
            die.append(crash_after(child, t0, settings))
            app.invoke(first, config, **kwargs)
            raise AssertionError("the run should have ended at step N+1")
        out = app.invoke(None, config, **kwargs)  # from the latest checkpoint
        wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
        child.mark("end")
        done = len(out["results"]) if history else out["count"]
        assert out["done"] and done == child.steps, (done, child.steps)
    return {"wall": wall, "cpu": cpu, "settings": settings}


class _Seen(Sequence[dict[str, Any]]):
    """What a planner that keeps only the last result can be shown: a count and the last element."""

    def __init__(self, count: int, last: dict[str, Any] | None):
        self.count, self.last = count, last

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: Any) -> Any:
        if i != -1 or self.last is None:
            raise IndexError("only the last result is kept")
        return self.last


# ---------------------------------------------------------------- DBOS


def dbos_child(child: Child) -> dict[str, Any]:
    import logging

    from dbos import DBOS, SetWorkflowID

    db = os.path.join(child.folder, "dbos.sqlite")
    die: list[Callable[[], None]] = []
    DBOS(config={"name": "peers-bench", "system_database_url": f"sqlite:///{db}", "log_level": "WARNING",
                 "run_admin_server": False})  # fmt: skip
    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    def read_file(path: str, after: str) -> dict[str, Any]:
        return tool(path, after)

    @DBOS.workflow()
    def agent(steps: int) -> int:
        results: list[dict[str, Any]] = []
        while True:
            nxt = plan(results, steps)
            if nxt is None:
                if die:
                    die[0]()
                return len(results)
            result = read_file(**nxt[1])
            assert verify(result)
            results.append(result)

    return _dbos_phases(child, DBOS, SetWorkflowID, agent, die)


def dbos_settings(dbos: Any) -> dict[str, Any]:
    engine = dbos._dbos_global_instance._sys_db.engine if hasattr(dbos, "_dbos_global_instance") else None
    if engine is None:
        from dbos import _dbos

        engine = _dbos._dbos_global_instance._sys_db.engine  # type: ignore[union-attr]
    raw = engine.raw_connection()
    try:
        return sqlite_settings(raw)
    finally:
        raw.close()


# ---------------------------------------------------------------- Burr


def burr_child(child: Child, history: bool) -> dict[str, Any]:
    from burr.core import ApplicationBuilder, State, action, default, expr
    from burr.core.persistence import SQLitePersister

    db = os.path.join(child.folder, "burr.db")
    die: list[Callable[[], None]] = []

    @action(reads=["results"], writes=["results", "done"])
    def step_history(state: State) -> State:
        results = state["results"]
        nxt = plan(results, child.steps)
        if nxt is None:
            if die:
                die[0]()
            return state.update(done=True)
        result = tool(**nxt[1])
        assert verify(result)
        return state.append(results=result)

    @action(reads=["count", "last"], writes=["count", "last", "done"])
    def step_last(state: State) -> State:
        nxt = plan(_Seen(state["count"], state["last"]), child.steps)
        if nxt is None:
            if die:
                die[0]()
            return state.update(done=True)
        result = tool(**nxt[1])
        assert verify(result)
        return state.update(count=state["count"] + 1, last=result)

    @action(reads=[], writes=[])
    def finish(state: State) -> State:
        return state

    persister = SQLitePersister.from_values(db_path=db)
    persister.initialize()
    settings = sqlite_settings(persister.connection)
    if child.phase == "empty":
        persister.connection.close()
        return {"settings": settings}
    first = {"results": [], "done": False} if history else {"count": 0, "last": None, "done": False}
    child.mark("begin")
    t0 = clocks()
    app = (
        ApplicationBuilder()
        .with_actions(step=step_history if history else step_last, finish=finish)
        .with_transitions(("step", "finish", expr("done")), ("step", "step", default))
        .initialize_from(persister, resume_at_next_action=True, default_state=first, default_entrypoint="step")
        .with_state_persister(persister)
        .with_identifiers(app_id=RUN)
        .build()
    )
    if child.phase == "run":
        die.append(crash_after(child, t0, settings))
        app.run(halt_after=["finish"])
        raise AssertionError("the run should have ended at step N+1")
    _, _, state = app.run(halt_after=["finish"])
    wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
    child.mark("end")
    persister.connection.close()
    done = len(state["results"]) if history else state["count"]
    assert done == child.steps, done
    return {"wall": wall, "cpu": cpu, "settings": settings}


# ---------------------------------------------------------------- durable functions


def decide(n: int, after: str, steps: int) -> dict[str, Any] | None:
    """The function's model call: the next tool call's args after n results, or None when the goal is met."""
    for hook in ON_PLAN:
        hook(n)
    if n >= steps:
        return None
    return {"path": f"src/parser/mod_{n % 40}.py", "after": after}


def rounds(model: Callable[[int, str], Any], call: Callable[[dict[str, Any]], Any], die: list[Any]) -> int:
    """The durable function's body, the same for every variant: model call, tool call, until the model says done."""
    results: list[dict[str, Any]] = []
    while True:
        nxt = model(len(results), results[-1]["sha"] if results else "start")
        if nxt is None:
            if die:
                die[0]()  # the run's process dies here: the resume re-executes it all
            return len(results)
        result = call(nxt)
        assert verify(result)
        results.append(result)


def workflow_child(child: Child, durability: str) -> dict[str, Any]:
    import harness

    path = os.path.join(child.folder, "trace.jsonl")
    die: list[Callable[[], None]] = []
    settings = {"durability": durability}

    def model(n: int, after: str) -> Any:
        return harness.llm({"n": n, "after": after}, lambda r: decide(r["n"], r["after"], child.steps))

    @harness.workflow
    def agent(steps: int) -> int:
        return rounds(model, lambda args: harness.call(tool, **args), die)

    if child.phase == "empty":
        return {"settings": settings}
    child.mark("begin")
    t0 = clocks()
    if child.phase == "run":
        die.append(crash_after(child, t0, settings))
        agent.run(child.steps, trace=path, durability=durability)
        raise AssertionError("the run should have ended at step N+1")
    out = agent.run(child.steps, trace=path, durability=durability, resume=True)
    wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
    child.mark("end")
    assert out.state == "DONE" and out.result == child.steps, out
    return {"wall": wall, "cpu": cpu, "settings": settings}


def floor_child(child: Child) -> dict[str, Any]:
    """What bounds a durable call in fsync mode: the same function and the same records a harness workflow writes
    (a crossing, an intent, a result, a checkpoint a round, as JSON lines), one write(2) each and one fdatasync a
    round before the tool call (fsync mode's one sync point), with nothing of harness. Its resume reads the lines."""
    import orjson

    path = os.path.join(child.folder, "trace.jsonl")
    settings = {"durability": "fsync (the floor: write(2) and fdatasync alone)"}
    if child.phase == "empty":
        return {"settings": settings}
    child.mark("begin")
    t0 = clocks()
    if child.phase == "resume":
        with open(path, "rb") as f:
            n = sum(1 for line in f.read().splitlines() if orjson.loads(line)["kind"] == "checkpoint")
        wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
        child.mark("end")
        assert n == child.steps, n
        return {"wall": wall, "cpu": cpu, "settings": settings}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    seq = [0]

    def write(kind: str, **fields: Any) -> None:
        seq[0] += 1
        os.write(fd, orjson.dumps({"seq": seq[0], "kind": kind, **fields, "ts": 0.0}) + b"\n")

    def model(n: int, after: str) -> Any:
        out = decide(n, after, child.steps)
        write("crossing", boundary="llm", request={"n": n, "after": after}, response=out)
        return out

    def call(args: dict[str, Any]) -> Any:
        write("transition", to="ACT", tool="tool", args=args)
        os.fdatasync(fd)  # the intent, and the crossing before it, durable before the effect
        result = tool(**args)
        write("transition", to="VERIFY", result=result)
        write("checkpoint")
        return result

    die = [crash_after(child, t0, settings)]
    rounds(model, call, die)
    raise AssertionError("the run should have ended at step N+1")


def langgraph_functional_child(child: Child) -> dict[str, Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.func import entrypoint, task

    db = os.path.join(child.folder, "langgraph.db")
    die: list[Callable[[], None]] = []

    @task
    def model_call(n: int, after: str) -> dict[str, Any] | None:
        return decide(n, after, child.steps)

    @task
    def tool_call(path: str, after: str) -> dict[str, Any]:
        return tool(path, after)

    config: dict[str, Any] = {"configurable": {"thread_id": RUN}}
    with SqliteSaver.from_conn_string(db) as saver:
        saver.setup()

        @entrypoint(checkpointer=saver)
        def agent(steps: int) -> int:
            return rounds(lambda n, a: model_call(n, a).result(), lambda args: tool_call(**args).result(), die)

        settings = {"durability": "sync", **sqlite_settings(saver.conn)}
        if child.phase == "empty":
            return {"settings": settings}
        child.mark("begin")
        t0 = clocks()
        if child.phase == "run":
            die.append(crash_after(child, t0, settings))
            agent.invoke(child.steps, config, durability="sync")
            raise AssertionError("the run should have ended at step N+1")
        done = agent.invoke(None, config, durability="sync")  # its recorded tasks' results served again
        wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
        child.mark("end")
        assert done == child.steps, done
    return {"wall": wall, "cpu": cpu, "settings": settings}


def dbos_workflow_child(child: Child) -> dict[str, Any]:
    import logging

    from dbos import DBOS, SetWorkflowID

    db = os.path.join(child.folder, "dbos.sqlite")
    die: list[Callable[[], None]] = []
    DBOS(config={"name": "peers-bench", "system_database_url": f"sqlite:///{db}", "log_level": "WARNING",
                 "run_admin_server": False})  # fmt: skip
    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    def model_call(n: int, after: str) -> dict[str, Any] | None:
        return decide(n, after, child.steps)

    @DBOS.step()
    def tool_call(path: str, after: str) -> dict[str, Any]:
        return tool(path, after)

    @DBOS.workflow()
    def agent(steps: int) -> int:
        return rounds(model_call, lambda args: tool_call(**args), die)

    return _dbos_phases(child, DBOS, SetWorkflowID, agent, die)


def _dbos_phases(child: Child, dbos: Any, set_id: Any, agent: Callable[[int], int], die: list[Any]) -> dict[str, Any]:
    """A DBOS child's phases: launch and run (dying at the end), or launch and time the recovery."""
    if child.phase == "resume":
        child.mark("begin")
        t0 = clocks()
        dbos.launch()  # recovers the pending workflow in a background thread
        handle = None
        while handle is None:  # until recovery has registered it (its status becomes SUCCESS when done)
            try:
                handle = dbos.retrieve_workflow(RUN)
            except Exception:
                time.sleep(0.001)
        done = handle.get_result(polling_interval_sec=0.001)  # not its default 1 s: time recovery, not polling
        wall, cpu = time.perf_counter() - t0[0], time.process_time() - t0[1]
        child.mark("end")
        settings = dbos_settings(dbos)
        dbos.destroy()
        assert done == child.steps, done
        return {"wall": wall, "cpu": cpu, "settings": settings}
    dbos.launch()
    settings = dbos_settings(dbos)
    if child.phase == "empty":
        dbos.destroy()
        return {"settings": settings}
    child.mark("begin")
    t0 = clocks()
    die.append(crash_after(child, t0, settings))
    with set_id(RUN):
        agent(child.steps)
    raise AssertionError("the run should have ended at step N+1")


# ---------------------------------------------------------------- the variants


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    needs: str | None  # the module the variant imports, None for harness
    child: Callable[[Child], dict[str, Any]]
    view: str  # what its planner is shown


VARIANTS = {
    v.name: v
    for v in (
        Variant("harness-flush", "harness, flush", None, lambda c: harness_child(c, "flush"), "every result"),
        Variant("harness-fsync", "harness, fsync", None, lambda c: harness_child(c, "fsync"), "every result"),
        Variant("langgraph-sync", 'LangGraph SqliteSaver, durability="sync"', "langgraph",
                lambda c: langgraph_child(c, "sync", True), "every result (state, operator.add)"),
        Variant("langgraph-default", "LangGraph SqliteSaver, default durability (async)", "langgraph",
                lambda c: langgraph_child(c, None, True), "every result (state, operator.add)"),
        Variant("langgraph-sync-last", 'LangGraph SqliteSaver, durability="sync", last result only', "langgraph",
                lambda c: langgraph_child(c, "sync", False), "the last result and a count"),
        Variant("dbos", "DBOS, SQLite system database", "dbos", dbos_child, "every result (workflow local)"),
        Variant("burr", "Burr SQLitePersister", "burr", lambda c: burr_child(c, True),
                "every result (state, State.append)"),
        Variant("burr-last", "Burr SQLitePersister, last result only", "burr", lambda c: burr_child(c, False),
                "the last result and a count"),
        Variant("workflow-flush", "harness workflow, flush (a model and a tool call a round)", None,
                lambda c: workflow_child(c, "flush"), "every result (function local)"),
        Variant("workflow-fsync", "harness workflow, fsync (a model and a tool call a round)", None,
                lambda c: workflow_child(c, "fsync"), "every result (function local)"),
        Variant("sync-floor", "the floor: the workflow's records and syncs, write(2) and fdatasync alone", None,
                floor_child, "every result (function local)"),
        Variant("langgraph-functional", 'LangGraph @entrypoint + @task, SqliteSaver, durability="sync"',
                "langgraph", langgraph_functional_child, "every result (function local)"),
        Variant("dbos-workflow", "DBOS workflow, a step per model and tool call, SQLite", "dbos",
                dbos_workflow_child, "every result (function local)"),
    )
}  # fmt: skip
HARNESS_ONLY = ("harness-flush", "harness-fsync", "workflow-flush", "workflow-fsync")
DISTS = {"langgraph": "langgraph", "dbos": "dbos", "burr": "burr"}  # module -> pip name, for the error message
INSTALL = "pip install -e '.[peers]'  (langgraph, langgraph-checkpoint-sqlite, dbos, burr at pinned versions)"


@dataclass(frozen=True)
class Sizes:
    steps: int
    rounds: int


MODES = {"smoke": Sizes(steps=30, rounds=1), "quick": Sizes(steps=300, rounds=3), "full": Sizes(steps=2000, rounds=5)}


class PeersMissing(Exception):
    """A peer the run asks for is not installed; the message says what to install."""


def check_installed(names: Sequence[str]) -> None:
    missing = []
    for name in names:
        need = VARIANTS[name].needs
        if need is None:
            continue
        try:
            importlib.import_module(need)
            if need == "langgraph":
                importlib.import_module("langgraph.checkpoint.sqlite")
        except ImportError:
            missing.append(need)
    if missing:
        raise PeersMissing(f"the peers are not installed ({', '.join(sorted(set(missing)))} missing): {INSTALL}")


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for dist in ("harness-trace", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "dbos", "burr",
                 "sqlalchemy", "orjson"):  # fmt: skip
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    import sqlite3

    out["sqlite"] = sqlite3.sqlite_version
    return out


# ---------------------------------------------------------------- the parent


def spawn(variant: str, phase: str, folder: str, steps: int, *, strace: str | None = None) -> dict[str, Any]:
    """Run one child; under strace (writing its log to the path given) when asked."""
    report = os.path.join(folder, f".report-{phase}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", variant, phase, folder, str(steps), report]
    if strace:
        cmd = ["strace", "-f", "-qq", "-o", strace, "-e", "trace=fsync,fdatasync,sync_file_range,statfs", *cmd]
    env = {**os.environ, "DBOS__CLOUD": "", "PYTHONHASHSEED": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0 or not os.path.exists(report):
        raise RuntimeError(f"{variant} {phase} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    with open(report) as f:
        got: dict[str, Any] = json.load(f)
    os.unlink(report)
    return got


def store_bytes(folder: str) -> int:
    """Bytes of every file the store left in folder (the -shm index and our own markers and reports excepted)."""
    total = 0
    for name in os.listdir(folder):
        if name.endswith("-shm") or name.startswith("."):
            continue
        total += os.path.getsize(os.path.join(folder, name))
    return total


SYNCS = re.compile(rb"^\d+\s+(fsync|fdatasync|sync_file_range)\(")
MARK = re.compile(rb'statfs\("[^"]*\.peers-mark-(\w+)-(begin|steady|end)"')


def count_syncs(log: str) -> dict[str, int]:
    """Sync calls strace logged (all threads) in each window the child's markers open: {"run-begin": n, ...}.

    A window runs from its marker to the next one; what comes before the first marker (imports, setup) and
    after an "end" marker is not counted. A call strace splits over two lines ("<unfinished ...>") counts once.
    """
    window: str | None = None
    counts: dict[str, int] = {}
    with open(log, "rb") as f:
        for line in f:
            m = MARK.search(line)
            if m:
                window = None if m.group(2) == b"end" else f"{m.group(1).decode()}-{m.group(2).decode()}"
                if window:
                    counts.setdefault(window, 0)
                continue
            if window and SYNCS.match(line):
                counts[window] += 1
    return counts


def fsyncs(variant: str, base: str, steps: int) -> dict[str, float]:
    """One run and its resume under strace: sync calls per step in steady state (after the first step), over the
    whole run, and in the resume."""
    folder = tempfile.mkdtemp(prefix=f"{variant}-strace-", dir=base)
    log = os.path.join(base, f"{variant}.strace")
    try:
        spawn(variant, "run", folder, steps, strace=log)
        run = count_syncs(log)
        spawn(variant, "resume", folder, steps, strace=log)
        resume = count_syncs(log)
        first, steady = run.get("run-begin", 0), run.get("run-steady", 0)
        return {"per_step": steady / (steps - 1), "run_total": float(first + steady),
                "resume": float(resume.get("resume-begin", 0))}  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if os.path.exists(log):
            os.unlink(log)


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(
    names: Sequence[str], sizes: Sizes, base: str, log: Callable[[str], None], count: Sequence[str] | None = None
) -> dict[str, Any]:
    """Interleaved rounds of every variant, then the fsync counts (of those in count, default all); the figures."""
    check_installed(names)
    steps = sizes.steps
    empty: dict[str, int] = {}
    settings: dict[str, Any] = {}
    for name in names:  # the store with nothing in it, to take off the bytes per step
        folder = tempfile.mkdtemp(prefix=f"{name}-empty-", dir=base)
        settings[name] = spawn(name, "empty", folder, steps)["settings"]
        empty[name] = store_bytes(folder)
        shutil.rmtree(folder, ignore_errors=True)
    seen: dict[str, dict[str, list[float]]] = {
        n: {"step_wall": [], "step_cpu": [], "resume_wall": [], "resume_cpu": [], "bytes": [], "redone": []}
        for n in names
    }
    for r in range(sizes.rounds):
        k = r % len(names)
        order = list(names[k:]) + list(names[:k])
        log(f"peers round {r + 1}/{sizes.rounds}: {', '.join(order)}")
        for name in order:
            folder = tempfile.mkdtemp(prefix=f"{name}-", dir=base)
            try:
                ran = spawn(name, "run", folder, steps)
                back = spawn(name, "resume", folder, steps)
                got = seen[name]
                got["step_wall"].append(ran["wall"] / steps * 1e6)
                got["step_cpu"].append(ran["cpu"] / steps * 1e6)
                got["resume_wall"].append(back["wall"] * 1e3)
                got["resume_cpu"].append(back["cpu"] * 1e3)
                got["bytes"].append((store_bytes(folder) - empty[name]) / steps)
                got["redone"].append(back["redone"])
                settings[name] = back["settings"]
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    counted: dict[str, Any] = {}
    if shutil.which("strace"):
        for name in [n for n in names if count is None or n in count]:
            log(f"counting the syncs of {name} under strace ({steps} steps)")
            counted[name] = fsyncs(name, base, steps)
    out: dict[str, Any] = {}
    for name in names:
        got = seen[name]
        out[name] = {
            "label": VARIANTS[name].label,
            "view": VARIANTS[name].view,
            "step_us_wall": summary(got["step_wall"]),
            "step_us_cpu": summary(got["step_cpu"]),
            "resume_ms_wall": summary(got["resume_wall"]),
            "resume_ms_cpu": summary(got["resume_cpu"]),
            "bytes_per_step": statistics.median(got["bytes"]),
            "fsyncs_per_step": counted[name]["per_step"] if name in counted else None,
            "fsyncs_in_run": counted[name]["run_total"] if name in counted else None,
            "fsyncs_in_resume": counted[name]["resume"] if name in counted else None,
            "steps_redone_on_resume": summary(got["redone"]),
            "settings": settings[name],
            "rounds": got,
        }
    return out


def ratio(figures: dict[str, Any], a: str, b: str, what: str = "step_wall") -> float | None:
    """Median over rounds of a / b within each round (both figures taken in the same round)."""
    if a not in figures or b not in figures:
        return None
    xs, ys = figures[a]["rounds"][what], figures[b]["rounds"][what]
    return statistics.median(x / y for x, y in zip(xs, ys, strict=True))


KEYS = (
    "step_fsync_vs_langgraph", "step_fsync_vs_dbos", "step_fsync_vs_burr", "bytes_per_step", "fsyncs_per_step",
    "workflow_call_vs_langgraph", "workflow_call_vs_dbos", "workflow_resume_vs_langgraph", "workflow_resume_vs_dbos",
)  # fmt: skip


def run(
    mode: str,
    base: str,
    log: Callable[[str], None],
    *,
    peers: bool = True,
    steps: int | None = None,
    rounds: int | None = None,
    only: Sequence[str] | None = None,
    count: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Measure; returns the keys (None where a peer needed was not run) and the figures per variant.

    count: the variants whose syncs are counted under strace (default: all that run; the others' are None).
    """
    sizes = MODES[mode]
    sizes = Sizes(steps=steps or sizes.steps, rounds=rounds or sizes.rounds)
    names = list(only) if only else list(VARIANTS) if peers else list(HARNESS_ONLY)
    figures = measure(names, sizes, base, log, count)
    fsync = figures.get("harness-fsync")
    keys: dict[str, float | None] = {
        "step_fsync_vs_langgraph": ratio(figures, "harness-fsync", "langgraph-sync"),
        "step_fsync_vs_dbos": ratio(figures, "harness-fsync", "dbos"),
        "step_fsync_vs_burr": ratio(figures, "harness-fsync", "burr"),
        "bytes_per_step": fsync["bytes_per_step"] if fsync else None,
        "fsyncs_per_step": fsync["fsyncs_per_step"] if fsync else None,
        # durable functions: per durable call (both make the same calls a round), and the resume
        "workflow_call_vs_langgraph": ratio(figures, "workflow-fsync", "langgraph-functional"),
        "workflow_call_vs_dbos": ratio(figures, "workflow-fsync", "dbos-workflow"),
        "workflow_resume_vs_langgraph": ratio(figures, "workflow-fsync", "langgraph-functional", "resume_wall"),
        "workflow_resume_vs_dbos": ratio(figures, "workflow-fsync", "dbos-workflow", "resume_wall"),
    }
    detail = {
        "sizes": asdict(sizes),
        "versions": versions(),
        "fsync_counting": "strace -f (fsync, fdatasync, sync_file_range between markers)"
        if shutil.which("strace")
        else "not counted: strace is not installed (apt-get install -y strace)",
        "variants": figures,
        "ratios_cpu": {
            "step_fsync_vs_langgraph": ratio(figures, "harness-fsync", "langgraph-sync", "step_cpu"),
            "step_fsync_vs_dbos": ratio(figures, "harness-fsync", "dbos", "step_cpu"),
            "step_fsync_vs_burr": ratio(figures, "harness-fsync", "burr", "step_cpu"),
            "workflow_call_vs_langgraph": ratio(figures, "workflow-fsync", "langgraph-functional", "step_cpu"),
            "workflow_call_vs_dbos": ratio(figures, "workflow-fsync", "dbos-workflow", "step_cpu"),
        },
        "workflow_flush_call_vs_langgraph": ratio(figures, "workflow-flush", "langgraph-functional"),
        # what bounds workflow_call_vs_langgraph: the same records and syncs with no harness, and harness over it
        "sync_floor_call_vs_langgraph": ratio(figures, "sync-floor", "langgraph-functional"),
        "workflow_call_vs_sync_floor": ratio(figures, "workflow-fsync", "sync-floor"),
        "workflow_flush_call_vs_dbos": ratio(figures, "workflow-flush", "dbos-workflow"),
        "step_fsync_vs_langgraph_last_only": ratio(figures, "harness-fsync", "langgraph-sync-last"),
        "step_fsync_vs_burr_last_only": ratio(figures, "harness-fsync", "burr-last"),
    }
    return {"keys": keys, "detail": detail}


def table(figures: dict[str, Any]) -> str:
    rows = [
        "| variant | planner sees | µs/step wall (range) | µs/step CPU | fsyncs/step | bytes/step | resume ms (range) |"
        " steps redone on resume | journal, synchronous |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures.values():
        w, c, r = f["step_us_wall"], f["step_us_cpu"], f["resume_ms_wall"]
        s = f["settings"]
        sync = f"{s.get('journal_mode', '-')}, {s.get('synchronous', '-')}" if "journal_mode" in s else "-"
        fs = "n/a" if f["fsyncs_per_step"] is None else f"{f['fsyncs_per_step']:.2f}"
        rows.append(
            f"| {f['label']} | {f['view']} | {w['median']:.0f} ({w['min']:.0f}-{w['max']:.0f}) | {c['median']:.0f} "
            f"| {fs} | {f['bytes_per_step']:.0f} | {r['median']:.1f} ({r['min']:.1f}-{r['max']:.1f}) "
            f"| {f['steps_redone_on_resume']['median']:.0f} | {sync} |"
        )
    return "\n".join(rows)


def child_main(argv: list[str]) -> int:
    variant, phase, folder, steps, report = argv
    child = Child(variant, phase, folder, int(steps), report)
    got = VARIANTS[variant].child(child)
    child.send({**got, "redone": CALLS[0]})
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help=f"{MODES['quick'].steps} steps, {MODES['quick'].rounds} rounds")
    g.add_argument("--smoke", action="store_true", help="tiny: proves the program runs")
    p.add_argument("--steps", type=int, help="steps per run (default: by mode)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default: by mode)")
    p.add_argument("--only", help=f"comma-separated variants, of: {', '.join(VARIANTS)}")
    p.add_argument("--json", metavar="PATH", help="write the figures here as JSON")
    p.add_argument("--dir", metavar="DIR", help="where to put the scratch files (default: a temporary folder)")
    args = p.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    only = args.only.split(",") if args.only else None
    for name in only or ():
        if name not in VARIANTS:
            p.error(f"unknown variant {name!r}; the variants are: {', '.join(VARIANTS)}")

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    folder = tempfile.mkdtemp(prefix="harness-peers-", dir=args.dir)
    try:
        result = run(mode, folder, log, steps=args.steps, rounds=args.rounds, only=only)
    except PeersMissing as e:
        print(f"bench/peers.py: {e}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(table(result["detail"]["variants"]))
    print()
    for key, value in result["keys"].items():
        print(f"{key}: {'n/a' if value is None else f'{value:.3g}'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mode": mode, **result["keys"], **result}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
