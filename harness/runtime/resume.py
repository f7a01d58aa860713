"""Resume planning: what a resume must do, decided from the trace and the answer given before anything is written.

`plan(rep, answer, ...)` reads the `Replay` of the trace (its private
`Tail`: where the run stands) and the answer the caller gave, and decides
one of three things:

- `FINISHED`: the run ended, or it is PAUSED waiting for a human (a
  question no answer was given for; a call of uncertain outcome, or a call
  of a parallel step, no operator has reconciled). Its outcome is what the
  trace records; nothing is appended. (A run PAUSED on its budget waits for
  no one: it goes on, back where it paused.)
- `RESEAL`: the run ended but its writer died writing the seal (the end and
  its seal are one write): only the seal is written (a torn one set aside).
- a `GoOn`: the run goes on. It names the seam the resume owes (a `resume`
  record naming where a torn tail is set aside, and the `answer` given, each
  with its vector clock once the run has spawned agents; the Executor adds
  the way back out of PAUSED to a planner or verifier that asked), the answers owed
  to interrupt() calls, and the crossings to serve again.

Refusals are HarnessErrors raised by `plan()`: an answer given to a run
that waits for none (unless it is an answer given again in place of its
redacted record), an answer owed to a call made again that holds the
redaction marker. Guarantee: a refusal writes nothing, since plan() writes
nothing and the seam is owed (`Journal.owe()`): written with the resumed
run's first new record, in the same write, or never. The executor and the
workflow front door share these rules (`waits`, `seam`, `start_over`); what
each resumes into (the step loop, the function run again) is theirs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, overload

from .._errors import HarnessError, TraceCorruption, internal
from ..storage import is_url
from ..trace import state as S
from ..trace.index import ResumedProgress
from ..trace.journal import Journal
from ..trace.line import canonical
from ..trace.reader import Call, Checkpoint, Crossing, Replay
from ..trace.redact import Redaction
from ..trace.torn import set_aside, torn_name
from ..trace.vault import Vault
from ..trace.vault import marked as marked
from .environment import environment

NO_ANSWER: Any = object()  # run(goal) without answer=
FINISHED: Final = "finished"
RESEAL: Final = "reseal"

Seam = list[tuple[str, dict[str, Any], tuple[str, ...]]]  # the records owed: (kind, fields, user fields to redact)


@dataclass(frozen=True, slots=True)
class GoOn:
    """A resume that goes on: what it owes before its first new record, and what the resumed code is served."""

    rep: Replay  # as replay() reads the trace once the seam is written (answered, when an answer is recorded)
    aside: str | None  # where the torn tail is set aside (the resume record names it); None with no torn tail
    seam: Seam  # the resume record, then the answer given: for Journal.owe()
    clocks: dict[str, dict[str, int]] | None  # each agent's last clock after the seam; None if the run never spawned
    answers: list[Any]  # the answers owed to interrupt() calls, as given (the trace holds them redacted)
    served: list[Crossing]  # the crossings since the last transition, served again


def plan(rep: Replay, answer: Any, *, redact: Redaction, entrypoint: str) -> str | GoOn:
    """What resuming the run `rep` read does, given `answer` (NO_ANSWER if none): FINISHED, RESEAL or a GoOn.

    HarnessError for an answer the run cannot take; nothing is written.
    """
    asked = rep.tail.asking is not None  # a question waits for its answer
    owed, answer = owed_answers(rep, answer, asked, redact)
    if rep.complete and rep.seal is None:  # its writer died writing the end: the seal is all that is missing
        return RESEAL
    if rep.complete or waits(rep, answer):
        return FINISHED  # a finished run is never appended to
    no_marker_owed(rep, owed, redact.marker)
    rep, served = revealed(rep, redact.marker)  # (refused here, before anything is written, when it cannot be)
    aside, records, clocks = seam(rep, answer, entrypoint)
    if answer is not NO_ANSWER:
        owed.append(answer)
        rep = replace(rep, tail=replace(rep.tail, answered=True))  # as replay() reads it after the answer
    elif on_budget(rep):  # back where it paused, as after an answer (it needs none): the Executor's way out of PAUSED
        rep = replace(rep, tail=replace(rep.tail, answered=True))
    return GoOn(rep, aside, records, clocks, owed, served)


def on_budget(rep: Replay) -> bool:
    """Whether the run is PAUSED on its budget: a resume goes back where it paused (PLAN or VERIFY), no answer taken;
    its gate (budget.py) pauses it again, writing nothing, when the budget it is given is still too small."""
    return rep.state == S.PAUSED and rep.tail.over_budget is not None


def revealed(rep: Replay, marker: str) -> tuple[Replay, list[Crossing]]:
    """rep, and the crossings an Executor's resume serves again, each with its secrets kept beside the trace
    back in place (trace/vault.py): live code got them so. (Its tool results are `progress()`'s; a tool called
    again gets its args from the planner.)

    MissingExtra or SecretUnavailable when one holds the marker and cannot be revealed.
    """
    return rep, reveal_crossings(Vault(rep.path, marker), rep.resumable_crossings())


def progress(rep: Replay, marker: str) -> tuple[Replay, list[Checkpoint] | ResumedProgress]:
    """What an Executor's resume hands its planner and verifier, with the secrets kept beside the trace back in
    place: rep with the results it goes on from revealed (the last one, an operator's reconciled one, each open
    call's), and the progress so far, read from the trace on access, each checkpoint's result revealed then. Live
    code got these values so (`Journal.give`).

    Called before anything is written, and O(secrets), never O(trace): the sidecar's entries are checked for the
    extra and the key (`Vault.check`), and the results it goes on from revealed, so MissingExtra or
    SecretUnavailable refuses there. A checkpoint whose result holds the marker and has no entry (a trace copied
    without its sidecar, or recorded without the extra) is refused when the planner reads it: `refused()` tells
    that error from the planner's own, and the executor stops the run as for a drift, with no crash record (the
    resume's records are owed until its first new one: refused at the planner's first read, nothing is written).
    A trace on object storage (read whole anyway) is revealed whole.
    """
    vault = Vault(rep.path, marker)
    vault.check(rep.last_seq)
    t = rep.tail
    cks: list[Checkpoint] | ResumedProgress
    if is_url(rep.path):
        cks = [_revealed(vault, ck) for ck in rep.checkpoints]
    else:
        cks = ResumedProgress(_Revealing(rep.checkpoints, vault))
    tail = replace(
        t,
        result=vault.reveal(t.result_seq, "result", t.result) if rep.state in _GOES_ON_FROM else t.result,
        reconcile=_reconciled(vault, t.reconcile),
        group=tuple(_call(vault, c) for c in t.group),
    )
    return replace(rep, tail=tail), cks


_GOES_ON_FROM = (S.VERIFY, S.PAUSED)  # where a resume goes on with the last result (a verifier, a question)


class _Revealing(Sequence[Checkpoint]):
    """A trace's checkpoints, read on access, each with its result's secrets back in place (Vault.reveal: one
    search of the result's JSON text when it holds no marker)."""

    def __init__(self, before: Sequence[Checkpoint], vault: Vault):
        self._before, self._vault = before, vault

    def __len__(self) -> int:
        return len(self._before)

    @overload
    def __getitem__(self, i: int) -> Checkpoint: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Checkpoint]: ...
    def __getitem__(self, i: int | slice) -> Checkpoint | Sequence[Checkpoint]:
        if isinstance(i, slice):
            return [_revealed(self._vault, ck) for ck in self._before[i]]
        return _revealed(self._vault, self._before[i])

    def __iter__(self) -> Iterator[Checkpoint]:
        return (_revealed(self._vault, ck) for ck in self._before)


def _revealed(vault: Vault, ck: Checkpoint) -> Checkpoint:
    value = vault.reveal(ck.result_seq, "result", ck.result)
    return ck if value is ck.result else replace(ck, result=value)


def _reconciled(vault: Vault, reconcile: dict[str, Any] | None) -> dict[str, Any] | None:
    if reconcile is None or "result" not in reconcile:
        return reconcile
    value = vault.reveal(reconcile["seq"], "result", reconcile["result"])
    return reconcile if value is reconcile["result"] else {**reconcile, "result": value}


def _call(vault: Vault, c: Call) -> Call:
    """An open call of a parallel step, with the result it goes on from and its checkpoint revealed."""
    result = vault.reveal(c.result_seq, "result", c.result) if c.state in _GOES_ON_FROM else c.result
    checkpoint = _revealed(vault, c.checkpoint) if c.checkpoint is not None else None
    return replace(c, result=result, reconcile=_reconciled(vault, c.reconcile), checkpoint=checkpoint)


def reveal_crossings(vault: Vault, crossings: Iterable[Crossing]) -> list[Crossing]:
    """crossings with their kept secrets in place: a tool call's result (from its VERIFY transition or an operator's
    reconcile) or a crossing's response."""
    out = []
    for c in crossings:
        if c.error is None:
            value = vault.reveal(c.seq, "result" if c.kind == "tool" else "response", c.response)
            if value is not c.response:
                c = replace(c, response=value)
        out.append(c)
    return out


def waits(rep: Replay, answer: Any) -> bool:
    """Whether a PAUSED run waits for a human still: no answer to its question was given (or recorded), or a
    call of uncertain outcome (of the run, or of an open parallel step) has no operator's reconcile. A run paused
    on its budget waits for none: a resume goes on (and pauses again, writing nothing, if its budget is too small)."""
    if rep.state != S.PAUSED or rep.tail.answered or answer is not NO_ANSWER or on_budget(rep):
        return False
    group = rep.tail.open_calls
    if group:
        return any(c.state == S.PAUSED and c.reconcile is None for c in group)
    return not rep.tail.reconciled


def refuse_answer(rep: Replay) -> HarnessError:
    """The refusal of an answer given to a run that waits for none."""
    why = "it is already answered" if rep.tail.question is not None else f"its state is {rep.state}"
    if on_budget(rep):  # (its pause is the tail's question, with no question in it)
        why = "it paused on its budget: give it a larger one"
    return HarnessError(
        f"{rep.path}: an answer was given, but the run waits for none ({why}); nothing was written. "
        "Resume without an answer."
    )


def owed_answers(
    rep: Replay, answer: Any, asked: bool, redact: Redaction, owed: Sequence[Any] | None = None
) -> tuple[list[Any], Any]:
    """The answers the resumed run owes its interrupt() calls (`owed`: by default the trace's since the last
    intent; a workflow's re-executed function is owed every answer it was given), and the answer to record.

    With no question waiting, an answer is taken only as one given again:
    it stands for the recorded answer it redacts to, which holds the
    marker (see no_marker_owed), and nothing new is recorded. Any other
    answer is a HarnessError, before anything is written.
    """
    owed = list(rep.tail.pending_answers if owed is None else owed)
    if answer is NO_ANSWER or asked:
        return owed, answer
    given = canonical(redact(answer))
    marker = redact.marker
    again = next((i for i, a in enumerate(owed) if marked(a, marker) is not None and canonical(a) == given), None)
    if again is None:
        raise refuse_answer(rep)
    owed[again] = answer  # the live answer, in place of its redacted record
    return owed, NO_ANSWER


def no_marker_owed(
    rep: Replay, owed: Sequence[Any], marker: str, whose: str = "since the intent, owed to a call made again"
) -> None:
    """Refuse a resume that would hand an interrupt() call an answer redaction put the marker in.

    A tool called again after a crash gets every answer since its intent
    again (docs/FORMAT.md `answer`), a workflow's function run again every
    answer it was given, and the trace holds them redacted: the caller gives
    such an answer again (answer=...), else nothing is written.
    """
    for i, said in enumerate(owed):
        where = marked(said, marker)
        if where is not None:
            raise HarnessError(
                f"{rep.path}: answer {i + 1} {whose}, holds the redaction "
                f"marker at answer{where} (the trace keeps it redacted), and a call is never given the marker; "
                "nothing was written. Resume with that answer again: run(goal, answer=...) or "
                "`harness resume --answer`."
            )


def seam(rep: Replay, answer: Any, entrypoint: str) -> tuple[str | None, Seam, dict[str, dict[str, int]] | None]:
    """The records a resume owes before its first new one: `resume` (where the torn tail goes, the environment)
    and the `answer` given; each is one more event of main once the run has spawned agents.

    Returns where the torn tail goes, the records, and the agents' last clocks after them.
    """
    aside = torn_name(rep.path, rep.tail.end) if rep.torn_tail else None
    resumed = {"set_aside": os.path.basename(aside) if aside else None, "env": environment(entrypoint)}
    records: Seam = [("resume", resumed, ())]
    clocks = rep.tail.clocks
    if clocks is not None:  # the run had spawned: the resume is one more event of main, with its clock
        resumed["vc"], clocks = main_event(clocks)
    if answer is not NO_ANSWER:  # after the resume record, which names where a torn tail went
        question = rep.tail.question
        if question is None:
            raise internal("an answer for a run with no question", rep.path, rep.last_seq)
        said: dict[str, Any] = {"op": question["seq"], "answer": answer}
        if clocks is not None:  # one more event of main too
            said["vc"], clocks = main_event(clocks)
        records.append(("answer", said, ("answer",)))
    return aside, records, clocks


def start_over(journal: Journal, e: TraceCorruption, answer: Any) -> None:
    """After replay() found the header torn (its writer died creating it: no run began), set the file aside so a
    new run starts in it. Any other corruption is raised again; an answer is refused before anything is set aside.
    """
    if e.reason != "torn-header":
        raise e
    if answer is not NO_ANSWER:  # no run began, so none asked
        raise answer_to_torn_header(journal.path) from None
    set_aside(journal.path, 0)
    journal.continue_after(0, 0, 0, start=None)


def answer_to_torn_header(path: str) -> HarnessError:
    """The refusal of an answer given to a trace whose header is torn: no run began, so none asked."""
    return HarnessError(
        f"{path}: an answer was given, but the trace's header is torn (its writer died creating it) "
        "and no run asked a question; nothing was written. Resume without an answer."
    )


def main_event(clocks: dict[str, dict[str, int]]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """One more event of main: its clock, and the agents' last clocks with it."""
    main = {**clocks["main"], "main": clocks["main"]["main"] + 1}
    return main, {**clocks, "main": main}


def way_back(rep: Replay) -> dict[str, Any] | None:
    """The transition out of PAUSED back to where an answered question was asked, when that is PLAN or VERIFY
    (the planner or verifier is asked again; into ACT the tool is called again, live, right after it)."""
    question = rep.tail.question
    if rep.state != S.PAUSED or not rep.tail.answered or question is None or question["from"] == S.ACT:
        return None
    back: dict[str, Any] = {"from": S.PAUSED, "to": question["from"], "step": question["step"]}
    if question.get("attempt", 1) != 1:
        back["attempt"] = question["attempt"]
    return back
