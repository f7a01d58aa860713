"""The viewer's HTTP API through Starlette's test client, and `harness serve` as a real process.

Every endpoint is exercised on a runs folder holding one run of each kind
(tests/viewer_runs.py). The event stream is read while a real executor in
another process writes the trace; `harness serve` is started as a
subprocess, asked over HTTP and stopped with SIGINT.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("starlette", reason="the viewer needs the web extra: pip install 'harness-trace[web]'")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx (in the test extra)")

import warnings

import httpx

with warnings.catch_warnings():  # Starlette >= 1.x prefers httpx2 for its TestClient; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from viewer_runs import AGENT, ROOT, fork_value, runs_folder, search_seq  # noqa: F401 - runs_folder: the `folder` fixture

import harness
from harness import Executor
from harness.testing import counter, fixed_plan, read_records, steps, write_trace
from harness.trace.line import SCHEMA  # the version this harness writes: fixtures follow it
from harness.viewer import RemoteForkRefused, create_app, serve
from harness.viewer._app import JOBS_KEPT, Job, Viewer
from harness.viewer._index import Index, classify, label, note

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def local(app: Any, **options: Any) -> TestClient:
    """A test client that talks to the app as a browser on this machine does (Host: 127.0.0.1)."""
    return TestClient(app, base_url="http://127.0.0.1", **options)


@pytest.fixture(scope="module")
def client(folder: tuple[Path, dict[str, str]]) -> Iterator[TestClient]:
    with local(create_app(folder[0])) as c:
        yield c


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}  # blobs/ too


# --- the runs page ------------------------------------------------------------------------


def test_the_runs_table_says_what_list_runs_says_newest_first(client: TestClient, folder: Any) -> None:
    path, ids = folder
    body = client.get("/api/runs").json()
    rows = {r["id"]: r for r in body["runs"]}
    assert body["folder"] == str(path)
    listed = {Path(r.path).stem: r for r in harness.list_runs(path)}
    assert set(rows) == set(listed)
    for run, info in listed.items():
        assert rows[run]["status"] == info.status and rows[run]["records"] == info.records
    assert [rows[ids[k]]["status"] for k in ("done", "failed", "paused", "killed", "unreadable")] == [
        "done",
        "failed",
        "paused",
        "interrupted",
        "unreadable",
    ]
    starts = [r["start_ts"] for r in body["runs"] if r["start_ts"] is not None]
    assert starts == sorted(starts, reverse=True)
    done, child = rows[ids["done"]], rows[ids["fork"]]
    assert "Should a small web app" in done["goal"] and done["steps"] == 3 and done["attempt"] == 1
    assert child["parent"] == done["run_id"] and child["parent_id"] == ids["done"]
    assert child["branch"] == search_seq(path / f"{ids['done']}.jsonl")
    failed = rows[ids["failed"]]
    assert failed["steps"] == 0 and failed["attempt"] == 3  # out of attempts on its first step


def test_the_runs_table_answers_304_while_nothing_changed(client: TestClient, tmp_path: Path) -> None:
    first = client.get("/api/runs")
    again = client.get("/api/runs", headers={"if-none-match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


def test_a_new_run_shows_up_in_the_table(tmp_path: Path) -> None:
    with local(create_app(tmp_path)) as c:
        assert c.get("/api/runs").json()["runs"] == []
        etag = c.get("/api/runs").headers["etag"]
        harness.Executor(planner=lambda g, p: None, tools={}, runs_dir=tmp_path).run("nothing to do")
        r = c.get("/api/runs", headers={"if-none-match": etag})
        assert r.status_code == 200 and [row["goal"] for row in r.json()["runs"]] == ["nothing to do"]


# --- a run --------------------------------------------------------------------------------


def test_a_finished_run_summary_and_records(client: TestClient, folder: Any) -> None:
    path, ids = folder
    trace = path / f"{ids['done']}.jsonl"
    recs = read_records(trace)
    s = client.get(f"/api/runs/{ids['done']}/summary").json()
    assert (s["status"], s["state"], s["records"], s["error"], s["torn"]) == ("done", "DONE", len(recs), None, 0)
    assert s["lanes"] == ["main"] and s["lane_codes"] == "" and len(s["codes"]) == len(recs)
    assert s["codes"][0] == "H" and s["codes"][-2:] == "Ds" and s["end"] == trace.stat().st_size  # DONE, seal
    window = client.get(f"/api/runs/{ids['done']}/records?start=2&count=5").json()
    assert window["start"] == 2 and window["total"] == len(recs)
    assert [b["seq"] for b in window["records"]] == [3, 4, 5, 6, 7]
    assert [b["col"] for b in window["records"]] == [2, 3, 4, 5, 6]  # sequential: one column per record
    one = client.get(f"/api/runs/{ids['done']}/record?line=4").json()
    assert one["record"] == recs[3] and one["line"] == 4 and one["lane"] == "main"


def test_a_record_is_given_whole_with_what_a_fork_would_change(client: TestClient, folder: Any) -> None:
    path, ids = folder
    at = search_seq(path / f"{ids['done']}.jsonl")
    one = client.get(f"/api/runs/{ids['done']}/record?line={at}").json()
    assert one["record"]["kind"] == "transition" and one["record"]["to"] == "VERIFY"
    assert one["forkable"] == {"at": at, "value": one["record"]["result"], "what": "the tool's result"}
    llm = next(r for r in read_records(path / f"{ids['done']}.jsonl") if r.get("boundary") == "llm")
    got = client.get(f"/api/runs/{ids['done']}/record?line={llm['seq']}").json()
    assert got["record"]["request"] == llm["request"] and got["forkable"]["value"] == llm["response"]


def test_fork_roles_come_from_the_child_header_and_reused_marks(client: TestClient, folder: Any) -> None:
    path, ids = folder
    s = client.get(f"/api/runs/{ids['fork']}/summary").json()
    branch = s["branch"]
    assert s["parent_id"] == ids["done"] and branch == search_seq(path / f"{ids['done']}.jsonl")
    roles = {b["seq"]: b["role"] for b in client.get(f"/api/runs/{ids['fork']}/records?count=100").json()["records"]}
    assert roles[1] is None and roles[branch] == "answered" and roles[branch + 1] == "live"
    assert {roles[q] for q in range(2, branch)} == {"served"}  # harness show's words
    plain = client.get(f"/api/runs/{ids['done']}/records").json()["records"]
    assert {b["role"] for b in plain} == {None}


def test_a_run_page_has_its_ledger_live_apart_from_served(client: TestClient, folder: Any) -> None:
    """The summary's `cost` is `harness cost`'s ledger of the run: a fork's calls before its branch served."""
    from harness.review.cost import run_cost

    path, ids = folder
    done = client.get(f"/api/runs/{ids['done']}/summary").json()["cost"]
    assert done == run_cost(path / f"{ids['done']}.jsonl").to_json(None)
    assert done["models"] and {m["how"] for m in done["models"]} == {"live"}
    fork = client.get(f"/api/runs/{ids['fork']}/summary").json()["cost"]
    served = sum(m["calls"] for m in fork["models"] if m["how"] == "served")
    recorded = sum(m["calls"] for m in done["models"])
    assert 0 < served <= recorded and fork == run_cost(path / f"{ids['fork']}.jsonl").to_json(None)


def test_a_paused_run_names_its_operation_and_the_reconcile_commands(folder: Any, tmp_path: Path) -> None:
    path, _ids = folder
    copy = tmp_path / "runs"
    copy.mkdir()
    (copy / "paused.jsonl").write_bytes((path / "paused.jsonl").read_bytes())
    with local(create_app(copy)) as c:
        s = c.get("/api/runs/paused/summary").json()
    assert s["status"] == "paused" and s["state"] == "PAUSED"
    assert s["pending"] == {"seq": s["pending"]["seq"], "step": 1, "tool": "pay", "args": {"amount": 5}}
    cmd = s["reconcile"]["not_happened"]
    assert cmd.startswith(f"harness reconcile {copy / 'paused.jsonl'} --not-happened")
    assert "--happened --result" in s["reconcile"]["happened"]
    done = subprocess.run(shlex.split(cmd), capture_output=True, text=True, cwd=tmp_path)  # the exact command
    assert done.returncode == 0, done.stderr
    assert harness.replay(copy / "paused.jsonl").tail.reconcile is not None
    with local(create_app(copy)) as c:  # reconciled: the page offers the resume, never the reconcile again
        s = c.get("/api/runs/paused/summary").json()
    assert s["state"] == "PAUSED" and s["reconcile"] is None and s["answer"] is None
    assert s["resume"] == f"harness resume {copy / 'paused.jsonl'} --agent MODULE:FACTORY"
    again = subprocess.run(shlex.split(cmd), capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode != 0  # (what the page no longer offers: harness refuses a second reconcile)


def test_a_corrupt_trace_shows_the_corruption_and_everything_before_it(client: TestClient, folder: Any) -> None:
    path, _ids = folder
    r = client.get("/api/runs/corrupt/summary")
    assert r.status_code == 200
    s = r.json()
    assert s["error"]["line"] == 7 and s["error"]["reason"] == "checksum" and s["error"]["seq"] == 7
    assert s["records"] == 6 and len(s["codes"]) == 6
    window = client.get("/api/runs/corrupt/records?count=100").json()
    assert [b["line"] for b in window["records"]] == [1, 2, 3, 4, 5, 6] and window["total"] == 6
    assert client.get("/api/runs/corrupt/record?line=7").status_code == 404
    assert client.get("/api/runs/corrupt/record?line=6").json()["record"] == read_records(path / "corrupt.jsonl")[5]


@pytest.mark.parametrize(
    "content",
    [b"", b"not a trace\n", b'{"seq":1,"kind":"head', b"\x00\xff" * 100],
    ids=["empty", "foreign", "torn-header", "binary"],
)
def test_a_file_that_is_no_trace_is_an_error_on_the_page_never_a_500(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "x.jsonl").write_bytes(content)
    with local(create_app(tmp_path), raise_server_exceptions=False) as c:
        assert c.get("/api/runs").status_code == 200
        r = c.get("/api/runs/x/summary")
        assert r.status_code == 200 and r.json()["error"] is not None and r.json()["records"] == 0
        assert c.get("/api/runs/x/records").json()["records"] == []
        assert c.get("/api/runs/x/record?line=1").status_code == 404
        assert c.get("/runs/x").status_code == 200


FLOW = """
import os, time
from pathlib import Path
import harness

def slow(n: int) -> int:
    if os.environ.get("FLOW_WAIT"):
        Path(os.environ["FLOW_WAIT"]).write_text("in")
        time.sleep(600)  # until the test's SIGINT
    return n

@harness.workflow
def flow(n: int) -> int:
    return harness.call(slow, n=n)
"""


def test_a_workflow_stopped_by_ctrl_c_offers_the_command_that_resumes_a_workflow(tmp_path: Path) -> None:
    """The Interrupted banner's command, for a workflow run stopped by a real SIGINT: `harness resume --workflow`
    with the workflow's own name, which does resume it (as run, from the runs folder)."""
    runs, mark = tmp_path / "runs", tmp_path / "in"
    runs.mkdir()
    (tmp_path / "sigint_flow.py").write_text(FLOW)
    environ = {**os.environ, "PYTHONPATH": str(tmp_path), "FLOW_WAIT": str(mark)}
    code = f"import sigint_flow; sigint_flow.flow.run(7, trace={str(runs / 'stopped.jsonl')!r})"
    child = subprocess.Popen([sys.executable, "-c", code], env=environ, stderr=subprocess.PIPE)
    try:
        while not mark.exists() and child.poll() is None:
            time.sleep(0.01)
        child.send_signal(signal.SIGINT)  # Ctrl-C, inside the workflow's call
        _, err = child.communicate(timeout=60)  # a hang guard, not a timing assertion
    finally:
        child.kill()
    assert child.returncode != 0 and b"KeyboardInterrupt" in err
    with local(create_app(runs)) as c:
        s = c.get("/api/runs/stopped/summary").json()
    assert s["status"] == "interrupted" and s["pending"] is None
    assert s["resume"] == f"harness resume {runs / 'stopped.jsonl'} --workflow sigint_flow:flow"
    environ.pop("FLOW_WAIT")
    cli = shutil.which("harness") or str(Path(sys.executable).parent / "harness")  # (the venv's, when off PATH)
    command = shlex.split(s["resume"])
    assert command[0] == "harness"
    done = subprocess.run([cli, *command[1:]], capture_output=True, text=True, env=environ, cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # the exact command finishes it
    assert harness.replay(runs / "stopped.jsonl").returned == 7


def test_a_workflow_killed_as_a_script_offers_a_command_with_its_module_to_fill_in(tmp_path: Path) -> None:
    """A workflow run as a script no import can name (`python killed-flow.py`) is recorded as `__main__:flow`, a name
    `harness resume --workflow` cannot import (there `__main__` is the CLI): the banner's command names `MODULE:flow`,
    for the module to fill in. (A script with an importable name records that name: tests/test_workflow.py.)"""
    runs = tmp_path / "runs"
    runs.mkdir()
    script = FLOW.replace("time.sleep(600)  # until the test's SIGINT", "os.kill(os.getpid(), signal.SIGKILL)")
    script = script.replace("import os, time", "import os, signal, time")
    (tmp_path / "killed-flow.py").write_text(f"{script}\nflow.run(7, trace={str(runs / 'killed.jsonl')!r})\n")
    environ = {**os.environ, "FLOW_WAIT": str(tmp_path / "in")}
    child = subprocess.run([sys.executable, str(tmp_path / "killed-flow.py")], env=environ, timeout=120)
    assert child.returncode == -signal.SIGKILL
    assert harness.replay(runs / "killed.jsonl").header["workflow"] == "__main__:flow"
    with local(create_app(runs)) as c:
        s = c.get("/api/runs/killed/summary").json()
    assert (
        s["status"] == "interrupted" and s["resume"] == f"harness resume {runs / 'killed.jsonl'} --workflow MODULE:flow"
    )


def test_a_torn_tail_is_reported_and_never_served(client: TestClient, folder: Any) -> None:
    path, _ids = folder
    s = client.get("/api/runs/torn/summary").json()
    complete = read_records(path / "torn.jsonl")
    assert (
        s["error"] is None
        and s["records"] == len(complete)
        and s["torn"] == len(b'{"seq":99,"kind":"transition","from":"AC')
    )
    events = list(sse(client, "/api/runs/torn/events"))
    assert [e["data"]["record"] for e in events if e["event"] == "record"] == complete
    assert events[-1]["event"] == "end" and events[-1]["data"]["torn"] == s["torn"]


def clock(rec: dict[str, Any]) -> dict[str, int]:
    """A record's vector clock; before a run's first spawn it is implicitly {"main": seq} (docs/FORMAT.md)."""
    return rec.get("vc") or {"main": rec["seq"]}


def before(a: dict[str, int], b: dict[str, int]) -> bool:
    """a happened before b: a <= b in every component, and a != b."""
    return a != b and all(n <= b.get(agent, 0) for agent, n in a.items())


def test_a_real_concurrent_run_has_a_lane_per_agent_and_columns_in_causal_order(
    client: TestClient, folder: Any
) -> None:
    path, _ids = folder
    recs = read_records(path / "agents.jsonl")  # examples/pipeline.py, recorded: four agents on real threads
    s = client.get("/api/runs/agents/summary").json()
    assert s["error"] is None and s["state"] == "DONE"
    assert s["lanes"] == ["main", "synthesizer", "worker_a", "worker_b"]  # spawn order
    briefs = client.get("/api/runs/agents/records").json()["records"]
    assert [b["agent"] for b in briefs] == [r.get("agent", "main") for r in recs]
    assert s["lane_codes"] == "".join(str(s["lanes"].index(r.get("agent", "main"))) for r in recs)
    col = {b["seq"]: b["col"] for b in briefs}
    for a in recs:  # happened-before is never drawn backwards, whatever order the threads wrote the lines in
        for b in recs:
            if before(clock(a), clock(b)):
                assert col[a["seq"]] < col[b["seq"]], (a["seq"], b["seq"])
    search = {b["agent"]: b for b in briefs if b["label"] == "crossing search"}
    assert abs(search["worker_a"]["col"] - search["worker_b"]["col"]) <= 1  # concurrent: side by side
    # the ties between agents, as the page draws them
    spawns = {b["link"]["spawn"] for b in briefs if b["cls"] == "S"}
    joins = {b["link"]["join"] for b in briefs if b["cls"] == "J"}
    assert spawns == joins == {"synthesizer", "worker_a", "worker_b"}
    receives = [b for b in briefs if b["cls"] == "G"]
    sends = {(b["agent"], b["own"]) for b in briefs if b["cls"] == "M"}
    assert len(receives) == 2 and {(b["link"]["receive"], b["link"]["sent"]) for b in receives} == sends
    assert [b["cls"] for b in briefs if b["agent"] != "main"].count("Q") == 3  # each worker's exit


def test_annotations_are_read_only_from_regular_files_inside_the_runs_folder(folder: Any, tmp_path: Path) -> None:
    path, ids = folder
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("out", "fifo", "in", "noted"):
        (runs / f"{name}.jsonl").write_bytes((path / f"{ids['done']}.jsonl").read_bytes())
    (tmp_path / "secret.jsonl").write_bytes((path / f"{ids['done']}.jsonl").read_bytes())
    harness.annotate(tmp_path / "secret.jsonl", "password", "hunter2")  # a real annotations file, outside
    (runs / "out.jsonl.annotations.json").symlink_to(tmp_path / "secret.jsonl.annotations.json")  # not followed
    os.mkfifo(runs / "fifo.jsonl.annotations.json")  # nobody writes it: opening it must not hang the server
    harness.annotate(runs / "noted.jsonl", "n", 1)
    (runs / "in.jsonl.annotations.json").symlink_to(runs / "noted.jsonl.annotations.json")  # inside: read
    with local(create_app(runs)) as c:
        out = c.get("/api/runs/out/summary")
        assert "outside" in out.json()["annotations"]["error"] and "hunter2" not in out.text  # named, not read
        assert "a FIFO" in c.get("/api/runs/fifo/summary").json()["annotations"]["error"]
        assert [n["value"] for n in c.get("/api/runs/in/summary").json()["annotations"]["notes"]] == [1]


def test_annotations_are_shown_as_harness_annotate_wrote_them(folder: Any, tmp_path: Path) -> None:
    path, ids = folder
    for name in ("a", "b", "c", "d"):
        (tmp_path / f"{name}.jsonl").write_bytes((path / f"{ids['done']}.jsonl").read_bytes())
    first = harness.annotate(tmp_path / "a.jsonl", "verdict", "the search result that decided the answer <b>")
    second = harness.annotate(tmp_path / "a.jsonl", "ticket", {"id": 123, "by": "ops"})
    (tmp_path / "b.jsonl.annotations.json").write_bytes(b"{not json")
    (tmp_path / "d.jsonl.annotations.json").write_bytes(orjson.dumps([{"seq": 6, "note": "a list, not the format"}]))
    with local(create_app(tmp_path)) as c:
        a = c.get("/api/runs/a/summary").json()["annotations"]
        assert a["file"] == "a.jsonl.annotations.json" and a["notes"] == [first, second]
        assert a["notes"] == harness.annotations(tmp_path / "a.jsonl")  # what the library reads
        assert c.get("/api/runs/a/summary").json()["seal"] is not None  # annotating left the seal as it was
        assert "not JSON" in c.get("/api/runs/b/summary").json()["annotations"]["error"]
        assert c.get("/api/runs/c/summary").json()["annotations"] is None
        assert "not a harness-annotations file" in c.get("/api/runs/d/summary").json()["annotations"]["error"]


def test_a_sealed_run_is_sealed_and_intact_and_an_ended_unsealed_one_says_how_to_seal(
    folder: Any, tmp_path: Path
) -> None:
    path, ids = folder
    trace = path / f"{ids['done']}.jsonl"
    with local(create_app(path)) as c:
        s = c.get(f"/api/runs/{ids['done']}/summary").json()
        assert s["seal"] == {"line": s["records"], "state": "DONE", "keyed": False, "digests": 0}
        assert s["unsealed"] is False and s["error"] is None
        v = c.get(f"/api/runs/{ids['done']}/verify").json()
        assert v["ok"] and v["sealed"] and not v["keyed"] and v["problems"] == []
        assert v == {**v, "lines": len(read_records(trace))}
    lines = trace.read_bytes().splitlines(keepends=True)
    (tmp_path / "unsealed.jsonl").write_bytes(b"".join(lines[:-1]))  # the same run without its seal
    (tmp_path / "forged.jsonl").write_bytes(b"".join(lines[:-1]))
    with local(create_app(tmp_path)) as c:
        s = c.get("/api/runs/unsealed/summary").json()
        assert s["seal"] is None and s["unsealed"] is True and s["state"] == "DONE"
        assert s["seal_command"] == f"harness seal {tmp_path / 'unsealed.jsonl'}"
        assert c.get("/api/runs/unsealed/verify").json()["ok"] is False
    harness.seal(tmp_path / "forged.jsonl", seal_key="k")  # a keyed seal, and a server without the key
    with local(create_app(tmp_path)) as c:
        s = c.get("/api/runs/forged/summary").json()
        assert s["seal"]["keyed"] is True and s["unsealed"] is False
        v = c.get("/api/runs/forged/verify").json()
        assert not v["ok"] and "no key was given" in v["problems"][0]


def test_a_payload_stored_in_a_blob_is_shown_inline_and_checked(tmp_path: Path) -> None:
    big = {"text": "x" * 5000, "html": "<img src=x onerror=alert(1)>"}
    out = Executor(
        planner=fixed_plan(steps(1)), tools={"work": lambda i: big}, trace=tmp_path / "big.jsonl", blob_threshold=1024
    ).run("one big result")
    recs = read_records(out.trace)
    line = next(r["seq"] for r in recs if "blobs" in r)
    ref = recs[line - 1]["blobs"]["result"]
    with local(create_app(tmp_path)) as c:
        s = c.get("/api/runs/big/summary").json()
        assert s["blobs"] == 1 and s["seal"]["digests"] == 1
        brief = c.get(f"/api/runs/big/records?start={line - 1}&count=1").json()["records"][0]
        assert brief["note"].startswith("result in blob " + ref["sha256"][:12])
        one = c.get(f"/api/runs/big/record?line={line}").json()
        assert "result" not in one["record"] and one["inline"]["result"] == big  # read back in place
        assert one["stored"] == {"result": {"sha256": ref["sha256"], "size": ref["size"]}}
        assert one["forkable"]["value"] == big
        (tmp_path / "blobs" / ref["sha256"]).write_bytes(orjson.dumps({**big, "text": "y" * 5000}))  # altered
        one = c.get(f"/api/runs/big/record?line={line}").json()
        assert "result" not in one["inline"] and "altered" in one["stored"]["result"]["error"]
        assert not c.get("/api/runs/big/verify").json()["ok"]


def test_a_long_trace_is_served_in_windows_never_whole(tmp_path: Path) -> None:
    n = 4000  # steps: 12,004 records (header, INIT -> PLAN, 3 per step, PLAN -> DONE, seal)
    Executor(planner=fixed_plan(steps(n)), tools={"work": dict}, trace=tmp_path / "long.jsonl").run("long")
    size = (tmp_path / "long.jsonl").stat().st_size
    with local(create_app(tmp_path)) as c:
        summary = c.get("/api/runs/long/summary")
        s = summary.json()
        assert s["records"] == 3 * n + 4 and len(s["codes"]) == s["records"]
        assert len(summary.content) < size / 20  # a letter per record, no record bodies
        window = c.get("/api/runs/long/records?start=0&count=1000000").json()
        assert len(window["records"]) == 2000 and window["total"] == s["records"]
        middle = c.get(f"/api/runs/long/records?start={s['records'] - 3}&count=10").json()["records"]
        assert [b["line"] for b in middle] == [s["records"] - 2, s["records"] - 1, s["records"]]
        assert [b["cls"] for b in middle[-2:]] == ["D", "s"]  # DONE, then its seal


def test_unknown_record_kinds_are_shown_as_the_corruption_replay_says_they_are(tmp_path: Path) -> None:
    header = {"seq": 1, "kind": "header", "schema": SCHEMA, "run_id": "b" * 32, "goal": "g", "tools": {}, "ts": 1.0}
    plan = {"seq": 2, "kind": "transition", "from": "INIT", "to": "PLAN", "step": 0, "ts": 2.0}
    odd = {"seq": 3, "kind": "telemetry", "gauge": {"tokens": 12}, "ts": 3.0}
    write_trace(tmp_path / "odd.jsonl", [header, plan, odd])
    idx = Index(str(tmp_path / "odd.jsonl")).extend()  # one replay() pass: the index stops where it does
    assert len(idx) == 2 and idx.codes.decode() == "HP" and idx.broken["reason"] == "unknown-kind"
    brief = idx.brief(1, plan)
    assert brief["label"] == "INIT → PLAN" and brief["cls"] == "P"
    assert label(odd) == "telemetry" and classify(odd) == "o" and note(odd) == '{"gauge":{"tokens":12}}'
    with local(create_app(tmp_path)) as c:
        s = c.get("/api/runs/odd/summary").json()
        assert s["error"]["reason"] == "unknown-kind" and s["error"]["line"] == 3 and s["records"] == 2
        assert [b["line"] for b in c.get("/api/runs/odd/records").json()["records"]] == [1, 2]


def test_following_a_live_run_never_replays_it_for_a_window_or_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.viewer._index as index_module

    calls: list[str] = []
    real = index_module.replay

    def counted(path: Any, **kw: Any) -> Any:  # the real replay(), counted
        calls.append(str(path))
        return real(path, **kw)

    monkeypatch.setattr(index_module, "replay", counted)
    trace = tmp_path / "live.jsonl"
    done = Executor(planner=fixed_plan(steps(6)), tools={"work": dict}, trace=tmp_path / "whole.jsonl").run("six")
    lines = Path(done.trace).read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:10]))
    with local(create_app(tmp_path)) as c:
        assert c.get("/api/runs/live/summary").json()["records"] == 10
        assert len(calls) == 1  # one pass gave the index and the verdict
        with open(trace, "ab") as f:
            for n, line in enumerate(lines[10:], 11):  # the writer goes on, line by line
                f.write(line)
                f.flush()
                assert c.get("/api/runs/live/records?start=0&count=100").json()["total"] == n
                assert c.get(f"/api/runs/live/record?line={n}").json()["record"]["seq"] == n
        assert len(calls) == 1
        s = c.get("/api/runs/live/summary").json()  # the summary: replay()'s verdict on the longer file, once
        assert (s["records"], s["state"], len(calls)) == (len(lines), "DONE", 2)
        c.get("/api/runs/live/summary")
        assert len(calls) == 2  # nothing changed: not again


def test_lines_appended_with_a_broken_chain_or_seq_are_not_shown(tmp_path: Path) -> None:
    done = Executor(planner=fixed_plan(steps(2)), tools={"work": dict}, trace=tmp_path / "whole.jsonl").run("two")
    lines = Path(done.trace).read_bytes().splitlines(keepends=True)
    for name, bad in [("swapped", lines[6] + lines[5]), ("seq", lines[5].replace(b'"seq":6', b'"seq":9'))]:
        trace = tmp_path / f"{name}.jsonl"
        trace.write_bytes(b"".join(lines[:5]))
        idx = Index(str(trace)).extend()
        assert len(idx) == 5 and idx.broken is None
        with open(trace, "ab") as f:
            f.write(bad)
        idx.extend()
        assert len(idx) == 5 and idx.broken is not None and idx.broken["line"] == 6, name


# --- addresses ------------------------------------------------------------------------------


def test_addresses_cannot_leave_the_runs_folder(folder: Any, tmp_path: Path) -> None:
    path, ids = folder
    outside = tmp_path / "secret.jsonl"
    outside.write_bytes((path / f"{ids['done']}.jsonl").read_bytes())
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "sub").mkdir()
    (runs / "sub" / "inside.jsonl").write_bytes(outside.read_bytes())
    (runs / "link-out.jsonl").symlink_to(outside)
    (runs / "dir-out").symlink_to(tmp_path)
    (runs / "link-in.jsonl").symlink_to(runs / "sub" / "inside.jsonl")
    with local(create_app(runs)) as c:
        for bad in [
            "..%2Fsecret",
            "../secret",
            "%2E%2E/secret",
            "sub/../../secret",
            "link-out",
            "dir-out/secret",
            "%2Fetc%2Fpasswd",
            "/etc/passwd",
            "sub//inside",
            "missing",
            "sub%5C..%5C..%5Csecret",
            "a%00b",
        ]:
            for action in ("summary", "records", "events"):
                r = c.get(f"/api/runs/{bad}/{action}")
                assert r.status_code == 404, (bad, action, r.status_code)
            assert c.get(f"/runs/{bad}").status_code == 404, bad
        assert c.get("/api/diff?a=..%2Fsecret&b=sub/inside").status_code == 404
        assert c.get("/api/runs/sub/inside/summary").json()["state"] == "DONE"
        assert c.get("/api/runs/link-in/summary").json()["state"] == "DONE"
        # the table lists what can be opened: the subfolder's run by its path, never what lies outside
        assert sorted(r["id"] for r in c.get("/api/runs").json()["runs"]) == ["link-in", "sub/inside"]


def test_every_response_carries_a_content_security_policy(client: TestClient, folder: Any) -> None:
    _path, ids = folder
    for url in [
        "/",
        f"/runs/{ids['done']}",
        "/diff",
        "/static/run.js",
        "/static/style.css",
        "/api/runs",
        f"/api/runs/{ids['done']}/summary",
        "/api/runs/nope/summary",
        f"/api/runs/{ids['done']}/events",
    ]:
        r = client.get(url)
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp, url
        assert r.headers["x-content-type-options"] == "nosniff"


def test_pages_load_only_assets_shipped_in_the_package(client: TestClient) -> None:
    for page in ["/", "/diff"]:
        html = client.get(page).text
        refs = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert refs and all(ref.startswith("/static/") or ref == "data:," for ref in refs), refs
        for ref in refs:
            if ref.startswith("/static/"):
                assert client.get(ref).status_code == 200
    for name in ["common.js", "runs.js", "run.js", "diff.js"]:
        text = client.get(f"/static/{name}").text.replace('"http://www.w3.org/2000/svg"', "")  # a name, not fetched
        assert "http://" not in text and "https://" not in text and "innerHTML" not in text


def test_a_foreign_host_header_is_refused(client: TestClient) -> None:
    assert client.get("/api/runs", headers={"host": "evil.example"}).status_code == 400


# --- the live stream --------------------------------------------------------------------------


def sse(
    client: TestClient, url: str, headers: dict[str, str] | None = None, stop: int | None = None
) -> Iterator[dict[str, Any]]:
    """Parsed events of an SSE response; with `stop`, the connection is closed after that many records."""
    n = 0
    with client.stream("GET", url, headers=headers or {}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        event: dict[str, Any] = {}
        for line in r.iter_lines():
            if line == "":
                if "data" in event:
                    event["data"] = orjson.loads(event["data"])
                    yield event
                    n += event["event"] == "record"
                    if stop is not None and n >= stop:
                        return
                event = {}
                continue
            if line.startswith(":"):
                continue
            key, _, value = line.partition(": ")
            event[key] = value


def test_events_from_an_offset_are_complete_lines_and_resume_by_last_event_id(client: TestClient, folder: Any) -> None:
    path, ids = folder
    trace = path / f"{ids['done']}.jsonl"
    data = trace.read_bytes()
    recs = read_records(trace)
    first = list(sse(client, f"/api/runs/{ids['done']}/events", stop=5))
    assert [e["data"]["record"] for e in first] == recs[:5]
    for e in first:  # id: the byte offset after the line; offset: where it starts
        start, end = e["data"]["offset"], int(e["id"])
        assert data[start:end] == orjson.dumps(e["data"]["record"]) + b"\n"
    rest = list(sse(client, f"/api/runs/{ids['done']}/events", headers={"last-event-id": first[-1]["id"]}))
    assert [e["data"]["record"] for e in rest if e["event"] == "record"] == recs[5:]
    assert rest[-1]["event"] == "end" and rest[-1]["data"]["status"] == "done"
    by_query = list(sse(client, f"/api/runs/{ids['done']}/events?from={first[2]['id']}"))
    assert by_query[0]["data"]["line"] == 4
    assert client.get(f"/api/runs/{ids['done']}/events?from=7").status_code == 400  # not where a line starts
    assert client.get(f"/api/runs/{ids['done']}/events?from=x").status_code == 400


def test_events_follow_a_trace_a_real_executor_writes_in_another_process(tmp_path: Path) -> None:
    trace, gate = tmp_path / "live.jsonl", tmp_path / "go"
    writer = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "viewer_runs.py"), "slow", str(trace), "12", str(gate)]
    )
    try:
        while not (trace.exists() and trace.read_bytes().count(b'"to":"ACT"') >= 3):
            assert writer.poll() is None
            time.sleep(0.02)
        with local(create_app(tmp_path)) as c:
            seen: list[dict[str, Any]] = []
            # first connection: what is there, read while the writer waits at step 3; then dropped mid-run
            for e in sse(c, "/api/runs/live/events", stop=8):
                seen.append(e)
            assert writer.poll() is None  # still running: these records came from a file being written
            threading.Timer(0.3, gate.touch).start()
            for e in sse(c, "/api/runs/live/events", headers={"last-event-id": seen[-1]["id"]}):
                seen.append(e)
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    records = [e["data"]["record"] for e in seen if e["event"] == "record"]
    assert records == read_records(trace)  # each record once, in order, none torn
    assert [e["data"]["line"] for e in seen if e["event"] == "record"] == list(range(1, len(records) + 1))
    assert seen[-1]["event"] == "end" and seen[-1]["data"]["status"] == "done"
    assert records[-2]["to"] == "DONE" and records[-1]["kind"] == "seal"


# --- diff ------------------------------------------------------------------------------------


def test_diff_is_harness_diff_with_the_first_divergence(client: TestClient, folder: Any) -> None:
    path, ids = folder
    d = client.get(f"/api/diff?a={ids['done']}&b={ids['fork']}").json()
    engine = harness.diff(path / f"{ids['done']}.jsonl", path / f"{ids['fork']}.jsonl")
    assert d["equal"] is False and d["first"] == engine.as_json()["first"]
    assert d["first"]["seq_b"] == search_seq(path / f"{ids['done']}.jsonl")
    assert (d["changed"], d["inserted"], d["removed"]) == (
        len(engine.changed),
        len(engine.inserted),
        len(engine.removed),
    )
    assert [m["op"] for m in d["moved"]] == [m.op for m in engine.moved]
    assert (d["relocated"], d["notes"]) == (len(engine.relocated), list(engine.notes))
    same = client.get(f"/api/diff?a={ids['done']}&b={ids['done']}").json()
    assert same["equal"] is True and same["moved"] == []
    assert client.get("/api/diff?a=corrupt&b=corrupt").status_code == 400  # a corrupt trace cannot be diffed
    assert client.get("/api/diff?a=x").status_code == 400


# --- fork ------------------------------------------------------------------------------------


def test_without_agent_the_api_refuses_to_fork(client: TestClient, folder: Any) -> None:
    path, ids = folder
    before = snapshot(path)
    r = client.post(f"/api/runs/{ids['done']}/fork", json={"at": 6, "value": {}})
    assert r.status_code == 403 and "--agent" in r.json()["message"]
    assert client.get("/api/config").json()["fork"] is False
    assert snapshot(path) == before


def test_with_agent_a_fork_runs_in_the_background_and_writes_a_child(
    folder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ids = folder
    monkeypatch.chdir(ROOT)  # --agent imports from the current directory
    runs = tmp_path / "runs"
    runs.mkdir()
    parent = runs / f"{ids['done']}.jsonl"
    parent.write_bytes((path / f"{ids['done']}.jsonl").read_bytes())
    original = parent.read_bytes()
    at = search_seq(parent)
    with local(create_app(runs, agent=AGENT)) as c:
        assert c.get("/api/config").json()["fork"] is True
        assert (
            c.post(f"/api/runs/{ids['done']}/fork", content=b"{}", headers={"content-type": "text/plain"}).status_code
            == 415
        )
        assert c.post(f"/api/runs/{ids['done']}/fork", json={"at": "six"}).status_code == 400
        cross = c.post(
            f"/api/runs/{ids['done']}/fork", json={"at": at, "value": {}}, headers={"origin": "http://evil.example"}
        )
        assert cross.status_code == 403
        r = c.post(f"/api/runs/{ids['done']}/fork", json={"at": at, "value": fork_value(parent)})
        assert r.status_code == 202
        job = r.json()
        assert job["url"] == f"/runs/{job['child']}?job={job['job']}"
        assert c.get(job["url"]).status_code == 200
        for _ in range(500):
            state = c.get(f"/api/jobs/{job['job']}").json()
            if state["state"] != "running":
                break
            time.sleep(0.02)
        assert state["state"] == "done", state
        child = c.get(f"/api/runs/{job['child']}/summary").json()
        assert child["parent_id"] == ids["done"] and child["branch"] == at and child["state"] == "DONE"
        assert child["header"]["parent"] == harness.replay(parent).run_id
        assert harness.replay(runs / f"{job['child']}.jsonl").run_id == job["child"]  # saved as <run_id>.jsonl
        bad = c.post(f"/api/runs/{ids['done']}/fork", json={"at": 2, "value": 1}).json()  # seq 2 carries no crossing
        for _ in range(500):
            failed = c.get(f"/api/jobs/{bad['job']}").json()
            if failed["state"] != "running":
                break
            time.sleep(0.02)
        assert failed["state"] == "failed" and "does not carry a crossing" in failed["error"]
        assert not (runs / f"{bad['child']}.jsonl").exists()
    assert parent.read_bytes() == original  # the server never writes to a trace


def test_the_server_never_writes_to_the_runs_folder(client: TestClient, folder: Any) -> None:
    path, ids = folder
    before = snapshot(path)
    for run in ids.values():
        client.get(f"/api/runs/{run}/summary")
        client.get(f"/api/runs/{run}/records")
        client.get(f"/api/runs/{run}/record?line=1")
        list(sse(client, f"/api/runs/{run}/events"))
    client.get("/api/runs")
    assert snapshot(path) == before


# --- harness serve -----------------------------------------------------------------------------


def test_runs_dir_defaults_to_harness_runs_dir_else_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "env").mkdir()
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_RUNS_DIR", str(tmp_path / "env"))
    assert create_app().state.viewer.folder == str(tmp_path / "env")
    monkeypatch.delenv("HARNESS_RUNS_DIR")
    assert create_app().state.viewer.folder == str(tmp_path / "runs")
    with pytest.raises(harness.TraceUnreadable, match="no such runs folder") as missing:
        create_app(tmp_path / "nope")
    assert missing.value.path == str(tmp_path / "nope")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(harness.TraceUnreadable, match="is not a folder"):
        create_app(tmp_path / "file")


def test_finished_fork_jobs_are_forgotten_beyond_a_bound(tmp_path: Path) -> None:
    v = Viewer(str(tmp_path))
    running = Job("running", "p", "c", 1)
    v.add(running)
    for n in range(JOBS_KEPT + 50):
        v.add(Job(f"j{n}", "p", "c", 1, state="done"))
    assert len(v.jobs) == JOBS_KEPT + 1 and "running" in v.jobs
    assert f"j{JOBS_KEPT + 49}" in v.jobs and "j0" not in v.jobs  # the oldest finished go first


def start(args: list[str], **kw: Any) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    assert found, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
    return proc, found[0]


def test_serve_binds_loopback_prints_its_url_and_stops_on_ctrl_c(folder: Any, tmp_path: Path) -> None:
    path, _ids = folder
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "held.jsonl").write_bytes((path / "killed.jsonl").read_bytes())
    env = {**os.environ, "HARNESS_RUNS_DIR": str(runs)}
    proc, url = start(["--port", "0"], env=env)
    held = open(runs / "held.jsonl", "rb")  # noqa: SIM115 - closed in finally; a writer's lock: the run looks live, its stream stays open
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        assert httpx.get(url + "api/runs").json()["folder"] == str(runs)
        port = int(url.rsplit(":", 1)[1].strip("/"))
        with pytest.raises(httpx.ConnectError):  # not on the machine's other addresses
            httpx.get(f"http://{external_ip()}:{port}/api/runs", timeout=2)
        opened = threading.Event()

        def follow() -> None:
            with httpx.stream("GET", url + "api/runs/held/events", timeout=30) as r:
                for _ in r.iter_lines():
                    opened.set()

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert opened.wait(10)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        reader.join(10)
        assert not reader.is_alive()  # the open stream ended with the server
    finally:
        held.close()
        if proc.poll() is None:
            proc.kill()


def external_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            ip = str(s.getsockname()[0])
        except OSError:
            ip = "127.0.0.1"
    if ip.startswith("127."):
        pytest.skip("this machine has no address besides loopback to check against")
    return ip


def test_serve_without_the_web_extra_says_what_to_install(tmp_path: Path) -> None:
    blocker = tmp_path / "blocked"
    for name in ("starlette", "uvicorn"):
        (blocker / name).mkdir(parents=True)
        (blocker / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed')\n")
    env = {**os.environ, "PYTHONPATH": f"{blocker}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "serve", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 2
    assert "pip install 'harness-trace[web]'" in r.stderr and "Traceback" not in r.stderr


def test_serve_refuses_a_port_out_of_range_without_a_traceback(tmp_path: Path) -> None:
    for port in ("99999", "-1", "http"):
        r = subprocess.run(
            [sys.executable, "-m", "harness.cli", "serve", str(tmp_path), "--port", port],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and "0 to 65535" in r.stderr and "Traceback" not in r.stderr, (port, r.stderr)
    with pytest.raises(harness.HarnessError, match="0 to 65535"):
        serve(tmp_path, port=99999)


def test_serve_with_agent_on_a_reachable_address_needs_allow_remote_fork(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "serve", str(tmp_path), "--host", "0.0.0.0", "--agent", AGENT],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "--allow-remote-fork" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(RemoteForkRefused) as refused:
        serve(tmp_path, host="192.0.2.1", agent=AGENT)
    assert refused.value.host == "192.0.2.1"


def test_serve_on_a_reachable_address_warns_and_still_checks_the_host_header(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", str(tmp_path), "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        warning = proc.stderr.readline()
        assert "WARNING" in warning and "reachable from other machines" in warning and "no login" in warning
        port = int(re.search(r":(\d+)/", proc.stdout.readline())[1])  # type: ignore[index]
        url = f"http://127.0.0.1:{port}/api/runs"
        assert httpx.get(url).status_code == 200
        assert httpx.get(url, headers={"host": "evil.example"}).status_code == 400  # DNS rebinding: still refused
        assert httpx.get(url, headers={"host": f"{socket.gethostname()}:{port}"}).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


def test_serve_with_a_wrong_agent_fails_at_start(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "harness.cli", "serve", str(tmp_path), "--agent", "no_such_module:f"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "cannot import no_such_module" in r.stderr


def test_a_run_paused_on_a_question_shows_it_and_the_answer_command(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()

    def planner(goal: Any, done: list[Any]) -> Any:
        harness.interrupt({"approve": goal})
        return None

    Executor(planner=planner, tools={}, trace=runs / "asks.jsonl").run("refund 5")
    with local(create_app(runs)) as c:
        s = c.get("/api/runs/asks/summary").json()
    assert (s["status"], s["state"], s["reconcile"]) == ("paused", "PAUSED", None)
    assert s["pending"] == {"seq": 3, "step": 0, "state": "PLAN", "question": {"approve": "refund 5"}}
    assert s["answer"].startswith(f"harness resume {runs / 'asks.jsonl'} --agent ") and "--answer" in s["answer"]
    assert s["detail"] == 'waiting for an answer: {"approve":"refund 5"}'


def test_an_answer_record_has_its_own_class_label_and_note(tmp_path: Path) -> None:
    asked: list[Any] = []

    def planner(goal: Any, done: list[Any]) -> Any:
        asked.append(harness.interrupt({"approve": goal}))
        return None

    Executor(planner=planner, tools={}, trace=tmp_path / "asks.jsonl").run("refund 5")
    Executor(planner=planner, tools={}, trace=tmp_path / "asks.jsonl", resume=True).run("refund 5", answer="yes")
    records = read_records(tmp_path / "asks.jsonl")
    (answer,) = [r for r in records if r["kind"] == "answer"]
    with local(create_app(tmp_path)) as c:
        rows = c.get("/api/runs/asks/records").json()["records"]
        config = c.get("/api/config").json()
    (shown,) = [b for b in rows if b["kind"] == "answer"]
    assert shown["cls"] == "a" and config["classes"]["a"] == "answer"  # not "o", the unknown kind "?"
    assert shown["label"] == f"answer to seq {answer['op']}" and shown["note"] == "yes"
    assert "o" not in {b["cls"] for b in rows}
    static = Path(harness.viewer.__file__).parent / "static"
    assert 'a: "answer"' in (static / "run.js").read_text() and ".cls-a {" in (static / "style.css").read_text()


# --- model streams: their text in the What column, the panel and the diff ------------------------------------------


def test_a_streamed_model_reply_reads_as_its_text_and_its_diff_marks_the_changed_characters(tmp_path: Path) -> None:
    stream_agent = pytest.importorskip("stream_agent", reason="the model runs need the openai client")
    ids = stream_agent.record_runs(tmp_path)
    with local(create_app(tmp_path)) as c:
        rows = c.get(f"/api/runs/{ids['model']}/records").json()["records"]
        calls = [b for b in rows if b["label"] == "crossing http"]
        assert [b["note"] for b in calls] == [f"echo: {q}" for q in stream_agent.QUESTIONS]  # not {"status":200,...
        one = c.get(f"/api/runs/{ids['model']}/record?line={calls[1]['line']}").json()
        assert one["reply"] == {"message": {"content": f"echo: {stream_agent.QUESTIONS[1]}"}, "finish_reason": None}
        assert "chunks" in one["record"]["response"]  # the record as it is, for "the whole record"
        assert one["view"] == {  # and as goldens and diffs hold it: what was asked and said
            "kind": "model_call", "via": "http", "model": "test-model",
            "messages": [{"role": "user", "text": stream_agent.QUESTIONS[1]}],
            "reply": {"role": "assistant", "text": f"echo: {stream_agent.QUESTIONS[1]}"},
        }  # fmt: skip
        assert one["forkable"]["value"]["stream"]["message"] == one["reply"]["message"]  # forks edit the message
        child = [b["note"] for b in c.get(f"/api/runs/{ids['model_fork']}/records").json()["records"]]
        assert stream_agent.FORKED in child

        d = c.get(f"/api/diff?a={ids['model']}&b={ids['model_fork']}").json()
        first = d["moved"][0]
        assert [ch["field"] for ch in first["changes"]] == ["reply.text"]  # the behavior view: what was said
        (m,) = first["marks"]
        assert m["old"] == f'"echo: {stream_agent.QUESTIONS[1]}"' and m["new"] == f'"{stream_agent.FORKED}"'
        removed = [m["old"][a:b] for a, b in m["old_marks"]]
        added = [m["new"][a:b] for a, b in m["new_marks"]]
        assert (removed, added) == (["database", "less"], ["spreadsheet", "no", "at all"])
        assert all(0 <= a < b <= len(m["new"]) for a, b in m["new_marks"])


def test_a_fork_from_the_page_accepts_an_async_agent_and_the_paused_banner_command_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tests/gather_agent.py: an async planner gathering three model calls, then asking a human to pick one."""
    import asyncio

    import gather_agent

    monkeypatch.setenv("GATHER_DIR", str(tmp_path))
    monkeypatch.chdir(Path(__file__).parent)  # --agent imports from the current directory
    runs = tmp_path / "runs"
    runs.mkdir()
    planner, tools, _ = gather_agent.make_agent()
    paused = asyncio.run(Executor(planner=planner, tools=tools, trace=runs / "asks.jsonl").arun("report"))
    with local(create_app(runs, agent="gather_agent:make_agent")) as c:
        shown = c.get("/api/runs/asks/summary").json()
        assert shown["state"] == "PAUSED" and shown["pending"] == paused.pending
        command = shlex.split(shown["answer"].replace("MODULE:FACTORY", "gather_agent:make_agent"))
        command[command.index("--answer") + 1] = '{"index": 0}'
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        drafts = paused.pending["question"]["pick one"]  # type: ignore[index]
        assert harness.replay(runs / "asks.jsonl").checkpoints[0].result == {"saved": drafts[0]}
        at = next(r["seq"] for r in read_records(runs / "asks.jsonl") if r.get("boundary") == "interrupt")
        job = c.post("/api/runs/asks/fork", json={"at": at, "value": {"index": 2}}).json()
        for _ in range(3000):
            state = c.get(f"/api/jobs/{job['job']}").json()
            if state["state"] != "running":
                break
            time.sleep(0.02)
        assert state["state"] == "done", state
        child = c.get(f"/api/runs/{job['child']}/summary").json()
        assert child["state"] == "DONE" and child["branch"] == at
    (checkpoint,) = harness.replay(runs / f"{job['child']}.jsonl").checkpoints
    assert checkpoint.result == {"saved": drafts[2]}
    assert len((tmp_path / "calls.log").read_bytes().splitlines()) == 3  # every draft served, before the branch


# --- a file changed under the viewer, big records, run addresses (issue 25, issue 26) -------------------------


def edit_in_place(trace: Path, old: bytes, new: bytes) -> int:
    """Replace the first `old` in trace by `new` (same length) in place, and set its mtime back: size, mtime and
    inode are as they were. Returns the line number edited."""
    assert len(old) == len(new)
    st = trace.stat()
    data = trace.read_bytes()
    at = data.index(old)
    with open(trace, "r+b") as f:
        f.seek(at)
        f.write(new)
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = trace.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    return data[:at].count(b"\n") + 1


def test_a_same_size_edit_in_place_is_seen_by_the_summary_and_never_served(tmp_path: Path) -> None:
    """Before: the summary kept saying "no error, sealed DONE" while /record served the edited bytes."""
    trace = tmp_path / "run.jsonl"
    Executor(planner=fixed_plan(steps(3)), tools={"work": lambda i: {"got": i}}, trace=trace).run("g")
    with local(create_app(tmp_path)) as c:
        s = c.get("/api/runs/run/summary").json()
        assert s["error"] is None and s["seal"] is not None
        assert [b["line"] for b in c.get("/api/runs/run/records").json()["records"]][-1] == s["records"]
        line = edit_in_place(trace, b'"got":1', b'"got":7')
        s = c.get("/api/runs/run/summary").json()
        assert s["error"]["reason"] == "checksum" and s["error"]["line"] == line and s["seal"] is None
        assert c.get("/api/runs/run/records").json()["total"] == line - 1
        assert c.get(f"/api/runs/run/record?line={line}").status_code == 404  # the edited bytes are not served
        served = [c.get(f"/api/runs/run/record?line={n}").json()["record"] for n in range(1, line)]
        assert served == read_records(trace)[: line - 1]


def test_a_same_size_forgery_with_its_chain_recomputed_is_seen_too(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    Executor(planner=fixed_plan(steps(3)), tools={"work": lambda i: {"got": i}}, trace=trace).run("g")
    with local(create_app(tmp_path)) as c:
        assert c.get("/api/runs/run/summary").json()["error"] is None
        forged = [{k: v for k, v in r.items() if k != "crc"} for r in read_records(trace)]
        for r in forged:
            if r.get("result") == {"got": 1}:
                r["result"] = {"got": 7}
        write_trace(tmp_path / "forged.jsonl", forged)
        st = trace.stat()
        with open(trace, "r+b") as f:  # the forged bytes in place, the same size: every crc after the edit differs
            f.write((tmp_path / "forged.jsonl").read_bytes())
        os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
        (tmp_path / "forged.jsonl").unlink()
        s = c.get("/api/runs/run/summary").json()
        assert s["error"]["reason"] == "seal" and s["seal"] is None  # the seal's content hash says so
        shown = [c.get(f"/api/runs/run/record?line={n}").json()["record"] for n in range(1, s["records"] + 1)]
        assert shown == read_records(trace)[: s["records"]]  # what is served is what the file now holds


def test_a_trace_rewritten_at_the_same_inode_is_never_streamed_as_one_run(tmp_path: Path) -> None:
    """Before: emptied and rewritten as another run at the same inode, the stream went on: run A's header,
    then run B's records. Now the stream ends with a `reset` event, and no line of B follows A's."""
    runs = tmp_path / "runs"
    runs.mkdir()
    a = Executor(planner=fixed_plan(steps(3)), tools={"work": dict}, trace=tmp_path / "a.jsonl").run("run A")
    b = Executor(planner=fixed_plan(steps(8)), tools={"work": dict}, trace=tmp_path / "b.jsonl").run("run B")
    a_lines = Path(a.trace).read_bytes().splitlines(keepends=True)
    live = runs / "live.jsonl"
    live.write_bytes(b"".join(a_lines[:6]))  # run A, still being written
    held = open(live, "rb")  # noqa: SIM115 - closed in finally; a writer's lock: the run is live, its stream stays open
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with local(create_app(runs)) as c:
            stream = sse(c, "/api/runs/live/events")
            seen = [next(stream) for _ in range(6)]
            with open(live, "r+b") as f:  # the same inode, emptied, then run B written into it
                f.truncate(0)
                f.write(Path(b.trace).read_bytes())
            seen += list(stream)
    finally:
        held.close()
    records = [e["data"]["record"] for e in seen if e["event"] == "record"]
    assert records == read_records(a.trace)[:6]  # A's, and nothing of B's after them
    assert seen[-1]["event"] == "reset" and "load the run again" in seen[-1]["data"]["reason"]


def test_a_window_and_a_stream_hold_their_reply_not_the_records_around_it(tmp_path: Path) -> None:
    """Before: one /records?count=100 over a trace of 15 MB records read every record of the window at once
    (1.9 GiB for 900 MiB), an event stream 500 lines at a time (4.0 GiB). Measured here on `harness serve`
    as a real process: its peak resident memory (VmHWM, reset before each request) while it answers. The trace
    is 12 records of 4 MiB (48 MiB) and the bound 8 records' worth (32 MiB): reading the whole window or stream
    at once holds the 48 MiB of lines and as much again parsed, three times the bound; the reply as it is
    sent holds about one record (3 MiB measured). (The ratios are what matter: 8 MiB records, a 64 MiB bound
    and a 96 MiB trace say the same for twice the CPU.)"""
    clear = Path("/proc/self/clear_refs")
    if not clear.exists() or not os.access(clear, os.W_OK):
        pytest.skip("needs Linux's /proc/PID/clear_refs to reset a process's peak memory")
    trace = tmp_path / "big.jsonl"
    page = "y" * (4 << 20)  # 4 MiB: inline in its line, as a writer with blob_threshold above it writes it
    # (not "x": each x may start a token (xoxb-...), so the writer's search for secrets would try 4 Mi of them)
    Executor(planner=fixed_plan(steps(12)), tools={"work": lambda i: page}, trace=trace, blob_threshold=16 << 20).run(
        "g"
    )
    size = trace.stat().st_size
    proc, url = start([str(tmp_path), "--port", "0"])
    try:
        assert httpx.get(url + "api/runs/big/summary", timeout=120).json()["error"] is None  # the first pass

        def peak_during(ask: Any) -> int:
            Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # the peak starts again from what is resident
            ask()
            status = Path(f"/proc/{proc.pid}/status").read_text()
            hwm = int(re.search(r"VmHWM:\s+(\d+) kB", status)[1]) * 1024  # type: ignore[index]
            rss = int(re.search(r"VmRSS:\s+(\d+) kB", status)[1]) * 1024  # type: ignore[index]
            return hwm - min(rss, hwm)

        def window() -> None:
            body = httpx.get(url + "api/runs/big/records?start=0&count=100", timeout=120).json()
            assert len(body["records"]) == body["total"] > 24

        def stream() -> None:
            got = 0
            with httpx.stream("GET", url + "api/runs/big/events", timeout=120) as r:
                for chunk in r.iter_bytes():
                    got += len(chunk)
                    if b"event: end" in chunk[-200:]:
                        break
            assert got > size

        bound = 32 << 20  # a few times one 4 MiB record: the line, its parsed value, its event
        for ask in (window, stream):
            extra = peak_during(ask)
            assert extra < bound, (
                f"{ask.__name__}: {extra >> 20} MiB above what was resident, for a {size >> 20} MiB trace"
            )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def test_a_run_in_a_folder_named_like_an_action_opens(tmp_path: Path) -> None:
    """Before: the run sub/events (sub/events.jsonl) was routed to run sub's event stream. Every API path of a
    run now ends with what is asked of it, so each address means one thing."""
    (tmp_path / "sub").mkdir()
    Executor(planner=fixed_plan(steps(1)), tools={"work": dict}, trace=tmp_path / "sub.jsonl").run("the run sub")
    for name in ("events", "records", "summary"):
        Executor(planner=fixed_plan(steps(2)), tools={"work": dict}, trace=tmp_path / "sub" / f"{name}.jsonl").run(name)
    with local(create_app(tmp_path)) as c:
        assert c.get("/api/runs/sub/summary").json()["header"]["goal"] == "the run sub"
        for name in ("events", "records", "summary"):
            s = c.get(f"/api/runs/sub/{name}/summary").json()
            assert (s["id"], s["header"]["goal"], s["state"]) == (f"sub/{name}", name, "DONE")
            assert c.get(f"/runs/sub/{name}").status_code == 200
            first = next(sse(c, f"/api/runs/sub/{name}/events"))
            assert first["data"]["record"]["goal"] == name
        assert next(sse(c, "/api/runs/sub/events"))["data"]["record"]["goal"] == "the run sub"  # sub's own stream
        assert len(c.get("/api/runs/sub/records/records").json()["records"]) == len(
            read_records(tmp_path / "sub" / "records.jsonl")
        )
        listed = sorted(r["id"] for r in c.get("/api/runs").json()["runs"])
        assert listed == ["sub", "sub/events", "sub/records", "sub/summary"]  # the subfolder's runs by their path


def test_serve_diffs_with_the_rules_of_the_project_holding_the_folder_or_config_and_ignore(tmp_path: Path) -> None:
    """`harness serve` from another directory: its diffs leave out what the project's [tool.harness] ignores (the
    goal here), or what --config's table and --ignore say."""
    runs = tmp_path / "project" / "runs"
    runs.mkdir(parents=True)
    (tmp_path / "project" / "pyproject.toml").write_text('[tool.harness]\ngolden_ignore = ["goal"]\n')
    for name in ("a", "b"):
        Executor(planner=fixed_plan(steps(1)), tools={"work": counter()}, trace=runs / f"{name}.jsonl").run(name)
    other = tmp_path / "other.toml"
    other.write_text("[tool.harness]\ngolden_ignore = []\n")
    for args, equal in (
        ([], True),
        (["--config", str(other)], False),
        (["--config", str(other), "--ignore", "goal"], True),
    ):
        proc, url = start([str(runs), "--port", "0", *args], cwd=tmp_path)
        try:
            assert httpx.get(url + "api/diff", params={"a": "a", "b": "b"}).json()["equal"] is equal, args
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=20)


@pytest.mark.parametrize("run", ["fork", "agents_fork"])
def test_the_viewer_and_harness_show_give_each_record_of_a_fork_the_same_word(
    client: TestClient, folder: Any, run: str
) -> None:
    """One vocabulary: the viewer's role of each record is the word `harness show` prints beside it (served,
    answered, live). Before, the viewer said reused and mutated where show said served and answered."""
    import re

    from harness.review.show import show_trace

    path, ids = folder
    out: list[str] = []
    show_trace(str(path / f"{ids[run]}.jsonl"), out.append, view="timeline", width=200)
    blocks = re.split(r"(?m)^\s*(\d+)  ", "".join(out))[1:]
    words = ("served", "answered", "live")
    said = {int(seq): next((w for w in words if re.search(rf"\b{w}\b", text)), None) for seq, text in
            zip(blocks[::2], blocks[1::2], strict=True)}  # fmt: skip
    records = client.get(f"/api/runs/{ids[run]}/records?count=1000").json()["records"]
    assert {b["seq"]: b["role"] for b in records} == said
    assert {"served", "answered", "live"} <= set(said.values())
