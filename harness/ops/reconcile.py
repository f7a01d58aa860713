"""An operator's word on an operation whose outcome the trace cannot know.

A run PAUSES when it resumes to find an unsafe tool's intent with no result:
the call may or may not have taken effect. `reconcile()` appends what the
operator established (it happened, with this result; or it did not), with
evidence, and the next resume acts on it. Nothing else may write here: the
lock is taken first, and a trace with no uncertain operation is left as it was.
A torn tail (a reconcile killed mid-write) is set aside first, as a resume
does, and the record names the `.torn-N` sibling in its `set_aside` field.
The result given is what the tool itself returned; the door that recorded
the call turns it into what it records, and refuses one that does not fit
(BadResult, nothing written: review/results.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from .._errors import HarnessError, TraceUnreadable
from ..review.results import recorded, shape_of
from ..storage import is_url
from ..trace import state as S
from ..trace.line import check_value
from ..trace.reader import replay
from ..trace.redact import Redaction, Rule
from ..trace.remote import open_journal
from ..trace.torn import set_aside


def reconcile(
    trace: str | os.PathLike[str],
    *,
    happened: bool,
    result: Any = None,
    evidence: str = "",
    redact: Redaction | Iterable[Rule] | None = None,
) -> int:
    """Record whether the paused operation happened; returns the reconcile record's seq.

    `result` is what the tool returned (review/results.py: for an MCP tool its CallToolResult's wire JSON or a
    string, for a Pydantic AI tool the function's value); BadResult, nothing written, for one its door cannot
    record. `result` and `evidence` are redacted (`redact`: as for the Executor) before they are written.
    """
    rules = Redaction.of(redact)
    path = os.fspath(trace)
    if not happened and result is not None:
        raise HarnessError(f"{path}: a result was given for an operation that did not happen; nothing was written")
    check_value("result", result)
    if not is_url(path):
        if not os.path.lexists(path):  # Journal.open would create it
            raise TraceUnreadable(path, "no such trace file; nothing was written")
        if not os.path.isfile(path):
            raise TraceUnreadable(path, "not a regular file, so not a trace; nothing was written")
    with open_journal(path, redact=rules) as journal:  # a URL: its segments, downloaded into the writer's spool
        if is_url(path) and not journal.size():
            raise TraceUnreadable(path, "no such trace on the store; nothing was written")
        rep = replay(path)
        paused = rep.tail.over_budget
        if paused is not None:  # (a pause with no question: it waits for a larger budget)
            raise HarnessError(
                f"{path}: the run paused on its budget ({paused['budget'].get('exceeded')}), not on an operation "
                "of uncertain outcome: resume it with a larger one (`harness resume TRACE ... --budget-...`); "
                "nothing was written"
            )
        if rep.tail.question is not None:
            raise HarnessError(
                f"{path}: the run waits for an answer to {rep.tail.question['question']!r:.200}, not for a reconcile; "
                "answer it with `harness resume TRACE --agent MODULE:FACTORY --answer JSON`; nothing was written"
            )
        if rep.state != S.PAUSED or rep.tail.reconciled or rep.pending is None:
            why = "it is already reconciled" if rep.tail.reconciled else f"its state is {rep.state}"
            if rep.state == S.ACT:  # a crashed run: the resume decides whether its last call is uncertain
                why += "; resume it first, and it pauses if its last tool call is of uncertain outcome"
            raise HarnessError(f"{path}: no uncertain operation to reconcile ({why}); nothing was written")
        if happened:  # the tool's own value, as its door records it (checked by the door's framework: BadResult)
            result = recorded(path, rep.pending["tool"], shape_of(rep, rep.pending), result)
        aside = set_aside(path, rep.tail.end) if rep.torn_tail else None
        fields = {
            "op": rep.pending["seq"],
            "happened": bool(happened),
            "result": result if happened else None,
            "evidence": str(evidence),
        }
        if aside is not None:  # as a resume record does: every .torn-N is named in its trace
            fields["set_aside"] = os.path.basename(aside)
        clocks = rep.tail.clocks
        if clocks is not None:  # a run with agents: the operator's word is one more event of main
            vc = dict(clocks["main"])
            fields["vc"] = {**vc, "main": vc["main"] + 1}
        record = ("reconcile", fields)
        return journal.continue_after(
            rep.last_seq,
            rep.tail.crc,
            rep.tail.end,
            record,
            start=rep.header["ts"],
            sync=True,
            user=("result", "evidence"),
        )
