"""examples/pydantic_ai_agent.py and examples/openai_agents_agent.py run as their docstrings say, offline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["pydantic_ai_agent", "openai_agents_agent"])
def test_the_example_records_and_reruns_with_the_model_server_stopped(name: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == [
        "DONE: The forecast says: sunny in Paris.",
        "rerun: equal=True, live calls=0; the tool ran 1 time(s)",
    ]
    assert (tmp_path / "weather.jsonl").exists()
