"""Runs for the viewer's tests: one of each kind a runs folder holds, made the way users make them.

`make_folder(folder)` writes a finished run of the research agent and a fork
of it, a failed run, a paused run (an unsafe call in flight at a crash, then
resumed), a crashed run (its writer SIGKILLed mid-run), a trace damaged in
the middle, one whose header is damaged, one with a torn tail,
examples/pipeline.py's concurrent run (four agents on their own threads,
spawn, join and messages, every record with its vector clock) and its causal
fork at worker_a's search, a run whose strings are HTML and a run whose
result is stored in a blob; the finished run carries two annotations. It
returns their run addresses by role. The `folder` fixture (one such folder
per test module, copied from one made once per session) is defined here for
both viewer test modules, which import it.

Run as a script, it is a slow writer for the live tests:
    python tests/viewer_runs.py slow TRACE STEPS GATE
writes a run of STEPS steps; from step 3 on each step waits until the file
GATE exists, so a test can watch the run while it is being written.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

import harness
from harness import Executor, Step, Tool
from harness.testing import fixed_plan, flaky, power_cut, steps

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examples import pipeline, research_agent  # noqa: E402 - the repository root is on the path just above

XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
AGENT = "examples.research_agent:make_agent"


@pytest.fixture(scope="module", name="folder")
def runs_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A runs folder with one run of each kind (`make_folder`), and their addresses by role: the module's own
    copy (its tests may add runs to it), of runs made once for the whole test session."""
    made, ids = made_once(tmp_path_factory)
    path = tmp_path_factory.mktemp("runs")
    shutil.copytree(made, path, symlinks=True, dirs_exist_ok=True)
    return path, ids


def made_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """`make_folder` run once per test session: under xdist, the first worker to ask makes it in the session's
    shared temporary folder (under a lock), and the others read what it made."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        shared = tmp_path_factory.getbasetemp()
    else:
        shared = tmp_path_factory.getbasetemp().parent  # the session's: each worker's own basetemp is below it
    made, listed = shared / "viewer-runs", shared / "viewer-runs.json"
    with open(shared / "viewer-runs.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not listed.exists():
            if made.exists():  # a worker that died making it: start again
                shutil.rmtree(made)
            ids = make_folder(made)
            listed.write_bytes(orjson.dumps(ids))
    return made, orjson.loads(listed.read_bytes())


def pipeline_run(trace: Path) -> harness.Outcome:
    """examples/pipeline.py, recorded: a planner, two workers on their own threads and a synthesizer
    they send their summaries to (spawn, exit, join, messages, vector clocks on every record)."""
    planner, tools, verifier = pipeline.make_agent(pipeline.FakeModel(latency=0.02))
    out = Executor(planner=planner, tools=tools, verifier=verifier, trace=trace).run({"question": pipeline.QUESTION})
    assert out.state == "DONE"
    return out


def pipeline_fork(parent: Path, out: Path) -> str:
    """A causal fork of that run at worker_a's search, as examples/pipeline.py makes one: worker_a's summary,
    the synthesis and the publishing step run again live; worker_b's records are served, not re-run."""
    search = next(c for c in harness.replay(parent).agents["worker_a"] if c.kind == "search")
    value = [{"id": "postgres-ops", "text": pipeline.CORPUS["postgres-ops"]}]
    planner, tools, verifier = pipeline.make_agent(pipeline.FakeModel(latency=0.02))
    child = harness.fork(parent, at=search.seq, value=value, planner=planner, tools=tools, verifier=verifier, out=out)
    assert child.trace is not None and child.live_calls_by_agent.get("worker_b", 0) == 0
    return child.trace


def research_run(folder: Path) -> harness.Outcome:
    planner, tools, verifier = research_agent.make_agent()
    ex = Executor(planner=planner, tools=tools, verifier=verifier, runs_dir=folder)
    return ex.run({"question": research_agent.QUESTION})


def search_seq(trace: str | os.PathLike[str]) -> int:
    """The seq of the research run's search result: where its example forks."""
    rep = harness.replay(trace)
    return next(c.seq for c in rep.crossings if c.kind == "tool" and c.request["tool"] == "search")


def fork_value(trace: str | os.PathLike[str]) -> dict[str, Any]:
    rep = harness.replay(trace)
    found = next(c for c in rep.crossings if c.kind == "tool" and c.request["tool"] == "search")
    url = "https://notes.example/postgres-for-growth"
    return {"query": found.response["query"], "hits": [{"url": url, "title": research_agent.CORPUS[url][0]}]}


def killed_run(trace: Path, gate: Path | None = None) -> None:
    """A run whose writer is SIGKILLed after a few steps: status interrupted, no torn line."""
    gate = gate or trace.with_suffix(".never")
    child = subprocess.Popen([sys.executable, __file__, "slow", str(trace), "10", str(gate)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until step 3 waits on the gate
            if trace.exists() and trace.read_bytes().count(b'"to":"ACT"') >= 3:
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the slow writer did not get to step 3")
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def make_folder(folder: Path) -> dict[str, str]:
    """Write one run of each kind into `folder`; return {role: run address}."""
    folder.mkdir(parents=True, exist_ok=True)
    ids: dict[str, str] = {}
    done = research_run(folder)
    ids["done"] = Path(done.trace).stem
    planner, tools, verifier = research_agent.make_agent()
    child = harness.fork(
        done.trace,
        at=search_seq(done.trace),
        value=fork_value(done.trace),
        planner=planner,
        tools=tools,
        verifier=verifier,
    )
    assert child.trace is not None
    ids["fork"] = Path(child.trace).stem

    failed = Executor(planner=fixed_plan(steps(3)), tools={"work": flaky(5)}, runs_dir=folder).run("fails at step 0")
    ids["failed"] = Path(failed.trace).stem

    paused = folder / "paused.jsonl"
    pay = [Step("look", "look", {"q": "balance"}), Step("pay", "pay", {"amount": 5})]
    tools2: dict[str, Any] = {"look": dict, "pay": Tool(power_cut(1), idempotent=False)}
    with contextlib.suppress(RuntimeError):  # the power cut: the unsafe call's outcome is unknown
        Executor(planner=fixed_plan(pay), tools=tools2, trace=paused).run("pay 5")
    out = Executor(planner=fixed_plan(pay), tools=tools2, trace=paused, resume=True).run("pay 5")
    assert out.state == "PAUSED"
    ids["paused"] = "paused"

    killed_run(folder / "killed.jsonl")
    ids["killed"] = "killed"

    lines = Path(done.trace).read_bytes().splitlines(keepends=True)
    bad = bytearray(lines[6])
    bad[bad.index(b'"kind"') + 2] ^= 0x01  # one bit flipped on line 7: its checksum fails
    (folder / "corrupt.jsonl").write_bytes(b"".join([*lines[:6], bytes(bad), *lines[7:]]))
    ids["corrupt"] = "corrupt"
    (folder / "broken-header.jsonl").write_bytes(b"not a trace at all\n" + b"".join(lines[1:]))
    ids["unreadable"] = "broken-header"

    torn = folder / "torn.jsonl"
    shutil.copyfile(folder / "killed.jsonl", torn)
    with open(torn, "ab") as f:
        f.write(b'{"seq":99,"kind":"transition","from":"AC')
    ids["torn"] = "torn"

    pipeline_run(folder / "agents.jsonl")
    ids["agents"] = "agents"
    ids["agents_fork"] = Path(pipeline_fork(folder / "agents.jsonl", folder / "agents-fork.jsonl")).stem

    report = {"title": "quarterly report", "rows": [{"n": i, "text": f"row {i} " + "·" * 40} for i in range(60)]}
    Executor(
        planner=fixed_plan(steps(1)), tools={"work": lambda i: report}, trace=folder / "blob.jsonl", blob_threshold=1024
    ).run("a result larger than the blob threshold")
    ids["blob"] = "blob"
    harness.annotate(done.trace, "verdict", "the search result decided the answer")
    harness.annotate(done.trace, "ticket", {"id": 123, "by": "ops"})

    xss_tools = {"work": lambda **a: {"html": XSS, **a}}
    xss_plan = fixed_plan([Step(XSS, "work", {"note": XSS})])
    Executor(planner=xss_plan, tools=xss_tools, trace=folder / "xss.jsonl").run({"title": XSS})
    ids["xss"] = "xss"
    return ids


def slow(trace: str, n: int, gate: str) -> None:
    def work(i: int) -> dict[str, int]:
        while i >= 3 and not os.path.exists(gate):
            time.sleep(0.02)
        return {"i": i}

    Executor(planner=fixed_plan(steps(n)), tools={"work": work}, trace=trace).run(f"{n} slow steps")


if __name__ == "__main__" and sys.argv[1] == "slow":
    slow(sys.argv[2], int(sys.argv[3]), sys.argv[4])
