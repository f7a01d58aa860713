"""The trace file as written: line format, checksum chain, header, streaming, refusals, durability."""

from __future__ import annotations

import errno
import math
import os
import time
import zlib
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness
from harness import Executor, JournalError, NotSerializable, Redaction, Step, TraceLocked, TraceUnreadable, replay
from harness.testing import FakeLLM, counter, fixed_plan, read_records, steps
from harness.trace import journal as journal_module
from harness.trace.journal import Journal
from harness.trace.reader import attempt_of

Run = Callable[..., harness.Outcome]  # the `run` fixture of conftest.py


def shape(path: Path) -> list[tuple[Any, ...]]:
    """What a trace says, without its run id, wall clock and checksums."""
    return [(r["kind"], r.get("from"), r.get("to"), r.get("step"), attempt_of(r)) for r in read_records(path)]


def test_each_line_is_a_json_object_whose_seq_is_its_line_number(trace: Path, run: Run) -> None:
    run(counter())
    data = trace.read_bytes()
    assert data.endswith(b"\n")
    for n, line in enumerate(data.splitlines(), start=1):
        rec = orjson.loads(line)
        assert isinstance(rec, dict)
        assert rec["seq"] == n
        assert isinstance(rec["ts"], float)
        assert list(rec)[:2] == ["seq", "kind"] and list(rec)[-1] == "crc"


def test_only_the_header_ts_is_a_date_the_others_count_seconds_from_it(trace: Path) -> None:
    """Also in a second process's records: a resume counts from the header it continues, not from its own start."""
    before = time.time()
    plan = fixed_plan([Step("a", "work", {"i": 0}), Step("b", "work", {"i": 1})])
    stop = {"at": 1}

    def work(i: int) -> int:
        if i == stop["at"]:
            raise KeyboardInterrupt  # the first process stops inside its second call
        return i

    with pytest.raises(KeyboardInterrupt):
        Executor(planner=plan, tools={"work": work}, trace=trace).run("g")
    time.sleep(0.05)
    stop["at"] = -1
    assert Executor(planner=plan, tools={"work": work}, trace=trace, resume=True).run("g").state == "DONE"
    after = time.time()
    header, *rest = read_records(trace)
    assert before - 0.001 <= header["ts"] <= after
    assert any(r["kind"] == "resume" for r in rest)
    assert all(0.0 <= r["ts"] <= after - header["ts"] + 0.001 for r in rest)
    assert rest[-1]["ts"] >= 0.05  # the resumed process's records count from the first process's header


def test_each_crc_chains_on_the_previous_line_and_covers_the_bytes_before_it(trace: Path, run: Run) -> None:
    run(counter())
    prev = 0
    for line in trace.read_bytes().splitlines():
        body, _, tail = line.rpartition(b',"crc":"')
        assert tail.endswith(b'"}') and len(tail) == 10
        prev = zlib.crc32(body, prev)
        assert tail[:8] == b"%08x" % prev


def test_the_header_pins_schema_run_goal_tools_and_environment(trace: Path, run: Run) -> None:
    run(counter(), goal={"find": ["a", "b"]})
    header = read_records(trace)[0]
    assert header["kind"] == "header" and header["schema"] == 2
    assert len(header["run_id"]) == 32 and int(header["run_id"], 16) >= 0
    assert header["goal"] == {"find": ["a", "b"]}
    assert header["tools"] == {"work": {"effect": "at-least-once", "version": None}}
    assert set(header["env"]) == {"python", "platform", "cwd", "entrypoint", "harness", "code"}
    assert header["env"]["cwd"] == os.getcwd()
    assert set(header["env"]["code"]) == {"sha256", "files"}  # the fingerprint of the planner's module (this file)


def test_version_comes_from_package_metadata_and_the_header_records_it(trace: Path, run: Run) -> None:
    run(counter())
    assert harness.__version__ == version("harness-trace") != "0+unknown"
    assert read_records(trace)[0]["env"]["harness"] == harness.__version__


def test_records_are_on_disk_before_the_executor_acts_on_them(trace: Path) -> None:
    seen: dict[str, Any] = {}

    def work(i: int) -> dict[str, int]:
        seen.setdefault("at tool", read_records(trace)[-1])
        return {"i": i}

    def verify(step: Step, result: Any) -> bool:
        seen.setdefault("at verify", read_records(trace)[-1])
        return True

    Executor(planner=fixed_plan(steps(1)), tools={"work": work}, verifier=verify, trace=trace).run("g")
    intent = seen["at tool"]
    assert (intent["from"], intent["to"], intent["tool"], intent["args"]) == ("PLAN", "ACT", "work", {"i": 0})
    done = seen["at verify"]
    assert (done["from"], done["to"], done["result"]) == ("ACT", "VERIFY", {"i": 0})


REFUSED = {
    "set": {1, 2},
    "object": object(),
    "int key": {1: "a"},
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "tuple": (1, 2),
    "int above 64 bits": 2**64,
    "int below 64 bits": -(2**63) - 1,
    "lone surrogate": "\ud800",
    "nested set": {"a": [1, {"b": {3}}]},
    "bytes": b"raw",
}


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_a_result_json_would_change_is_refused_and_nothing_is_written(trace: Path, run: Run, value: Any) -> None:
    with pytest.raises(NotSerializable) as info:
        run(lambda i: value)
    assert isinstance(info.value, TypeError)
    assert "result" in str(info.value)
    data = trace.read_bytes()
    assert data.endswith(b"\n")  # no partial line
    r = replay(trace)  # still a valid trace, ending where the refusal stopped it
    assert (r.state, r.torn_tail, len(r.checkpoints)) == ("ACT", False, 0)
    assert read_records(trace)[-2]["to"] == "ACT"
    assert read_records(trace)[-1]["error"]["type"] == "harness._errors.NotSerializable"  # the crash record


def test_the_error_says_where_in_the_value_the_problem_is(run: Run) -> None:
    with pytest.raises(NotSerializable, match=r"^result of tool .work. at step 0: \.a\[1\]\.b is a set, not"):
        run(lambda i: {"a": [1, {"b": {3}}]})


def test_refused_args_stop_before_the_intent_is_written(trace: Path) -> None:
    def plan(goal: Any, progress: list[Any]) -> Step:
        return Step(name="s", tool="work", args={"when": (1, 2)})

    with pytest.raises(NotSerializable, match="args"):
        Executor(planner=plan, tools={"work": counter()}, trace=trace).run("g")
    r = replay(trace)
    assert r.state == "PLAN" and not r.torn_tail


def test_a_refused_goal_writes_no_file(trace: Path, run: Run) -> None:
    with pytest.raises(NotSerializable, match="goal"):
        run(counter(), goal={"tags": {"a"}})
    assert not trace.exists()


def test_a_refused_llm_response_leaves_a_valid_trace(trace: Path) -> None:
    fake = FakeLLM([{"ideas": {"set"}}])

    def plan(goal: Any, progress: list[Any]) -> Step:
        harness.llm({"prompt": "next?"}, fake)
        return Step(name="s", tool="work")

    with pytest.raises(NotSerializable, match="response"):
        Executor(planner=plan, tools={"work": counter()}, trace=trace).run("g")
    assert replay(trace).state == "PLAN"


def test_values_at_the_edges_of_json_are_accepted(trace: Path, run: Run) -> None:
    edge = [2**64 - 1, -(2**63), 0.1, -0.0, 1e308, 5e-324, "é\u2028\x00", {"": None}, [], {}, True]
    run(lambda i: edge, n=1)
    assert replay(trace).checkpoints[0].result == edge


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=json_values)
def test_any_json_value_comes_back_equal_from_the_trace(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "any.jsonl"
    path.unlink(missing_ok=True)
    bare = Redaction(defaults=False)  # a generated key may be a secret's name ("DBPASS"): redaction is not tested here
    Executor(planner=fixed_plan(steps(1)), tools={"work": lambda i: value}, trace=path, redact=bare).run(value)
    r = replay(path)
    assert r.goal == value and r.checkpoints[0].result == value


class SyncSpy:
    """Calls the real fsync and remembers which file each call was for."""

    def __init__(self, real: Any, fail_at: int | None = None):
        self.real, self.fail_at, self.inodes = real, fail_at, []

    def __call__(self, fd: int) -> None:
        self.inodes.append(os.fstat(fd).st_ino)
        if len(self.inodes) == self.fail_at:
            raise OSError(errno.EIO, "Input/output error")
        self.real(fd)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> SyncSpy:
    spy = SyncSpy(os.fsync)
    monkeypatch.setattr(os, "fsync", spy)  # directories and set-aside files
    monkeypatch.setattr(journal_module, "_fsync", spy)  # the trace itself (fdatasync)
    return spy


def test_fsync_mode_syncs_once_per_step_and_writes_the_same_trace(tmp_path: Path, syncs: SyncSpy) -> None:
    flush, fsync = tmp_path / "flush.jsonl", tmp_path / "fsync.jsonl"
    Executor(planner=fixed_plan(steps(4)), tools={"work": counter()}, trace=flush).run("g")
    assert syncs.inodes.count(flush.stat().st_ino) == 1 + 1  # the header, the end and its seal: plain tools, flush
    sizes: list[int] = []

    def work(i: int) -> int:  # everything written so far is durable when a tool runs
        sizes.append(fsync.stat().st_size)
        assert syncs.inodes.count(fsync.stat().st_ino) == len(sizes) + 1
        return i

    Executor(planner=fixed_plan(steps(4)), tools={"work": work}, trace=fsync, durability="fsync").run("g")
    # the header, one sync before each of the 4 calls (its intent and all before it), the end and its seal
    assert syncs.inodes.count(fsync.stat().st_ino) == 1 + 4 + 1
    assert len(read_records(fsync)) == 2 + 3 * 4 + 2  # header, PLAN; 3 records a step; DONE, seal
    assert shape(fsync) == shape(flush)
    assert replay(fsync).state == "DONE"


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_creating_a_trace_fsyncs_its_directory(tmp_path: Path, syncs: SyncSpy, durability: str) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    Executor(planner=fixed_plan(steps(1)), tools={"work": counter()}, trace=folder / "t.jsonl",
             durability=durability).run("g")  # fmt: skip
    assert folder.stat().st_ino in syncs.inodes


def test_a_failed_fsync_stops_the_run_and_the_journal_accepts_nothing_more(trace: Path, syncs: SyncSpy) -> None:
    syncs.fail_at = 3
    tool = counter()
    with pytest.raises(JournalError, match="fsync failed"):
        Executor(planner=fixed_plan(steps(4)), tools={"work": tool}, trace=trace, durability="fsync").run("g")
    assert replay(trace).records == 3  # the directory, the header, then the first intent (with PLAN) failed to sync
    assert tool.calls == []


def test_after_a_failed_sync_the_journal_accepts_nothing_more(tmp_path: Path, syncs: SyncSpy) -> None:
    path = tmp_path / "j.jsonl"
    with Journal.open(path) as j:
        j.t0 = 0.0  # (no header: the records' clock starts at the epoch)
        syncs.fail_at = len(syncs.inodes) + 1
        with pytest.raises(JournalError, match="fsync failed"):
            j.append("event", {}, sync=True)
        with pytest.raises(JournalError, match="accepts nothing more"):  # never retried and trusted
            j.append("event", {})
    assert len(path.read_bytes().splitlines()) == 1


def test_a_full_disk_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """write(2) failing with ENOSPC on the trace's descriptor (as in test_faults: the bytes written are real)."""
    path = tmp_path / "j.jsonl"
    real = os.write
    with Journal.open(path) as j:
        j.t0 = 0.0  # (no header: the records' clock starts at the epoch)
        monkeypatch.setattr(os, "write", lambda fd, data: _enospc() if fd == j.fd else real(fd, data))
        with pytest.raises(JournalError, match=rf"{path}: write of seq 1 failed: the disk is full \(ENOSPC\)"):
            j.append("event", {})
    assert path.read_bytes() == b""


def _enospc() -> int:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_device_is_not_a_trace_to_write() -> None:
    """/dev/full once stood in for a full disk here; a trace is a regular file, for a writer too (issue 15)."""
    with pytest.raises(TraceUnreadable, match=r"/dev/full: is a character device, not a trace file.*nothing"):
        Executor(planner=fixed_plan(steps(1)), tools={"work": counter()}, trace="/dev/full").run("g")


def test_a_fifo_is_not_a_trace_to_write(tmp_path: Path) -> None:
    """Opened read-write, a FIFO would take the header and then block the run once its buffer filled."""
    fifo = tmp_path / "run.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(TraceUnreadable, match=r"is a FIFO \(named pipe\), not a trace file"):
        Executor(planner=fixed_plan(steps(1)), tools={"work": counter()}, trace=fifo).run("g")


def test_a_second_writer_is_refused_and_changes_nothing(trace: Path, run: Run) -> None:
    run(counter())
    before = trace.read_bytes()
    with Journal.open(trace), pytest.raises(TraceLocked, match=str(trace)):
        run(counter(), resume=True)
    assert trace.read_bytes() == before
