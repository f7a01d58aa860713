"""Traces on object storage, against a real S3-compatible server on 127.0.0.1 (moto in server mode).

A run's trace is a prefix of segment objects; these tests write runs there,
kill a writer with SIGKILL and finish its run in another process from the
bucket alone, race two writers on one run, and read runs back through the
CLI. Skipped (saying why) only when the s3 extra or moto is not installed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from s3server import CHILDREN, need_s3, until_stale

need_s3()

import children  # noqa: E402

import harness  # noqa: E402 - after the skip
from harness import Executor, TraceCorruption, TraceUnreadable  # noqa: E402
from harness.cli import main  # noqa: E402
from harness.store import FenceLost, RemoteJournal  # noqa: E402
from harness.trace.line import SCHEMA  # noqa: E402 - the version this harness writes

HERE = Path(__file__).parent


def goal(tmp_path: Path, run: int = 0, steps: int = 5, **hang: Any) -> dict[str, Any]:
    g: dict[str, Any] = {"run": run, "steps": steps, "ledger": str(tmp_path / "ledger.db")}
    if hang:
        g["hang"] = hang
    return g


def executor(**options: Any) -> Executor:
    sys.path.insert(0, str(HERE))
    from fleet_agent import make_agent

    planner, tools, verifier = make_agent()
    return Executor(planner=planner, tools=tools, verifier=verifier, **options)


def ledger(tmp_path: Path) -> list[tuple[str, int, int, int]]:
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        return sorted(db.execute("SELECT key, run, step, calls FROM effects"))


def objects(url: str) -> list[str]:
    return harness.store.open(url).listing()


CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import orjson
from fleet_agent import make_agent
from harness import Executor
planner, tools, verifier = make_agent()
ex = Executor(planner=planner, tools=tools, verifier=verifier, trace=sys.argv[2], resume="auto")
ex.run(orjson.loads(sys.argv[3]))
"""


def start(trace: str, g: dict[str, Any]) -> children.Forked:
    import orjson

    args = [sys.executable, "-c", CHILD, str(HERE), trace, orjson.dumps(g).decode()]
    return CHILDREN.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(marker: Path, child: children.Forked) -> int:
    children.wait_for(marker, child, "the step it hangs in")
    return int(marker.read_text())


def test_a_run_on_s3_is_segments_whose_concatenation_is_a_valid_local_trace(runs: str, tmp_path: Path) -> None:
    out = executor(runs_dir=runs).run(goal(tmp_path))
    assert out.state == "DONE" and out.trace.startswith(runs + "/") and out.trace.endswith(".jsonl")
    names = [p.rsplit("/", 1)[1] for p in objects(out.trace)]
    assert names == [f"{n:06d}.seg" for n in range(1, len(names) + 1)]
    loc = harness.store.open(out.trace)
    whole = b"".join(loc.read(p) for _, p in loc.segments())
    (tmp_path / "copy.jsonl").write_bytes(whole)
    local = harness.replay(tmp_path / "copy.jsonl")  # the same bytes as a local trace: the same checks pass
    remote = harness.replay(out.trace)
    assert remote.path == out.trace and remote.state == local.state == "DONE"
    assert (
        [c.result for c in remote.checkpoints]
        == [c.result for c in local.checkpoints]
        == [c.result for c in out.checkpoints]
    )


def in_bucket(trace: str, tmp_path: Path) -> harness.Replay:
    """replay() of what the bucket itself holds (not the spool of a writer in this process)."""
    loc = harness.store.open(trace)
    copy = tmp_path / f"bucket-{len(list(tmp_path.iterdir()))}.jsonl"
    copy.write_bytes(b"".join(loc.read(p) for _, p in loc.segments()))
    return harness.replay(copy)


def test_a_declared_intent_is_in_the_bucket_before_the_tool_runs(runs: str, tmp_path: Path) -> None:
    trace = f"{runs}/r.jsonl"
    seen: list[Any] = []
    ex = executor(trace=trace)
    charge = ex.tools["charge"]
    assert isinstance(charge, harness.Tool)

    def spy(**kwargs: Any) -> Any:  # what a resume on another machine would find, read while the tool runs
        rep = in_bucket(trace, tmp_path)
        seen.append((rep.state, rep.tail.intent["key"] if rep.tail.intent else None, kwargs["idempotency_key"]))
        return charge.fn(**kwargs)

    ex.tools["charge"] = harness.Tool(spy, idempotent=True)
    assert ex.run(goal(tmp_path, steps=2)).state == "DONE"
    assert [s[0] for s in seen] == ["ACT", "ACT"] and all(s[1] == s[2] for s in seen)


def test_sigkill_then_resume_in_another_process_from_the_bucket_alone(runs: str, tmp_path: Path) -> None:
    trace = f"{runs}/killed.jsonl"
    marker = tmp_path / "inside"
    g = goal(tmp_path, steps=6, tool="charge", step=3, marker=str(marker))
    child = start(trace, g)
    try:
        assert wait_for(marker, child) == child.pid
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    before = harness.replay(trace)
    assert before.state == "ACT" and before.tail.intent is not None and before.tail.intent["step"] == 3
    segments = [p for p in objects(trace) if p.endswith(".seg")]
    # the dead writer left no lock behind: its segments, and its lease, which only a lister reads (it goes stale)
    assert [p.rsplit("/", 1)[1] for p in objects(trace) if not p.endswith(".seg")] == ["lease"]
    child = start(trace, g)  # another process, nothing local: the bucket is all it has
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err.decode()
    after = harness.replay(trace)
    assert after.state == "DONE" and after.resumes == 1 and len(after.checkpoints) == 6
    assert len(objects(trace)) > len(segments)  # it went on with the next segments, the old ones untouched
    assert all(p.endswith(".seg") for p in objects(trace))  # and released the lease as it closed
    rows = ledger(tmp_path)
    assert sorted(r[2] for r in rows) == list(range(6))  # one row per step: each effect applied once
    assert {r[2]: r[3] for r in rows}[3] == 2  # step 3 was called again with the same key, applied once
    assert [c.result["charged"] for c in after.checkpoints] == [r[0] for r in sorted(rows, key=lambda r: r[2])]


def test_an_unsafe_call_in_flight_pauses_the_resumed_run(runs: str, tmp_path: Path) -> None:
    trace = f"{runs}/unsafe.jsonl"
    marker = tmp_path / "inside"
    g = goal(tmp_path, steps=4, tool="send", step=2, marker=str(marker))
    child = start(trace, g)
    try:
        wait_for(marker, child)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
    out = executor(trace=trace, resume=True).run(g)
    assert out.state == "PAUSED" and out.pending is not None and out.pending["tool"] == "send"
    assert out.trace == trace and harness.replay(trace).state == "PAUSED"
    assert main(["reconcile", trace, "--not-happened", "--evidence", "no mail sent"]) == 0
    assert executor(trace=trace, resume=True).run(g).state == "DONE"


def test_two_writers_racing_on_one_run_exactly_one_advances(runs: str, tmp_path: Path) -> None:
    trace = f"{runs}/raced.jsonl"
    marker, release = tmp_path / "inside", tmp_path / "release"
    g = goal(tmp_path, steps=4, tool="charge", step=1, marker=str(marker), release=str(release))
    first = start(trace, g)
    try:
        wait_for(marker, first)  # the first writer is inside step 1, its intent shipped
        second = executor(trace=trace, resume=True).run(g)  # believes the first gone; takes over the run
        assert second.state == "DONE"
        release.write_text("go")  # the first writer wakes up and tries to ship its result
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode != 0
    assert "FenceLost" in err.decode() and "another writer advanced this run" in err.decode()
    rep = harness.replay(trace)  # one story, the second writer's
    assert rep.state == "DONE" and rep.resumes == 1 and len(rep.checkpoints) == 4
    assert [r[3] for r in ledger(tmp_path) if r[2] == 1] == [2]  # the same key twice: applied once


def test_two_new_writers_of_one_run_the_second_loses_the_fence(runs: str) -> None:
    a = RemoteJournal.open_url(f"{runs}/new.jsonl")
    b = RemoteJournal.open_url(f"{runs}/new.jsonl")  # both saw no segment
    try:
        a.append("header", {"schema": SCHEMA, "run_id": "a", "goal": 1, "tools": {}}, sync=True)
        with pytest.raises(FenceLost) as e:
            b.append("header", {"schema": SCHEMA, "run_id": "b", "goal": 2, "tools": {}}, sync=True)
        assert e.value.segment == 1 and e.value.url == f"{runs}/new.jsonl"
        with pytest.raises(harness.JournalError):  # a writer that lost its fence accepts nothing more
            b.append("resume", {})
    finally:
        a.close()
        b.close()
    assert harness.replay(f"{runs}/new.jsonl").header["run_id"] == "a"


def test_runs_show_replay_and_diff_read_the_bucket(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_LEASE_SECONDS", "0.2")  # the killed writer's lease goes stale in 0.6 s (lease.py)
    done = executor(runs_dir=runs).run(goal(tmp_path, steps=2))
    marker = tmp_path / "inside"
    child = start(f"{runs}/stopped.jsonl", goal(tmp_path, run=1, steps=3, tool="charge", step=1, marker=str(marker)))
    try:
        wait_for(marker, child)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
    until_stale(runs, f"{runs}/stopped.jsonl")
    capsys.readouterr()
    assert main(["runs", runs, "--json"]) == 0
    import orjson

    listed = {r["path"]: r for r in orjson.loads(capsys.readouterr().out)}
    assert listed[done.trace]["status"] == "done" and listed[done.trace]["id"] == done.run_id
    assert listed[f"{runs}/stopped.jsonl"]["status"] == "interrupted"
    assert main(["show", done.trace]) == 0
    shown = capsys.readouterr().out
    assert "PLAN -> ACT" in shown and "charge" in shown
    assert main(["replay", done.trace]) == 0
    assert "valid, state DONE" in capsys.readouterr().out
    assert main(["diff", done.trace, done.trace]) == 0
    # a segment edited in the bucket: the reader names the URL and the line, as for a local file
    loc = harness.store.open(done.trace)
    _, path = loc.segments()[2]
    data = loc.read(path)
    loc.fs.pipe_file(path, data.replace(b'"step":0', b'"step":7', 1))
    assert main(["replay", done.trace]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{done.trace}:") and "checksum" in err
    with pytest.raises(TraceCorruption) as e:
        harness.replay(done.trace)
    assert e.value.path == done.trace


def test_bad_urls_are_clear_errors(server: str, runs: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(TraceUnreadable, match="no such trace"):
        harness.replay(f"{runs}/missing.jsonl")
    assert main(["runs", "s3://no-such-bucket-here/runs"]) == 2
    assert "no such runs folder" in capsys.readouterr().err
    with pytest.raises(harness.HarnessError, match="fsspec"):
        harness.replay("nosuchprotocol://x/y.jsonl")
    with pytest.raises(harness.HarnessError):  # a bucket that does not exist: nothing is created
        executor(trace="s3://no-such-bucket-here/r.jsonl").run({"run": 0, "steps": 1, "ledger": "/nonexistent"})


def test_rerun_reads_the_bucket_and_writes_a_local_trace(runs: str, tmp_path: Path) -> None:
    done = executor(runs_dir=runs).run(goal(tmp_path, steps=2))
    out = tmp_path / "again.jsonl"
    assert main(["rerun", done.trace, "--agent", "fleet_agent:make_agent", "--out", str(out)]) == 0
    assert harness.replay(out).state == "DONE"  # (to a URL: tests/test_store_ops.py)


def test_durability_fsync_ships_every_write_and_a_missing_segment_or_torn_one_is_named(
    runs: str, tmp_path: Path
) -> None:
    flushed = executor(runs_dir=runs).run(goal(tmp_path, steps=2))
    done = executor(runs_dir=runs, durability="fsync").run(goal(tmp_path, steps=2))
    loc = harness.store.open(done.trace)
    segments = loc.segments()
    rep = harness.replay(done.trace)
    assert len(harness.store.open(flushed.trace).segments()) < len(segments)  # INIT -> PLAN is its own segment
    assert len(segments) == rep.records - 1  # one a write: the end and its seal are one
    fs = loc.fs
    fs.pipe_file(segments[-1][1], loc.read(segments[-1][1])[:-1])  # no newline at its end
    with pytest.raises(TraceCorruption) as e:
        harness.replay(done.trace)
    assert e.value.reason == "torn-segment" and e.value.path == done.trace and e.value.line == rep.records
    fs.rm(segments[2][1])
    with pytest.raises(TraceCorruption) as e:
        harness.replay(done.trace)
    assert e.value.reason == "segment-gap" and "000003.seg is missing" in str(e.value)
    with pytest.raises(TraceCorruption):  # a writer refuses it too, and ships nothing
        executor(trace=done.trace, resume=True).run(goal(tmp_path, steps=2))
    assert len(loc.listing()) == len(segments) - 1


def test_a_file_url_uses_the_same_layout_without_a_server(tmp_path: Path) -> None:
    pytest.importorskip("fsspec", reason="fsspec is not installed: pip install 'harness-trace[s3]'")
    runs = f"file://{tmp_path}/runs"
    done = executor(runs_dir=runs).run(goal(tmp_path, steps=2))
    folder = Path(done.trace.removeprefix("file://"))
    assert sorted(p.name for p in folder.iterdir())[0] == "000001.seg"
    assert [r.status for r in harness.list_runs(runs)] == ["done"]
    assert harness.replay(done.trace).state == "DONE"


def test_harness_storage_options_that_are_not_json_are_a_clear_error(
    runs: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HARNESS_STORAGE_OPTIONS", "{not json")
    assert main(["runs", runs]) == 2
    assert "$HARNESS_STORAGE_OPTIONS is not valid JSON" in capsys.readouterr().err


def test_a_recorder_writes_to_the_bucket_too(runs: str) -> None:
    with harness.Recorder(f"{runs}/rec.jsonl", entrypoint="loop.py", goal="g") as rec:
        rec.log("input", {"q": 1})
        assert harness.now() is not None
    rep = harness.replay(f"{runs}/rec.jsonl")
    assert rep.state == "DONE" and rep.sealed and [r.status for r in harness.list_runs(runs)] == ["done"]


def test_harness_serve_of_a_runs_url_lists_and_shows_runs_from_the_bucket_and_follows_it(
    runs: str, tmp_path: Path
) -> None:
    pytest.importorskip("starlette", reason="the viewer needs the web extra: pip install 'harness-trace[web]'")
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (in the test extra)")
    from starlette.testclient import TestClient

    from harness.viewer import create_app

    first = executor(runs_dir=runs).run(goal(tmp_path, steps=2))
    with TestClient(create_app(runs), base_url="http://127.0.0.1") as client:
        rows = {r["run_id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert rows[first.run_id]["status"] == "done" and rows[first.run_id]["steps"] == 2
        summary = client.get(f"/api/runs/{rows[first.run_id]['id']}/summary")
        assert summary.status_code == 200 and first.run_id in summary.text
        second = executor(runs_dir=runs).run(goal(tmp_path, run=1, steps=1))  # written after the viewer started
        deadline = time.monotonic() + 60  # a hang guard: the mirror syncs every second
        while second.run_id not in {r["run_id"] for r in client.get("/api/runs").json()["runs"]}:
            assert time.monotonic() < deadline, "the viewer never showed the run written after it started"
            time.sleep(0.2)


def test_exists_and_join_take_a_path_or_a_url(runs: str, tmp_path: Path) -> None:
    assert not harness.store.exists(f"{runs}/r.jsonl") and not harness.store.exists(tmp_path / "r.jsonl")
    done = executor(trace=harness.store.join(runs, "r.jsonl")).run(goal(tmp_path, steps=1))
    assert done.trace == f"{runs}/r.jsonl" and harness.store.exists(done.trace)
    before = objects(done.trace)
    with pytest.raises(harness.TraceExists):  # a new run on a trace that holds one, as for a file
        executor(trace=done.trace).run(goal(tmp_path, steps=1))
    assert objects(done.trace) == before  # nothing was shipped
    assert harness.store.join(str(tmp_path), "r.jsonl") == str(tmp_path / "r.jsonl")
    assert harness.store.local_copy(tmp_path / "x.jsonl") == str(tmp_path / "x.jsonl")  # a local path is itself
    assert Path(harness.store.local_copy(done.trace)).read_bytes().startswith(b'{"seq":1,"kind":"header"')


def test_a_segment_already_there_with_the_writers_own_bytes_is_its_retried_upload_not_a_lost_fence(
    runs: str,
) -> None:
    url = f"{runs}/retried.jsonl"
    header = {"schema": SCHEMA, "run_id": "a", "goal": 1, "tools": {}}
    a = RemoteJournal.open_url(url)
    a.t0 = 0.0  # (no header: the records' clock starts at the epoch)
    try:
        a.append("crossing", {"boundary": "now", "request": None, "response": 1.0, "hash": "x"})  # not shipped yet
        loc = harness.store.open(url)
        assert loc.create("000001.seg", Path(a.spool).read_bytes())  # as if a lost answer's PUT had landed
        a.ship()  # 412, but the segment holds these very bytes: shipped
        assert a.next_segment == 2
        a.append("crossing", {"boundary": "now", "request": None, "response": 2.0, "hash": "x"})
        assert loc.create("000002.seg", b'{"seq":2}\n')  # another writer's bytes
        with pytest.raises(FenceLost):
            a.append("header", header, sync=True)
    finally:
        a.close()


PLAIN = """
import os, sys, time
import harness
from harness import Executor, Step
trace, marker = sys.argv[1], sys.argv[2]

def planner(goal, done):
    if len(done) == 2:
        return None
    said = harness.llm({"ask": len(done)}, lambda req: f"answer {req['ask']}")  # a crossing
    return Step(f"s{len(done)}", "work", {"said": said})

def work(said):
    if said == "answer 1" and not os.path.exists(marker):
        with open(marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(marker + ".tmp", marker)
        time.sleep(300)
    return {"done": said}

Executor(planner=planner, tools={"work": work}, trace=trace, resume="auto").run("g")
"""


def test_a_crash_loses_only_the_unshipped_tail_and_the_resume_does_it_again(runs: str, tmp_path: Path) -> None:
    trace, marker = f"{runs}/plain.jsonl", tmp_path / "inside"
    child = CHILDREN.Popen([sys.executable, "-c", PLAIN, trace, str(marker)], stderr=subprocess.PIPE)
    try:
        wait_for(marker, child)  # inside step 1's plain tool, its crossing and intent in the spool only
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
    rep = harness.replay(trace)
    assert rep.state == "PLAN" and len(rep.checkpoints) == 1  # the bucket ends with step 0's checkpoint
    assert [c.kind for c in rep.crossings] == ["llm", "tool"]  # step 0's: step 1's crossing was not shipped
    child = CHILDREN.Popen([sys.executable, "-c", PLAIN, trace, str(marker)], stderr=subprocess.PIPE)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 0, err.decode()
    rep = harness.replay(trace)
    assert rep.state == "DONE" and [c.result for c in rep.checkpoints] == [{"done": "answer 0"}, {"done": "answer 1"}]
    assert [c.kind for c in rep.crossings] == ["llm", "tool", "llm", "tool"]  # step 1 done again, once in the trace


def test_secrets_are_redacted_before_anything_reaches_the_bucket(runs: str) -> None:
    key = "sk-proj-LIVEKEY0123456789abcdefghij"
    ex = Executor(
        planner=lambda goal, done: None if done else harness.Step("s", "work", {}),
        tools={"work": lambda: {"token": key}},
        trace=f"{runs}/secret.jsonl",
    )
    assert ex.run("g").state == "DONE"
    loc = harness.store.open(f"{runs}/secret.jsonl")
    stored = b"".join(loc.read(p) for _, p in loc.segments())
    assert key.encode() not in stored and harness.MARKER.encode() in stored


def test_blobs_go_to_the_bucket_beside_the_traces_and_a_sealed_run_verifies_from_it(
    runs: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may land in a local folder named after the URL
    big = {"text": "x" * 5000}
    ex = Executor(
        planner=lambda goal, done: None if done else harness.Step("s", "work", {}),
        tools={"work": lambda: big},
        runs_dir=runs,
        blob_threshold=1024,
    )
    out = ex.run("g")
    assert out.state == "DONE" and out.checkpoints[0].result == big
    blobs = harness.store.open(f"{runs}/blobs").listing()
    assert len(blobs) == 1 and not any(p.name.startswith("s3") for p in tmp_path.iterdir())
    rep = harness.replay(out.trace)  # a fresh copy, its blob fetched beside it
    assert rep.sealed and rep.checkpoints[0].result == big
    assert harness.verify(out.trace).ok
    assert main(["verify", out.trace]) == 0
    loc = harness.store.open(f"{runs}/blobs")
    loc.fs.pipe_file(blobs[0], b"altered")  # the bucket's blob changed: verify says so
    capsys.readouterr()
    harness.storage.read._folder = None  # a fresh copies folder: the blob fetched again, as another process would
    assert main(["verify", out.trace]) == 1
    assert "blob" in capsys.readouterr().out
