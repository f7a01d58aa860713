"""An agent for the object-storage and Ray tests: `steps` steps, each charging an idempotent ledger.

The goal says how many steps, where the effect ledger is (an SQLite file
whose UNIQUE key is the idempotency key: an effect applied twice shows as
`calls` 2 on one row, never as two rows), and optionally where to hang: at
`hang.step`, the first call writes its pid to `hang.marker` and sleeps until
it is killed (the test kills the process with SIGKILL); any later call (the
resumed run) goes on. `hang.tool` "charge" hangs after the effect is applied,
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
    db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, run INTEGER, step INTEGER, calls INTEGER)")
    return db


def _hang(goal: dict[str, Any], tool: str, step: int) -> None:
    hang = goal.get("hang")
    if not hang or hang["tool"] != tool or hang["step"] != step:
        return
    try:
        fd = os.open(hang["marker"], os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:  # the resumed run: go on
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    time.sleep(300)  # the test kills this process long before
    raise RuntimeError("not killed")


def make_agent() -> tuple[Any, dict[str, Any], None]:
    goal_of: dict[str, Any] = {}

    def planner(goal: dict[str, Any], done: list[Checkpoint]) -> Step | None:
        goal_of["goal"] = goal
        n = len(done)
        if n >= goal["steps"]:
            return None
        if goal.get("hang", {}).get("tool") == "send" and n == goal["hang"]["step"]:
            return Step(f"send-{n}", "send", {"run": goal["run"], "step": n})
        return Step(f"charge-{n}", "charge", {"run": goal["run"], "step": n})

    def charge(*, run: int, step: int, idempotency_key: str) -> dict[str, Any]:
        goal = goal_of["goal"]
        with _ledger(goal["ledger"]) as db:
            db.execute(
                "INSERT INTO effects VALUES (?, ?, ?, 1) ON CONFLICT(key) DO UPDATE SET calls = calls + 1",
                (idempotency_key, run, step),
            )
        _hang(goal, "charge", step)
        return {"charged": idempotency_key, "step": step}

    def send(*, run: int, step: int) -> dict[str, Any]:
        _hang(goal_of["goal"], "send", step)
        return {"sent": step}

    return planner, {"charge": Tool(charge, idempotent=True), "send": Tool(send, idempotent=False)}, None
