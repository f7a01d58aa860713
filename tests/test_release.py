"""The release: `python -m build` makes an sdist and a wheel that pass `twine check`; the wheel installs and runs.

Offline, as every test: the project's files are copied to a folder of their
own and built there with `--no-isolation` (the test extra brings build,
twine and setuptools). The wheel is installed with `--no-index` into a fresh
virtual environment (by this environment's pip, run by the fresh
interpreter), which finds orjson, the one dependency, through a folder
holding links to this environment's copy: pip sees the dependency met, and
installs nothing else. From there the test runs `harness --version`,
`harness --help` and the main example, outside the source tree.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pip as pip_module

from harness._version import VERSION

ROOT = Path(__file__).resolve().parent.parent


def run(*args: Any, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env or {})}
    out = subprocess.run([*map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-4000:])
    return out


def source(into: Path) -> Path:
    """What the sdist is made of, copied away from the worktree (a build writes its egg-info beside the sources)."""
    into.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, into / name)
    shutil.copytree(ROOT / "harness", into / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def links(into: Path, *paths: Path) -> Path:
    """A folder holding links to paths, and nothing else."""
    into.mkdir()
    for path in paths:
        (into / path.name).symlink_to(path, target_is_directory=True)
    return into


def orjson_only(into: Path) -> Path:
    """A folder holding links to this environment's orjson (package and metadata), and nothing else."""
    package = Path(orjson.__file__).parent
    (metadata,) = Path(package.parent).glob("orjson-*.dist-info")
    return links(into, package, metadata)


def test_the_sdist_and_wheel_build_pass_twine_check_and_the_wheel_installs_and_runs(tmp_path: Path) -> None:
    src, dist = source(tmp_path / "src"), tmp_path / "dist"
    # (--skip-dependency-check: the backend's requirements are this environment's; checking them is two more
    # interpreters importing setuptools)
    run(sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check", "--outdir", dist, src)
    wheel, sdist = dist / f"harness_trace-{VERSION}-py3-none-any.whl", dist / f"harness_trace-{VERSION}.tar.gz"
    assert sorted(dist.iterdir()) == sorted([wheel, sdist])
    checked = run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
    assert checked.stdout.count("PASSED") == 2, checked.stdout
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = email.message_from_bytes(zf.read(f"harness_trace-{VERSION}.dist-info/METADATA"))
    assert {"harness/py.typed", "harness/viewer/static/run.js", "harness/cli.py"} <= names
    assert not any(n.startswith(("tests/", "bench/", "examples/")) for n in names)
    assert (meta["Name"], meta["Version"]) == ("harness-trace", VERSION)
    core = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert [r.split(">")[0].split("<")[0].strip() for r in core] == ["orjson"]  # the core needs orjson alone

    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=False, symlinks=True)
    python = fresh / "bin" / "python"
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    (Path(purelib) / "deps.pth").write_text(f"{orjson_only(tmp_path / 'deps')}\n")
    # this environment's pip, run by the fresh interpreter (what `pip --python` does, less one pip starting)
    # (--no-compile: the runs below compile what they import, not every module)
    pip = {"PYTHONPATH": str(links(tmp_path / "pip", Path(pip_module.__file__).parent))}
    run(python, "-m", "pip", "install", "--no-index", "--no-compile", "--quiet", wheel, env=pip)
    bin_ = fresh / "bin"
    assert run(bin_ / "harness", "--version").stdout == f"harness {VERSION}\n"
    assert "Inspect, check and compare harness traces" in run(bin_ / "harness", "--help").stdout
    where = run(python, "-c", "import harness; print(harness.__file__, harness.__version__)", cwd=tmp_path).stdout
    assert where.split() == [f"{purelib}/harness/__init__.py", VERSION]  # the installed wheel, not the worktree
    trace = tmp_path / "tea.jsonl"
    example = run(python, ROOT / "examples" / "quickstart.py", trace, cwd=tmp_path)
    assert "power cut (SIGKILL)" in example.stdout and "DONE, 4 checkpoints, 1 resume" in example.stdout
    assert orjson.loads(trace.read_bytes().split(b"\n", 1)[0])["env"]["harness"] == VERSION
    assert "sealed and intact" in run(bin_ / "harness", "verify", trace).stdout


def test_the_changelog_describes_the_version_pyproject_gives() -> None:
    assert VERSION == "0.4.0"  # (harness/_version.py; the wheel above carries it as its metadata)
    assert (ROOT / "CHANGELOG.md").read_text().split("\n## ", 2)[1].startswith(f"{VERSION} ")
