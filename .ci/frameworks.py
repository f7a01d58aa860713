"""The frameworks whose serialization a golden records, and their supported ranges as pyproject.toml states them.

.ci/compat installs each framework at the lowest and at the highest version its range admits; .ci/bump raises
the upper bounds. Both read the ranges here, from the test extra, so that pyproject.toml is the one place they
are written. Standard library only: these scripts run before anything is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
FRAMEWORKS = ("pydantic-ai-slim", "openai-agents", "mcp")
# what the framework tests need besides the frameworks and harness itself, at the test extra's ranges
TOOLS = ("pytest", "pytest-xdist", "syrupy", "hypothesis", "httpx", "openai")
# the framework doors' tests, and the golden tests (goldens of plain runs: the baseline the frameworks' must match)
TESTS = (
    "tests/test_frameworks.py", "tests/test_frameworks_crash.py", "tests/test_example_frameworks.py",
    "tests/test_mcp.py", "tests/test_example_mcp.py", "tests/test_goldens.py", "tests/test_example_workflow.py",
)  # fmt: skip
_REQ = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?P<extras>\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*(?P<marker>;.*)?$")


@dataclass(frozen=True)
class Requirement:
    """One requirement string of pyproject.toml, split: `pydantic-ai-slim[openai,mcp]>=2.68,<2.69`."""

    name: str
    extras: str  # "[openai,mcp]" or ""
    spec: str  # ">=2.68,<2.69"

    @classmethod
    def parse(cls, text: str) -> Requirement:
        m = _REQ.match(text.strip())
        if m is None or m["marker"]:
            raise SystemExit(f"pyproject.toml: cannot read the requirement {text!r} (no markers here)")
        return cls(m["name"].lower(), m["extras"] or "", m["spec"].replace(" ", ""))

    @property
    def lower(self) -> str:
        """The lower bound (`>=2.68` gives 2.68); a framework without one has no oldest version to test."""
        m = re.search(r">=([0-9][0-9.]*)", self.spec)
        if m is None:
            raise SystemExit(f"pyproject.toml: {self.name} has no lower bound (>=): nothing says what is oldest")
        return m[1]

    @property
    def upper(self) -> str | None:
        m = re.search(r"<([0-9][0-9.]*)", self.spec)
        return m[1] if m else None

    def at(self, spec: str) -> str:
        return f"{self.name}{self.extras}{spec}"

    def __str__(self) -> str:
        return self.at(self.spec)


def test_extra() -> dict[str, Requirement]:
    """The test extra's requirements by name."""
    extras = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return {r.name: r for r in map(Requirement.parse, extras["test"])}


def uv() -> list[str]:
    """uv as this Python has it (the README's second command installs it so), or the one on PATH."""
    probe = subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True, check=False)
    if probe.returncode == 0:
        return [sys.executable, "-m", "uv"]
    found = shutil.which("uv")
    if found is None:
        raise SystemExit("uv is not installed: python -m pip install uv")
    return [found]
