"""The pinned test environment: requirements/test.lock (written by `.ci/lock`, installed by the README's second
command) pins every requirement of the test extra at a version its range admits, and the frameworks whose
serialization goldens record have ranges bounded above, the same wherever pyproject.toml names them (.ci/compat
tests both ends of each range; .ci/bump raises the bounds)."""

from __future__ import annotations

import re
import runpy
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "test.lock"
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
FRAMEWORKS = set(runpy.run_path(str(ROOT / ".ci" / "frameworks.py"))["FRAMEWORKS"])  # what .ci/compat tests


def pins(text: str) -> dict[str, set[Version]]:
    """The lock's versions by name (a universal lock may pin two versions of one package, each under a marker)."""
    found: dict[str, set[Version]] = {}
    for m in re.finditer(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", text, re.M):
        found.setdefault(canonicalize_name(m[1]), set()).add(Version(m[2]))
    return found


def behind(requirements: list[str], locked: dict[str, set[Version]]) -> list[str]:
    """The requirements the lock does not meet: not pinned, or pinned at a version outside the range."""
    out = []
    for text in requirements:
        r = Requirement(text)
        versions = locked.get(canonicalize_name(r.name), set())
        if not any(r.specifier.contains(v, prereleases=True) for v in versions):
            out.append(f"{text}: the lock has {sorted(map(str, versions)) or 'no pin'}")
    return out


def test_the_lock_pins_every_test_requirement_within_its_range() -> None:
    assert behind(EXTRAS["test"], pins(LOCK.read_text(encoding="utf-8"))) == [], "run .ci/lock"


def test_a_requirement_the_lock_does_not_meet_is_found() -> None:
    locked = pins("mcp==2.3.0\n    # via harness-trace (pyproject.toml)\nsix==1.16.0 ; python_version < '4'\n")
    assert behind(["mcp>=2,<2.4", "six>=1.16", "mcp>=2.4", "httpx>=0.27"], locked) == [
        "mcp>=2.4: the lock has ['2.3.0']", "httpx>=0.27: the lock has no pin"
    ]  # fmt: skip


def test_each_framework_has_one_range_bounded_above_wherever_it_is_named() -> None:
    ranges: dict[str, set[str]] = {}
    for requirements in EXTRAS.values():
        for r in map(Requirement, requirements):
            if r.name in FRAMEWORKS:
                ranges.setdefault(r.name, set()).add(str(r.specifier))
    assert set(ranges) == FRAMEWORKS
    for name, specs in ranges.items():
        assert len(specs) == 1, f"{name} has ranges {specs}: one range, raised by .ci/bump in every place"
        (spec,) = specs
        assert ">=" in spec and "<" in spec.replace("<=", ""), f"{name}{spec}: a lower and an upper bound"


def test_bump_raises_every_bound_of_a_framework_to_admit_its_newest_release_and_never_lowers_one() -> None:
    bump = runpy.run_path(str(ROOT / ".ci" / "bump"))
    text = (
        'pydantic-ai = ["pydantic-ai-slim>=2.68,<2.69"]\nmcp = ["mcp>=2,<2.4"]\n'
        'test = ["pydantic-ai-slim[openai,mcp]>=2.68,<2.69", "mcp>=2,<2.4", "mcpx>=1,<2.4"]\n'
    )
    out, moved = bump["raised"](text, {"pydantic-ai-slim": "2.78.1", "mcp": "2.3.0"})
    assert moved == {"pydantic-ai-slim": ("2.69", "2.79")}  # mcp 2.3.0 is admitted already: its bound stays
    assert out == text.replace("<2.69", "<2.79")  # in each place; mcpx is another package
    assert bump["raised"](text, {"mcp": "3.0.0"})[0].count("mcp>=2,<3.1") == 2
    assert bump["bound"]("0.24.0") == "0.25" and not bump["admits"]("2.10", "2.10.0") and bump["admits"]("2.10", "2.9")


def test_compat_installs_each_framework_at_its_lower_bound_and_at_its_range() -> None:
    compat = runpy.run_path(str(ROOT / ".ci" / "compat"))
    lowest, newest = compat["requirements"]("lowest"), compat["requirements"]("newest")
    test = {Requirement(r).name: r for r in EXTRAS["test"]}
    for name in FRAMEWORKS:
        (low,) = [Requirement(r) for r in lowest if Requirement(r).name == name]
        floor = next(s.version for s in Requirement(test[name]).specifier if s.operator == ">=")
        assert str(low.specifier) == f"=={floor}" and low.extras == Requirement(test[name]).extras
        assert test[name] in newest
    tools = set(lowest) & set(newest)  # the same at both ends, at the test extra's ranges: only the frameworks move
    assert len(tools) == len(lowest) - len(FRAMEWORKS) and tools <= set(EXTRAS["test"])
