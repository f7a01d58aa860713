"""`harness show`, `harness replay` and `harness diff` as the installed console script runs them.

The console script is `harness.cli:main` (pyproject.toml): most commands here call main() in this process and
read what it printed and returned, as the script's exit code; the script itself, a fresh process, runs where
the process is the point (a pipe closed early, what a start loads, agents imported from the working directory).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from in_process import harness

import harness as package  # (`harness` below runs the console script)
from harness import Executor, ToolError, diff, normalize, replay
from harness.cli import main
from harness.review.normalize import GOLDEN_HEAD, render
from harness.testing import ScriptedTool, counter, fixed_plan, read_records, steps, write_trace

HARNESS = shutil.which("harness") or str(Path(sys.executable).parent / "harness")


def run(trace: Path, tool: Any = None, n: int = 2) -> Path:
    Executor(planner=fixed_plan(steps(n)), tools={"work": tool or counter()}, trace=trace).run("goal")
    return trace


def corrupt(trace: Path, line: int) -> Path:
    """Change one byte of a line's data, leaving its checksum as it was."""
    lines = trace.read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1].replace(b'"step":', b'"step":1', 1)
    trace.write_bytes(b"\n".join(lines))
    return trace


def test_show_prints_one_line_per_record(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl")
    out = harness("show", "--width", 1000, trace)  # wide enough that no record wraps
    assert out.returncode == 0 and out.stderr == ""
    lines = out.stdout.splitlines()
    assert len(lines) == len(read_records(trace))
    assert lines[0].split()[:2] == ["1", "header"]
    assert lines[2].split()[:9] == ["3", "PLAN", "->", "ACT", "step", "0,", "attempt", "1", "call=work"]
    assert lines[2].split()[9:] == ['{"i":0}', 'name="step-0"']
    assert lines[3].split() == ["4", "ACT", "->", "VERIFY", "step", "0,", "attempt", "1", 'result={"i":0}']
    assert lines[4].split() == ["5", "checkpoint,", "step", "0"]  # it vouches for the result just above
    assert lines[-2].split()[:4] == [str(len(lines) - 1), "PLAN", "->", "DONE"]
    assert lines[-1].split()[:3] == [str(len(lines)), "seal", 'state="DONE"']


def test_show_names_a_torn_tail(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl")
    unfinished = b"".join(trace.read_bytes().splitlines(keepends=True)[:5])  # bytes after a seal are corruption
    trace.write_bytes(unfinished + b'{"seq":99,"kind":"tra')
    out = harness("show", trace)
    assert out.returncode == 0
    assert out.stdout.splitlines()[-1].strip() == "(torn tail: an unfinished last line, not part of the run)"


def test_show_golden_prints_the_normalized_view_and_is_stable_on_its_own_output(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl")
    out = harness("show", "--golden", trace)
    assert out.returncode == 0
    assert out.stdout == render(normalize(trace))
    assert out.stdout.splitlines()[0] == GOLDEN_HEAD
    golden = tmp_path / "golden.jsonl"
    golden.write_text(out.stdout)
    assert harness("show", "--golden", golden).stdout == out.stdout


def test_replay_summarizes_a_valid_trace(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl", ScriptedTool({1: ToolError("once")}))
    out = harness("replay", trace)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.splitlines()[0] == f"{trace}: valid, state DONE"
    assert "torn tail: no" in out.stdout
    data = orjson.loads(harness("replay", "--json", trace).stdout)
    records = read_records(trace)
    assert data["ok"] is True and data["state"] == "DONE" and data["run_id"] == records[0]["run_id"]
    assert data["records"] == len(records) and data["last_seq"] == len(records)
    assert data["checkpoints"] == 2 and data["resumes"] == 0 and data["torn_tail"] is False
    moves = sum(r["kind"] == "transition" for r in records) + 2 * sum(r["kind"] == "checkpoint" for r in records)
    assert data["transitions"] == moves  # a checkpoint record is two moves: VERIFY -> CHECKPOINT -> PLAN


def test_replay_reports_corruption_compiler_style(tmp_path: Path) -> None:
    trace = corrupt(run(tmp_path / "run.jsonl"), 5)
    out = harness("replay", trace)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"{trace}:5: checksum (seq 5): the line's bytes do not match its checksum (edited, moved or damaged)"
    ]
    data = harness("replay", "--json", trace)
    assert data.returncode == 1
    assert orjson.loads(data.stdout) == {
        "ok": False,
        "error": {"line": 5, "seq": 5, "reason": "checksum", "detail": out.stderr.split(": ", 2)[2].strip()},
    }


def test_replay_reports_a_forged_transition_with_its_line_and_seq(tmp_path: Path) -> None:
    records = read_records(run(tmp_path / "run.jsonl"))
    records[3]["to"] = "CHECKPOINT"  # ACT -> CHECKPOINT: no such edge, behind a valid checksum chain
    forged = tmp_path / "forged.jsonl"
    write_trace(forged, records)
    out = harness("replay", forged)
    assert out.returncode == 1
    assert out.stderr.startswith(f"{forged}:4: bad-transition (seq 4): ")
    assert len(out.stderr.splitlines()) == 1


def test_diff_exit_codes_and_formats(tmp_path: Path) -> None:
    a = run(tmp_path / "a.jsonl")
    b = run(tmp_path / "b.jsonl")
    c = run(tmp_path / "c.jsonl", ScriptedTool({2: ToolError("flaky")}))

    same = harness("diff", a, b)
    assert same.returncode == 0 and same.stdout == f"equal after normalization ({len(read_records(a))} records)\n"

    different = harness("diff", a, c)
    assert different.returncode == 1 and different.stderr == ""
    assert different.stdout.splitlines()[0] == (
        "first difference at seq 7: transition ACT -> PLAN, step 1, attempt 1 inserted"
        " (1 changed, 2 inserted, 0 removed)"
    )
    assert different.stdout == diff(a, c).text(limit=None)

    as_json = harness("diff", "--format", "json", a, c)
    assert as_json.returncode == 1
    assert orjson.loads(as_json.stdout) == orjson.loads(orjson.dumps(diff(a, c).as_json()))
    assert orjson.loads(harness("diff", "--format", "json", a, b).stdout)["equal"] is True

    md = harness("diff", "--format", "markdown", a, c)
    assert md.returncode == 1
    assert md.stdout.startswith(f"**Traces differ**: `{a}` → `{c}`: 1 changed, 2 inserted, 0 removed.")
    assert "| inserted |  | 7 | transition ACT -> PLAN, step 1, attempt 1 |" in md.stdout


def test_diff_of_a_golden_file_and_a_trace(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl")
    golden = tmp_path / "golden.jsonl"
    golden.write_text(harness("show", "--golden", trace).stdout)
    assert harness("diff", golden, trace).returncode == 0
    assert harness("diff", golden, run(tmp_path / "longer.jsonl", n=3)).returncode == 1


def bad_inputs(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a trace\nat all\n")
    return {
        "missing": tmp_path / "missing.jsonl",
        "folder": tmp_path / "folder",
        "empty": tmp_path / "empty.jsonl",
        "not a trace": tmp_path / "notes.txt",
        "corrupt": corrupt(run(tmp_path / "corrupt.jsonl"), 3),
    }


@pytest.mark.parametrize("kind", ["missing", "folder", "empty", "not a trace", "corrupt"])
def test_bad_input_is_one_line_on_stderr_and_a_nonzero_exit(tmp_path: Path, kind: str) -> None:
    bad = bad_inputs(tmp_path)[kind]
    good = run(tmp_path / "good.jsonl")
    replay_code = 1 if kind == "corrupt" else 2
    calls = [(("show", bad), replay_code), (("replay", bad), replay_code)]
    calls += [(("diff", good, bad), 2), (("diff", bad, good), 2)]
    for args, code in calls:
        out = harness(*args)
        assert out.returncode == code, (args, out.stderr)
        # show prints the records before the damage (see test_show.py); nothing else writes to stdout
        assert out.stdout == "" or (kind == "corrupt" and args[0] == "show" and len(out.stdout.splitlines()) >= 2)
        assert len(out.stderr.splitlines()) == 1, out.stderr
        assert str(bad) in out.stderr and "Traceback" not in out.stderr


def test_misuse_exits_2(tmp_path: Path) -> None:
    out = harness("diff", run(tmp_path / "a.jsonl"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert harness("diff", "--format", "html", tmp_path / "a.jsonl", tmp_path / "a.jsonl").returncode == 2


# --- runs: a path column and a status filter -------------------------------------------------


def test_runs_shows_each_path_and_filters_by_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.testing import power_cut

    folder = tmp_path / "runs"
    folder.mkdir()
    run(folder / "nightly refund.jsonl")
    run(folder / "retry.jsonl", ScriptedTool({1: ToolError("a"), 2: ToolError("b"), 3: ToolError("c")}))
    with pytest.raises(RuntimeError):
        run(folder / "crashed.jsonl", power_cut(1))
    (folder / "odd-\udcff.jsonl").write_bytes(b"junk\n")  # a name that is not UTF-8: unreadable, still listed
    assert main(["runs", str(folder)]) == 0
    table = capsys.readouterr().out.splitlines()
    head = ["ID", "STATUS", "STARTED", "ENDED", "RECORDS", "ENTRYPOINT", "PARENT", "DETAIL", "CODE", "PATH"]
    assert table[0].split() == head
    assert "crashed in ACT: builtins.RuntimeError: power cut" in next(t for t in table if "crashed.jsonl" in t)
    by_path = {line.rsplit("  ", 1)[1]: line.split()[1] for line in table[1:]}
    assert by_path == {
        str(folder / "nightly refund.jsonl"): "done", str(folder / "retry.jsonl"): "failed",
        str(folder / "crashed.jsonl"): "interrupted", str(folder / "odd-\\xff.jsonl"): "unreadable",
    }  # fmt: skip

    def listed(*status: str) -> set[str]:
        assert main(["runs", str(folder), "--json", *(a for s in status for a in ("--status", s))]) == 0
        return {Path(r["path"]).name for r in orjson.loads(capsys.readouterr().out)}

    assert listed("done") == {"nightly refund.jsonl"}
    assert listed("done", "interrupted") == listed("done,interrupted") == {"nightly refund.jsonl", "crashed.jsonl"}
    assert listed("paused") == set()
    assert main(["runs", str(folder), "--status", "failed"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 2 and rows[1].endswith(str(folder / "retry.jsonl"))
    assert main(["runs", str(folder), "--status", "finished"]) == 2
    assert "--status finished: not a status; choose from running, paused" in capsys.readouterr().err


# --- fork: a string value, and an agent that fails after the branch ------------------------------


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: a model server that is down."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recorded_refund(tmp_path: Path) -> tuple[Path, int]:
    """The refund agent copied beside a trace it recorded; the seq of its decision (the first model call)."""
    agent = Path(__file__).with_name("refund_agent.py")
    shutil.copy(agent, tmp_path / "refund_agent.py")
    subprocess.run([sys.executable, "refund_agent.py", "parent.jsonl"], cwd=tmp_path, check=True, timeout=60)
    decision = next(r for r in read_records(tmp_path / "parent.jsonl") if r.get("boundary") == "llm")
    return tmp_path / "parent.jsonl", decision["seq"]


def fork_cli(tmp_path: Path, *args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [HARNESS, "fork", "parent.jsonl", "--agent", "refund_agent:make_agent", *map(str, args)]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)


def test_fork_set_text_gives_a_string_value(tmp_path: Path) -> None:
    _, at = recorded_refund(tmp_path)
    out = fork_cli(tmp_path, "--at", at, "--set-text", "deny", "--out", "child.jsonl")
    assert out.returncode == 0, out.stderr
    child = read_records(tmp_path / "child.jsonl")
    assert child[at - 1]["response"] == "deny"
    assert [c.name for c in replay(tmp_path / "child.jsonl").checkpoints] == [
        "lookup", "explain", "review", "close",
    ]  # fmt: skip
    both = fork_cli(tmp_path, "--at", at, "--set", '"x"', "--set-text", "x", "--out", "other.jsonl")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    bare = fork_cli(tmp_path, "--at", at, "--set", "deny", "--out", "other.jsonl")  # a string needs JSON quotes
    assert bare.returncode == 2 and "--set 'deny' is neither valid JSON" in bare.stderr
    assert "--set-text TEXT" in bare.stderr
    assert not (tmp_path / "other.jsonl").exists()


def test_fork_whose_model_server_is_down_says_why_in_one_line_and_leaves_no_file(tmp_path: Path) -> None:
    import os

    _, at = recorded_refund(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    env = {**os.environ, "MODEL_URL": f"http://127.0.0.1:{closed_port()}/v1"}
    for out in (["--out", "child.jsonl"], []):  # a named child, and the default one beside the parent
        r = fork_cli(tmp_path, "--at", at, "--set-text", "deny", *out, env=env)
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr.splitlines() == [
            "harness fork: the agent raised URLError: <urlopen error [Errno 111] Connection refused>; the fork did "
            "not finish and its child trace was removed (a failed fork leaves no file)"
        ]
        assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == before


def test_fork_removes_the_child_whatever_the_agent_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.error

    import refund_agent

    import harness

    parent, at = recorded_refund(tmp_path)
    planner, tools, _ = refund_agent.make_agent()
    monkeypatch.setenv("MODEL_URL", f"http://127.0.0.1:{closed_port()}/v1")
    with pytest.raises(urllib.error.URLError):
        harness.fork(parent, at=at, value="deny", planner=planner, tools=tools, out=tmp_path / "child.jsonl")
    assert not (tmp_path / "child.jsonl").exists()


def test_rerun_whose_agent_raises_says_why_in_one_line(tmp_path: Path) -> None:
    recorded_refund(tmp_path)
    cmd = [HARNESS, "rerun", "parent.jsonl", "--agent", "refund_agent:make_broken", "--out", "again.jsonl"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "harness rerun: the agent raised KeyError: 'amount'; what was written up to it is in again.jsonl"
    ]
    kept = replay(tmp_path / "again.jsonl")  # the rerun got as far as the first step
    assert [c.name for c in kept.checkpoints] == ["lookup"]


# --- resume and recover accept async agents (planners, tools, verifiers that are `async def`) -------------

TESTS = Path(__file__).parent


def gathering(folder: Path) -> dict[str, str]:
    """The environment of tests/gather_agent.py (an async planner gathering three model calls), for a CLI."""
    import os

    return {**os.environ, "GATHER_DIR": str(folder)}


def test_harness_resume_answers_an_async_agent(tmp_path: Path) -> None:
    env = gathering(tmp_path)
    trace = tmp_path / "run.jsonl"
    started = subprocess.run([sys.executable, "gather_agent.py", trace, "start"], cwd=TESTS, env=env, timeout=120,
                             capture_output=True, text=True)  # fmt: skip
    assert orjson.loads(started.stdout)["state"] == "PAUSED", started.stderr
    drafts = replay(trace).pending["question"]["pick one"]  # type: ignore[index]
    cmd = [HARNESS, "resume", str(trace), "--agent", "gather_agent:make_agent"]
    waiting = subprocess.run(cmd, cwd=TESTS, env=env, capture_output=True, text=True, timeout=120)
    assert waiting.returncode == 3 and "--answer JSON" in waiting.stdout, waiting.stderr
    before = trace.read_bytes()
    done = subprocess.run([*cmd, "--answer", '{"index": 2}'], cwd=TESTS, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith(f"{trace}: DONE, 1 checkpoints"), done.stderr
    assert replay(trace).checkpoints[0].result == {"saved": drafts[2]}
    assert trace.read_bytes().startswith(before)
    calls = (tmp_path / "calls.log").read_bytes().splitlines()
    assert len(calls) == 3  # the drafts were served again, never asked for again


def test_harness_recover_resumes_an_async_agent(tmp_path: Path) -> None:
    from children import kill_at

    env = gathering(tmp_path)
    runs = tmp_path / "runs"
    runs.mkdir()
    child = subprocess.Popen([sys.executable, "gather_agent.py", runs / "killed.jsonl", "start"], cwd=TESTS,
                             env={**env, "GATHER_KILL": "plan", "GATHER_ORDER": "cost,risk,plan"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    kill_at(tmp_path / "in-call", child, "the plan draft's call")
    # the drafts whose answers the killed process recorded (a loaded machine may not have written risk's before the
    # kill: then it was in flight too, and is asked again)
    lines = [orjson.loads(line) for line in (runs / "killed.jsonl").read_bytes().splitlines() if line.endswith(b"}")]
    recorded = [rec["request"]["topic"] for rec in lines if rec["kind"] == "crossing" and rec["boundary"] == "llm"]
    assert "plan" not in recorded and "cost" in recorded
    said = subprocess.run([HARNESS, "recover", runs, "--agent", "gather_agent:make_agent", "--json"], cwd=TESTS,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert said.returncode == 0, said.stdout + said.stderr
    (row,) = orjson.loads(said.stdout)
    assert (row["was"], row["action"], row["state"]) == ("interrupted", "resumed", "PAUSED")
    assert "--answer JSON" in row["detail"]  # the question the resumed run asks: answer it to finish
    topics = [orjson.loads(line)["topic"] for line in (tmp_path / "calls.log").read_bytes().splitlines()]
    again = [topic for topic in ("cost", "risk", "plan") if topic not in recorded]  # in flight at the kill
    assert sorted(topics) == sorted(["cost", "risk", "plan", *again])  # only those again, never a recorded one


# --- startup: the CLI and the package load only what a command needs ---------------------------

# what `harness --help`, `harness show` and `import harness` must not load: the optional extras, the test tools, and
# the asyncio and HTTP machinery they bring (each costs tens of milliseconds at every start)
HEAVY = ("starlette", "uvicorn", "httpx", "syrupy", "pytest", "hypothesis", "ray", "fsspec", "s3fs", "asyncio", "ssl")

LOADED = """
import sys
from harness.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
print("\\nMODULES", *sorted(sys.modules), file=sys.stderr)
"""


def loaded(*argv: Any) -> tuple[str, set[str]]:
    """What a real `harness ARGV` process printed, and the modules it had loaded when it finished."""
    out = subprocess.run([sys.executable, "-c", LOADED, *map(str, argv)], capture_output=True, text=True, timeout=60)
    err, _, modules = out.stderr.rpartition("\nMODULES ")
    assert err == "" and modules, out.stderr
    return out.stdout, set(modules.split())


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY}


def test_help_and_show_load_no_extra_and_no_runtime(tmp_path: Path) -> None:
    printed, modules = loaded("--help")
    assert "Inspect, check and compare" in printed
    assert heavy(modules) == set()
    assert {m for m in modules if m.startswith("harness.")} == {"harness._errors", "harness._version", "harness.cli"}
    trace = run(tmp_path / "run.jsonl")
    printed, modules = loaded("show", trace)
    assert printed.splitlines()[0].split()[:2] == ["1", "header"]  # it did show the trace
    assert heavy(modules) == set()
    assert not any(m.startswith(("harness.runtime", "harness.viewer", "harness.ops")) for m in modules), modules
    assert "importlib.metadata" not in modules  # the version is read only for --version
    printed, modules = loaded("--version")
    assert printed.strip() == f"harness {package.__version__}"


def test_import_harness_is_light_and_every_public_name_still_resolves() -> None:
    code = (
        "import sys, harness; print(*sorted(m for m in sys.modules if m.startswith('harness')))\n"
        "harness.Executor, harness.workflow, harness.rerun  # a sync run's and rerun's code: asyncio only for async\n"
        "print(*sorted(m for m in ('asyncio', 'ssl', 'concurrent.futures') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split("\n")[:2] == ["harness harness._errors harness._version", ""], out
    for name in package.__all__:  # each name the package promises is there, lazily imported
        assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        package.nope  # noqa: B018
    exported = {m: set(n.split(", ")) for m, n in package._LAZY.items()}
    # the TYPE_CHECKING block (what type checkers see) and _LAZY (what runs) name the same things
    tree = ast.parse(Path(package.__file__).read_text())
    seen: dict[str, set[str]] = {}
    for node in ast.walk(tree):  # (the eager ones, _errors and _version, are not lazy)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module not in ("_errors", "_version"):
            names = {a.name if a.asname is None else f"{a.name} as {a.asname}" for a in node.names}
            seen.setdefault(f".{node.module}", set()).update(names)
    assert seen == exported


def test_show_into_a_pipe_closed_early_stops_quietly(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl", n=400)  # more than a pipe holds: show is still writing when it closes
    child = subprocess.Popen([HARNESS, "show", trace], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().split()[:2] == [b"1", b"header"]
    child.stdout.close()  # as `harness show trace | head -1` does
    _, err = child.communicate(timeout=60)
    assert (child.returncode, err) == (0, b"")  # not "read failed: Broken pipe", which blamed the trace


# --- the rules of the project that holds the trace, wherever the command runs ---------------------------------


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A project whose [tool.harness] ignores the goal, holding two runs that differ only in their goal, in a
    package of its own whose pyproject.toml sets no rules (passed by: the project's are the nearest with them)."""
    root = tmp_path / "project"
    (root / "agent" / "runs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n\n[tool.harness]\ngolden_ignore = ["goal"]\n')
    (root / "agent" / "pyproject.toml").write_text('[project]\nname = "agent"\n')
    a, b = root / "agent" / "runs" / "a.jsonl", root / "agent" / "runs" / "b.jsonl"
    for trace, goal in ((a, "the goal of run a"), (b, "the goal of run b")):
        Executor(planner=fixed_plan(steps(1)), tools={"work": counter()}, trace=trace).run(goal)
    (tmp_path / "elsewhere").mkdir()
    return a, b


def test_diff_and_show_read_the_rules_of_the_project_that_holds_the_trace(tmp_path: Path) -> None:
    a, b = project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    done = subprocess.run([HARNESS, "diff", a, b], cwd=elsewhere, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr  # the project ignores the goal: nothing else differs
    shown = subprocess.run([HARNESS, "show", "--width", "1000", a], cwd=elsewhere, capture_output=True, text=True)
    assert shown.returncode == 0 and "<ignored>" in shown.stdout and "the goal of run a" not in shown.stdout
    golden = harness("show", "--golden", a, cwd=elsewhere)
    assert '"goal":"<ignored>"' in golden.stdout and "the goal of run a" not in golden.stdout
    assert "the goal of run a" in harness("show", "--json", a, cwd=elsewhere).stdout  # the record as read: all of it


def test_config_names_the_rules_and_ignore_adds_to_them(tmp_path: Path) -> None:
    a, b = project(tmp_path)
    other = tmp_path / "elsewhere" / "pyproject.toml"
    other.write_text("[tool.harness]\ngolden_ignore = []\n")
    assert harness("diff", a, b, "--config", other, cwd=tmp_path).returncode == 1  # its rules, not the project's
    assert harness("diff", a, b, "--config", other, "--ignore", "goal", cwd=tmp_path).returncode == 0
    shown = harness("show", "--width", "1000", a, "--config", other, "--ignore", "tools", cwd=tmp_path).stdout
    assert "the goal of run a" in shown and 'tools="<ignored>"' in shown and "at-least-once" not in shown
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "a.jsonl").write_bytes(a.read_bytes())
    (loose / "b.jsonl").write_bytes(b.read_bytes())  # outside any project, and run from outside too
    assert harness("diff", loose / "a.jsonl", loose / "b.jsonl", cwd=tmp_path / "elsewhere").returncode == 1
    assert harness("diff", loose / "a.jsonl", loose / "b.jsonl", "--ignore", "goal", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("command", ["diff", "show"])
def test_a_config_that_is_missing_or_sets_no_rules_is_refused_naming_it(tmp_path: Path, command: str) -> None:
    a, b = project(tmp_path)
    traces = [a, b] if command == "diff" else [a]
    bare = tmp_path / "elsewhere" / "pyproject.toml"
    bare.write_text('[project]\nname = "bare"\n')
    for config, problem in ((tmp_path / "nope.toml", "no such file"), (bare, "no [tool.harness] table")):
        out = harness(command, *traces, "--config", config)
        assert out.returncode == 2 and f"{config}: {problem}" in out.stderr and "Traceback" not in out.stderr
        assert out.stdout == ""
