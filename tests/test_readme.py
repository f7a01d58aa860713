"""The README's examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def block_after(heading: str) -> str:
    text = README.read_text()
    section = text[text.index(heading) :]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, f"no python block after {heading!r}"
    return found[1]


def test_the_core_example_runs_and_replays(tmp_path: Path) -> None:
    code = block_after("## The core in one screen")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["DONE", "2", str(1 + 2 * 4 + 1), "0", "False"]  # state, checkpoints, transitions
    assert (tmp_path / "run.jsonl").exists()
