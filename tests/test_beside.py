"""Files beside a trace are opened one way: the class, not the instance (issue 25, defect 10).

A blob, an artifact's blob, the annotations, a `.torn-N` file and the index
sit beside a trace. Each is opened through `storage.files.open_beside` /
`read_beside`: a regular file only (a FIFO is refused, never waited on),
never through a symlink that leads out of the run's folder (to /dev/zero, or
to someone else's file), never read past the size its reader expects. Here
every such file is replaced in turn by a FIFO, a symlink to /dev/zero and a
symlink to a copy outside the folder, and every command that reads it runs
in a child process with a timeout: a hang fails the test, a traceback
fails it, and a command that reads the file must say which file is wrong.
The viewer is asked the same through `harness serve`, a real server.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pytest

import harness
from harness import Executor, Step
from harness.testing import fixed_plan, read_records, steps

HARNESS = shutil.which("harness") or str(Path(sys.executable).parent / "harness")
BIG = "p" * 70_000  # a result above the blob threshold: stored in a blob
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of b"": an empty artifact's blob
SECRET = "hunter2-outside-the-folder"  # written only outside the runs folder: it must never come back


def sealed_run(folder: Path) -> Path:
    """A sealed run with a blob-stored result, an empty artifact, annotations and a torn tail it set aside."""
    trace = folder / "a.jsonl"

    def plan(goal: Any, done: list[Any]) -> Step | None:
        if done:
            harness.artifact("empty.txt", b"")
            return None
        return Step("s", "work", {})

    Executor(planner=plan, tools={"work": lambda: {"page": BIG}}, trace=trace).run("g")
    lines = trace.read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:-1]) + lines[-1][:30])  # the seal torn, as by a kill mid-write
    Executor(planner=plan, tools={"work": lambda: {"page": BIG}}, trace=trace, resume=True).run("g")
    assert (folder / "a.jsonl.torn-1").exists() and harness.replay(trace).sealed
    harness.annotate(trace, "note", "kept")
    return trace


def blob_of(trace: Path) -> str:
    return next(name for name, (size, _) in harness.replay(trace).blobs.items() if size > 0)


FILES = {  # what is planted, by role: the path beside a.jsonl
    "blob": lambda t: t.parent / "blobs" / blob_of(t),
    "artifact": lambda t: t.parent / "blobs" / EMPTY,
    "annotations": lambda t: t.parent / "a.jsonl.annotations.json",
    "torn": lambda t: t.parent / "a.jsonl.torn-1",
}


def plant(path: Path, hazard: str, outside: Path) -> None:
    """Put the hazard where path was: a FIFO, a symlink to /dev/zero, a symlink to a copy outside the folder."""
    data = path.read_bytes()
    path.unlink()
    if hazard == "fifo":
        os.mkfifo(path)
    elif hazard == "zero":
        path.symlink_to("/dev/zero")
    else:
        copy = outside / path.name
        copy.write_bytes(SECRET.encode() if path.name.endswith(".json") else data)  # a blob: its very bytes
        path.symlink_to(copy)


COMMANDS = {  # what each command is given: the trace, and the folder where export writes its bundle
    "verify": ["verify", "{trace}"],
    "replay": ["replay", "{trace}"],
    "show": ["show", "{trace}"],
    "export": ["export", "{trace}", "-o", "{out}/a.zip"],
    "annotate": ["annotate", "{trace}", "--note", "more"],
    "artifact": [],  # Artifact.read(), as a user's script calls it
}

# Every command in one child process (the CLI's main(), in process: one start instead of six), each with its output
# captured; the child reports as it goes, so a hang names the command it hung in when the timeout kills the child.
CHILD = """
import io, json, sys, traceback
import harness
from harness.cli import main

commands, out = json.loads(sys.argv[1]), {}
for name, argv in commands.items():
    print(name, file=sys.stderr, flush=True)
    real = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    try:
        if argv:
            rc = main(argv)
        else:
            harness.replay(sys.argv[2]).artifacts[0].read()
            rc = 0
    except harness.HarnessError as e:  # what a user's script sees of Artifact.read(): the error, naming the file
        print(e)
        rc = 2
    except BaseException:
        print(traceback.format_exc())
        rc = 99
    said = sys.stdout.buffer.getvalue().decode(errors="replace")
    sys.stdout, sys.stderr = real
    out[name] = [rc, said]
print(json.dumps(out))
"""


def run_all(trace: Path, out: Path) -> dict[str, tuple[int, str]]:
    given = {k: [a.format(trace=trace, out=out) for a in v] for k, v in COMMANDS.items()}
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, orjson.dumps(given).decode(), str(trace)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        started = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else e.stderr or ""
        pytest.fail(f"hung in {started.split()[-1] if started.split() else 'its start'}")
    assert done.returncode == 0, done.stderr
    return {k: (rc, said) for k, (rc, said) in orjson.loads(done.stdout.splitlines()[-1]).items()}


def reads(command: str, role: str, hazard: str) -> bool:
    """Whether the command opens (or checks) the planted file, so that it must fail naming it."""
    if role == "annotations":
        return command in ("show", "annotate", "export")
    if command == "annotate":
        return False
    if role == "torn":  # replay() checks a set-aside file is a regular file there; only export reads it
        return command == "export" or hazard != "out"
    return True


@pytest.mark.parametrize("hazard", ["fifo", "zero", "out"])
@pytest.mark.parametrize("role", list(FILES))
def test_every_file_beside_a_trace_is_opened_one_way(tmp_path: Path, role: str, hazard: str) -> None:
    runs, outside = tmp_path / "runs", tmp_path / "outside"
    runs.mkdir()
    outside.mkdir()
    trace = sealed_run(runs)
    planted = FILES[role](trace)
    plant(planted, hazard, outside)
    for command, (rc, said) in run_all(trace, tmp_path).items():
        assert rc != 99 and "Traceback" not in said, (command, said)
        assert SECRET not in said, (command, said)  # nothing outside the folder is read out
        if reads(command, role, hazard):
            assert rc != 0 and planted.name in said, (command, role, hazard, rc, said)
    bundle = tmp_path / "a.zip"
    assert not bundle.exists() or planted.name not in zipfile.ZipFile(bundle).namelist()
    assert planted.is_symlink() or planted.is_fifo()  # nothing replaced what was planted: harness only reads


def test_an_intact_run_exports_its_torn_file_and_imports_whole(tmp_path: Path) -> None:
    """The control: the same run, nothing planted, goes through every command above."""
    runs = tmp_path / "runs"
    runs.mkdir()
    trace = sealed_run(runs)
    for command, (rc, said) in run_all(trace, tmp_path).items():
        assert rc == 0, (command, said)
    names = zipfile.ZipFile(tmp_path / "a.zip").namelist()
    assert "a.jsonl.torn-1" in names and "a.jsonl.annotations.json" in names
    done = harness.import_bundle(tmp_path / "a.zip", tmp_path / "other")  # before: bad-resume, always
    assert "a.jsonl.torn-1" in done.files and harness.verify(tmp_path / "other" / "a.jsonl").ok
    assert (tmp_path / "other" / "a.jsonl.torn-1").read_bytes() == (runs / "a.jsonl.torn-1").read_bytes()


def test_a_blob_longer_than_its_record_says_is_never_read_whole(tmp_path: Path) -> None:
    """A blob is read up to the size its record names: one byte more is an altered blob, named, and a
    reader that reads it without a replay first (the viewer's record panel) stops there too."""
    from harness.storage.blobs import read

    trace = sealed_run(tmp_path)
    name = blob_of(trace)
    size, line = harness.replay(trace).blobs[name]
    with open(tmp_path / "blobs" / name, "ab") as f:
        f.truncate(size + (1 << 30))  # a sparse GiB after it: read whole, it would take a GiB
    with pytest.raises(harness.TraceCorruption, match=f"blob {name} was altered: it holds {size + (1 << 30)} bytes"):
        read(str(trace), line, name, size)
    with pytest.raises(harness.TraceCorruption, match=f"blob {name} holds"):
        harness.replay(trace)
    assert not harness.verify(trace).ok


INDEX_CHILD = """
import sys
from harness import Executor
from harness.testing import fixed_plan, steps
Executor(planner=fixed_plan(steps(6)), tools={"work": lambda i: i}, trace=sys.argv[1], resume=True).run("g")
print("resumed")
"""


@pytest.mark.parametrize("hazard", ["fifo", "zero", "out"])
def test_an_index_that_is_no_regular_file_is_ignored_never_waited_on(tmp_path: Path, hazard: str) -> None:
    """The index (TRACE.idx) is a hint: a FIFO, a device or a symlink out in its place is no index."""
    from harness.trace.index import path_of

    trace = tmp_path / "run.jsonl"
    Executor(planner=fixed_plan(steps(6)), tools={"work": lambda i: i}, trace=trace).run("g")
    lines = trace.read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:12]))  # a run that stopped midway: a resume reads the index first
    index = Path(path_of(str(trace)))
    (tmp_path / "outside").mkdir()
    if index.exists():
        index.unlink()
    if hazard == "fifo":
        os.mkfifo(index)
    else:
        target = Path("/dev/zero") if hazard == "zero" else tmp_path / "outside" / "stolen.idx"
        if hazard == "out":
            target.write_bytes(b"not an index, and not the run's")
        index.symlink_to(target)
    before = [p.read_bytes() for p in (tmp_path / "outside").iterdir()]
    try:
        out = subprocess.run(
            [sys.executable, "-c", INDEX_CHILD, str(trace)], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"a resume hung on a {hazard} in place of the index")
    assert out.returncode == 0 and "resumed" in out.stdout, out.stderr
    assert harness.replay(trace).state == "DONE" and len(read_records(trace)) > 12
    assert [p.read_bytes() for p in (tmp_path / "outside").iterdir()] == before  # never written through a link


def test_fifos_in_place_of_blobs_never_exhaust_the_viewer(tmp_path: Path) -> None:
    """Before: an empty artifact's blob replaced by a FIFO (its size, 0, is what the record says) made each
    /verify block on the open; 45 of them held every worker thread and /api/runs stopped answering. Now
    each is answered at once, naming the blob, and the server goes on answering."""
    pytest.importorskip("uvicorn", reason="the viewer needs the web extra: pip install 'harness-trace[web]'")
    httpx = pytest.importorskip("httpx")
    trace = sealed_run(tmp_path)
    blob = tmp_path / "blobs" / EMPTY
    blob.unlink()
    os.mkfifo(blob)
    artifact = next(r["seq"] for r in read_records(trace) if r["kind"] == "artifact")
    proc = subprocess.Popen(
        [HARNESS, "serve", str(tmp_path), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline())
        assert url, proc.stderr.read() if proc.poll() is not None and proc.stderr else "no URL printed"
        base = url[0]
        # one client for every request (a client per request built an SSL context each: 3 s of CPU), its pool
        # as wide as the asks: each ask still has a connection of its own
        with (
            httpx.Client(timeout=60, limits=httpx.Limits(max_connections=60)) as http,
            concurrent.futures.ThreadPoolExecutor(50) as pool,
        ):  # more than the server's worker threads (40)
            asks = [pool.submit(http.get, f"{base}api/runs/a/verify") for _ in range(45)]
            asks += [pool.submit(http.get, f"{base}api/runs/a/record?line={artifact}") for _ in range(5)]
            assert http.get(base + "api/runs").status_code == 200  # before: never answered
            answers = [a.result() for a in asks]
        assert all(a.status_code in (200, 404) and "Traceback" not in a.text for a in answers)
        verified = [a.json() for a in answers[:45]]
        assert all(not v["ok"] and EMPTY in " ".join(v["problems"]) for v in verified)
    finally:
        proc.terminate()
        proc.communicate(timeout=20)
