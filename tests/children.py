"""Child processes for crash tests: wait until one reaches a point (it creates a marker file), SIGKILL it there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def wait_for(marker: Path, child: subprocess.Popen[bytes], what: str = "the handshake") -> None:
    """Return once the child has created marker; fail the test if it ends first or never gets there."""
    deadline = time.monotonic() + 120  # a hang guard for the handshake, not a timing assertion
    while not marker.exists():
        if child.poll() is not None:
            pytest.fail(f"the child ended before {what}: {(child.communicate()[1] or b'').decode(errors='replace')}")
        if time.monotonic() > deadline:
            pytest.fail(f"the child never reached {what}")
        time.sleep(0.01)


def kill_at(marker: Path, child: subprocess.Popen[bytes], what: str = "the handshake") -> None:
    """wait_for(), then SIGKILL the child there; it is reaped whatever happens."""
    try:
        wait_for(marker, child, what)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()


_STEPS = """
import os, sys, time
from pathlib import Path
from harness import Executor, Step

trace, marker, steps, at, pad = sys.argv[1], Path(sys.argv[2]), *map(int, sys.argv[3:])

def plan(goal, progress):
    return None if len(progress) >= steps else Step(f"s{len(progress)}", "work", {"i": len(progress)})

def work(i):
    if i == at:
        Path(f"{marker}.tmp").write_text(str(os.getpid()))
        os.replace(f"{marker}.tmp", marker)  # tell the parent (atomically) we are inside call `at`
        time.sleep(600)  # and wait for the SIGKILL
    return {"i": i, "pad": "x" * pad}

Executor(planner=plan, tools={"work": work}, trace=trace).run("g")
"""


def kill_in_call(trace: Path, marker: Path, *, steps: int, at: int, pad: int) -> int:
    """Run `steps` steps of `work` (results padded with `pad` bytes) in a child, SIGKILL it inside call `at`.

    Returns the child's exit status (-SIGKILL).
    """
    args = [str(trace), str(marker), str(steps), str(at), str(pad)]
    child = subprocess.Popen([sys.executable, "-c", _STEPS, *args], stderr=subprocess.PIPE)
    kill_at(marker, child, f"call {at}")
    return child.returncode
