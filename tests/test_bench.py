"""The benchmark program still runs and writes every figure; no timing is judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from harness import Executor, replay

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import GOAL, KEYS, TOOLS, cut, write_trace  # noqa: E402 - bench/ is a top-level folder, not installed


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
