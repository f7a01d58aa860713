"""Forged stories with valid checksums: replay() must refuse each one (issue 15).

The checksum chain refuses accidents; whoever rewrites a line can recompute
it (a buggy tool, a hand edit, a script). Every forgery here is built by one
helper, `forge()`, on `harness.testing.write_trace`, so each line's crc is
valid and only replay()'s other rules can catch it. Where a forged trace
would make a resume act (call a tool, with which key), the resume is tried
too: it must refuse before any tool runs, leaving the file as it was.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

import harness
from harness import Executor, HarnessError, Step, Tool, TraceCorruption
from harness.testing import ScriptedTool, fixed_plan, write_trace

OMIT = object()  # a field value that makes forge() leave the field out
RUN = "f" * 32
TOOLS = {
    "pay": {"effect": "unsafe", "version": None},
    "put": {"effect": "idempotent", "version": None},
    "work": {"effect": "at-least-once", "version": None},
}
HEADER = {"kind": "header", "schema": 2, "run_id": RUN, "goal": "g", "tools": TOOLS, "env": {}}


def forge(path: Path, records: Sequence[dict[str, Any] | bytes]) -> Path:
    """THE forgery helper: write records as a trace with a valid checksum chain, whatever they say.

    A dict gets `seq` (its line number) and `ts` unless it has them, and
    loses every field whose value is OMIT. A bytes item is a line's body
    (everything before `,"crc":"`), written as is: for what a dict cannot
    say (a key twice, spaces, an integer or a nesting orjson would not write).
    """
    out: list[dict[str, Any] | bytes] = []
    for seq, rec in enumerate(records, 1):
        if isinstance(rec, bytes):
            out.append(rec)
            continue
        full = {"seq": seq, **rec} if "seq" not in rec else dict(rec)
        full.setdefault("ts", 1.5)
        out.append({k: v for k, v in full.items() if v is not OMIT})
    write_trace(path, out)
    return path


def T(src: str, dst: str, step: int = 0, attempt: int = 1, **fields: Any) -> dict[str, Any]:
    at = {"step": step} if attempt == 1 else {"step": step, "attempt": attempt}  # the first attempt omits it
    return {"kind": "transition", "from": src, "to": dst, **at, **fields}


def intent(
    tool: str, args: dict[str, Any] | None = None, step: int = 0, attempt: int = 1, **more: Any
) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": f"s{step}", "tool": tool, "args": args if args is not None else {"i": step}}
    if tool == "put":
        fields["key"] = f"{RUN}-{step}-{attempt}"
    return T("PLAN", "ACT", step, attempt, **{**fields, **more})


START = [HEADER, T("INIT", "PLAN")]
ONE_STEP = [  # a valid run of one plain step
    *START,
    intent("work"),
    T("ACT", "VERIFY", result={"i": 0}),
    {"kind": "checkpoint", "step": 0},  # the moves VERIFY -> CHECKPOINT -> PLAN
    T("PLAN", "DONE", 1),
]  # without its seal: a forged run ends at its terminal record
SEAM = {"kind": "resume", "set_aside": None, "env": {}}
PAUSED = [*START, intent("pay"), SEAM, T("ACT", "PAUSED")]  # line 3 is the uncertain intent
YES = {"kind": "reconcile", "op": 3, "happened": True, "result": 2, "evidence": "ledger row 7"}
NO = {"kind": "reconcile", "op": 3, "happened": False, "result": None, "evidence": "no ledger row"}


def refused(path: Path, line: int, reason: str) -> TraceCorruption:
    with pytest.raises(TraceCorruption) as e:
        harness.replay(path)
    assert (e.value.line, e.value.reason) == (line, reason), e.value
    assert isinstance(e.value, HarnessError) and str(path) in str(e.value)
    return e.value


def with_(records: list[dict[str, Any]], at: int, **fields: Any) -> list[dict[str, Any]]:
    """records with line `at` (1-based) changed."""
    out = [dict(r) for r in records]
    out[at - 1].update(fields)
    return out


def test_the_bases_are_valid(tmp_path: Path) -> None:
    assert harness.replay(forge(tmp_path / "a.jsonl", ONE_STEP)).state == "DONE"
    assert harness.replay(forge(tmp_path / "b.jsonl", PAUSED)).pending is not None
    ok = [*PAUSED, YES, T("PAUSED", "VERIFY", result=2), {"kind": "checkpoint", "step": 0}]
    assert [c.result for c in harness.replay(forge(tmp_path / "c.jsonl", ok)).checkpoints] == [2]
    again = [*PAUSED, NO, T("PAUSED", "ACT", name="s0", tool="pay", args={"i": 0})]
    assert harness.replay(forge(tmp_path / "d.jsonl", again)).state == "ACT"
    keyed = [*START, intent("put"), T("ACT", "VERIFY", result=1)]
    assert harness.replay(forge(tmp_path / "e.jsonl", keyed)).state == "VERIFY"


@pytest.mark.parametrize(
    "forged",
    [
        [*START, T("PLAN", "ACT", name="s0", tool="work", args={}, result=1)],  # on an intent
        [*START, intent("work"), T("ACT", "PLAN", error={"type": "E", "message": "m"}, result=1)],  # a failure
        [*ONE_STEP[:-1], T("PLAN", "DONE", step=1, result=1)],  # the end
    ],
)
def test_a_result_on_a_transition_that_delivers_none_is_refused(tmp_path: Path, forged: list[dict[str, Any]]) -> None:
    """A checkpoint vouches for the last result delivered into VERIFY: no other transition may carry one."""
    refused(forge(tmp_path / "r.jsonl", forged), len(forged), "malformed")


def test_a_result_forged_onto_the_answer_that_leaves_a_verifiers_pause_is_refused(tmp_path: Path) -> None:
    """PAUSED -> VERIFY after a question carries no result: the checkpoint vouches for the one before the pause."""
    trace = tmp_path / "t.jsonl"

    def plan(goal: Any, progress: Any) -> Step | None:
        return None if progress else Step("s0", "work", {})

    def verify(step: Step, result: Any) -> bool:
        return bool(harness.interrupt("ok?") == "yes")

    ex = Executor(planner=plan, tools={"work": lambda: {"v": "real"}}, verifier=verify, trace=trace, resume="auto")
    assert ex.run("g").state == "PAUSED" and ex.run("g", answer="yes").state == "DONE"
    records = [orjson.loads(line) for line in trace.read_bytes().splitlines()][:-1]  # the seal left out
    back = next(i for i, r in enumerate(records) if r.get("from") == "PAUSED" and r.get("to") == "VERIFY")
    assert "result" not in records[back]
    records[back] = {k: v for k, v in records[back].items() if k not in ("ts", "crc")} | {"result": {"v": "forged"}}
    write_trace(trace, [{**r, "ts": r.get("ts", 0.0)} for r in records])
    refused(trace, back + 1, "malformed")


# --- crashes and hangs: what the writer would refuse, the reader refuses -----------------------


def body(record: dict[str, Any], field: str, raw: bytes) -> bytes:
    """The line body of record with field's value spelled as raw JSON bytes (which orjson might not write)."""
    marker = "\x00marker\x00"
    text = orjson.dumps({**record, field: marker, "ts": 1.5})[:-1]
    return text.replace(orjson.dumps(marker), raw)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[" * 254 + b"]" * 254, "too-deep"),  # orjson reads it, but writes at most 254 levels, the record included
        (b"[" * 600 + b"]" * 600, "too-deep"),
        (b"[" * 1100 + b"]" * 1100, "too-deep"),  # beyond orjson's reading depth too (RecursionError before)
        (b"18446744073709551616", "non-canonical"),  # 2**64 read back as a float
        (b"-9223372036854775809", "non-canonical"),
        (b"1E2", "non-canonical"),  # orjson writes 100.0
        (b"-0", "non-canonical"),
        (b'"\\u0041"', "non-canonical"),  # "A", escaped
        (b'{"a":1,"a":2}', "non-canonical"),  # a key twice: two parsers, two stories
        (b'{"a": 1}', "non-canonical"),
    ],
)
def test_what_the_writer_never_writes_is_refused(tmp_path: Path, raw: bytes, reason: str) -> None:
    records: list[dict[str, Any] | bytes] = [*START, intent("work")]
    records.append(body({"seq": 4, **T("ACT", "VERIFY")}, "result", raw))
    trace = forge(tmp_path / "deep.jsonl", records)
    e = refused(trace, 4, reason)
    assert e.seq == 4
    cli = subprocess.run([sys.executable, "-m", "harness.cli", "replay", str(trace)], capture_output=True, timeout=60)
    assert cli.returncode == 1 and b"Traceback" not in cli.stderr and f":4: {reason}".encode() in cli.stderr


def test_a_key_twice_at_the_top_level_is_refused(tmp_path: Path) -> None:
    line = orjson.dumps({"seq": 3, **intent("work"), "ts": 1.5})[:-1]
    forged = line.replace(b'"tool":"work"', b'"tool":"pay","tool":"work"')  # orjson keeps the last one
    e = refused(forge(tmp_path / "dup.jsonl", [*START, forged]), 3, "non-canonical")
    assert "'tool' appears twice" in e.detail


@pytest.mark.parametrize("depth", [300, 1000])
def test_the_writer_explains_a_too_deep_value_without_recursing(tmp_path: Path, depth: int) -> None:
    value: Any = 0
    for _ in range(depth):
        value = {"a": value}
    with pytest.raises(harness.NotSerializable, match="nested more than 254 levels") as e:
        Executor(planner=fixed_plan([Step("s", "work", {"v": value})]), tools={"work": dict},
                 trace=tmp_path / "w.jsonl").run("g")  # fmt: skip
    assert e.value.field == "args"
    assert harness.replay(tmp_path / "w.jsonl").state == "PLAN"  # nothing of the intent was written


def test_a_value_as_deep_as_a_line_can_hold_round_trips(tmp_path: Path) -> None:
    value: Any = 0
    for _ in range(253):  # the record is level 1
        value = [value]
    out = Executor(planner=fixed_plan([Step("s", "work")]), tools={"work": lambda: value},
                   trace=tmp_path / "ok.jsonl").run("g")  # fmt: skip
    assert out.state == "DONE"
    assert harness.replay(tmp_path / "ok.jsonl").checkpoints[0].result == value


# --- validation gaps: required fields and exact types --------------------------------------------

CROSSING = {"kind": "crossing", "boundary": "llm", "request": "q", "hash": "0" * 16, "response": "a"}


@pytest.mark.parametrize(
    ("records", "line", "reason"),
    [
        ([*START, with_([CROSSING], 1, boundary=OMIT)[0]], 3, "malformed"),
        ([*START, with_([CROSSING], 1, request=OMIT)[0]], 3, "malformed"),
        ([*START, with_([CROSSING], 1, boundary=7)[0]], 3, "malformed"),
        ([*START, with_([CROSSING], 1, hash=OMIT)[0]], 3, "malformed"),
        ([*START, with_([CROSSING], 1, response=OMIT)[0]], 3, "malformed"),  # neither response nor error
        ([*START, with_([CROSSING], 1, error={"type": "E", "message": "m"})[0]], 3, "malformed"),  # both
        ([*START, with_([CROSSING], 1, response=OMIT, error="boom")[0]], 3, "malformed"),
        ([*START, intent("work"), T("ACT", "PLAN")], 4, "malformed"),  # a failed attempt without its error
        ([*START, intent("work"), T("ACT", "FAILED", error={"type": "E"})], 4, "malformed"),
        ([*ONE_STEP[:4], T("VERIFY", "PLAN", error="rejected")], 5, "malformed"),
        ([*ONE_STEP[:4], T("VERIFY", "FAILED")], 5, "malformed"),
        (with_(ONE_STEP, 3, ts=OMIT), 3, "malformed"),
        (with_(ONE_STEP, 1, ts=OMIT), 1, "malformed"),
        (with_(ONE_STEP, 2, ts=2), 2, "malformed"),  # an int, where harness writes a float
        (with_(ONE_STEP, 1, tools=OMIT), 1, "malformed"),
        (with_(ONE_STEP, 1, tools=["work"]), 1, "malformed"),
        (with_(ONE_STEP, 1, tools={"work": {"effect": "maybe", "version": None}}), 1, "malformed"),
        (with_(ONE_STEP, 1, run_id=7), 1, "malformed"),
        (with_(ONE_STEP, 1, env=[]), 1, "malformed"),
        (with_(ONE_STEP, 1, schema="1"), 1, "schema"),
        (with_(ONE_STEP, 1, schema=1.0), 1, "schema"),
        (with_(ONE_STEP, 1, schema=True), 1, "schema"),
        (with_(ONE_STEP, 5, step=True), 5, "unvouched-checkpoint"),
        (with_(ONE_STEP, 5, step=0.0), 5, "unvouched-checkpoint"),
        ([*PAUSED, {**YES, "op": 3.0}], 6, "bad-reconcile"),
        ([*PAUSED, {**YES, "happened": 1}], 6, "bad-reconcile"),
        ([*PAUSED, {**NO, "result": 2}], 6, "bad-reconcile"),
        ([*PAUSED, {**YES, "evidence": None}], 6, "malformed"),
        ([*START, {"kind": "resume", "set_aside": None, "env": "here"}], 3, "bad-resume"),
    ],
)
def test_required_fields_and_exact_types(tmp_path: Path, records: list[dict[str, Any]], line: int, reason: str) -> None:
    refused(forge(tmp_path / "forged.jsonl", records), line, reason)


@pytest.mark.parametrize("forged", [2.0, True, "2", [2]])
def test_paused_to_verify_must_carry_the_reconciled_result_exactly(tmp_path: Path, forged: Any) -> None:
    records = [*PAUSED, YES, T("PAUSED", "VERIFY", result=forged)]  # reconciled: 2
    refused(forge(tmp_path / "pv.jsonl", records), 7, "bad-reconcile")


# --- forged intents a resume would act on ---------------------------------------------------------


def contracts_executor(path: Path, calls: dict[str, ScriptedTool]) -> Executor:
    tools = {
        "pay": Tool(calls["pay"], idempotent=False),
        "put": Tool(calls["put"], idempotent=True),
        "work": calls["work"],
    }
    return Executor(planner=fixed_plan([]), tools=tools, trace=path, resume=True)


@pytest.mark.parametrize(
    ("records", "line", "reason", "what"),
    [
        ([*START, intent("ghost")], 3, "bad-intent", "naming tool 'ghost', which the header does not list"),
        ([*START, intent("put", key=OMIT)], 3, "bad-intent", "with no key"),
        ([*START, intent("put", key=f"{RUN}-9-1")], 3, "bad-intent", "its idempotency key is"),
        ([*START, intent("put", key=7)], 3, "bad-intent", "its idempotency key is"),
        ([*START, intent("work", key=f"{RUN}-0-1")], 3, "bad-intent", "never given one"),
        ([*PAUSED, NO, T("PAUSED", "ACT", name="s0", tool="work", args={"i": 0})], 7, "bad-intent", "repeat"),
        ([*PAUSED, NO, T("PAUSED", "ACT", name="s0", tool="pay", args={"i": 1})], 7, "bad-intent", "repeat"),
        ([*PAUSED, NO, T("PAUSED", "ACT", name="s0", tool="pay", args={"i": 0.0})], 7, "bad-intent", "repeat"),
        ([*PAUSED, NO, T("PAUSED", "ACT", name="x", tool="pay", args={"i": 0})], 7, "bad-intent", "repeat"),
        ([*START, intent("work"), SEAM, T("ACT", "PAUSED")], 5, "bad-transition", "an at-least-once tool"),
        ([*START, intent("put"), SEAM, T("ACT", "PAUSED")], 5, "bad-transition", "an idempotent tool"),
        ([*START, intent("pay"), T("ACT", "PAUSED")], 4, "bad-transition", "not right after a resume record"),
    ],
)
def test_forged_intents_are_refused_and_resume_acts_on_none(
    tmp_path: Path, records: list[dict[str, Any]], line: int, reason: str, what: str
) -> None:
    trace = forge(tmp_path / "run.jsonl", records)
    e = refused(trace, line, reason)
    assert what in e.detail
    before = trace.read_bytes()
    calls = {name: ScriptedTool() for name in TOOLS}
    with pytest.raises(TraceCorruption):  # never a KeyError, never a call
        contracts_executor(trace, calls).run("g")
    assert [len(t.calls) for t in calls.values()] == [0, 0, 0]
    assert trace.read_bytes() == before


def test_a_genuine_pause_still_resumes_as_reconciled(tmp_path: Path) -> None:
    """The control for the test above: the same executor acts on the true story."""
    trace = forge(tmp_path / "run.jsonl", [*PAUSED, NO])
    calls = {name: ScriptedTool() for name in TOOLS}
    out = contracts_executor(trace, calls).run("g")
    assert out.state == "DONE" and calls["pay"].calls == [{"i": 0}]


# --- set-aside names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["run.jsonl.torn-2", "/etc/passwd", "/tmp/run.jsonl.torn-1", "sub/run.jsonl.torn-1", "../run.jsonl.torn-1",
     "..", "", "notes.txt", 7, "run.jsonl.torn-0"],
)  # fmt: skip
def test_a_resume_must_name_an_existing_sibling(tmp_path: Path, name: Any) -> None:
    (tmp_path / "run.jsonl.torn-1").write_bytes(b'{"seq":3,"ki')
    (tmp_path / "notes.txt").write_text("not a torn tail")
    trace = forge(tmp_path / "run.jsonl", [*START, {**SEAM, "set_aside": name}])
    refused(trace, 3, "bad-resume")
    forge(tmp_path / "run.jsonl", [*START, {**SEAM, "set_aside": "run.jsonl.torn-1"}])
    assert harness.replay(trace).resumes == 1  # the control


def test_a_reconcile_must_name_an_existing_sibling(tmp_path: Path) -> None:
    trace = forge(tmp_path / "run.jsonl", [*PAUSED, {**YES, "set_aside": "run.jsonl.torn-1"}])
    refused(trace, 6, "bad-reconcile")
    (tmp_path / "run.jsonl.torn-1").write_bytes(b"{")
    assert harness.replay(trace).reconcile is not None


def test_a_rerun_repeats_its_recordings_seam_without_the_file(tmp_path: Path) -> None:
    """A rerun or fork trace (header `parent`) copies the recording's set_aside; the file is beside the recording."""
    trace = forge(
        tmp_path / "child.jsonl", [{**HEADER, "parent": "p" * 32}, START[1], SEAM | {"set_aside": "x.jsonl.torn-1"}]
    )
    assert harness.replay(trace).resumes == 1
    forge(trace, [{**HEADER, "parent": "p" * 32}, START[1], SEAM | {"set_aside": "/etc/x.torn-1"}])
    refused(trace, 3, "bad-resume")


# --- line endings and bytes after the end ---------------------------------------------------------


def test_crlf_line_endings_are_named_with_the_git_fix(tmp_path: Path) -> None:
    trace = forge(tmp_path / "run.jsonl", ONE_STEP)
    trace.write_bytes(trace.read_bytes().replace(b"\n", b"\r\n"))
    e = refused(trace, 1, "crlf")
    assert "core.autocrlf" in e.detail and "*.jsonl -text" in e.detail and ".gitattributes" in e.detail


@pytest.mark.parametrize("tail", [b'{"seq":9,"kind":"tr', b"x", b" "])
def test_bytes_after_the_terminal_record_are_corruption_and_resume_keeps_nothing(tmp_path: Path, tail: bytes) -> None:
    trace = forge(tmp_path / "run.jsonl", ONE_STEP)
    trace.write_bytes(trace.read_bytes() + tail)
    before = trace.read_bytes()
    refused(trace, 7, "after-terminal")
    calls = ScriptedTool()
    with pytest.raises(TraceCorruption, match="after-terminal"):
        Executor(planner=fixed_plan([]), tools={"work": calls}, trace=trace, resume=True).run("g")
    assert trace.read_bytes() == before and not calls.calls
    assert not list(tmp_path.glob("*.torn-*"))


def test_a_torn_tail_before_the_end_is_still_a_torn_tail(tmp_path: Path) -> None:
    trace = forge(tmp_path / "run.jsonl", ONE_STEP[:-1])
    trace.write_bytes(trace.read_bytes() + b'{"seq":7,"kind":"tr')
    rep = harness.replay(trace)
    assert rep.torn_tail and rep.state == "PLAN"


SPAWNED = [*START, {"kind": "spawn", "child": "w", "vc": {"main": 3}}]  # main spawns agent w at line 3


@pytest.mark.parametrize(
    ("records", "line"),
    [
        ([*SPAWNED, T("PLAN", "DONE", vc={"main": 4})], 4),  # w never exited
        ([*SPAWNED, {"kind": "exit", "agent": "w", "status": "ok", "vc": {"main": 3, "w": 1}},
          T("PLAN", "FAILED", error={"type": "X", "message": "m"}, vc={"main": 4})], 5),  # exited, never joined
        ([HEADER, {"kind": "spawn", "child": "w", "vc": {"main": 2}},
          {"kind": "end", "status": "success", "vc": {"main": 3}}], 3),  # a Recorder's end, w still running
    ],
)  # fmt: skip
def test_a_run_that_ends_before_every_agent_exited_and_was_joined_is_refused(
    tmp_path: Path, records: list[dict[str, Any]], line: int
) -> None:
    """The writer joins every agent before the run's end (a cancelled aspawn task once skipped its exit)."""
    e = refused(forge(tmp_path / "forged.jsonl", records), line, "bad-transition")
    assert "had not exited and been joined" in str(e) and "'w'" in str(e)
    exit_, join = (
        {"kind": "exit", "agent": "w", "status": "ok", "vc": {"main": 3, "w": 1}},
        {"kind": "join", "child": "w"},
    )
    joined = [*SPAWNED, exit_, {**join, "vc": {"main": 4, "w": 1}}, T("PLAN", "DONE", vc={"main": 5, "w": 1})]
    assert harness.replay(forge(tmp_path / "joined.jsonl", joined)).state == "DONE"
