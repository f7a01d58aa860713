"""Files that are not traces get a clear error naming the file, and are left exactly as they were."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import harness
from harness import Executor, HarnessError, TraceCorruption, TraceUnreadable, replay, rerun
from harness.testing import counter, fixed_plan, steps

HEADER = b'{"seq":1,"kind":"header","schema":1'
NOT_TRACES: dict[str, tuple[Callable[[Path], None], str]] = {
    "binary": (lambda p: p.write_bytes(bytes(range(256)) * 64), "not-a-trace"),
    "JSON array": (lambda p: p.write_bytes(b'[{"seq":1,"kind":"header"}]\n'), "not-a-trace"),
    "plain JSONL": (lambda p: p.write_bytes(b'{"seq":1,"kind":"header","schema":1}\n{"seq":2}\n'), "malformed"),
    "text": (lambda p: p.write_text("hello\nworld\n"), "not-a-trace"),
    "no newline at all": (lambda p: p.write_bytes(b"hello"), "not-a-trace"),
    "CRLF": (lambda p: p.write_bytes(b'{"seq":1,"kind":"header","crc":"00000000"}\r\n'), "crlf"),
    "NUL bytes": (lambda p: p.write_bytes(b"\x00" * 4096 + b"\n"), "not-a-trace"),
    "huge line": (lambda p: p.write_bytes(b"x" * (20 << 20)), "line-too-long"),
    "huge header line": (lambda p: p.write_bytes(HEADER + b"x" * (20 << 20) + b"\n"), "line-too-long"),
}


def assert_clear(e: BaseException, path: Path) -> None:
    assert isinstance(e, HarnessError) and str(path) in str(e)
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__)  # no chained traceback


@pytest.mark.parametrize("make", NOT_TRACES, ids=NOT_TRACES.keys())
def test_replay_refuses_a_file_that_is_not_a_trace(trace: Path, make: str) -> None:
    build, reason = NOT_TRACES[make]
    build(trace)
    before = trace.read_bytes()
    with pytest.raises(TraceCorruption) as info:
        replay(trace)
    assert_clear(info.value, trace)
    assert (info.value.reason, info.value.line) == (reason, 1)
    assert trace.read_bytes() == before


@pytest.mark.parametrize("make", NOT_TRACES, ids=NOT_TRACES.keys())
def test_resume_refuses_a_file_that_is_not_a_trace_and_leaves_it(trace: Path, make: str) -> None:
    NOT_TRACES[make][0](trace)
    before = trace.read_bytes()
    tool = counter()
    with pytest.raises(TraceCorruption) as info:
        Executor(planner=fixed_plan(steps(1)), tools={"work": tool}, trace=trace, resume=True).run("g")
    assert_clear(info.value, trace)
    assert trace.read_bytes() == before and tool.calls == []
    assert list(trace.parent.iterdir()) == [trace]  # nothing set aside either


def test_a_directory(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="is a directory") as info:
        replay(tmp_path)
    assert_clear(info.value, tmp_path)
    with pytest.raises(HarnessError, match="is a directory") as info:
        Executor(planner=fixed_plan([]), tools={}, trace=tmp_path, resume=True).run("g")
    assert_clear(info.value, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_file(trace: Path) -> None:
    trace.write_bytes(b"")
    with pytest.raises(HarnessError, match="is empty") as info:
        replay(trace)
    assert_clear(info.value, trace)
    assert trace.read_bytes() == b""


def test_a_missing_file(trace: Path) -> None:
    with pytest.raises(HarnessError, match="no such file") as info:
        replay(trace)
    assert_clear(info.value, trace)
    assert not trace.exists()


def test_a_missing_directory_for_a_new_trace_says_so_and_not_to_resume(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "run.jsonl"
    with pytest.raises(TraceUnreadable) as info:
        Executor(planner=fixed_plan([]), tools={}, trace=path).run("g")
    assert_clear(info.value, path)
    assert (info.value.path, info.value.problem) == (
        str(path),
        f"its folder {tmp_path / 'no' / 'such'} does not exist; nothing was written. "
        "Create the folder, or choose another path",
    )
    assert "resume" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_rerun_out_in_a_missing_directory_says_so_and_leaves_nothing(trace: Path, tmp_path: Path) -> None:
    Executor(planner=fixed_plan(steps(1)), tools={"work": counter()}, trace=trace).run("g")
    out = tmp_path / "no" / "such" / "x.jsonl"
    with pytest.raises(TraceUnreadable, match=r"x\.jsonl: its folder .*/no/such does not exist; nothing was written"):
        rerun(trace, planner=fixed_plan(steps(1)), tools={"work": counter()}, out=out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


@pytest.mark.parametrize(
    "call",
    [
        lambda p: harness.reconcile(p, happened=False),
        lambda p: harness.list_runs(p),
    ],
    ids=["reconcile", "list_runs"],
)
def test_a_file_or_folder_that_is_not_there_is_trace_unreadable_with_path_and_problem(
    tmp_path: Path, call: Callable[[Path], object]
) -> None:
    path = tmp_path / "missing"
    with pytest.raises(TraceUnreadable) as info:
        call(path)
    assert_clear(info.value, path)
    assert info.value.path == str(path) and info.value.problem.startswith("no such")
    assert not path.exists()


def test_a_huge_line_in_a_valid_trace_is_named_by_its_line(trace: Path) -> None:
    Executor(planner=fixed_plan(steps(1)), tools={"work": counter()}, trace=trace).run("g")
    with trace.open("ab") as f:
        f.write(b"y" * (20 << 20) + b"\n")
    with pytest.raises(TraceCorruption) as info:
        replay(trace)
    assert (info.value.reason, info.value.line) == ("line-too-long", 8)  # after 7 lines: the run and its seal


# VmHWM, the peak of the child's own address space: ru_maxrss would also count the pages of the parent (a
# pytest worker that ran the S3 and Ray tests holds 200+ MB), which Linux carries into the child's figure
# when subprocess forks (vfork) and execs; bench/run.py and test_replay.py read it the same way
HUGE = """
import sys
from harness import TraceCorruption, replay
try:
    replay(sys.argv[1])
except TraceCorruption as e:
    with open("/proc/self/status") as f:
        print(e.reason, next(line.split()[1] for line in f if line.startswith("VmHWM:")))
"""


def test_a_huge_line_is_refused_without_reading_the_whole_file(trace: Path) -> None:
    with trace.open("wb") as f:
        f.truncate(400 << 20)  # 400 MB of NUL bytes, no newline (sparse: no disk used)
    out = subprocess.run([sys.executable, "-c", HUGE, str(trace)], capture_output=True, text=True, check=True)
    reason, peak_kb = out.stdout.split()
    assert reason == "line-too-long"
    assert int(peak_kb) < 200 * 1024  # far less than the file: it stopped once the line passed the limit
