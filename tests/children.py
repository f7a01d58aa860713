"""Child processes for crash tests: wait until one reaches a point (it creates a marker file), SIGKILL it there.

Children are fresh interpreters (subprocess), or, where importing their agent costs seconds (the frameworks, the
MCP SDK), processes forked from a forkserver that imported it once (`forked()`): a real process still, killed
for real, and one that never lived through the crash it resumes from.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


# What the forkserver imports once: the agents whose imports cost seconds (one forkserver per process serves both).
PRELOAD = ["framework_agent", "mcp_agent"]
FORKSERVER = multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload(PRELOAD)


def forked(target: Any, *args: Any) -> Any:
    """A started process running target(*args), forked from the forkserver (started with PRELOAD imported).

    Python 3.11's forkserver drops the sys.path it is handed before its preload, and a preload that fails to import
    is skipped without a word: every child then imported the frameworks itself (about 10 s of CPU each). The
    forkserver inherits the environment, so PYTHONPATH, set while it starts, finds the agents in tests/.
    """
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parent), saved) if p)
    try:
        multiprocessing.forkserver.ensure_running()  # (once: it keeps running)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved
    child = FORKSERVER.Process(target=target, args=args)
    child.start()
    return child


def finished(child: Any, what: str = "the child") -> None:
    """Wait for a forked child to end (a hang guard, not a timing assertion); fail unless it exited 0."""
    child.join(300)
    if child.is_alive():
        child.kill()
        pytest.fail(f"{what} did not finish")
    assert child.exitcode == 0, f"{what} failed: exit {child.exitcode}"


def kill_when(arrived: Any, child: Any) -> None:
    """SIGKILL a forked child once `arrived()` is true (a marker file, a held request); reaped whatever happens."""
    deadline = time.monotonic() + 120
    try:
        while not arrived():
            if not child.is_alive():
                pytest.fail(f"the child ended (exit {child.exitcode}) before the kill point")
            if time.monotonic() > deadline:
                pytest.fail("the child never reached the kill point")
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.join()
    assert child.exitcode == -signal.SIGKILL
