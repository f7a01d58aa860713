"""`harness serve`: a local web viewer for a runs folder, live while runs are written.

`serve()` binds 127.0.0.1 by default, prints the URL and runs uvicorn
until Ctrl-C, then stops cleanly (open live streams end at once).
`create_app()` returns the Starlette application itself (for tests, or to
mount it elsewhere). Both need the optional `web` extra
(`pip install 'harness-trace[web]'`: Starlette and uvicorn); without it they raise
`MissingExtra`, which says what to install. Importing this package needs
nothing beyond harness itself.

The viewer only reads: traces are opened read-only, and a fork from the
page writes a new trace through `harness.fork`. Pages, API and guarantees
are listed in `_app`; the pages are plain JS and CSS shipped in `static/`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from typing import TYPE_CHECKING, TextIO

from .._errors import HarnessError

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["MissingExtra", "create_app", "serve"]

INSTALL = "pip install 'harness-trace[web]'"


class MissingExtra(HarnessError):
    """A feature needs an optional dependency that is not installed."""

    def __init__(self, what: str, missing: str, install: str = INSTALL):
        super().__init__(f"{what} needs {missing}, which is not installed: {install}")
        self.what, self.missing, self.install = what, missing, install


def _require() -> None:
    for module in ("starlette", "uvicorn"):
        try:
            __import__(module)
        except ImportError:
            raise MissingExtra("harness serve", module) from None


def create_app(
    folder: str | os.PathLike[str] | None = None, *, agent: str | None = None, hosts: list[str] | None = None
) -> Starlette:
    """The viewer's application for runs folder `folder` ($HARNESS_RUNS_DIR, else ./runs).

    `agent` (`module:factory`, as `harness fork --agent`) turns on fork from the page.
    `hosts`: the Host header values accepted (default: the loopback names, against DNS rebinding).
    """
    _require()
    from .. import _runs
    from ._app import create_app as make

    path = _runs.runs_dir(folder)
    if not os.path.isdir(path):
        raise HarnessError(f"{path}: no such runs folder (give RUNS_DIR, or set HARNESS_RUNS_DIR)")
    if agent is not None:
        from .._rerun import load_agent

        load_agent(agent)  # a wrong --agent fails now, not at the first fork
    return make(path, agent=agent, hosts=hosts)


def serve(
    folder: str | os.PathLike[str] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    agent: str | None = None,
    out: TextIO | None = None,
) -> None:
    """Serve the viewer until Ctrl-C (SIGINT) or SIGTERM. Port 0 picks a free port; the URL printed says which."""
    _require()
    import uvicorn

    loopback = host in ("127.0.0.1", "localhost", "::1")
    app = create_app(folder, agent=agent, hosts=None if loopback else ["*"])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise HarnessError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3, lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    app.state.viewer.stopping = lambda: server.should_exit
    # read the two ends of every trace once now, so the first look at the runs page finds them read
    threading.Thread(target=_warm, args=(app,), daemon=True, name="harness-serve-warm").start()
    name = f"[{host}]" if ":" in host else host
    where = app.state.viewer.folder
    print(
        f"harness serve: http://{name}:{bound}/  (runs in {where}; Ctrl-C to stop)", file=out or sys.stdout, flush=True
    )
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then raises the Ctrl-C it caught again
        pass
    finally:
        sock.close()
    print("harness serve: stopped", file=out or sys.stdout, flush=True)


def _warm(app: Starlette) -> None:
    with contextlib.suppress(HarnessError, OSError):  # the page will say what is wrong when it asks
        app.state.viewer.listing.runs()
