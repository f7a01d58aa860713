"""A resume that calls a tool again whose recorded args hold the redaction marker asks the Executor's planner again.

Redaction wrote the marker in place of a secret in the args of an intent;
the tool must never be called with the marker. So before a resume makes such
a call again (a call in flight at the crash, one reconciled as not
happened, a question answered in ACT, the calls of an open parallel step),
it asks the planner again, with the goal and progress it had and the
crossings it made then served from the trace (none made live, none
written), and takes the live args of the Step it gives once they redact to
the recorded ones (ResumeMismatch if not). A planner that cannot give them
back is a RedactedArgs. A rerun serves every call and needs none of this; a
workflow's function gives its live args itself when it calls again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .._errors import RedactedArgs, ReplayDrift, ReplayViolation, ResumeMismatch, internal
from ..trace import index as _index
from ..trace import state as S
from ..trace.line import canonical, check_value
from ..trace.reader import Checkpoint, Replay
from ..trace.redact import Redaction
from ..trace.vault import Vault, refused
from .boundary import Session, deactivate
from .resume import marked, reveal_crossings
from .step import Progress, Run, Step


class Planning(Protocol):
    """What asking again takes of an Executor."""

    @property
    def planner(self) -> Callable[[Any, list[Checkpoint]], Any]: ...
    @property
    def redact(self) -> Redaction: ...
    @property
    def contracts(self) -> Mapping[str, dict[str, Any]]: ...


def live_intent(ex: Planning, run: Run, rep: Replay) -> dict[str, Any]:
    """The intent a resume calls again: the recorded one, unless redaction put the marker in its args.

    Then the planner is asked again (see plan_again), and the args of the
    Step it gives are used once they redact to the recorded ones
    (ResumeMismatch if not). A planner that cannot give them back is a
    RedactedArgs: a tool is never called with the marker. A rerun serves
    every call from its recording and needs none of this.
    """
    intent = rep.tail.intent
    if intent is None:
        raise internal("a tool called again with no intent", rep.path, rep.last_seq)
    where = marked(intent["args"], ex.redact.marker)
    if where is None or run.session.strict:
        return intent
    tool, step = intent["tool"], intent["step"]
    planned = plan_again(ex, run, rep, run.progress, step, tool, where)
    if not isinstance(planned, Step) or planned.tool != tool or ex.redact.name(planned.name) != intent["name"]:
        why = f"the planner, asked again, planned {planned!r:.200} instead of step {intent['name']!r}"
        raise RedactedArgs(rep.path, step, tool, where, why)
    same_args(ex, rep, step, tool, planned, intent["args"])
    run.planned = planned  # the verifier is shown the live Step
    return {**intent, "args": planned.args}


def live_calls(ex: Planning, run: Run, rep: Replay) -> dict[int, Step]:
    """The live Step of each call of an open parallel step, when a call the resume makes again holds the
    marker in its recorded args ({} when none does): live_intent(), for the whole list the planner gave.

    A call is made again when its lane is in PLAN, in ACT (an idempotent or
    pure tool), or PAUSED and reconciled as not happened.
    """
    marker, first = ex.redact.marker, rep.tail.open_calls[0].step
    again = [
        c
        for c in rep.tail.open_calls
        if not c.joined
        and not c.done
        and (
            c.state == S.PLAN
            or (c.state == S.ACT and ex.contracts[c.planned["tool"]]["effect"] != "unsafe")
            or (c.state == S.PAUSED and c.reconcile is not None and not c.reconcile["happened"])
        )
    ]
    found = next(((c, w) for c in again if (w := marked(c.planned["args"], marker)) is not None), None)
    if found is None or run.session.strict:
        return {}
    c, where = found
    tool = c.planned["tool"]
    progress = [ck for ck in run.progress if ck.step < first]  # what the planner had when it planned the list
    planned = plan_again(ex, run, rep, progress, c.step, tool, where)
    names = [(x.planned["name"], x.planned["tool"]) for x in rep.tail.open_calls]
    if (
        not isinstance(planned, list | tuple)
        or not all(type(p) is Step for p in planned)
        or [(ex.redact.name(p.name), p.tool) for p in planned] != names  # (names are redacted as written)
    ):
        why = f"the planner, asked again, planned {planned!r:.200} instead of the calls {names}"
        raise RedactedArgs(rep.path, c.step, tool, where, why)
    for x, p in zip(rep.tail.open_calls, planned, strict=True):
        same_args(ex, rep, x.step, x.planned["tool"], p, x.planned["args"])
    return {x.step: p for x, p in zip(rep.tail.open_calls, planned, strict=True)}


def plan_again(
    ex: Planning, run: Run, rep: Replay, progress: Sequence[Checkpoint], step: int, tool: str, where: str
) -> Any:
    """What the planner plans when asked again with the same goal and progress, the crossings it made
    while planning the step then (rep.tail.planned) served from the trace: none is made live, none written.
    RedactedArgs when it makes another crossing or raises."""
    start, stop = rep.tail.planned
    served = reveal_crossings(Vault(rep.path, ex.redact.marker), rep.crossings[start:stop])
    session = Session(None, served, strict=True, redact=ex.redact)
    token = session.activate()
    try:
        view = progress if isinstance(progress, Progress | _index.ResumedProgress) else Progress(progress)
        return ex.planner(run.goal, view)  # type: ignore[arg-type]  # after a resume, a read-only Sequence
    except (ReplayDrift, ReplayViolation) as e:
        why = f"the planner, asked again, made another model or boundary call than it did then ({e})"
        raise RedactedArgs(rep.path, step, tool, where, why) from None
    except Exception as e:
        if refused(e, rep.path):  # the progress it read cannot be revealed: the vault's refusal, as it is
            raise
        why = f"the planner, asked again, raised {type(e).__name__}: {e}"
        raise RedactedArgs(rep.path, step, tool, where, why) from e
    finally:
        deactivate(token)


def same_args(ex: Planning, rep: Replay, step: int, tool: str, planned: Step, recorded: Any) -> None:
    """ResumeMismatch unless the live args, redacted, are the recorded ones."""
    check_value("args", planned.args, tool=tool, step=step)
    shown = ex.redact(planned.args)
    if canonical(shown) != canonical(recorded):
        raise ResumeMismatch(rep.path, f"args of step {step} (tool {tool!r})", recorded, shown)
