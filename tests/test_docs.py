"""The documentation site builds with `mkdocs build --strict`, and the README stays a front page that agrees with CI.

The build is the real one (mkdocs.yml, Material, mkdocstrings reading the docstrings of the public API), into a
temporary folder: under strict, a link to a page that does not exist, an #anchor no heading makes, a page left out
of the nav, or a docstring mkdocstrings cannot read fails it. A second build, of two pages under the project's
mkdocs.yml with one broken link and one broken anchor, shows that the build does fail on them. The examples of the
pages run in tests/test_readme.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

for name in ("mkdocs", "mkdocstrings", "material"):  # installed? (the build runs in a child: no import here)
    if find_spec(name) is None:
        pytest.skip(f"the docs build needs the docs extra ({name}): pip install -e '.[docs]'", allow_module_level=True)


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(project / "mkdocs.yml"), "-d", str(site)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor, on every build
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)


def test_the_site_builds_strict(tmp_path: Path) -> None:
    out = build(ROOT, tmp_path / "site")
    assert out.returncode == 0, out.stderr
    assert "WARNING" not in out.stderr, out.stderr
    for page in ["index", "getting-started/index", "reference/api/index", "FORMAT/index", "changelog/index"]:
        assert (tmp_path / "site" / f"{page}.html").is_file(), page
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    import harness

    missing = [name for name in harness.__all__ if f'id="harness.{name}"' not in api and name != "__version__"]
    assert not missing, f"public names the API page does not render: {missing}"


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    # the project's mkdocs.yml (its theme, extensions, plugins and validation rules) over a site of two pages:
    # building the real pages again is what the test above does, and not what is tested here
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = re.search(r"^nav:\n(?:[ -].*\n)+", config, re.M)
    assert nav, "mkdocs.yml: no nav section"
    config = config.replace(nav[0], "nav:\n  - Home: index.md\n  - Other: other.md\n")
    (project / "mkdocs.yml").write_text(config, encoding="utf-8")
    (project / "docs" / "other.md").write_text("# Other\n\n## A heading\n", encoding="utf-8")
    (project / "docs" / "index.md").write_text(
        "# Home\n\nSee [the gone page](no-such-page.md) and [a heading](other.md#no-such-heading);"
        " [this heading](other.md#a-heading) and [that page](other.md) are there.\n",
        encoding="utf-8",
    )
    out = build(project, tmp_path / "site")
    assert out.returncode != 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 2, out.stderr  # the two broken links, and nothing else of the copy
    assert "no-such-page.md" in warnings[0] + warnings[1] and "no-such-heading" in warnings[0] + warnings[1]


def quick_start() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Quick start\n") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README: no ```sh block under ## Quick start"
    return [line for line in block[1].splitlines() if line.strip()]


def test_the_quick_start_is_two_commands_light_first() -> None:
    first, second = quick_start()  # exactly two
    install, _, run = first.partition(" && ")
    assert shlex.split(install) == ["pip", "install", "-e", "."], "the first installs the library alone"
    assert run.startswith("python examples/") and (ROOT / shlex.split(run)[1]).is_file()
    *installs, run = second.split(" && ")
    assert shlex.split(installs[-1])[-4:] == ["-r", "requirements/test.lock", "-e", ".[test]"], (
        "the second installs the test extras at the versions the lock pins"
    )
    assert shlex.split(run)[:3] == ["python", "-m", "pytest"], "the second runs the whole suite"


def test_ci_runs_exactly_the_quick_start() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    pip_onward = [s for s in script if s.startswith(("pip ", "python "))]
    compat = ["python .ci/compat"]  # then the framework tests at both ends of their ranges (docs/development.md)
    assert pip_onward == quick_start() + compat, ".ci/run and the README's Quick start must run the same commands"
    assert script[-3:] == quick_start() + compat, ".ci/run ends with the two commands and the compat job"
    assert "python .ci/compat" in README.read_text(encoding="utf-8"), "the README says CI runs the compat job"


def test_the_readme_is_a_front_page_whose_links_lead_somewhere() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail to a page of docs/"
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", "\n".join(lines)):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_every_cli_command_is_in_the_cli_reference() -> None:
    from harness.cli import COMMANDS

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    missing = [name for name in COMMANDS if f"| `harness {name}` |" not in page]
    assert not missing, f"docs/reference/cli.md has no row for: {missing}"


def test_every_public_error_is_listed_in_the_api_reference_with_its_one_line() -> None:
    """docs/reference/api.md's Errors section names each exception of harness/_errors.py that a public module
    exports, with the first line of its docstring; the others are the internal ones named here."""
    import inspect

    import harness
    import harness._errors as errors
    import harness.ray
    import harness.viewer

    internal = {
        "Control",
        "RunNotFound",
        "IndexChanged",
        "TooLarge",
    }  # a base of signals; the viewer's 404 and 409; a TraceUnreadable
    public = {
        name
        for module in (harness, harness.ray, harness.viewer)
        for name in getattr(module, "__all__", dir(module))
        if getattr(getattr(module, name), "__module__", None) == "harness._errors"
    }
    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    section = text[text.index("## Errors") :]
    defined = {n: c for n, c in vars(errors).items() if inspect.isclass(c) and c.__module__ == errors.__name__}
    assert set(defined) == public | internal and not public & internal
    for name in sorted(public):
        line = (defined[name].__doc__ or "").strip().splitlines()[0]
        assert re.search(rf"^- `{name}`( \(`harness\.\w+`\))?: {re.escape(line)}$", section, re.M), name


def test_each_cli_row_names_exactly_the_flags_of_its_command() -> None:
    """The flags a row of docs/reference/cli.md names are those the command's argparse takes: none missing (the
    OTLP export's eight flags were), none the command does not know."""
    import argparse

    from harness.cli import COMMANDS

    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    wrong = {}
    for name, (_, setup, _) in COMMANDS.items():
        p = argparse.ArgumentParser(prog=f"harness {name}")
        setup(p)
        flags = {s for a in p._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
        row = next(line for line in page.splitlines() if line.startswith(f"| `harness {name}` |"))
        named = set(re.findall(r"`(--[a-z][a-z0-9-]*)", row))
        if flags != named:
            wrong[name] = {"not in the row": sorted(flags - named), "not a flag": sorted(named - flags)}
    assert not wrong, f"docs/reference/cli.md disagrees with `harness COMMAND --help`: {wrong}"


def test_every_page_is_in_the_nav() -> None:
    """A page of docs/ the nav leaves out is built but reached by no menu (mkdocs only logs it)."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    docs = ROOT / "docs"
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    missing = sorted(p for p in pages if f": {p}" not in config)
    assert not missing, f"mkdocs.yml's nav leaves out: {missing}"
