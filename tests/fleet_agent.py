"""An agent for the object-storage and Ray tests: `steps` steps, each charging an idempotent ledger.

The goal says how many steps, where the effect ledger is (an SQLite file
whose UNIQUE key is the idempotency key: an effect applied twice shows as
`calls` 2 on one row, never as two rows), and optionally where to hang: at
`hang.step`, the first call writes its pid to `hang.marker` and sleeps until
it is killed (the test kills the process with SIGKILL) or, with
`hang.release`, until that file exists; any later call (the resumed run)
goes on. `hang.tool` "charge" hangs after the effect is applied,
"send" (an unsafe tool) hangs inside its call, before anything happened.
"""

from __future__ import annotations

import os
import sqlite3
import time
from typing import Any

from harness import Checkpoint, Step, Tool


def _ledger(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=OFF")  # a killed process loses no commit (the OS has it); power loss is not tested
    db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, run INTEGER, step INTEGER, calls INTEGER)")
    return db


def _hang(hang: dict[str, Any] | None, tool: str, step: int) -> None:
    if not hang or hang["tool"] != tool or hang["step"] != step:
        return
    try:  # only the first call hangs: the claim is taken once
        os.close(os.open(hang["marker"] + ".claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:  # the resumed run: go on
        return
    with open(hang["marker"] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(hang["marker"] + ".tmp", hang["marker"])  # tell the test (atomically) where we are
    release = hang.get("release")
    for _ in range(3000):  # a hang guard of 5 minutes: the test kills or releases us long before
        if release and os.path.exists(release):
            return
        time.sleep(0.1)
    raise RuntimeError("neither killed nor released")


def planner(goal: dict[str, Any], done: list[Checkpoint]) -> Step | None:
    n = len(done)
    if n >= goal["steps"]:
        return None
    args = {"run": goal["run"], "step": n, "ledger": goal["ledger"], "hang": goal.get("hang")}
    if goal.get("hang", {}).get("tool") == "send" and n == goal["hang"]["step"]:
        return Step(f"send-{n}", "send", args)
    return Step(f"charge-{n}", "charge", args)


def charge(*, run: int, step: int, ledger: str, hang: Any, idempotency_key: str) -> dict[str, Any]:
    with _ledger(ledger) as db:
        db.execute(
            "INSERT INTO effects VALUES (?, ?, ?, 1) ON CONFLICT(key) DO UPDATE SET calls = calls + 1",
            (idempotency_key, run, step),
        )
    _hang(hang, "charge", step)
    return {"charged": idempotency_key, "step": step}


def send(*, run: int, step: int, ledger: str, hang: Any) -> dict[str, Any]:
    _hang(hang, "send", step)
    return {"sent": step}


def make_agent() -> tuple[Any, dict[str, Any], None]:
    return planner, {"charge": Tool(charge, idempotent=True), "send": Tool(send, idempotent=False)}, None
