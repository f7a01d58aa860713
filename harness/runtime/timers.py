"""Durable timers: `sleep(seconds)` whose wake-up time is in the trace.

`sleep()` crosses a boundary of kind `sleep` whose response is the wake-up
time (seconds since the epoch), then waits until then. A run killed during
the sleep and resumed is served the recorded wake-up time again, so it
sleeps only what is left (nothing if the time has passed); a rerun or the
part of a fork before its branch is served it too and does not sleep at all.
The retry backoff of `RetryPolicy` waits the same way (`wait_until`).

Guarantee: the wake-up time is written to the trace before the wait starts;
a wait is never longer than the recorded wake-up time minus now. The wait is
`pause()` (time.sleep), kept as a module attribute so a test can count it.
Called inside a tool (which is not a recorded crossing), it is a plain sleep.
"""

from __future__ import annotations

import math
import time
from typing import Any

from .boundary import Session
from .context import current_run

pause = time.sleep  # the one place a timer waits


def sleep(seconds: float) -> None:
    """Sleep durably: the wake-up time is recorded, a resume sleeps what is left, a rerun not at all."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"harness.sleep() needs a finite number of seconds >= 0, not {seconds!r}")
    session: Session | None = current_run()
    if session is None or session.nested:  # outside a run, or inside a tool: a plain sleep
        if seconds:
            pause(seconds)
        return
    wake = session.cross("sleep", {"seconds": seconds}, lambda: time.time() + seconds)
    wait_until(session, wake)


def wait_until(session: Session, wake: Any) -> None:
    """Wait until `wake` (epoch seconds), unless the session re-executes a recording (no waiting then)."""
    if replaying(session):
        return
    left = float(wake) - time.time()
    if left > 0:
        pause(left)


def replaying(session: Session) -> bool:
    """Whether the session serves a recording strictly (a rerun, a fork before its branch)."""
    return session.strict and not getattr(session, "live", False)
