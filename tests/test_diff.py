"""normalize() and diff(): what two runs have in common, and what moved between them."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness
from harness import Executor, HarnessError, Tool, ToolError, TraceCorruption, diff, normalize
from harness.review.behavior import VIEW
from harness.review.normalize import render
from harness.testing import ScriptedTool, counter, fixed_plan, read_records, steps, write_trace

FIRST_KEYS = {"seq_a", "seq_b", "line_a", "line_b", "kind", "from", "to", "step", "attempt", "changes"}
SIDE_KEYS = {"seq", "line", "kind", "from", "to", "step", "attempt", "record"}


def run(trace: Path, tool: Any, n: int = 6, **options: Any) -> Path:
    Executor(planner=fixed_plan(steps(n)), tools={"work": tool}, trace=trace, **options).run("goal")
    return trace


def test_two_runs_with_other_run_ids_and_timestamps_compare_equal(tmp_path: Path) -> None:
    def work(i: int, idempotency_key: str) -> dict[str, int]:
        return {"i": i}

    a = run(tmp_path / "a.jsonl", Tool(work, idempotent=True, version="2"))
    b = run(tmp_path / "b.jsonl", Tool(work, idempotent=True, version="2"))
    ra, rb = read_records(a), read_records(b)
    assert ra[0]["run_id"] != rb[0]["run_id"]
    assert [r["ts"] for r in ra] != [r["ts"] for r in rb]
    assert ra[2]["key"] != rb[2]["key"]  # idempotency keys embed the run id
    result = diff(a, b)
    assert result.equal and result.first is None
    assert result.as_json() == {
        "equal": True, "first": None, "changed": [], "inserted": [], "removed": [], "moved": [], "notes": [],
    }  # fmt: skip
    assert render(normalize(a)) == render(normalize(b))
    assert result.text() == f"equal after normalization ({len(ra)} records)\n"


def test_an_inserted_retry_is_two_inserted_records_not_a_cascade(tmp_path: Path) -> None:
    a = run(tmp_path / "a.jsonl", counter())
    b = run(tmp_path / "b.jsonl", ScriptedTool({3: ToolError("rate limited")}))  # step 2, attempt 1 fails
    result = diff(a, b)
    moves = [(m.from_, m.to, m.step, m.attempt) for m in result.inserted]
    assert moves == [("ACT", "PLAN", 2, 1), ("PLAN", "ACT", 2, 2)]
    assert result.removed == ()
    # what the retry moves is the attempt number of step 2's remaining records, and nothing after step 2
    assert {m.step for m in result.changed} == {2}
    assert {c.field for m in result.changed for c in m.changes} == {"attempt"}
    assert len(result.changed) == 1  # ACT -> VERIFY (the checkpoint record has no attempt)
    first = result.as_json()["first"]
    seq = next(r["seq"] for r in read_records(b) if r.get("error"))
    assert first == {
        "seq_a": None, "seq_b": seq, "line_a": None, "line_b": seq, "kind": "transition",
        "from": "ACT", "to": "PLAN", "step": 2, "attempt": 1, "changes": [],
    }  # fmt: skip
    assert result.headline() == f"first difference at seq {seq}: transition ACT -> PLAN, step 2, attempt 1 inserted"
    inserted = result.as_json()["inserted"][0]
    assert set(inserted) == SIDE_KEYS
    assert inserted["record"]["error"] == {"message": "rate limited", "type": "ToolError"}

    back = diff(b, a)  # the other way round, the same records are removed
    assert [(m.from_, m.to, m.seq_a) for m in back.removed] == [("ACT", "PLAN", seq), ("PLAN", "ACT", seq + 1)]
    assert back.inserted == () and len(back.changed) == 1


def test_a_changed_result_names_the_dotted_field_with_old_and_new_values(tmp_path: Path) -> None:
    def tool(bump: int) -> Any:
        return lambda i: {"value": i * 10 + (bump if i == 1 else 0), "tags": ["x", str(i)]}

    a = run(tmp_path / "a.jsonl", tool(0), n=3)
    b = run(tmp_path / "b.jsonl", tool(1), n=3)
    result = diff(a, b)
    # the result is stored once, on ACT -> VERIFY: the checkpoint names it and does not change
    assert [(m.kind, m.to, m.step) for m in result.changed] == [("transition", "VERIFY", 1)]
    assert result.as_json()["first"] == {
        "seq_a": 7, "seq_b": 7, "line_a": 7, "line_b": 7, "kind": "transition", "from": "ACT", "to": "VERIFY",
        "step": 1, "attempt": 1, "changes": [{"field": "result.value", "old": 10, "new": 11}],
    }  # fmt: skip
    lines = result.text().splitlines()
    assert lines[0] == (
        "first difference at seq 7: transition ACT -> VERIFY, step 1, attempt 1 changed"
        " (1 changed, 0 inserted, 0 removed)"
    )
    assert lines[1] == "  result.value: 10 -> 11"
    md = result.markdown()
    assert md.startswith(f"**Traces differ**: `{a}` → `{b}`: 1 changed, 0 inserted, 0 removed.")
    assert "| changed | 7 | 7 | transition ACT -> VERIFY, step 1, attempt 1 | result.value: 10 -> 11 |" in md


def test_list_elements_and_absent_fields_have_their_own_paths() -> None:
    a = [{"kind": "event", "data": {"items": [1, 2, 3], "gone": True}}]
    b = [{"kind": "event", "data": {"items": [1, 5, 3], "new": None}}]
    (moved,) = diff(a, b).changed
    assert [c.field for c in moved.changes] == ["data.gone", "data.items[1]", "data.new"]  # nested keys sorted
    assert diff(a, b).as_json()["changed"][0]["changes"] == [
        {"field": "data.gone", "old": True, "new": None},  # absent on one side: null in JSON
        {"field": "data.items[1]", "old": 2, "new": 5},
        {"field": "data.new", "old": None, "new": None},
    ]
    assert "data.new: (absent) -> null" in diff(a, b).text()


def test_the_json_form_is_the_documented_contract(tmp_path: Path) -> None:
    a = run(tmp_path / "a.jsonl", counter(), n=3)
    b = run(tmp_path / "b.jsonl", ScriptedTool({2: ToolError("once")}), n=2)  # a retry, and one step fewer
    data = orjson.loads(orjson.dumps(diff(a, b).as_json()))
    assert set(data) == {"equal", "first", "changed", "inserted", "removed", "moved", "notes"}
    assert data["equal"] is False
    assert set(data["first"]) == FIRST_KEYS
    assert data["changed"] and all(set(m) == FIRST_KEYS for m in data["changed"])
    assert data["inserted"] and all(set(m) == SIDE_KEYS for m in data["inserted"])
    assert data["removed"] and all(set(m) == SIDE_KEYS for m in data["removed"])
    assert all(set(c) == {"field", "old", "new"} for m in data["changed"] for c in m["changes"])
    removed = [(m["kind"], m["to"], m["step"]) for m in data["removed"]]
    assert ("checkpoint", None, 2) in removed


def test_normalize_drops_what_differs_between_runs_and_keeps_control_flow_and_data() -> None:
    records = [
        {"seq": 1, "kind": "header", "schema": 1, "run_id": "r1", "goal": {"b": 1, "a": 2}, "parent": "r0",
         "branch": 7, "tools": {}, "env": {"cwd": "/x"}, "ts": 1.5, "crc": "0"},
        {"seq": 2, "kind": "crossing", "boundary": "now", "request": None, "hash": "ab", "response": 1.7e9, "ts": 2.0},
        {"seq": 3, "kind": "crossing", "boundary": "llm", "request": {"q": 1}, "hash": "cd", "response": "hi",
         "reused": True},
        {"seq": 4, "kind": "transition", "from": "PLAN", "to": "ACT", "step": 0, "attempt": 1, "name": "n",
         "tool": "t", "args": {"z": 1, "a": [{"y": 1, "b": 2}]}, "key": "r1-0-1", "ts": 3.0, "crc": "1"},
        {"seq": 5, "kind": "resume", "set_aside": "run.jsonl.torn-2", "env": {}, "ts": 4.0},
        {"seq": 6, "kind": "reconcile", "op": 4, "happened": False, "result": None, "evidence": "ledger"},
    ]  # fmt: skip
    out = normalize(records)
    assert [list(r) for r in out] == [
        ["kind", "schema", "goal", "tools"],
        ["kind", "boundary", "request"],
        ["kind", "boundary", "request", "response"],
        ["kind", "from", "to", "step", "attempt", "name", "tool", "args"],
        ["kind", "set_aside"],
        ["kind", "result", "happened", "evidence"],
    ]
    assert out[0]["goal"] == {"a": 2, "b": 1} and list(out[0]["goal"]) == ["a", "b"]
    assert out[3]["args"] == {"a": [{"b": 2, "y": 1}], "z": 1}
    assert out[4]["set_aside"] == "torn-2"
    assert normalize(out) == out  # normalizing twice changes nothing
    assert render(out) == render(normalize(list(reversed(records)))[::-1])


def test_a_golden_file_and_its_trace_normalize_the_same(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl", counter(), n=2)
    golden = tmp_path / "golden.jsonl"
    golden.write_text(render(normalize(trace)))
    assert normalize(golden) == normalize(trace)
    assert diff(golden, trace).equal and diff(trace, golden).equal
    assert diff(golden, trace).first is None
    changed = diff(golden, run(tmp_path / "other.jsonl", counter(), n=3))
    assert changed.inserted and changed.inserted[0].line_b == changed.inserted[0].seq_b


def test_a_torn_tail_is_not_part_of_the_run(tmp_path: Path) -> None:
    a = run(tmp_path / "a.jsonl", counter(), n=2)
    a.write_bytes(b"".join(a.read_bytes().splitlines(keepends=True)[:5]))  # an unfinished run: no seal
    b = tmp_path / "b.jsonl"
    b.write_bytes(a.read_bytes() + b'{"seq":99,"kind":"trans')
    assert diff(a, b).equal


def test_unreadable_inputs_raise_naming_the_file(tmp_path: Path) -> None:
    a = run(tmp_path / "a.jsonl", counter(), n=2)
    with pytest.raises(HarnessError, match=r"nowhere\.jsonl: no such file"):
        diff(a, tmp_path / "nowhere.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(a.read_bytes().replace(b'"i":1', b'"i":7', 1))
    with pytest.raises(TraceCorruption, match=r"bad.jsonl:\d+: checksum"):
        diff(a, bad)
    stale = tmp_path / "stale.jsonl"
    stale.write_text('{"format":"harness-golden","version":9}\n')
    with pytest.raises(HarnessError, match=r"stale golden: .*version 9.*--snapshot-update"):
        normalize(stale)
    with pytest.raises(HarnessError, match="record 1 is a str"):
        diff([{"kind": "event"}, "nope"], [])  # type: ignore[list-item]
    with pytest.raises(HarnessError, match="cannot read a trace from a int"):
        normalize(3)  # type: ignore[arg-type]


def test_a_forged_trace_that_breaks_the_state_machine_is_refused(tmp_path: Path) -> None:
    records = read_records(run(tmp_path / "a.jsonl", counter(), n=1))
    records[2]["to"] = "DONE"  # PLAN -> DONE in the middle of a step, with a valid checksum chain
    write_trace(tmp_path / "forged.jsonl", records)
    with pytest.raises(TraceCorruption, match=r"forged\.jsonl:"):
        diff(tmp_path / "a.jsonl", tmp_path / "forged.jsonl")


def test_two_long_traces_that_differ_in_one_record_diff_to_that_record() -> None:
    n = 20_000
    a = [{"kind": "transition", "from": "ACT", "to": "VERIFY", "step": i, "attempt": 1, "result": i} for i in range(n)]
    b = [dict(r) for r in a]
    b[12_345]["result"] = -1
    result = diff(a, b)
    assert [(m.seq_a, m.seq_b, [(c.field, c.old, c.new) for c in m.changes]) for m in result.moved] == [
        (12_346, 12_346, [("result", 12_345, -1)])
    ]


# --- properties over many traces ----------------------------------------------------------

record = st.fixed_dictionaries({"kind": st.sampled_from(["event", "checkpoint"]), "step": st.integers(0, 3)})
small_traces = st.lists(record, max_size=25)


def matched(result: Any, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """The records diff says are equal, from each side, in order."""
    gone_a = {m.seq_a for m in result.moved if m.seq_a is not None and m.op != "inserted"}
    gone_b = {m.seq_b for m in result.moved if m.seq_b is not None and m.op != "removed"}
    return [r for i, r in enumerate(a, 1) if i not in gone_a], [r for i, r in enumerate(b, 1) if i not in gone_b]


@settings(max_examples=150, deadline=None)
@given(small_traces, small_traces)
def test_what_is_left_unreported_is_equal_on_both_sides_in_order(
    a: list[dict[str, Any]], b: list[dict[str, Any]]
) -> None:
    result = diff(a, b)
    left, right = matched(result, a, b)
    assert left == right
    assert len(a) - len(result.removed) == len(b) - len(result.inserted)
    assert result.equal == (a == b)
    seqs_b = [m.seq_b for m in result.moved if m.seq_b is not None]
    assert seqs_b == sorted(seqs_b)  # differences come in the order of the trace


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 60), st.data())
def test_records_inserted_into_a_trace_are_reported_as_exactly_those_insertions(n: int, data: st.DataObject) -> None:
    a = [{"kind": "event", "n": i} for i in range(n)]
    b = list(a)
    positions = data.draw(st.lists(st.integers(0, n), max_size=5))
    for k, at in enumerate(sorted(positions, reverse=True)):
        b.insert(at, {"kind": "event", "n": 1000 + k})
    result = diff(a, b)
    assert result.changed == () and result.removed == ()
    assert sorted(m.record["n"] for m in result.inserted if m.record) == sorted(1000 + k for k in range(len(positions)))
    back = diff(b, a)
    assert back.changed == () and back.inserted == () and len(back.removed) == len(positions)


def test_a_long_run_of_repeated_records_shifted_by_one_is_one_removal_and_one_insertion() -> None:
    a = [{"kind": "event", "x": i % 3} for i in range(1500)]  # no record occurs once: nothing to anchor on
    b = [*a[1:], {"kind": "event", "x": 7}]
    result = diff(a, b)
    assert [(m.op, m.seq_a, m.seq_b) for m in result.moved] == [("removed", 1, None), ("inserted", None, 1500)]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=600, max_size=700), st.data())
def test_long_traces_of_few_distinct_records_with_a_few_edits(xs: list[int], data: st.DataObject) -> None:
    a = [{"kind": "event", "x": x} for x in xs]
    b = list(a)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(b) - 1))
        if data.draw(st.booleans()):
            del b[at]
        else:
            b.insert(at, {"kind": "event", "x": data.draw(st.integers(0, 3))})
    result = diff(a, b)
    left, right = matched(result, a, b)
    assert left == right
    assert len(result.moved) <= 8  # aligned, not reported whole


# --- what a diff shows of long values, and of a run that took another path ------------------------


def test_a_long_value_is_shown_around_its_first_difference(tmp_path: Path) -> None:
    def tool(reason: str) -> Any:  # a model's answer: JSON in a string, so one long string value
        letter = "the customer wrote a long letter. " * 8
        return lambda i: orjson.dumps({"text": letter, "reason": reason if i == 1 else "a", "more": letter}).decode()

    a = run(tmp_path / "a.jsonl", tool("customer changed their mind"), n=2)
    b = run(tmp_path / "b.jsonl", tool("duplicate order"), n=2)
    result = diff(a, b)
    first = result.text().splitlines()[1]
    assert first.startswith("  result: …") and first.count("…") == 4  # both sides cut at both ends
    old, new = first.removeprefix("  result: ").split(" -> ")
    assert '\\"reason\\":\\"c' in old and '\\"reason\\":\\"d' in new  # the difference is in view
    assert old.index("reason") == new.index("reason")  # at the same place on both sides
    assert '\\"reason\\":\\"c' in result.markdown() and '\\"reason\\":\\"d' in result.markdown()
    assert len(old) <= 60 and len(new) <= 60
    short = diff([{"kind": "event", "x": "abc"}], [{"kind": "event", "x": "abd"}])
    assert short.text().splitlines()[1] == '  x: "abc" -> "abd"'  # short values are shown whole


def test_a_fork_that_takes_another_path_reads_as_steps_replaced(tmp_path: Path) -> None:
    import refund_agent

    parent = tmp_path / "parent.jsonl"
    refund_agent.record(parent)
    decision = next(c for c in harness.replay(parent).crossings if c.kind == "llm")
    planner, tools, _ = refund_agent.make_agent()
    child = tmp_path / "child.jsonl"
    harness.fork(parent, at=decision.seq, value="deny", planner=planner, tools=tools, out=child)
    result = diff(parent, child)
    assert result.first is not None and result.first.seq_b == decision.seq
    assert [c.field for c in result.first.changes] == ["response"]
    # the steps after the decision were replaced: refund and notify removed, explain and review inserted, whole
    assert [c.name for c in harness.replay(parent).checkpoints][1:3] == ["refund", "notify"]
    removed = {m.record.get("name") for m in result.removed if m.record and m.to == "ACT"}  # the steps' intents
    inserted = {m.record.get("name") for m in result.inserted if m.record and m.to == "ACT"}
    assert (removed, inserted) == ({"refund", "notify"}, {"explain", "review"})
    assert [m.seq_a for m in result.removed] == list(range(decision.seq + 1, decision.seq + 8))
    assert [m.seq_b for m in result.inserted] == list(range(decision.seq + 1, decision.seq + 8))
    # what is left changed belongs to the same step on both sides: the close step, planned on other facts
    records_a, records_b = read_records(parent), read_records(child)
    for m in result.changed[1:]:
        assert m.seq_a is not None and m.seq_b is not None
        a, b = records_a[m.seq_a - 1], records_b[m.seq_b - 1]
        assert (a["kind"], a.get("step"), a.get("name"), a.get("tool")) == (
            b["kind"], b.get("step"), b.get("name"), b.get("tool"),
        )  # fmt: skip
    assert result.counts() == "3 changed, 7 inserted, 7 removed"


def test_replay_drift_names_the_path_into_lists_and_objects(tmp_path: Path) -> None:
    from harness import ReplayDrift, Step

    def agent(question: str) -> Any:
        def planner(goal: Any, done: list[Any]) -> Step | None:
            if done:
                return None
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": question}]
            return Step("ask", "work", {"said": harness.llm({"model": "m", "messages": messages}, lambda r: "ok")})

        return planner

    trace = tmp_path / "run.jsonl"
    Executor(planner=agent("refund order 42?"), tools={"work": lambda said: said}, trace=trace).run("g")
    with pytest.raises(ReplayDrift) as e:
        harness.rerun(trace, planner=agent("refund order 43?"), tools={"work": lambda said: said})
    assert e.value.fields == {"messages[1].content": ("refund order 42?", "refund order 43?")}
    assert "messages[1].content: recorded 'refund order 42?', now 'refund order 43?'" in str(e.value)


# --- diff reads trace files from both ends: the same answers as for records in memory --------------


def padded(marks: dict[int, str], n: int) -> Any:
    """A tool whose results are ~20 KB (records span the 64 KiB read window), marked on chosen calls."""
    calls = iter(range(n * 2))

    def tool(i: int) -> dict[str, Any]:
        call = next(calls)
        return {"i": i, "pad": "x" * 20_000, "mark": marks.get(call, "same")}

    return tool


@pytest.mark.parametrize(
    "marks_b, n_b",
    [({}, 8), ({0: "first"}, 8), ({4: "middle"}, 8), ({7: "last"}, 8), ({}, 5), ({}, 11), ({2: "x", 6: "y"}, 7)],
    ids=["equal", "first", "middle", "last", "shorter", "longer", "two-and-shorter"],
)
def test_a_diff_of_files_equals_the_diff_of_their_records(tmp_path: Path, marks_b: dict[int, str], n_b: int) -> None:
    a = run(tmp_path / "a.jsonl", padded({}, 8), n=8)
    b = run(tmp_path / "b.jsonl", padded(marks_b, n_b), n=n_b)
    from_files = diff(a, b)
    in_memory = diff(read_records(a), read_records(b))
    assert from_files.as_json() == in_memory.as_json()
    assert from_files.text() == in_memory.text().replace("<records>", str(a), 1).replace("<records>", str(b), 1)
    assert from_files.equal == (marks_b == {} and n_b == 8)
    assert diff(b, a).as_json() == diff(read_records(b), read_records(a)).as_json()


def test_a_trace_walked_from_either_end_gives_the_same_lines_whatever_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every place a read window can end (inside a line, on its newline, just after it) gives the same lines."""
    import harness.review.normalize as N

    trace = run(tmp_path / "a.jsonl", counter(), n=3)
    data = trace.read_bytes()
    lines = data.split(b"\n")[:-1]
    starts = [sum(len(x) + 1 for x in lines[:n]) for n in range(len(lines))]
    for window in [*range(1, 200), 1 << 16]:
        monkeypatch.setattr(N, "_CHUNK", window)
        side = N.Loaded.trace(str(trace))
        assert list(side.forward()) == list(zip(lines, starts, strict=True)), window
        assert list(side.backward()) == list(zip(lines, starts, strict=True))[::-1], window


# --- the changed characters of a value, as the viewer's diff page marks them --------------------------------------


def marks(old: Any, new: Any, width: int = 600) -> tuple[list[str], list[str]]:
    from harness.review.diff import marked

    m = marked(old, new, width)
    return [m["old"][a:b] for a, b in m["old_marks"]], [m["new"][a:b] for a, b in m["new_marks"]]


def test_the_changed_words_of_a_value_are_marked() -> None:
    assert marks("the quick brown fox jumps", "the quick red fox jumped") == (["brown", "jumps"], ["red", "jumped"])
    assert marks({"a": 1, "b": [1, 2, 3]}, {"a": 2, "b": [1, 2, 4]}) == (["1", "3"], ["2", "4"])
    assert marks(10, 11) == (["10"], ["11"])  # never half a word
    assert marks("echo: hi", "echo: hi!") == ([], ["!"])
    assert marks("a reply", "something else entirely") == (["a reply"], ["something else entirely"])  # mostly new
    assert marks([1], [1]) == ([], [])
    long_a, long_b = "x " * 500 + "hello world " + "y " * 500, "x " * 500 + "hello there " + "y " * 500
    m_a, m_b = marks(long_a, long_b, width=100)  # a window around the first difference, as `harness diff` cuts it
    assert (m_a, m_b) == (["world"], ["there"])


WORDS = st.lists(st.sampled_from(["a", "b", "cc", " ", ", ", "dd", "1", "22", "é"]), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40) | WORDS, st.text(max_size=40) | WORDS)
def test_marks_cover_every_difference_and_lie_inside_the_text(a: str, b: str) -> None:
    from harness.review.diff import spans

    old, new = spans(a, b)
    for text, found in ((a, old), (b, new)):
        assert all(0 <= lo < hi <= len(text) for lo, hi in found)
        assert all(x[1] <= y[0] for x, y in itertools.pairwise(found))  # in order, apart
    keep_a = "".join(c for i, c in enumerate(a) if not any(lo <= i < hi for lo, hi in old))
    keep_b = "".join(c for i, c in enumerate(b) if not any(lo <= i < hi for lo, hi in new))
    assert keep_a.split() == keep_b.split()  # unmarked: what they share (a mark may take the spaces between words)


def _two_calls(goal: Any, progress: Any) -> Any:
    return [harness.Step("a", "work", {"i": 1}), harness.Step("b", "work", {"i": 2})] if not progress else None


def test_a_trace_url_of_a_run_with_agents_is_read_from_its_local_copy(tmp_path: Path) -> None:
    pytest.importorskip("fsspec")
    done = Executor(planner=_two_calls, tools={"work": lambda i: {"i": i}}, runs_dir=f"file://{tmp_path}/runs").run("g")
    assert done.state == "DONE" and str(done.trace).startswith("file://")
    assert harness.replay(done.trace).tail.clocks is not None  # a run with agents, on a trace URL
    assert diff(done.trace, done.trace).equal  # the same trace twice: equal (it was opened as a file name)


def test_a_run_with_agents_compares_its_blob_stored_payloads_not_their_references(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    work = lambda i: {"i": i, "pad": "x" * 5000}  # noqa: E731
    done = Executor(planner=_two_calls, tools={"work": work}, trace=trace, blob_threshold=1024).run("g")
    assert done.state == "DONE" and b'"blobs":{' in trace.read_bytes()  # the results are in blobs
    golden = tmp_path / "t.golden.jsonl"
    golden.write_text(render(normalize(trace)))  # the same view, as a golden file: payloads inline
    d = diff(trace, golden)
    assert d.equal, [(m.kind, [c.field for c in m.changes]) for m in d.moved]
    other = tmp_path / "o.jsonl"
    work2 = lambda i: {"i": i, "pad": "y" * 5000}  # noqa: E731
    Executor(planner=_two_calls, tools={"work": work2}, trace=other, blob_threshold=1024).run("g")
    assert not diff(trace, other).equal  # other payloads: a difference, found in the blobs


def test_a_golden_of_the_raw_view_is_compared_in_the_raw_view(tmp_path: Path) -> None:
    """A golden written with `golden_view = "raw"` says so in its first line, and `harness diff GOLDEN TRACE` (the
    behavior view by default, in a folder without that project's rules) compares it in the view it was written in.
    Before, its first line claimed the behavior view and the diff read a Pydantic AI run's raw golden as changed
    (its made-up tool call ids all read `pyd_ai_<id>`, so the view could not pair calls with their results), and
    `harness show --golden` (git's textconv) printed it in the behavior view under a behavior head."""
    import framework_agent

    from harness.review.normalize import Rules, normalize_with
    from harness.review.show import show_trace

    trace = tmp_path / "run.jsonl"
    assert framework_agent.pai_flow.run("", "function", trace=trace).state == "DONE"
    for view in ("raw", "behavior"):
        rules = Rules.of((), True, view)
        golden = tmp_path / f"{view}.jsonl"
        golden.write_text(render(normalize_with(str(trace), rules), rules))
        assert orjson.loads(golden.read_text().split("\n")[0])["view"] == ("raw" if view == "raw" else VIEW)
        assert diff(golden, trace).equal, diff(golden, trace).text()
        assert diff(trace, golden).equal
        shown: list[str] = []  # the textconv (`harness show --golden`) of a golden: itself, in its own view
        show_trace(str(golden), shown.append, view="golden")
        assert "".join(shown) == golden.read_text()
