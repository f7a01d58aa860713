"""Write failures, in the style of SQLite's I/O-error tests.

For every N, the N-th write (or fsync) that touches the trace fails, once
("single") or from then on ("persistent"), or a write is cut short and the
next one fails ("short", what a filling disk does). N grows until a run
completes without reaching it. Each time: the run stopped with JournalError,
no tool ran after a record that was not acknowledged, replay() accepts what
is on disk (a torn tail at most) or resume=True sets a torn header aside,
and resuming with the fault gone finishes with each effect exactly once.
The injection wraps the real os.write and fsync and only counts calls on the
trace's own descriptors: the bytes that do reach the disk are real.

The last test needs no injection: a child process with a small
RLIMIT_FSIZE gets a real EFBIG from write(2), as a full disk would.
"""

from __future__ import annotations

import errno
import json
import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from children import ZYGOTE

import harness
import harness.trace.journal as journal_module
from harness import Executor, JournalError, Step, Tool, ToolError, TraceCorruption

REAL_WRITE, REAL_FSYNC, REAL_SYNC = os.write, os.fsync, journal_module._fsync
GOAL = "pay and log"
NAMES = ["read", "send", "charge", "log"]


class Faults:
    """Counts the writes and fsyncs that touch one trace (or its set-aside siblings) and fails the N-th."""

    def __init__(self, trace: Path, *, op: str, at: int, mode: str):
        self.trace, self.op, self.at, self.mode = str(trace), op, at, mode
        self.count = {"write": 0, "fsync": 0}
        self.fired = False
        self.synced = os.path.getsize(trace) if os.path.exists(trace) else 0  # trace bytes known synced

    def durable(self, seq: int) -> bool:
        """Whether the trace's line seq (seq == line number) was covered by a successful fsync."""
        with open(self.trace, "rb") as f:
            end = sum(len(line) for _, line in zip(range(seq), f, strict=False))
        return end <= self.synced

    def _ours(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith((self.trace, os.path.dirname(self.trace)))
        except OSError:
            return False

    def _due(self, op: str) -> bool:
        self.count[op] += 1
        n = self.count[op]
        return op == self.op and (n == self.at if self.mode == "single" else n >= self.at)

    def write(self, fd: int, data: Any) -> int:
        if not self._ours(fd):
            return REAL_WRITE(fd, data)
        if self._due("write"):
            if self.mode == "short" and not self.fired and len(data) > 1:
                self.fired = True
                return REAL_WRITE(fd, bytes(data[: len(data) // 2]))
            self.fired = True
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return REAL_WRITE(fd, data)

    def fsync(self, fd: int, real: Callable[[int], None] = REAL_FSYNC) -> None:
        if not self._ours(fd):
            return real(fd)
        if self._due("fsync"):
            self.fired = True
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)
        if os.readlink(f"/proc/self/fd/{fd}") == self.trace:
            self.synced = os.fstat(fd).st_size


@contextmanager
def injected(faults: Faults) -> Iterator[Faults]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "write", faults.write)
        mp.setattr(os, "fsync", faults.fsync)
        mp.setattr(journal_module, "_fsync", lambda fd: faults.fsync(fd, REAL_SYNC))
        yield faults


class World:
    """The external systems the run's tools act on, and the checks each call makes.

    `send` is idempotent (dedupes by key, and declines attempt 1 of each step
    with a ToolError, which promises no effect); `charge` is unsafe; `read`
    and `log` are plain callables. `emit` (in a child process) reports each
    effect to the parent as it happens.
    """

    def __init__(self, trace: Path, faults: Faults | None = None, emit: Callable[[dict[str, Any]], None] | None = None):
        self.trace, self.faults, self.emit = trace, faults, emit
        self.sent: dict[str, str] = {}
        self.charged: list[str] = []
        self.calls: list[str] = []
        self.durability = "flush"

    def effect(self, kind: str, value: str) -> None:
        if kind == "charge":
            self.charged.append(value)
        else:
            self.sent.setdefault(value, f"s{len(self.sent) + 1}")
        if self.emit:
            self.emit({"kind": kind, "value": value})
        if isinstance(self.faults, Power):  # the power may go right after an effect, before the tool returns
            self.faults.tick()

    def called(self, tool: str, args: dict[str, Any], key: str | None = None) -> None:
        """The checks every tool call makes: no failure seen, its intent on disk (and synced if declared)."""
        self.calls.append(tool)
        if self.faults is not None:
            assert not self.faults.fired, f"{tool} was called after a failed {self.faults.op}"
        rep = harness.replay(self.trace)
        assert rep.state == "ACT" and rep.tail.intent is not None, f"{tool} called in state {rep.state}"
        if self.faults is not None and (tool in ("send", "charge") or self.durability == "fsync"):
            assert self.faults.durable(rep.tail.intent["seq"]), f"{tool} was called before its intent was synced"
            assert self.faults.synced == os.path.getsize(self.trace), f"{tool} was called before all was synced"
        assert (rep.tail.intent["tool"], rep.tail.intent["args"], rep.tail.intent.get("key")) == (tool, args, key)

    def tools(self) -> dict[str, Any]:
        def read(*, q: str) -> dict[str, str]:
            self.called("read", {"q": q})
            return {"q": q}

        def send(*, to: str, idempotency_key: str) -> dict[str, str]:
            self.called("send", {"to": to}, idempotency_key)
            if idempotency_key.endswith("-1"):
                raise ToolError("busy, try again")
            if idempotency_key not in self.sent:
                self.effect("send", idempotency_key)
            return {"to": to, "receipt": self.sent[idempotency_key]}

        def charge(*, op: str, amount: int) -> dict[str, Any]:
            self.called("charge", {"op": op, "amount": amount})
            self.effect("charge", op)
            return {"op": op, "amount": amount}

        def log(*, line: str) -> str:
            self.called("log", {"line": line})
            return line

        return {"read": read, "send": Tool(send, idempotent=True), "charge": Tool(charge, idempotent=False), "log": log}

    def planner(self, goal: Any, done: list[Any]) -> Step | None:
        n = len(done)
        if n == 0:
            return Step("read", "read", {"q": "balance"})
        if n == 1:
            return Step("send", "send", {"to": "bob"})
        if n == 2:
            return Step("charge", "charge", {"op": "c1", "amount": 5})
        if n == 3:
            return Step("log", "log", {"line": f"done at {harness.random():.3f}"})  # a crossing record too
        return None

    def verifier(self, step: Step, result: Any) -> bool:
        if self.faults is not None:
            assert not self.faults.fired, "verified after a failed write"
        rep = harness.replay(self.trace)
        assert rep.state == "VERIFY" and rep.tail.last is not None
        return True

    def executor(self, *, resume: bool = False, durability: str | None = None) -> Executor:
        durability = self.durability = durability or self.durability
        return Executor(
            planner=self.planner, tools=self.tools(), verifier=self.verifier, trace=self.trace,
            resume=resume, durability=durability,
        )  # fmt: skip

    def finish(self) -> harness.Outcome:
        """Resume to the end, reconciling a pause on positive evidence: this world knows what happened."""
        for _ in range(3):
            out = self.executor(resume="auto").run(GOAL)
            if out.state != "PAUSED":
                return out
            assert out.pending is not None and out.pending["tool"] == "charge"
            op = out.pending["args"]["op"]
            if op in self.charged:
                harness.reconcile(self.trace, happened=True, result=out.pending["args"], evidence="charged")
            else:
                harness.reconcile(self.trace, happened=False, evidence="no charge")
        raise AssertionError("the run did not finish after three resumes")

    def check_done(self, out: harness.Outcome) -> None:
        assert out.state == "DONE", out
        assert [c.name for c in out.checkpoints] == NAMES
        assert len(self.sent) == 1 and self.charged == ["c1"]  # each effect exactly once
        assert out.checkpoints[1].result == {"to": "bob", "receipt": "s1"}
        assert out.checkpoints[2].result == {"op": "c1", "amount": 5}
        rep = harness.replay(self.trace)
        assert rep.complete and not rep.torn_tail


def check_stopped(trace: Path) -> None:
    """What a failed write leaves: a trace replay() accepts, or a header fragment."""
    data = trace.read_bytes() if trace.exists() else b""
    if b"\n" not in data:  # the header itself never made it
        if data:
            with pytest.raises(TraceCorruption) as e:
                harness.replay(trace)
            assert e.value.reason == "torn-header"
        return
    rep = harness.replay(trace)
    assert rep.torn_tail == (not data.endswith(b"\n"))


def inject_every(tmp_path: Path, op: str, mode: str, *, durability: str = "flush") -> int:
    """Fail the N-th op for N = 1, 2, ... until a run completes; returns how many Ns failed it."""
    n = 0
    while True:
        n += 1
        assert n < 200, "the run never completed"
        trace = tmp_path / f"{op}-{mode}-{n}" / "run.jsonl"
        trace.parent.mkdir()
        world = World(trace, Faults(trace, op=op, at=n, mode=mode))
        assert world.faults is not None
        with injected(world.faults):
            try:
                out = world.executor(durability=durability).run(GOAL)
            except JournalError as e:
                assert isinstance(e, harness.HarnessError) and str(trace) in str(e)
                assert world.faults.fired
            else:
                assert not world.faults.fired, "a failed write was acknowledged"
                world.check_done(out)
                return n - 1
        check_stopped(trace)
        tail = trace.read_bytes().rpartition(b"\n")[2] if trace.exists() else b""
        world.faults = None
        world.check_done(world.finish())
        aside = trace.with_name("run.jsonl.torn-1")
        assert (aside.read_bytes() if aside.exists() else b"") == tail  # a torn line is kept aside, not lost


@pytest.mark.parametrize(
    ("op", "mode", "durability"),
    [
        ("write", "single", "flush"),
        ("write", "persistent", "flush"),
        ("write", "short", "flush"),
        ("fsync", "single", "flush"),  # only declared tools' intents are synced
        ("fsync", "persistent", "flush"),
        ("fsync", "single", "fsync"),  # every intent is, and the end
        ("fsync", "persistent", "fsync"),
        ("write", "single", "fsync"),
        ("write", "short", "fsync"),
    ],
)
def test_every_failed_write_or_fsync_stops_the_run_and_resume_finishes_it(
    tmp_path: Path, op: str, mode: str, durability: str
) -> None:
    failed = inject_every(tmp_path, op, mode, durability=durability)
    assert failed >= ({"flush": 5, "fsync": 8}[durability] if op == "fsync" else 15)  # the run reaches that many


@pytest.mark.parametrize(("durability", "syncs"), [("flush", 1 + 1 + 1 + 1 + 1 + 1), ("fsync", 1 + 1 + 5 + 1)])
def test_a_clean_run_syncs_once_before_each_effect_it_must(tmp_path: Path, durability: str, syncs: int) -> None:
    """flush: the directory, the header, send's intent (declined), send's intent again, charge's intent, the end.
    fsync: the directory, the header, the five intents, the end (the terminal record and its seal: one write)."""
    trace = tmp_path / "run.jsonl"
    world = World(trace, Faults(trace, op="none", at=0, mode="single"))
    assert world.faults is not None
    with injected(world.faults):
        world.check_done(world.executor(durability=durability).run(GOAL))
    assert world.faults.count["fsync"] == syncs
    assert world.faults.synced == trace.stat().st_size  # the end and its seal are synced in either mode


# --- compound: a fault while resuming from a fault ---------------------------------------------


@pytest.mark.parametrize("mode", ["single", "short"])
@pytest.mark.parametrize("first", [1, 7, 12])
def test_a_fault_during_resume_is_survived_too(tmp_path: Path, first: int, mode: str) -> None:
    """The first run stops on a torn write; then every write of the resume fails in turn."""
    for n in range(1, 50):
        trace = tmp_path / f"{first}-{n}" / "run.jsonl"
        trace.parent.mkdir()
        world = World(trace, Faults(trace, op="write", at=first, mode="short"))
        assert world.faults is not None
        with injected(world.faults), pytest.raises(JournalError):
            world.executor().run(GOAL)
        tail = trace.read_bytes().rpartition(b"\n")[2]
        assert tail
        world.faults = Faults(trace, op="write", at=n, mode=mode)
        with injected(world.faults):
            try:
                out = world.finish()
            except JournalError:
                pass
            else:
                world.check_done(out)
                assert not world.faults.fired
                assert n > 3
                return
        check_stopped(trace)
        world.faults = None
        world.check_done(world.finish())
        assert trace.with_name("run.jsonl.torn-1").read_bytes() == tail  # set aside whole, whatever failed
    raise AssertionError("the resume never completed")


# --- power loss: the file goes back to what was synced ------------------------------------------


class PowerLoss(BaseException):
    """The machine lost power: nothing more reaches the disk, and this process is gone."""


class Power(Faults):
    """The trace's written and synced lengths at every moment; at the at-th event the power goes.

    Events are the writes and fsyncs that touch the trace and every effect a
    tool makes on the world. After the power goes, every write and fsync
    raises PowerLoss (the process is gone); `cut()` then leaves the file as a
    disk may hold it: its synced length, or a torn point between that and
    what was written (the page cache had it, the disk got part of it).
    """

    def __init__(self, trace: Path, *, at: int):
        super().__init__(trace, op="none", at=0, mode="single")
        self.at, self.events = at, 0

    def tick(self) -> None:
        if self.fired:
            raise PowerLoss
        self.events += 1
        if self.events == self.at:
            self.fired = True
            raise PowerLoss

    def _trace(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}") == self.trace
        except OSError:
            return False

    def write(self, fd: int, data: Any) -> int:
        if self._trace(fd):
            self.tick()
        return REAL_WRITE(fd, data)

    def fsync(self, fd: int, real: Callable[[int], None] = REAL_FSYNC) -> None:
        if self._trace(fd):
            self.tick()
        super().fsync(fd, real)

    def cut(self, rng: random.Random) -> int:
        """Truncate the trace to a length the disk may hold after the loss; returns it."""
        size = os.path.getsize(self.trace) if os.path.exists(self.trace) else 0
        low = min(self.synced, size)  # a truncation not yet synced may or may not have reached the disk
        keep = low if rng.random() < 0.5 else rng.randint(low, size)
        if os.path.exists(self.trace):
            os.truncate(self.trace, keep)
        return keep


def power_cycles(tmp_path: Path, seed: int) -> None:
    """One run through up to three power losses at random moments, then finished with the power on.

    Checks the rule at every tool call (World.called: the intent and, in fsync
    mode, the whole file synced before the call), and at the end the effect
    ledger: `send` (idempotent) took effect once whatever its calls, `charge`
    (unsafe) was called once, a pause reconciled from the world's truth, and
    the trace holds each acknowledged effect's result.
    """
    rng = random.Random(seed)
    durability = rng.choice(["flush", "fsync"])
    trace = tmp_path / f"{seed}" / "run.jsonl"
    trace.parent.mkdir()
    world = World(trace)
    world.durability = durability
    for cycle in range(rng.randint(1, 3)):
        world.faults = power = Power(trace, at=rng.randint(1, 40))
        with injected(power):
            try:
                out = world.executor(resume=cycle > 0).run(GOAL) if cycle == 0 else world.finish()
            except PowerLoss:
                power.cut(rng)
                continue
        assert not power.fired
        if durability == "fsync" or out.state == "PAUSED":  # what run() returned is durable
            assert power.synced == trace.stat().st_size, (seed, out.state)
        break
    world.faults = None
    if not trace.exists() or trace.stat().st_size == 0:  # the header never reached the disk: nothing ran
        assert world.calls == []
        trace.unlink(missing_ok=True)
        world.check_done(world.executor().run(GOAL))
        return
    world.check_done(world.finish())


@pytest.mark.parametrize("block", range(8))
def test_power_loss_at_random_moments_loses_and_repeats_no_acknowledged_effect(tmp_path: Path, block: int) -> None:
    for seed in range(block * 40, block * 40 + 40):
        power_cycles(tmp_path, seed)


# --- a real write failure: RLIMIT_FSIZE --------------------------------------------------------

CHILD = """
import json, resource, signal, sys
sys.path.insert(0, sys.argv[1])
import test_faults
from pathlib import Path
limit, trace = int(sys.argv[2]), Path(sys.argv[3])
world = test_faults.World(trace, emit=lambda e: print(json.dumps(e), flush=True))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so that write() fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    world.executor().run(test_faults.GOAL)
except test_faults.JournalError as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)}), flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize("limit", [60, 900, 1800, 2600])  # (the whole run writes about 2,700 bytes)
def test_a_real_file_size_limit_is_a_clean_stop(tmp_path: Path, limit: int) -> None:
    trace = tmp_path / "run.jsonl"
    proc = ZYGOTE.run(
        [sys.executable, "-c", CHILD, os.path.dirname(__file__), str(limit), str(trace)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert proc.returncode == 3, proc.stderr
    assert lines[-1]["error"] == "JournalError" and "File too large" in lines[-1]["message"]
    assert os.path.getsize(trace) <= limit
    check_stopped(trace)
    world = World(trace)
    for e in lines[:-1]:  # the effects the child made before it stopped
        world.effect(e["kind"], e["value"])
    world.check_done(world.finish())
