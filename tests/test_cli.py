"""`harness show`, `harness replay` and `harness diff`, run as the installed console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness import Executor, ToolError, diff, normalize
from harness._normalize import render
from harness.testing import ScriptedTool, counter, fixed_plan, read_records, steps, write_trace

HARNESS = shutil.which("harness") or str(Path(sys.executable).parent / "harness")


def harness(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARNESS, *map(str, args)], capture_output=True, text=True, timeout=60)


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
    assert lines[5].split() == ["6", "checkpoint,", "step", "0", '"step-0"', 'result={"i":0}']
    assert lines[-1].split()[:4] == [str(len(lines)), "PLAN", "->", "DONE"]


def test_show_names_a_torn_tail(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl")
    trace.write_bytes(trace.read_bytes() + b'{"seq":99,"kind":"tra')
    out = harness("show", trace)
    assert out.returncode == 0
    assert out.stdout.splitlines()[-1].strip() == "(torn tail: an unfinished last line, not part of the run)"


def test_show_golden_prints_the_normalized_view_and_is_stable_on_its_own_output(tmp_path: Path) -> None:
    trace = run(tmp_path / "run.jsonl")
    out = harness("show", "--golden", trace)
    assert out.returncode == 0
    assert out.stdout == render(normalize(trace))
    assert out.stdout.splitlines()[0] == '{"format":"harness-golden","version":1}'
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
    assert data["transitions"] == sum(r["kind"] == "transition" for r in records)


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
        "first difference at seq 9: transition ACT -> PLAN, step 1, attempt 1 inserted"
        " (3 changed, 2 inserted, 0 removed)"
    )
    assert different.stdout == diff(a, c).text(limit=None)

    as_json = harness("diff", "--format", "json", a, c)
    assert as_json.returncode == 1
    assert orjson.loads(as_json.stdout) == orjson.loads(orjson.dumps(diff(a, c).as_json()))
    assert orjson.loads(harness("diff", "--format", "json", a, b).stdout)["equal"] is True

    md = harness("diff", "--format", "markdown", a, c)
    assert md.returncode == 1
    assert md.stdout.startswith(f"**Traces differ**: `{a}` → `{c}`: 3 changed, 2 inserted, 0 removed.")
    assert "| inserted |  | 9 | transition ACT -> PLAN, step 1, attempt 1 |" in md.stdout


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
    calls = [(("show", bad), replay_code), (("replay", bad), replay_code), (("diff", good, bad), 2), (("diff", bad, good), 2)]
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
