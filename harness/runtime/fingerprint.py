"""The code fingerprint a new run's header records (`env.code`): which code made the run.

`code_of(modules)` hashes the source files of the modules that hold the
agent (a workflow's function, an Executor's planner), or, when the nearest
`pyproject.toml` above the current directory has `[tool.harness]
fingerprint = [...]`, what that list names: globs of files relative to that
file's folder (`"src/agent/**/*.py"`) and module names (`"agent.tools"`, its
source file; a package, its `__init__.py`). The value is `{"sha256": 16 hex
digits, "files": [...]}`: the digest of each file's path and bytes, in path
order, and the paths, relative to the project's folder (the pyproject's,
else the current directory) when they lie under it. `status(code, cwd)` hashes the
same files as they are now (where the recording ran, else here), so
`harness runs` can say that a run was recorded with other code, and
`harness check` compares it with the code it loaded; a fingerprint is information,
never a reason to refuse anything.

Cost: each key (the modules, the project's setting) is hashed once per
process; a run's start then costs a dict lookup. A module without a source
file (built in, typed at a prompt) adds nothing; with no file at all the
header has no `code`.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import sys
from collections.abc import Iterable
from typing import Any

_GLOB = frozenset("*?[")


def code_of(objects: Iterable[Any]) -> dict[str, Any] | None:
    """The fingerprint of the code of `objects` (functions, callables: their modules), or of the project's list."""
    modules = tuple(sorted({m for m in map(_module_of, objects) if isinstance(m, str)}))
    root, named = _project(os.getcwd())
    return _hashed(root, named or (), modules if named is None else ())


def _module_of(obj: Any) -> Any:
    """The module of a function or a callable object; a partial's is its function's (functools' own is no agent)."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    return getattr(obj, "__module__", None)


def code_of_modules(modules: Iterable[str]) -> dict[str, Any] | None:
    """code_of() for module names (`workflow_agent`, from a header's `module:qualname`)."""
    root, named = _project(os.getcwd())
    return _hashed(root, named or (), tuple(sorted(set(modules))) if named is None else ())


def status(code: Any, cwd: Any = None) -> str | None:
    """`same` or `changed`: a recorded fingerprint against the files it lists as they are now; None for a record
    that holds none, or whose files are found nowhere.

    The files are looked for in the project of `cwd` (the recording's current directory, as its header's `env`
    says: the same checkout), else in the project of the current directory (a checkout elsewhere). A file's
    digest is computed again only when its size or mtime moved.
    """
    if not isinstance(code, dict) or not isinstance(code.get("files"), list):
        return None
    files = [str(f) for f in code["files"]]
    for where in ([cwd] if isinstance(cwd, str) and os.path.isdir(cwd) else []) + [os.getcwd()]:
        root, _ = _project(where)
        stats = []
        for f in files:
            try:
                st = os.stat(os.path.join(root, f))
                stats.append((f, st.st_size, st.st_mtime_ns))
            except OSError:
                stats.append((f, -1, -1))
        if all(size < 0 for _, size, _ in stats):
            continue  # not this project's files
        key = (root, *stats)
        if key not in _status:
            _status[key] = _digest(root, [os.path.join(root, f) for f in files])
        return "same" if _status[key] == code.get("sha256") else "changed"
    return None


_status: dict[tuple[Any, ...], str | None] = {}  # (root, each file's stats) -> the files' digest now


@functools.cache
def _project(cwd: str) -> tuple[str, tuple[str, ...] | None]:
    """(the project's folder, the `[tool.harness] fingerprint` list or None), from the nearest pyproject.toml."""
    here = cwd
    while True:
        candidate = os.path.join(here, "pyproject.toml")
        if os.path.isfile(candidate):
            return here, _setting(candidate)
        parent = os.path.dirname(here)
        if parent == here:
            return cwd, None
        here = parent


def _setting(path: str) -> tuple[str, ...] | None:
    import tomllib  # only when a run starts in a project: the CLI starts without it

    try:
        with open(path, "rb") as f:
            named = tomllib.load(f).get("tool", {}).get("harness", {}).get("fingerprint")
    except (OSError, tomllib.TOMLDecodeError):
        return None  # (a pyproject that cannot be read: the golden rules' reader names it; here, the modules)
    if isinstance(named, str):
        named = [named]
    if not isinstance(named, list) or not named or not all(isinstance(n, str) for n in named):
        return None
    return tuple(named)


@functools.cache
def _hashed(root: str, named: tuple[str, ...], modules: tuple[str, ...]) -> dict[str, Any] | None:
    files: set[str] = set()
    for entry in named:
        if _GLOB & set(entry) or "/" in entry or entry.endswith(".py"):
            files.update(p for p in glob.glob(os.path.join(root, entry), recursive=True) if os.path.isfile(p))
        else:
            modules = (*modules, entry)
    for name in modules:
        source = _source(name)
        if source is not None:
            files.add(source)
    if not files:
        return None
    ordered = sorted(files, key=lambda p: _shown(root, p))
    digest = _digest(root, ordered)
    return None if digest is None else {"sha256": digest, "files": [_shown(root, p) for p in ordered]}


def _source(module: str) -> str | None:
    """The source file of a module: imported already (its __file__), else found without running it."""
    found = sys.modules.get(module)
    path = getattr(found, "__file__", None)
    if path is None and found is None:
        import importlib.util

        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        path = spec.origin if spec is not None else None
    if not isinstance(path, str) or not path.endswith(".py") or not os.path.isfile(path):
        return None
    return os.path.abspath(path)


def _shown(root: str, path: str) -> str:
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def _digest(root: str, paths: list[str]) -> str | None:
    h = hashlib.sha256()
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            data = b"\x00<missing>"  # a file gone: other code than the recorded one
        h.update(_shown(root, path).encode() + b"\x00" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:16] if paths else None
