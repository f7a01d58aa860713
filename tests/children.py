"""Child processes for crash tests: wait until one reaches a point (it creates a marker file), SIGKILL it there."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest


def wait_for(marker: Path, child: subprocess.Popen[bytes], what: str = "the handshake") -> None:
    """Return once the child has created marker; fail the test if it ends first or never gets there."""
    deadline = time.monotonic() + 120  # a hang guard for the handshake, not a timing assertion
    while not marker.exists():
        if child.poll() is not None:
            pytest.fail(f"the child ended before {what}: {(child.communicate()[1] or b'').decode(errors='replace')}")
        if time.monotonic() > deadline:
            pytest.fail(f"the child never reached {what}")
        time.sleep(0.01)


def kill_at(marker: Path, child: subprocess.Popen[bytes], what: str = "the handshake") -> None:
    """wait_for(), then SIGKILL the child there; it is reaped whatever happens."""
    try:
        wait_for(marker, child, what)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()
