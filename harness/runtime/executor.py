"""The executor: drives the state machine and streams it to the trace.

One loop, one state at a time (PLAN -> ACT -> VERIFY -> CHECKPOINT ...).
Each transition is written before the executor acts on it: the transition
into ACT (the intent: tool, args, idempotency key) is on the file before the
tool runs, the result is on the file before it is verified, and the
checkpoint record (VERIFY -> CHECKPOINT -> PLAN in one line) names the record
holding the result it vouches for instead of copying it. A run that ends
(DONE or FAILED) writes its seal with its last record. Resuming is the same
loop started from the state `replay()` rebuilds, once resume.py has decided,
before anything is written, whether the run goes on and with what seam.

Parallel steps: when the planner returns a list of steps, each call runs the
same loop in a thread of its own (an agent, `step-<N>`), with its step fixed,
from PLAN to its checkpoint: its own intent, result, retries and contract.
The run joins the calls in planner order, which is the order their
checkpoints take in progress, and fails with the first failed call's error.
At most `max_parallel` calls hold a slot at a time.

Failures: ToolError (and ToolTimeout) and a rejected verification are
retried under the RetryPolicy and end in FAILED when attempts run out, all
recorded; a rejected result of an unsafe tool is never retried (its effect
happened) unless the tool says `retry_rejected=True`. Any other exception
is recorded in a `crash` record, then propagates out of run() and leaves the
file as a crash would: resume goes on from the same place. `interrupt()`
pauses the run (PAUSED with the question) until a resume brings an answer.
An interrupt() inside a call of a parallel step, or in arun(), is not
supported yet: it raises HarnessError (recorded as a crash).
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._errors import (
    BudgetExceeded,
    HarnessError,
    Interrupted,
    JournalError,
    ReplayDrift,
    ReplayViolation,
    ResumeMismatch,
    ToolError,
    ToolTimeout,
    TraceCorruption,
    VerificationFailed,
    internal,
)
from ..storage import is_url
from ..storage.blobs import THRESHOLD
from ..trace import index as _index
from ..trace import state as S
from ..trace.journal import Journal
from ..trace.line import a, canonical, check_value
from ..trace.reader import Call, Checkpoint, Replay, replay
from ..trace.redact import Redaction, Rule
from ..trace.vault import refused
from . import step
from . import timers as _timers
from .boundary import Session, deactivate
from .budget import Budget
from .control import decisive
from .fingerprint import code_of
from .opener import Opened, check
from .replan import live_calls, live_intent
from .resume import NO_ANSWER, RESEAL, GoOn, main_event, plan, start_over, way_back
from .resume import progress as revealed_progress
from .step import (
    NOT_SERVED,
    Outcome,
    RetryPolicy,
    Run,
    Step,
    _Served,
    ask,
    crash,
    finished,
    invoke,
    over_budget,
    reseal,
    reused_key,
    served,
    unawaited,
    write_header,
)
from .tasks import numbering
from .tool import Tool, ToolSpec, spec_of

MAX_STEPS = 10_000  # the default step limit: a planner that never says DONE ends FAILED, not with a full disk
_RECORDED: Any = object()  # _go_on(): the goal as the trace has it


class Executor:
    """Runs a goal to DONE or FAILED, streaming every step to one trace file.

    Args:
        planner: `planner(goal, progress)` returns the next `Step`, a list of steps to run side by side, or
            None when the goal is met; `progress` holds the verified checkpoints so far, oldest first.
        tools: name -> callable (called as `fn(**step.args)`) or `Tool` (a declared effect contract).
        verifier: `verifier(step, result)` returns True to vouch for a result, False to reject it (or raises
            `VerificationFailed`); by default every result is accepted.
        trace: the trace file (or an fsspec URL); without it, `<run_id>.jsonl` in `runs_dir`.
        runs_dir: where a trace without a name goes: else `$HARNESS_RUNS_DIR`, else `./runs`.
        resume: True finishes the run in `trace` (which must exist), "auto" resumes it if it exists.
        retry: attempts per step, backoff between them, a tool call's timeout.
        durability: "flush" survives a killed process; "fsync" also a power loss (one fdatasync a step).
        entrypoint: what the header names as the program; by default `sys.argv[0]`.
        max_steps: the step number at which a run ends FAILED (`MaxSteps`); None for no limit.
        blob_threshold: payloads larger than this many bytes go to `blobs/<sha256>` beside the trace.
        seal_key: a key for an HMAC seal (default `$HARNESS_SEAL_KEY`); without one the seal is a hash.
        redact: rules added to the default redaction, or a `Redaction` for full control.
        max_parallel: how many calls of a parallel step run at once.
        storage_options: fsspec's options for a `trace` or `runs_dir` URL.
    """

    def __init__(
        self,
        *,
        planner: Callable[[Any, list[Checkpoint]], Step | list[Step] | None],
        tools: Mapping[str, Callable[..., Any] | Tool | ToolSpec],
        verifier: Callable[[Step, Any], bool] | None = None,
        trace: str | os.PathLike[str] | None = None,
        runs_dir: str | os.PathLike[str] | None = None,
        resume: bool | str = False,
        retry: RetryPolicy = RetryPolicy(),
        durability: str = "flush",
        entrypoint: str | None = None,
        max_steps: int | None = MAX_STEPS,
        blob_threshold: int = THRESHOLD,
        seal_key: str | bytes | None = None,
        redact: Redaction | Iterable[Rule] | None = None,
        max_parallel: int = 8,
        storage_options: dict[str, Any] | None = None,
    ):
        if not isinstance(tools, Mapping):
            raise TypeError(
                f"tools must be a dict of name -> callable or harness.Tool, not {a(type(tools).__name__)}: "
                f"tools={{'search': search}}, not tools=[search]"
            )
        if max_steps is not None and (type(max_steps) is not int or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int, or None for no limit, not {max_steps!r}")
        check(durability=durability, resume=resume, trace=trace)
        self.planner = planner
        self.tools = dict(tools)
        self.verifier = verifier or (lambda step, result: True)
        self.trace = os.fspath(trace) if trace is not None else None
        self.runs_dir = runs_dir
        self.resume = resume
        self.retry = retry
        self.durability = durability
        if type(blob_threshold) is not int or blob_threshold < 0:
            raise ValueError(f"blob_threshold must be an int of bytes >= 0, not {blob_threshold!r}")
        self.blob_threshold = blob_threshold
        self.seal_key = seal_key
        if type(max_parallel) is not int or max_parallel < 1:
            raise ValueError(f"max_parallel must be an int of at least 1, not {max_parallel!r}")
        self.max_parallel = max_parallel
        self.entrypoint = entrypoint or (sys.argv[0] if sys.argv and sys.argv[0] else "<python>")
        self.max_steps = max_steps
        # secrets replaced by a marker in every value written (None: the default rules; a list adds to them)
        self.redact = Redaction.of(redact)
        self.storage_options = storage_options  # for a trace= or runs_dir= URL (fsspec), else unused
        # each tool's contract from its ToolSpec: a plain callable at-least-once, a harness.Tool's or an @harness.tool's
        specs: dict[str, ToolSpec] = {}
        for name, tool in self.tools.items():
            if type(name) is not str:
                raise TypeError(f"tools must be a dict of name -> callable or harness.Tool; key {name!r} is not a str")
            if not isinstance(tool, Tool | ToolSpec) and not callable(tool):
                raise TypeError(f"tool {name!r} is {tool!r}, not a callable or a harness.Tool")
            specs[name] = spec_of(tool)
        self.contracts = {n: s.contract for n, s in sorted(specs.items())}
        # the tools whose call is preceded by an fsync (of their intent and all before it): all of them with
        # durability="fsync", declared tools with "flush"
        synced = [n for n, s in specs.items() if durability == "fsync" or s.contract["effect"] != "at-least-once"]
        self.synced = frozenset(synced)

    def run(self, goal: Any, *, answer: Any = NO_ANSWER, budget: Budget | None = None) -> Outcome:
        """Run (or, with resume=True, finish) the goal. Returns DONE, FAILED or PAUSED.

        resume=True refuses a trace path with no file (TraceMissing);
        resume="auto" starts a new run there. `answer`: the human's answer
        to the question a run PAUSED on with interrupt() (any JSON value).
        `budget`: what the run's live model calls may spend, across resumes
        (`harness.Budget`); a call that would pass it PAUSES the run first.
        """
        self._refuse_async()
        check_value("goal", goal)
        if answer is not NO_ANSWER:
            check_value("answer", answer)
        with Opened(
            self.trace, self.runs_dir, resume=self.resume, answer=answer, durability=self.durability,
            redact=self.redact, seal_key=self.seal_key, storage_options=self.storage_options,
            blob_threshold=self.blob_threshold,
        ) as opened:  # fmt: skip
            if opened.run_id is None:
                return self._resume(opened.journal, goal, answer, budget)
            return self._start(opened.journal, goal, opened.run_id, budget=budget)

    def _refuse_async(self) -> None:
        """HarnessError before anything is written when run() was given an async planner, verifier or tool."""
        parts: list[tuple[str, Any]] = [("the planner", self.planner), ("the verifier", self.verifier)]
        parts += [(f"tool {n!r}", spec_of(t).fn) for n, t in self.tools.items()]
        for what, fn in parts:
            if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
                raise unawaited(what)

    async def arun(self, goal: Any, *, answer: Any = NO_ANSWER, budget: Budget | None = None) -> Outcome:
        """run() for async agents: planners, tools and verifiers may be `async def` (plain ones still work).

        The executor waits in a worker thread; each awaitable runs as a task on
        the running loop, so the calls of a parallel step are concurrent tasks.
        """
        import asyncio  # (only async code loads asyncio, and ssl with it)

        from .bridge import Bridge, bridged

        bridge = Bridge(asyncio.get_running_loop())
        ex = copy.copy(self)
        ex.planner, ex.tools, ex.verifier = bridged(bridge, self.planner, self.tools, self.verifier)
        with numbering():  # the tasks each planner, tool or verifier call creates are named (tasks.py)
            return await asyncio.to_thread(functools.partial(ex.run, goal, answer=answer, budget=budget))

    def _start(
        self,
        journal: Journal,
        goal: Any,
        run_id: str,
        *,
        session: Session | None = None,
        budget: Budget | None = None,
        limit: dict[str, Any] | None = None,
        **lineage: Any,
    ) -> Outcome:
        code = code_of((self.planner,))
        journal.give = True  # the planner's progress holds each result as the tool returned it (see _go_on)
        limit = budget.to_json() if budget is not None else limit  # (limit: a rerun's or fork's, its parent's)
        write_header(
            journal, run_id, goal, self.contracts, self.redact, self.entrypoint, lineage, code=code, budget=limit
        )
        session = session or Session(journal, redact=self.redact)
        if budget is not None:  # the run's ledger (runtime/budget.py)
            session.limit(budget)
        run = Run(journal, session, goal, run_id, [], S.INIT)
        run.index = (
            None if is_url(journal.path) else _index.Writer(journal.path, journal.fd, journal.digests, journal.blocks)
        )
        run.move(S.PLAN)
        return self._drive(run)

    def _resume(self, journal: Journal, goal: Any, answer: Any = NO_ANSWER, budget: Budget | None = None) -> Outcome:
        """Go on with the run in journal's file, as resume.plan() decides (a refusal, before it, writes nothing)."""
        path = journal.path
        try:
            rep = _index.resume_point(path)  # reads only what follows the index's mark, when it has a usable one
        except TraceCorruption as e:
            start_over(journal, e, answer)  # a torn header: no run began, a new one starts in the emptied file
            return self._start(journal, goal, uuid.uuid4().hex, budget=budget)
        ex, redact = self, self.redact.as_of(rep.header)
        if redact is not self.redact:  # a trace of 0.3.x: its values are compared and written redacted as then
            ex = copy.copy(self)
            ex.redact = redact
            journal.redacting(redact)
        return ex._resume_read(journal, rep, goal, answer, budget)

    def _resume_read(self, journal: Journal, rep: Replay, goal: Any, answer: Any, budget: Budget | None) -> Outcome:
        """_resume, once its trace is read."""
        path = journal.path
        if rep.workflow is not None:
            raise HarnessError(
                f"{path}: the run of workflow {rep.workflow}, not an Executor's: resume it with its workflow "
                "(W.run(..., resume=True), or harness resume --workflow MODULE:ATTR); nothing was written"
            )
        if canonical(rep.goal) != canonical(self.redact(goal)):
            raise ResumeMismatch(path, "goal", rep.goal, goal)
        if rep.header.get("tools") != self.contracts:
            raise ResumeMismatch(path, "tools", rep.header.get("tools"), self.contracts)
        todo = plan(rep, answer, redact=self.redact, entrypoint=self.entrypoint)
        journal.digests.update(rep.tail.blobs)
        journal.blocks[:] = _index.trusted_blocks(path, rep)  # what the mark's writer hashed: the seal takes them
        if not isinstance(todo, GoOn):  # RESEAL: only the missing seal is written; FINISHED: nothing is
            return reseal(journal, rep) if todo == RESEAL else finished(rep)
        # the seam is owed: written with the first record the resumed run appends, in the same write, or never
        # (a resume that pauses again, drifts or is refused writes nothing)
        rep, seam, clocks = todo.rep, todo.seam, todo.clocks
        back = way_back(rep)
        if back is not None:  # out of PAUSED to where the answered question was asked: owed too (see _go_on)
            if clocks is not None:  # one more event of main
                back["vc"], clocks = main_event(clocks)
            seam = [*seam, ("transition", back, ())]
        owed = journal.owe(rep.last_seq, rep.tail.crc, rep.tail.end, seam, start=rep.header["ts"], aside=todo.aside)
        session = Session(journal, todo.served, redact=self.redact)
        # its ledger counts the trace's live model calls; a resume given no budget keeps the one the run started with
        session.limit(budget or Budget.recorded(rep.header))
        if clocks is not None:  # every record from here on carries its clock
            session.agents.share(journal, clocks)
        session.answers.extend(todo.answers)  # answers as given: the trace holds them redacted
        # the caller's goal: the trace's may be redacted
        return self._go_on(journal, session, rep, goal, owed=owed if back is not None else 0)

    def _go_on(
        self, journal: Journal, session: Session, rep: Replay, goal: Any = _RECORDED, *, owed: int = 0
    ) -> Outcome:
        """Drive a run on from the state a replay rebuilt.

        `owed`: the seq of the way out of PAUSED back to the state that asked an answered question (PLAN or
        VERIFY), owed with the resume's seam (`_way_back`): the planner or verifier is run again before anything
        is written, so one that drifts, is refused or asks again with nothing new leaves the trace as it was.
        """
        # the planner and verifier get each result as the tool returned it, secrets and all (kept beside the
        # trace, vault.py), live as on resume: never the marker, which a planner would copy into the next args.
        # The key and what the run goes on from are checked before anything is written, the checkpoints as the
        # planner reads them: a refusal there is the vault's (`refused`), and writes nothing the resume owes
        rep, revealed = revealed_progress(rep, self.redact.marker)
        journal.give = True
        last, intent = rep.tail.last or {}, rep.tail.intent
        goal = rep.goal if goal is _RECORDED else goal
        run = Run(journal, session, goal, rep.run_id, revealed, rep.state)
        run.index = _index.Writer.after(journal.path, journal.fd, journal.digests, journal.blocks, rep)
        if rep.tail.open_calls:  # a parallel step was open: its calls go on, each from where its lane stands
            run.state, run.step = S.PLAN, rep.tail.open_calls[0].step
            token = session.activate()
            try:
                done = self._resume_group(run, rep)
            finally:
                deactivate(token)
            return done or self._drive(run)
        if run.state == S.PAUSED and rep.tail.answered:  # back to where the question was asked, to ask it again
            if rep.tail.question is None:
                raise internal("an answered run with no question", rep.path, rep.last_seq)
            run.step, run.attempt = rep.tail.question["step"], rep.tail.question.get("attempt", 1)
            back = rep.tail.question["from"]
            if back == S.PLAN:
                if owed:
                    run.state, run.wrote = S.PLAN, owed
                else:
                    run.move(S.PLAN, sync=True)
                return self._drive(run)
            if intent is None:
                raise internal(f"a question asked in {back} with no intent before it", rep.path, rep.last_seq)
            run.intent, run.result, run.shown = intent, rep.tail.result, check_value("result", rep.tail.result)
            run.result_seq = rep.tail.result_seq
            if back == S.ACT:  # the tool is called again, with its live args (see replan.py)
                step.reopen(run, S.PAUSED, {}, None, asked=True, live=lambda: live_intent(self, run, rep))
            elif owed:
                run.state, run.wrote = S.VERIFY, owed
            else:
                run.move(S.VERIFY, sync=True)
            return self._drive(run)
        if run.state in (S.INIT, S.PLAN):
            if run.state == S.INIT:
                run.move(S.PLAN)
            elif last.get("from") in (S.ACT, S.VERIFY):  # a retry was decided
                run.step, run.attempt = last["step"], last.get("attempt", 1) + 1
                if last["from"] == S.ACT and intent is not None:
                    run.reuse = reused_key(last, intent)
                    try:
                        self._backoff(run)  # a crash during the wait: the resume waits what is left
                    except (Exception, KeyboardInterrupt) as e:
                        crash(run, e)
                        raise
            else:
                run.step = len(run.progress)
            return self._drive(run)
        if intent is None:
            raise internal(f"a run in {run.state} with no intent", rep.path, rep.last_seq)
        run.step, run.attempt, run.intent, run.result = (
            intent["step"],
            intent.get("attempt", 1),
            intent,
            rep.tail.result,
        )
        run.result_seq = rep.tail.result_seq
        run.shown = check_value("result", rep.tail.result)
        reconcile = rep.tail.reconcile
        if run.state == S.PAUSED and reconcile is None:  # (_resume returns a run that waits for a reconcile as it is)
            raise internal("a paused run resumed with no reconcile and no answer", rep.path, rep.last_seq)
        was, contract = run.state, self.contracts[intent["tool"]]
        todo = step.reopen(run, was, contract, reconcile, live=lambda: live_intent(self, run, rep))
        if todo == step.WAIT:
            return finished(replay(journal.path))
        if was == S.PAUSED and todo == step.CHECK and reconcile is not None:  # shown what the operator gave
            run.shown = check_value("result", reconcile["result"])
        return self._drive(run)

    def _drive(self, run: Run) -> Outcome:
        """The loop: one state at a time, each transition on the file before it is acted on.

        A call of a parallel step (a lane) runs the same loop in its own thread,
        with its step fixed, and stops at its checkpoint.
        """
        token = None if run.lane else run.session.activate()
        try:
            while True:
                if run.state == S.PLAN:
                    planned: Any = run.planned if run.lane else self.planner(run.goal, run.progress)  # type: ignore[arg-type]
                    run.check_session()
                    if planned is None:
                        run.end(S.DONE)
                        return run.outcome()
                    if type(planned) is not Step and isinstance(planned, list | tuple) and not run.lane:
                        ended = self._parallel(run, list(planned))
                        if ended is not None:
                            return ended
                        continue
                    if not isinstance(planned, Step):
                        self._check_planned(planned)  # raises: says what the planner must return
                    if not run.lane and self.max_steps is not None and run.step >= self.max_steps:
                        return run.too_many(planned.name, self.max_steps)
                    self._check_planned(planned)
                    run.planned = planned
                    effect, name = self.contracts[planned.tool]["effect"], self.redact.name(planned.name)  # as written
                    made = step.intent(run, planned.tool, planned.args, effect, name=name, reuse=run.reuse)
                    run.reuse = None
                    step.open(run, made, sync=planned.tool in self.synced)
                elif run.state == S.ACT:
                    step.durable(run, run.intent["tool"] in self.synced)
                    try:
                        raw = self._call(run.session, run.intent)
                    except ToolError as e:
                        error: dict[str, Any] = (
                            e.error if isinstance(e, _Served) else {"type": type(e).__name__, "message": str(e)}
                        )
                        if isinstance(e, ToolTimeout):
                            error["timeout"] = e.timeout
                            if self.contracts[run.intent["tool"]]["effect"] == "unsafe":  # it may have happened
                                run.move(S.PAUSED, sync=True, user=("error",), error=error)
                                return run.outcome() if run.lane else finished(replay(run.journal.path))
                        run.reuse = reused_key(error, run.intent)
                        if self._retry_or_fail(run, error, backoff=True):
                            return run.outcome(error)  # the live error; the trace has it redacted
                        continue
                    run.shown = raw  # the tool's own value, for the verifier; the checkpoint keeps a JSON copy
                    # synced with the next call's intent or the run's end
                    step.record(run, raw, _unawaited_tool)
                elif run.state == S.VERIFY:
                    why = self._verify(run)
                    run.check_session()
                    if why is not None:
                        error = {"type": "VerificationFailed", "message": why}
                        contract = self.contracts[run.intent["tool"]]
                        if contract["effect"] == "unsafe" and not contract.get("retry_rejected"):
                            error["message"] = (
                                f"{why}; not retried: tool {run.intent['tool']!r} is idempotent=False and its effect "
                                "happened, so calling it again would repeat it (Tool(..., retry_rejected=True) "
                                "allows a retry)"
                            )
                            run.end(S.FAILED, error=error)
                            return run.outcome(error)
                        if self._retry_or_fail(run, error):
                            return run.outcome(error)
                        continue
                    run.checkpoint()
                    if run.lane:  # a call ends with its checkpoint
                        return run.outcome()
        except BaseException as raised:
            stop = decisive(raised)  # inside any exception group, as if raised bare
            if isinstance(stop, Interrupted):
                if run.lane:
                    raise HarnessError(
                        f"interrupt() was called inside call {run.step} of a parallel step: interrupt() is not "
                        "supported in parallel steps yet; ask before the planner returns a list of steps, or run "
                        "the step alone"
                    ) from None
                return self._ask(run, stop.question)
            if isinstance(stop, BudgetExceeded):  # PAUSED before the call (runtime/budget.py)
                return over_budget(run, stop)
            # the journal's own failure, a re-execution's verdict and the vault's refusal to reveal a checkpoint the
            # planner read have no crash record (a resume refused so writes nothing); a call's failure propagates
            # to the run, which records the crash
            own = isinstance(stop, JournalError | ReplayDrift | ReplayViolation) or refused(stop, run.journal.path)
            if not own and not run.lane and isinstance(stop, Exception | KeyboardInterrupt):
                crash(run, stop)
            if stop is raised:
                raise
            raise stop from None  # the group it came in: its other members are in e's note, or dropped
        finally:
            if token is not None:
                deactivate(token)
            if run.index is not None:  # the last quiet point's mark: a resume starts there (none if it wrote nothing)
                run.index.close(mark=not run.journal.owes)

    # --- parallel steps ------------------------------------------------------------------------------

    def _parallel(self, run: Run, steps: list[Any]) -> Outcome | None:
        """Run a list of steps as concurrent calls, each a lane of its own; None when all checkpointed."""
        if not steps:
            raise HarnessError("the planner returned an empty list; return a Step, a list of Steps, or None")
        for planned in steps:
            self._check_planned(planned)
        if self.max_steps is not None and run.step + len(steps) > self.max_steps:
            return run.too_many(steps[max(0, self.max_steps - run.step)].name, self.max_steps)
        for i, planned in enumerate(steps):  # every call's args, before any spawn: a bad one starts nothing
            check_value("args", planned.args, tool=planned.tool, step=run.step + i)
        slots = threading.BoundedSemaphore(self.max_parallel)
        calls = []
        for i, planned in enumerate(steps):
            call = run.call(run.step + i, planned)
            extra = {
                "step": call.step,
                "name": self.redact.name(planned.name),
                "tool": planned.tool,
                "args": planned.args,
            }
            calls.append((f"step-{call.step}", self._lane, (call, slots), extra))
        handles = run.session.agents.start_all(calls)  # the whole plan is on the file before any call starts
        return self._close(run, handles, run.step + len(steps))

    def _lane(self, call: Run, slots: threading.BoundedSemaphore) -> Outcome:
        with slots:  # at most max_parallel calls in flight; a waiting call has written nothing yet
            return self._drive(call)

    def _close(self, run: Run, handles: list[Any], next_step: int) -> Outcome | None:
        """Join the calls in planner order; their checkpoints join the progress in that order."""
        for h in handles:
            h.wait()
        crashed = next((h.error for h in handles if h.error is not None), None)
        if crashed is not None:  # not a ToolError (those are retried and recorded): it propagates, unjoined,
            raise crashed  # so the file reads as a crash does and a resume takes the calls up again
        if any(h.value.state == S.PAUSED for h in handles):  # left unjoined: the next resume takes them up
            return finished(replay(run.journal.path))
        done: list[Outcome] = [h.join() for h in handles]
        failed = next((o for o in done if o.state == S.FAILED), None)
        for o in done:
            list.extend(run.tail, o.checkpoints)
        if failed is not None:
            last = failed.pending or {}
            run.step, run.attempt = last.get("step", run.step), last.get("attempt", 1)
            run.end(S.FAILED, error=failed.error)
            return run.outcome(failed.error)
        run.step, run.attempt = next_step, 1
        return None

    def _resume_group(self, run: Run, rep: Replay) -> Outcome | None:
        """Go on with an open parallel step after a crash: a call that checkpointed is not run again."""
        live = live_calls(self, run, rep)  # the recorded args may hold the marker: the planner gives them back
        slots = threading.BoundedSemaphore(self.max_parallel)
        calls = []
        for c in rep.tail.open_calls:
            if c.joined:
                continue
            planned = live.get(c.step) or Step(c.planned["name"], c.planned["tool"], c.planned["args"])
            call = run.call(c.step, planned)
            extra = {"step": c.step, **c.planned}
            calls.append((c.agent, self._resume_lane, (call, c, slots), extra))
        handles = run.session.agents.start_all(calls)  # every spawn on the file before any call starts
        return self._close(run, handles, rep.tail.open_calls[0].step + len(rep.tail.open_calls))

    def _resume_lane(self, call: Run, c: Call, slots: threading.BoundedSemaphore) -> Outcome:
        """One call of a parallel step, from where its lane stood (as _go_on does for the run)."""
        if c.done and c.checkpoint is not None:
            list.append(call.tail, c.checkpoint)
            return call.outcome()  # (in PLAN, done)
        call.state, call.attempt = c.state, c.attempt
        if c.state == S.FAILED:
            error = (c.last or {}).get("error")
            call.failed_at = {"step": c.step, "attempt": (c.last or {}).get("attempt", c.attempt)}
            return call.outcome(error)
        if c.state == S.PLAN:
            if c.last is not None and c.last.get("from") in (S.ACT, S.VERIFY):  # a retry was decided
                call.attempt = c.last.get("attempt", 1) + 1
                if c.last["from"] == S.ACT and c.intent is not None:  # as _go_on: the same key, what is left of
                    call.reuse = reused_key(c.last, c.intent)  # the wait (its recorded crossing served again)
                    self._backoff(call)
            return self._lane(call, slots)
        if c.intent is None or call.planned is None:
            raise internal(f"call {c.agent} resumed in {c.state} with no intent", call.journal.path)
        call.attempt, call.result, call.result_seq = c.intent.get("attempt", 1), c.result, c.result_seq
        call.intent = {**c.intent, "args": call.planned.args}  # the live args (see replan.py), as a run's resume
        call.shown = check_value("result", c.result)
        if step.reopen(call, c.state, self.contracts[c.intent["tool"]], c.reconcile) == step.WAIT:
            return call.outcome()
        if c.state == S.PAUSED and call.state == S.VERIFY and c.reconcile is not None:  # shown what the operator gave
            call.shown = check_value("result", c.reconcile["result"])
        return self._lane(call, slots)

    def _check_planned(self, planned: Any) -> None:
        if not isinstance(planned, Step):
            if inspect.isawaitable(planned):
                raise unawaited("the planner", planned)
            raise HarnessError(
                f"the planner returned {planned!r}; it must return a Step or None "
                "(or a list of Steps to run in parallel)"
            )
        if planned.tool not in self.tools:
            raise HarnessError(
                f"the planner chose tool {planned.tool!r}, which this executor does not have "
                f"(it has: {', '.join(self.tools) or 'none'})"
            )

    def _ask(self, run: Run, question: Any) -> Outcome:
        return ask(run, question)

    def _retry_or_fail(self, run: Run, error: dict[str, Any], *, backoff: bool = False) -> bool:
        """Record a failed attempt (redacted): re-plan while attempts are left; True when the run FAILED."""
        if run.attempt >= self.retry.max_attempts:
            run.end(S.FAILED, user=("error",), error=error)
            return True
        run.move(S.PLAN, user=("error",), error=error)
        run.attempt += 1
        if backoff:
            self._backoff(run)
        return False

    def _backoff(self, run: Run) -> None:
        """Wait before attempt `run.attempt` of a failed tool call: a recorded draw, a durable wait."""
        policy = self.retry
        if not policy.backoff:
            return
        cap = policy.cap(run.attempt - 1)
        request = {"step": run.step, "attempt": run.attempt, "backoff": policy.backoff, "max_delay": policy.max_delay}

        def draw() -> dict[str, float]:
            delay = random.uniform(0.0, cap)
            return {"delay": delay, "wake": time.time() + delay}

        drawn = run.session.cross("backoff", request, draw)
        _timers.wait_until(run.session, drawn["wake"])

    def _call(self, session: Session, intent: dict[str, Any]) -> Any:
        recorded = served(session, intent)
        if recorded is not NOT_SERVED:
            return recorded
        return invoke(session, spec_of(self.tools[intent["tool"]]).fn, intent, self.retry.timeout)

    def _verify(self, run: Run) -> str | None:
        """None when the verifier vouches for the result, else why not."""
        step = run.planned or Step(run.intent["name"], run.intent["tool"], run.intent["args"])
        try:
            ok = self.verifier(step, run.shown)
        except VerificationFailed as e:
            return str(e) or "rejected by the verifier"
        if ok is True:
            return None
        if ok is False:
            return "rejected by the verifier"
        if inspect.isawaitable(ok):
            raise unawaited("the verifier", ok)
        raise HarnessError(
            f"the verifier returned {ok!r:.200} for step {run.step} ({step.name!r}, tool {step.tool!r}); only True "
            "and False are answers (a forgotten `return` gives None). Return True or False, or raise "
            "VerificationFailed. The run stopped as a crash would: fix the verifier and resume."
        )


def start(ex: Executor, journal: Journal, goal: Any, run_id: str, *, session: Session, **lineage: Any) -> Outcome:
    """Start ex's run of goal in journal (empty) with session: a rerun's or fork's run, on its rewriting journal."""
    return ex._start(journal, goal, run_id, session=session, limit=lineage.pop("budget", None), **lineage)


def go_on(ex: Executor, journal: Journal, session: Session, rep: Replay) -> Outcome:
    """Drive ex's run that rep read on from where it stands: a fork past its seam, on its rewriting journal."""
    return ex._go_on(journal, session, rep)


def _unawaited_tool(tool: str) -> HarnessError:
    """A tool's awaitable that run() got (step.record)."""
    return unawaited(f"tool {tool!r}")
