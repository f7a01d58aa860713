"""Random-kill soak: child runs killed with SIGKILL at a seeded random moment, then resumed.

Each child runs a 12-step plan over three tools: `send` (idempotent, one
ledger row per key), `charge` (unsafe, one ledger row per call) and `note`
(plain; one note carries a 4 MB argument, and a kill during that write
leaves a torn line, since the kernel stops a large write at a fatal signal).
Before step 4 the planner asks a human to approve the note's text
(`harness.interrupt`): the run pauses, and the child resumes it at once
with the answer. The child reports each checkpoint once it is written. The
parent kills it after a seeded random delay (a third of the runs: a delay
over the whole run; a third: a few milliseconds after the big record is
planned; a third: after the question, while the answer is brought), then
checks: replay() accepts the killed file (a torn tail at most, a torn
header if it died creating the file), every reported checkpoint is in the
file, and resuming finishes the run with exactly one ledger row per `send`
and per `charge`, the question asked and answered once, and the approved
text in step 4's result. A pause on the question gets the answer again (a
kill may have torn the write that carried it); a pause on an operation is
reconciled from the ledger: a row proves the call happened; no row, with
the only writer dead, proves it did not.

Children are forked by a small server process (this file, run as a script)
that has harness already imported, so a kill costs milliseconds, not an
interpreter start. Each child waits to be killed even when it finished, so
the pid the parent kills is never reused. This module imports no pytest.

HARNESS_SOAK_KILLS sets the number of kills (default 50), HARNESS_SOAK_SEED
the seed (default 5).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import harness
from harness import Executor, Step, Tool, TraceCorruption
from harness.testing import read_records

STEPS = 12
GOAL = "soak"
BIG = "y" * (4 << 20)  # (not "x": each x may start a token (xoxb-...), and the secret search tries it: 6x slower)
BIG_STEP = 7
ASK_STEP = 4  # a note whose text a human approves first
APPROVED = "approved by a human"


class Ledger:
    """The external system: one row per effect; idempotent effects carry their UNIQUE key."""

    def __init__(self, path: Path | str):
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.db.execute("PRAGMA synchronous = OFF")  # a killed process loses no commit; power loss is not tested here
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, key TEXT UNIQUE, op TEXT, receipt TEXT)"
        )

    def add(self, op: str, key: str | None) -> dict[str, Any]:
        receipt = uuid.uuid4().hex[:12]
        cur = self.db.execute(
            "INSERT INTO effects (key, op, receipt) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING", (key, op, receipt)
        )
        if key is None:
            return {"receipt": receipt, "row": cur.lastrowid}
        row = self.db.execute("SELECT id, receipt FROM effects WHERE key = ?", (key,)).fetchone()
        return {"receipt": row[1], "row": row[0]}

    def rows(self) -> list[tuple[str | None, str, str, int]]:
        return list(self.db.execute("SELECT key, op, receipt, id FROM effects ORDER BY id"))


def step(n: int) -> Step | None:
    if n >= STEPS:
        return None
    if n == ASK_STEP:
        text = harness.interrupt({"approve": f"note-{n}"})
        return Step(f"note-{n}", "note", {"n": n, "text": text})
    if n % 3 == 0:
        return Step(f"send-{n}", "send", {"to": f"peer-{n}"})
    if n % 3 == 1:
        return Step(f"note-{n}", "note", {"n": n, "text": BIG if n == BIG_STEP else "short"})
    return Step(f"charge-{n}", "charge", {"op": f"charge-{n}"})


def tools(ledger: Ledger) -> dict[str, Any]:
    def send(*, to: str, idempotency_key: str) -> dict[str, Any]:
        return ledger.add(f"send:{to}", idempotency_key)

    def charge(*, op: str) -> dict[str, Any]:
        return ledger.add(op, None)

    def note(*, n: int, text: str) -> dict[str, Any]:
        return {"n": n, "size": len(text), "head": text[:32]}

    return {"send": Tool(send, idempotent=True), "charge": Tool(charge, idempotent=False), "note": note}


# --- the child, and the server that forks it -------------------------------------------------


def say(line: str) -> None:
    os.write(1, line.encode() + b"\n")  # unbuffered: nothing said is lost in a buffer at the kill


def child(folder: str) -> None:
    ledger = Ledger(os.path.join(folder, "ledger.sqlite"))
    seen = 0

    def planner(goal: Any, done: list[harness.Checkpoint]) -> Step | None:
        nonlocal seen
        for c in done[seen:]:  # the planner runs after each checkpoint is written
            say(f"checkpoint {c.step} {c.seq}")
        seen = len(done)
        if len(done) == BIG_STEP:
            say("big")
        return step(len(done))

    trace = os.path.join(folder, "trace.jsonl")
    say("start")
    out = Executor(planner=planner, tools=tools(ledger), trace=trace).run(GOAL)
    if out.state == "PAUSED":  # the question: a human answers at once
        say("asked")
        Executor(planner=planner, tools=tools(ledger), trace=trace, resume=True).run(GOAL, answer=APPROVED)
    say("done")


def serve() -> None:
    """Read a folder per line; fork a child run there; report its pid and, once reaped, its status."""
    server = os.getpid()
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                child(line.strip())
            except BaseException:
                say("error " + traceback.format_exc().replace("\n", " | "))
            deadline = time.monotonic() + 60  # in case the test itself died
            while os.getppid() == server and time.monotonic() < deadline:  # wait for the kill: no pid reuse
                time.sleep(0.005)
            os._exit(1)
        say(f"pid {pid}")
        _, status = os.waitpid(pid, 0)
        say(f"exit {status}")


class Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.heard: dict[str, float] = {}  # when each line of the last run arrived (for calibration)

    def line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the soak server died"
        return line.rstrip("\n")

    def run(self, folder: Path, *, delay: float, after: str) -> list[str]:
        """Fork a run in folder, SIGKILL it `delay` seconds after it says `after`; return what it said."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{folder}\n")
        said: list[str] = []
        self.heard = {}
        pid = None
        while pid is None or after not in said:
            line = self.line()
            self.heard[line] = time.monotonic()
            if line.startswith("pid "):
                pid = int(line[4:])
            elif line.startswith("error"):
                break
            else:
                said.append(line)
        if line.startswith("error"):
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"the child run failed: {line}")
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        while not (line := self.line()).startswith("exit "):
            said.append(line)  # said before the kill, read after it
        status = int(line[5:])
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        return said

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:  # stuck on a child: killing the server frees the child too
            self.proc.kill()
            self.proc.wait()


# --- the parent's checks --------------------------------------------------------------------


def finish(folder: Path) -> harness.Outcome:
    """Resume to the end; a pause on the question is answered, one on an operation reconciled from the ledger."""
    trace = folder / "trace.jsonl"
    ledger = Ledger(folder / "ledger.sqlite")
    answer: dict[str, Any] = {}
    for _ in range(5):
        ex = Executor(planner=lambda g, d: step(len(d)), tools=tools(ledger), trace=trace, resume="auto")
        out = ex.run(GOAL, **answer)
        answer = {}
        if out.state != "PAUSED":
            return out
        assert out.pending is not None
        if "question" in out.pending:
            answer = {"answer": APPROVED}
            continue
        op = out.pending["args"]["op"]
        rows = [r for r in ledger.rows() if r[1] == op]
        assert len(rows) <= 1
        if rows:
            harness.reconcile(trace, happened=True, result={"receipt": rows[0][2], "row": rows[0][3]}, evidence="row")
        else:  # the only process that could write this row is dead: it will never land
            harness.reconcile(trace, happened=False, evidence="no row, writer dead")
    raise AssertionError(f"{trace}: not finished after five resumes")


def check_finished(folder: Path, out: harness.Outcome) -> None:
    assert out.state == "DONE", out
    rep = harness.replay(folder / "trace.jsonl")
    names = [f"{('send', 'note', 'charge')[n % 3]}-{n}" for n in range(STEPS)]  # (step() would ask, outside a run)
    assert rep.complete and [c.name for c in rep.checkpoints] == names
    rows = Ledger(folder / "ledger.sqlite").rows()
    keys = sorted(k for k, *_ in rows if k is not None)
    assert keys == sorted(f"{rep.run_id}-{n}-1" for n in range(0, STEPS, 3))  # one row per idempotent step
    charges = sorted(op for k, op, *_ in rows if k is None)
    assert charges == sorted(f"charge-{n}" for n in range(2, STEPS, 3))  # and one per unsafe step
    records = read_records(folder / "trace.jsonl")
    assert [r["question"] for r in records if "question" in r] == [{"approve": f"note-{ASK_STEP}"}]  # asked once,
    assert [r["answer"] for r in records if r["kind"] == "answer"] == [APPROVED]  # answered once (on file)
    assert rep.checkpoints[ASK_STEP].result == {"n": ASK_STEP, "size": len(APPROVED), "head": APPROVED}
    receipts = {(r[2], r[3]) for r in rows}
    for c in rep.checkpoints:
        if c.name.startswith(("send", "charge")):
            assert (c.result["receipt"], c.result["row"]) in receipts, c


def check_killed(folder: Path, said: list[str]) -> dict[str, bool]:
    """What a killed child left must replay, and hold every checkpoint it reported."""
    trace = folder / "trace.jsonl"
    try:
        rep = harness.replay(trace)
    except TraceCorruption as e:  # it died while writing the header
        assert e.reason == "torn-header", e
        return {"torn": False, "header": True}
    except harness.HarnessError as e:  # or before
        assert "no such file" in str(e) or "is empty" in str(e), e
        return {"torn": False, "header": True}
    written = {(c.step, c.seq) for c in rep.checkpoints}
    for line in said:
        if line.startswith("checkpoint "):
            _, s, seq = line.split()
            assert (int(s), int(seq)) in written, f"{trace}: reported {line}, which is not in the file"
    return {"torn": rep.torn_tail, "header": False}


def test_random_kills(tmp_path: Path) -> None:
    target = int(os.environ.get("HARNESS_SOAK_KILLS", "50"))
    rng = random.Random(int(os.environ.get("HARNESS_SOAK_SEED", "5")))
    server = Server()
    try:
        # runs killed only once done set the scale of the delays: the whole run, and from "big" to its checkpoint
        spans, gaps, answers = [], [], []
        for i in range(3):
            (tmp_path / f"calibrate-{i}").mkdir()
            server.run(tmp_path / f"calibrate-{i}", delay=0, after="done")
            heard = server.heard
            spans.append(heard["done"] - heard["start"])
            big_done = next(t for line, t in heard.items() if line.startswith(f"checkpoint {BIG_STEP} "))
            gaps.append(big_done - heard["big"])
            answers.append(next(t for line, t in heard.items() if line.startswith(f"checkpoint {ASK_STEP} ")))
            answers[-1] -= heard["asked"]
            check_finished(tmp_path / f"calibrate-{i}", finish(tmp_path / f"calibrate-{i}"))
        span, gap, answering = sorted(spans)[1], sorted(gaps)[1], sorted(answers)[1]
        kills = torn = header = runs = 0
        while kills < target:
            runs += 1
            assert runs < 4 * target + 20, "the kills keep landing after the runs are done"
            folder = tmp_path / f"run-{runs}"
            folder.mkdir()
            if runs % 3 == 1:
                said = server.run(folder, delay=rng.uniform(0, span), after="start")
            elif runs % 3 == 2:
                said = server.run(folder, delay=rng.uniform(0, gap), after="big")
            else:
                said = server.run(folder, delay=rng.uniform(0, answering), after="asked")
            seen = check_killed(folder, said)
            kills += "done" not in said
            torn += seen["torn"]
            header += seen["header"]
            trace, aside = folder / "trace.jsonl", folder / "trace.jsonl.torn-1"
            tail = trace.read_bytes().rpartition(b"\n")[2] if trace.exists() else b""
            check_finished(folder, finish(folder))
            assert (aside.read_bytes() if aside.exists() else b"") == tail  # a torn line is set aside whole
    finally:
        server.close()
    print(f"soak: {kills} kills in {runs} runs of ~{span * 1000:.0f} ms: {torn} torn tails, {header} before the header")


if __name__ == "__main__":
    serve()
