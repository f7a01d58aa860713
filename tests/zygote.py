"""A zygote: a process that imported harness (and what else it is told) once, and forks a new process per request.

    python zygote.py serve SOCKET MODULE...   # import the modules, then serve fork requests on SOCKET
    python zygote.py exec SOCKET SCRIPT ARG...  # run SCRIPT in a process forked by that zygote, with this
                                                # process's stdin, stdout, stderr, environment and directory

A crash test's child costs a fresh interpreter about 0.3-0.5 s of CPU, most of it importing harness and asyncio;
forked from the zygote it costs a few milliseconds. The child is still a new process that never ran anything (the
zygote imports, it runs nothing): it runs its script as `__main__` with its own argv, environment, directory and
standard streams, is SIGKILLed for real, and its exit status is the one a fresh interpreter's would be (a
signal's as a negative number). `random` is reseeded at each fork (the stdlib does it), so children differ.

Protocol (AF_UNIX, SOCK_SEQPACKET, one connection per child): the client sends a JSON request
({"argv", "code" | "path" | "module", "env", "cwd"}) with the three descriptors for fds 0-2 (SCM_RIGHTS); the
zygote answers {"pid": n} once forked and {"status": n} once the child ended. It ends when its stdin closes
(its parent, the test process, ended), so it never outlives the tests. It has no threads, so fork is safe.
Only the standard library is imported before the requested modules: `exec` stays cheap (the MCP tests' launcher).
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import sys
from typing import Any


def send(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    """Send a fork request; return the child's pid."""
    conn.sendmsg([json.dumps(request).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    return int(answer(conn)["pid"])


def answer(conn: socket.socket) -> dict[str, Any]:
    data = conn.recv(1 << 16)
    if not data:
        raise RuntimeError("the zygote ended (see its stderr)")
    return dict(json.loads(data))


def _exec(path: str, script: str, args: list[str]) -> None:
    """Run script in a forked process with this process's streams; exit with its status."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    conn.connect(path)
    request = {"argv": [script, *args], "path": script, "env": dict(os.environ), "cwd": os.getcwd()}
    send(conn, request, [0, 1, 2])
    # Let go of our copies of stdin and stdout: whoever reads the child's stdout sees its end when it ends.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    status = int(answer(conn)["status"])
    os._exit(status if status >= 0 else 128 - status)  # as a shell reports a signal


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the requested program; never returns."""
    import atexit
    import runpy
    import signal
    import threading
    import traceback
    import types

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        first = os.path.dirname(os.path.abspath(request["path"])) if request.get("path") else ""
        sys.path[:] = [first, *extra, *sys.path[1:]]
        if request.get("code") is not None:  # as `python -c`: in a fresh __main__ module (classes, pickle find it)
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            exec(compile(request["code"], "<string>", "exec"), vars(main))
        elif request.get("module") is not None:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(request["path"], run_name="__main__")
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    try:  # what an interpreter does on its way out
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _serve(path: str, modules: list[str]) -> None:
    import importlib
    import selectors
    import signal

    for name in modules:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # (the wakeup fd is what wakes the loop)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "fork")
    sel.register(wake_r, selectors.EVENT_READ, "reap")
    sel.register(0, selectors.EVENT_READ, "parent")
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "parent" and not os.read(0, 1 << 10):
                return  # the test process ended
            if key.data == "fork":
                conn, _ = listener.accept()
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    for fd in (listener.fileno(), conn.fileno(), wake_r, wake_w):
                        os.close(fd)
                    _run_child(json.loads(msg), fds)
                for fd in fds:
                    os.close(fd)
                conn.send(json.dumps({"pid": pid}).encode())
                children[pid] = conn
            if key.data == "reap":
                os.read(wake_r, 1 << 10)
                while children:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    conn = children.pop(pid)
                    with contextlib.suppress(OSError):  # (the client may have gone)
                        conn.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
                    conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        _serve(sys.argv[2], sys.argv[3:])
    else:
        _exec(sys.argv[2], sys.argv[3], sys.argv[4:])
