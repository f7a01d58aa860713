"""Many runs on a local Ray cluster, traces on a real S3 server: workers killed mid-run, runs resumed.

One cluster (2 CPUs) and one S3 server for the module. The big test runs
50 goals through `harness.ray.run_many` and SIGKILLs two worker processes
while they are inside a tool call: one in an idempotent call after its effect
was applied (step 5 of a 10-step goal), one in an unsafe call (step 3 of
another). Ray retries both tasks on another worker, which resume from the
bucket. The other 48 goals take 4 steps each (every step is two conditional
PUTs on the one S3 server that all workers wait on): each of them still
runs while the kills land and must show every effect once. Skipped (saying
why) only when Ray, the s3 extra or moto is not installed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from s3server import need_s3, new_bucket, s3_server

need_s3()
ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'harness-trace[ray,test]'")

import harness  # noqa: E402 - after the skip
from harness.cli import main  # noqa: E402
from harness.ray import FleetError, run_many, tasks  # noqa: E402

HERE = Path(__file__).parent
AGENT = "fleet_agent:make_agent"
pytestmark = pytest.mark.xdist_group("ray")  # one worker runs them all: one Ray cluster, not one per worker


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    with s3_server():
        saved = os.environ.get("PYTHONPATH")
        # the workers import the agents: tests/fleet_agent.py, bench/fleet.py
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), str(HERE.parent), saved) if p)
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, log_to_driver=False)
        try:
            yield
        finally:
            ray.shutdown()
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


def goal(tmp_path: Path, run: int, steps: int = 10) -> dict[str, Any]:
    return {"run": run, "steps": steps, "ledger": str(tmp_path / "ledger.db")}


def ledger(tmp_path: Path) -> list[tuple[str, int, int, int]]:
    with sqlite3.connect(tmp_path / "ledger.db", timeout=60) as db:  # the agents write it (their own timeout: 60)
        return sorted(db.execute("SELECT key, run, step, calls FROM effects"))


def kill_when_inside(markers: list[Path], done: threading.Event) -> list[int]:
    """SIGKILL each process that writes its pid to one of markers; the pids killed."""
    killed: list[int] = []
    waiting = list(markers)
    deadline = time.monotonic() + 600  # a hang guard, not a timing assertion
    while waiting:
        for m in [m for m in waiting if m.exists()]:
            pid = int(m.read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            waiting.remove(m)
        if done.is_set() or time.monotonic() > deadline:
            pytest.fail(f"the batch ended (or hung) before it reached {[m.name for m in waiting]}")
        time.sleep(0.05)
    return killed


def test_fifty_runs_survive_killed_workers_and_every_effect_happens_once(cluster: None, tmp_path: Path) -> None:
    runs = f"s3://{new_bucket()}/runs"
    steps = [10 if i in (7, 13) else 4 for i in range(50)]  # the killed runs are long enough to be killed inside
    goals = [goal(tmp_path, i, steps[i]) for i in range(50)]
    goals[7]["hang"] = {"tool": "charge", "step": 5, "marker": str(tmp_path / "idempotent")}
    goals[13]["hang"] = {"tool": "send", "step": 3, "marker": str(tmp_path / "unsafe")}
    result: dict[str, Any] = {}
    done = threading.Event()

    def batch() -> None:
        try:
            result["outcomes"] = run_many(goals, agent=AGENT, runs=runs, max_retries=3)
        except BaseException as e:
            result["error"] = e
        finally:
            done.set()

    driver = threading.Thread(target=batch)
    driver.start()
    try:
        killed = kill_when_inside([tmp_path / "idempotent", tmp_path / "unsafe"], done)
    finally:
        driver.join(timeout=900)
    assert "error" not in result, result.get("error")
    assert len(set(killed)) == 2
    outcomes = result["outcomes"]
    assert [o.trace for o in outcomes] == [t.trace for t in tasks(goals, agent=AGENT, runs=runs)]
    states = [o.state for o in outcomes]
    assert states == ["PAUSED" if i == 13 else "DONE" for i in range(50)]
    assert outcomes[13].pending is not None and outcomes[13].pending["tool"] == "send"
    rows = ledger(tmp_path)  # the key is UNIQUE: an effect applied twice would be calls 2 on one row
    effects = {i: sorted(step for _, run, step, _ in rows if run == i) for i in range(50)}
    assert effects == {i: list(range(3 if i == 13 else steps[i])) for i in range(50)}
    calls = {(run, step): n for _, run, step, n in rows}
    assert calls.pop((7, 5)) == 2  # called again after the kill, with the same key
    assert set(calls.values()) == {1}
    listed = harness.list_runs(runs)
    assert sorted(r.path for r in listed) == sorted(o.trace for o in outcomes)
    for i, o in enumerate(outcomes):  # every trace in the bucket replays, and says what the outcome said
        rep = harness.replay(o.trace)
        assert rep.state == o.state and rep.resumes == (1 if i in (7, 13) else 0)
        assert harness.verify(o.trace).ok == (o.state == "DONE")  # a finished run is sealed; a paused one not yet
        keys = [c.result["charged"] for c in rep.checkpoints]
        assert keys == [k for k, run, _, _ in sorted(rows, key=lambda r: r[2]) if run == i]


def test_harness_fleet_runs_a_goals_file_and_running_it_again_resumes(
    cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = f"s3://{new_bucket()}/runs"
    goals = tmp_path / "goals.jsonl"
    goals.write_text("".join(f'{{"run": {i}, "steps": 2, "ledger": "{tmp_path}/ledger.db"}}\n' for i in range(3)))
    args = ["fleet", str(goals), "--agent", AGENT, "--runs", runs, "--batch", "nightly"]
    assert main(args) == 0
    said = capsys.readouterr()
    out = said.out.splitlines()
    assert out == [f"{i}  DONE    {runs}/nightly-{i:05d}.jsonl" for i in range(3)]
    assert "harness fleet: 3 runs: 3 DONE" in said.err.splitlines()
    before = ledger(tmp_path)
    assert len(before) == 6
    assert main(args) == 0  # the same batch again: the traces say DONE, nothing runs again
    assert capsys.readouterr().out.splitlines() == out
    assert ledger(tmp_path) == before


def test_harness_fleet_runs_an_async_agent(cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tests/gather_agent.py: an async planner gathering three `harness.allm` calls (run() would refuse it)."""
    goals = tmp_path / "goals.jsonl"
    goals.write_text("".join(f'{{"pick": {i}, "dir": "{tmp_path}"}}\n' for i in range(2)))
    runs = tmp_path / "runs"
    assert main(["fleet", str(goals), "--agent", "gather_agent:make_agent", "--runs", str(runs), "--json"]) == 0
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["state"] for r in rows] == ["DONE", "DONE"]
    for i, r in enumerate(rows):
        (checkpoint,) = harness.replay(r["trace"]).checkpoints
        assert checkpoint.result["saved"].startswith(("cost", "risk", "plan")[i])
    assert len((tmp_path / "calls.log").read_bytes().splitlines()) == 6


def test_a_task_that_raises_is_a_fleet_error_naming_its_goal(cluster: None, tmp_path: Path) -> None:
    runs = f"s3://{new_bucket()}/runs"
    goals = [goal(tmp_path, 0, steps=1), {"run": 1}]  # the second goal has no steps: the planner raises KeyError
    with pytest.raises(FleetError) as e:
        run_many(goals, agent=AGENT, runs=runs, max_retries=0)
    assert list(e.value.errors) == [1] and "KeyError" in e.value.errors[1][1]
    assert e.value.outcomes[0] is not None and e.value.outcomes[0].state == "DONE" and e.value.outcomes[1] is None


def test_a_goals_file_that_is_not_json_lines_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    goals = tmp_path / "goals.jsonl"
    goals.write_text('{"run": 0}\n\n{"run": 1\n')
    assert main(["fleet", str(goals), "--agent", AGENT, "--runs", str(tmp_path / "runs")]) == 2
    assert f"{goals}:3: not a JSON value" in capsys.readouterr().err
    goals.write_text("\n")
    assert main(["fleet", str(goals), "--agent", AGENT, "--runs", str(tmp_path / "runs")]) == 2
    assert "no goals" in capsys.readouterr().err
    with pytest.raises(harness.HarnessError, match="batch"):
        tasks([1], agent=AGENT, runs="s3://b/runs", batch="a/b")


def test_the_fleet_benchmark_runs_and_reports_every_figure(cluster: None) -> None:
    import sys

    sys.path.insert(0, str(HERE.parent))
    from bench import fleet  # bench/ is a top-level folder, not installed

    result = fleet.run("smoke", lambda msg: None)  # on this module's cluster and S3 server
    for key in fleet.KEYS:
        assert isinstance(result[key], float) and result[key] > 0, key
    assert result["detail"]["s3_conditional_put_ms"] > 0 and "| `ray_speedup` |" in fleet.table(result)
