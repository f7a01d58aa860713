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
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_forgeries import forge

import harness
from harness import Executor, Step, Tool, TraceCorruption
from harness.testing import FakeLLM, counter, flaky, power_cut
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


def mutants(original: bytes, name: str, scratch: Path) -> Iterator[tuple[str, bytes]]:
    """(label, bytes) of each counted mutant of one kind: raw and recomputed, for every line it applies to."""
    lines = original.splitlines(keepends=True)
    seen = {original}
    prefixes = {b"".join(lines[:n]) for n in range(len(lines))}
    for i in range(len(lines)):
        changed = MUTATIONS[name](list(lines), i)
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
    if rep.torn_tail and not data.endswith(b"\n") and original.startswith(data[: rep.end]):
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
    target, scratch = folder / "run.jsonl", scratch / "scratch.jsonl"
    failures = []
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM)
    try:
        for label, data in mutants(original, name, scratch):
            why = judge(target, data, original)
            if why is not None:
                failures.append(f"{label}: {why}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not failures, "\n".join(failures[:20])


def test_the_corpus_is_as_documented(rich: Path, scratch: Path) -> None:
    original = rich.read_bytes()
    labels = [label for name in MUTATIONS for label, _ in mutants(original, name, scratch / "s.jsonl")]
    assert len(MUTATIONS) == KINDS >= 60
    counts = (sum(label.endswith(" raw") for label in labels), sum(label.endswith(" recomputed") for label in labels))
    assert counts == (RAW, RECOMPUTED), f"update the docstring, KINDS/RAW/RECOMPUTED and docs/FORMAT.md: {counts}"
    assert all(any(label.startswith(f"{name} ") for label in labels) for name in MUTATIONS)  # every kind applies
