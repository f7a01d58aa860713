"""A trace harness 0.3.0 wrote resumes, reruns and checks under 0.4.0, whose redaction reads JSON text inside strings.

0.3.0 redacted a model request holding JSON text with its patterns only, and kept the text as it was spelled;
0.4.0 reads the text as JSON and writes it back compact with the marker in it. A re-execution is matched against
the recording by its redacted request, so a 0.3.0 trace is compared and continued with 0.3.0's redaction
(`Redaction.as_of`, by the header's `env.harness`). The fixture was written by 0.3.0 (tests/legacy_flow.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import legacy_flow

import harness

FIXTURE = Path(__file__).parent / "fixtures" / "v030" / "json_text.jsonl"


def copied(tmp_path: Path) -> Path:
    trace = tmp_path / "run.jsonl"
    shutil.copyfile(FIXTURE, trace)
    return trace


def test_a_030_trace_with_json_text_resumes_reruns_and_checks(tmp_path: Path) -> None:
    trace = copied(tmp_path)
    assert harness.replay(trace).header["env"]["harness"] == "0.3.0"
    again = harness.rerun(trace, workflow=legacy_flow.flow, out=tmp_path / "again.jsonl")
    assert again.equal
    (checked,) = harness.check([trace], workflow=legacy_flow.flow)
    assert checked.status == "ok", checked
    out = legacy_flow.flow.run(trace=trace, resume=True, answer="yes")
    assert out.state == "DONE" and out.result == "found yes"
    assert "sk-legacy" not in trace.read_text()


def test_a_new_run_reads_the_json_text_and_writes_it_compact(tmp_path: Path) -> None:
    trace = tmp_path / "new.jsonl"
    assert legacy_flow.flow.run(trace=trace).state == "PAUSED"
    (crossing,) = harness.replay(trace).crossings
    assert crossing.request["messages"][0]["content"] == '{"query":"ducks","api_key":"[REDACTED]"}'
    assert harness.replay(FIXTURE).crossings[0].request["messages"][0]["content"] == (
        '{"query": "ducks", "api_key": "[REDACTED]"}'  # as 0.3.0 wrote it
    )
