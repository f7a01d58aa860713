"""A trace that cannot support its own story is refused, at the line where it stops making sense.

Each tampering is tried twice where it matters: on the raw bytes (the crc
chain catches it) and re-chained with valid checksums (harness.testing.
write_trace), so that the seq and state rules have to catch it on their own.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness
from harness import Step, TraceCorruption, replay
from harness.testing import FakeLLM, counter, power_cut, read_records, write_trace
from harness.trace.line import encode

Run = Callable[..., harness.Outcome]  # the `run` fixture of conftest.py


def refused(trace: Path, line: int, reason: str) -> TraceCorruption:
    before = trace.read_bytes()
    with pytest.raises(TraceCorruption) as info:
        replay(trace)
    e = info.value
    assert (e.line, e.reason) == (line, reason), str(e)
    assert str(trace) in str(e) and f":{line}: {reason}" in str(e)
    assert trace.read_bytes() == before
    return e


def lines(trace: Path) -> list[bytes]:
    return trace.read_bytes().splitlines(keepends=True)


def renumber(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "seq": n} for n, r in enumerate(records, start=1)]


def line_of(trace: Path, kind: str, nth: int = 0, **fields: Any) -> int:
    """1-based line number of the nth record of kind whose fields match."""
    found = [n for n, r in enumerate(read_records(trace), start=1)
             if r["kind"] == kind and all(r.get(k) == v for k, v in fields.items())]  # fmt: skip
    return found[nth]


@pytest.fixture
def done(trace: Path, run: Run) -> Path:
    """A finished four-step run."""
    run(counter())
    return trace


@pytest.fixture
def crashed(trace: Path, run: Run) -> Path:
    """A run that lost power in its third tool call."""
    with pytest.raises(RuntimeError):
        run(power_cut(at=3))
    records = read_records(trace)
    assert records[-1]["kind"] == "crash"  # what the exception left; a SIGKILL leaves no such word: drop it
    write_trace(trace, records[:-1])
    return trace


# --- forged checkpoints --------------------------------------------------------------------


def test_a_forged_checkpoint_with_a_valid_checksum_is_caught_by_the_state_rule(crashed: Path) -> None:
    last = read_records(crashed)[-1]  # PLAN -> ACT of step 2: the tool never returned
    forged, _ = encode({"seq": last["seq"] + 1, "kind": "checkpoint", "step": 2, "ts": 0.0}, int(last["crc"], 16))
    with crashed.open("ab") as f:
        f.write(forged)
    e = refused(crashed, last["seq"] + 1, "unvouched-checkpoint")
    assert e.seq == last["seq"] + 1


def test_a_checkpoint_without_its_verified_result_is_refused(done: Path) -> None:
    records = read_records(done)
    result = line_of(done, "transition", 2, to="VERIFY") - 1
    write_trace(done, renumber(records[:result] + records[result + 1 :]))  # drop ACT -> VERIFY: nothing verified
    refused(done, result + 1, "unvouched-checkpoint")


def test_a_checkpoint_for_another_step_than_the_vouched_one_is_refused(done: Path) -> None:
    records = read_records(done)
    ck = line_of(done, "checkpoint", 1) - 1
    records[ck]["step"] = 0
    write_trace(done, records)
    refused(done, ck + 1, "unvouched-checkpoint")


def test_a_checkpoint_before_the_result_it_would_vouch_for_is_refused(done: Path) -> None:
    """A checkpoint vouches for its lane's last result, by position: moved before that result, it vouches for none."""
    records = read_records(done)
    ck = line_of(done, "checkpoint", 1) - 1
    records[ck - 1], records[ck] = records[ck], records[ck - 1]
    write_trace(done, renumber(records))
    refused(done, ck, "unvouched-checkpoint")


def test_a_verified_result_not_followed_by_its_checkpoint_is_refused(done: Path) -> None:
    records = read_records(done)
    ck = line_of(done, "checkpoint", 0) - 1
    write_trace(done, renumber(records[:ck] + records[ck + 1 :]))  # the next intent leaves PLAN, the run is in VERIFY
    e = refused(done, ck + 1, "bad-transition")
    assert "the run is in VERIFY" in str(e)


def test_a_checkpoint_written_as_transitions_is_refused(done: Path) -> None:
    """Schema 1's VERIFY -> CHECKPOINT transition: in schema 2 only a checkpoint record makes that move."""
    records = read_records(done)
    ck = line_of(done, "checkpoint", 0) - 1
    records[ck] = {"seq": ck + 1, "kind": "transition", "from": "VERIFY", "to": "CHECKPOINT", "step": 0,
                   "ts": 1.5}  # fmt: skip
    write_trace(done, records)
    refused(done, ck + 1, "bad-transition")


# --- the seq and the chain ----------------------------------------------------------------


def test_an_old_record_re_appended_breaks_the_chain(crashed: Path) -> None:
    old = lines(crashed)
    crashed.write_bytes(b"".join(old) + old[2])
    refused(crashed, len(old) + 1, "checksum")


def test_an_old_record_re_appended_with_a_valid_checksum_breaks_the_seq(crashed: Path) -> None:
    records = read_records(crashed)
    write_trace(crashed, [*records, records[2]])
    e = refused(crashed, len(records) + 1, "seq")
    assert e.seq == 3


def test_a_deleted_line_is_caught_at_its_place(done: Path) -> None:
    old = lines(done)
    done.write_bytes(b"".join(old[:4] + old[5:]))
    refused(done, 5, "checksum")
    records = read_records(done)
    write_trace(done, records)  # re-chained: the seq gap still shows
    refused(done, 5, "seq")


def test_two_swapped_lines_are_caught_at_the_first(done: Path) -> None:
    old = lines(done)
    old[6], old[7] = old[7], old[6]
    done.write_bytes(b"".join(old))
    refused(done, 7, "checksum")
    write_trace(done, read_records(done))
    refused(done, 7, "seq")


def test_one_changed_digit_inside_a_result_is_caught(done: Path) -> None:
    n = line_of(done, "transition", 1, to="VERIFY")
    old = lines(done)
    assert b'"result":{"i":1}' in old[n - 1]
    old[n - 1] = old[n - 1].replace(b'"result":{"i":1}', b'"result":{"i":7}')
    done.write_bytes(b"".join(old))
    refused(done, n, "checksum")


def test_a_changed_checksum_is_caught(done: Path) -> None:
    old = lines(done)
    old[3] = old[3][:-4] + (b"0" if old[3][-4:-3] != b"0" else b"1") + old[3][-3:]
    done.write_bytes(b"".join(old))
    refused(done, 4, "checksum")


@pytest.mark.parametrize("garbage", [b"hello\n", b"\n", b"{}\n", b'{"seq":5,"kind":"event"}\n', b"\x00\xff\xfe\n"])
def test_a_garbage_line_in_the_middle_is_caught(done: Path, garbage: bytes) -> None:
    old = lines(done)
    done.write_bytes(b"".join([*old[:5], garbage, *old[5:]]))
    refused(done, 6, "malformed")


def test_a_record_after_done_is_refused(done: Path) -> None:
    old = lines(done)
    done.write_bytes(b"".join(old) + old[-1])
    refused(done, len(old) + 1, "checksum")
    records = read_records(done)
    write_trace(done, renumber([*records[:-1], {"kind": "event", "name": "late"}]))
    e = refused(done, len(old) + 1, "after-terminal")
    assert "DONE" in str(e)


# --- records the state table does not allow ---------------------------------------------


def test_a_transition_from_a_state_the_run_is_not_in(done: Path) -> None:
    records = read_records(done)
    records[3]["from"] = "PLAN"  # ACT -> VERIFY claims to leave PLAN
    write_trace(done, records)
    refused(done, 4, "bad-transition")


def test_a_transition_that_is_not_an_edge_of_the_table(done: Path) -> None:
    records = read_records(done)
    records[2]["to"] = "CHECKPOINT"  # PLAN -> CHECKPOINT skips ACT and VERIFY
    write_trace(done, records)
    e = refused(done, 3, "bad-transition")
    assert "PLAN -> CHECKPOINT" in str(e)


def test_an_unknown_kind(done: Path) -> None:
    records = read_records(done)
    records[4]["kind"] = "telemetry"
    write_trace(done, records)
    refused(done, 5, "unknown-kind")


@pytest.mark.parametrize("kind", [["transition"], {"kind": "seal"}, 5, None, True], ids=repr)
def test_a_kind_that_is_no_str_is_an_unknown_kind(done: Path, kind: Any) -> None:
    """Not a `malformed` from a lookup that cannot hash it: the rules are a table by kind (trace/rules.py)."""
    records = read_records(done)
    records[4]["kind"] = kind
    write_trace(done, records)
    e = refused(done, 5, "unknown-kind")
    assert f"unknown record kind {kind!r}" in str(e)


def test_a_schema_this_version_does_not_read_names_both_versions(done: Path) -> None:
    records = read_records(done)
    records[0]["schema"] = 3
    write_trace(done, records)
    e = refused(done, 1, "schema")
    assert "version 3" in str(e) and "version 2" in str(e)


def test_a_second_header(done: Path) -> None:
    records = read_records(done)
    write_trace(done, renumber([records[0], records[0], *records[1:]]))
    refused(done, 2, "bad-header")


def test_a_first_record_that_is_not_a_header(done: Path) -> None:
    write_trace(done, renumber(read_records(done)[1:]))
    refused(done, 1, "not-a-trace")


@pytest.mark.parametrize(
    ("line", "field"),
    [(1, "run_id"), (1, "goal"), (3, "to"), (3, "from"), (5, "step"), (4, "seq"),
     (3, "tool"), (3, "args"), (3, "name"), (4, "result"), (2, "step")],
)  # fmt: skip
def test_a_record_without_a_required_field_is_malformed(done: Path, line: int, field: str) -> None:
    records = read_records(done)
    del records[line - 1][field]
    write_trace(done, records)
    refused(done, line, "malformed")


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [(3, "args", [1]), (3, "tool", 7), (3, "name", None), (3, "step", "0"), (3, "attempt", True)],
)
def test_an_intent_with_a_field_of_the_wrong_type_is_refused(done: Path, line: int, field: str, value: Any) -> None:
    records = read_records(done)
    records[line - 1][field] = value
    write_trace(done, records)
    assert refused(done, line, "malformed" if field in ("args", "tool", "name") else "bad-transition").seq == line


def test_steps_and_attempts_must_follow_on_from_each_other(done: Path) -> None:
    records = read_records(done)
    for r in records:  # the whole story of step 0 claims to be step 5: internally consistent, but not from step 0
        if r.get("step") == 0:
            r["step"] = 5
    write_trace(done, records)
    e = refused(done, 2, "bad-transition")
    assert "step 5, attempt 1 where step 0, attempt 1 comes next" in str(e)


def test_a_first_attempt_written_out_is_refused(done: Path) -> None:
    """One spelling: `attempt` is left out on a first attempt, so `"attempt":1` is a line harness never writes."""
    records = read_records(done)
    assert "attempt" not in records[2]
    records[2] = {k: v for k, v in records[2].items() if k != "ts"} | {"attempt": 1, "ts": records[2]["ts"]}
    write_trace(done, records)
    assert "attempt 1 written out" in str(refused(done, 3, "non-canonical"))


def test_an_attempt_out_of_nowhere_is_refused(done: Path) -> None:
    records = read_records(done)
    for r in records[2:4]:  # step 0's PLAN -> ACT and ACT -> VERIFY claim attempt 9
        r["attempt"] = 9
    write_trace(done, records)
    refused(done, 3, "bad-transition")


def test_a_damaged_line_still_names_the_seq_it_claims(done: Path) -> None:
    raw = lines(done)
    raw[4] = raw[4].replace(b'"step":0', b'"step":1')
    done.write_bytes(b"".join(raw))
    assert refused(done, 5, "checksum").seq == 5


def test_a_seq_that_is_not_an_int(done: Path) -> None:
    records = read_records(done)
    records[3]["seq"] = "4"
    write_trace(done, records)
    refused(done, 4, "seq")


# --- any single changed byte ------------------------------------------------------------


def rich_trace(path: Path) -> bytes:
    """A finished run with every kind of record a run writes: crossings, retries, a resume."""
    fake = FakeLLM(lambda request: {"say": request})
    tool = harness.testing.ScriptedTool({2: harness.ToolError("blink"), 4: RuntimeError("power cut")})

    def plan(goal: Any, progress: list[Any]) -> Step | None:
        harness.llm(len(progress), fake)
        return harness.testing.fixed_plan(harness.testing.steps(3))(goal, progress)

    with pytest.raises(RuntimeError):
        harness.Executor(planner=plan, tools={"work": tool}, trace=path).run("g")
    harness.Executor(planner=plan, tools={"work": tool}, trace=path, resume=True).run("g")
    kinds = {r["kind"] for r in read_records(path)}
    assert kinds == {"header", "transition", "checkpoint", "crossing", "crash", "resume", "seal"}
    return path.read_bytes()


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return rich_trace(tmp_path_factory.mktemp("valid") / "run.jsonl")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_single_changed_byte_is_refused(tmp_path: Path, valid: bytes, data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(valid) - 2), label="offset")  # all but the final newline
    new = data.draw(st.integers(0, 255).filter(lambda b: b != valid[at]), label="byte")
    path = tmp_path / "changed.jsonl"
    path.write_bytes(valid[:at] + bytes([new]) + valid[at + 1 :])
    with pytest.raises(TraceCorruption) as info:
        replay(path)
    assert info.value.line == valid.count(b"\n", 0, at) + 1 or valid[at] == ord("\n") or new == ord("\n")


@pytest.mark.parametrize("change", ["newline", "bit flip"])
def test_every_byte_changed_in_turn_is_refused(tmp_path: Path, valid: bytes, change: str) -> None:
    path = tmp_path / "changed.jsonl"
    path.write_bytes(valid)
    with path.open("r+b", buffering=0) as f:
        for at in range(len(valid) - 1):
            new = ord("\n") if change == "newline" else valid[at] ^ 0x01
            if new == valid[at]:
                continue
            os.pwrite(f.fileno(), bytes([new]), at)
            with pytest.raises(TraceCorruption):
                replay(path)
            os.pwrite(f.fileno(), valid[at : at + 1], at)
    assert path.read_bytes() == valid


def test_the_chain_makes_each_line_depend_on_all_before_it(valid: bytes) -> None:
    first, second = valid.split(b"\n")[:2]
    crc = zlib.crc32(first[: first.rindex(b',"crc":')])
    assert orjson.loads(first)["crc"] == f"{crc:08x}"
    crc = zlib.crc32(second[: second.rindex(b',"crc":')], crc)
    assert orjson.loads(second)["crc"] == f"{crc:08x}"


def test_a_paused_run_must_go_on_with_the_result_the_operator_asserted(trace: Path) -> None:
    calls = []

    def charge(**args: Any) -> Any:
        calls.append(args)
        raise RuntimeError("the process dies here")  # an outcome nobody knows

    tools = {"work": harness.Tool(charge, idempotent=False)}
    ex = harness.Executor(planner=lambda g, p: None if p else Step("pay", "work", {}), tools=tools, trace=trace)
    with pytest.raises(RuntimeError):
        ex.run("g")
    ex = harness.Executor(planner=ex.planner, tools=tools, trace=trace, resume=True)
    assert ex.run("g").state == "PAUSED"
    harness.reconcile(trace, happened=True, result={"r": 1}, evidence="ledger")
    assert ex.run("g").state == "DONE" and len(calls) == 1
    records = read_records(trace)
    line = line_of(trace, "transition", **{"from": "PAUSED", "to": "VERIFY"})
    records[line - 1]["result"] = {"r": 999}
    write_trace(trace, records)
    refused(trace, line, "bad-reconcile")
