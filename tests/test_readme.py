"""The examples of the README and of every page of the docs run as written, and print what the docs say they print.

Every ```python block of README.md and of docs/**/*.md (indented ones in a list too) runs alone, as its own process
(forked from a forkserver that imported harness once), in a fresh folder: it must exit 0 and print nothing on stderr,
not even a warning. When a ```text block follows it
directly (one blank line between), that is its output, compared line for line.

Two markers, each an HTML comment on the line right above the block (neither GitHub nor the site shows it):

- `<!-- fragment: WHY -->`: the block does not run alone (arguments left out, a bucket, a live model), and says why;
- `<!-- given: FILE -->`: the block reads FILE, which the test makes first (GIVEN says what each one is).

A block with neither runs; a marker that names no reason or an unknown file fails.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]

# a ```python fence, maybe indented (inside a list item), the marker comment right above it, and the ```text block
# that follows it after one blank line, at the same indent
BLOCK = re.compile(
    r"(?:^[ \t]*<!-- (?P<marker>[a-z]+): (?P<what>[^\n]*?) -->\n)?"
    r"^(?P<indent>[ \t]*)```python\n(?P<code>.*?)^(?P=indent)```\n"
    r"(?:\n(?P=indent)```text\n(?P<out>.*?)^(?P=indent)```)?",
    re.S | re.M,
)


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    code: str
    output: str | None
    marker: str | None
    what: str | None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples(page: Path) -> list[Example]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start("indent")) + 1
        strip = m["indent"]
        code = dedent("".join(s.removeprefix(strip) for s in m["code"].splitlines(keepends=True)))
        out = None if m["out"] is None else "".join(s.removeprefix(strip) for s in m["out"].splitlines(keepends=True))
        found.append(Example(page, line, code, out, m["marker"], m["what"]))
    return found


ALL = [e for page in PAGES for e in examples(page)]


def finished_run(folder: Path, name: str) -> None:
    """A sealed, finished two-step run at folder/name."""
    from harness import Executor
    from harness.testing import fixed_plan, steps

    Executor(planner=fixed_plan(steps(2)), tools={"work": dict}, trace=folder / name).run("given")


GIVEN = {"run.jsonl": finished_run}


# The examples run in processes forked from a forkserver: a fresh interpreter that imported harness's public names
# once (a third of a second that every example would pay again), then forks a child per example. The child runs the
# example as `python -c` does: in a fresh __main__, in its folder, stdout and stderr its own files, an uncaught
# exception a traceback and exit status 1, then the interpreter's usual exit (atexit, threads joined).
FORKSERVER = """
import json, os, signal, sys, types

import harness

for name in harness._WHERE:  # the public names harness imports on first use
    getattr(harness, name)
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        break
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
else:
    sys.exit(0)
signal.alarm(60)  # a hung example dies of SIGALRM: the test sees the signal and never waits forever
os.chdir(job["cwd"])
for fd, path, flags in [(0, os.devnull, os.O_RDONLY), *((fd, job[fd], os.O_WRONLY | os.O_CREAT) for fd in "12")]:
    os.dup2(os.open(path, flags, 0o600), int(fd))
sys.stdin, sys.argv = open(0, closefd=False), ["-c"]
forkserver, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")
exec(compile(job["code"], "<string>", "exec"), vars(sys.modules["__main__"]))
"""


@pytest.fixture(scope="module")
def forkserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    log = tmp_path_factory.mktemp("forkserver") / "stderr"
    with open(log, "w") as stderr:
        server = subprocess.Popen(
            [sys.executable, "-c", FORKSERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    try:
        assert server.stdout and server.stdout.readline() == "ready\n", log.read_text()
        assert log.read_text() == ""  # importing harness warned nothing
        yield server
    finally:
        server.communicate(timeout=60)
    assert server.returncode == 0 and log.read_text() == "", log.read_text()


def run(code: str, cwd: Path, forkserver: subprocess.Popen[str]) -> str:
    """What the example printed; it exited 0 and wrote nothing on stderr."""
    streams = cwd.with_name(f"{cwd.name}-streams")  # beside its folder: the example finds its folder empty
    streams.mkdir()
    out, err = streams / "stdout", streams / "stderr"
    assert forkserver.stdin and forkserver.stdout
    forkserver.stdin.write(json.dumps({"code": code, "cwd": str(cwd), "1": str(out), "2": str(err)}) + "\n")
    forkserver.stdin.flush()
    status = forkserver.stdout.readline()
    assert status.strip() == "0", f"exit status {status.strip() or '(forkserver gone)'}: {err.read_text()}"
    assert err.read_text() == ""  # no warning either
    return out.read_text()


def test_every_python_block_is_found() -> None:
    """The pattern above sees every ```python fence of every page: none slips past the test unrun."""
    for page in PAGES:
        fences = len(re.findall(r"^[ \t]*```python$", page.read_text(encoding="utf-8"), re.M))
        assert fences == len(examples(page)), f"{page}: a ```python block the test cannot read (its closing fence?)"


@pytest.mark.parametrize("example", [e for e in ALL if e.marker != "fragment"], ids=lambda e: e.id)
def test_the_example_runs_and_prints_what_the_docs_show(
    tmp_path: Path, example: Example, forkserver: subprocess.Popen[str]
) -> None:
    if example.marker == "given":
        assert example.what in GIVEN, f"{example.id}: no such given file {example.what!r} (tests/test_readme.py)"
        GIVEN[example.what](tmp_path, example.what)
    else:
        assert example.marker is None, f"{example.id}: unknown marker {example.marker!r}: fragment or given"
    stdout = run(example.code, tmp_path, forkserver)
    if example.output is not None:
        assert stdout == example.output, f"{example.id}: the example prints otherwise than its ```text block"


@pytest.mark.parametrize("example", [e for e in ALL if e.marker == "fragment"], ids=lambda e: e.id)
def test_a_fragment_says_why_it_does_not_run(example: Example) -> None:
    assert example.what and len(example.what.split()) >= 2, f"{example.id}: say why the fragment cannot run"
    assert example.output is None, f"{example.id}: a fragment shows an output nothing checks"
    compile(example.code, example.id, "exec")  # still Python: a fragment is cut short, never misspelt


def test_the_core_example_runs_and_replays(tmp_path: Path, forkserver: subprocess.Popen[str]) -> None:
    (core,) = [e for e in examples(README) if "ex.run(" in e.code]
    stdout = run(core.code, tmp_path, forkserver)
    assert stdout.split() == ["DONE", "2", str(1 + 2 * 4 + 1), "0", "False"]  # state, checkpoints, transitions
    assert (tmp_path / "run.jsonl").exists()


def test_most_examples_run() -> None:
    """Fragments stay the exception: a page of examples that only look right is what this test exists against."""
    ran = [e for e in ALL if e.marker != "fragment"]
    fragments = [e.id for e in ALL if e not in ran]
    assert len(ran) >= 14 and len(ran) > len(fragments), fragments
    assert sum(e.output is not None for e in ran) >= 7  # the examples whose output the docs print


def test_the_docs_install_the_distribution_that_pyproject_names() -> None:
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert name != "harness"  # an unrelated project holds that name on the package index
    for page in PAGES:
        installs = re.findall(r"pip install '?([A-Za-z0-9_.-]+)(?:\[[a-z,-]+\])?'?", page.read_text(encoding="utf-8"))
        from_index = {n for n in installs if not n.startswith((".", "-"))}
        assert from_index <= {name, "uv"}, f"{page}: installs {from_index - {name, 'uv'}}"  # uv: the Quick start's
    readme = re.findall(r"pip install '?([A-Za-z0-9_.-]+)", README.read_text())
    assert name in readme
