"""The examples of the README and of every page of the docs run as written, and print what the docs say they print.

Every ```python block of README.md and of docs/**/*.md (indented ones in a list too) runs alone, as its own process
(forked from a zygote that imported harness once), in a fresh folder: it must exit 0 and print nothing on stderr,
not even a warning. When a ```text block follows it
directly (one blank line between), that is its output, compared line for line.

Two markers, each an HTML comment on the line right above the block (neither GitHub nor the site shows it):

- `<!-- fragment: WHY -->`: the block does not run alone (arguments left out, a bucket, a live model), and says why;
- `<!-- given: FILE -->`: the block reads FILE, which the test makes first (GIVEN says what each one is).

A block with neither runs; a marker that names no reason or an unknown file fails.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent

import pytest
from children import Zygote

import harness

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


# The examples run in processes forked from a zygote (tests/zygote.py) that imported harness's public modules
# once (a third of a second that every example would pay again): each child runs its example as `python -c`
# does, in a fresh __main__, in its folder.
EXAMPLES = Zygote(*sorted({f"harness{module}" for module, _ in harness._WHERE.values()}))


def run(code: str, cwd: Path) -> str:
    """What the example printed; it exited 0 and wrote nothing on stderr."""
    child = EXAMPLES.Popen(
        [sys.executable, "-c", code], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = child.communicate(timeout=60)  # a hang guard, not a timing assertion
    finally:
        child.kill()
    assert child.returncode == 0, f"exit status {child.returncode}: {err.decode()}"
    assert err == b""  # no warning either
    return str(out.decode())


def test_importing_harness_and_its_public_names_warns_nothing() -> None:
    """What the zygote imports for the examples, in a fresh interpreter: nothing on stderr (a child would not
    show a warning its zygote printed)."""
    names = "; ".join(f"harness.{name}" for name in sorted(harness._WHERE))
    done = subprocess.run([sys.executable, "-c", f"import harness; {names}"], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")


def test_every_python_block_is_found() -> None:
    """The pattern above sees every ```python fence of every page: none slips past the test unrun."""
    for page in PAGES:
        fences = len(re.findall(r"^[ \t]*```python$", page.read_text(encoding="utf-8"), re.M))
        assert fences == len(examples(page)), f"{page}: a ```python block the test cannot read (its closing fence?)"


@pytest.mark.parametrize("example", [e for e in ALL if e.marker != "fragment"], ids=lambda e: e.id)
def test_the_example_runs_and_prints_what_the_docs_show(tmp_path: Path, example: Example) -> None:
    if example.marker == "given":
        assert example.what in GIVEN, f"{example.id}: no such given file {example.what!r} (tests/test_readme.py)"
        GIVEN[example.what](tmp_path, example.what)
    else:
        assert example.marker is None, f"{example.id}: unknown marker {example.marker!r}: fragment or given"
    stdout = run(example.code, tmp_path)
    if example.output is not None:
        assert stdout == example.output, f"{example.id}: the example prints otherwise than its ```text block"


@pytest.mark.parametrize("example", [e for e in ALL if e.marker == "fragment"], ids=lambda e: e.id)
def test_a_fragment_says_why_it_does_not_run(example: Example) -> None:
    assert example.what and len(example.what.split()) >= 2, f"{example.id}: say why the fragment cannot run"
    assert example.output is None, f"{example.id}: a fragment shows an output nothing checks"
    compile(example.code, example.id, "exec")  # still Python: a fragment is cut short, never misspelt


def test_the_core_example_runs_and_replays(tmp_path: Path) -> None:
    (core,) = [e for e in examples(README) if "ex.run(" in e.code]
    stdout = run(core.code, tmp_path)
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
