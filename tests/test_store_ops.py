"""The operations on a trace URL: seal, annotate, export, import, migrate, recover, rerun and fork into a bucket.

Against a real S3-compatible server on 127.0.0.1 (moto in server mode, the
fixtures of tests/s3server.py). What every test checks besides its own
story: no segment already in the bucket is ever rewritten (what writes to a
run ships new segments or new objects), and a refusal leaves the bucket as
it was. Skipped (saying why) only when the s3 extra or moto is not installed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from s3server import CHILDREN, need_s3, new_bucket, until_stale

need_s3()

import orjson  # noqa: E402 - after the skip
from children import Forked, kill_at, wait_for  # noqa: E402

import harness  # noqa: E402
from harness.cli import main  # noqa: E402
from harness.store import segment_name  # noqa: E402

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "schema1"


def executor(**options: Any) -> harness.Executor:
    sys.path.insert(0, str(HERE))
    from fleet_agent import make_agent

    planner, tools, verifier = make_agent()
    return harness.Executor(planner=planner, tools=tools, verifier=verifier, **options)


def goal(tmp_path: Path, run: int = 0, steps: int = 3, **hang: Any) -> dict[str, Any]:
    g: dict[str, Any] = {"run": run, "steps": steps, "ledger": str(tmp_path / "ledger.db")}
    if hang:
        g["hang"] = hang
    return g


def snapshot(url: str) -> dict[str, bytes]:
    """Every object under url (recursively), name -> bytes: what 'left as it was' is checked against."""
    loc = harness.store.open(url)
    return {p: loc.read(p) for p in loc.listing(recursive=True)}


def unchanged(before: dict[str, bytes], after: dict[str, bytes]) -> bool:
    """No object of before was rewritten or removed (new ones may have been added)."""
    return all(after.get(p) == data for p, data in before.items())


def unsealed_on_store(tmp_path: Path, url: str) -> None:
    """A run that ended DONE without a seal (written before seals existed), placed at url."""
    local = executor(trace=tmp_path / "local.jsonl").run(goal(tmp_path, steps=2))
    lines = Path(local.trace).read_bytes().splitlines(keepends=True)
    assert b'"kind":"seal"' in lines[-1]
    harness.store.open(url).create(segment_name(1), b"".join(lines[:-1]))


def test_seal_of_a_url_ships_the_seal_as_the_next_segment(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{runs}/old.jsonl"
    unsealed_on_store(tmp_path, url)
    before = snapshot(url)
    assert not harness.replay(url).sealed
    assert main(["seal", url]) == 0
    assert "sealed, unkeyed" in capsys.readouterr().out
    after = snapshot(url)
    assert unchanged(before, after) and len(after) == 2  # segment 1 as it was; the seal is segment 2
    rep = harness.replay(url)
    assert rep.sealed and rep.state == "DONE"
    assert main(["verify", url]) == 0
    assert main(["seal", url]) == 0 and "already sealed" in capsys.readouterr().out
    assert snapshot(url) == after  # nothing shipped the second time


def test_seal_of_a_url_refuses_a_run_that_has_not_ended_and_a_missing_one(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{runs}/live.jsonl"
    local = executor(trace=tmp_path / "local.jsonl").run(goal(tmp_path, steps=2))
    lines = Path(local.trace).read_bytes().splitlines(keepends=True)
    harness.store.open(url).create(segment_name(1), b"".join(lines[:4]))  # stopped mid-run
    before = snapshot(url)
    assert main(["seal", url]) == 2
    err = capsys.readouterr().err
    assert url in err and "has not ended" in err and "nothing was written" in err
    assert snapshot(url) == before
    assert main(["seal", f"{runs}/missing.jsonl"]) == 2
    assert "no such trace on the store" in capsys.readouterr().err
    assert harness.store.open(f"{runs}/missing.jsonl").listing() == []  # nothing was created for it


def test_annotate_a_url_adds_note_objects_beside_the_segments_and_keeps_the_seal(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = executor(runs_dir=runs).run(goal(tmp_path))
    before = snapshot(done.trace)
    assert main(["annotate", done.trace, "--note", "looked fine", "--key", "review"]) == 0
    assert harness.annotate(done.trace, "score", {"ok": 1})["value"] == {"ok": 1}
    after = snapshot(done.trace)
    assert unchanged(before, after)
    added = sorted(p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p in set(after) - set(before))
    assert added == ["notes/000001.json", "notes/000002.json"]
    assert [(n["key"], n["value"]) for n in harness.annotations(done.trace)] == [
        ("review", "looked fine"), ("score", {"ok": 1})
    ]  # fmt: skip
    assert main(["verify", done.trace]) == 0  # outside the seal: still sealed and intact
    capsys.readouterr()
    assert main(["show", done.trace]) == 0
    assert 'review: "looked fine"' in capsys.readouterr().out
    assert [r.status for r in harness.list_runs(runs)] == ["done"]  # notes are no run of their own
    assert main(["annotate", f"{runs}/nope.jsonl", "--note", "x"]) == 2
    assert "no such trace on the store" in capsys.readouterr().err


def test_annotators_racing_on_one_url_all_keep_their_note(runs: str, tmp_path: Path) -> None:
    done = executor(runs_dir=runs).run(goal(tmp_path, steps=1))
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def note(i: int) -> None:
        barrier.wait()
        try:
            harness.annotate(done.trace, "n", i)
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=note, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(n["value"] for n in harness.annotations(done.trace)) == list(range(8))  # none lost


def blob_agent(runs: str) -> harness.Executor:
    big = {"text": "y" * 5000}
    return harness.Executor(
        planner=lambda goal, done: None if done else harness.Step("s", "work", {}),
        tools={"work": lambda: big},
        runs_dir=runs,
        blob_threshold=1024,
    )


def test_export_from_a_bucket_and_import_into_another_round_trips(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = blob_agent(runs).run("g")
    b = executor(runs_dir=runs).run(goal(tmp_path, steps=2))
    harness.annotate(a.trace, "review", "ok")
    bundle = tmp_path / "out.zip"
    assert main(["export", runs, "--all", "-o", str(bundle)]) == 0
    names = set(zipfile.ZipFile(bundle).namelist())
    name_a, name_b = a.trace.rsplit("/", 1)[1], b.trace.rsplit("/", 1)[1]
    assert {name_a, name_b, f"{name_a}.annotations.json", "manifest.json"} <= names
    assert sum(n.startswith("blobs/") for n in names) == 1
    other = f"s3://{new_bucket()}/imported"
    capsys.readouterr()
    assert main(["import", str(bundle), "--into", other]) == 0
    assert "imported 2 runs" in capsys.readouterr().out
    for trace in (f"{other}/{name_a}", f"{other}/{name_b}"):
        assert [n for n, _ in harness.store.open(trace).segments()] == [1]  # the whole trace as one segment
        assert harness.verify(trace).ok
    assert harness.replay(f"{other}/{name_a}").checkpoints[0].result == {"text": "y" * 5000}  # its blob came along
    assert [n["value"] for n in harness.annotations(f"{other}/{name_a}")] == ["ok"]
    assert {r.status for r in harness.list_runs(other)} == {"done"}
    before = snapshot(other)
    assert main(["import", str(bundle), "--into", other]) == 0  # again: everything already there, the same bytes
    assert "already there" in capsys.readouterr().out and snapshot(other) == before
    local = tmp_path / "local-runs"  # and from the bucket's bundle into a local folder
    assert main(["import", str(bundle), "--into", str(local)]) == 0
    assert harness.verify(local / name_a).ok


def test_import_into_a_url_refuses_a_run_there_with_other_bytes_and_writes_nothing(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = blob_agent(runs).run("g")
    bundle = tmp_path / "a.zip"
    harness.export([a.trace], bundle)
    other = f"s3://{new_bucket()}/imported"
    clash = executor(trace=f"{other}/{a.trace.rsplit('/', 1)[1]}").run(goal(tmp_path, steps=1))  # same name
    before = snapshot(other)
    assert main(["import", str(bundle), "--into", other]) == 2
    err = capsys.readouterr().err
    assert clash.trace in err and "other bytes" in err and "nothing was written" in err
    assert snapshot(other) == before  # not even the blob


def test_export_of_an_unsealed_url_says_it_is_unsealed_and_import_keeps_it_so(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{runs}/old.jsonl"
    unsealed_on_store(tmp_path, url)
    assert main(["export", url, "-o", str(tmp_path / "x.zip")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("unsealed (kept so): old.jsonl")
    assert harness.import_bundle(tmp_path / "x.zip", f"{runs}/other").unsealed == ("old.jsonl",)
    assert not harness.replay(f"{runs}/other/old.jsonl").sealed
    assert "seal it with `harness seal" in "\n".join(harness.verify(f"{runs}/other/old.jsonl").report())
    assert main(["seal", url]) == 0
    assert main(["export", url, "-o", str(tmp_path / "y.zip")]) == 0
    assert "unsealed (kept so)" not in capsys.readouterr().out


def test_migrate_of_a_url_writes_a_new_run_and_leaves_the_original(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{runs}/happy.jsonl"
    harness.store.open(url).create(segment_name(1), (FIXTURES / "happy.jsonl").read_bytes())
    before = snapshot(runs)
    assert main(["migrate", url]) == 2
    err = capsys.readouterr().err
    assert url in err and "not migrated in place" in err and "--out" in err
    new = f"{runs}/happy.v2.jsonl"
    assert main(["migrate", url, "--out", new]) == 0
    assert "the original is unchanged" in capsys.readouterr().out
    assert unchanged(before, snapshot(runs))
    rep = harness.replay(new)
    assert rep.state == "DONE" and rep.header["schema"] == 2
    assert [p.rsplit("/", 1)[1] for p in harness.store.open(new).listing()] == ["000001.seg"]
    assert main(["seal", new]) == 0 and harness.verify(new).ok
    assert main(["migrate", url, "--out", new]) == 2  # never over a trace
    assert "already exists" in capsys.readouterr().err
    local = tmp_path / "happy.v2.jsonl"  # a local copy of the bucket's trace works the same way
    assert main(["migrate", url, "--out", str(local)]) == 0 and harness.replay(local).state == "DONE"


def start(trace: str, g: dict[str, Any]) -> Forked:
    child = """
import sys
sys.path.insert(0, sys.argv[1])
import orjson
from fleet_agent import make_agent
from harness import Executor
planner, tools, verifier = make_agent()
ex = Executor(planner=planner, tools=tools, verifier=verifier, trace=sys.argv[2], resume="auto")
ex.run(orjson.loads(sys.argv[3]))
"""
    args = [sys.executable, "-c", child, str(HERE), trace, orjson.dumps(g).decode()]
    return CHILDREN.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def kill_inside(trace: str, g: dict[str, Any], marker: Path) -> None:
    kill_at(marker, start(trace, g))


def test_recover_of_a_runs_url_resumes_the_killed_runs_from_the_bucket(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(HERE)  # --agent fleet_agent:make_agent is imported from the current directory
    monkeypatch.setenv("HARNESS_LEASE_SECONDS", "0.2")  # the killed writer's lease goes stale in 0.6 s
    done = executor(runs_dir=runs).run(goal(tmp_path, run=0, steps=2))
    killed = f"{runs}/killed.jsonl"
    marker = tmp_path / "in"
    kill_inside(killed, goal(tmp_path, run=1, steps=4, tool="charge", step=2, marker=str(marker)), marker)
    until_stale(runs, killed)
    before = snapshot(done.trace)
    capsys.readouterr()
    assert main(["recover", runs, "--agent", "fleet_agent:make_agent", "--json"]) == 0
    rows = orjson.loads(capsys.readouterr().out)
    rows = [(r["path"], r["was"], r["action"], r["state"]) for r in rows]
    assert rows == [(killed, "interrupted", "resumed", "DONE")]
    rep = harness.replay(killed)
    assert rep.state == "DONE" and rep.resumes == 1 and len(rep.checkpoints) == 4
    assert snapshot(done.trace) == before  # a run that ended is never touched
    assert main(["recover", runs, "--agent", "fleet_agent:make_agent"]) == 0  # again: nothing to do
    assert "nothing to recover" in capsys.readouterr().out


def asking(goal: Any, done: list[harness.Checkpoint]) -> harness.Step | None:
    """Two steps, each acting on what a model said: a crossing a fork can change."""
    if len(done) == 2:
        return None
    said = harness.llm({"ask": len(done)}, lambda req: f"answer {req['ask']}")
    return harness.Step(f"s{len(done)}", "work", {"said": said})


def work(said: str) -> dict[str, Any]:
    if said == "boom":
        raise RuntimeError("the model server is down")
    return {"done": said}


def test_rerun_and_fork_write_their_new_trace_to_a_url(runs: str, tmp_path: Path) -> None:
    parent = harness.Executor(planner=asking, tools={"work": work}, runs_dir=runs).run("g")
    before = snapshot(runs)
    again = harness.rerun(parent.trace, planner=asking, tools={"work": work}, out=f"{runs}/again.jsonl")
    assert again.equal and again.live_calls == 0 and again.trace == f"{runs}/again.jsonl"
    assert harness.replay(again.trace).state == "DONE" and harness.verify(again.trace).ok
    assert len(harness.store.open(again.trace).segments()) > 1  # shipped as it went, at the ship points of a run
    second = next(c for c in harness.replay(parent.trace).crossings if c.request == {"ask": 1})
    child = harness.fork(parent.trace, at=second.seq, value="forked", planner=asking, tools={"work": work})
    assert child.trace is not None and child.trace.startswith(runs + "/")  # beside its parent, in the bucket
    rep = harness.replay(child.trace)
    assert rep.header["parent"] == parent.run_id and rep.checkpoints[1].result == {"done": "forked"}
    listed = {r.path: r for r in harness.list_runs(runs)}
    assert listed[child.trace].parent == parent.run_id and listed[child.trace].status == "done"
    assert unchanged(before, snapshot(runs))  # the parent's segments as they were
    with pytest.raises(harness.HarnessError, match="already holds a run"):
        harness.rerun(parent.trace, planner=asking, tools={"work": work}, out=again.trace)


def test_a_fork_to_a_url_that_fails_leaves_no_segment_behind(runs: str, tmp_path: Path) -> None:
    parent = harness.Executor(planner=asking, tools={"work": work}, runs_dir=runs).run("g")
    second = next(c for c in harness.replay(parent.trace).crossings if c.request == {"ask": 1})
    out = f"{runs}/child.jsonl"
    with pytest.raises(RuntimeError, match="model server is down"):
        harness.fork(parent.trace, at=second.seq, value="boom", planner=asking, tools={"work": work}, out=out)
    assert harness.store.open(out).segments() == [] and not harness.store.exists(out)
    assert [r.path for r in harness.list_runs(runs)] == [parent.trace]


def renewals(trace: str, after: set[float], count: int, child: Forked) -> set[float]:
    """Wait until the writer of trace has renewed its lease `count` times more than after (each renewal's time)."""
    lease = harness.store.open(trace)
    seen = set(after)
    deadline = time.monotonic() + 120  # a hang guard, not a timing assertion
    while len(seen) < len(after) + count:
        assert child.poll() is None, child.communicate()[1].decode()
        assert time.monotonic() < deadline, "the live writer stopped renewing its lease"
        with contextlib.suppress(harness.TraceUnreadable):  # not written yet
            seen.add(orjson.loads(lease.read(f"{lease.root}/lease"))["renewed"])
        time.sleep(0.25)  # renewals come a period (1 s here) or more apart: none is missed
    return seen


def test_runs_of_a_url_tells_a_live_writer_from_a_killed_one(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HARNESS_LEASE_SECONDS", "1")  # renewed every second while idle; stale after 3 s of silence
    trace, marker = f"{runs}/live.jsonl", tmp_path / "in"
    g = goal(tmp_path, steps=3, tool="charge", step=1, marker=str(marker))
    child = start(trace, g)
    try:
        wait_for(marker, child)  # inside step 1's tool, which ships nothing until it returns
        seen = renewals(trace, set(), 4, child)  # silent for longer than a stale period, alive all along
        assert main(["runs", runs, "--json"]) == 0
        (row,) = orjson.loads(capsys.readouterr().out)
        assert (row["path"], row["status"]) == (trace, "running")
        renewals(trace, seen, 1, child)
        (skipped,) = harness.recover(runs, planner=lambda g, d: None, tools={})  # a live writer is left alone
        assert (skipped.was, skipped.action, skipped.detail) == ("running", "skipped", "a live writer renews its lease")
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
    until_stale(runs, trace)  # a stale period after the kill
    assert [r.status for r in harness.list_runs(runs)] == ["interrupted"]
    names = sorted(p.rsplit("/", 1)[1] for p in harness.store.open(trace).listing())
    assert "lease" in names  # left behind by the dead writer: it decides nothing, and goes stale
    out = executor(trace=trace, resume=True).run(g)  # the resume neither reads nor waits for it
    assert out.state == "DONE" and [r.status for r in harness.list_runs(runs)] == ["done"]
    assert all(p.endswith(".seg") for p in harness.store.open(trace).listing())  # released at the clean close


def test_a_bad_lease_period_is_a_clear_error(runs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_LEASE_SECONDS", "soon")
    with pytest.raises(harness.HarnessError, match="HARNESS_LEASE_SECONDS"):
        harness.Executor(planner=lambda g, d: None, tools={}, trace=f"{runs}/x.jsonl").run("g")
    assert harness.store.open(f"{runs}/x.jsonl").listing() == []


AGENTS = """
import os, sys, time
import harness
from harness import Executor, Step

trace, log, marker = sys.argv[1], sys.argv[2], sys.argv[3]

def model(request):
    return f"summary of {request}"

def worker(topic):
    hits = harness.boundary("search", {"q": topic}, lambda: [topic + "-1", topic + "-2"])
    summary = harness.llm({"summarize": hits}, model)
    harness.send("synthesizer", summary)
    return summary

def synthesizer():
    notes = [harness.receive(timeout=60).body for _ in range(2)]
    return harness.llm({"notes": sorted(notes)}, model)

def planner(goal, done):
    if not done:  # three agents on real threads, messages between them
        s = harness.spawn("synthesizer", synthesizer)
        a = harness.spawn("worker_a", worker, "sqlite")
        b = harness.spawn("worker_b", worker, "postgres")
        answer, *_ = harness.join(s, a, b)
        return Step("answer", "work", {"i": answer})
    if len(done) == 1:  # then three tool calls side by side
        return [Step(f"call{i}", "work", {"i": i}) for i in range(3)]
    return None

def in_bucket():
    loc = harness.store.open(trace)
    return sum(loc.read(p).count(b'"kind":"checkpoint"') for _, p in loc.segments())

def work(i):
    with open(log, "a") as f:
        f.write(f"{i}\\n")
    if i == 1 and not os.path.exists(marker + ".claim"):  # the first process dies in call 1
        open(marker + ".claim", "w").close()
        while in_bucket() < 3:  # once step 0's and calls 0 and 2's checkpoints are in the bucket
            time.sleep(0.01)
        with open(marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(marker + ".tmp", marker)
        time.sleep(600)
    return {"i": i}

out = Executor(planner=planner, tools={"work": work}, trace=trace, resume="auto").run("which database?")
print(out.state)
"""


def test_a_run_with_agents_on_a_url_killed_mid_run_resumes_from_the_bucket_and_verifies(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, log, marker = f"{runs}/agents.jsonl", tmp_path / "calls.log", tmp_path / "inside"
    args = [sys.executable, "-c", AGENTS, trace, str(log), str(marker)]
    kill_at(marker, CHILDREN.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    first = log.read_text().splitlines()
    assert sorted(first[1:]) == ["0", "1", "2"]  # step 0's tool, then the three calls, the process killed in call 1
    rep = harness.replay(trace)  # the bucket alone: the agents' step and two calls, call 1 in flight
    assert {"synthesizer", "worker_a", "worker_b"} <= set(rep.agents)
    assert [(c.agent, c.state, c.done) for c in rep.tail.group] == [
        ("step-1", "PLAN", True),
        ("step-2", "ACT", False),
        ("step-3", "PLAN", True),
    ]  # fmt: skip (each call of the parallel step is an agent, step-<its step>)
    again = CHILDREN.run(args, capture_output=True, timeout=120)  # another process, from the bucket alone
    assert again.returncode == 0 and again.stdout.decode().split() == ["DONE"], again.stderr.decode()
    assert log.read_text().splitlines()[len(first) :] == ["1"]  # only the call in flight ran again: no agent, no call
    rep = harness.replay(trace)
    assert rep.state == "DONE" and rep.resumes == 1 and rep.sealed
    assert [c.result for c in rep.checkpoints][1:] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert [c.kind for c in rep.agents["worker_a"]] == ["search", "llm", "agent_msg"]  # recorded once, not again
    assert harness.verify(trace).ok and main(["verify", trace]) == 0
    capsys.readouterr()
    assert main(["show", trace, "--vector"]) == 0 and "worker_b" in capsys.readouterr().out


def seg_names(url: str) -> list[str]:
    return sorted(p.rsplit("/", 1)[1] for p in harness.store.open(url).listing() if p.endswith(".seg"))


def whole(url: str) -> bytes:
    import io

    buffer = io.BytesIO()
    harness.store.open(url).download(buffer)
    return buffer.getvalue()


def test_compact_merges_a_sealed_runs_segments_into_one_object_holding_the_same_bytes(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    done = executor(runs_dir=runs, durability="fsync").run(goal(tmp_path, steps=3))  # a segment a write
    harness.annotate(done.trace, "review", "ok")
    before, names = whole(done.trace), seg_names(done.trace)
    n = len(names)
    assert n > 10 and names[-1] == f"{n:06d}.seg"
    assert main(["compact", done.trace]) == 0
    assert f"{n} objects -> 1" in capsys.readouterr().out
    assert seg_names(done.trace) == [f"000001-{n:06d}.seg"]
    assert whole(done.trace) == before  # the same bytes, from one object
    rep = harness.replay(done.trace)
    assert rep.sealed and rep.state == "DONE" and harness.verify(done.trace).ok
    assert [(r.status, r.records) for r in harness.list_runs(runs)] == [("done", rep.records)]
    assert [note["value"] for note in harness.annotations(done.trace)] == ["ok"]  # notes untouched
    with harness.store.open_journal(done.trace) as journal:  # a writer would go on with the next number
        assert isinstance(journal, harness.store.RemoteJournal) and journal.next_segment == n + 1
    assert main(["compact", done.trace]) == 0 and "nothing to do" in capsys.readouterr().out


def test_compact_refuses_a_run_that_is_not_sealed_and_changes_nothing(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{runs}/old.jsonl"
    local = executor(trace=tmp_path / "local.jsonl").run(goal(tmp_path, steps=2))
    lines = Path(local.trace).read_bytes().splitlines(keepends=True)[:-1]  # ended DONE, its seal left out
    loc = harness.store.open(url)
    loc.create(segment_name(1), b"".join(lines[:3]))
    loc.create(segment_name(2), b"".join(lines[3:]))
    before = snapshot(url)
    assert main(["compact", url]) == 2
    err = capsys.readouterr().err
    assert "not sealed" in err and f"harness seal {url}" in err and "nothing was changed" in err
    assert snapshot(url) == before
    assert main(["compact", str(tmp_path / "local.jsonl")]) == 2
    assert "a local trace is one file already" in capsys.readouterr().err


def test_a_reader_that_listed_before_a_compaction_reads_the_same_bytes_after_it(runs: str, tmp_path: Path) -> None:
    import io

    done = executor(runs_dir=runs).run(goal(tmp_path, steps=3))
    loc = harness.store.open(done.trace)
    listed = loc.segments()  # a reader lists, and is slow to read...
    before = whole(done.trace)
    harness.store.compact(done.trace)  # ...while the run is compacted: every object it listed is gone
    assert all(not loc.fs.exists(p) for _, p in listed)
    buffer = io.BytesIO()
    last, size, _ = loc.download(buffer, listed)  # it lists again and reads the span
    assert buffer.getvalue() == before and size == len(before) and last == len(listed)


def test_a_mirror_that_cannot_sync_logs_why_once_and_keeps_trying(
    runs: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed sync on the follow thread is not swallowed: it is logged (once while it stays the same)."""
    from harness.storage.mirror import Mirror

    executor(runs_dir=runs).run(goal(tmp_path, steps=1))
    gone = tmp_path / "gone"  # the mirror's folder, removed under it: every sync fails to write its copy
    mirror = Mirror(harness.store.open(runs), str(gone))
    with caplog.at_level("WARNING", logger="harness.storage.mirror"):
        mirror.follow(interval=0.01)
        deadline = time.monotonic() + 60  # a hang guard, not a timed assertion
        while len(caplog.records) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        gone.mkdir()  # the cause fixed: the next sync copies the run
        while not list(gone.glob("*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.01)
        mirror.stop()
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]
    said = caplog.records[0].getMessage()
    assert said.startswith(f"{runs}: following it failed") and "FileNotFoundError" in said and str(gone) in said


def test_a_mirror_that_copied_part_of_a_run_reads_only_the_rest_of_its_compacted_span(
    runs: str, tmp_path: Path
) -> None:
    from harness.storage.mirror import Mirror

    done = executor(runs_dir=runs).run(goal(tmp_path, steps=3))
    source = harness.store.open(done.trace)
    parts = [source.read(p) for _, p in source.segments()]
    other = f"s3://{new_bucket()}/runs"
    copy = harness.store.open(f"{other}/r.jsonl")
    for i, data in enumerate(parts[:3], 1):  # the run as a viewer saw it mid-way
        copy.create(segment_name(i), data)
    mirror = Mirror(harness.store.open(other), str(tmp_path))
    mirror.sync()
    assert (tmp_path / "r.jsonl").read_bytes() == b"".join(parts[:3])
    for i, data in enumerate(parts[3:], 4):  # the run went on, ended sealed, and was compacted
        copy.create(segment_name(i), data)
    harness.store.compact(f"{other}/r.jsonl")
    assert seg_names(f"{other}/r.jsonl") == [f"000001-{len(parts):06d}.seg"]
    mirror.sync()
    assert (tmp_path / "r.jsonl").read_bytes() == b"".join(parts)  # the rest of the span, once
    assert harness.replay(tmp_path / "r.jsonl").sealed
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    Mirror(harness.store.open(other), str(fresh)).sync()  # a viewer started after: the span whole
    assert (fresh / "r.jsonl").read_bytes() == b"".join(parts)


COMPACT = """
import os, sys, time
from harness.store import compact
open(sys.argv[2], "w").close()  # imported: the readers may start
while not os.path.exists(sys.argv[3]):  # once they are reading
    time.sleep(0.01)
compact(sys.argv[1])
"""


def test_readers_reading_while_another_process_compacts_always_read_the_whole_trace(runs: str, tmp_path: Path) -> None:
    done = executor(runs_dir=runs, durability="fsync").run(goal(tmp_path, steps=4))
    before = whole(done.trace)
    reads: list[bytes] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                reads.append(whole(done.trace))
            except BaseException as e:  # reported by the assertion below
                errors.append(e)
                return

    ready, go = tmp_path / "ready", tmp_path / "go"
    args = [sys.executable, "-c", COMPACT, done.trace, str(ready), str(go)]
    child = CHILDREN.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    threads = [threading.Thread(target=reader) for _ in range(2)]
    try:
        wait_for(ready, child)  # (its imports take a second: no read is spent before the compaction can start)
        for t in threads:
            t.start()
        while not reads and not errors:
            time.sleep(0.01)
        go.touch()  # the readers are reading: compact
        _, err = child.communicate(timeout=120)
    finally:
        stop.set()
        child.kill()
        for t in threads:
            if t.is_alive() or t.ident is not None:
                t.join()
    assert child.returncode == 0, err.decode()
    assert errors == [] and reads and all(r == before for r in reads)
    assert len(seg_names(done.trace)) == 1 and whole(done.trace) == before


def test_harness_serve_of_a_runs_url_shows_a_live_writer_running_and_a_killed_one_interrupted(
    runs: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("starlette", reason="the viewer needs the web extra: pip install 'harness-trace[web]'")
    pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (in the test extra)")
    from starlette.testclient import TestClient

    from harness.viewer import create_app

    monkeypatch.setenv("HARNESS_LEASE_SECONDS", "1")
    trace, marker = f"{runs}/live.jsonl", tmp_path / "in"
    child = start(trace, goal(tmp_path, steps=3, tool="charge", step=1, marker=str(marker)))
    try:
        wait_for(marker, child)
        run_id = harness.replay(trace).run_id

        def status(client: TestClient) -> str:
            rows = {r["run_id"]: r for r in client.get("/api/runs").json()["runs"]}
            return str(rows[run_id]["status"]) if run_id in rows else "-"

        def until(client: TestClient, wanted: str) -> None:
            deadline = time.monotonic() + 60  # a hang guard: the mirror syncs every second
            while status(client) != wanted:
                assert time.monotonic() < deadline, f"the viewer never showed the run {wanted}"
                time.sleep(0.2)

        with TestClient(create_app(runs), base_url="http://127.0.0.1") as client:
            until(client, "running")  # the mirror holds its copy's lock while the writer's lease is fresh
            os.kill(child.pid, signal.SIGKILL)
            until(client, "interrupted")  # its lease went stale: the lock is let go
    finally:
        child.kill()
        child.communicate()
