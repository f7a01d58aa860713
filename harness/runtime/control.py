"""Harness's control exceptions, and `decisive()`: the one that ends a run, found inside any exception group.

A pause (`Paused`: an unsafe call found in flight on resume, already PAUSED
on the file), a question (`Interrupted`, raised by `interrupt()`), a rerun's
seam (where a recorded process stopped: review/rerun.py) and
harness's own verdicts (a drift, a journal that failed, a value that is not
JSON: `VERDICTS`) end a run on harness's terms. Code between them and the
runtime may wrap them: an anyio or asyncio TaskGroup raises what its body
or a task raised inside a `BaseExceptionGroup`, and the MCP client, Pydantic
AI and the Agents SDK all run inside one. Every place that decides how a run
ends asks `decisive(e)` first, so a wrapped signal means what it means bare.

Precedence, for a group (nested groups are flattened):

1. a stop (`KeyboardInterrupt`, `SystemExit`: Ctrl-C in sync code inside
   an anyio group's body comes out in a group): the first one, raised bare,
   as asyncio.TaskGroup itself raises it, so a run stopped inside a group
   ends as one stopped outside it (a crash record for Ctrl-C; the CLI's exit
   130); anything else in the group is named in a note on it;
2. a verdict: the first one, raised; anything else in the group is named in
   a note on it (the run cannot go on, whatever else happened);
3. real errors (anything that is not a control exception): the group with
   the control exceptions taken out, so no real error is lost. A question
   beside them is dropped (nothing was written for it; the code asks again
   when it runs again); a pause beside them is already on the file, so the
   run stays PAUSED there and the errors are raised to the caller;
4. a pause (the first `Paused`): its outcome is on the file already;
5. else the first control exception (a question: the run pauses on it; a
   seam: the rerun goes on from there).

Anything that is not a group is decisive as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._errors import (
    Control,
    HarnessError,
    JournalError,
    NotATool,
    NotSerializable,
    ReplayDrift,
    ReplayViolation,
    ResumeMismatch,
    TraceCorruption,
)

# harness's own verdicts: a run that meets one stops with it raised (a plain HarnessError is harness's own too)
VERDICTS = (JournalError, ReplayDrift, ReplayViolation, NotSerializable, NotATool, ResumeMismatch, TraceCorruption)


class Paused(Control):
    """A resumed call of an unsafe tool was in flight at the crash: the run paused on it; `outcome` says so."""

    def __init__(self, outcome: Any):
        self.outcome = outcome
        super().__init__("paused on an unsafe call of uncertain outcome, for harness reconcile")


def verdict(e: BaseException) -> bool:
    """Whether e is one of harness's own verdicts (raised out of a run, never a FAILED outcome)."""
    return type(e) is HarnessError or isinstance(e, VERDICTS)


def decisive(e: BaseException) -> BaseException:
    """The exception that decides how a run ends when e was raised (see the module docstring for a group)."""
    if not isinstance(e, BaseExceptionGroup):
        return e
    leaves = list(_leaves(e))
    stops = (x for x in leaves if isinstance(x, KeyboardInterrupt | SystemExit))
    found: BaseException | None = next(stops, None) or next((x for x in leaves if verdict(x)), None)
    if found is not None:
        others = [f"{type(x).__name__}: {x}" for x in leaves if x is not found]
        note = "raised in an exception group beside: " + "; ".join(others)[:2000]
        if others and note not in getattr(found, "__notes__", ()):  # asked again of the same group (the call's
            found.add_note(note)  # failure, then the run's end): named once
        return found
    rest = e.split(Control)[1]
    if rest is not None:
        return rest
    return next((x for x in leaves if isinstance(x, Paused)), leaves[0])


def _leaves(e: BaseException) -> Iterator[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        for x in e.exceptions:
            yield from _leaves(x)
    else:
        yield e
