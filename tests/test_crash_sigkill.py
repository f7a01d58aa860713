"""A real crash: a child process running an executor is SIGKILLed mid-run; the parent finishes the run."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from children import ZYGOTE, kill_at

from harness import Executor, replay
from harness.testing import counter, fixed_plan, read_records, steps

CHILD = """
import os, sys, time
from pathlib import Path
from harness import Executor
from harness.testing import fixed_plan, steps

trace, marker, durability = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

def work(i):
    if i == 2:
        Path(f"{marker}.tmp").write_text(str(os.getpid()))
        os.replace(f"{marker}.tmp", marker)  # tell the parent (atomically) we are inside the third call
        time.sleep(600)  # and wait for the SIGKILL
    return {"i": i}

Executor(planner=fixed_plan(steps(4)), tools={"work": work}, trace=trace, durability=durability).run("four steps")
"""


def start_and_kill_in_third_call(tmp_path: Path, trace: Path, durability: str) -> None:
    marker = tmp_path / "inside-step-2"
    child = ZYGOTE.Popen(
        [sys.executable, "-c", CHILD, str(trace), str(marker), durability],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    kill_at(marker, child, "its third tool call")
    assert marker.read_text() == str(child.pid)
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("durability", ["flush", "fsync"])
def test_a_sigkilled_run_is_finished_by_another_process(tmp_path: Path, trace: Path, durability: str) -> None:
    start_and_kill_in_third_call(tmp_path, trace, durability)
    r = replay(trace)
    assert (r.state, len(r.checkpoints), r.torn_tail) == ("ACT", 2, False)
    intent = read_records(trace)[-1]
    assert (intent["to"], intent["step"], intent["args"]) == ("ACT", 2, {"i": 2})  # written before the call

    tool = counter()
    ex = Executor(planner=fixed_plan(steps(4)), tools={"work": tool}, trace=trace, resume=True, durability=durability)
    out = ex.run("four steps")  # the dead child's lock went with it
    assert out.state == "DONE" and tool.calls == [{"i": 2}, {"i": 3}]
    r = replay(trace)
    assert (r.state, r.resumes, [c.result for c in r.checkpoints]) == ("DONE", 1, [{"i": i} for i in range(4)])
    assert [rec["seq"] for rec in read_records(trace)] == list(range(1, r.records + 1))


def test_the_quick_start_example_loses_power_resumes_and_replays(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "quickstart.py"
    trace = tmp_path / "tea.jsonl"
    out = subprocess.run(
        [sys.executable, str(example), str(trace)], capture_output=True, text=True
    )  # as a user runs it
    assert out.returncode == 0, out.stderr
    assert "power cut (SIGKILL)" in out.stdout and "2 verified checkpoints" in out.stdout
    assert "DONE, 4 checkpoints, 1 resume" in out.stdout
    r = replay(trace)
    assert (r.state, len(r.checkpoints), r.resumes) == ("DONE", 4, 1)
