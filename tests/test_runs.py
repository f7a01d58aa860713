"""The runs folder and `harness runs`: status from the two ends of each trace and its lock."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import in_process
import orjson
import pytest

import harness
from harness import Executor, RetryPolicy, Step, Tool
from harness.testing import counter, flaky, power_cut, read_records

PLAN = [Step(f"s{i}", "work", {"i": i}) for i in range(3)]


def planner(goal: Any, done: list[Any]) -> Step | None:
    return PLAN[len(done)] if len(done) < len(PLAN) else None


def run(folder: Path, tool: Any, **options: Any) -> harness.Outcome:
    return Executor(planner=planner, tools={"work": tool}, runs_dir=folder, entrypoint="agent.py", **options).run("g")


def crash(path: Path, tool: Any) -> str:
    """A run whose tool crashes the process (RuntimeError out of run()), left as it was."""
    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools={"work": tool}, trace=path, entrypoint="agent.py").run("g")
    return str(path)


def resume(path: str) -> harness.Outcome:
    tools = {"work": Tool(counter(), idempotent=False)}
    return Executor(planner=planner, tools=tools, trace=path, resume=True, entrypoint="agent.py").run("g")


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` in cwd: the console script's main() called in this process."""
    return in_process.harness(*args, cwd=cwd, env=env)  # type: ignore[no-any-return]


HOLDER = """
import sys
import harness
from harness import Executor, Step

def wait(i):
    print("ready", flush=True)
    sys.stdin.readline()  # hold the trace (and its lock) until the test says go
    return i

plan = [Step("only", "work", {"i": 0})]
Executor(planner=lambda g, d: None if d else plan[0], tools={"work": wait}, trace=sys.argv[1]).run("g")
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A runs folder holding one run of each kind; returns it with a map name -> trace path."""
    runs = tmp_path / "runs"
    runs.mkdir()
    return runs


def test_listing_a_folder_with_every_kind_of_run(folder: Path, tmp_path: Path) -> None:
    paths: dict[str, str] = {}
    paths["done"] = run(folder, counter()).trace
    paths["failed"] = run(folder, flaky(5), retry=RetryPolicy(2)).trace
    paths["crashed"] = crash(folder / "crashed.jsonl", power_cut(2))
    with open(paths["crashed"], "ab") as f:
        f.write(b'{"seq":99,"kind":"transi')  # a torn tail: the writer died mid-line
    paths["paused"] = crash(folder / "paused.jsonl", Tool(power_cut(2), idempotent=False))
    assert resume(paths["paused"]).state == "PAUSED"
    paths["reconciled"] = crash(folder / "reconciled.jsonl", Tool(power_cut(1), idempotent=False))
    assert resume(paths["reconciled"]).state == "PAUSED"
    harness.reconcile(paths["reconciled"], happened=False, evidence="no such payment")
    branch = harness.replay(paths["done"]).crossings[1].seq
    child = harness.fork(paths["done"], at=branch, value={"i": 7}, planner=planner, tools={"work": counter()})
    paths["forked"] = str(child.trace)
    with harness.Recorder(folder / "recorded.jsonl", entrypoint="loop.py") as rec:
        rec.log("input", {"q": 1})
    with pytest.raises(KeyError), harness.Recorder(folder / "recorder-error.jsonl", entrypoint="loop.py"):
        raise KeyError("boom")
    (folder / "junk.jsonl").write_text("this is not a trace\n")
    (folder / "torn-header.jsonl").write_bytes(b'{"seq":1,"kind":"header","sche')
    (folder / "notes.txt").write_text("not a run\n")

    holder = tmp_path / "holder.py"
    holder.write_text(HOLDER)
    live = folder / "live.jsonl"
    pipe = subprocess.PIPE
    proc = subprocess.Popen([sys.executable, str(holder), str(live)], stdin=pipe, stdout=pipe, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"  # inside the tool: the lock is held
        runs = {os.path.basename(r.path): r for r in harness.list_runs(folder)}
        listed = cli("runs", str(folder), "--json", cwd=tmp_path)
        table = cli("runs", str(folder), cwd=tmp_path)
    finally:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0

    status = {name: runs[os.path.basename(p)].status for name, p in paths.items()}
    assert status == {
        "done": "done", "failed": "failed", "crashed": "interrupted", "paused": "paused",
        "reconciled": "paused", "forked": "done",
    }  # fmt: skip
    assert runs["live.jsonl"].status == "running"
    assert runs["recorded.jsonl"].status == "done" and runs["recorder-error.jsonl"].status == "failed"
    assert runs["junk.jsonl"].status == "unreadable" and runs["torn-header.jsonl"].status == "interrupted"
    assert "notes.txt" not in runs and not any(".torn-" in name for name in runs)
    assert len(runs) == 11

    for name, p in paths.items():
        info, rep, records = runs[os.path.basename(p)], harness.replay(p), read_records(p)
        assert (info.id, info.records, info.entrypoint) == (rep.run_id, rep.records, "agent.py"), name
        assert info.started == datetime.fromtimestamp(records[0]["ts"], UTC)
        ended = records[0]["ts"] + records[-1]["ts"]  # a record's ts counts from the header's
        assert info.ended == (datetime.fromtimestamp(ended, UTC) if rep.complete else None)
    done = runs[os.path.basename(paths["done"])]
    assert runs[os.path.basename(paths["forked"])].parent == done.id and done.parent is None
    assert runs[os.path.basename(paths["forked"])].branch == branch

    assert listed.returncode == 0, listed.stderr
    objects = orjson.loads(listed.stdout)
    assert {o["path"]: o["status"] for o in objects} == {r.path: r.status for r in runs.values()}
    for o in objects:
        assert list(o)[:7] == ["id", "entrypoint", "status", "started", "ended", "records", "parent"]
        assert o == runs[os.path.basename(o["path"])].to_json()
    assert table.returncode == 0 and table.stdout.startswith("ID")
    assert f"{done.id}@{branch}" in table.stdout and len(table.stdout.splitlines()) == 12
    assert [o["started"] for o in objects if o["started"]] == sorted(o["started"] for o in objects if o["started"])
    # once the writer is gone, its run is done
    assert {r.path: r.status for r in harness.list_runs(folder)}[str(live)] == "done"


def test_listing_reads_only_the_ends_of_each_trace(folder: Path) -> None:
    path = Path(run(folder, counter()).trace)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle] = ord("#") if data[middle] != ord("#") else ord("%")
    path.write_bytes(bytes(data))
    with pytest.raises(harness.TraceCorruption):
        harness.replay(path)
    (info,) = harness.list_runs(folder)
    assert info.status == "done" and info.records == len(data.splitlines())  # validating is `harness replay`'s job


def test_the_runs_folder_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = Executor(planner=planner, tools={"work": counter()}).run("g")  # no trace=, no runs_dir=: ./runs
    assert Path(out.trace).parent.resolve() == (tmp_path / "runs").resolve()
    assert [r.id for r in harness.list_runs()] == [out.run_id]
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("HARNESS_RUNS_DIR", str(elsewhere))
    moved = Executor(planner=planner, tools={"work": counter()}).run("g")
    assert Path(moved.trace).parent == elsewhere and [r.id for r in harness.list_runs()] == [moved.run_id]
    listed = cli("runs", "--json", cwd=tmp_path, env={**os.environ, "HARNESS_RUNS_DIR": str(elsewhere)})
    assert [o["id"] for o in orjson.loads(listed.stdout)] == [moved.run_id]


def test_a_missing_folder_is_a_one_line_error(tmp_path: Path) -> None:
    r = cli("runs", str(tmp_path / "nope"), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == f"harness runs: {tmp_path / 'nope'}: no such runs folder\n"
    with pytest.raises(harness.HarnessError, match="not a folder"):
        harness.list_runs(Path(__file__))


def test_an_empty_folder_lists_nothing(folder: Path) -> None:
    assert harness.list_runs(folder) == []
    assert cli("runs", str(folder), "--json", cwd=folder).stdout == "[]\n"


@pytest.mark.parametrize("header_ts", [1e20, -1e300, 1.7e9])
def test_times_no_date_can_hold_never_crash_the_listing(tmp_path: Path, header_ts: float) -> None:
    """Before: a header `ts` of 1e20, which replay() accepted, made `harness runs` raise OverflowError and the
    viewer's /api/runs answer 500. replay() now refuses such a header; the listing, which reads only the two
    ends of each file and validates nothing, shows the run with no time, as it shows any odd file."""
    from harness.testing import write_trace

    done = run(tmp_path, lambda i: i)
    recs = [{k: v for k, v in r.items() if k != "crc"} for r in read_records(done.trace) if r["kind"] != "seal"]
    recs[0]["ts"], recs[-1]["ts"] = header_ts, 1e308  # and a last record whose wall time overflows
    write_trace(done.trace, recs)
    if abs(header_ts) > 1e12:
        with pytest.raises(harness.TraceCorruption, match="no wall-clock time"):
            harness.replay(done.trace)
    out = in_process.harness("runs", "--json", tmp_path)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    (row,) = orjson.loads(out.stdout)
    assert row["status"] == "done" and row["ended"] is None
    assert (row["started"] is None) == (abs(header_ts) > 1e12)
    assert in_process.harness("runs", tmp_path).returncode == 0
    pytest.importorskip("starlette", reason="the viewer needs the web extra")
    from starlette.testclient import TestClient

    from harness.viewer import create_app

    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as c:
        assert c.get("/api/runs").status_code == 200
        summary = c.get(f"/api/runs/{Path(done.trace).stem}/summary")
        assert summary.status_code in (200, 400) and "Traceback" not in summary.text
