"""replay(): what a trace says happened, read without running anything, in bounded memory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import harness
from harness import Checkpoint, Executor, HarnessError, Step, replay
from harness.testing import FakeLLM, counter, fixed_plan, flaky, read_records, steps, write_trace

Run = Callable[..., harness.Outcome]  # the `run` fixture of conftest.py


def test_replay_rebuilds_the_run(trace: Path, run: Run) -> None:
    out = run(counter(), goal={"to": "four"})
    r = replay(trace)
    records = read_records(trace)
    assert (r.state, r.complete, r.torn_tail, r.resumes) == ("DONE", True, False, 0)
    assert (r.run_id, r.goal) == (out.run_id, {"to": "four"})
    # a checkpoint record makes two moves (VERIFY -> CHECKPOINT -> PLAN)
    kinds = [rec["kind"] for rec in records]
    moved = kinds.count("transition") + 2 * kinds.count("checkpoint")
    assert r.transitions == moved == 1 + 4 * 4 + 1
    assert r.records == r.last_seq == len(records)
    assert list(r.checkpoints) == list(out.checkpoints)
    assert [(c.step, c.name, c.result) for c in r.checkpoints] == [(i, f"step-{i}", {"i": i}) for i in range(4)]
    assert all(records[c.seq - 1]["kind"] == "checkpoint" for c in r.checkpoints)  # seq is the line number


def test_an_unfinished_run_is_not_complete(trace: Path, run: Run) -> None:
    with pytest.raises(RuntimeError):
        run(harness.testing.power_cut(at=1))
    r = replay(trace)
    assert (r.state, r.complete, len(r.checkpoints)) == ("ACT", False, 0)


def test_a_failed_run_is_complete(trace: Path, run: Run) -> None:
    run(flaky(9))
    r = replay(trace)
    assert (r.state, r.complete, len(r.checkpoints)) == ("FAILED", True, 0)


def test_checkpoints_behave_as_a_read_only_sequence(trace: Path, run: Run) -> None:
    run(counter())
    cks = replay(trace).checkpoints
    assert len(cks) == 4 and cks[-1].step == 3 and [c.step for c in cks[1:3]] == [1, 2]
    assert isinstance(cks[0], Checkpoint) and cks == list(cks)
    with pytest.raises(IndexError):
        cks[4]


def test_a_trace_changed_after_replay_is_caught_when_its_records_are_read(trace: Path, run: Run) -> None:
    run(counter())
    r = replay(trace)
    trace.write_bytes(trace.read_bytes().replace(b'"result":{"i":2}', b'"result":{"i":9}'))
    with pytest.raises(HarnessError, match="changed after it was replayed"):
        list(r.checkpoints)


def test_crossings_made_by_the_planner_are_listed_in_order(trace: Path) -> None:
    fake = FakeLLM(lambda request: f"do {request['next']}")

    def plan(goal: Any, progress: list[Any]) -> Step | None:
        harness.now()
        harness.random()
        harness.llm({"next": len(progress)}, fake)
        return fixed_plan(steps(2))(goal, progress)

    def work(i: int) -> dict[str, Any]:
        return {"i": i, "at": harness.now().isoformat()}  # inside a tool call: the tool's own business

    Executor(planner=plan, tools={"work": work}, trace=trace).run("g")
    crossings = list(replay(trace).crossings)
    assert [c.kind for c in crossings] == ["now", "random", "llm", "tool"] * 2 + ["now", "random", "llm"]
    records = read_records(trace)
    assert sum(rec["kind"] == "crossing" for rec in records) == 9  # the tools' clock reads are not among them
    for c in crossings:
        assert c.seq == c.line and records[c.seq - 1]["seq"] == c.seq and c.error is None
    now, rnd, llm, tool = crossings[:4]
    assert now.request is None and datetime.fromtimestamp(now.response) and 0 <= rnd.response < 1
    assert (llm.request, llm.response) == ({"next": 0}, "do 0")
    assert tool.request == {"tool": "work", "args": {"i": 0}} and tool.response["i"] == 0
    assert records[tool.seq - 1]["from"] == "ACT" and len(tool.hash) == 16


def test_a_failed_crossing_records_its_error(trace: Path) -> None:
    def broken(request: Any) -> Any:
        raise TimeoutError("the model did not answer")

    def plan(goal: Any, progress: list[Any]) -> Step | None:
        harness.llm("hi", broken)
        return None

    with pytest.raises(TimeoutError):
        Executor(planner=plan, tools={}, trace=trace).run("g")
    (c,) = replay(trace).crossings
    assert (c.kind, c.response) == ("llm", None)
    assert c.error == {"type": "builtins.TimeoutError", "message": "the model did not answer"}


def big_trace(path: Path, n_steps: int, template: list[dict[str, Any]]) -> None:
    """A valid trace of n_steps steps, built from the records of a real one-step run."""
    head, step, tail = template[:2], template[2:5], template[5:]

    def records() -> Iterator[dict[str, Any]]:
        yield from head
        for i in range(n_steps):
            for rec in step:
                yield {**rec, "step": i} if "args" not in rec else {**rec, "step": i, "args": {"i": i}}
        yield {**tail[0], "step": n_steps}  # DONE; the seal of the one-step run would not fit

    write_trace(path, ({**rec, "seq": n} for n, rec in enumerate(records(), start=1)))


PEAK = """
import resource, sys
from harness import replay
try:  # Linux: reset the high-water mark, so that the imports' own peak cannot hide replay()'s
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:
    reset = False
r = replay(sys.argv[1])
assert r.state == "DONE", r.state
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if reset:
    peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(r.records, peak)
"""


def replay_peak_kb(path: Path) -> tuple[int, int]:
    """(records, peak RSS in kB while replaying) of a fresh process that replays path."""
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True, text=True, check=True)
    records, kb = out.stdout.split()
    return int(records), int(kb)


def test_replay_streams_memory_does_not_grow_with_the_trace(tmp_path: Path, trace: Path, run: Run) -> None:
    run(counter(), n=1)
    template = read_records(trace)
    assert [r.get("to", r["kind"]) for r in template[2:]] == ["ACT", "VERIFY", "checkpoint", "DONE", "seal"]
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    big_trace(small, 10, template)
    big_trace(large, 60_000, template)
    small_records, small_kb = replay_peak_kb(small)
    large_records, large_kb = replay_peak_kb(large)
    assert large_records > 180_000 and large.stat().st_size > 20_000_000
    # replay() keeps a file position per checkpoint and two per tool crossing (56 bytes a step, 3.4 MB
    # here) and reads 64 KiB at a time; keeping the records themselves would take hundreds of MB
    growth = large_kb - small_kb
    assert growth < 12 * 1024, f"{small_records} records: {small_kb} kB; {large_records}: {large_kb} kB"


TWICE = """
import sys
from harness import replay
def peak():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
r = replay(sys.argv[1])
first = peak()
del r
r = replay(sys.argv[1])
print(first, peak())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc")
def test_a_second_replay_in_one_process_reuses_the_first_ones_memory(tmp_path: Path, trace: Path, run: Run) -> None:
    """`harness diff A B` replays twice: the positions of the first, freed, are reused by the second."""
    run(counter(), n=1)
    large = tmp_path / "large.jsonl"
    big_trace(large, 60_000, read_records(trace))
    out = subprocess.run([sys.executable, "-c", TWICE, str(large)], capture_output=True, text=True, check=True)
    first, second = map(int, out.stdout.split())
    # the positions take 3.4 MB here: a second replay that could not reuse them would add as much or more
    assert second - first < 1024, f"peak {first} kB after one replay, {second} kB after two"


def test_positions_read_back_across_their_blocks(tmp_path: Path, trace: Path, run: Run) -> None:
    """Crossings and checkpoints past the first blocks of positions read back by index and in order."""
    from harness.trace.reader import _ROWS  # rows of positions per block

    run(counter(), n=1)
    large = tmp_path / "large.jsonl"
    n = 2 * _ROWS + 100
    big_trace(large, n, read_records(trace))
    r = replay(large)
    crossings, checkpoints = list(r.crossings), list(r.checkpoints)
    assert len(crossings) == len(checkpoints) == n
    for i in (0, _ROWS - 1, _ROWS, 2 * _ROWS - 1, 2 * _ROWS, n - 1, -1):
        assert r.crossings[i] == crossings[i] and r.checkpoints[i] == checkpoints[i]
    assert [c.step for c in checkpoints] == list(range(n))
    around = range(_ROWS - 3, _ROWS + 3)
    assert [c.request["args"] for c in crossings[around.start : around.stop]] == [{"i": i} for i in around]
