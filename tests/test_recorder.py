"""Recorder: your own agent loop, in the same trace format, with the same guarantees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import in_process
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness
from harness import HarnessError, NotSerializable, Recorder, TraceCorruption, TraceExists, TraceLocked
from harness.testing import FakeLLM, read_records

GOAL = {"question": "hello?"}


def loop(path: Path, answer: str = "world", **options: Any) -> None:
    with Recorder(path, entrypoint="my_agent.py", goal=GOAL, **options) as rec:
        rec.log("input", {"prompt": "hello"})
        rec.log("tool_call", {"tool": "search", "args": {"q": "hello"}})
        rec.log("artifact_ref", {"uri": "s3://bucket/report.md"})
        rec.log("output", {"result": answer})


def test_a_clean_exit_ends_with_success_and_replays_done(trace: Path) -> None:
    loop(trace)
    records = read_records(trace)
    header = records[0]
    assert (header["goal"], header["tools"], header["env"]["entrypoint"]) == (GOAL, {}, "my_agent.py")
    assert [(r["kind"], r.get("type")) for r in records[1:]] == [
        ("event", "input"), ("event", "tool_call"), ("event", "artifact_ref"), ("event", "output"), ("end", None),
        ("seal", None),
    ]  # fmt: skip
    assert records[4]["data"] == {"result": "world"} and records[-2]["status"] == "success"
    rep = harness.replay(trace)
    assert (rep.state, rep.complete, rep.records, rep.torn_tail, len(rep.crossings)) == ("DONE", True, 7, False, 0)
    assert rep.sealed and rep.seal is not None and rep.seal["state"] == "DONE"


def test_an_exception_ends_with_error_and_propagates(trace: Path) -> None:
    with pytest.raises(KeyError, match="missing"), Recorder(trace, entrypoint="a.py") as rec:
        rec.log("input", {"x": 1})
        raise KeyError("missing")
    end = read_records(trace)[-2]
    assert end["status"] == "error" and end["error"] == {"type": "builtins.KeyError", "message": "'missing'"}
    assert harness.replay(trace).state == "FAILED"


def test_end_sets_the_status_and_nothing_may_follow(trace: Path) -> None:
    with Recorder(trace, entrypoint="a.py") as rec:
        rec.log("output", {"result": None})
        assert rec.end("failure") == 3
        with pytest.raises(HarnessError, match="already ended"):
            rec.log("output", {"late": True})
        with pytest.raises(HarnessError, match="already ended"):
            rec.end("success")
        harness.now()  # a crossing after the end is not recorded: it would break the trace
    assert [r["kind"] for r in read_records(trace)] == ["header", "event", "end", "seal"]
    assert harness.replay(trace).state == "FAILED"


def test_bad_input_is_refused_and_writes_nothing(trace: Path, tmp_path: Path) -> None:
    with Recorder(trace, entrypoint="a.py") as rec:
        rec.log("input", {"ok": 1})
        before = trace.read_bytes()
        with pytest.raises(NotSerializable, match=r"^data: \.when is an object, not a JSON value"):
            rec.log("input", {"when": object()})
        with pytest.raises(HarnessError, match="non-empty str"):
            rec.log("", {})
        with pytest.raises(HarnessError, match="status must be one of success, failure, error"):
            rec.end("ok")
        assert trace.read_bytes() == before
        rec.log("input", {"ok": 2})  # still usable
    assert harness.replay(trace).state == "DONE" and harness.replay(trace).records == 5
    with pytest.raises(NotSerializable, match="goal"):
        Recorder(tmp_path / "g.jsonl", entrypoint="a.py", goal={1: "int key"})
    assert not (tmp_path / "g.jsonl").exists()
    with pytest.raises(HarnessError, match="outside"):
        Recorder(tmp_path / "n.jsonl", entrypoint="a.py").log("input", 1)


def test_one_writer_per_trace_and_one_run_per_file(trace: Path) -> None:
    with Recorder(trace, entrypoint="a.py") as rec:
        with pytest.raises(TraceLocked), Recorder(trace, entrypoint="b.py"):
            pass
        rec.log("input", 1)
    data = trace.read_bytes()
    with pytest.raises(TraceExists), Recorder(trace, entrypoint="c.py"):
        pass
    assert trace.read_bytes() == data
    used = Recorder(trace.with_name("other.jsonl"), entrypoint="a.py")
    with used:
        pass
    with pytest.raises(HarnessError, match="already used"), used:
        pass


def test_the_chain_catches_an_edited_event(trace: Path) -> None:
    loop(trace)
    lines = trace.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"q":"hello"', b'"q":"HELLO"')
    trace.write_bytes(b"\n".join(lines))
    with pytest.raises(TraceCorruption) as e:
        harness.replay(trace)
    assert (e.value.line, e.value.reason) == (3, "checksum")


def test_boundaries_inside_a_recorder_are_recorded_in_its_trace(trace: Path) -> None:
    model = FakeLLM(["42"])
    with Recorder(trace, entrypoint="a.py") as rec:
        rec.log("input", {"q": "life"})
        answer = harness.llm({"q": "life"}, model)
        stamp = harness.now()
        rec.log("output", {"answer": answer, "at": stamp.isoformat()})
    harness.now()  # outside: not recorded anywhere
    rep = harness.replay(trace)
    assert [(c.kind, c.request, c.response) for c in rep.crossings][:1] == [("llm", {"q": "life"}, "42")]
    assert [c.kind for c in rep.crossings] == ["llm", "now"] and rep.state == "DONE"


def test_a_killed_recorder_leaves_a_valid_interrupted_trace(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(
        "import os, signal, sys, harness\n"
        "with harness.Recorder(sys.argv[1], entrypoint='killed.py', durability='fsync') as rec:\n"
        "    rec.log('input', {'n': 1})\n"
        "    rec.log('tool_call', {'n': 2})\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    runs = tmp_path / "runs"
    runs.mkdir()
    trace = runs / "killed.jsonl"
    proc = subprocess.run([sys.executable, str(script), str(trace)], timeout=60)
    assert proc.returncode == -9
    rep = harness.replay(trace)
    assert (rep.state, rep.complete, rep.records) == ("INIT", False, 3)
    (info,) = harness.list_runs(runs)
    assert (info.status, info.entrypoint, info.records) == ("interrupted", "killed.py", 3)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` in cwd: the console script's main() called in this process."""
    return in_process.harness(*args, cwd=cwd)  # type: ignore[no-any-return]


def test_show_replay_and_diff_read_recorder_traces(tmp_path: Path) -> None:
    loop(tmp_path / "a.jsonl")
    loop(tmp_path / "b.jsonl")
    loop(tmp_path / "c.jsonl", answer="planet")
    assert harness.diff(tmp_path / "a.jsonl", tmp_path / "b.jsonl").equal  # other run ids and times
    d = harness.diff(tmp_path / "a.jsonl", tmp_path / "c.jsonl")
    assert d.first is not None and d.first.seq_b == 5 and [c.field for c in d.first.changes] == ["data.result"]
    assert cli("replay", "a.jsonl", cwd=tmp_path).returncode == 0
    shown = cli("show", "a.jsonl", cwd=tmp_path)
    assert shown.returncode == 0 and "tool_call" in shown.stdout
    assert cli("diff", "a.jsonl", "b.jsonl", cwd=tmp_path).returncode == 0
    assert cli("diff", "a.jsonl", "c.jsonl", cwd=tmp_path).returncode == 1


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(st.tuples(st.sampled_from(["input", "output", "tool_call", "x"]), JSON), max_size=8))
def test_any_json_events_come_back_as_logged(tmp_path: Path, events: list[tuple[str, Any]]) -> None:
    path = tmp_path / f"run-{abs(hash(repr(events)))}.jsonl"
    path.unlink(missing_ok=True)
    with Recorder(path, entrypoint="a.py") as rec:
        for kind, data in events:
            rec.log(kind, data)
    assert [(r["type"], r["data"]) for r in read_records(path) if r["kind"] == "event"] == events
    assert harness.replay(path).state == "DONE"


GOLDEN_TEST = """
import harness

ANSWER = "world"

def test_loop(golden_trace, tmp_path):
    path = tmp_path / "run.jsonl"
    with harness.Recorder(path, entrypoint="my_agent.py", goal={"q": "hello?"}) as rec:
        rec.log("input", {"prompt": "hello"})
        rec.log("tool_call", {"tool": "search", "args": {"q": "hello"}})
        rec.log("output", {"result": ANSWER})
    assert golden_trace == str(path)
"""


def test_recorder_traces_work_as_golden_traces(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loop=GOLDEN_TEST)
    pytester.runpytest("--snapshot-update").assert_outcomes(passed=1)
    golden = pytester.path / "golden" / "test_loop" / "test_loop.jsonl"
    assert golden.exists() and '"type":"tool_call"' in golden.read_text()
    pytester.runpytest().assert_outcomes(passed=1)  # another run id, other times: still equal
    pytester.makepyfile(test_loop=GOLDEN_TEST.replace('ANSWER = "world"', 'ANSWER = "planet"'))
    failed = pytester.runpytest()
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["*seq 4*event*", "*data.result*world*planet*"])


@pytest.mark.parametrize(
    ("edit", "reason", "line"),
    [
        (lambda rs: rs[-2].update(status="banana"), "malformed", 6),
        (lambda rs: rs[2].update(type=7), "malformed", 3),
        (lambda rs: rs.insert(6, {"seq": 7, "kind": "event", "type": "late", "data": 1}), "after-terminal", 7),
        (lambda rs: rs.append({"seq": 8, "kind": "event", "type": "late", "data": 1}), "after-terminal", 8),
        (lambda rs: rs.insert(1, {"seq": 2, "kind": "transition", "from": "INIT", "to": "PLAN",
                                  "step": 0, "ts": 0.0}), "bad-transition", 3),
    ],
)  # fmt: skip
def test_replay_refuses_forged_recorder_traces(trace: Path, edit: Any, reason: str, line: int) -> None:
    loop(trace)
    records = read_records(trace)
    edit(records)
    for i, r in enumerate(records, 1):  # renumber, so that only the edit is wrong
        r["seq"] = i
    harness.testing.write_trace(trace, records)
    with pytest.raises(TraceCorruption) as e:
        harness.replay(trace)
    assert (e.value.reason, e.value.line) == (reason, line)
