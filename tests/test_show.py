"""`harness show`: a trace as a timeline, streamed, whole values wrapped, and shown up to any damage."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import in_process
import orjson
import pytest
import refund_agent

import harness
from harness.cli import main
from harness.review.normalize import render
from harness.testing import read_records

harness_cli = in_process.harness  # `harness ARGS`, the console script's main() called in this process


@pytest.fixture
def parent(tmp_path: Path) -> Path:
    path = tmp_path / "parent.jsonl"
    refund_agent.record(path)
    return path


def records_shown(stdout: str) -> list[int]:
    """The seq of every record a timeline shows (its first line starts with the seq; wrapped lines do not)."""
    return [int(line.split()[0]) for line in stdout.splitlines() if line[:6].strip().isdigit()]


def test_a_long_prompt_is_wrapped_at_the_width_and_shown_whole(parent: Path) -> None:
    out = harness_cli("show", "--width", 80, parent)
    assert out.returncode == 0 and out.stderr == ""
    lines = out.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    assert records_shown(out.stdout) == [r["seq"] for r in read_records(parent)]
    llm = next(r for r in read_records(parent) if r["kind"] == "crossing")
    at = lines.index(f"{llm['seq']:>6}  crossing llm")
    block = []  # the record's lines, up to the next record
    for line in lines[at + 1 :]:
        if line[:6].strip():
            break
        block.append(line.strip())
    request = next(n for n, line in enumerate(block) if line.startswith("request="))
    response = next(n for n, line in enumerate(block) if line.startswith("response="))
    shown = " ".join(block[request:response])  # the wrap breaks at spaces, or inside a long word
    words = orjson.dumps(llm["request"]).decode().split(" ")
    assert all(word in shown for word in words)  # nothing cut: every word of the prompt is there
    assert shown.count("You are a refund agent") == 3
    assert block[response] == 'response="refund"'


def test_the_width_defaults_to_the_terminal_and_else_100(
    parent: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["show", str(parent)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert 90 < max(map(len, lines)) <= 100  # captured output is no terminal: 100 columns
    wide = harness_cli("show", parent, env={**os.environ, "COLUMNS": "3000"})
    assert all(line[:6].strip() for line in wide.stdout.splitlines())  # 3000 columns: no record wraps


def test_now_readings_are_shown_as_utc_times(tmp_path: Path) -> None:
    def planner(goal: Any, done: list[Any]) -> harness.Step | None:
        return None if done else harness.Step("stamp", "work", {"at": harness.now().isoformat()})

    trace = tmp_path / "run.jsonl"
    harness.Executor(planner=planner, tools={"work": lambda at: at}, trace=trace).run("g")
    now = next(r for r in read_records(trace) if r.get("boundary") == "now")
    out = harness_cli("show", "--width", 100, trace)
    line = next(line for line in out.stdout.splitlines() if line.split()[:3] == [str(now["seq"]), "crossing", "now"])
    assert line.split()[-1] == f"now={datetime.fromtimestamp(now['response'], UTC).isoformat()}"


def test_a_fork_shows_its_lineage(parent: Path, tmp_path: Path) -> None:
    decision = next(c for c in harness.replay(parent).crossings if c.kind == "llm")
    child = tmp_path / "child.jsonl"
    planner, tools, _ = refund_agent.make_agent()
    fork = harness.fork(parent, at=decision.seq, value="deny", planner=planner, tools=tools, out=child)
    out = harness_cli("show", "--width", 1000, child)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f'parent="{fork.parent}"' in lines[0] and f"branch={decision.seq}" in lines[0]
    marks = {int(line.split()[0]): line for line in lines[1:]}
    assert all("  served" in marks[seq] for seq in range(2, decision.seq))
    assert "  answered  " in marks[decision.seq] and 'response="deny"' in marks[decision.seq]
    assert all("  live" in marks[seq] for seq in range(decision.seq + 1, len(lines) + 1))
    assert "reused" not in out.stdout and "mutated" not in out.stdout  # labels, not the raw fields
    again = harness.rerun(parent, planner=planner, tools=tools, out=tmp_path / "rerun.jsonl")
    shown = harness_cli("show", "--width", 1000, tmp_path / "rerun.jsonl").stdout.splitlines()
    assert again.live_calls == 0 and all(line.endswith("served") or "  served  " in line for line in shown[1:])


def test_a_corrupt_trace_is_shown_up_to_its_damage_then_the_corruption(parent: Path) -> None:
    lines = parent.read_bytes().split(b"\n")
    lines[4] = lines[4].replace(b'"step":0', b'"step":7', 1)  # line 5 changed, its checksum left as it was
    parent.write_bytes(b"\n".join(lines))
    out = harness_cli("show", "--width", 1000, parent)
    assert out.returncode == 1
    assert records_shown(out.stdout) == [1, 2, 3, 4]
    assert out.stderr.splitlines() == [
        f"{parent}:5: checksum (seq 5): the line's bytes do not match its checksum (edited, moved or damaged)"
    ]
    as_json = harness_cli("show", "--json", parent)
    assert as_json.returncode == 1 and as_json.stdout.encode() == b"\n".join(lines[:4]) + b"\n"
    golden = harness_cli("show", "--golden", parent)  # the git textconv refuses the file: nothing on stdout
    assert golden.returncode == 1 and golden.stdout == "" and "checksum" in golden.stderr
    record = harness_cli("show", "--record", 3, parent)
    assert record.returncode == 1 and orjson.loads(record.stdout)["seq"] == 3


def test_a_file_that_is_no_trace_exits_2(tmp_path: Path) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text("hello\n")
    out = harness_cli("show", notes)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.startswith(f"{notes}:1: not-a-trace")
    assert "Traceback" not in out.stderr


def test_json_prints_each_record_exactly_as_read(parent: Path) -> None:
    out = harness_cli("show", "--json", parent)
    assert out.returncode == 0 and out.stdout.encode() == parent.read_bytes()
    parent.write_bytes(parent.read_bytes() + b'{"seq":99,"kind":"tr')  # a torn tail is no record
    assert harness_cli("show", "--json", parent).stdout.encode() == parent.read_bytes().rpartition(b"\n")[0] + b"\n"


def test_record_prints_one_record_whole_and_indented(parent: Path, capsys: pytest.CaptureFixture[str]) -> None:
    llm = next(r for r in read_records(parent) if r["kind"] == "crossing")
    assert main(["show", "--record", str(llm["seq"]), str(parent)]) == 0
    out = capsys.readouterr().out
    assert orjson.loads(out) == llm and out.startswith('{\n  "seq": ')
    assert main(["show", "--record", "999", str(parent)]) == 2
    err = capsys.readouterr().err
    assert err == f"harness show: {parent}: no record with seq 999 (it holds seq 1 to {len(read_records(parent))})\n"


def test_golden_is_byte_identical_to_render(parent: Path) -> None:
    out = harness_cli("show", "--golden", parent)
    assert out.returncode == 0 and out.stdout == render(harness.normalize(parent))
    assert out.stdout == render(read_records(parent))
