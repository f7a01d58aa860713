"""The README's examples run as written, and print what the README says they print.

An example is the first ```python block after a heading; when a ```text block
follows it directly, that is its output, compared line for line.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def example_after(heading: str) -> tuple[str, str | None]:
    """The code of the first python block after heading, and the text block right after it, if any."""
    text = README.read_text()
    section = text[text.index(heading) :]
    found = re.search(r"```python\n(.*?)```\n(?:\n```text\n(.*?)```)?", section, re.S)
    assert found, f"no python block after {heading!r}"
    return found[1], found[2]


def run_example(heading: str, cwd: Path) -> str:
    code, _ = example_after(heading)
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""  # no warning either
    return out.stdout


def test_the_core_example_runs_and_replays(tmp_path: Path) -> None:
    stdout = run_example("## The core in one screen", tmp_path)
    assert stdout.split() == ["DONE", "2", str(1 + 2 * 4 + 1), "0", "False"]  # state, checkpoints, transitions
    assert (tmp_path / "run.jsonl").exists()


@pytest.mark.parametrize(
    "heading",
    [
        "### What the planner sees",
        "## Testing your own agents",
        "## Concurrent runs",
        "### Interrupts: ask a human, wait on the file",
        "## Durable functions",
        "## Tool contracts from anywhere",
        "## Agents built with frameworks",
    ],
)
def test_the_example_prints_what_the_readme_shows(tmp_path: Path, heading: str) -> None:
    shown = example_after(heading)[1]
    assert shown, f"the example after {heading!r} has no ```text block with its output"
    assert run_example(heading, tmp_path) == shown


def test_the_readme_installs_the_distribution_that_pyproject_names() -> None:
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert name != "harness"  # an unrelated project holds that name on the package index
    installs = re.findall(r"pip install '?([A-Za-z0-9_.-]+)(?:\[[a-z,]+\])?'?", README.read_text())
    from_index = [n for n in installs if not n.startswith((".", "-"))]
    assert from_index and set(from_index) == {name}
