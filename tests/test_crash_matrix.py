"""The crash matrix, run for real: its table, and the files it leaves, checked independently."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson

import harness

SCRIPT = Path(__file__).resolve().parent.parent / "examples" / "crash_matrix.py"
TABLE = [
    ("idempotent-after-intent", 1, "resumed with the same key"),
    ("idempotent-after-effect", 1, "existing receipt recovered"),
    ("idempotent-after-ack", 1, "recorded result used, tool not called again"),
    ("unsafe-after-intent", 0, "paused, unresolved"),
    ("unsafe-after-effect", 1, "paused, then reconciled from the ledger"),
    ("unsafe-after-ack", 1, "recorded result used"),
    ("answered-idempotent-after-effect", 1, "answered, then existing receipt recovered"),
    ("answered-unsafe-after-intent", 0, "answered, then paused, unresolved"),
    ("answered-unsafe-after-effect", 1, "answered, paused, then reconciled from the ledger"),
    ("blind-retry", 2, "a naive retry loop without the harness duplicates the effect"),
    ("control", 1, "uninterrupted run"),
]


def ledger(folder: Path) -> list[tuple[int, str | None, str]]:
    with sqlite3.connect(folder / "ledger.sqlite") as db:
        return list(db.execute("SELECT id, key, receipt FROM effects ORDER BY id"))


def test_the_crash_matrix(tmp_path: Path) -> None:
    work, output = tmp_path / "work", tmp_path / "out" / "matrix.json"
    output.parent.mkdir()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--output", "out/matrix.json", "--workdir", "work"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(output.read_text())
    assert [(r["case"], r["effects"], r["outcome"]) for r in rows] == TABLE
    assert all(set(r) == {"case", "effects", "outcome"} for r in rows)
    for case, effects, outcome in TABLE:
        assert f"| {case} | {effects} | {outcome} |" in proc.stdout

    # what the files say, read without the script's help
    for case, effects, _ in TABLE:
        assert len(ledger(work / case)) == effects, case
    assert not (work / "blind-retry" / "trace.jsonl").exists()
    for case in ("idempotent-after-intent", "idempotent-after-effect", "idempotent-after-ack",
                 "unsafe-after-effect", "unsafe-after-ack", "answered-idempotent-after-effect",
                 "answered-unsafe-after-effect", "control"):  # fmt: skip
        rep = harness.replay(work / case / "trace.jsonl")
        assert rep.state == "DONE", case
        ((row_id, key, receipt),) = ledger(work / case)
        assert rep.checkpoints[-1].result == {"receipt": receipt, "row": row_id}, case
        if "idempotent" in case:
            assert rep.tail.intent is not None and key == rep.tail.intent["key"] == f"{rep.run_id}-0-1", case
        else:
            assert key is None
        resumes = {"control": 0, "unsafe-after-effect": 2, "answered-idempotent-after-effect": 2,
                   "answered-unsafe-after-effect": 3}  # fmt: skip
        assert rep.resumes == resumes.get(case, 1), case  # fresh processes (the answer brought by one)
    for case in ("answered-idempotent-after-effect", "answered-unsafe-after-intent", "answered-unsafe-after-effect"):
        recs = [orjson.loads(line) for line in (work / case / "trace.jsonl").read_bytes().splitlines()]
        (answer,) = [r for r in recs if r["kind"] == "answer"]  # answered once, and never asked again
        assert answer["answer"] == {"amount": 5} and [r.get("question") for r in recs if "question" in r] == [
            {"approve": {"op": "order-1", "amount": 5}}
        ], case
    for case in ("unsafe-after-intent", "answered-unsafe-after-intent"):
        paused = harness.replay(work / case / "trace.jsonl")
        assert paused.state == "PAUSED" and not paused.complete and paused.tail.question is None, case
        assert paused.pending is not None and paused.pending["args"] == {"op": "order-1", "amount": 5}, case
    recs = [orjson.loads(line) for line in (work / "unsafe-after-effect" / "trace.jsonl").read_bytes().splitlines()]
    (rec,) = [r for r in recs if r["kind"] == "reconcile"]
    ((row_id, _, receipt),) = ledger(work / "unsafe-after-effect")
    assert rec["happened"] is True and rec["result"] == {"receipt": receipt, "row": row_id}
    assert receipt in rec["evidence"]
