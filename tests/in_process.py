"""`harness ARGS` as the installed console script runs it, called in this process.

The console script is `harness.cli:main` (pyproject.toml, [project.scripts]): it calls main() and exits with
what main() returns. `harness()` here does the same in the test's own process, and returns what a subprocess
would: the exit code, stdout and stderr. It saves a fresh interpreter, and its imports, on every command;
tests whose point is the process itself (a pipe closed early, what a start loads, an agent module imported
from the working directory, a kill) still start one.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from harness.cli import main


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """os.environ as `env` (the whole environment, as subprocess's env= is) for the length of the block."""
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _imports_forgotten(cwd: Path) -> Iterator[None]:
    """What the command did to sys.path undone, and the modules it imported from cwd (an agent named by
    --agent) forgotten: a process would have ended, and the next test's module of that name is its own."""
    path, before = list(sys.path), set(sys.modules)
    try:
        yield
    finally:
        sys.path[:] = path
        for name in set(sys.modules) - before:
            if name.partition(".")[0] == "harness":  # harness itself stays (an editable install lives in a clone,
                continue  # which may be cwd): a second copy of its modules would split its state and classes
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(cwd) + os.sep):
                del sys.modules[name]


def harness(*args: Any, cwd: str | Path | None = None, env: Mapping[str, str] | None = None) -> Any:
    """`harness ARGS` (in `cwd`, with the environment `env`): a CompletedProcess of its code, stdout and stderr.

    Its streams are text over bytes as a process's are (the CLI writes JSON to sys.stdout.buffer), written
    through so that text and bytes keep their order; stderr escapes what it cannot encode, as Python's does.
    """
    argv = [str(a) for a in args]
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
    with contextlib.ExitStack() as stack:
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(_imports_forgotten(Path.cwd()))
        stack.enter_context(_environment(env))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: --help, a usage error
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    printed = [cast(io.BytesIO, s.buffer).getvalue().decode() for s in (out, err)]
    return subprocess.CompletedProcess(["harness", *argv], code, *printed)
