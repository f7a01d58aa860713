"""The crash matrix: real processes killed with SIGKILL around a side effect.

    python examples/crash_matrix.py --output matrix.json [--workdir DIR]

The external system is a SQLite ledger (`ledger.sqlite`, table `effects`,
one row per effect) that a one-step run pays into. For each case the parent
starts a child run, waits for the child's handshake at the chosen point,
kills it with SIGKILL, starts a fresh process that resumes the run, and
counts the rows in the ledger. The handshake points:

- after-intent: inside the tool, before it touches the ledger (the intent
  record is on disk: the tool is only called after it);
- after-effect: the ledger transaction has committed, the result is not yet
  in the trace;
- after-ack: inside the verifier, so the ACT -> VERIFY record with the
  result is on disk.

The `answered-*` cases first pause the run on a question (the planner asks
a human to approve the payment with `harness.interrupt`), then answer it in
a fresh process, which is killed at the chosen point: what was answered
stays answered, and a resume goes on from the answer.

A paused run is reconciled only on positive evidence: a ledger row for the
operation makes it `happened=True` with that row's receipt; no row leaves it
paused, because an absent row does not prove the call will never land.
`blind-retry` is the same payment made by a naive job that is simply
restarted after the kill, with no harness.

Each case's outcome is a claim checked against what was observed (trace
states, tool calls, ledger rows); a claim that does not hold is printed as
UNEXPECTED with the observations, and the script exits 1. Files are left in
DIR/<case>/ (trace.jsonl, ledger.sqlite; blind-retry has no trace); a
temporary folder is used, and removed, unless --workdir is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import harness
except ImportError:  # run from a source tree where harness is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import harness

GOAL = "pay order-1"
PAY: dict[str, Any] = {"op": "order-1", "amount": 5}
CHILD_TIMEOUT = 60.0  # seconds before a stuck child is killed and the case reported as broken


# --- the external system --------------------------------------------------------------------


class Ledger:
    """One row per effect. Idempotent payments carry their key, which is UNIQUE."""

    def __init__(self, path: Path):
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY, key TEXT UNIQUE, "
            "op TEXT NOT NULL, amount INTEGER NOT NULL, receipt TEXT NOT NULL)"
        )

    def pay(self, op: str, amount: int, key: str | None) -> tuple[dict[str, Any], bool]:
        """(receipt, whether a row was inserted). With a key, a second call returns the first receipt."""
        receipt = f"rcpt-{uuid.uuid4().hex[:12]}"
        cur = self.db.execute(
            "INSERT INTO effects (key, op, amount, receipt) VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
            (key, op, amount, receipt),
        )
        inserted = cur.rowcount == 1
        if key is None:
            row = (cur.lastrowid, receipt)
        else:
            row = self.db.execute("SELECT id, receipt FROM effects WHERE key = ?", (key,)).fetchone()
        return {"receipt": row[1], "row": row[0]}, inserted

    def rows(self, op: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT id, key, op, amount, receipt FROM effects" + (" WHERE op = ?" if op else "") + " ORDER BY id"
        cols = ("id", "key", "op", "amount", "receipt")
        return [dict(zip(cols, r, strict=True)) for r in self.db.execute(sql, (op,) if op else ())]


# --- the child processes --------------------------------------------------------------------


def emit(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def handshake(point: str) -> None:
    """Tell the parent where we are, then wait to be killed (or for the parent to die)."""
    emit({"event": "at", "point": point})
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.05)
    os._exit(1)


def child_run(folder: Path, *, contract: str, kill_at: str, resume: bool, ask: bool, answer: Any = None) -> None:
    ledger = Ledger(folder / "ledger.sqlite")

    def pay(*, op: str, amount: int, idempotency_key: str | None = None) -> dict[str, Any]:
        emit({"event": "call", "key": idempotency_key})
        if kill_at == "intent":
            handshake("intent")
        receipt, inserted = ledger.pay(op, amount, idempotency_key)
        emit({"event": "effect", "inserted": inserted, "receipt": receipt})
        if kill_at == "effect":
            handshake("effect")
        return receipt

    def verifier(step: harness.Step, result: Any) -> bool:
        if kill_at == "ack":
            handshake("ack")
        return True

    def planner(goal: Any, done: list[Any]) -> harness.Step | None:
        if done:
            return None
        if ask:  # a human approves the amount first
            approved = harness.interrupt({"approve": dict(PAY)})
            return harness.Step("pay", "pay", {"op": PAY["op"], "amount": approved["amount"]})
        return harness.Step("pay", "pay", dict(PAY))

    tool = harness.Tool(pay, idempotent=contract == "idempotent", version="1")
    ex = harness.Executor(
        planner=planner, tools={"pay": tool}, verifier=verifier, trace=folder / "trace.jsonl", resume=resume,
    )  # fmt: skip
    out = ex.run(GOAL) if answer is None else ex.run(GOAL, answer=answer)
    results = [c.result for c in out.checkpoints]
    emit({"event": "outcome", "state": out.state, "pending": out.pending, "results": results})


def child_naive(folder: Path, *, kill_at: str) -> None:
    """A job with no harness: pay, and let the supervisor start it again if it dies."""
    receipt, _ = Ledger(folder / "ledger.sqlite").pay(PAY["op"], PAY["amount"], None)
    emit({"event": "effect", "inserted": True, "receipt": receipt})
    if kill_at == "effect":
        handshake("effect")


# --- the parent -----------------------------------------------------------------------------


class Child:
    """A child process of this script, read event by event."""

    def __init__(self, folder: Path, role: str, **opts: str):
        args = [sys.executable, os.path.abspath(__file__), "--child", role, "--folder", str(folder)]
        for k, v in opts.items():
            args += [f"--{k.replace('_', '-')}", v]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=folder)
        self.events: list[dict[str, Any]] = []
        self.killed = False
        self.watchdog = threading.Timer(CHILD_TIMEOUT, self.proc.kill)
        self.watchdog.start()

    def until(self, point: str | None) -> dict[str, Any] | None:
        """Read events until the handshake at point (then SIGKILL the child) or the child's end."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            self.events.append(event)
            if event["event"] == "at" and event["point"] == point:
                os.kill(self.proc.pid, signal.SIGKILL)
                break
        self.proc.wait()
        self.watchdog.cancel()
        self.killed = self.proc.returncode == -signal.SIGKILL
        return next((e for e in self.events if e["event"] == "outcome"), None)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]


def trace_state(folder: Path) -> str:
    return harness.replay(folder / "trace.jsonl").state


def run_case(folder: Path, contract: str, kill_at: str, *, ask: bool = False) -> dict[str, Any]:
    """Run, kill at kill_at, resume in a fresh process; reconcile a pause from the ledger. Returns observations.

    With ask, the run pauses on its question first, and the process that brings the answer is the one killed.
    """
    obs: dict[str, Any] = {}
    asking = {"ask": "yes"} if ask else {}
    if ask:
        asked = Child(folder, "run", contract=contract, kill_at="none", **asking).until(None)
        obs["asked"] = asked is not None and asked["state"] == "PAUSED" and "question" in (asked["pending"] or {})
        answer = json.dumps({"amount": PAY["amount"]})
        first = Child(folder, "run", contract=contract, kill_at=kill_at, resume="yes", answer=answer, **asking)
    else:
        first = Child(folder, "run", contract=contract, kill_at=kill_at)
    first.until(kill_at)
    ledger = Ledger(folder / "ledger.sqlite")
    obs.update({"killed": first.killed, "state_at_kill": trace_state(folder)})
    obs["rows_at_kill"] = len(ledger.rows())
    intents: list[dict[str, Any]] = []  # the transitions into ACT, as replay() checks them
    harness.replay(
        folder / "trace.jsonl", on_record=lambda _l, rec: intents.append(rec) if rec.get("to") == "ACT" else None
    )
    obs["intent_key"] = intents[-1].get("key") if intents else None
    obs["first_receipts"] = [e["receipt"] for e in first.of("effect")]
    second = Child(folder, "run", contract=contract, kill_at="none", resume="yes", **asking)
    out = second.until(None)
    obs["resume"] = {"outcome": out, "calls": second.of("call"), "effects": second.of("effect")}
    if out is not None and out["state"] == "PAUSED":
        rows = ledger.rows(out["pending"]["args"]["op"])
        if rows:  # positive evidence: the effect is in the ledger
            row = rows[0]
            evidence = f"ledger.sqlite effects row {row['id']}: {row['op']} {row['amount']} receipt {row['receipt']}"
            result = {"receipt": row["receipt"], "row": row["id"]}
            harness.reconcile(folder / "trace.jsonl", happened=True, result=result, evidence=evidence)
            obs["reconciled"] = evidence
            third = Child(folder, "run", contract=contract, kill_at="none", resume="yes", **asking)
            obs["after_reconcile"] = {"outcome": third.until(None), "calls": third.of("call")}
        else:  # no row is no proof: stay paused; a further resume changes nothing
            before = (folder / "trace.jsonl").read_bytes()
            again = Child(folder, "run", contract=contract, kill_at="none", resume="yes", **asking)
            obs["resumed_again"] = {"outcome": again.until(None), "calls": again.of("call")}
            obs["trace_unchanged"] = (folder / "trace.jsonl").read_bytes() == before
    obs["final_state"] = trace_state(folder)
    obs["rows"] = ledger.rows()
    return obs


def done_without_calls(obs: dict[str, Any], key: str = "resume") -> bool:
    return bool(obs[key]["outcome"]["state"] == "DONE" and not obs[key]["calls"])


def result_of(obs: dict[str, Any], key: str = "resume") -> Any:
    return obs[key]["outcome"]["results"][-1]


# Each case: what happens, and the claim about it with the check that the observations bear it out.
def idempotent_after_intent(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "idempotent", "intent")
    r = o["resume"]
    ok = (o["killed"] and o["state_at_kill"] == "ACT" and o["rows_at_kill"] == 0
          and [c["key"] for c in r["calls"]] == [o["intent_key"]] and [e["inserted"] for e in r["effects"]] == [True]
          and o["final_state"] == "DONE" and [row["key"] for row in o["rows"]] == [o["intent_key"]])  # fmt: skip
    return o, "resumed with the same key", ok


def idempotent_after_effect(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "idempotent", "effect")
    r = o["resume"]
    ok = (o["killed"] and o["state_at_kill"] == "ACT" and o["rows_at_kill"] == 1
          and [c["key"] for c in r["calls"]] == [o["intent_key"]] and [e["inserted"] for e in r["effects"]] == [False]
          and result_of(o) == o["first_receipts"][0] and o["final_state"] == "DONE")  # fmt: skip
    return o, "existing receipt recovered", ok


def idempotent_after_ack(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "idempotent", "ack")
    ok = (o["killed"] and o["state_at_kill"] == "VERIFY" and done_without_calls(o)
          and result_of(o) == o["first_receipts"][0])  # fmt: skip
    return o, "recorded result used, tool not called again", ok


def unsafe_after_intent(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "unsafe", "intent")
    r, again = o["resume"], o.get("resumed_again")
    ok = (o["killed"] and o["state_at_kill"] == "ACT" and r["outcome"]["state"] == "PAUSED" and not r["calls"]
          and "reconciled" not in o and again is not None and again["outcome"]["state"] == "PAUSED"
          and not again["calls"] and o["trace_unchanged"] and o["final_state"] == "PAUSED")  # fmt: skip
    return o, "paused, unresolved", ok


def unsafe_after_effect(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "unsafe", "effect")
    r = o["resume"]
    ok = (o["killed"] and o["state_at_kill"] == "ACT" and o["rows_at_kill"] == 1
          and r["outcome"]["state"] == "PAUSED" and not r["calls"] and "reconciled" in o
          and done_without_calls(o, "after_reconcile")
          and result_of(o, "after_reconcile") == o["first_receipts"][0])  # fmt: skip
    return o, "paused, then reconciled from the ledger", ok


def unsafe_after_ack(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "unsafe", "ack")
    ok = (o["killed"] and o["state_at_kill"] == "VERIFY" and done_without_calls(o)
          and result_of(o) == o["first_receipts"][0])  # fmt: skip
    return o, "recorded result used", ok


def answered_idempotent_after_effect(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "idempotent", "effect", ask=True)
    r = o["resume"]
    ok = (o["asked"] and o["killed"] and o["state_at_kill"] == "ACT" and o["rows_at_kill"] == 1
          and [c["key"] for c in r["calls"]] == [o["intent_key"]] and [e["inserted"] for e in r["effects"]] == [False]
          and result_of(o) == o["first_receipts"][0] and o["final_state"] == "DONE")  # fmt: skip
    return o, "answered, then existing receipt recovered", ok


def answered_unsafe_after_intent(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "unsafe", "intent", ask=True)
    r, again = o["resume"], o.get("resumed_again")
    ok = (o["asked"] and o["killed"] and o["state_at_kill"] == "ACT" and r["outcome"]["state"] == "PAUSED"
          and not r["calls"] and "reconciled" not in o and again is not None
          and again["outcome"]["state"] == "PAUSED" and not again["calls"] and o["trace_unchanged"]
          and o["final_state"] == "PAUSED")  # fmt: skip
    return o, "answered, then paused, unresolved", ok


def answered_unsafe_after_effect(folder: Path) -> tuple[dict[str, Any], str, bool]:
    o = run_case(folder, "unsafe", "effect", ask=True)
    r = o["resume"]
    ok = (o["asked"] and o["killed"] and o["state_at_kill"] == "ACT" and o["rows_at_kill"] == 1
          and r["outcome"]["state"] == "PAUSED" and not r["calls"] and "reconciled" in o
          and done_without_calls(o, "after_reconcile")
          and result_of(o, "after_reconcile") == o["first_receipts"][0])  # fmt: skip
    return o, "answered, paused, then reconciled from the ledger", ok


def blind_retry(folder: Path) -> tuple[dict[str, Any], str, bool]:
    first = Child(folder, "naive", kill_at="effect")
    first.until("effect")
    retry = Child(folder, "naive", kill_at="none")  # the supervisor saw a crash, not a success: run it again
    retry.until(None)
    rows = Ledger(folder / "ledger.sqlite").rows()
    o: dict[str, Any] = {"killed": first.killed, "retry_exit": retry.proc.returncode, "rows": rows}
    ok = first.killed and retry.proc.returncode == 0 and len(rows) == 2
    return o, "a naive retry loop without the harness duplicates the effect", ok


def control(folder: Path) -> tuple[dict[str, Any], str, bool]:
    run = Child(folder, "run", contract="unsafe", kill_at="none")
    out = run.until(None)
    o: dict[str, Any] = {"outcome": out, "calls": run.of("call"), "rows": Ledger(folder / "ledger.sqlite").rows()}
    ok = out is not None and out["state"] == "DONE" and len(o["calls"]) == 1 and trace_state(folder) == "DONE"
    return o, "uninterrupted run", ok


CASES: dict[str, Callable[[Path], tuple[dict[str, Any], str, bool]]] = {
    "idempotent-after-intent": idempotent_after_intent,
    "idempotent-after-effect": idempotent_after_effect,
    "idempotent-after-ack": idempotent_after_ack,
    "unsafe-after-intent": unsafe_after_intent,
    "unsafe-after-effect": unsafe_after_effect,
    "unsafe-after-ack": unsafe_after_ack,
    "answered-idempotent-after-effect": answered_idempotent_after_effect,
    "answered-unsafe-after-intent": answered_unsafe_after_intent,
    "answered-unsafe-after-effect": answered_unsafe_after_effect,
    "blind-retry": blind_retry,
    "control": control,
}


def matrix(workdir: Path) -> list[dict[str, Any]]:
    rows = []
    for case, run in CASES.items():
        folder = workdir / case
        if folder.exists():  # a previous run's files: start clean
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        obs, claim, ok = run(folder)
        effects = len(obs["rows"])
        rows.append({"case": case, "effects": effects, "outcome": claim if ok else f"UNEXPECTED: {json.dumps(obs)}"})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | effects | outcome |", "|---|---|---|"]
    lines += [f"| {r['case']} | {r['effects']} | {r['outcome']} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Kill real runs around a side effect and count the effects.")
    p.add_argument("--output", required=False, help="where to write the matrix as JSON")
    p.add_argument("--workdir", help="keep each case's trace and ledger in DIR/<case>/ (default: a temporary folder)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--contract", help=argparse.SUPPRESS)
    p.add_argument("--kill-at", default="none", help=argparse.SUPPRESS)
    p.add_argument("--resume", default="", help=argparse.SUPPRESS)
    p.add_argument("--ask", default="", help=argparse.SUPPRESS)
    p.add_argument("--answer", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == "run":
        answer = json.loads(args.answer) if args.answer is not None else None
        child_run(Path(args.folder), contract=args.contract, kill_at=args.kill_at, resume=bool(args.resume),
                  ask=bool(args.ask), answer=answer)  # fmt: skip
        return 0
    if args.child == "naive":
        child_naive(Path(args.folder), kill_at=args.kill_at)
        return 0
    if not args.output:
        p.error("--output is required")
    if args.workdir:
        rows = matrix(Path(args.workdir).resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="crash-matrix-") as tmp:
            rows = matrix(Path(tmp))
    print(table(rows))
    Path(args.output).write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(not r["outcome"].startswith("UNEXPECTED") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
