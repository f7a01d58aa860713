"""Benchmarks: harness side by side with its baselines and the physical limits.

Usage: python bench/run.py [--smoke | --quick] [--json PATH] [--dir DIR] [--wall] [--peers]
       python bench/run.py --fleet [--smoke] [--json PATH]   (Ray and S3: bench/fleet.py)

Every figure is a ratio of two medians measured in this process run on the
same data: the variants of a line run interleaved (A B C, B C A, ...) so that
noise on a shared machine falls on both sides alike; no absolute time is a
result. The data come from `trace_records()`, a seeded generator of the
records a real run writes (transitions with small args, an LLM crossing on
every other step, results of a few hundred bytes, a retry now and then),
written through `harness.trace.journal.Journal` so that every trace is valid.

Clocks: both are read for every sample. The append lines are judged on
wall-clock time, since waiting for the disk is part of their cost (SQLite
fsyncs at WAL checkpoints even with synchronous=NORMAL); the CPU-bound lines
(replay, executor steps, resume) on this process's CPU time, which other
processes on a shared machine disturb far less. --wall judges all on wall
time. The JSON's "detail" holds both clocks, and diagnostics that are not
baselines (the parts of an append, a reader that only checks the checksum
chain, the executor's journal calls alone) to show what bounds each ratio.

Lines (the keys of the JSON):
- append_*: time per record of `Journal.append`, the call the executor makes,
  against a bare `orjson.dumps` + `os.write` (+ `os.fdatasync`) loop and
  against SQLite in WAL mode with a commit per record;
- replay_*: `replay()` of a trace against `orjson.loads` of every line, and
  against reading the same lines back from SQLite and decoding them;
- step_overhead_vs_bare: the executor with a no-op planner, tool and verifier,
  against the same functions in a bare loop plus three raw appends per step;
- resume_linearity: resume time at the big size / (10 x at the small size);
- replay_peak_rss_mb: peak RSS of a fresh process replaying the big trace;
- show_peak_rss_mb, diff_peak_rss_mb: the same for `harness show` of it and
  `harness diff` of it against itself (equal traces: memory must stay flat);
- diff_100k_s: seconds for `harness.diff` of two traces differing in one record;
- resume_1m_vs_10k: resume time at the biggest size / at a trace 100 x smaller
  (1M and 10k records in full mode; the JSON's sizes say which otherwise);
- bytes_per_step, fsyncs_per_step: harness in fsync mode on bench/peers.py's
  agent (a ~290-byte tool result per step): bytes on disk per step, and
  fsync/fdatasync calls per step in steady state, counted under strace;
- step_fsync_vs_langgraph, step_fsync_vs_dbos, step_fsync_vs_burr (--peers
  only, null otherwise): harness's fsync-mode step against the same agent on
  LangGraph's SqliteSaver (durability="sync"), DBOS on SQLite and Burr's
  SQLitePersister, wall time (see bench/peers.py; needs `.[peers]`);
- blob_trace_vs_inline, blob_replay_vs_inline: a run whose model answers are
  200 KiB each, with blobs (the default threshold) against all inline: trace
  size, and replay() time (reading every answer back);
- export_vs_zipfile, import_vs_zipfile: `harness export` / `import` time of
  that run's folder against `zipfile` writing / reading the same files alone;
- parallel_step_vs_sequential: wall time of one parallel step of 8 calls
  against 8 sequential steps, each tool waiting LATENCY as a network call
  would (the detail also gives the same with no-op tools: the pure cost);
- journal_8_threads_vs_1: records per second appended by 8 threads sharing
  one journal, against one thread on the same shared path (the detail also
  gives the shared path against the lean single-agent one);
- workflow_call_vs_step: a `harness.call` of a no-op tool in a workflow (its
  step: intent, result, checkpoint) against an Executor step with the same
  tool and a no-op planner and verifier;
- tool_decorated_vs_call: a call of a no-op `@harness.tool` function in a
  workflow (its arguments bound to names, then the same step) against
  `harness.call` of the same function undecorated;
- workflow_crossing_vs_step: a no-op `harness.llm` crossing in a workflow
  against that Executor step (a crossing is one record, a step three);
- workflow_resume_served_vs_live: a workflow of WORKFLOW_CROSSINGS no-op
  model calls, resumed from a trace that holds all of them (the end cut
  off): the resume re-executes the function, every call served, per served
  crossing, against the same run live, per live crossing;
- workflow_agents_resume_served_vs_live: the same, the calls made by two
  agents the workflow spawns (threads, half each), joined before it
  returns: per served crossing (the spawns, exits and joins served too)
  against the same run live;
- workflow_call_vs_langgraph, workflow_call_vs_dbos, workflow_resume_vs_langgraph,
  workflow_resume_vs_dbos (--peers only): one function (a model call and a
  tool call per round) as a harness workflow in fsync mode, as LangGraph's
  functional API (`@entrypoint` with SqliteSaver, `@task` per call,
  durability="sync") and as a DBOS workflow with a step per call on SQLite:
  time per durable call, and the resume of a run killed after its last call
  (see bench/peers.py);
- check_vs_live, check_s_per_1k_crossings: `harness.check` (one process) of
  CHECK_RUNS recorded runs of a workflow (three model calls and three tool
  calls each), against running the same runs live, per crossing, wall time
  (a live run waits for its disk); and the check's seconds per 1,000
  crossings, its CPU time (wall with --wall).

--quick runs in under a minute with smaller traces (the JSON says which
sizes were used); --smoke is smaller still, for the test suite; the full
mode uses the sizes the keys name.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import orjson

import harness
from harness import Executor, Step, Tool, replay
from harness.testing import read_records
from harness.testing import write_trace as forge
from harness.trace.journal import Journal
from harness.trace.line import SCHEMA, SUFFIX, check_value, encode
from harness.trace.reader import _CHUNK, request_hash

Append = tuple[str, dict[str, Any], tuple[str, ...]]  # kind, fields, fields to check: one Journal.append call


@dataclass(frozen=True)
class Sizes:
    reps: int  # interleaved rounds per line; the median is taken over them
    append: int  # records per side, flush mode
    append_block: int  # records per timed block (the append lines take turns block by block)
    fsync: int  # records per side, fsync mode
    fsync_block: int
    replay: int  # records in the replayed trace
    steps: int  # steps per executor run
    resume: tuple[int, ...]  # trace sizes resumed; linearity compares the last with the first (10 x smaller)
    rss: int  # records replayed in the peak-memory subprocess
    diff: int  # records in each diffed trace
    resume_reps: int


MODES = {
    "smoke": Sizes(reps=3, append=300, append_block=100, fsync=30, fsync_block=10, replay=3_000, steps=200,
                   resume=(1_000, 10_000), rss=10_000, diff=1_000, resume_reps=3),
    "quick": Sizes(reps=7, append=20_000, append_block=500, fsync=300, fsync_block=10, replay=100_000, steps=2_000,
                   resume=(20_000, 200_000), rss=200_000, diff=100_000, resume_reps=3),
    "full": Sizes(reps=11, append=100_000, append_block=500, fsync=2_000, fsync_block=10, replay=200_000,
                  steps=10_000, resume=(100_000, 250_000, 500_000, 1_000_000), rss=1_000_000, diff=100_000,
                  resume_reps=5),
}  # fmt: skip

TARGETS = {
    "append_flush_vs_raw": 3.0,
    "append_flush_vs_sqlite": 0.25,
    "append_fsync_vs_raw": 1.2,
    "append_fsync_vs_sqlite": 1.1,
    "replay_vs_orjson": 1.6,
    "replay_vs_sqlite": 1.0,
    "step_overhead_vs_bare": 1.6,
    "resume_linearity": 1.3,
    "replay_peak_rss_mb": 64.0,
    "show_peak_rss_mb": 64.0,
    "diff_peak_rss_mb": 64.0,
    "diff_100k_s": None,
    "resume_1m_vs_10k": 2.0,
    "bytes_per_step": 700.0,
    "fsyncs_per_step": 1.0,
    "step_fsync_vs_langgraph": 0.4,
    "step_fsync_vs_dbos": 0.2,
    "step_fsync_vs_burr": None,
    "blob_trace_vs_inline": None,
    "blob_replay_vs_inline": None,
    "export_vs_zipfile": None,
    "import_vs_zipfile": None,
    "parallel_step_vs_sequential": 0.25,
    "journal_8_threads_vs_1": None,
    "workflow_call_vs_step": 1.0,
    "workflow_crossing_vs_step": 1.0,
    "tool_decorated_vs_call": 1.1,
    "workflow_resume_served_vs_live": 1.0,
    "workflow_agents_resume_served_vs_live": 1.0,
    "workflow_call_vs_langgraph": 0.4,
    "workflow_call_vs_dbos": 0.4,
    "workflow_resume_vs_langgraph": 1.0,
    "workflow_resume_vs_dbos": 1.0,
    "pydantic_ai_step_vs_dbos": 0.4,
    "pydantic_ai_resume_vs_dbos": 0.5,
    "check_vs_live": 1.0,
    "check_s_per_1k_crossings": 2.0,
}
KEYS = tuple(TARGETS)
LATENCY = 0.02  # seconds a tool of the parallel-step line waits, as a network call would
WORKFLOW_CROSSINGS = {"smoke": 1_000, "quick": 10_000, "full": 10_000}  # the resumed workflow's model calls
CHECK_RUNS = {"smoke": 20, "quick": 200, "full": 1_000}  # recorded runs `harness check` replays


# ---------------------------------------------------------------- the data


def noop(**args: Any) -> dict[str, Any]:
    return {"ok": True}


# the tools of the generated run; its header records their contracts
TOOLS: dict[str, Any] = {
    "read_file": noop,
    "search": noop,
    "run_tests": Tool(noop, idempotent=True, version="1"),
    "edit_file": Tool(noop, idempotent=False, version="2"),
}
GOAL = {"task": "make the failing test in tests/test_parser.py pass", "repo": "acme/parser"}
RUN_ID = "0" * 31 + "1"

_PROSE = """the parser fails on nested quotes because the tokenizer splits escaped strings before the grammar
sees them so a fix belongs in lexer state handling with a regression test covering backslash sequences"""
_WORDS = _PROSE.split()


def _text(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    out = []
    size = 0
    while size < n:
        w = rng.choice(_WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def _args(rng: random.Random, tool: str, step: int) -> dict[str, Any]:
    if tool == "search":
        return {"query": _text(rng, 10, 30), "limit": 5}
    if tool == "run_tests":
        return {"path": "tests/test_parser.py", "k": f"case_{step % 50}"}
    return {"path": f"src/parser/mod_{step % 40}.py", "line": rng.randint(1, 400)}


def _result(rng: random.Random, tool: str) -> dict[str, Any]:
    """A tool result of a few hundred bytes."""
    if tool == "run_tests":
        return {"passed": rng.randint(0, 90), "failed": rng.randint(0, 3), "output": _text(rng, 150, 350)}
    if tool == "search":
        hits = [{"path": f"src/parser/mod_{rng.randint(0, 39)}.py", "line": rng.randint(1, 400)} for _ in range(3)]
        return {"hits": hits, "snippet": _text(rng, 80, 200)}
    return {"ok": True, "content": _text(rng, 150, 450), "sha": f"{rng.getrandbits(64):016x}"}


def _at(step: int, attempt: int) -> dict[str, int]:
    """A transition's step and attempt as written: the first attempt leaves `attempt` out."""
    return {"step": step} if attempt == 1 else {"step": step, "attempt": attempt}


def trace_records(*, seed: int = 1) -> Iterator[tuple[bool, Append]]:
    """The appends of a long realistic run, endlessly: (ends a step?, (kind, fields, check)).

    The checks are the ones the executor and the boundaries ask for. A prefix
    cut where `ends a step` is true is a run paused in PLAN, ready to resume.
    """
    rng = random.Random(seed)
    names = list(TOOLS)
    contracts = Executor(planner=lambda g, p: None, tools=TOOLS).contracts
    env = {"python": "3.11.7", "platform": "Linux-x86_64", "cwd": "/work", "entrypoint": "bench", "harness": "0.1.0"}
    yield False, ("header", {"schema": SCHEMA, "run_id": RUN_ID, "goal": GOAL, "tools": contracts, "env": env}, ())
    yield False, ("transition", {"from": "INIT", "to": "PLAN", "step": 0}, ())
    step, seq = 0, 2  # seq: of the last record yielded
    while True:
        if step % 2 == 0:  # the planner asked a model
            request = {"model": "model-1", "prompt": _text(rng, 80, 200)}
            response = {"text": _text(rng, 150, 400), "tokens": rng.randint(50, 300)}
            fields: dict[str, Any] = {"boundary": "llm", "request": request, "hash": request_hash("llm", request)}
            fields["response"] = response
            yield False, ("crossing", fields, ("request", "response"))
            seq += 1
        tool = rng.choice(names)
        name = f"{tool}-{step}"
        args = _args(rng, tool, step)
        attempts = 2 if rng.random() < 0.04 else 1
        for attempt in range(1, attempts + 1):
            intent = {**_at(step, attempt), "name": name, "tool": tool, "args": args}
            if tool == "run_tests":
                intent["key"] = f"{RUN_ID}-{step}-{attempt}"
            yield False, ("transition", {"from": "PLAN", "to": "ACT", **intent}, ("args",))
            seq += 1
            if attempt < attempts:
                error = {"type": "ToolError", "message": "timed out after 30 s"}
                fields = {"from": "ACT", "to": "PLAN", **_at(step, attempt), "error": error}
                yield False, ("transition", fields, ())
                seq += 1
        result = _result(rng, tool)
        fields = {"from": "ACT", "to": "VERIFY", **_at(step, attempts), "result": result}
        yield False, ("transition", fields, ("result",))
        seq += 1
        yield True, ("checkpoint", {"step": step}, ())  # vouches for the record above
        seq += 1
        step += 1


def take(n: int) -> list[Append]:
    """The first n appends of the generated run (not necessarily at a step end)."""
    out = []
    for _, a in trace_records():
        out.append(a)
        if len(out) == n:
            return out
    raise AssertionError("unreachable")


def write_trace(path: str, n: int) -> int:
    """Write the generated run through Journal up to the first step end at or after n records."""
    count = 0
    with Journal.open(path) as journal:
        append = journal.append
        for ends, (kind, fields, check) in trace_records():
            append(kind, fields, check=check)
            count += 1
            if ends and count >= n:
                return count
    raise AssertionError("unreachable")


def cut(src: str, dst: str, n: int) -> int:
    """Copy the prefix of src that ends with the first step end at or after n lines."""
    count = 0
    with open(src, "rb") as f, open(dst, "wb") as out:
        for line in f:
            out.write(line)
            count += 1
            if count >= n and line.startswith(b'{"seq":%d,"kind":"checkpoint"' % count):
                return count
    raise ValueError(f"{src} has no step end after line {n}")


# ---------------------------------------------------------------- measuring

Sample = tuple[float, float]  # (wall-clock seconds, CPU seconds of this process) for one unit of work


def clocks() -> Sample:
    return time.perf_counter(), time.process_time()


def since(t0: Sample, per: int = 1) -> Sample:
    wall, cpu = clocks()
    return (wall - t0[0]) / per, (cpu - t0[1]) / per


WALL, CPU = 0, 1  # index of each clock in a Sample


@dataclass(frozen=True)
class Rounds:
    """The samples of interleaved variants: samples[name][r] is what variant name measured in round r."""

    samples: dict[str, list[Sample]]

    def median(self, name: str, clock: int) -> float:
        return statistics.median(s[clock] for s in self.samples[name])

    def ratio(self, a: str, b: str, clock: int) -> float:
        """Median over rounds of a / b: each round's two figures were taken moments apart, in like conditions."""
        return statistics.median(x[clock] / y[clock] for x, y in zip(self.samples[a], self.samples[b], strict=True))

    def medians(self, scale: float) -> dict[str, dict[str, float]]:
        return {n: {"wall": self.median(n, WALL) * scale, "cpu": self.median(n, CPU) * scale} for n in self.samples}


def interleaved(variants: dict[str, Callable[[], Sample]], reps: int) -> Rounds:
    """Run each variant once per round for reps rounds, the order rotated every round."""
    names = list(variants)
    seen: dict[str, list[Sample]] = {n: [] for n in names}
    for r in range(reps):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            seen[name].append(variants[name]())
    return Rounds(seen)


class Scratch:
    """Fresh file names in one folder."""

    def __init__(self, folder: str):
        self.folder, self.n = folder, 0

    def __call__(self, ext: str = "jsonl") -> str:
        self.n += 1
        return os.path.join(self.folder, f"f{self.n}.{ext}")


def _records(appends: list[Append]) -> list[dict[str, Any]]:
    """The same records as whole dicts, for the baselines (which write no checksum)."""
    ts = time.time()
    return [{"seq": i, "kind": kind, **fields, "ts": ts} for i, (kind, fields, _) in enumerate(appends, 1)]


class Side:
    """One side of an append line: a log opened once, fed the same records block after block.

    `block()` writes the next `size` records and returns the time per record;
    the sides of a line are called in turn, so they advance together.
    """

    def __init__(self, size: int, write: Callable[[int, int], None], close: Callable[[], None]):
        self.size, self.pos, self.write, self.close = size, 0, write, close

    def block(self) -> Sample:
        lo = self.pos
        self.pos += self.size
        t0 = clocks()
        self.write(lo, self.pos)
        return since(t0, self.size)


def _journal(path: str, appends: list[Append], durability: str, size: int) -> Side:
    journal = Journal.open(path, durability=durability)
    journal.t0 = time.time()  # the records' clock, as a header would start it (a block may not begin with one)
    append, sync = journal.append, durability == "fsync"

    def write(lo: int, hi: int) -> None:
        for i in range(lo, hi):  # the executor's own call, with the checks it asks for
            kind, fields, check = appends[i]
            append(kind, fields, check=check, sync=sync)  # (fsync mode: a synced append, as the baselines)

    return Side(size, write, journal.close)


def _raw(path: str, records: list[dict[str, Any]], sync: bool, size: int) -> Side:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
    dumps, put, newline = orjson.dumps, os.write, orjson.OPT_APPEND_NEWLINE
    fdatasync = getattr(os, "fdatasync", os.fsync)

    def flushed(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            put(fd, dumps(records[i], option=newline))

    def synced(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            put(fd, dumps(records[i], option=newline))
            fdatasync(fd)

    return Side(size, synced if sync else flushed, lambda: os.close(fd))


def _sqlite_open(path: str, synchronous: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)  # autocommit: every INSERT is its own transaction
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={synchronous}")
    con.execute("CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, body BLOB NOT NULL)")
    return con


def _sqlite(path: str, records: list[dict[str, Any]], synchronous: str, size: int) -> Side:
    con = _sqlite_open(path, synchronous)
    dumps, execute = orjson.dumps, con.execute
    insert = "INSERT INTO events (seq, kind, body) VALUES (?, ?, ?)"

    def write(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            rec = records[i]
            execute(insert, (rec["seq"], rec["kind"], dumps(rec)))

    return Side(size, write, con.close)


def bench_append(scratch: Scratch, sizes: Sizes, durability: str) -> Rounds:
    """Time per record, in blocks: harness, raw and SQLite take turns, block after block."""
    total, size = (sizes.append, sizes.append_block) if durability == "flush" else (sizes.fsync, sizes.fsync_block)
    appends = take(total)
    records = _records(appends)
    sync = durability == "fsync"
    sides = {
        "harness": _journal(scratch(), appends, durability, size),
        "raw": _raw(scratch(), records, sync, size),
        "sqlite": _sqlite(scratch("db"), records, "FULL" if sync else "NORMAL", size),
    }
    try:
        return interleaved({name: side.block for name, side in sides.items()}, total // size)
    finally:
        for side in sides.values():
            side.close()


def append_parts(scratch: Scratch, sizes: Sizes) -> dict[str, float]:
    """CPU microseconds per record of each part of an append, on the same records: what bounds the flush ratio."""
    appends = take(sizes.append_block * 4)
    records = _records(appends)
    lines = [encode(rec, 0)[0] for rec in records]
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE

    def dumps_only() -> None:
        for rec in records:
            dumps(rec, option=newline)

    def encode_only() -> None:  # dumps + crc32 + the checksum suffix
        for rec in records:
            encode(rec, 0)

    def checks_only() -> None:
        for _, fields, check in appends:
            for name in check:
                check_value(name, fields[name])

    def writes_only() -> None:
        path = scratch()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        for line in lines:
            os.write(fd, line)
        os.close(fd)
        os.unlink(path)

    def timed(fn: Callable[[], None]) -> Callable[[], Sample]:
        def run() -> Sample:
            t0 = clocks()
            fn()
            return since(t0, len(records))

        return run

    parts = {"orjson.dumps": dumps_only, "encode": encode_only, "check_value": checks_only, "os.write": writes_only}
    got = interleaved({k: timed(fn) for k, fn in parts.items()}, sizes.reps)
    return {k: got.median(k, CPU) * 1e6 for k in parts}


def after_sync(scratch: Scratch, sizes: Sizes) -> dict[str, float]:
    """Wall microseconds of an append's own work (checks, record, encode; no write) right after an fdatasync
    and again at once, warm: the first is what an fsync-mode append pays on top of the raw loop (a diagnostic)."""
    appends = take(sizes.fsync)
    path = scratch()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
    fdatasync = getattr(os, "fdatasync", os.fsync)

    def work(i: int) -> None:
        kind, fields, check = appends[i]
        for name in check:
            check_value(name, fields[name])
        encode({"seq": i, "kind": kind, **fields, "ts": time.time()}, 0)

    cold, warm = [], []
    for i in range(len(appends)):
        os.write(fd, b"x" * 300)
        fdatasync(fd)
        t0 = clocks()
        work(i)
        cold.append(since(t0)[0])
        t0 = clocks()
        work(i)
        warm.append(since(t0)[0])
    os.close(fd)
    os.unlink(path)
    return {"after fdatasync": statistics.median(cold) * 1e6, "warm": statistics.median(warm) * 1e6}


def bench_replay(scratch: Scratch, trace: str, reps: int) -> Rounds:
    db = scratch("db")
    con = _sqlite_open(db, "OFF")
    with open(trace, "rb") as f:  # the very same lines, checksums included
        con.execute("BEGIN")
        con.executemany("INSERT INTO events (seq, kind, body) VALUES (?, ?, ?)",
                        ((i, "", line.rstrip(b"\n")) for i, line in enumerate(f, 1)))  # fmt: skip
        con.execute("COMMIT")
    con.close()
    loads, crc32 = orjson.loads, zlib.crc32

    def bare() -> None:
        with open(trace, "rb") as f:
            for line in f:
                loads(line)

    def sqlite() -> None:
        c = sqlite3.connect(db)
        for (body,) in c.execute("SELECT body FROM events ORDER BY seq"):
            loads(body)
        c.close()

    def checked() -> None:
        """Not a baseline: replay's reading and checksum chain alone, without the state machine (a diagnostic)."""
        crc, buf = 0, b""
        with open(trace, "rb") as f:
            while chunk := f.read(_CHUNK):
                lines = (buf + chunk).split(b"\n")
                buf = lines.pop()
                for line in lines:
                    crc = crc32(line[:-SUFFIX], crc)
                    if line[-SUFFIX:] != b',"crc":"%08x"}' % crc:
                        raise AssertionError(line)
                    loads(line)

    def timed(fn: Callable[[], Any]) -> Callable[[], Sample]:
        def run() -> Sample:
            t0 = clocks()
            fn()
            return since(t0)

        return run

    variants = {"harness": lambda: replay(trace), "orjson": bare, "sqlite": sqlite, "checksums only": checked}
    return interleaved({k: timed(fn) for k, fn in variants.items()}, reps)


def bench_steps(scratch: Scratch, sizes: Sizes) -> Rounds:
    n = sizes.steps
    step = Step("read", "read_file", {"path": "src/parser/lexer.py"})

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        return step if len(progress) < n else None

    def tool(**args: Any) -> dict[str, Any]:
        return {"ok": True}

    def verifier(step: Step, result: Any) -> bool:
        return True

    def executor() -> Sample:
        path = scratch()
        ex = Executor(planner=planner, tools={"read_file": tool}, verifier=verifier, trace=path)
        t0 = clocks()
        out = ex.run(GOAL)
        t = since(t0, n)
        assert out.state == "DONE" and len(out.checkpoints) == n
        os.unlink(path)
        return t

    def bare() -> Sample:
        """The same calls and three appends per step, written by hand with no checks and no checksums."""
        path = scratch()
        dumps, write, newline = orjson.dumps, os.write, orjson.OPT_APPEND_NEWLINE
        t0 = clocks()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        progress: list[Any] = []
        seq, i = 0, 0
        while (s := planner(GOAL, progress)) is not None:
            base = {"step": i}
            put = {"seq": seq + 1, "kind": "transition", "from": "PLAN", "to": "ACT", **base, "name": s.name,
                   "tool": s.tool, "args": s.args, "ts": time.time()}  # fmt: skip
            write(fd, dumps(put, option=newline))
            result = tool(**s.args)
            put = {"seq": seq + 2, "kind": "transition", "from": "ACT", "to": "VERIFY", **base, "result": result,
                   "ts": time.time()}  # fmt: skip
            write(fd, dumps(put, option=newline))
            verifier(s, result)
            put = {"seq": seq + 3, "kind": "checkpoint", "step": i, "ts": time.time()}
            write(fd, dumps(put, option=newline))
            progress.append(result)
            seq, i = seq + 3, i + 1
        os.close(fd)
        t = since(t0, n)
        os.unlink(path)
        return t

    def appends_only() -> Sample:
        """Not a baseline: the executor's journal calls of a step alone, in three writes (a diagnostic).

        As the executor makes them: PLAN -> ACT with its args checked; ACT -> VERIFY
        with the tool's result round-tripped (check_value); then the checkpoint record
        naming it. The records are built before the clock starts, so this times the
        journal's work only.
        """
        path = scratch()
        base, result = {"step": 0}, {"ok": True}
        intent = {"from": "PLAN", "to": "ACT", **base, "name": step.name, "tool": step.tool, "args": step.args}
        verify = {"from": "ACT", "to": "VERIFY", **base, "result": result}
        checkpoint = {"step": 0}
        with Journal.open(path) as journal:
            journal.t0 = time.time()  # the records' clock, as the header would start it
            append = journal.append
            t0 = clocks()
            for _ in range(n):
                append("transition", intent, check=("args",))
                append("transition", verify, check=("result",))  # the executor calls check_value, then appends
                append("checkpoint", checkpoint)
            t = since(t0, n)
        os.unlink(path)
        return t

    return interleaved({"harness": executor, "bare": bare, "appends only": appends_only}, sizes.reps)


def _answer(request: Any) -> str:
    return "ok"


@harness.workflow
def calls(n: int) -> int:
    """n durable calls of a no-op tool."""
    for _ in range(n):
        harness.call(noop, path="src/parser/lexer.py")
    return n


@harness.tool
def decorated_noop(path: str) -> dict[str, Any]:
    return {"ok": True}


@harness.workflow
def decorated(n: int) -> int:
    """n durable calls of a no-op @harness.tool function."""
    for _ in range(n):
        decorated_noop("src/parser/lexer.py")
    return n


@harness.workflow
def crossings(n: int) -> int:
    """n no-op model calls."""
    for i in range(n):
        harness.llm({"prompt": "next", "i": i}, _answer)
    return n


def _asks(n: int) -> int:
    for i in range(n):
        harness.llm({"prompt": "next", "i": i}, _answer)
    return n


@harness.workflow
def pair(n: int) -> int:
    """n no-op model calls, made by two agents (threads), half each."""
    a, b = harness.spawn("a", _asks, n // 2), harness.spawn("b", _asks, n - n // 2)
    return sum(harness.join(a, b))


def bench_workflow(scratch: Scratch, sizes: Sizes) -> Rounds:
    """A workflow's call and crossing against an Executor's step, the same no-op tool (see the docstring)."""
    n = sizes.steps
    step = Step("read", "read_file", {"path": "src/parser/lexer.py"})

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        return step if len(progress) < n else None

    def executor() -> Sample:
        path = scratch()
        ex = Executor(planner=planner, tools={"read_file": noop}, verifier=lambda s, r: True, trace=path)
        t0 = clocks()
        out = ex.run(GOAL)
        t = since(t0, n)
        assert out.state == "DONE" and len(out.checkpoints) == n
        os.unlink(path)
        return t

    def workflow(w: harness.Workflow[Any, Any]) -> Callable[[], Sample]:
        def go() -> Sample:
            path = scratch()
            t0 = clocks()
            out = w.run(n, trace=path)
            t = since(t0, n)
            assert out.state == "DONE" and out.result == n
            os.unlink(path)
            return t

        return go

    return interleaved({"executor step": executor, "workflow call": workflow(calls),
                        "workflow crossing": workflow(crossings), "decorated call": workflow(decorated)},
                       sizes.reps)  # fmt: skip


def bench_workflow_resume(scratch: Scratch, n: int, reps: int, w: harness.Workflow[Any, Any] = crossings) -> Rounds:
    """A workflow of n model calls live, against its resume from a trace holding all n (its end cut off)."""
    recorded = scratch()
    assert w.run(n, trace=recorded).state == "DONE"
    with open(recorded, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    cut_off = b"".join(lines[:-2])  # without PLAN -> DONE and the seal: killed after its last call

    def live() -> Sample:
        path = scratch()
        t0 = clocks()
        out = w.run(n, trace=path)
        t = since(t0, n)
        assert out.state == "DONE"
        os.unlink(path)
        return t

    def resumed() -> Sample:
        path = scratch()
        with open(path, "wb") as f:
            f.write(cut_off)
        t0 = clocks()
        out = w.run(n, trace=path, resume=True)
        t = since(t0, n)
        assert out.state == "DONE" and replay(path).resumes == 1
        os.unlink(path)
        return t

    return interleaved({"live": live, "resumed": resumed}, reps)


def priced(n: int) -> int:
    return n


@harness.workflow
def shopper(i: int) -> int:
    """Three rounds of a no-op model call and a no-op tool call: one recorded run of the check line."""
    total = 0
    for k in range(3):
        harness.llm({"prompt": "next", "i": i, "k": k}, _answer)
        total += harness.call(priced, n=k)
    return total


def bench_check(scratch: Scratch, runs: int, reps: int) -> tuple[Rounds, int]:
    """`harness.check` of a folder of recorded runs (one process), against running the same runs live: per
    crossing (Replay.crossings: the model calls and the tool calls)."""
    folder = os.path.join(scratch.folder, "check-runs")
    os.makedirs(folder)
    for i in range(runs):
        assert shopper.run(i, trace=os.path.join(folder, f"{i:05d}.jsonl")).state == "DONE"
    crossings = sum(len(replay(os.path.join(folder, name)).crossings) for name in os.listdir(folder))

    def live() -> Sample:
        again = scratch("d")
        os.makedirs(again)
        t0 = clocks()
        for i in range(runs):
            shopper.run(i, trace=os.path.join(again, f"{i:05d}.jsonl"))
        t = since(t0, crossings)
        shutil.rmtree(again)
        return t

    def checked() -> Sample:
        t0 = clocks()
        results = harness.check([folder], workflow=shopper)
        t = since(t0, crossings)
        assert len(results) == runs and all(r.status == "ok" for r in results), [r.line() for r in results[:3]]
        return t

    return interleaved({"check": checked, "live": live}, reps), crossings


def bench_blobs(folder: str, answers: int, reps: int) -> dict[str, float]:
    """A run whose model answers are 200 KiB each: trace size and replay time with blobs and all inline."""
    import zipfile

    from harness.bundle import export, import_bundle

    answer = _text(random.Random(7), 200 * 1024, 200 * 1024)

    def plan(goal: Any, progress: list[Any]) -> Step | None:
        if len(progress) == answers:
            return None
        text = harness.llm({"model": "model-1", "prompt": f"part {len(progress)}"}, lambda r: answer + str(r))
        return Step(f"write-{len(progress)}", "write", {"chars": len(text)})

    out: dict[str, float] = {}
    traces = {}
    for name, threshold in (("blobs", 64 * 1024), ("inline", 10**9)):
        sub = os.path.join(folder, name)
        os.makedirs(sub)
        traces[name] = os.path.join(sub, "run.jsonl")
        Executor(planner=plan, tools={"write": lambda chars: {"ok": chars}}, trace=traces[name],
                 blob_threshold=threshold).run(GOAL)  # fmt: skip
        out[f"{name}_trace_bytes"] = os.path.getsize(traces[name])

    def replayed(path: str) -> Callable[[], Sample]:
        def go() -> Sample:
            t0 = clocks()
            rep = replay(path)
            assert all(c.response is not None for c in rep.crossings)  # every answer read back
            return since(t0)

        return go

    got = interleaved({k: replayed(p) for k, p in traces.items()}, reps)
    out["replay_ratio"] = got.ratio("blobs", "inline", CPU)
    blobs_dir = os.path.dirname(traces["blobs"])
    files = [
        traces["blobs"],
        *(os.path.join(blobs_dir, "blobs", n) for n in os.listdir(os.path.join(blobs_dir, "blobs"))),
    ]
    zips = {k: os.path.join(folder, f"{k}.zip") for k in ("harness", "zipfile")}

    def exported() -> Sample:
        t0 = clocks()
        export([traces["blobs"]], zips["harness"])
        return since(t0)

    def zipped() -> Sample:
        t0 = clocks()
        with zipfile.ZipFile(zips["zipfile"], "w", zipfile.ZIP_DEFLATED) as zf:
            for f in files:
                zf.write(f, os.path.relpath(f, blobs_dir))
        return since(t0)

    got = interleaved({"harness": exported, "zipfile": zipped}, reps)
    out["export_ratio"] = got.ratio("harness", "zipfile", WALL)
    n = [0]

    def imported() -> Sample:
        n[0] += 1
        t0 = clocks()
        import_bundle(zips["harness"], os.path.join(folder, f"into-{n[0]}"))
        return since(t0)

    def unzipped() -> Sample:
        n[0] += 1
        t0 = clocks()
        with zipfile.ZipFile(zips["zipfile"]) as zf:
            zf.extractall(os.path.join(folder, f"plain-{n[0]}"))
        return since(t0)

    got = interleaved({"harness": imported, "zipfile": unzipped}, reps)
    out["import_ratio"] = got.ratio("harness", "zipfile", WALL)
    out["bundle_mb"] = sum(os.path.getsize(f) for f in files) / 1e6
    return out


TO_FIRST_PLAN: dict[str, list[float]] = {}  # trace -> CPU seconds from run() to its planner's first call


def resume_seconds(trace: str) -> Sample:
    """Time to resume the generated run (paused in PLAN) and finish it; the file is put back after.

    Finishing it ends and seals the run: the seal hashes the bytes after the
    whole 4 MiB blocks whose digests the index holds (every byte in the
    first round, which finds no index); the time until the planner is first
    asked (the run back at work) goes to TO_FIRST_PLAN.
    """
    size = os.path.getsize(trace)
    t0 = clocks()

    def planner(goal: Any, progress: Any) -> None:
        TO_FIRST_PLAN.setdefault(trace, []).append(since(t0)[1])
        return None

    ex = Executor(planner=planner, tools=TOOLS, trace=trace, resume=True)
    t0 = clocks()
    out = ex.run(GOAL)
    t = since(t0)
    assert out.state == "DONE", out
    os.truncate(trace, size)
    return t


# the child reads VmHWM, the high-water mark of its own address space: ru_maxrss would also count the
# parent's pages, which Linux carries over into the child's figure when subprocess forks (vfork) and execs
_RSS = """
import contextlib, os, sys
from harness import replay
from harness.cli import main
if sys.argv[2] == "replay":
    r = replay(sys.argv[1])
    assert r.records > 0 and len(r.checkpoints) > 0
elif sys.argv[2] in ("show", "diff"):  # the commands, their output thrown away
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        args = ["show", sys.argv[1]] if sys.argv[2] == "show" else ["diff", sys.argv[1], sys.argv[1]]
        assert main(args) == 0
with open("/proc/self/status") as f:
    print(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
"""


def peak_rss_mb(trace: str, what: str) -> float:
    """Peak resident memory, in MiB, of a fresh interpreter that imports harness and then runs `what` on trace.

    what: "import" (nothing more), "replay" (replay()), "show" (`harness show TRACE`) or "diff"
    (`harness diff TRACE TRACE`: two equal traces, the case whose memory must not grow with the file).
    """
    out = subprocess.run([sys.executable, "-c", _RSS, trace, what], check=True, capture_output=True, text=True)
    return int(out.stdout) / 1024  # VmHWM is in kB


def diff_seconds(scratch: Scratch, trace: str) -> float | None:
    """Seconds for harness.diff of trace and a copy whose middle model answer differs (a valid trace)."""
    diff = getattr(harness, "diff", None)
    if diff is None:
        return None
    records = read_records(trace)
    i = len(records) // 2
    while records[i]["kind"] != "crossing":
        i += 1
    records[i]["response"] = {"text": "a different answer", "tokens": 3}
    other = scratch()
    forge(other, records)
    t0 = clocks()
    found = diff(trace, other)
    t = since(t0)[0]
    assert len(found.moved) == 1 and found.moved[0].op == "changed", found.moved[:3]
    return t


def bench_parallel(scratch: Scratch, sizes: Sizes, latency: float) -> Rounds:
    """One parallel step of 8 calls against 8 sequential steps, the same tool."""

    def tool(i: int) -> dict[str, Any]:
        if latency:
            time.sleep(latency)
        return {"i": i}

    def parallel(goal: Any, progress: list[Any]) -> Any:
        return [Step(f"call{i}", "t", {"i": i}) for i in range(8)] if not progress else None

    def sequential(goal: Any, progress: list[Any]) -> Any:
        return Step(f"call{len(progress)}", "t", {"i": len(progress)}) if len(progress) < 8 else None

    def once(planner: Any) -> Callable[[], Sample]:
        def go() -> Sample:
            path = scratch()
            t0 = clocks()
            out = Executor(planner=planner, tools={"t": tool}, trace=path).run(GOAL)
            t = since(t0)
            assert out.state == "DONE" and len(out.checkpoints) == 8
            os.unlink(path)
            return t

        return go

    return interleaved({"parallel": once(parallel), "sequential": once(sequential)}, max(sizes.reps, 5))


def bench_threads(scratch: Scratch, sizes: Sizes) -> Rounds:
    """Records per second into one shared journal: 8 threads against 1, and the lean single-agent path."""
    import threading

    n = sizes.append
    appends = take(n)
    local = threading.local()

    def stamp(after: dict[str, int] | None) -> tuple[str, dict[str, int]]:
        n = (after[local.name] if after else getattr(local, "n", 0)) + 1
        return local.name, {local.name: n}

    def tick(vc: dict[str, int]) -> None:  # the clock moves on once the record is encoded
        local.n = vc[local.name]

    def write(journal: Journal, name: str, part: list[Append]) -> None:
        local.name, local.n = name, 0
        for kind, fields, check in part:
            journal.append(kind, fields, check=check)

    def threads(k: int) -> Callable[[], Sample]:
        def go() -> Sample:
            path = scratch()
            with Journal.open(path) as journal:
                journal.t0 = time.time()  # the records' clock, as the header would start it
                journal.share(stamp, tick)
                parts = [appends[i::k] for i in range(k)]
                workers = [threading.Thread(target=write, args=(journal, f"a{i}", parts[i])) for i in range(k)]
                t0 = clocks()
                for w in workers:
                    w.start()
                for w in workers:
                    w.join()
                t = since(t0, n)
            os.unlink(path)
            return t

        return go

    def lean() -> Sample:
        path = scratch()
        with Journal.open(path) as journal:
            journal.t0 = time.time()  # the records' clock, as the header would start it
            t0 = clocks()
            for kind, fields, check in appends:
                journal.append(kind, fields, check=check)
            t = since(t0, n)
        os.unlink(path)
        return t

    return interleaved({"8 threads": threads(8), "1 thread": threads(1), "lean": lean}, sizes.reps)


# ---------------------------------------------------------------- the run


def _peers() -> Any:
    """bench/peers.py, as a script's neighbour (python bench/run.py) or as bench.peers (the tests)."""
    return importlib.import_module("peers" if not __package__ else f"{__package__}.peers")


def _frameworks() -> Any:
    """bench/frameworks.py (Pydantic AI under HarnessDurability and DBOSDurability), found as _peers() is."""
    return importlib.import_module("frameworks" if not __package__ else f"{__package__}.frameworks")


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "orjson": orjson.__version__,
        "sqlite": sqlite3.sqlite_version,
    }


def run(mode: str, folder: str, log: Callable[[str], None], *, wall: bool = False, with_peers: bool = False
        ) -> dict[str, Any]:  # fmt: skip
    """Measure every line; CPU-bound lines are judged on CPU time unless wall=True, append lines on wall time."""
    sizes = MODES[mode]
    scratch = Scratch(folder)
    out: dict[str, Any] = {}
    detail: dict[str, Any] = {"clock": {}}

    def clock(line: str, *, io: bool = False) -> int:
        use_wall = wall or io
        detail["clock"][line] = "wall" if use_wall else "cpu"
        return WALL if use_wall else CPU

    log("append, flush mode")
    got = bench_append(scratch, sizes, "flush")
    c = clock("append_flush", io=True)
    out["append_flush_vs_raw"] = got.ratio("harness", "raw", c)
    out["append_flush_vs_sqlite"] = got.ratio("harness", "sqlite", c)
    detail["append_flush_us"] = got.medians(1e6)
    detail["append_parts_cpu_us"] = append_parts(scratch, sizes)

    log("append, fsync mode")
    got = bench_append(scratch, sizes, "fsync")
    c = clock("append_fsync", io=True)
    out["append_fsync_vs_raw"] = got.ratio("harness", "raw", c)
    out["append_fsync_vs_sqlite"] = got.ratio("harness", "sqlite", c)
    detail["append_fsync_us"] = got.medians(1e6)
    detail["append_work_after_sync_us"] = after_sync(scratch, sizes)

    log("executor steps")
    got = bench_steps(scratch, sizes)
    out["step_overhead_vs_bare"] = got.ratio("harness", "bare", clock("step"))
    detail["step_us"] = got.medians(1e6)
    detail["step_appends_only_vs_bare"] = got.ratio("appends only", "bare", clock("step"))

    biggest = max(*sizes.resume, sizes.rss, sizes.replay, sizes.diff)
    log(f"writing a {biggest}-record trace through Journal")
    full = scratch()
    t0 = clocks()
    records = write_trace(full, biggest)
    detail["trace"] = {"records": records, "bytes": os.path.getsize(full), "write_s": since(t0)[0]}

    def prefix(n: int) -> str:
        if n >= records:
            return full
        path = scratch()
        cut(full, path, n)
        return path

    log(f"replay of {sizes.replay} records")
    got = bench_replay(scratch, prefix(sizes.replay), sizes.reps)
    c = clock("replay")
    out["replay_vs_orjson"] = got.ratio("harness", "orjson", c)
    out["replay_vs_sqlite"] = got.ratio("harness", "sqlite", c)
    detail["replay_s"] = got.medians(1)
    detail["replay_checksums_only_vs_orjson"] = got.ratio("checksums only", "orjson", c)

    tiny = sizes.resume[-1] // 100  # resume_1m_vs_10k: the biggest against a trace 100 x smaller
    log(f"resume at {', '.join(map(str, (*sizes.resume, tiny)))} records")
    traces: dict[str, str] = {}
    for n in (*sizes.resume, tiny):  # the cuts land on step ends, a few records past the nominal sizes
        path = prefix(n)
        traces[str(replay(path).records)] = path
    got = interleaved({n: functools.partial(resume_seconds, path) for n, path in traces.items()}, sizes.resume_reps)
    counts = list(traces)
    small, big = counts[0], counts[len(sizes.resume) - 1]
    out["resume_linearity"] = got.ratio(big, small, clock("resume")) * int(small) / int(big)  # per record
    out["resume_1m_vs_10k"] = got.ratio(big, counts[-1], clock("resume"))
    detail["resume_s"] = got.medians(1)
    first = {n: statistics.median(TO_FIRST_PLAN[path]) for n, path in traces.items()}
    detail["resume_to_first_plan_cpu_s"] = first
    detail["resume_to_first_plan_1m_vs_10k"] = first[big] / first[counts[-1]]

    log(f"peak memory replaying {sizes.rss} records")
    rss_trace = prefix(sizes.rss)
    out["replay_peak_rss_mb"] = peak_rss_mb(rss_trace, "replay")
    log(f"peak memory of harness show and harness diff (the trace against itself) at {sizes.rss} records")
    out["show_peak_rss_mb"] = peak_rss_mb(rss_trace, "show")
    out["diff_peak_rss_mb"] = peak_rss_mb(rss_trace, "diff")
    detail["rss_mb_import_only"] = peak_rss_mb(rss_trace, "import")

    log("200 KiB model answers: blobs against inline; export and import against zipfile")
    blob_folder = tempfile.mkdtemp(dir=folder)
    try:
        got_blobs = bench_blobs(blob_folder, 4 if sizes.reps <= 3 else 20, sizes.reps)
    finally:
        shutil.rmtree(blob_folder, ignore_errors=True)
    out["blob_trace_vs_inline"] = got_blobs["blobs_trace_bytes"] / got_blobs["inline_trace_bytes"]
    out["blob_replay_vs_inline"] = got_blobs["replay_ratio"]
    out["export_vs_zipfile"] = got_blobs["export_ratio"]
    out["import_vs_zipfile"] = got_blobs["import_ratio"]
    detail["blobs"] = got_blobs

    log(f"diff of two {sizes.diff}-record traces")
    d = diff_seconds(scratch, prefix(sizes.diff))
    out["diff_100k_s"] = d
    if d is None:
        detail["diff"] = "harness.diff is not available in this build"

    log("a parallel step of 8 calls against 8 sequential steps")
    got = bench_parallel(scratch, sizes, LATENCY)
    out["parallel_step_vs_sequential"] = got.ratio("parallel", "sequential", WALL)
    detail["parallel_step_ms"] = got.medians(1e3)
    got = bench_parallel(scratch, sizes, 0.0)
    detail["parallel_noop_step_vs_sequential"] = got.ratio("parallel", "sequential", WALL)
    detail["parallel_noop_step_ms"] = got.medians(1e3)
    detail["clock"]["parallel"] = "wall"

    log(f"{sizes.append} appends from 8 threads into one journal")
    got = bench_threads(scratch, sizes)
    out["journal_8_threads_vs_1"] = got.ratio("1 thread", "8 threads", WALL)  # time per record: > 1 is faster
    detail["journal_threads_us_per_record"] = got.medians(1e6)
    detail["journal_shared_vs_lean_1_thread"] = got.ratio("1 thread", "lean", WALL)
    detail["clock"]["journal_threads"] = "wall"

    log(f"workflows: a call and a crossing against an Executor step ({sizes.steps} each)")
    got = bench_workflow(scratch, sizes)
    out["workflow_call_vs_step"] = got.ratio("workflow call", "executor step", clock("workflow"))
    out["workflow_crossing_vs_step"] = got.ratio("workflow crossing", "executor step", clock("workflow"))
    out["tool_decorated_vs_call"] = got.ratio("decorated call", "workflow call", clock("workflow"))
    detail["workflow_us"] = got.medians(1e6)
    n = WORKFLOW_CROSSINGS[mode]
    log(f"workflows: resume after {n} model calls, against the same run live")
    got = bench_workflow_resume(scratch, n, sizes.resume_reps)
    out["workflow_resume_served_vs_live"] = got.ratio("resumed", "live", clock("workflow_resume"))
    detail["workflow_resume_us_per_crossing"] = got.medians(1e6)
    detail["workflow_resume_crossings"] = n
    log(f"workflows: resume after {n} model calls of two agents, against the same run live")
    got = bench_workflow_resume(scratch, n, sizes.resume_reps, pair)
    out["workflow_agents_resume_served_vs_live"] = got.ratio("resumed", "live", WALL)  # threads: wall time
    detail["workflow_agents_resume_us_per_crossing"] = got.medians(1e6)
    detail["clock"]["workflow_agents_resume"] = "wall"

    runs = CHECK_RUNS[mode]
    log(f"harness check of {runs} recorded runs, against running them live")
    got, crossings = bench_check(scratch, runs, 3)
    out["check_vs_live"] = got.ratio("check", "live", clock("check", io=True))  # a live run waits for its disk
    out["check_s_per_1k_crossings"] = got.median("check", clock("check_cpu")) * 1000
    detail["check_us_per_crossing"] = got.medians(1e6)
    detail["check_runs"], detail["check_crossings"] = runs, crossings

    # bench/peers.py: harness alone by default, every peer with --peers (imported here, so the default run and the
    # tests need no peer installed); it raises PeersMissing, saying what to install, when a peer is absent
    peers = _peers()
    log("bench/peers.py: " + ("harness and its peers" if with_peers else "harness alone"))
    # the smoke counts the syncs of the key's variant alone (strace runs two more children per variant counted)
    count = ("harness-fsync",) if mode == "smoke" else None
    got_peers = peers.run(mode, scratch.folder, log, peers=with_peers, count=count)
    out.update(got_peers["keys"])
    detail["peers"] = got_peers["detail"]
    out["pydantic_ai_step_vs_dbos"] = out["pydantic_ai_resume_vs_dbos"] = None
    if with_peers:  # bench/frameworks.py: the same Pydantic AI agent durable on harness and on DBOS
        log("bench/frameworks.py: Pydantic AI under HarnessDurability and DBOSDurability")
        got_pai = _frameworks().run(mode, scratch.folder, log)
        out.update(got_pai["keys"])
        detail["pydantic_ai"] = got_pai["detail"]
    return {"mode": mode, "sizes": asdict(sizes), "machine": machine(), "ratios": out, "detail": detail, **out}


def table(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    what = {
        "append_flush_vs_raw": f"Journal.append, flush / orjson.dumps + os.write ({sizes['append']} records)",
        "append_flush_vs_sqlite": "Journal.append, flush / SQLite WAL synchronous=NORMAL, commit per record",
        "append_fsync_vs_raw": f"Journal.append, fsync / os.write + os.fdatasync ({sizes['fsync']} records)",
        "append_fsync_vs_sqlite": "Journal.append, fsync / SQLite WAL synchronous=FULL, commit per record",
        "replay_vs_orjson": f"replay() / orjson.loads of every line ({sizes['replay']} records)",
        "replay_vs_sqlite": "replay() / SELECT + orjson.loads from SQLite",
        "step_overhead_vs_bare": f"executor step / bare loop + 3 raw appends ({sizes['steps']} steps)",
        "blob_trace_vs_inline": "trace size, 200 KiB model answers: blobs / inline",
        "blob_replay_vs_inline": "replay() reading every 200 KiB answer: blobs / inline",
        "export_vs_zipfile": "harness export / zipfile writing the same files",
        "import_vs_zipfile": "harness import (all checks) / zipfile.extractall",
        "resume_linearity": f"resume at {sizes['resume'][-1]} / (10 x at {sizes['resume'][0]}), per record",
        "replay_peak_rss_mb": f"peak RSS replaying {sizes['rss']} records, MB",
        "show_peak_rss_mb": f"peak RSS of `harness show` of {sizes['rss']} records, MB",
        "diff_peak_rss_mb": f"peak RSS of `harness diff` of {sizes['rss']} records against themselves, MB",
        "diff_100k_s": f"harness.diff of two {sizes['diff']}-record traces, s",
        "resume_1m_vs_10k": f"resume at {sizes['resume'][-1]} / at {sizes['resume'][-1] // 100} records",
        "bytes_per_step": "bytes on disk per step, fsync mode, bench/peers.py's agent",
        "fsyncs_per_step": "fsync + fdatasync per step, fsync mode, steady state (strace)",
        "step_fsync_vs_langgraph": 'step, fsync / LangGraph SqliteSaver durability="sync" (--peers)',
        "step_fsync_vs_dbos": "step, fsync / DBOS on SQLite (--peers)",
        "step_fsync_vs_burr": "step, fsync / Burr SQLitePersister (--peers)",
        "parallel_step_vs_sequential": f"1 parallel step of 8 calls / 8 sequential steps, tools waiting {LATENCY} s",
        "journal_8_threads_vs_1": f"records/s, 8 threads sharing a journal / 1 thread ({sizes['append']} records)",
        "workflow_call_vs_step": f"workflow harness.call / Executor step, no-op tool ({sizes['steps']} each)",
        "workflow_crossing_vs_step": "workflow harness.llm crossing, no-op model / Executor step",
        "tool_decorated_vs_call": "workflow, a call of an @harness.tool function / harness.call of it undecorated",
        "workflow_resume_served_vs_live": "workflow resume per served crossing / live, per crossing "
        f"({result['detail'].get('workflow_resume_crossings')} model calls)",
        "workflow_agents_resume_served_vs_live": "the same, the calls made by two spawned agents (wall time)",
        "workflow_call_vs_langgraph": "workflow, fsync, per durable call / LangGraph @entrypoint + @task, "
        'SqliteSaver, durability="sync" (--peers)',
        "workflow_call_vs_dbos": "workflow, fsync, per durable call / DBOS workflow + steps on SQLite (--peers)",
        "workflow_resume_vs_langgraph": "workflow resume of the killed run / LangGraph's (--peers)",
        "workflow_resume_vs_dbos": "workflow resume of the killed run / DBOS recovery (--peers)",
        "pydantic_ai_step_vs_dbos": "Pydantic AI agent, overhead per durable call over a plain run: "
        "HarnessDurability (fsync) / DBOSDurability on SQLite (--peers)",
        "pydantic_ai_resume_vs_dbos": "Pydantic AI agent killed after N tool calls: harness resume / DBOS recovery "
        "(--peers)",
        "check_vs_live": f"harness check of {result['detail'].get('check_runs')} recorded runs / running them, "
        "per crossing",
        "check_s_per_1k_crossings": "harness check, seconds per 1,000 crossings (model and tool calls), one core",
    }
    rows = ["| key | what | measured | target |", "|---|---|---|---|"]
    for key, target in TARGETS.items():
        value = result[key]
        shown = "n/a" if value is None else f"{value:.3g}"
        missed = target is not None and value is not None and value > target
        goal = "reported" if target is None else f"<= {target:g}" + (" (missed)" if missed else "")
        rows.append(f"| `{key}` | {what[key]} | {shown} | {goal} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="smaller sizes; under a minute")
    g.add_argument("--smoke", action="store_true", help="tiny sizes: proves the program runs (for the tests)")
    p.add_argument("--json", metavar="PATH", help="write the figures here as JSON")
    p.add_argument("--dir", metavar="DIR", help="where to put the scratch files (default: a temporary folder)")
    p.add_argument("--wall", action="store_true", help="judge every line on wall-clock time, not CPU time")
    p.add_argument("--peers", action="store_true", help="also run LangGraph, DBOS and Burr (pip install -e '.[peers]')")
    p.add_argument("--fleet", action="store_true", help="Ray and object storage instead (bench/fleet.py; extras)")
    args = p.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    if args.fleet:  # Ray takes seconds to start: its own run, its own figures
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from bench import fleet

        return fleet.main("smoke" if args.smoke else "full", args.json, log)

    if args.peers:  # before minutes of measuring, not after
        peers = _peers()
        try:
            peers.check_installed(list(peers.VARIANTS))
        except peers.PeersMissing as e:
            print(f"bench/run.py --peers: {e}", file=sys.stderr)
            return 2
        missing = _frameworks().check_installed()
        if missing:
            print(f"bench/run.py --peers: {missing}", file=sys.stderr)
            return 2
    folder = tempfile.mkdtemp(prefix="harness-bench-", dir=args.dir)
    try:
        result = run(mode, folder, log, wall=args.wall, with_peers=args.peers)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(table(result))
    print()
    print(_peers().table(result["detail"]["peers"]["variants"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
