"""examples/mcp_agent.py, run as a user would: an agent over a real MCP server (examples/shop_server.py, stdio),
killed right after the server refunded, resumed to PAUSED, reconciled, finished with one refund, rerun with the
server gone."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

import harness

if find_spec("mcp") is None:  # the example runs in a child: only whether the SDK is installed, no import here
    pytest.skip("the example needs the mcp extra: pip install -e '.[mcp]'", allow_module_level=True)
ROOT = Path(__file__).resolve().parent.parent


def test_the_example_crashes_pauses_is_reconciled_and_reruns(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_agent.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PAUSED, waiting on mcp.refund" in done.stdout and "equal: True, live calls: 0" in done.stdout
    calls = [json.loads(line) for line in (tmp_path / "shop.log").read_text().splitlines()]
    assert [c["tool"] for c in calls] == ["lookup", "send_email", "refund"]  # each once: none made again
    rep = harness.replay(tmp_path / "support.jsonl")
    assert rep.state == "DONE" and rep.sealed and rep.resumes == 2
    assert calls[1]["key"] == f"{rep.run_id}-1-1"
