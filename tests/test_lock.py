"""One writer per trace: a second writer fails at once, readers never wait, a killed writer leaves no lock.

The live writer is real: a thread of this process, or a child process, held
inside a tool (so its journal is open) until the test lets it go or kills it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import harness
from harness import Executor, Step, Tool, TraceExists, TraceLocked
from harness.cli import main
from harness.trace.journal import Journal

STEPS = [Step("one", "hold", {"n": 1}), Step("two", "hold", {"n": 2})]


def planner(goal: Any, done: list[Any]) -> Step | None:
    return STEPS[len(done)] if len(done) < len(STEPS) else None


# the child: a writer that says when it is inside the first tool call, then waits to be killed
CHILD = """
import sys, time
import harness
def hold(n):
    if n == 1:
        print("holding", flush=True)
        time.sleep(600)
    return n
steps = [harness.Step("one", "hold", {"n": 1}), harness.Step("two", "hold", {"n": 2})]
ex = harness.Executor(planner=lambda g, d: steps[len(d)] if len(d) < 2 else None,
                      tools={"hold": hold}, trace=sys.argv[1])
ex.run("goal")
"""


class Held:
    """A writer running in a thread, stopped inside its first tool call."""

    def __init__(self, path: Path):
        self.inside, self.release = threading.Event(), threading.Event()
        self.outcome: harness.Outcome | None = None
        self.thread = threading.Thread(target=self._run, args=(path,))
        self.thread.start()
        assert self.inside.wait(30), "the writer thread never reached its tool"

    def hold(self, n: int) -> int:
        if n == 1:
            self.inside.set()
            self.release.wait(30)
        return n

    def _run(self, path: Path) -> None:
        self.outcome = Executor(planner=planner, tools={"hold": self.hold}, trace=path).run("goal")

    def finish(self) -> harness.Outcome:
        self.release.set()
        self.thread.join(30)
        assert self.outcome is not None
        return self.outcome


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Held]:
    writer = Held(tmp_path / "run.jsonl")
    yield writer
    writer.release.set()
    writer.thread.join(30)


def attempts(path: Path) -> dict[str, Any]:
    """Every way of writing to path; each must fail with TraceLocked while a writer lives."""
    return {
        "new run": lambda: Executor(planner=planner, tools={"hold": int}, trace=path).run("goal"),
        "resume": lambda: Executor(planner=planner, tools={"hold": int}, trace=path, resume=True).run("goal"),
        "resume, other goal": lambda: Executor(planner=planner, tools={"hold": int}, trace=path, resume=True).run("x"),
        "resume, other tools": lambda: Executor(
            planner=planner, tools={"other": Tool(int, idempotent=False)}, trace=path, resume=True
        ).run("goal"),
        "reconcile": lambda: harness.reconcile(path, happened=False),
        "journal": lambda: Journal.open(path),
    }


def test_a_second_writer_in_another_thread_fails_at_once(tmp_path: Path, held: Held) -> None:
    path = tmp_path / "run.jsonl"
    before = path.read_bytes()
    for what, attempt in attempts(path).items():
        # TraceLocked, not TraceExists / ResumeMismatch / "no uncertain operation": the lock comes first
        with pytest.raises(TraceLocked) as e:
            attempt()
        assert e.value.path == str(path), what
        assert isinstance(e.value, harness.HarnessError)
        assert path.read_bytes() == before, what
    assert held.finish().state == "DONE"
    # the lock went with the writer: the same calls now get past it
    with pytest.raises(TraceExists):
        attempts(path)["new run"]()
    with Journal.open(path):
        pass


def test_readers_need_no_lock(tmp_path: Path, held: Held) -> None:
    path = tmp_path / "run.jsonl"
    rep = harness.replay(path)
    assert rep.state == "ACT" and rep.tail.intent is not None and rep.tail.intent["args"] == {"n": 1}
    assert held.finish().state == "DONE"


def test_only_one_of_many_racing_writers_gets_a_new_trace(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    start, inside, release = threading.Barrier(8), threading.Event(), threading.Event()
    results: list[Any] = []

    def hold(n: int) -> int:
        inside.set()
        release.wait(30)
        return n

    def writer() -> None:
        start.wait(30)
        try:
            results.append(Executor(planner=planner, tools={"hold": hold}, trace=path).run("goal").state)
        except harness.HarnessError as e:
            results.append(type(e).__name__)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    assert inside.wait(30)
    while len(results) < 7 and any(t.is_alive() for t in threads):
        threads[0].join(0.01)
    release.set()
    for t in threads:
        t.join(30)
    # TraceExists only for a writer that came after the winner had finished, and the winner holds it until then
    assert sorted(results) == ["DONE"] + ["TraceLocked"] * 7
    assert harness.replay(path).complete


def child(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "holding\n":
        proc.kill()
        proc.wait()
        raise AssertionError(f"the child writer did not start: {line!r}")
    return proc


def test_a_second_writer_in_another_process_fails_at_once(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    proc = child(path)
    try:
        before = path.read_bytes()
        for what, attempt in attempts(path).items():
            with pytest.raises(TraceLocked):
                attempt()
            assert path.read_bytes() == before, what
        assert harness.replay(path).state == "ACT"  # a reader, while the writer lives
        for argv in (["show", str(path)], ["replay", str(path)], ["diff", str(path), str(path)]):
            assert main(argv) == 0, argv  # the reading commands neither wait nor fail
        assert path.read_bytes() == before
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_writer_leaves_no_stale_lock(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    proc = child(path)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert harness.replay(path).state == "ACT"
    calls: list[int] = []
    out = Executor(planner=planner, tools={"hold": lambda n: calls.append(n) or n}, trace=path, resume=True).run("goal")
    assert out.state == "DONE" and calls == [1, 2]
    assert [c.result for c in out.checkpoints] == [1, 2]


# a process forked while the lock is held shares the locked descriptor until it execs (or for its life, if it never
# does): killed then, the writer's lock would outlive it. The harness itself must fork nothing while it writes.
NO_SPAWN = """
import subprocess, sys
spawned = []
real = subprocess.Popen.__init__
def spy(self, *args, **kwargs):
    spawned.append(args[0] if args else kwargs.get("args"))
    real(self, *args, **kwargs)
subprocess.Popen.__init__ = spy
import harness
step = harness.Step("one", "hold", {"n": 1})
ex = harness.Executor(planner=lambda g, d: None if d else step, tools={"hold": lambda n: n}, trace=sys.argv[1])
out = ex.run("g")
assert out.state == "DONE", out
print(spawned)
"""


def test_the_writer_spawns_no_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", NO_SPAWN, str(tmp_path / "run.jsonl")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
