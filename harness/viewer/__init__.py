"""`harness serve`: a local web viewer for a runs folder, live while runs are written.

`serve()` binds 127.0.0.1 by default, prints the URL and runs uvicorn
until Ctrl-C, then stops cleanly (open live streams end at once). On any
other address it warns that the traces are readable by whoever reaches it
(there is no login), keeps the Host-header check with that address's names,
and refuses `--agent` (anyone could run forks: real tool calls, paid model
calls) unless `allow_remote_fork=True` says every such machine is trusted.
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
import ipaddress
import os
import socket
import sys
import threading
from typing import TYPE_CHECKING, TextIO

from .._errors import HarnessError, MissingExtra, RemoteForkRefused, TraceUnreadable
from ..storage import is_url

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ..review.normalize import Rules

__all__ = ["MissingExtra", "RemoteForkRefused", "create_app", "serve"]

INSTALL = "pip install 'harness-trace[web]'"


WILDCARD = ("0.0.0.0", "::", "")  # every address of this machine


def loopback(host: str) -> bool:
    """Whether `host` is this machine only: `localhost` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_names(host: str) -> list[str]:
    """The Host header values the viewer accepts when it listens on `host` (against DNS rebinding).

    The loopback names always; the address itself; for a wildcard address (0.0.0.0, ::)
    this machine's name, its fully qualified name and their addresses.
    """
    names = ["127.0.0.1", "localhost", "[::1]"]
    wildcard = host in WILDCARD
    if not wildcard:
        names.append(f"[{host}]" if ":" in host else host)
    else:
        for name in {socket.gethostname(), socket.getfqdn()}:
            names.append(name)
            with contextlib.suppress(OSError):
                names.extend(str(i[4][0]) for i in socket.getaddrinfo(name, None) if ":" not in str(i[4][0]))
    return list(dict.fromkeys(n for n in names if n))


def _require() -> None:
    for module in ("starlette", "uvicorn"):
        try:
            __import__(module)
        except ImportError:
            raise MissingExtra(f"harness serve (it imports {module})", "web", INSTALL) from None


def create_app(
    folder: str | os.PathLike[str] | None = None,
    *,
    agent: str | None = None,
    hosts: list[str] | None = None,
    workflow: str | None = None,
    rules: Rules | None = None,
) -> Starlette:
    """The viewer's application for runs folder `folder` ($HARNESS_RUNS_DIR, else ./runs).

    `agent` (`module:factory`, as `harness fork --agent`) or `workflow`
    (`module:attr`, as `harness fork --workflow`) turns on fork from the page.
    `hosts`: the Host header values accepted (default: the loopback names, against DNS rebinding).
    `rules`: what its diffs leave out (default: the `[tool.harness]` of the project holding the folder).
    """
    _require()
    from ..storage import runs_dir
    from ._app import create_app as make

    path = runs_dir(folder)
    if is_url(path):  # a runs URL on object storage: served from a local folder that follows it
        from ..storage.mirror import mirror

        path = mirror(path).folder
    if not os.path.isdir(path):
        problem = "is not a folder" if os.path.exists(path) else "no such runs folder"
        raise TraceUnreadable(str(path), f"{problem} (give RUNS_DIR, or set HARNESS_RUNS_DIR)")
    if agent is not None and workflow is not None:
        raise HarnessError("give --agent or --workflow to fork from the page, not both")
    if agent is not None:
        from ..runtime.entry import load_agent

        load_agent(agent)  # a wrong --agent fails now, not at the first fork
    if workflow is not None:
        from ..runtime.entry import load_workflow

        load_workflow(workflow)
    if rules is None:
        from ..review.normalize import rules_for

        rules = rules_for(path)
    return make(path, agent=agent, hosts=hosts, workflow=workflow, rules=rules)


def serve(
    folder: str | os.PathLike[str] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    agent: str | None = None,
    allow_remote_fork: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
    workflow: str | None = None,
    rules: Rules | None = None,
) -> None:
    """Serve the viewer until Ctrl-C (SIGINT) or SIGTERM. Port 0 picks a free port; the URL printed says which.

    A `host` other than a loopback address prints a warning to `err` (stderr), and with `agent`
    (or `workflow`) raises RemoteForkRefused unless `allow_remote_fork` is true.
    """
    if type(port) is not int or not 0 <= port <= 65535:
        raise HarnessError(f"port {port!r}: a port is a number from 0 to 65535 (0 picks a free one)")
    local = loopback(host)
    if (agent is not None or workflow is not None) and not local and not allow_remote_fork:
        raise RemoteForkRefused(host, port)
    _require()
    import uvicorn

    hosts = host_names(host)
    app = create_app(folder, agent=agent, hosts=hosts, workflow=workflow, rules=rules)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except (OSError, OverflowError) as e:
        sock.close()
        raise HarnessError(f"cannot listen on {host}:{port}: {getattr(e, 'strerror', None) or e}") from None
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3, lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    app.state.viewer.stopping = lambda: server.should_exit
    # read the two ends of every trace once now, so the first look at the runs page finds them read
    threading.Thread(target=_warm, args=(app,), daemon=True, name="harness-serve-warm").start()
    name = socket.gethostname() if host in WILDCARD else f"[{host}]" if ":" in host else host
    where = app.state.viewer.folder
    if not local:
        fork = " and run forks of the agent" if agent is not None or workflow is not None else ""
        print(
            f"harness serve: WARNING: listening on {host}, reachable from other machines; there is no login: "
            f"anyone who reaches it can read every trace in {where}{fork}. "
            f"Host names accepted: {', '.join(hosts)}",
            file=err or sys.stderr,
            flush=True,
        )
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
