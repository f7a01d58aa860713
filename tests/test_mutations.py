"""The mutation corpus: no mutated trace is believed, none crashes or hangs the reader (issue 15).

A rich trace is made by real runs: a retried tool error, a verifier's
rejection and its retry, LLM crossings and a crossing that raised, an
idempotent tool with its key, a crash inside an unsafe tool, a torn tail
set aside by the resume (`run.jsonl.torn-1`), the pause, the operator's
reconcile and the resume that finishes the run: every record kind an
Executor writes but the seal, which is cut off (a seal is a sha256 of every
byte before it: it would refuse every mutant below on its own, and the rules
behind the checksum are what this corpus exercises; tests/test_records.py
tests the seal).

Each of the 94 mutation kinds below is applied to every line it applies to,
and each mutant is tried twice: as mutated (raw) and with the checksum chain
recomputed over the mutated lines (through test_forgeries.forge(), the one
forgery helper), so that the rules behind the checksum are exercised alone.
A mutant identical to the trace, or a prefix of it cut at a line end (what a
crash leaves, valid by definition), is not counted. Every counted mutant
must make replay() raise TraceCorruption, or, when the file ends in a line
without its newline, be read as a torn tail after complete lines that are
the trace's own; any other exception, an accepted mutant, or a replay taking
more than ALARM seconds fails the test. `test_the_corpus_is_as_documented`
pins the counts quoted here and in docs/FORMAT.md: 94 kinds, 3,992 mutants
(2,109 raw, 1,883 with the checksum recomputed), a few seconds of CPU.

The second part (issue 25) forges several records at once, as a forger of
schema 2's records would, generated from two more real traces (a parallel
step with unsafe calls timed out, in flight at a crash, reconciled and
resumed; agents exchanging messages, one sent before the first spawn) and
the rich one: six classes, each applied to every record it applies to, the
seqs and vector clocks recomputed (forge's reclock) so that only the rules
behind them can refuse: a call's spawn or intent naming another call (46),
a call joined before it checkpointed (8), an unsafe call leaving ACT as
harness never writes (5), messages received otherwise than sent (15), an
agent's life broken or a clock's keys unsorted (30), and every field a kind
(a transition: its edge) never carries, given to each record (2,730): 2,834
forgeries, each refused at the very line that lies
(`test_the_generated_corpus_is_as_documented` pins these counts).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_forgeries import OMIT, forge

import harness
from harness import Executor, RetryPolicy, Step, Tool, TraceCorruption
from harness.testing import FakeLLM, counter, flaky, power_cut, read_records
from harness.trace.line import SUFFIX

ALARM = 10  # seconds for one kind's whole sweep: a hang fails instead of blocking CI
KINDS, RAW, RECOMPUTED = 94, 2109, 1883  # the corpus, as the docstring and docs/FORMAT.md state it

# --- the rich trace --------------------------------------------------------------------------------

PLAN = [
    Step("fetch", "work", {"i": 0}),
    Step("store", "put", {"i": 1}),
    Step("pay", "pay", {"amount": 2}),
    Step("report", "work", {"i": 3}),
]


def build(folder: Path) -> Path:
    trace = folder / "run.jsonl"
    model = FakeLLM(lambda request: f"plan step {request['step']}")

    def lookup_down() -> Any:
        raise LookupError("directory down")

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        n = len(progress)
        harness.llm({"step": n, "goal": goal}, model)
        if n == 1:
            with contextlib.suppress(LookupError):
                harness.boundary("lookup", {"q": "account"}, lookup_down)  # recorded with its error
        return PLAN[n] if n < len(PLAN) else None

    rejected: list[str] = []

    def verifier(step: Step, result: Any) -> bool:
        if step.name == "report" and not rejected:
            rejected.append(step.name)
            return False
        return True

    work, put = flaky(1), counter()

    def run(pay: Any, *, resume: bool) -> harness.Outcome:
        tools = {"work": work, "put": Tool(put, idempotent=True), "pay": Tool(pay, idempotent=False)}
        return Executor(planner=planner, tools=tools, verifier=verifier, trace=trace, resume=resume).run("refund")

    with pytest.raises(RuntimeError, match="power cut"):
        run(power_cut(1), resume=False)  # killed inside the unsafe tool
    lines = trace.read_bytes().splitlines(keepends=True)
    assert b'"kind":"crash"' in lines[-1]  # the word an exception leaves; a SIGKILL leaves none: drop it
    trace.write_bytes(b"".join(lines[:-1]) + b'{"seq":99,"kind":"cross')  # and a torn line after it
    assert run(counter(), resume=True).state == "PAUSED"
    harness.reconcile(trace, happened=True, result={"paid": 2}, evidence="ledger row 17")
    assert run(counter(), resume=True).state == "DONE"
    lines = trace.read_bytes().splitlines(keepends=True)
    assert b'"kind":"seal"' in lines[-1]
    trace.write_bytes(b"".join(lines[:-1]))  # the run as it ended, without its seal (see the docstring)
    return trace


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = build(tmp_path_factory.mktemp("rich"))
    rep = harness.replay(trace)
    kinds = {r["kind"] for r in map(orjson.loads, trace.read_bytes().splitlines())}
    assert kinds == {"header", "transition", "checkpoint", "crossing", "resume", "reconcile"}
    assert rep.resumes == 2 and (trace.parent / "run.jsonl.torn-1").exists() and rep.records == 32
    return trace


# --- the mutation kinds ----------------------------------------------------------------------------
# A kind maps (lines, i) to the mutated lines (each with its own terminator), or None where it does not apply.

Lines = list[bytes]
Kind = Callable[[Lines, int], Lines | None]
MUTATIONS: dict[str, Kind] = {}


def kind(name: str) -> Callable[[Kind], Kind]:
    def register(fn: Kind) -> Kind:
        MUTATIONS[name] = fn
        return fn

    return register


def edit(name: str, fn: Callable[[bytes], bytes | None]) -> None:
    """A kind that rewrites line i's content (without its newline) and keeps its newline."""

    def mutate(lines: Lines, i: int) -> Lines | None:
        new = fn(lines[i][:-1])
        return None if new is None else [*lines[:i], new + b"\n", *lines[i + 1 :]]

    MUTATIONS[name] = mutate


def raw(name: str, fn: Callable[[bytes], bytes | None]) -> None:
    """A kind that rewrites line i whole, newline included."""
    MUTATIONS[name] = lambda lines, i: None if (new := fn(lines[i])) is None else [*lines[:i], new, *lines[i + 1 :]]


# lines moved, dropped, doubled, cut
kind("delete")(lambda ls, i: ls[:i] + ls[i + 1 :])
kind("duplicate")(lambda ls, i: ls[: i + 1] + ls[i:])
kind("swap-next")(lambda ls, i: [*ls[:i], ls[i + 1], ls[i], *ls[i + 2 :]] if i + 1 < len(ls) else None)
kind("swap-prev")(lambda ls, i: [*ls[: i - 1], ls[i], ls[i - 1], *ls[i + 1 :]] if i > 0 else None)
kind("move-to-end")(lambda ls, i: ls[:i] + ls[i + 1 :] + [ls[i]] if i + 1 < len(ls) else None)
kind("move-to-start")(lambda ls, i: [ls[i], *ls[:i], *ls[i + 1 :]] if i > 0 else None)
kind("blank-before")(lambda ls, i: [*ls[:i], b"\n", *ls[i:]])
kind("blank-after")(lambda ls, i: [*ls[: i + 1], b"\n", *ls[i + 1 :]])
kind("cut-rest")(lambda ls, i: [*ls[:i], ls[i][: len(ls[i]) // 2]])  # a crash mid-line: a torn tail
raw("split-middle", lambda b: b[: len(b) // 2] + b"\n" + b[len(b) // 2 :])
raw("join-next", lambda b: b[:-1])  # on the last line: a last line without its newline
raw("crlf", lambda b: b[:-1] + b"\r\n")
raw("cr-only", lambda b: b[:-1] + b"\r")
raw("two-newlines", lambda b: b + b"\n")
edit("truncate-half", lambda b: b[: len(b) // 2])
edit("drop-first-byte", lambda b: b[1:])
edit("drop-last-byte", lambda b: b[:-1])
edit("bom", lambda b: b"\xef\xbb\xbf" + b)
edit("nul-inside", lambda b: b[: len(b) // 2] + b"\x00" + b[len(b) // 2 :])
edit("invalid-utf8", lambda b: b[: len(b) // 2] + b"\xff" + b[len(b) // 2 :])
edit("trailing-space", lambda b: b + b" ")
edit("leading-space", lambda b: b" " + b)
edit("space-after-brace", lambda b: b"{ " + b[1:])
edit("space-before-brace", lambda b: b[:-1] + b" }")
edit("space-after-colon", lambda b: b.replace(b'":', b'": ', 1))
edit("space-after-comma", lambda b: b.replace(b",", b", ", 1))
edit("crc-zeroed", lambda b: b[:-SUFFIX] + b',"crc":"00000000"}')
edit("no-crc", lambda b: b[:-SUFFIX] + b"}")
edit("line-twice", lambda b: b + b)
edit("in-array", lambda b: b"[" + b + b"]")
edit("null", lambda b: b"null")
edit("empty-object", lambda b: b"{}")
edit("trailing-comma", lambda b: b[:-1] + b",}")
edit("escaped-key", lambda b: b.replace(b'"kind"', b'"\\u006bind"', 1))
edit("escaped-slash", lambda b: b.replace(b'"kind":"', b'"kind":"\\/', 1))


def _before_ts(extra: bytes) -> Callable[[bytes], bytes | None]:
    """Insert extra (`,"key":value`) just before the line's ts."""
    return lambda b: b.replace(b',"ts":', extra + b',"ts":', 1) if b',"ts":' in b else None


# keys twice, values orjson would not write back
edit("dup-seq", lambda b: b.replace(b'{"seq":', b'{"seq":' + b.split(b",")[0][7:] + b',"seq":', 1))
edit("dup-kind", lambda b: _before_ts(b"," + b.split(b",")[1])(b))
edit("dup-ts", lambda b: b.replace(b',"crc":', b"," + b[b.rfind(b',"ts":') + 1 : b.rfind(b',"crc":')] + b',"crc":'))
edit("big-int", _before_ts(b',"x":18446744073709551616'))
edit("small-int", _before_ts(b',"x":-9223372036854775809'))
edit("deep-300", _before_ts(b',"x":' + b"[" * 300 + b"]" * 300))
edit("deep-1100", _before_ts(b',"x":' + b"[" * 1100 + b"]" * 1100))
edit("exponent", _before_ts(b',"x":1E2'))
edit("minus-zero", _before_ts(b',"x":-0'))
edit("escaped-letter", _before_ts(b',"x":"\\u0041"'))
edit("escaped-solidus", _before_ts(b',"x":"\\/"'))

MISSING = object()


def field(name: str, key: str, value: Any = MISSING, *, change: Callable[[Any], Any] | None = None) -> None:
    """A kind that sets (or, with MISSING, removes) key in the line's record, re-encoded by orjson.

    The old crc field stays last, so the raw mutant differs from the trace only in that field.
    """

    def fn(b: bytes) -> bytes | None:
        rec = orjson.loads(b)
        if key not in rec:
            return None
        if change is not None:
            rec[key] = change(rec[key])
        elif value is MISSING:
            del rec[key]
        else:
            rec[key] = value
        return orjson.dumps(rec)

    edit(name, fn)


field("seq+1", "seq", change=lambda v: v + 1)
field("seq-1", "seq", change=lambda v: v - 1)
field("seq-str", "seq", change=str)
field("seq-float", "seq", change=float)
field("seq-true", "seq", True)
field("seq-negative", "seq", change=lambda v: -v)
field("no-seq", "seq")
field("kind-bogus", "kind", "bogus")
field("no-kind", "kind")
field("kind-int", "kind", 7)
field("kind-upper", "kind", change=str.upper)
field("no-ts", "ts")
field("ts-int", "ts", change=int)
field("ts-str", "ts", change=str)
field("from-int", "from", 3)
field("to-nowhere", "to", "NOWHERE")
field("step+1", "step", change=lambda v: v + 1)
field("step-float", "step", change=float)
field("step-true", "step", True)
field("attempt+1", "attempt", change=lambda v: v + 1)
field("attempt-0", "attempt", 0)
field("tool-ghost", "tool", "ghost")
field("args-list", "args", [])
field("no-args", "args")
field("no-key", "key")
field("key-other", "key", "another key")
field("no-result", "result")
field("no-error", "error")
field("error-str", "error", "boom")
field("no-boundary", "boundary")
field("boundary-int", "boundary", 1)
field("no-request", "request")
field("no-response", "response")
field("no-hash", "hash")
field("aside-absolute", "set_aside", "/etc/passwd")
field("aside-parent", "set_aside", "../run.jsonl.torn-1")
field("op-float", "op", change=float)
field("op+1", "op", change=lambda v: v + 1)
field("happened-int", "happened", 1)
field("evidence-int", "evidence", 17)
field("schema-1", "schema", 1)
field("schema-str", "schema", "2")
field("run-id-int", "run_id", 7)
field("no-goal", "goal")
field("tools-list", "tools", ["work"])
field("no-tools", "tools")
field("name-int", "name", 7)
field("env-list", "env", [])


# --- applying them ---------------------------------------------------------------------------------


def recomputed(data: bytes, scratch: Path) -> bytes:
    """data with the checksum chain recomputed over its complete lines (a last partial line is kept as is)."""
    *complete, partial = data.split(b"\n")
    bodies = [line[: line.rfind(b',"crc":"')] if b',"crc":"' in line else line for line in complete]
    scratch.unlink(missing_ok=True)  # a new file, not a truncated one: ext4 flushes a truncated file on close
    forge(scratch, bodies)
    return scratch.read_bytes() + partial


def mutants(
    original: bytes, name: str, scratch: Path, kinds: dict[str, Kind] = MUTATIONS
) -> Iterator[tuple[str, bytes]]:
    """(label, bytes) of each counted mutant of one kind: raw and recomputed, for every line it applies to."""
    lines = original.splitlines(keepends=True)
    seen = {original}
    prefixes = {b"".join(lines[:n]) for n in range(len(lines))}
    for i in range(len(lines)):
        changed = kinds[name](list(lines), i)
        if changed is None:
            continue
        data = b"".join(changed)
        for label, variant in (("raw", data), ("recomputed", recomputed(data, scratch))):
            if variant in seen or variant in prefixes:
                continue
            seen.add(variant)
            yield f"{name} line {i + 1} {label}", variant


def judge(path: Path, data: bytes, original: bytes) -> str | None:
    """None when replay() refuses the mutant as it must; else what went wrong."""
    path.unlink(missing_ok=True)  # see recomputed()
    path.write_bytes(data)
    try:
        rep = harness.replay(path)
    except TraceCorruption:
        return None
    except Exception as e:  # any other exception is the failure this test looks for
        return f"raised {type(e).__name__}: {e}"
    if rep.torn_tail and not data.endswith(b"\n") and original.startswith(data[: rep.tail.end]):
        return None  # a last line without its newline, after the trace's own complete lines
    return f"accepted ({rep.state}, {rep.records} records)"


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"a sweep took more than {ALARM} s")


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A folder for thousands of short-lived files: in memory (tmpfs) when the machine has one, else tmp_path.

    On a disk, ext4 commits a rewritten file's blocks when it is closed, and
    the sweep would wait on the disk rather than test the reader.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="harness-mutations-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_every_mutant_is_refused(rich: Path, scratch: Path, name: str) -> None:
    original = rich.read_bytes()
    folder = scratch / "m"
    folder.mkdir()
    (folder / "run.jsonl.torn-1").write_bytes((rich.parent / "run.jsonl.torn-1").read_bytes())
    assert_every_mutant_refused(folder / "run.jsonl", original, name, scratch / "scratch.jsonl")


def test_the_corpus_is_as_documented(rich: Path, scratch: Path) -> None:
    original = rich.read_bytes()
    labels = [label for name in MUTATIONS for label, _ in mutants(original, name, scratch / "s.jsonl")]
    assert len(MUTATIONS) == KINDS >= 60
    counts = (sum(label.endswith(" raw") for label in labels), sum(label.endswith(" recomputed") for label in labels))
    assert counts == (RAW, RECOMPUTED), f"update the docstring, KINDS/RAW/RECOMPUTED and docs/FORMAT.md: {counts}"
    assert all(any(label.startswith(f"{name} ") for label in labels) for name in MUTATIONS)  # every kind applies


# --- the multi-record forgeries of schema 2's records (issue 25) ------------------------------------
# Generated, not listed: each class below takes real traces (a run with a parallel step, unsafe calls that timed
# out and were in flight at a crash, reconciled and resumed; a run whose agents exchange messages) and makes every
# forgery of its kind over every record it applies to, with the seqs and vector clocks recomputed (forge's
# reclock: a forger's last step) so that only the rules behind them can refuse it. Each forgery names the line
# where it must be refused, and is judged there: a rule that refuses it later (or by luck) fails the test.


class Crash(Exception):
    """What a call raises that is no ToolError: the run stops with a crash record (as if its process died)."""


def build_lanes(folder: Path) -> Path:
    """Sequential steps (one unsafe call timed out and reconciled, one paid), then a parallel step of four calls:
    an idempotent one, an unsafe one the process dies in (resumed: paused, reconciled, verified), a plain one
    that is retried, and an unsafe one that pays."""
    trace = folder / "lanes.jsonl"
    first = [True]

    def pay(amount: int) -> Any:
        if amount == 5 and first[0]:
            first[0] = False
            time.sleep(0.5)  # past the timeout: the run pauses on it
        if amount == 3 and crashing.is_set():
            raise Crash
        return {"paid": amount}

    crashing = threading.Event()
    crashing.set()
    tries: list[int] = []

    def work(i: int) -> Any:
        tries.append(i)
        if i == 4 and tries.count(4) == 1:
            raise harness.ToolError("busy")
        return {"i": i}

    steps = [Step("fetch", "work", {"i": 0}), Step("charge", "pay", {"amount": 5}), Step("tip", "pay", {"amount": 1})]
    group = [Step("store", "put", {"i": 2}), Step("refund", "pay", {"amount": 3}), Step("log", "work", {"i": 4}),
             Step("bonus", "pay", {"amount": 6})]  # fmt: skip

    def planner(goal: Any, progress: list[Any]) -> Any:
        n = len(progress)
        return steps[n] if n < 3 else group if n == 3 else None

    def run() -> harness.Outcome:
        tools = {"work": work, "put": Tool(counter(), idempotent=True), "pay": Tool(pay, idempotent=False)}
        retry = RetryPolicy(3, timeout=0.2)
        return Executor(planner=planner, tools=tools, trace=trace, resume="auto", retry=retry).run("refund")

    assert run().state == "PAUSED"  # the charge timed out
    harness.reconcile(trace, happened=True, result={"paid": 5}, evidence="ledger row 3")
    with pytest.raises(Crash):
        run()  # dies in the refund call of the parallel step
    crashing.clear()
    assert run().state == "PAUSED"  # the refund was in flight: the resume pauses its lane
    harness.reconcile(trace, happened=True, result={"paid": 3}, evidence="ledger row 4")
    assert run().state == "DONE"
    return trace


def build_agents(folder: Path) -> Path:
    """main sends wb a message before spawning; wa sends wb one; wb takes both (any sender, then wa's by name)
    and answers main, which takes it by name."""
    trace = folder / "agents.jsonl"

    def wa() -> None:
        harness.send("wb", {"from": "a"})

    def wb() -> Any:
        first = harness.receive(timeout=30).body  # main's, delivered before wb existed
        second = harness.receive("wa", timeout=30).body
        harness.send("main", {"got": [first, second]})

    def planner(goal: Any, progress: list[Any]) -> Any:
        if progress:
            return None
        harness.send("wb", {"task": 1})
        a, b = harness.spawn("wa", wa), harness.spawn("wb", wb)
        got = harness.receive("wb", timeout=30).body
        harness.join(a, b)
        return Step("report", "work", {"got": got})

    assert Executor(planner=planner, tools={"work": counter()}, trace=trace).run("g").state == "DONE"
    return trace


# --- the same corpus over a workflow's trace ---------------------------------------------------------------


def build_workflow(folder: Path) -> Path:
    """A workflow's run with the same shapes: a tool error caught and retried, crossings (one that raised),
    an idempotent call, a crash inside an unsafe call, the resume that pauses, the reconcile, the resume
    that finishes (with a torn tail set aside), the result on PLAN -> DONE; the seal cut off."""
    trace = folder / "run.jsonl"
    model = FakeLLM(lambda request: f"plan step {request['step']}")
    flaky_work, counted = flaky(1), counter()

    def work(i: int) -> Any:  # named functions: a callable object is named by its type (ScriptedTool)
        return flaky_work(i=i)

    def put(i: int, idempotency_key: str) -> Any:
        return counted(i=i, idempotency_key=idempotency_key)

    def lookup_down() -> Any:
        raise LookupError("directory down")

    def make(paying: Any) -> harness.Workflow[Any, Any]:
        def pay(amount: int) -> Any:
            return paying(amount=amount)

        @harness.workflow
        def refund(goal: str) -> Any:
            harness.llm({"step": 0, "goal": goal}, model)
            try:
                harness.call(work, i=0)
            except Exception:
                harness.call(work, i=0)
            with contextlib.suppress(LookupError):
                harness.boundary("lookup", {"q": "account"}, lookup_down)
            harness.call(Tool(put, idempotent=True), i=1)
            paid = harness.call(Tool(pay, idempotent=False), amount=2)
            return {"goal": goal, "paid": paid}

        refund.name = "mutations:refund"
        return refund

    def cut(amount: int) -> Any:
        raise KeyboardInterrupt  # the process stops inside the unsafe call (a tool's Exception is its failure)

    with pytest.raises(KeyboardInterrupt):
        make(cut).run("refund", trace=trace)
    lines = trace.read_bytes().splitlines(keepends=True)
    assert b'"kind":"crash"' in lines[-1]  # the word a KeyboardInterrupt leaves; a SIGKILL leaves none: drop it
    trace.write_bytes(b"".join(lines[:-1]) + b'{"seq":99,"kind":"cross')  # and a torn line after the intent
    assert make(counter()).run("refund", trace=trace, resume=True).state == "PAUSED"
    harness.reconcile(trace, happened=True, result={"paid": 2}, evidence="ledger row 17")
    assert make(counter()).run("refund", trace=trace, resume=True).state == "DONE"
    lines = trace.read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:-1]))  # without its seal
    return trace


@pytest.fixture(scope="module")
def stories(tmp_path_factory: pytest.TempPathFactory, rich: Path) -> dict[str, list[dict[str, Any]]]:
    """The real traces' records, without their seals."""
    folder = tmp_path_factory.mktemp("stories")
    out = {name: read_records(build(folder))[:-1] for name, build in (("lanes", build_lanes), ("agents", build_agents))}
    out["rich"] = read_records(rich)
    kinds = {r["kind"] for r in out["lanes"]} | {r["kind"] for r in out["agents"]}
    assert {"spawn", "exit", "join", "reconcile", "resume", "crash", "checkpoint", "crossing"} <= kinds
    return out


Forgery = tuple[str, list[dict[str, Any]], int, bool]  # label, records, the line that must refuse, reclock them
Records = list[dict[str, Any]]


def _lanes(records: Records) -> set[str]:
    return {r["child"] for r in records if r["kind"] == "spawn" and "step" in r}


def _into(r: dict[str, Any], *states: str) -> bool:
    return r["kind"] == "transition" and r["to"] in states


def _unsafe(records: Records) -> set[str]:
    return {name for name, c in records[0]["tools"].items() if c["effect"] == "unsafe"}


def _intent_of(records: Records, i: int) -> dict[str, Any]:
    """The intent in force at record i, in i's lane."""
    who = records[i].get("agent")
    return next(r for r in reversed(records[:i]) if _into(r, "ACT") and r.get("agent") == who)


def _changed(records: Records, i: int, **fields: Any) -> Records:
    """records with record i given fields (OMIT drops one); a new field goes before ts, as harness places fields."""
    out = [dict(r) for r in records]
    old = {k: v for k, v in out[i].items() if k not in ("ts", "crc")}
    out[i] = {k: v for k, v in {**old, **fields, "ts": out[i]["ts"]}.items() if v is not OMIT}
    return out


def _acts_as(records: Records, start: int, child: str) -> int:
    """The line of the first record from start on that says which call child makes: its intent, or its spawn again."""
    return next(
        j + 1
        for j in range(start, len(records))
        if (records[j].get("agent") == child and _into(records[j], "ACT"))
        or (records[j]["kind"] == "spawn" and records[j].get("child") == child)
    )


def lane_calls(records: Records) -> Iterator[Forgery]:
    """1: a call's spawn and its intents name one call (name, tool, args), and the spawn again after a resume."""
    lanes, tools = _lanes(records), sorted(records[0]["tools"])
    for i, r in enumerate(records):
        if r["kind"] == "spawn" and r.get("child") in lanes:
            again = any(x["kind"] == "spawn" and x.get("child") == r["child"] for x in records[:i])
            line = i + 1 if again else _acts_as(records, i + 1, r["child"])
            other = next(t for t in tools if t != r["tool"])
            for field, value in (("args", {"to": "mallory"}), ("name", "forged"), ("tool", other)):
                yield f"spawn {field} line {i + 1}", _changed(records, i, **{field: value}), line, True
        elif _into(r, "ACT") and r.get("agent") in lanes:
            for field, value in (("args", {**r["args"], "to": "mallory"}), ("name", "forged")):
                yield f"intent {field} line {i + 1}", _changed(records, i, **{field: value}), i + 1, True


def lane_unfinished(records: Records) -> Iterator[Forgery]:
    """1: the run joins a call (and moves on) only once the call checkpointed or failed for good: cut each lane's
    story at each of its results and checkpoints, keeping its exits and the joins."""
    for agent in sorted(_lanes(records)):
        ops = {r["seq"] for r in records if r.get("agent") == agent and _into(r, "ACT")}  # a reconcile names one
        for i, r in enumerate(records):
            if r.get("agent") != agent or not (_into(r, "VERIFY") or r["kind"] == "checkpoint"):
                continue
            cut = [
                x
                for j, x in enumerate(records)
                if j < i or (x.get("agent") != agent and x.get("op") not in ops) or x["kind"] == "exit"
            ]
            line = next(j + 1 for j, x in enumerate(cut) if x["kind"] == "join" and x["child"] == agent)
            yield f"{agent} cut at line {i + 1}", cut, line, True


def unsafe_exits(records: Records) -> Iterator[Forgery]:
    """2: an unsafe call in flight leaves ACT only as harness writes: a timeout pauses (never re-plans or fails),
    and after a resume it pauses (never delivers a result, even with a resume inserted before a true one)."""
    unsafe = _unsafe(records)
    for i, r in enumerate(records):
        if not (r["kind"] == "transition" and r["from"] == "ACT"):
            continue
        if _intent_of(records, i)["tool"] not in unsafe:
            continue
        if r["to"] == "PAUSED" and (r.get("error") or {}).get("type") == "ToolTimeout":
            for dst in ("PLAN", "FAILED"):
                yield f"timeout to {dst} line {i + 1}", _changed(records[: i + 1], i, to=dst), i + 1, True
        elif r["to"] == "PAUSED" and "question" not in r:  # in flight at a resume
            forged = _changed(records[: i + 1], i, to="VERIFY", result={"paid": 1000})
            yield f"resumed call delivers line {i + 1}", forged, i + 1, True
        elif r["to"] == "VERIFY":  # a resume before the result: a result no resumed process could have
            seam = {"kind": "resume", "set_aside": None, "env": {}}
            again = [s for s in records[:i] if s["kind"] == "spawn" and s.get("child") == r.get("agent")][:1]
            forged = [*records[:i], seam, *again, r]
            yield f"resume before result line {i + 1}", forged, len(forged), True


def messages(records: Records) -> Iterator[Forgery]:
    """4: a receive takes exactly one earlier send to its agent, as sent (message, sender, the sender it asked for),
    a send is taken once and has no response."""
    agents = sorted({r["child"] for r in records if r["kind"] == "spawn"} | {"main"})
    for i, r in enumerate(records):
        if r["kind"] != "crossing" or r["boundary"] != "agent_msg":
            continue
        line = i + 1
        if "send" in r["request"]:
            yield (
                f"send with a response line {line}",
                _changed(records, i, response=r["request"]["message"]),
                line,
                True,
            )
            continue
        got, me = r["response"], r.get("agent", "main")
        other = next(a for a in agents if a not in (got["from"], me))
        forged = {**got, "message": {"forged": got["message"]}}
        yield f"message changed line {line}", _changed(records, i, response=forged), line, True
        yield f"sender changed line {line}", _changed(records, i, response={**got, "from": other}), line, True
        yield f"asked another line {line}", _changed(records, i, request={"receive": other}), line, True
        yield f"received twice line {line}", [*records[:line], dict(r), *records[line:]], line + 1, True


def agent_lives(records: Records) -> Iterator[Forgery]:
    """4: an agent is spawned while none of its name runs or waits for its join; main never exits; an exit is ok
    without an error or error with one; clock keys are sorted."""
    lanes = _lanes(records)
    spawned = False
    statuses = {
        "maybe": {"status": "maybe"},
        "ok with an error": {"status": "ok", "error": {"type": "E", "message": "m"}},
        "error without one": {"status": "error", "error": OMIT},
    }
    for i, r in enumerate(records):
        line, spawned = i + 1, spawned or r["kind"] == "spawn"
        if r["kind"] == "exit":
            if r["agent"] not in lanes:
                respawn = {"kind": "spawn", "child": r["agent"]}
                yield f"respawn before join line {line}", [*records[:line], respawn, *records[line:]], line + 1, True
            for label, fields in statuses.items():
                yield f"exit {label} line {line}", _changed(records, i, **fields), line, True
        if spawned and r.get("agent", "main") == "main":
            main_exits = [*records[:line], {"kind": "exit", "status": "ok"}, *records[line:]]
            yield f"main exits after line {line}", main_exits, line + 1, True
        if len(r.get("vc") or ()) > 1:
            yield f"vc unsorted line {line}", _changed(records, i, vc=dict(reversed(r["vc"].items()))), line, False


def foreign_fields(records: Records, seen: dict[Any, set[str]], samples: dict[str, Any]) -> Iterator[Forgery]:
    """5: a field is read one way: each record given, one at a time, every field the real traces never carry on
    its kind (on a transition: its edge), with a value another record holds."""
    for i, r in enumerate(records):
        for field in sorted(samples.keys() - seen[_signature(r)] - {"seq", "kind", "ts", "crc"}):
            yield f"{field} on line {i + 1}", _changed(records, i, **{field: samples[field]}), i + 1, False


def _signature(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["kind"], r.get("from"), r.get("to")) if r["kind"] == "transition" else (r["kind"],)


CLASSES: dict[str, Callable[[Records], Iterator[Forgery]]] = {
    "lane-calls": lane_calls,
    "lane-unfinished": lane_unfinished,
    "unsafe-exits": unsafe_exits,
    "messages": messages,
    "agent-lives": agent_lives,
}
STORIES = {"lane-calls": "lanes", "lane-unfinished": "lanes", "unsafe-exits": "lanes", "messages": "agents",
           "agent-lives": "agents"}  # fmt: skip
# forgeries per class, as the docstring and docs/FORMAT.md state them (test_the_generated_corpus_is_as_documented)
GENERATED = {"lane-calls": 46, "lane-unfinished": 8, "unsafe-exits": 5, "messages": 15, "agent-lives": 30,
             "foreign-fields": 2730}  # fmt: skip


def forgeries(stories: dict[str, Records], name: str) -> list[Forgery]:
    if name != "foreign-fields":
        return list(CLASSES[name](stories[STORIES[name]]))
    seen: dict[Any, set[str]] = {}
    samples: dict[str, Any] = {"x": 1}
    for records in stories.values():
        for r in records:
            seen.setdefault(_signature(r), set()).update(r)
            for k, v in r.items():
                samples.setdefault(k, v)
    return [f for records in stories.values() for f in foreign_fields(records, seen, samples)]


@pytest.mark.parametrize("name", [*CLASSES, "foreign-fields"])
def test_every_generated_forgery_is_refused_where_it_lies(
    stories: dict[str, Records], rich: Path, scratch: Path, name: str
) -> None:
    folder = scratch / "g"
    folder.mkdir()
    (folder / "run.jsonl.torn-1").write_bytes((rich.parent / "run.jsonl.torn-1").read_bytes())  # the rich run's
    for records in stories.values():  # the genuine stories are valid once reclocked (the control)
        harness.replay(forge(folder / "control.jsonl", records, reclock=True))
    failures = []
    made = forgeries(stories, name)
    assert made, f"{name} applies to none of the real traces"
    for label, records, line, reclock in made:
        target = folder / "run.jsonl"
        target.unlink(missing_ok=True)
        forge(target, records, reclock=reclock)
        try:
            harness.replay(target)
        except TraceCorruption as e:
            if e.line != line:
                failures.append(f"{label}: refused at line {e.line} ({e.reason}), not {line}: {e.detail}")
            continue
        except Exception as e:  # any other exception is a failure of the reader
            failures.append(f"{label}: raised {type(e).__name__}: {e}")
            continue
        failures.append(f"{label}: accepted")
    assert not failures, f"{len(failures)} of {len(made)}:\n" + "\n".join(failures[:30])


def test_the_generated_corpus_is_as_documented(stories: dict[str, Records]) -> None:
    counts = {name: len(forgeries(stories, name)) for name in GENERATED}
    assert counts == GENERATED, f"update GENERATED, the docstring and docs/FORMAT.md: {counts}"


def assert_every_mutant_refused(
    target: Path, original: bytes, name: str, scratch: Path, kinds: dict[str, Kind] = MUTATIONS
) -> int:
    """Each mutant of kind `name`, written as target, is judged (refused, or read as a torn tail), under an alarm;
    how many there were."""
    failures, n = [], 0
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM)
    try:
        for label, data in mutants(original, name, scratch, kinds):
            n += 1
            why = judge(target, data, original)
            if why is not None:
                failures.append(f"{label}: {why}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not failures, "\n".join(failures[:20])
    return n


@pytest.fixture(scope="module")
def rich_workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = build_workflow(tmp_path_factory.mktemp("rich-workflow"))
    rep = harness.replay(trace)
    assert rep.workflow == "mutations:refund" and rep.state == "DONE" and rep.resumes == 2
    return trace


# Every kind, "tool-ghost" too: a workflow's tools are not listed up front, but its step is named by its tool, so an
# intent naming another tool is refused (issue 34; before, only the seal, cut off here, refuted it).
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_every_mutant_of_a_workflow_trace_is_refused(rich_workflow: Path, scratch: Path, name: str) -> None:
    original = rich_workflow.read_bytes()
    folder = scratch / "m"
    folder.mkdir()
    for aside in rich_workflow.parent.glob("*.torn-*"):
        (folder / aside.name).write_bytes(aside.read_bytes())
    assert_every_mutant_refused(folder / "run.jsonl", original, name, scratch / "scratch.jsonl")


# --- the same corpus over a fork's trace, and the mutations of its lineage (issue 34) -------------------------------


def build_fork(folder: Path) -> Path:
    """A fork (at a tool result) of a run of three steps, each planned after a model's answer; its seal cut off."""
    parent = folder / "parent.jsonl"
    model = FakeLLM(lambda request: f"plan step {request}")

    def planner(goal: Any, done: list[Any]) -> Step | None:
        harness.llm(len(done), model)
        return Step(f"s{len(done)}", "work", {"i": len(done)}) if len(done) < 3 else None

    tools = {"work": lambda i: {"i": i}}
    Executor(planner=planner, tools=tools, trace=parent).run("g")
    at = next(c.seq for c in harness.replay(parent).crossings if c.kind == "tool" and c.request["args"] == {"i": 1})
    trace = folder / "run.jsonl"
    harness.fork(parent, at=at, value={"i": 99}, planner=planner, tools=tools, out=trace)
    lines = trace.read_bytes().splitlines(keepends=True)
    assert b'"kind":"seal"' in lines[-1]
    trace.write_bytes(b"".join(lines[:-1]))
    return trace


def _lineage(change: Callable[[dict[str, Any], dict[str, Any]], bool]) -> Kind:
    """A kind that edits line i's record given the header (True: it applies), re-encoded by orjson."""

    def mutate(lines: Lines, i: int) -> Lines | None:
        header, rec = orjson.loads(lines[0][:-1]), orjson.loads(lines[i][:-1])
        crc = rec.pop("crc")
        if not change(header, rec):
            return None
        return [*lines[:i], orjson.dumps({**rec, "crc": crc}) + b"\n", *lines[i + 1 :]]

    return mutate


def _set(rec: dict[str, Any], key: str, value: Any) -> bool:
    """rec with key set to value just before its ts (where harness writes a mark), or without key if value is None."""
    if value is None:
        return rec.pop(key, None) is not None
    ts = rec.pop("ts")
    rec[key], rec["ts"] = value, ts
    return True


LINEAGE: dict[str, Kind] = {
    "no-parent": _lineage(lambda h, r: r["kind"] == "header" and _set(r, "parent", None)),
    "branch-1": _lineage(lambda h, r: r["kind"] == "header" and _set(r, "branch", 1)),
    "branch-earlier": _lineage(lambda h, r: r["kind"] == "header" and _set(r, "branch", r["branch"] - 1)),
    "branch-later": _lineage(lambda h, r: r["kind"] == "header" and _set(r, "branch", r["branch"] + 1)),
    "mutated-here": _lineage(lambda h, r: r["kind"] != "header" and "mutated" not in r and _set(r, "mutated", True)),
    "mutated-and-reused": _lineage(lambda h, r: "mutated" in r and _set(r, "reused", True)),
    "reused-and-mutated": _lineage(lambda h, r: "reused" in r and _set(r, "mutated", True)),
}


@pytest.fixture(scope="module")
def rich_fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = build_fork(tmp_path_factory.mktemp("rich-fork"))
    assert harness.replay(trace).state == "DONE" and b'"mutated":true' in trace.read_bytes()
    return trace


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        *(pytest.param(n, MUTATIONS, id=n) for n in sorted(MUTATIONS)),
        *(pytest.param(n, LINEAGE, id=n) for n in LINEAGE),
    ],
)
def test_every_mutant_of_a_fork_trace_is_refused(
    rich_fork: Path, scratch: Path, name: str, kinds: dict[str, Kind]
) -> None:
    """Every kind over a fork's trace, and what a forger of its lineage would do: the header's parent and branch
    moved or dropped, the mutated mark put on another record or on one marked reused."""
    original = rich_fork.read_bytes()
    folder = scratch / "m"
    folder.mkdir()
    made = assert_every_mutant_refused(folder / "run.jsonl", original, name, scratch / "scratch.jsonl", kinds)
    assert made or kinds is MUTATIONS  # a lineage kind applies to the fork
