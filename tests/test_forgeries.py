"""Forged stories with valid checksums: replay() must refuse each one (issue 15).

The checksum chain refuses accidents; whoever rewrites a line can recompute
it (a buggy tool, a hand edit, a script). Every forgery here is built by one
helper, `forge()`, on `harness.testing.write_trace`, so each line's crc is
valid and only replay()'s other rules can catch it. Where a forged trace
would make a resume act (call a tool, with which key), the resume is tried
too: it must refuse before any tool runs, leaving the file as it was.
"""

from __future__ import annotations

import hashlib
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


def forge(path: Path, records: Sequence[dict[str, Any] | bytes], *, reclock: bool = False) -> Path:
    """THE forgery helper: write records as a trace with a valid checksum chain, whatever they say.

    A dict gets `seq` (its line number) and `ts` unless it has them, and
    loses every field whose value is OMIT. A bytes item is a line's body
    (everything before `,"crc":"`), written as is: for what a dict cannot
    say (a key twice, spaces, an integer or a nesting orjson would not write).
    With `reclock`, every seq is its line number and every vector clock the
    one the rules give (receives' `sent` following their sends): a forger
    who moved, added or dropped records of a run with agents recomputes
    them too, so that only the rules behind the clocks can object.
    """
    out: list[dict[str, Any] | bytes] = []
    renumbered: dict[Any, int] = {}  # with reclock: a record's seq as given -> its line (an op follows it)
    for seq, rec in enumerate(records, 1):
        if isinstance(rec, bytes):
            out.append(rec)
            continue
        full = {"seq": seq, **rec} if "seq" not in rec or reclock else dict(rec)
        if reclock:
            renumbered.setdefault(full["seq"], seq)
            full["seq"] = seq
        full.setdefault("ts", 1.5)
        out.append({k: v for k, v in full.items() if v is not OMIT})
    if reclock:
        for r in out:
            if isinstance(r, dict) and r.get("kind") in ("reconcile", "answer") and "op" in r:
                r["op"] = renumbered.get(r["op"], r["op"])
    write_trace(path, _reclocked(out) if reclock else out)
    return path


def _reclocked(records: list[dict[str, Any] | bytes]) -> list[dict[str, Any] | bytes]:
    """records with every clock recomputed by the rules of docs/FORMAT.md (records are copied, not changed)."""
    last: dict[str, dict[str, int]] = {}
    spawns: dict[str, dict[str, int]] = {}  # a child's spawn clock, until its first record
    exits: dict[str, dict[str, int]] = {}  # an agent's exit clock, until joined
    sends: dict[tuple[tuple[str, int], ...], dict[str, int]] = {}  # a send's clock as it was -> as it is now
    out: list[dict[str, Any] | bytes] = []
    spawned = False
    for n, rec in enumerate(records, 1):
        if isinstance(rec, bytes):
            out.append(rec)
            continue
        r = dict(rec)
        spawned = spawned or r["kind"] == "spawn"
        was = r.pop("vc", None)
        if not spawned or r["kind"] == "seal":  # no clock before the first spawn, nor on the seal
            out.append(r)
            continue
        agent = r.get("agent", "main")
        vc = dict(last.get(agent, {"main": n - 1} if agent == "main" else {}))
        merge = [spawns.pop(agent, {})]
        if r["kind"] == "join":
            merge.append(exits.pop(r.get("child"), {}))
        request, response = r.get("request"), r.get("response")
        if r.get("boundary") == "agent_msg" and isinstance(response, dict) and response.get("sent") is not None:
            sent = response["sent"]
            if isinstance(sent, tuple):  # SENT(line): the clock of the send at that line
                sent = out[sent[1] - 1]["vc"]  # type: ignore[index]
            sent = sends.get(tuple(sorted(sent.items())), sent)
            r["response"] = {**response, "sent": sent}
            merge.append(sent)
        for other in merge:
            vc = {k: max(vc.get(k, 0), other.get(k, 0)) for k in {*vc, *other}}
        vc[agent] = vc.get(agent, 0) + 1
        ts = r.pop("ts")
        r["vc"] = last[agent] = dict(sorted(vc.items()))
        r["ts"] = ts  # the clock goes just before ts, as harness writes it
        if r["kind"] == "spawn":
            spawns[r["child"]] = r["vc"]
        elif r["kind"] == "exit":
            exits[agent] = r["vc"]
        elif r["kind"] == "resume":
            spawns.clear()
            exits.clear()
        if isinstance(request, dict) and "send" in request and isinstance(was, dict):
            sends[tuple(sorted(was.items()))] = r["vc"]
        out.append(r)
    return out


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


def test_a_call_in_flight_pauses_with_a_reason_only_right_after_a_resume(tmp_path: Path) -> None:
    """ACT -> PAUSED for a tool a resume would call again (idempotent, at-least-once) only with the reason the
    resume found not to (harness.mcp: the tool changed), and only as the resume's first move."""
    why = "MCP tool 'put' of server 'mcp', whose call was in flight at the crash, is no longer listed by the server"
    for i, tool in enumerate(("put", "work", "pay")):
        rep = harness.replay(
            forge(tmp_path / f"ok{i}.jsonl", [*START, intent(tool), SEAM, T("ACT", "PAUSED", reason=why)])
        )
        assert rep.state == "PAUSED" and rep.pending is not None and rep.pending["tool"] == tool
    refused(forge(tmp_path / "a.jsonl", [*START, intent("put"), SEAM, T("ACT", "PAUSED")]), 5, "bad-transition")
    refused(forge(tmp_path / "b.jsonl", [*START, intent("put"), T("ACT", "PAUSED", reason=why)]), 4, "bad-transition")
    for bad in ("", 3, None):
        forged = [*START, intent("put"), SEAM, T("ACT", "PAUSED", reason=bad)]
        refused(forge(tmp_path / "c.jsonl", forged), 5, "malformed")
    timeout = {"type": "ToolTimeout", "message": "slow", "timeout": 1.0}
    forged = [*START, intent("pay"), T("ACT", "PAUSED", error=timeout, reason=why)]
    refused(forge(tmp_path / "d.jsonl", forged), 4, "malformed")


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
        ([*START, intent("pay"), T("ACT", "PAUSED")], 4, "bad-transition", "no resume record since its intent"),
        ([*START, intent("pay"), CROSSING, T("ACT", "PAUSED")], 5, "bad-transition", "no resume record since its"),
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
    assert harness.replay(trace).tail.reconcile is not None


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


# --- schema 2's records: lanes, unsafe calls, agents, messages, two readings (issue 25) -----------
# Records of agents are forged with forge(..., reclock=True): every seq and clock is recomputed, so only the
# rules behind the clocks can refuse them.


def at(record: dict[str, Any], agent: str) -> dict[str, Any]:
    """record as agent wrote it."""
    return {**record, "agent": agent}


def SENT(line: int) -> tuple[str, int]:
    """A receive's `sent`: the clock of the send at that line (forge(reclock=True) fills it in)."""
    return ("@", line)


def spawn(child: str, **call: Any) -> dict[str, Any]:
    return {"kind": "spawn", "child": child, **call}


def call(step: int, tool: str, args: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """A spawn of the call of a parallel step."""
    return spawn(f"step-{step}", step=step, name=name or f"s{step}", tool=tool, args=args)


def exit_(agent: str, status: str = "ok", **more: Any) -> dict[str, Any]:
    return {"kind": "exit", "agent": agent, "status": status, **more}


def join(child: str) -> dict[str, Any]:
    return {"kind": "join", "child": child}


def lane(step: int, record: dict[str, Any]) -> dict[str, Any]:
    return at(record, f"step-{step}")


BOB, MALLORY = {"to": "bob", "amount": 2}, {"to": "mallory", "amount": 1000}
GROUP = [*START, call(0, "put", BOB), call(1, "work", {"i": 1})]  # a parallel step of two calls: lines 3, 4
LANE0 = [lane(0, intent("put", BOB, name="s0")), lane(0, T("ACT", "VERIFY", result={"ok": 1})),
         lane(0, {"kind": "checkpoint", "step": 0}), exit_("step-0")]  # fmt: skip
LANE1 = [lane(1, intent("work", {"i": 1}, step=1, name="s1")), lane(1, T("ACT", "VERIFY", 1, result=1)),
         lane(1, {"kind": "checkpoint", "step": 1}), exit_("step-1")]  # fmt: skip
PARALLEL = [*GROUP, *LANE0, *LANE1, join("step-0"), join("step-1"), T("PLAN", "DONE", 2)]


def refused_and_not_resumed(path: Path, records: list[dict[str, Any]], line: int, reason: str) -> None:
    """The forged records (reclocked) are refused at line, and a resume of them refuses too."""
    trace = forge(path, records, reclock=True)
    refused(trace, line, reason)
    resume_refuses(trace, reason)


def resume_refuses(trace: Path, reason: str) -> None:
    """A resume of the forged trace raises TraceCorruption before any tool runs, and writes nothing."""
    before = trace.read_bytes()
    calls = {name: ScriptedTool() for name in TOOLS}
    with pytest.raises(TraceCorruption) as e:
        contracts_executor(trace, calls).run("g")
    assert e.value.reason == reason
    assert [len(t.calls) for t in calls.values()] == [0, 0, 0] and trace.read_bytes() == before


def test_the_bases_of_agents_are_valid(tmp_path: Path) -> None:
    assert harness.replay(forge(tmp_path / "p.jsonl", PARALLEL, reclock=True)).state == "DONE"
    assert harness.replay(forge(tmp_path / "m.jsonl", MAIL, reclock=True)).state == "DONE"


@pytest.mark.parametrize(
    ("records", "line"),
    [
        ([*GROUP[:2], call(0, "put", MALLORY), *GROUP[3:], *LANE0[:1]], 5),  # the spawn forged: the intent says bob
        ([*GROUP, lane(0, intent("put", MALLORY, name="s0"))], 5),  # the intent forged
        ([*GROUP, lane(0, intent("put", BOB, name="refund"))], 5),  # its name
        ([*GROUP, lane(0, intent("pay", BOB, name="s0"))], 5),  # its tool
        ([*GROUP, lane(0, intent("put", {"to": "bob", "amount": 2.0}, name="s0"))], 5),  # 2.0 is not 2
        ([*GROUP, *LANE0[:1], SEAM, call(0, "put", MALLORY)], 7),  # spawned again after the resume, otherwise
    ],
)
def test_a_parallel_call_is_the_call_its_spawn_planned(
    tmp_path: Path, records: list[dict[str, Any]], line: int
) -> None:
    """Forge the spawn's args, and the resume called the tool with them under the intent's key (issue 25)."""
    refused_and_not_resumed(tmp_path / "run.jsonl", records, line, "bad-intent")


@pytest.mark.parametrize("kept", [0, 1, 2])  # the lane stopped in PLAN (spawned), ACT (intent), VERIFY (result)
def test_a_run_joins_a_call_only_once_it_checkpointed(tmp_path: Path, kept: int) -> None:
    records = [*GROUP, *LANE0[:kept], exit_("step-0"), *LANE1, join("step-0"), join("step-1"), T("PLAN", "DONE", 2)]
    trace = forge(tmp_path / "run.jsonl", records, reclock=True)
    e = refused(trace, len(GROUP) + kept + 1 + len(LANE1) + 1, "bad-transition")
    assert "without its checkpoint" in e.detail


def test_a_failed_call_is_joined_and_fails_the_run(tmp_path: Path) -> None:
    """The control: a call that failed for good is joined, and the run fails with its error."""
    error = {"type": "ToolError", "message": "no"}
    failed = [lane(1, intent("work", {"i": 1}, step=1, name="s1")), lane(1, T("ACT", "FAILED", 1, error=error)),
              exit_("step-1")]  # fmt: skip
    records = [*GROUP, *LANE0, *failed, join("step-0"), join("step-1"), T("PLAN", "FAILED", 1, error=error)]
    assert harness.replay(forge(tmp_path / "run.jsonl", records, reclock=True)).state == "FAILED"


TIMEOUT = {"type": "ToolTimeout", "message": "pay took more than 5 s", "timeout": 5.0}


@pytest.mark.parametrize(
    ("records", "line"),
    [
        ([*START, intent("pay"), T("ACT", "PLAN", error=TIMEOUT)], 4),  # harness writes ACT -> PAUSED
        ([*START, intent("pay"), T("ACT", "FAILED", error=TIMEOUT)], 4),
        ([*START, intent("pay"), SEAM, T("ACT", "VERIFY", result=2)], 5),  # a resumed process never calls it
        ([*START, intent("pay"), SEAM, T("ACT", "PLAN", error={"type": "E", "message": "m"})], 5),
        ([*START, intent("pay"), SEAM, T("ACT", "PAUSED", question="paid?")], 5),
        ([*START, intent("pay"), {"kind": "crash", "state": "ACT", "step": 0, "attempt": 1,
          "error": {"type": "E", "message": "m"}, "traceback": ""}, SEAM, SEAM, T("ACT", "VERIFY", result=2)], 7),
        ([*START, call(0, "pay", {"i": 0}), lane(0, intent("pay")), SEAM, call(0, "pay", {"i": 0}),
          lane(0, T("ACT", "VERIFY", result=2))], 7),  # a call of a parallel step: the same rule
    ],
)  # fmt: skip
def test_an_unsafe_call_leaves_act_only_as_harness_writes(
    tmp_path: Path, records: list[dict[str, Any]], line: int
) -> None:
    """ACT -> PLAN after a ToolTimeout made the resume pay again; a result after a resume was an invented one."""
    refused_and_not_resumed(tmp_path / "run.jsonl", records, line, "bad-transition")


def test_an_unsafe_call_paused_by_a_timeout_or_a_resume_is_valid(tmp_path: Path) -> None:
    """The controls: ACT -> PAUSED with the timeout's error, and ACT -> PAUSED after a resume (a sibling task's
    crossing in between: written while the resume listed an MCP server's tools again)."""
    timed_out = [*START, intent("pay"), T("ACT", "PAUSED", error=TIMEOUT)]
    assert harness.replay(forge(tmp_path / "a.jsonl", timed_out)).state == "PAUSED"
    for n, between in enumerate(([], [CROSSING])):
        resumed = [*START, intent("pay"), SEAM, *between, T("ACT", "PAUSED")]
        assert harness.replay(forge(tmp_path / f"r{n}.jsonl", resumed)).state == "PAUSED"
    retried = [*START, intent("put"), T("ACT", "PLAN", error=TIMEOUT), intent("put", attempt=2, key=f"{RUN}-0-1")]
    assert harness.replay(forge(tmp_path / "b.jsonl", retried)).state == "ACT"  # an idempotent call: its key again


WA, WB = "wa", "wb"


def msg(agent: str, **crossing: Any) -> dict[str, Any]:
    record = {"kind": "crossing", "boundary": "agent_msg", "hash": "0" * 16, **crossing}
    return record if agent == "main" else at(record, agent)


def send(agent: str, to: str, message: Any) -> dict[str, Any]:
    return msg(agent, request={"send": to, "message": message}, response=None)


def receive(agent: str, sender: str | None, frm: str, message: Any, sent: Any) -> dict[str, Any]:
    return msg(agent, request={"receive": sender}, response={"from": frm, "message": message, "sent": sent})


MAIL = [  # two agents send main a message each; main takes wb's first (by name), then the other
    *START, spawn(WA), spawn(WB),  # lines 3, 4
    send(WA, "main", {"n": 1}), send(WB, "main", {"n": 2}),  # 5, 6
    receive("main", WB, WB, {"n": 2}, SENT(6)), receive("main", None, WA, {"n": 1}, SENT(5)),  # 7, 8
    exit_(WA), exit_(WB), join(WA), join(WB), T("PLAN", "DONE"),  # 9 .. 13
]  # fmt: skip


@pytest.mark.parametrize(
    ("at_line", "forged", "what"),
    [
        (7, receive("main", WB, WB, {"n": 3}, SENT(6)), "no send"),  # the message is not the one sent
        (7, receive("main", WB, WB, {"n": 2.0}, SENT(6)), "no send"),  # by type and value
        (7, receive("main", WA, WB, {"n": 2}, SENT(6)), "answered by a message from"),  # asked wa, got wb's
        (8, receive("main", None, WB, {"n": 2}, SENT(6)), "received already"),  # wb's message taken twice
        (7, receive("main", None, WA, {"n": 2}, SENT(6)), "no send"),  # wb's send, said to be wa's
        (6, msg(WB, request={"send": "main", "message": {"n": 2}}, response={"n": 2}), "null"),  # a send's response
        (6, msg(WB, request={"send": "main", "message": {"n": 2}}, error={"type": "E", "message": "m"}), "null"),
        (6, msg(WB, request={"send": "main", "message": {"n": 2}, "to": "x"}, response=None), "send"),
        (7, msg("main", request={"receive": WB, "x": 1}, response={"from": WB, "message": {"n": 2},
                                                                    "sent": SENT(6)}), "receive"),
        (7, msg("main", request={"receive": WB}, response={"from": WB, "message": {"n": 2}, "sent": SENT(6),
                                                             "x": 1}), "response"),
    ],
)  # fmt: skip
def test_a_message_is_received_once_as_it_was_sent(
    tmp_path: Path, at_line: int, forged: dict[str, Any], what: str
) -> None:
    records = [*MAIL[: at_line - 1], forged, *MAIL[at_line:]]
    e = refused(forge(tmp_path / "run.jsonl", records, reclock=True), at_line, "bad-message")
    assert what in e.detail


def test_a_message_sent_before_the_first_spawn_is_received_after_it(tmp_path: Path) -> None:
    """Its send has no clock (the run had not spawned): `sent` is null, and the message must still match."""
    early = [*START, send("main", WA, "hello"), spawn(WA), receive(WA, "main", "main", "hello", None), exit_(WA),
             join(WA), T("PLAN", "DONE")]  # fmt: skip
    assert harness.replay(forge(tmp_path / "ok.jsonl", early, reclock=True)).state == "DONE"
    forged = [*early[:5], receive(WA, "main", "main", "bye", None), *early[6:]]
    refused(forge(tmp_path / "forged.jsonl", forged, reclock=True), 6, "bad-message")


@pytest.mark.parametrize(
    ("records", "line", "reason"),
    [
        ([*START, spawn(WA), exit_(WA), spawn(WA)], 5, "vector-clock"),  # exited, never joined, spawned again
        ([*START, spawn(WA), {"kind": "exit", "status": "ok"}], 4, "vector-clock"),  # main exits
        ([*START, spawn(WA), {"kind": "exit", "status": "ok"}, join("main")], 4, "vector-clock"),
        ([*START, spawn(WA), join("main")], 4, "vector-clock"),  # main joins itself
        ([*START, spawn(WA), exit_(WA, "maybe")], 4, "malformed"),
        ([*START, spawn(WA), exit_(WA, "ok", error={"type": "E", "message": "m"})], 4, "malformed"),
        ([*START, spawn(WA), exit_(WA, "error")], 4, "malformed"),  # an error exit says what
        ([*START, spawn(WA), exit_(WA, "error", error="boom")], 4, "malformed"),
        ([*START, spawn(WA, name="x")], 3, "malformed"),  # a call's fields on a plain spawn
    ],
)
def test_an_agents_life_is_spawn_exit_join(
    tmp_path: Path, records: list[dict[str, Any]], line: int, reason: str
) -> None:
    refused(forge(tmp_path / "run.jsonl", records, reclock=True), line, reason)


def test_a_name_is_spawned_again_once_joined_or_after_a_resume(tmp_path: Path) -> None:
    """The controls for the test above."""
    joined = [*START, spawn(WA), exit_(WA), join(WA), spawn(WA), exit_(WA), join(WA), T("PLAN", "DONE")]
    assert harness.replay(forge(tmp_path / "a.jsonl", joined, reclock=True)).state == "DONE"
    resumed = [*START, spawn(WA), exit_(WA), SEAM, spawn(WA)]  # the process died before the join
    assert harness.replay(forge(tmp_path / "b.jsonl", resumed, reclock=True)).state == "PLAN"


def test_clock_keys_are_sorted_as_harness_writes_them(tmp_path: Path) -> None:
    trace = forge(tmp_path / "run.jsonl", [*START, spawn(WA), exit_(WA)], reclock=True)
    records = harness.testing.read_records(trace)
    records[3]["vc"] = dict(reversed(records[3]["vc"].items()))  # {"wa": 1, "main": 3}: the same clock
    refused(forge(trace, records), 4, "vector-clock")


EMPTY = hashlib.sha256(b"").hexdigest()
CRASH = {"kind": "crash", "state": "PLAN", "step": 0, "attempt": 1, "error": {"type": "E", "message": "m"},
         "traceback": "..."}  # fmt: skip


# --- two readings: a field a kind does not carry ------------------------------------------------


@pytest.mark.parametrize(
    ("records", "line"),
    [
        (with_(ONE_STEP, 5, result={"i": False}), 5),  # a checkpoint with a result of its own (issue 25)
        (with_(ONE_STEP, 5, name="another"), 5),
        (with_(ONE_STEP, 4, args={"i": 0}), 4),  # an intent's field on a result
        (with_(ONE_STEP, 4, error={"type": "E", "message": "m"}), 4),  # a result and an error
        (with_(ONE_STEP, 3, question="?"), 3),
        (with_(ONE_STEP, 2, key=f"{RUN}-0-1"), 2),
        (with_(ONE_STEP, 6, child="w"), 6),
        (with_(ONE_STEP, 6, x=1), 6),  # a field no kind has
        (with_(ONE_STEP, 1, seal=True), 1),
        (with_(ONE_STEP, 1, state="DONE"), 1),  # a seal's field on the header
        ([*START, {**CROSSING, "result": 1}], 3),
        ([*START, {**CROSSING, "status": "ok"}], 3),
        ([*PAUSED, {**YES, "args": {}}], 6),
        ([*START, spawn(WA), at(SEAM, WA)], 4),  # main's own records: another agent never writes one
        ([*START, spawn(WA), at(CRASH, WA)], 4),
        ([*START, spawn(WA), at({"kind": "answer", "op": 3, "answer": 1}, WA)], 4),
        ([*START, {**SEAM, "step": 0}], 3),
        ([*START, {"kind": "artifact", "name": "a", "sha256": EMPTY, "size": 0, "mime": "text/plain"}], 3),
        ([*START, {"kind": "crossing", "boundary": "now", "request": None, "hash": "0" * 16, "response": 1.0,
                   "reused": True}], 3),  # a fork's mark in a trace that is no fork
        ([*START, intent("work"), T("ACT", "PLAN", error={"type": "E", "message": "m", "timeout": 5})], 4),
        ([*START, intent("work"), T("ACT", "PLAN", error={"type": "E", "message": "m", "result": 1})], 4),
    ],
)  # fmt: skip
def test_a_field_means_one_thing_on_one_kind(tmp_path: Path, records: list[dict[str, Any]], line: int) -> None:
    assert harness.storage.blobs.put(str(tmp_path / "blobs"), b"", sync_dir=False) == EMPTY  # the artifact's, there
    refused(forge(tmp_path / "run.jsonl", records, reclock=True), line, "malformed")


def test_show_never_prints_a_field_replay_refuses(tmp_path: Path) -> None:
    """`harness show` printed the checkpoint's own result while replay() reported the verified one."""
    trace = forge(tmp_path / "run.jsonl", with_(ONE_STEP, 5, result={"i": False}))
    out = subprocess.run([sys.executable, "-m", "harness.cli", "show", str(trace)], capture_output=True, timeout=60)
    assert out.returncode != 0 and b":5: malformed" in out.stderr and b"Traceback" not in out.stderr
    assert b"false" not in out.stdout.lower()


def test_a_fork_marks_what_it_reused_with_true(tmp_path: Path) -> None:
    fork = {**HEADER, "parent": "p" * 32, "branch": 3}
    base = [fork, {**START[1], "reused": True}, {**CROSSING, "mutated": True}]
    assert harness.replay(forge(tmp_path / "ok.jsonl", base)).state == "PLAN"
    refused(forge(tmp_path / "a.jsonl", with_(base, 2, reused=False)), 2, "malformed")
    refused(forge(tmp_path / "b.jsonl", with_(base, 3, mutated=1)), 3, "malformed")
    refused(forge(tmp_path / "c.jsonl", with_(base, 1, reused=True)), 1, "malformed")  # the header is its own


@pytest.mark.parametrize(
    "contract",
    [
        {"effect": "unsafe", "version": None, "retry_rejected": "no"},  # was read as true
        {"effect": "unsafe", "version": None, "retry_rejected": False},  # harness leaves it out
        {"effect": "idempotent", "version": None, "retry_rejected": True},
        {"effect": "unsafe", "version": None, "timeout": 3},
        {"effect": "unsafe"},
    ],
)
def test_a_tool_contract_is_read_one_way(tmp_path: Path, contract: dict[str, Any]) -> None:
    """`retry_rejected: "no"` made VERIFY -> PLAN legal after an unsafe result, and the resume paid again."""
    header = {**HEADER, "tools": {**TOOLS, "pay": contract}}
    rejected = [header, START[1], intent("pay"), T("ACT", "VERIFY", result=2),
                T("VERIFY", "PLAN", error={"type": "VerificationFailed", "message": "no"})]  # fmt: skip
    trace = forge(tmp_path / "run.jsonl", rejected)
    refused(trace, 1, "malformed")
    before = trace.read_bytes()
    calls = ScriptedTool()
    with pytest.raises(TraceCorruption):
        Executor(planner=fixed_plan([Step("s0", "pay", {"i": 0})]), tools={"pay": Tool(calls, idempotent=False)},
                 trace=trace, resume=True).run("g")  # fmt: skip
    assert not calls.calls and trace.read_bytes() == before


@pytest.mark.parametrize(
    "redact",
    [
        {"rules": ["ssn"], "patterns": [], "defaults": "no"},
        {"rules": ["ssn"], "patterns": [], "defaults": True, "extra": 1},
        {"rules": "ssn", "patterns": [], "defaults": True},
        {"rules": [], "patterns": [["x", "i"]], "defaults": True},
        {"rules": [], "patterns": [], "defaults": True, "marker": 7},
    ],
)
def test_a_headers_redaction_rules_are_read_one_way(tmp_path: Path, redact: dict[str, Any]) -> None:
    refused(forge(tmp_path / "run.jsonl", with_(ONE_STEP, 1, redact=redact)), 1, "malformed")


def test_a_seal_is_no_agents_event(tmp_path: Path) -> None:
    trace = forge(tmp_path / "run.jsonl", [*START, spawn(WA), exit_(WA), join(WA), T("PLAN", "DONE")], reclock=True)
    records = harness.testing.read_records(trace)
    vc = records[-1]["vc"]
    seal = {
        "kind": "seal",
        "state": "DONE",
        "content_hash": "0" * 64,
        "digests": [],
        "vc": {**vc, "main": vc["main"] + 1},
    }
    refused(forge(trace, [*records, seal]), len(records) + 1, "malformed")


# --- a crash is the end of a process ------------------------------------------------------------


@pytest.mark.parametrize(
    "records",
    [
        [*START, CRASH, intent("work")],  # the run went on in the process that crashed
        [*START, CRASH, CRASH],
        [*ONE_STEP[:5], CRASH, T("PLAN", "DONE", 1)],
    ],
)
def test_a_crash_record_is_followed_by_a_resume(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    """A forged crash mid-run made a rerun stop there (a seam) and `harness runs` show it."""
    refused(forge(tmp_path / "run.jsonl", records), len(records), "bad-resume")


def test_a_crash_then_the_resume_is_valid(tmp_path: Path) -> None:
    """The controls: what follows a crash is the resume (an agent's last records may come between)."""
    assert harness.replay(forge(tmp_path / "a.jsonl", [*START, CRASH, SEAM, intent("work")])).state == "ACT"
    agent = [*START, spawn(WA), CRASH, exit_(WA), SEAM]
    assert harness.replay(forge(tmp_path / "b.jsonl", agent, reclock=True)).resumes == 1


def test_a_blob_reference_is_its_sha256_and_size(tmp_path: Path) -> None:
    data = b'"a result stored beside the trace"'
    name = harness.storage.blobs.put(str(tmp_path / "blobs"), data, sync_dir=False)
    ref = {"sha256": name, "size": len(data)}
    stored = [*START, intent("work"), T("ACT", "VERIFY", blobs={"result": ref})]
    assert harness.replay(forge(tmp_path / "ok.jsonl", stored)).tail.result == "a result stored beside the trace"
    forged = [*START, intent("work"), T("ACT", "VERIFY", blobs={"result": {**ref, "mime": "text/plain"}})]
    refused(forge(tmp_path / "forged.jsonl", forged), 4, "malformed")


def test_a_torn_tail_is_set_aside_once_in_a_file_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl.torn-1").write_bytes(b'{"seq":3,"ki')
    aside = {**SEAM, "set_aside": "run.jsonl.torn-1"}
    assert harness.replay(forge(tmp_path / "run.jsonl", [*START, aside])).resumes == 1
    refused(forge(tmp_path / "run.jsonl", [*START, aside, aside]), 4, "bad-resume")
    twice = [*START, intent("pay"), aside, T("ACT", "PAUSED"), {**YES, "op": 3, "set_aside": "run.jsonl.torn-1"}]
    refused(forge(tmp_path / "run.jsonl", twice), 6, "bad-reconcile")


# --- fork lineage, a workflow's step names, MCP results (issue 34) -----------------------------------------------

PARENT = "p" * 32
FORK = [  # a fork of ONE_STEP at its tool result (seq 4): the records before it reused, the branch mutated
    {**HEADER, "parent": PARENT, "branch": 4},
    {**T("INIT", "PLAN"), "reused": True},
    {**intent("work"), "reused": True},
    {**T("ACT", "VERIFY", result={"i": 9}), "mutated": True},
    {"kind": "checkpoint", "step": 0},
    T("PLAN", "DONE", 1),
]
CONTRACT = {"effect": "at-least-once", "version": None}
WORKFLOW = {**HEADER, "tools": {}, "workflow": "m:f", "goal": {"args": [], "kwargs": {}}}
MCP_OK = {"content": [{"type": "text", "text": "ok"}], "isError": False}


def mcp_step(result: Any, tool: str = "mcp.lookup", server: str | None = "mcp") -> list[dict[str, Any]]:
    """A workflow's run of one MCP step (harness.mcp names it `<server>.<tool>`, after it listed the server's tools)
    whose result is result; `server=None`: no listing, a step of the workflow's own."""
    listed = {"kind": "crossing", "boundary": "mcp.list_tools", "request": {"server": server}, "hash": "0" * 16}
    return [
        WORKFLOW,
        T("INIT", "PLAN"),
        *([{**listed, "response": {"tools": []}}] if server is not None else []),
        T("PLAN", "ACT", name=tool, tool=tool, args={"q": 1}, contract=CONTRACT),
        T("ACT", "VERIFY", result=result),
    ]


def test_the_bases_of_lineage_and_mcp_are_valid(tmp_path: Path) -> None:
    assert harness.replay(forge(tmp_path / "a.jsonl", FORK)).state == "DONE"
    assert harness.replay(forge(tmp_path / "b.jsonl", mcp_step(MCP_OK))).state == "VERIFY"
    rich = {**MCP_OK, "structuredContent": {"n": 1}, "_meta": {}, "resultType": "complete"}  # (what mcp 2 dumps)
    blocks = [
        {"type": "image", "data": "AA==", "mimeType": "image/png"},
        {"type": "resource_link", "name": "r", "uri": "file:///r"},
        {"type": "resource", "resource": {"uri": "file:///r", "text": "t"}},
    ]
    assert harness.replay(forge(tmp_path / "c.jsonl", mcp_step({**rich, "content": blocks}))).state == "VERIFY"
    # a tool of the workflow's own returns what it likes, even one named `mcp.<x>` in a run that lists no MCP
    # server (before, its name alone made it an MCP step: the trace of a plain run was refused), or another one
    assert harness.replay(forge(tmp_path / "d.jsonl", mcp_step("plain", tool="lookup"))).state == "VERIFY"
    assert harness.replay(forge(tmp_path / "e.jsonl", mcp_step("plain", server=None))).state == "VERIFY"
    assert harness.replay(forge(tmp_path / "f.jsonl", mcp_step("plain", server="billing"))).state == "VERIFY"


@pytest.mark.parametrize(
    ("records", "line", "reason"),
    [
        (with_(FORK, 1, branch=OMIT), 2, "malformed"),  # reused marks in a trace that is no fork
        (with_(FORK, 1, parent=OMIT), 1, "bad-lineage"),  # a branch, and no run it came from
        (with_(FORK, 1, branch=1), 1, "bad-lineage"),  # the header itself answered
        (with_(FORK, 1, branch=0), 1, "bad-lineage"),
        (with_(FORK, 1, branch=5), 4, "bad-lineage"),  # the mutated record is not the branch
        (with_(with_(FORK, 4, mutated=OMIT), 5, mutated=True), 5, "bad-lineage"),
        (with_(FORK, 4, reused=True), 4, "bad-lineage"),  # served and answered at once
    ],
)
def test_a_forks_lineage_is_checked(tmp_path: Path, records: list[dict[str, Any]], line: int, reason: str) -> None:
    """Before: a header's branch was only checked to be an int; a fork's marks were not checked against it."""
    refused(forge(tmp_path / "t.jsonl", records), line, reason)


def test_a_workflows_step_is_named_by_its_tool(tmp_path: Path) -> None:
    """Before: a workflow's intent named `pay` for tool `refund` was read, and resumed, as the call of refund."""
    records = mcp_step({"ok": True}, tool="refund", server=None)
    records[2] = {**records[2], "name": "pay"}
    e = refused(forge(tmp_path / "t.jsonl", records), 3, "bad-intent")
    assert e.seq == 3 and "'pay' for tool 'refund'" in str(e)


@pytest.mark.parametrize(
    ("result", "why"),
    [
        ("ok", "a str, not an object"),
        ({"isError": False}, 'no "content" list'),
        ({"content": "ok"}, 'no "content" list'),
        ({"content": [{"text": "ok"}]}, "content[0] is not a content block"),
        ({"content": [{"type": "video", "data": "x"}]}, "content[0] is not a content block"),
        ({"content": [{"type": "text", "text": 7}]}, "content[0], a text block, without its text"),
        ({"content": [{"type": "image", "data": "x"}]}, "without its data, mimeType"),
        ({"content": [{"type": "resource", "resource": "x"}]}, "without its resource (uri, text)"),
        ({"content": [{"type": "resource", "resource": {}}]}, "without its resource (uri, text)"),
        ({"content": [{"type": "text", "text": "ok", "annotations": 5}]}, "'annotations' that is not a dict"),
        ({"content": [], "isError": "no"}, '"isError" is not a bool'),
        ({"content": [], "structuredContent": [1]}, '"structuredContent" is not an object'),
    ],
)
def test_a_malformed_mcp_result_is_corruption_not_drift(tmp_path: Path, result: Any, why: str) -> None:
    """Before: replay() accepted it, and a resume or rerun failed later rebuilding the CallToolResult (a drift)."""
    e = refused(forge(tmp_path / "t.jsonl", mcp_step(result)), 5, "bad-result")
    assert e.seq == 5 and why in str(e) and "'mcp.lookup'" in str(e)
    # a session given another name (before: not checked, and reported as a drift by the resume)
    e = refused(forge(tmp_path / "b.jsonl", mcp_step(result, tool="billing.lookup", server="billing")), 5, "bad-result")
    assert why in str(e) and "'billing.lookup'" in str(e)
    crossing = {"kind": "crossing", "boundary": "mcp.call_tool", "request": {"server": "mcp", "tool": "t"}}
    records = [HEADER, T("INIT", "PLAN"), {**crossing, "hash": "0" * 16, "response": result}]
    e = refused(forge(tmp_path / "c.jsonl", records), 3, "bad-result")
    assert why in str(e)
