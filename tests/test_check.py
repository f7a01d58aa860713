"""`harness check`: recorded runs replayed offline against today's code, writing nothing.

A folder of 1,000 runs of a workflow (`python -m harness`, real processes): finished ones, ones stopped by an
exception, one SIGKILLed in a tool, one paused on a question; then the agent's module is edited so that some
runs drift. Every run's line is checked against what it is, the exit code too, and the bytes of every file of
the folder are hashed before and after: nothing is written. Then an Executor's runs (`--agent`), bad input,
`--json`, and the code fingerprint (`harness runs` and `check` say when the code changed).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import harness

TESTS = Path(__file__).resolve().parent

AGENT = """
import os, signal
import harness


@harness.tool
def look_up(point: str) -> dict:
    return {"point": point, "sources": 2}


@harness.tool(idempotent=True)
def send(to: str, body: str) -> str:
    return "sent"


def model(request):
    return {"text": "a;b", "usage": {"total_tokens": 7}} if request["prompt"].startswith("outline") else {
        "text": "notes on " + request["prompt"]}


@harness.workflow
def research(topic: str, stop: str = "") -> str:
    outline = harness.llm({"prompt": f"outline {topic}"}, model)
    notes = []
    for point in outline["text"].split(";"):
        look_up(POINT)
        if os.environ.get("STOP") == point:
            raise SystemExit(3)  # the process stops here: the run is left unfinished
        if os.environ.get("KILL") == point:
            os.kill(os.getpid(), signal.SIGKILL)  # a process killed mid-run
        notes.append(harness.llm({"prompt": point}, model)["text"])
    if stop == "ask":
        harness.interrupt("send it?")
    send(to="ann@example.com", body="; ".join(notes))
    return "sent"
"""
SAME = "point"
DRIFTS = 'point.upper() if topic.endswith("7") else point'  # runs whose topic ends in 7 now look up another point

RECORD = """
import os, sys
import check_agent
n = int(sys.argv[1])
for i in range(n):
    os.environ["STOP"] = "b" if i % 10 == 3 else ""
    try:
        check_agent.research.run(f"topic {i}", "ask" if i == 5 else "", trace=f"runs/{i:04d}.jsonl")
    except SystemExit:
        pass
"""


def python(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    env.pop("KILL", None), env.pop("STOP", None)
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def harness_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m harness ARGS` (the CI spelling, where the console script is not on PATH)."""
    return python("-m", "harness", *args, cwd=cwd, check=False)


def agent(tmp: Path, point: str) -> None:
    (tmp / "check_agent.py").write_text(AGENT.replace("POINT", point))


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file under folder, by path: what `nothing is written` is checked against."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The check's scratch folder ($TMPDIR, which the CLI's process inherits): this test's alone, even under xdist."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 runs: 899 finished, 100 stopped after looking up "b", one paused on a question; one more SIGKILLed."""
    tmp = tmp_path_factory.mktemp("check")
    (tmp / "runs").mkdir()
    agent(tmp, SAME)
    (tmp / "record.py").write_text(RECORD)
    python("record.py", "1000", cwd=tmp)
    kill = "import os, check_agent; os.environ['KILL'] = 'a'; check_agent.research.run('k', trace='runs/kill.jsonl')"
    killed = python("-c", kill, cwd=tmp, check=False)
    assert killed.returncode == -signal.SIGKILL
    return tmp


def expected(name: str, drifted: bool) -> str:
    """The line a run must get, from what its recording is."""
    if name == "kill":
        return "ok, would go live at seq 7 (llm crossing)"  # killed after its first look_up: the crossing after it
    i = int(name)
    if drifted and name.endswith("7"):
        return "drift at seq 5: args.point: recorded 'a', now 'A'"
    if i == 5:
        return "ok, paused: waits for an answer or a reconcile"
    if i % 10 == 3:
        return "ok, would go live at seq 11 (llm crossing)"
    return "ok"


def test_a_thousand_runs_are_checked_and_nothing_is_written(folder: Path, scratch: Path) -> None:
    runs = folder / "runs"
    before = snapshot(runs)
    assert len([p for p in before if p.endswith(".jsonl")]) == 1001

    out = harness_cli("check", "runs", "--workflow", "check_agent:research", "-j", "2", cwd=folder)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1002 and out.stderr == ""  # no progress bar: stderr is not a terminal
    for line in lines[:-1]:
        path, _, said = line.partition(": ")
        assert said == expected(Path(path).stem, drifted=False), line
    assert lines[-1] == "1001 runs: 1001 ok (101 unfinished, would go on)"
    assert snapshot(runs) == before and list(scratch.iterdir()) == []

    agent(folder, DRIFTS)  # today's code: runs whose topic ends in 7 look up another point
    try:
        out = harness_cli("check", "runs", "--workflow", "check_agent:research", "-j", "2", cwd=folder)
    finally:
        agent(folder, SAME)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    for line in lines[:-1]:
        path, _, said = line.partition(": ")
        assert said == expected(Path(path).stem, drifted=True) + " [code changed since it was recorded]", line
    assert lines[-1] == (
        "1001 runs: 901 ok (101 unfinished, would go on), 100 drift; 1001 recorded with code other than today's"
    )
    assert snapshot(runs) == before and list(scratch.iterdir()) == []


def test_json_gives_one_object_per_run(folder: Path) -> None:
    out = harness_cli("check", "runs/0003.jsonl", "runs/0004.jsonl", "--workflow", "check_agent:research", "--json",
                      cwd=folder)  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["path"], r["status"], r["finished"], r["seq"], r["ahead"], r["code"]) for r in rows] == [
        ("runs/0003.jsonl", "ok", False, 11, "llm crossing", "same"),
        ("runs/0004.jsonl", "ok", True, None, None, "same"),
    ]


def test_a_run_whose_code_raises_now_drifts(folder: Path, tmp_path: Path) -> None:
    agent(folder, 'point if topic != "topic 1" else int("boom")')
    try:
        out = harness_cli("check", "runs/0001.jsonl", "--workflow", "check_agent:research", cwd=folder)
    finally:
        agent(folder, SAME)
    assert out.returncode == 1
    assert out.stdout.splitlines()[0] == (
        "runs/0001.jsonl: drift at seq 4: to: recorded 'ACT', now 'FAILED' (builtins.ValueError: invalid literal for "
        "int() with base 10: 'boom') [code changed since it was recorded]"
    )
    assert out.stderr == ""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nope.jsonl", "--workflow", "check_agent:research"], "nope.jsonl: no such trace or runs folder"),
        (["runs/0001.jsonl", "--workflow", "check_agent:nope"], "check_agent has no workflow or function nope"),
        (["runs/0001.jsonl", "--workflow", "nomodule:x"], "cannot import nomodule"),
        (["runs/0001.jsonl", "--workflow", "check_agent:research", "-j", "-1"], "--jobs -1"),
    ],
)
def test_bad_input_is_exit_2_with_a_clear_line(folder: Path, args: list[str], said: str) -> None:
    out = harness_cli("check", *args, cwd=folder)
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_corrupt_run_is_an_error_the_others_are_still_checked(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text("this is not a trace\n")
    good = str(folder / "runs" / "0001.jsonl")
    out = harness_cli("check", good, str(tmp_path / "bad.jsonl"), "--workflow", "check_agent:research", cwd=folder)
    assert out.returncode == 2
    assert out.stdout.splitlines()[0] == f"{good}: ok"
    assert out.stdout.splitlines()[1].startswith(f"{tmp_path / 'bad.jsonl'}: error: ")
    alone = harness_cli("check", str(tmp_path / "bad.jsonl"), "--workflow", "check_agent:research", cwd=folder)
    assert alone.returncode == 2 and alone.stdout.splitlines()[-1] == "1 run: 0 ok, 1 error"
    assert alone.stderr == ""  # its line says why: not a word about runs of another agent


def test_runs_of_another_workflow_or_shape_are_skipped(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "other.py").write_text("import harness\n\n@harness.workflow\ndef other() -> int:\n    return 1\n")
    python("-c", "import other; other.other.run(trace='other.jsonl')", cwd=tmp_path)
    out = harness_cli("check", str(tmp_path / "other.jsonl"), "runs/0001.jsonl", "--workflow",
                      "check_agent:research", cwd=folder)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "other.jsonl: skipped: a run of workflow other:other, not check_agent:research" in out.stdout
    assert out.stdout.splitlines()[-1] == "2 runs: 1 ok, 1 skipped"
    alone = harness_cli("check", str(tmp_path / "other.jsonl"), "--workflow", "check_agent:research", cwd=folder)
    assert alone.returncode == 2 and "no run was checked" in alone.stderr  # a wrong --workflow, most likely


# --- an Executor's runs, in the test's own process ----------------------------------------------------------------


def make_agent() -> Any:
    def planner(goal: Any, progress: list[Any]) -> harness.Step | None:
        harness.llm({"prompt": f"step {len(progress)}"}, lambda r: {"text": "ok"})
        if len(progress) == 2:
            return None
        return harness.Step("work", "work", {"i": len(progress) * FACTOR["n"]})

    return planner, {"work": lambda i: {"i": i}}, None


FACTOR = {"n": 1}


def test_an_executors_runs_are_checked_with_its_agent(tmp_path: Path) -> None:
    from harness.ops.check import check, exit_code

    planner, tools, _ = make_agent()
    harness.Executor(planner=planner, tools=tools, trace=tmp_path / "done.jsonl").run("g")
    crashing = {"work": harness.testing.power_cut(2)}
    with pytest.raises(RuntimeError):
        harness.Executor(planner=planner, tools=crashing, trace=tmp_path / "crashed.jsonl").run("g")
    before = snapshot(tmp_path)
    results = check([tmp_path], planner=planner, tools=tools)
    assert [r.line() for r in results] == [
        f"{tmp_path / 'crashed.jsonl'}: ok, would go live at seq 10 (tool work)",
        f"{tmp_path / 'done.jsonl'}: ok",
    ]
    FACTOR["n"] = 10
    try:
        results = check([tmp_path], planner=planner, tools=tools)
    finally:
        FACTOR["n"] = 1
    assert [r.line().split(": ", 1)[1] for r in results] == [
        "drift at seq 8: args.i: recorded 1, now 10",  # the intent: the crash left no result
        "drift at seq 9: args.i: recorded 1, now 10",  # the tool's recorded result, the call it answers
    ]
    assert exit_code(results) == 1 and snapshot(tmp_path) == before


# --- the code fingerprint ---------------------------------------------------------------------------------------


def test_the_header_records_the_code_and_runs_says_when_it_changed(folder: Path) -> None:
    header = harness.replay(folder / "runs" / "0001.jsonl").header
    code = header["env"]["code"]
    assert code["files"] == ["check_agent.py"] and len(code["sha256"]) == 16
    listed = harness_cli("runs", "runs", "--json", cwd=folder)
    assert {r["code"] for r in json.loads(listed.stdout)} == {"same"}
    agent(folder, DRIFTS)
    try:
        listed = harness_cli("runs", "runs", "--json", cwd=folder)
    finally:
        agent(folder, SAME)
    assert {r["code"] for r in json.loads(listed.stdout)} == {"changed"}


def test_a_project_may_name_what_the_fingerprint_covers(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.harness]\nfingerprint = ["agent/*.py", "helper"]\n')
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "__init__.py").write_text("")
    (tmp_path / "agent" / "flow.py").write_text(
        "import harness\n\n@harness.workflow\ndef flow() -> int:\n    return 1\n"
    )
    (tmp_path / "helper.py").write_text("X = 1\n")
    python("-c", "from agent import flow; flow.flow.run(trace='run.jsonl')", cwd=tmp_path)
    code = harness.replay(tmp_path / "run.jsonl").header["env"]["code"]
    assert code["files"] == ["agent/__init__.py", "agent/flow.py", "helper.py"]
    out = harness_cli("check", "run.jsonl", "--workflow", "agent.flow:flow", cwd=tmp_path)
    assert out.stdout.splitlines()[0] == "run.jsonl: ok"
    (tmp_path / "helper.py").write_text("X = 2\n")  # a file the project named: the code changed, the run replays
    out = harness_cli("check", "run.jsonl", "--workflow", "agent.flow:flow", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.splitlines()[0] == "run.jsonl: ok [code changed since it was recorded]"


def test_a_partial_planner_is_fingerprinted_by_its_functions_module(tmp_path: Path) -> None:
    planner, tools, _ = make_agent()
    out = harness.Executor(planner=functools.partial(planner), tools=tools, trace=tmp_path / "run.jsonl").run("go")
    files = harness.replay(out.trace).header["env"]["code"]["files"]
    assert [Path(f).name for f in files] == ["test_check.py"]  # not functools.py: it would never say the code changed


def test_python_dash_m_harness_is_the_command(tmp_path: Path) -> None:
    out = harness_cli("--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("harness ")


# --- golden files -------------------------------------------------------------------------------------------------


def test_a_golden_file_is_checked_as_the_run_it_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/workflow.py's committed goldens replay against its code; a golden edited to pin other args drifts
    at that record; nothing is written beside them."""
    golden = TESTS / "golden" / "test_example_workflow"
    monkeypatch.syspath_prepend(str(TESTS.parent / "examples"))
    import workflow

    before = snapshot(golden)
    results = harness.check([golden], workflow=workflow.research)
    assert [(Path(r.path).name, r.status) for r in results] == [
        ("test_the_recorded_research_reruns_offline.jsonl", "ok"), ("test_the_research_run.jsonl", "ok"),
    ]  # fmt: skip
    lines = (golden / "test_the_research_run.jsonl").read_text().splitlines()
    edited = [line.replace('"args":{"point":"rock pools"}', '"args":{"point":"sea stars"}') for line in lines]
    assert edited != lines
    (tmp_path / "edited.jsonl").write_text("\n".join(edited) + "\n")
    [drift] = harness.check([tmp_path / "edited.jsonl"], workflow=workflow.research)
    record = next(i for i, line in enumerate(edited) if "sea stars" in line)  # line i+1: record i (the format line)
    assert drift.status == "drift" and drift.seq in (record, record + 1), drift.line()
    assert "'sea stars'" in drift.line() and "'rock pools'" in drift.line()
    assert snapshot(golden) == before


def test_a_progress_bar_on_a_terminal_only(folder: Path) -> None:
    import pty

    main, child = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(folder)}
    cmd = [sys.executable, "-m", "harness", "check", "runs/0001.jsonl", "runs/0002.jsonl", "--workflow",
           "check_agent:research"]  # fmt: skip
    done = subprocess.run(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=child, timeout=300)
    os.close(child)
    drawn = b""
    while True:
        try:
            got = os.read(main, 4096)
        except OSError:  # EIO: the terminal's other side is closed
            break
        if not got:
            break
        drawn += got
    os.close(main)
    assert done.returncode == 0 and b"] 2/2" in drawn and b"\r" in drawn
    assert b"[" not in done.stdout.split(b"\n")[0][:1]  # stdout holds the lines alone


def test_a_golden_that_holds_no_trace_records_is_a_clear_error(tmp_path: Path) -> None:
    golden = tmp_path / "view.jsonl"
    golden.write_text(
        '{"format":"harness-golden","version":2}\n{"kind":"header","schema":2,"goal":null,"tools":{}}\n'
        '{"kind":"model_call","via":"http","model":"m"}\n'
    )
    [result] = harness.check([golden], workflow=lambda: None)
    assert result.status == "error" and "a golden of the behavior view ('model_call' records)" in result.detail


def golden_of(trace: Path, view: str) -> Path:
    """The golden file a test with `golden_view = view` writes of trace (the plugin's render)."""
    from harness.review.normalize import Rules, normalize_with, render

    rules = Rules.of((), True, view)
    golden = trace.with_name(f"{view}.golden.jsonl")
    golden.write_text(render(normalize_with(str(trace), rules), rules))
    return golden


def test_a_golden_of_a_pydantic_ai_run_is_checked_raw_and_explained_in_the_behavior_view(tmp_path: Path) -> None:
    """A raw golden of a Pydantic AI run reruns clean: what it left out (the reply's timestamp, the tool call ids
    the framework made up) is made up again as the framework would. Before, it read as a drift (ModelResponse
    refused the `<ignored>` timestamp). A behavior-view golden says why it cannot be rerun and what to do."""
    import framework_agent

    trace = tmp_path / "run.jsonl"
    assert framework_agent.pai_flow.run("", "function", trace=trace).state == "DONE"
    raw, behavior = golden_of(trace, "raw"), golden_of(trace, "behavior")
    ok, explained = harness.check([raw, behavior], workflow=framework_agent.pai_flow)
    assert (ok.path, ok.status) == (str(raw), "ok"), ok.line()
    assert explained.status == "error"
    for said in ("cannot be rerun", "harness check TRACE", "rerun its test", 'golden_view = "raw"'):
        assert said in explained.detail


NOISY = """
import os, time
import harness


@harness.tool
def look(point: str) -> str:
    print("tool noise", point)
    return point


@harness.workflow
def noisy(topic: str) -> str:
    print("workflow noise", topic)
    if os.environ.get("EXIT") == topic:  # agent code that ends its process
        os._exit(9)
    if os.environ.get("BLOCK") == topic:  # a check that takes its time: the test interrupts it here
        open(os.environ["BLOCKED"], "w").close()
        time.sleep(600)
    look(topic)
    return "ok"
"""


@pytest.fixture
def noisy(tmp_path: Path) -> Path:
    """20 finished runs of an agent that prints (to stdout) as it runs."""
    (tmp_path / "noisy_agent.py").write_text(NOISY)
    (tmp_path / "runs").mkdir()
    record = "import noisy_agent\nfor i in range(20): noisy_agent.noisy.run(f't{i}', trace=f'runs/{i:02d}.jsonl')"
    python("-c", record, cwd=tmp_path)
    return tmp_path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_what_the_agent_prints_goes_to_stderr_never_into_the_lines(noisy: Path, jobs: str) -> None:
    out = harness_cli("check", "runs", "--workflow", "noisy_agent:noisy", "--json", "-j", jobs, cwd=noisy)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]  # every line a run's object: nothing else
    assert [r["status"] for r in rows] == ["ok"] * 20
    assert out.stderr.count("workflow noise") == 20
    text = harness_cli("check", "runs", "--workflow", "noisy_agent:noisy", "-j", jobs, cwd=noisy)
    assert text.stdout.splitlines()[-1] == "20 runs: 20 ok" and "noise" not in text.stdout


def test_ctrl_c_stops_the_workers_at_once_no_traceback_nothing_left(noisy: Path) -> None:
    before, tmp = snapshot(noisy / "runs"), noisy / "tmp"
    tmp.mkdir()
    blocked = noisy / "blocked"
    env = {**os.environ, "PYTHONPATH": str(noisy), "BLOCK": "t11", "BLOCKED": str(blocked), "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "harness", "check", "runs", "--workflow", "noisy_agent:noisy", "-j", "2"]
    p = subprocess.Popen(cmd, cwd=noisy, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)  # fmt: skip
    try:
        while not blocked.exists() and p.poll() is None:  # a worker is in the run it sleeps in
            time.sleep(0.02)
        assert [d.name[:14] for d in tmp.iterdir()] == ["harness-check-"]  # $TMPDIR holds the check's scratch
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C on a terminal does: the whole group gets it
        out, err = p.communicate(timeout=120)  # the sleeping worker would hold a shutdown for 600 s
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.splitlines()[-1].startswith("harness check: interrupted after ")
    assert all(line.endswith(": ok") for line in out.splitlines())  # the lines printed stand, no summary
    assert snapshot(noisy / "runs") == before and list(tmp.iterdir()) == []


def test_a_reader_that_stops_reading_stops_the_check_quietly(noisy: Path) -> None:
    """`harness check runs | head -1`: the pipe closes, the workers stop; no traceback, nothing left behind."""
    tmp = noisy / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "harness", "check", "runs", "--workflow", "noisy_agent:noisy", "-j", "2"]
    env = {**os.environ, "PYTHONPATH": str(noisy), "TMPDIR": str(tmp)}
    p = subprocess.Popen(cmd, cwd=noisy, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "runs/00.jsonl: ok\n"
    p.stdout.close()
    err = p.communicate(timeout=120)[1]
    assert p.returncode == 0 and "Traceback" not in err and list(tmp.iterdir()) == []


def test_a_path_that_is_no_file_nor_folder_is_named_as_such(noisy: Path) -> None:
    os.mkfifo(noisy / "pipe.jsonl")  # never opened: the check would wait for a writer
    (noisy / "nowhere.jsonl").symlink_to(noisy / "gone.jsonl")
    out = harness_cli("check", "pipe.jsonl", "--workflow", "noisy_agent:noisy", cwd=noisy)
    assert (out.returncode, out.stdout) == (2, "")
    assert (
        out.stderr
        == "harness check: pipe.jsonl: neither a trace file nor a runs folder (a FIFO, a socket or a device)\n"
    )
    out = harness_cli("check", "nowhere.jsonl", "--workflow", "noisy_agent:noisy", cwd=noisy)
    assert out.stderr == "harness check: nowhere.jsonl: no such trace or runs folder\n" and out.returncode == 2


UNSTORABLE = """
import os
import harness


@harness.tool
def look(point) -> str:
    return "seen"


@harness.workflow
def flow(topic: str) -> str:
    look(b"a" if os.environ.get("TODAY") else "a")  # today's code hands the tool bytes, which no trace holds
    return "ok"
"""


def test_code_that_now_hands_a_tool_what_no_trace_holds_drifts(tmp_path: Path) -> None:
    (tmp_path / "unstorable.py").write_text(UNSTORABLE)
    python("-c", "import unstorable; unstorable.flow.run('t', trace='run.jsonl')", cwd=tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "TODAY": "1"}
    out = subprocess.run([sys.executable, "-m", "harness", "check", "run.jsonl", "--workflow", "unstorable:flow"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr  # a drift: a resume with this code would fail the same way
    assert out.stdout.startswith("run.jsonl: drift: now raises NotSerializable: args of tool 'look' at step 0: ")


def test_a_worker_whose_agent_code_exits_is_said_never_a_hang(noisy: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(noisy), "EXIT": "t11"}
    cmd = [sys.executable, "-m", "harness", "check", "runs", "--workflow", "noisy_agent:noisy", "-j", "2"]
    out = subprocess.run(cmd, cwd=noisy, env=env, capture_output=True, text=True, timeout=300)
    lines = out.stdout.splitlines()
    assert out.returncode == 2 and len(lines) == 21, out.stdout + out.stderr
    died = "error: a check worker process died while checking this run or one beside it"
    said = {line.partition(": ")[0]: line.partition(": ")[2] for line in lines[:20]}
    assert said["runs/11.jsonl"].startswith(died) and said["runs/00.jsonl"] == "ok"  # (the other worker's may die too)
    assert all(said[f"runs/{i:02d}.jsonl"].startswith(died) for i in range(11, 20))
    assert all(v == "ok" or v.startswith(died) for v in said.values()) and "Traceback" not in out.stderr


def test_main_called_in_a_process_whose_stdout_is_captured(noisy: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from harness.cli import main

    monkeypatch.chdir(noisy)
    monkeypatch.syspath_prepend(str(noisy))
    assert main(["check", "runs/00.jsonl", "--workflow", "noisy_agent:noisy"]) == 0
    assert capsys.readouterr().out.splitlines() == ["runs/00.jsonl: ok", "1 run: 1 ok"]  # lines where stdout is
