"""Where a run ran: the `env` its header records, and each resume record again.

`VERSION` is harness's own version (harness/_version.py): `harness.__version__`
is this value, so that no module below the `harness` package imports the
package itself for it.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from typing import Any

from .._errors import HarnessError, MissingExtra
from .._version import VERSION


@functools.cache
def _platform() -> str:
    """platform.platform(), as it reads on Linux, without the `uname -p` child it spawns on first use.

    environment() runs while the trace is locked, and a child forked then
    shares the locked descriptor until it execs: a writer killed at that
    moment would leave its lock held by the child for a while.
    """
    libc = "".join(platform.libc_ver())
    parts = [platform.system(), platform.release(), platform.machine(), *(["with", libc] if libc else [])]
    return "-".join(p for p in parts if p)


def environment(entrypoint: str) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": _platform(),
        "cwd": os.getcwd(),
        "entrypoint": entrypoint,
        "harness": VERSION,
    }


def require(dist: str, needs: tuple[int, int], extra: str) -> None:
    """HarnessError unless distribution `dist` is installed at version `needs` or newer (a framework integration's
    check, made before it imports any name of the framework: an older one would fail with a bare ImportError)."""
    from importlib.metadata import PackageNotFoundError, version  # here: a run's start never needs it

    wanted = ".".join(map(str, needs))
    try:
        found = version(dist)
    except PackageNotFoundError:
        raise MissingExtra(f"harness's {extra} integration ({dist} {wanted} or newer)", extra,
                           f"pip install 'harness-trace[{extra}]'") from None  # fmt: skip
    parts = tuple(int(p) for p in re.findall(r"\d+", found)[:2])
    if parts < needs:
        raise HarnessError(
            f"harness's {extra} integration needs {dist} {wanted} or newer, and {found} is installed: "
            f"pip install -U '{dist}>={wanted}'"
        )
