"""The benchmark program still runs and writes every figure; no timing is judged here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from harness import Executor, replay

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import count_syncs  # noqa: E402 - bench/ is a top-level folder, not installed
from bench.run import GOAL, KEYS, TOOLS, cut, write_trace  # noqa: E402

PEER_KEYS = (
    "step_fsync_vs_langgraph", "step_fsync_vs_dbos", "step_fsync_vs_burr",
    "workflow_call_vs_langgraph", "workflow_call_vs_dbos", "workflow_resume_vs_langgraph", "workflow_resume_vs_dbos",
    "pydantic_ai_step_vs_dbos", "pydantic_ai_resume_vs_dbos",
)  # null without --peers  # fmt: skip


def test_smoke_run_writes_every_key(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert {"replay_peak_rss_mb", "show_peak_rss_mb", "diff_peak_rss_mb"} <= set(KEYS)  # memory of each reader
    for key in KEYS:
        assert key in figures, key
        assert key in done.stdout, key  # the markdown table names every line too
        value = figures[key]
        if key == "diff_100k_s" and value is None:
            assert "diff" in figures["detail"]  # says why it is missing
            continue
        if key in PEER_KEYS:
            assert value is None, (key, value)  # measured only with --peers
            continue
        if key == "fsyncs_per_step" and value is None:
            assert "strace is not installed" in figures["detail"]["peers"]["fsync_counting"]
            continue
        assert isinstance(value, float) and value > 0, (key, value)
    assert figures["mode"] == "smoke"
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # scratch files are cleaned up


def test_generated_trace_is_valid_and_resumable(tmp_path: Path) -> None:
    """The data every line measures: a valid trace, paused in PLAN, whose prefixes are valid too."""
    full = tmp_path / "full.jsonl"
    n = write_trace(str(full), 600)
    rep = replay(full)
    assert rep.records == n >= 600
    assert rep.state == "PLAN" and not rep.torn_tail
    seqs = {c.seq for c in rep.checkpoints}
    assert len(seqs) == len(rep.checkpoints) > 50
    assert len(rep.crossings) > len(rep.checkpoints)  # tool calls plus model calls
    # the shapes the issue asks for: small args, results of a few hundred bytes
    results = sorted(len(orjson.dumps(c.result)) for c in rep.checkpoints)
    args = sorted(len(orjson.dumps(c.request["args"])) for c in rep.crossings if c.kind == "tool")
    assert 100 <= results[len(results) // 2] <= 600 and args[-1] < 100

    part = tmp_path / "part.jsonl"
    m = cut(str(full), str(part), 200)
    prefix = replay(part)
    assert 200 <= m < n and prefix.records == m and prefix.state == "PLAN"
    assert full.read_bytes().startswith(part.read_bytes())
    # what resume_linearity times: the executor takes the run over and finishes it
    out = Executor(planner=lambda goal, progress: None, tools=TOOLS, trace=part, resume=True).run(GOAL)
    assert out.state == "DONE" and len(out.checkpoints) == len(prefix.checkpoints)


def test_cut_refuses_a_trace_too_short(tmp_path: Path) -> None:
    full = tmp_path / "full.jsonl"
    n = write_trace(str(full), 50)
    with pytest.raises(ValueError, match="no step end"):
        cut(str(full), str(tmp_path / "part.jsonl"), n + 1)


def test_peers_option_without_the_peers_says_what_to_install(tmp_path: Path) -> None:
    """--peers where LangGraph, DBOS and Burr cannot be imported: exit 2 at once, naming the extra to install."""
    hide = "import os, runpy, sys; sys.modules.update(langgraph=None, dbos=None, burr=None); sys.argv = sys.argv[1:]; "
    hide += "sys.path.insert(0, os.path.dirname(sys.argv[0])); runpy.run_path(sys.argv[0], run_name='__main__')"
    done = subprocess.run(
        [sys.executable, "-c", hide, str(ROOT / "bench" / "run.py"), "--smoke", "--peers", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "pip install -e '.[peers]'" in done.stderr, done.stderr
    assert "burr, dbos, langgraph missing" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # refused before measuring anything


def test_peers_bench_runs_crashes_and_resumes_harness(tmp_path: Path) -> None:
    """bench/peers.py's machinery on the harness variants (no peer needed): each run child dies after N steps as a
    crash would, the resume child finishes with nothing redone, and bytes (and syncs, under strace) are counted.
    The floor (the workflow's records and syncs with nothing of harness) runs the same way."""
    out = tmp_path / "peers.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peers.py"), "--smoke",
         "--only", "harness-flush,harness-fsync,sync-floor", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    variants = figures["detail"]["variants"]
    assert list(variants) == ["harness-flush", "harness-fsync", "sync-floor"]
    for name, got in variants.items():
        assert got["steps_redone_on_resume"]["max"] == 0, name  # a checkpointed step is never run again
        assert got["bytes_per_step"] > 200, name  # at least the ~290-byte result, stored
        assert got["step_us_wall"]["median"] > 0 and got["resume_ms_wall"]["median"] > 0, name
    assert figures["bytes_per_step"] == variants["harness-fsync"]["bytes_per_step"]
    assert figures["step_fsync_vs_langgraph"] is None  # no peer was run
    if shutil.which("strace"):
        assert variants["harness-flush"]["fsyncs_per_step"] == 0  # flush mode syncs nothing while steps run
        assert variants["harness-fsync"]["fsyncs_per_step"] > 0
        assert figures["fsyncs_per_step"] == variants["harness-fsync"]["fsyncs_per_step"]
        assert variants["sync-floor"]["fsyncs_per_step"] == 1  # one a round: fsync mode's sync point, alone
    assert [p.name for p in tmp_path.iterdir()] == ["peers.json"]  # scratch files are cleaned up


def test_count_syncs_counts_only_between_the_markers(tmp_path: Path) -> None:
    """The strace log parser: setup and teardown are not counted, a call split over two lines counts once."""
    log = tmp_path / "trace.strace"
    log.write_text(
        '10 fsync(3)                     = 0\n'  # setup: before any marker
        '10 statfs("/d/.peers-mark-run-begin", 0x7f) = -1 ENOENT (No such file or directory)\n'
        '10 fdatasync(4)                 = 0\n'
        '10 statfs("/d/.peers-mark-run-steady", 0x7f) = -1 ENOENT (No such file or directory)\n'
        '11 fdatasync(4 <unfinished ...>\n'
        '10 fsync(5)                     = 0\n'
        '11 <... fdatasync resumed>)     = 0\n'
        '10 sync_file_range(4, 0, 0, 2)  = 0\n'
        '10 statfs("/d/.peers-mark-run-end", 0x7f) = -1 ENOENT (No such file or directory)\n'
        '10 fsync(6)                     = 0\n'  # after the end: exit
    )  # fmt: skip
    assert count_syncs(str(log)) == {"run-begin": 1, "run-steady": 3}


def test_the_otlp_bench_runs_and_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "otlp.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "otlp.py"), "--smoke", "--json", str(out), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["spans_per_run"] == 21 and figures["runs"] == 100  # a root, 10 model calls, 10 tool calls
    for key in (
        "otlp_export_spans_per_s",
        "otlp_export_checked_spans_per_s",
        "cost_runs_per_s",
        "otlp_export_vs_replay",
    ):
        assert figures[key] > 0 and key in done.stdout, key
    assert [p.name for p in tmp_path.iterdir()] == ["otlp.json"]  # scratch files are cleaned up
