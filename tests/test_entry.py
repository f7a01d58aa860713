"""Entry points: `--agent module:factory` and `--workflow module:attr`, loaded in one place (runtime/entry.py).

Every way one can be wrong is one line on stderr from the real console
script, exit 2, no traceback, naming the flag, the spec and what failed;
every command that takes one says the same.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.runtime.entry import load_agent, load_workflow

HARNESS = shutil.which("harness") or str(Path(sys.executable).parent / "harness")

MODULES = {
    "good.py": (
        "import harness\n\n\n"
        "@harness.workflow\ndef flow(goal):\n    return goal\n\n\n"
        "NUMBER = 42\nNOTHING = None\nclosure = harness.workflow(lambda goal: goal)\n\n\n"
        "def make_agent():\n    return (lambda goal, progress: None, {}, None)\n\n\n"
        "def make_broken():\n    raise RuntimeError('no API key in the environment')\n\n\n"
        "def make_odd():\n    return 'a planner'\n"
    ),
    "broken.py": "raise RuntimeError('set MY_SETTING first')\n",
    "typo.py": "def flow(goal)\n    return goal\n",
    "needs_dep.py": "import not_installed_dependency\n",
}

CASES = [
    ("--workflow", "good", "expected module:attr"),
    ("--workflow", "nowhere:flow", "cannot import nowhere: no such module"),
    ("--workflow", "broken:flow", "importing broken raised RuntimeError: set MY_SETTING first"),
    ("--workflow", "typo:flow", "importing typo raised SyntaxError"),
    ("--workflow", "needs_dep:flow", "importing needs_dep raised ModuleNotFoundError: No module named "),
    ("--workflow", "good:nope", "good has no workflow or function nope"),
    ("--workflow", "good:NOTHING", "None is not a workflow or a function"),
    ("--workflow", "good:NUMBER", "42 is not a workflow or a function"),
    ("--workflow", "good:closure", "cannot be imported by that name: it is a lambda"),
    ("--agent", "good:nope", "good has no callable nope"),
    ("--agent", "good:NUMBER", "good has no callable NUMBER"),
    ("--agent", "good:make_broken", "make_broken() raised RuntimeError: no API key in the environment"),
    ("--agent", "good:make_odd", "make_odd() must return (planner, tools, verifier)"),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    code = "import good; good.flow.run('g', trace='run.jsonl')"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=120)
    return tmp_path


def said(project: Path, *args: str) -> str:
    r = subprocess.run([HARNESS, *args], cwd=project, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


@pytest.mark.parametrize(("flag", "spec", "problem"), CASES)
def test_a_bad_entry_point_is_one_line_naming_flag_spec_and_what_failed(
    project: Path, flag: str, spec: str, problem: str
) -> None:
    err = said(project, "rerun", "run.jsonl", flag, spec)
    assert f"{flag} {spec!r}: " in err and problem in err, err


@pytest.mark.parametrize(
    "command",
    [
        ["rerun", "run.jsonl"],
        ["resume", "run.jsonl"],
        ["fork", "run.jsonl", "--at", "1", "--set", "1"],
        ["check", "run.jsonl"],
    ],
)
def test_every_command_that_loads_one_says_the_same(project: Path, command: list[str]) -> None:
    err = said(project, *command, "--workflow", "broken:flow")
    assert "--workflow 'broken:flow': importing broken raised RuntimeError: set MY_SETTING first" in err, err


def test_the_error_carries_its_parts(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    with pytest.raises(harness.EntryPointError) as caught:
        load_workflow("nowhere:flow")
    e = caught.value
    assert (e.flag, e.spec, e.module) == ("--workflow", "nowhere:flow", "nowhere") and "no such module" in e.problem
    assert load_workflow("good:flow").name == "good:flow"
    planner, tools, verifier = load_agent("good:make_agent")
    assert callable(planner) and tools == {} and verifier is None
