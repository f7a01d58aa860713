"""Child processes for crash tests: wait until one reaches a point (it creates a marker file), SIGKILL it there.

Children are new processes forked from a zygote (tests/zygote.py) that imported what they need once and ran
nothing: `ZYGOTE` (harness, asyncio) for most, `AGENTS` for the agents whose imports cost seconds (the frameworks,
the MCP SDK); each is started by the first test that needs it. `Popen()` and `run()` take
subprocess's arguments. A real process still, with its own argv, environment and standard streams, killed for
real, and one that never lived through the crash it resumes from; what it saves is the fresh interpreter's
imports (0.3-0.5 s of CPU each, seconds with the frameworks). Where a test's claim is about a fresh interpreter
(what importing does, a script as a user runs it), it starts one with subprocess.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import zygote


class Forked:
    """A child forked by a Zygote, as much of subprocess.Popen as the tests use."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int, pipes: list[int | None], text: bool) -> None:
        self.args, self.pid, self.returncode = args, pid, None
        self._conn, self._pipes, self._text = conn, pipes, text

    def poll(self) -> int | None:
        if self.returncode is None:
            self._conn.setblocking(False)
            try:
                answer = zygote.answer(self._conn)
            except BlockingIOError:
                return None
            finally:
                self._conn.setblocking(True)
            self._ended(answer)
        return self.returncode

    def _ended(self, answer: dict[str, Any]) -> None:
        self.returncode = int(answer["status"])
        self._conn.close()

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                self._ended(zygote.answer(self._conn))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr (those that are pipes) to their ends, then wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        got: dict[int, list[bytes]] = {fd: [] for fd in self._pipes if fd is not None}
        with selectors.DefaultSelector() as sel:
            for fd in got:
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        got[key.fd].append(data)
                    else:
                        sel.unregister(key.fd)
                        os.close(key.fd)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        out = [None if fd is None else b"".join(got[fd]) for fd in self._pipes]
        self._pipes = [None, None]
        return tuple(x.decode() if self._text and x is not None else x for x in out)  # type: ignore[return-value]

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """tests/zygote.py, started on first use with `preload` imported, stopped when the test process ends."""

    def __init__(self, *preload: str) -> None:
        self.preload = preload
        self.path = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def socket(self) -> str:
        """The zygote's socket (it is started if it is not running)."""
        if self._proc is None:
            folder = tempfile.mkdtemp(prefix="zygote-")
            self.path = os.path.join(folder, "s")
            environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # (children bring their own)
            self._proc = subprocess.Popen(
                [sys.executable, zygote.__file__, "serve", self.path, *self.preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environ,
            )  # fmt: skip
            assert self._proc.stdout is not None
            if self._proc.stdout.readline() != b"ready\n":
                raise RuntimeError(f"the zygote did not start (exit {self._proc.wait()})")
            atexit.register(self.stop, folder)
        return self.path

    def stop(self, folder: str) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # its end: it exits
            self._proc.wait(30)
            self._proc = None
        shutil.rmtree(folder, ignore_errors=True)

    def Popen(  # subprocess's name: call sites read as they did
        self, args: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
        stdin: Any = None, stdout: Any = None, stderr: Any = None, text: bool = False,
    ) -> Forked:  # fmt: skip
        """args as subprocess's: [sys.executable, "-c", code | "-m", module | script, arg...]."""
        assert args[0] == sys.executable, args
        request: dict[str, Any] = {"env": dict(os.environ if env is None else env), "cwd": str(cwd or os.getcwd())}
        if args[1] == "-c":
            request.update(code=args[2], argv=["-c", *args[3:]])
        elif args[1] == "-m":
            request.update(module=args[2], argv=[args[2], *args[3:]])
        else:
            request.update(path=str(args[1]), argv=[str(a) for a in args[1:]])
        pipes: list[int | None] = []  # our read ends of the child's stdout and stderr, where they are pipes
        theirs, fds = [], []
        for n, how in enumerate((stdin, stdout, stderr)):
            mine = None
            if how == subprocess.PIPE and n > 0:
                mine, fd = os.pipe()
                theirs.append(fd)
            elif how == subprocess.DEVNULL:
                fd = os.open(os.devnull, os.O_RDWR)
                theirs.append(fd)
            elif how is None:
                fd = n
            else:
                fd = how if isinstance(how, int) else how.fileno()
            fds.append(fd)
            if n > 0:
                pipes.append(mine)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self.socket())
        try:
            pid = zygote.send(conn, request, fds)
        finally:
            for fd in theirs:
                os.close(fd)
        return Forked([str(a) for a in args], conn, pid, pipes, text)

    def run(
        self, args: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
        capture_output: bool = False, text: bool = False, timeout: float | None = None, check: bool = False,
    ) -> subprocess.CompletedProcess[Any]:  # fmt: skip
        """subprocess.run's subset: a forked child, waited for."""
        how = subprocess.PIPE if capture_output else None
        child = self.Popen(args, env=env, cwd=cwd, stdout=how, stderr=how, text=text)
        try:
            out, err = child.communicate(timeout)
        finally:
            child.kill()
        done = subprocess.CompletedProcess(child.args, child.wait(), out, err)
        if check:
            done.check_returncode()
        return done


# What the zygote imports once, for the crash tests' children (their own agents they import themselves: one may
# read its environment at import).
ZYGOTE = Zygote("harness", "asyncio", "orjson", "json", "urllib.request", "http.client", "sqlite3")
# The children whose imports cost seconds: the frameworks' agents (test_frameworks_crash), the MCP SDK's client and
# server (test_mcp). Those tests are one xdist group: one worker starts this zygote, once.
AGENTS = Zygote("framework_agent", "mcp_agent", "mcp.server.mcpserver")


def wait_for(marker: Path, child: subprocess.Popen[bytes] | Forked, what: str = "the handshake") -> None:
    """Return once the child has created marker; fail the test if it ends first or never gets there."""
    deadline = time.monotonic() + 120  # a hang guard for the handshake, not a timing assertion
    while not marker.exists():
        if child.poll() is not None:
            pytest.fail(f"the child ended before {what}: {(child.communicate()[1] or b'').decode(errors='replace')}")
        if time.monotonic() > deadline:
            pytest.fail(f"the child never reached {what}")
        time.sleep(0.01)


def kill_at(marker: Path, child: subprocess.Popen[bytes] | Forked, what: str = "the handshake") -> None:
    """wait_for(), then SIGKILL the child there; it is reaped whatever happens."""
    try:
        wait_for(marker, child, what)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()


_STEPS = """
import os, sys, time
from pathlib import Path
from harness import Executor, Step

trace, marker, steps, at, pad = sys.argv[1], Path(sys.argv[2]), *map(int, sys.argv[3:])

def plan(goal, progress):
    return None if len(progress) >= steps else Step(f"s{len(progress)}", "work", {"i": len(progress)})

def work(i):
    if i == at:
        Path(f"{marker}.tmp").write_text(str(os.getpid()))
        os.replace(f"{marker}.tmp", marker)  # tell the parent (atomically) we are inside call `at`
        time.sleep(600)  # and wait for the SIGKILL
    return {"i": i, "pad": "x" * pad}

Executor(planner=plan, tools={"work": work}, trace=trace).run("g")
"""


def kill_in_call(trace: Path, marker: Path, *, steps: int, at: int, pad: int) -> int:
    """Run `steps` steps of `work` (results padded with `pad` bytes) in a child, SIGKILL it inside call `at`.

    Returns the child's exit status (-SIGKILL).
    """
    args = [str(trace), str(marker), str(steps), str(at), str(pad)]
    child = ZYGOTE.Popen([sys.executable, "-c", _STEPS, *args], stderr=subprocess.PIPE)
    kill_at(marker, child, f"call {at}")
    return child.returncode


def finished(child: Forked, what: str = "the child") -> None:
    """Wait for a child to end (a hang guard, not a timing assertion); fail unless it exited 0."""
    try:
        child.wait(300)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail(f"{what} did not finish")
    assert child.returncode == 0, f"{what} failed: exit {child.returncode}"


def kill_when(arrived: Any, child: Forked) -> None:
    """SIGKILL a child once `arrived()` is true (a marker file, a held request); reaped whatever happens."""
    deadline = time.monotonic() + 120
    try:
        while not arrived():
            if child.poll() is not None:
                pytest.fail(f"the child ended (exit {child.returncode}) before the kill point")
            if time.monotonic() > deadline:
                pytest.fail("the child never reached the kill point")
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
