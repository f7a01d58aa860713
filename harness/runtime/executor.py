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

import contextlib
import contextvars
import copy
import functools
import inspect
import os
import random
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from .._errors import (
    BudgetExceeded,
    HarnessError,
    Interrupted,
    JournalError,
    NotSerializable,
    RedactedArgs,
    ReplayDrift,
    ReplayViolation,
    ResumeMismatch,
    ToolError,
    ToolTimeout,
    TraceCorruption,
    TraceExists,
    TraceMissing,
    TraceUnreadable,
    VerificationFailed,
    error_of,
    internal,
)
from ..storage import exists, is_url, join, runs_dir
from ..storage.blobs import THRESHOLD
from ..trace import index as _index
from ..trace import state as S
from ..trace.journal import Journal
from ..trace.line import SCHEMA, a, canonical, check_value
from ..trace.reader import Call, Checkpoint, Replay, replay
from ..trace.redact import Redaction, Rule
from ..trace.remote import open_journal
from ..trace.torn import set_aside
from ..trace.vault import Vault, refused
from . import timers as _timers
from .boundary import Session, deactivate
from .budget import Budget
from .context import AgentState, end_call, reset_key, running_agent, set_agent, set_key, set_run, start_call
from .control import decisive
from .environment import environment
from .fingerprint import code_of
from .resume import NO_ANSWER, RESEAL, GoOn, main_event, marked, plan, reveal_crossings, start_over
from .resume import progress as revealed_progress
from .tasks import numbering
from .tool import Tool, ToolSpec, spec_of


@dataclass(frozen=True, slots=True)
class Step:
    """What the planner wants done next: call `tool` with `args`."""

    name: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.name) is not str or type(self.tool) is not str or type(self.args) is not dict:
            raise TypeError(f"Step needs a str name, a str tool and a dict of args, not {self!r}")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a step gets before the run ends in FAILED, how long to wait between them.

    backoff: after a tool's failed attempt (ToolError or timeout), wait a
    delay drawn uniformly from [0, min(max_delay, backoff * 2 ** (n - 1)))
    before re-planning, n being the attempts failed so far ("full jitter").
    The draw and the wake-up time are a recorded crossing (kind `backoff`):
    a resume waits only what is left, a rerun does not wait. 0 (the default)
    re-plans at once and records nothing. A rejected verification re-plans
    at once.
    timeout: seconds a tool call may take; the tool then runs on a worker
    thread, and a call still running at the limit is a failed attempt
    (ToolTimeout). The thread cannot be stopped: its late result is dropped.
    A plain tool is called again; an idempotent tool again with the SAME
    idempotency key (the timed-out call may have taken effect; the key lets
    the tool dedupe); an unsafe tool is not called again: the run PAUSES on
    it as an operation of uncertain outcome, for `harness reconcile`.
    """

    max_attempts: int = 3
    _: KW_ONLY
    backoff: float = 0.0
    max_delay: float = 60.0
    timeout: float | None = None

    def __post_init__(self) -> None:
        if type(self.max_attempts) is not int or self.max_attempts < 1:
            raise ValueError(f"max_attempts must be an int of at least 1, not {self.max_attempts!r}")
        for name in ("backoff", "max_delay", "timeout"):
            v = getattr(self, name)
            if v is None and name == "timeout":
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0 or v == float("inf"):
                raise ValueError(f"RetryPolicy({name}=...) must be a finite number of seconds >= 0, not {v!r}")
        if self.timeout == 0:
            raise ValueError("RetryPolicy(timeout=0) would fail every call; give seconds > 0, or None for no limit")

    def cap(self, failed: int) -> float:
        """The largest delay after `failed` failed attempts."""
        return float(min(self.max_delay, self.backoff * 2 ** (failed - 1)))


MAX_STEPS = 10_000  # the default step limit: a planner that never says DONE ends FAILED, not with a full disk
_RECORDED: Any = object()  # _continue(): the goal as the trace has it
_INTENT = ("name", "tool", "args", "key")  # the fields of a transition into ACT, beside step and attempt


class _Served(ToolError):
    """A tool's ToolError served from a recording, recorded again exactly as it was."""

    def __init__(self, error: dict[str, Any]):
        super().__init__(error["message"])
        self.error = error


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended (or paused).

    `pending`, for a PAUSED run: the uncertain operation (`seq`, `step`,
    `tool`, `args`) or the question interrupt() asked (`seq`, `step`,
    `state`, `question`). `error`: what ended a FAILED run. `result`: what
    a workflow (`@harness.workflow`) that ended DONE returned, as its trace
    holds it (None for an Executor's run).
    """

    state: str
    checkpoints: Sequence[Checkpoint]  # a tuple; after a resume, a sequence reading older checkpoints on access
    run_id: str
    trace: str
    pending: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    result: Any = None


def write_header(
    journal: Journal,
    run_id: str,
    goal: Any,
    tools: dict[str, Any],
    redact: Redaction,
    entrypoint: str,
    lineage: dict[str, Any],
    workflow: str | None = None,
    code: dict[str, Any] | None = None,
) -> None:
    """Write a new run's header (synced): its goal, its tools' contracts (or its workflow), lineage, environment
    (with the fingerprint of the agent's code, `code`, when it has one)."""
    header = {"schema": SCHEMA, "run_id": run_id, "goal": goal, "tools": tools}
    if workflow is not None:  # a workflow's name; its calls carry their contracts (tools is {})
        header["workflow"] = workflow
    header["redact"] = redact.header()  # the user's rules (not secrets): what a rerun reads back
    header.update(lineage)
    if header["redact"] is None:
        del header["redact"]
    header["env"] = environment(entrypoint)
    if code is not None:
        header["env"]["code"] = code
    if not is_url(journal.path):
        _index.remove(journal.path)  # an index beside a new trace is another trace's
    journal.append("header", header, sync=True, user=("goal",))


def ask(run: _Run, question: Any) -> Outcome:
    """interrupt() was called with no answer waiting: PAUSE on the question."""
    asked_in = run.state
    run.move(S.PAUSED, sync=True, user=("question",), question=question)
    pending = {"seq": run.wrote, "step": run.step, "state": asked_in, "question": question}
    return Outcome(S.PAUSED, run.snapshot(), run.id, run.journal.path, pending=pending)


def over_budget(run: _Run, stop: BudgetExceeded) -> Outcome:
    """A live model call would pass the run's budget (runtime/budget.py): PAUSE before it, `reason` budget. A
    resume of a run paused on its budget that meets it again before writing anything writes nothing: the trace
    stays as it was, PAUSED (the outcome names this budget)."""
    gate = run.session.gate
    if run.journal.owes and gate is not None and gate.paused is not None:
        paused = gate.paused
        pending = {"seq": paused["seq"], "step": paused["step"], "state": paused["from"], "reason": "budget"}
        return Outcome(S.PAUSED, run.snapshot(), run.id, run.journal.path, pending={**pending, "budget": stop.budget})
    if run.lane or run.state not in (S.PLAN, S.VERIFY):
        raise HarnessError(
            f"a model call past the run's budget in {run.state} of step {run.step}, inside a call of a parallel "
            "step or while a step runs: a budget pauses a run only in its planner, verifier or workflow function; "
            "give it room for the parallel step's calls"
        ) from None
    paused_in = run.state
    run.move(S.PAUSED, sync=True, reason="budget", budget=stop.budget)
    pending = {"seq": run.wrote, "step": run.step, "state": paused_in, "reason": "budget", "budget": stop.budget}
    return Outcome(S.PAUSED, run.snapshot(), run.id, run.journal.path, pending=pending)


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
        if durability not in ("flush", "fsync"):
            raise ValueError(f"durability must be 'flush' or 'fsync', not {durability!r}")
        if resume not in (True, False, "auto"):
            raise ValueError(
                f'resume must be True, False or "auto" (resume if the trace exists, else start), not {resume!r}'
            )
        if resume and trace is None:
            raise ValueError("resume=True needs the trace= of the run to resume")
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
        run_id = uuid.uuid4().hex
        path = self.trace
        if path is None:
            folder = runs_dir(self.runs_dir)
            try:
                if not is_url(folder):  # a runs URL on object storage has no folder to make
                    os.makedirs(folder, exist_ok=True)
            except OSError as e:
                raise TraceUnreadable(folder, f"cannot hold runs: {e.strerror}") from None
            path = join(folder, f"{run_id}.jsonl")
        if (self.resume is True or answer is not NO_ANSWER) and not exists(path, storage_options=self.storage_options):
            raise TraceMissing(path)  # Journal.open would create it: a typo would repeat every side effect
        from ..trace.seal import key_of

        key = key_of(self.seal_key)  # a bad key fails before anything is written
        with open_journal(
            path,
            durability=self.durability,
            redact=self.redact,
            blob_threshold=self.blob_threshold,
            storage_options=self.storage_options,
        ) as journal:
            journal.seal_key = key
            if journal.size():
                if not self.resume:
                    raise TraceExists(path)
                return self._resume(journal, goal, answer, budget)
            if answer is not NO_ANSWER:
                raise HarnessError(f"{path}: an answer was given, but the trace holds no run that asked a question")
            return self._start(journal, goal, run_id, budget=budget)

    def _refuse_async(self) -> None:
        """HarnessError before anything is written when run() was given an async planner, verifier or tool."""
        parts: list[tuple[str, Any]] = [("the planner", self.planner), ("the verifier", self.verifier)]
        parts += [(f"tool {n!r}", spec_of(t).fn) for n, t in self.tools.items()]
        for what, fn in parts:
            if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
                raise _async(what)

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
        **lineage: Any,
    ) -> Outcome:
        code = code_of((self.planner,))
        journal.give = True  # the planner's progress holds each result as the tool returned it (see _continue)
        write_header(journal, run_id, goal, self.contracts, self.redact, self.entrypoint, lineage, code=code)
        session = session or Session(journal, redact=self.redact)
        if budget is not None:  # budget hook: the run's ledger (runtime/budget.py)
            session.limit(budget)
        run = _Run(journal, session, goal, run_id, [], S.INIT)
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
        journal.digests.update(rep._tail.blobs)
        journal.blocks[:] = _index.trusted_blocks(path, rep)  # what the mark's writer hashed: the seal takes them
        if not isinstance(todo, GoOn):  # RESEAL: only the missing seal is written; FINISHED: nothing is
            return reseal(journal, rep) if todo == RESEAL else finished(rep)
        # the seam is owed: written with the first record the resumed run appends, in the same write, or never
        # (a resume that pauses again, drifts or is refused writes nothing)
        rep, seam, clocks = todo.rep, todo.seam, todo.clocks
        back = _way_back(rep)
        if back is not None:  # out of PAUSED to where the answered question was asked: owed too (see _continue)
            if clocks is not None:  # one more event of main
                back["vc"], clocks = main_event(clocks)
            seam = [*seam, ("transition", back, ())]
        owed = journal.owe(rep.last_seq, rep._tail.crc, rep._tail.end, seam, start=rep.header["ts"], aside=todo.aside)
        session = Session(journal, todo.served, redact=self.redact)
        session.limit(budget)  # budget hook: its ledger counts the trace's live model calls (runtime/budget.py)
        if clocks is not None:  # every record from here on carries its clock
            session.agents.share(journal, clocks)
        session.answers.extend(todo.answers)  # answers as given: the trace holds them redacted
        # the caller's goal: the trace's may be redacted
        return self._continue(journal, session, rep, goal, owed=owed if back is not None else 0)

    def _continue(
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
        last, intent = rep._tail.last or {}, rep._tail.intent
        goal = rep.goal if goal is _RECORDED else goal
        run = _Run(journal, session, goal, rep.run_id, revealed, rep.state)
        run.index = _index.Writer.after(journal.path, journal.fd, journal.digests, journal.blocks, rep)
        if rep._tail.group:  # a parallel step was open: its calls go on, each from where its lane stands
            run.state, run.step = S.PLAN, rep._tail.group[0].step
            token = session.activate()
            try:
                done = self._resume_group(run, rep)
            finally:
                deactivate(token)
            return done or self._drive(run)
        if run.state == S.PAUSED and rep._tail.answered:  # back to where the question was asked, to ask it again
            if rep._tail.question is None:
                raise internal("an answered run with no question", rep.path, rep.last_seq)
            run.step, run.attempt = rep._tail.question["step"], rep._tail.question.get("attempt", 1)
            back = rep._tail.question["from"]
            if back == S.PLAN:
                if owed:
                    run.state, run.wrote = S.PLAN, owed
                else:
                    run.move(S.PLAN, sync=True)
                return self._drive(run)
            if intent is None:
                raise internal(f"a question asked in {back} with no intent before it", rep.path, rep.last_seq)
            run.intent, run.result, run.shown = intent, rep._tail.result, check_value("result", rep._tail.result)
            run.result_seq = rep._tail.result_seq
            if back == S.ACT:  # the tool is called again, with its live args (see _live_intent)
                run.intent = self._live_intent(run, rep)
                run.move(S.ACT, sync=True, user=("args",), **{k: run.intent[k] for k in _INTENT if k in run.intent})
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
                    run.reuse = _reused_key(last, intent)
                    try:
                        self._backoff(run)  # a crash during the wait: the resume waits what is left
                    except (Exception, KeyboardInterrupt) as e:
                        _crash(run, e)
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
            rep._tail.result,
        )
        run.result_seq = rep._tail.result_seq
        run.shown = check_value("result", rep._tail.result)
        if run.state == S.PAUSED:
            if rep._tail.reconcile is None:  # (_resume returns a PAUSED run that waits for a reconcile as it is)
                raise internal("a paused run resumed with no reconcile and no answer", rep.path, rep.last_seq)
            if rep._tail.reconcile["happened"]:
                run.result, run.shown = (
                    rep._tail.reconcile["result"],
                    check_value("result", rep._tail.reconcile["result"]),
                )
                run.result = run.move(S.VERIFY, sync=True, user=("result",), result=run.result)["result"]
            else:
                run.intent = self._live_intent(run, rep)
                run.move(S.ACT, sync=True, user=("args",), **{k: run.intent[k] for k in _INTENT if k in run.intent})
        elif run.state == S.ACT and self.contracts[intent["tool"]]["effect"] == "unsafe":
            run.move(S.PAUSED, sync=True)
            return finished(replay(journal.path))
        elif run.state == S.ACT:  # the call is made again
            run.intent = self._live_intent(run, rep)
        return self._drive(run)

    def _live_intent(self, run: _Run, rep: Replay) -> dict[str, Any]:
        """The intent a resume calls again: the recorded one, unless redaction put the marker in its args.

        Then the planner is asked again (see _plan_again), and the args of the
        Step it gives are used once they redact to the recorded ones
        (ResumeMismatch if not). A planner that cannot give them back is a
        RedactedArgs: a tool is never called with the marker. A rerun serves
        every call from its recording and needs none of this.
        """
        intent = rep._tail.intent
        if intent is None:
            raise internal("a tool called again with no intent", rep.path, rep.last_seq)
        where = marked(intent["args"], self.redact.marker)
        if where is None or run.session.strict:
            return intent
        tool, step = intent["tool"], intent["step"]
        planned = self._plan_again(run, rep, run.progress, step, tool, where)
        if not isinstance(planned, Step) or planned.tool != tool or self.redact.name(planned.name) != intent["name"]:
            why = f"the planner, asked again, planned {planned!r:.200} instead of step {intent['name']!r}"
            raise RedactedArgs(rep.path, step, tool, where, why)
        self._same_args(rep, step, tool, planned, intent["args"])
        run.planned = planned  # the verifier is shown the live Step
        return {**intent, "args": planned.args}

    def _live_calls(self, run: _Run, rep: Replay) -> dict[int, Step]:
        """The live Step of each call of an open parallel step, when a call the resume makes again holds the
        marker in its recorded args ({} when none does): _live_intent, for the whole list the planner gave.

        A call is made again when its lane is in PLAN, in ACT (an idempotent or
        pure tool), or PAUSED and reconciled as not happened.
        """
        marker, first = self.redact.marker, rep._tail.group[0].step
        again = [
            c
            for c in rep._tail.group
            if not c.joined
            and not c.done
            and (
                c.state == S.PLAN
                or (c.state == S.ACT and self.contracts[c.planned["tool"]]["effect"] != "unsafe")
                or (c.state == S.PAUSED and c.reconcile is not None and not c.reconcile["happened"])
            )
        ]
        found = next(((c, w) for c in again if (w := marked(c.planned["args"], marker)) is not None), None)
        if found is None or run.session.strict:
            return {}
        c, where = found
        tool = c.planned["tool"]
        progress = [ck for ck in run.progress if ck.step < first]  # what the planner had when it planned the list
        planned = self._plan_again(run, rep, progress, c.step, tool, where)
        names = [(x.planned["name"], x.planned["tool"]) for x in rep._tail.group]
        if (
            not isinstance(planned, list | tuple)
            or not all(type(p) is Step for p in planned)
            or [(self.redact.name(p.name), p.tool) for p in planned] != names  # (names are redacted as written)
        ):
            why = f"the planner, asked again, planned {planned!r:.200} instead of the calls {names}"
            raise RedactedArgs(rep.path, c.step, tool, where, why)
        for x, p in zip(rep._tail.group, planned, strict=True):
            self._same_args(rep, x.step, x.planned["tool"], p, x.planned["args"])
        return {x.step: p for x, p in zip(rep._tail.group, planned, strict=True)}

    def _plan_again(
        self, run: _Run, rep: Replay, progress: Sequence[Checkpoint], step: int, tool: str, where: str
    ) -> Any:
        """What the planner plans when asked again with the same goal and progress, the crossings it made
        while planning the step then (rep._tail.planned) served from the trace: none is made live, none written.
        RedactedArgs when it makes another crossing or raises."""
        start, stop = rep._tail.planned
        served = reveal_crossings(Vault(rep.path, self.redact.marker), rep.crossings[start:stop])
        session = Session(None, served, strict=True, redact=self.redact)
        token = session.activate()
        try:
            view = progress if isinstance(progress, Progress | _index.ResumedProgress) else Progress(progress)
            return self.planner(run.goal, view)  # type: ignore[arg-type]  # after a resume, a read-only Sequence
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

    def _same_args(self, rep: Replay, step: int, tool: str, planned: Step, recorded: Any) -> None:
        """ResumeMismatch unless the live args, redacted, are the recorded ones."""
        check_value("args", planned.args, tool=tool, step=step)
        shown = self.redact(planned.args)
        if canonical(shown) != canonical(recorded):
            raise ResumeMismatch(rep.path, f"args of step {step} (tool {tool!r})", recorded, shown)

    def _drive(self, run: _Run) -> Outcome:
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
                    # the step's name as the trace holds it (redacted: a name is text a caller wrote)
                    run.intent = {"name": self.redact.name(planned.name), "tool": planned.tool, "args": planned.args}
                    if self.contracts[planned.tool]["effect"] == "idempotent":
                        run.intent["key"] = f"{run.id}-{run.step}-{run.attempt}"
                        if run.reuse is not None and run.reuse[0] == (planned.tool, canonical(planned.args)):
                            run.intent["key"] = run.reuse[1]  # the call that timed out, again: the same key
                    run.reuse = None
                    # the live call gets run.intent; the trace its args checked and redacted (the journal does it)
                    run.move(S.ACT, sync=planned.tool in self.synced, check=("args",), **run.intent)
                elif run.state == S.ACT:
                    if (run.journal.dirty or run.journal.owes) and run.intent["tool"] in self.synced:
                        run.journal.sync()  # a resumed call: the rule holds too (its resume record goes first)
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
                        run.reuse = _reused_key(error, run.intent)
                        if self._retry_or_fail(run, error, backoff=True):
                            return run.outcome(error)  # the live error; the trace has it redacted
                        continue
                    run.shown = raw  # the tool's own value, for the verifier; the checkpoint keeps a JSON copy
                    try:  # checked, redacted as written, given back whole (give); synced with the next
                        # call's intent or the run's end
                        run.result = run.move(S.VERIFY, check=("result",), result=raw)["result"]
                    except NotSerializable as e:
                        if inspect.isawaitable(raw):
                            raise _async(f"tool {run.intent['tool']!r}", raw) from None
                        tool = run.intent["tool"]
                        raise NotSerializable(e.field, e.where, e.problem, tool=tool, step=run.step) from None
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
            if isinstance(stop, BudgetExceeded):  # budget hook: PAUSED before the call (runtime/budget.py)
                return over_budget(run, stop)
            # the journal's own failure, a re-execution's verdict and the vault's refusal to reveal a checkpoint the
            # planner read have no crash record (a resume refused so writes nothing); a call's failure propagates
            # to the run, which records the crash
            own = isinstance(stop, JournalError | ReplayDrift | ReplayViolation) or refused(stop, run.journal.path)
            if not own and not run.lane and isinstance(stop, Exception | KeyboardInterrupt):
                _crash(run, stop)
            if stop is raised:
                raise
            raise stop from None  # the group it came in: its other members are in e's note, or dropped
        finally:
            if token is not None:
                deactivate(token)
            if run.index is not None:  # the last quiet point's mark: a resume starts there (none if it wrote nothing)
                run.index.close(mark=not run.journal.owes)

    # --- parallel steps ------------------------------------------------------------------------------

    def _parallel(self, run: _Run, steps: list[Any]) -> Outcome | None:
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

    def _lane(self, call: _Run, slots: threading.BoundedSemaphore) -> Outcome:
        with slots:  # at most max_parallel calls in flight; a waiting call has written nothing yet
            return self._drive(call)

    def _close(self, run: _Run, handles: list[Any], next_step: int) -> Outcome | None:
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

    def _resume_group(self, run: _Run, rep: Replay) -> Outcome | None:
        """Go on with an open parallel step after a crash: a call that checkpointed is not run again."""
        live = self._live_calls(run, rep)  # the recorded args may hold the marker: the planner gives them back
        slots = threading.BoundedSemaphore(self.max_parallel)
        calls = []
        for c in rep._tail.group:
            if c.joined:
                continue
            planned = live.get(c.step) or Step(c.planned["name"], c.planned["tool"], c.planned["args"])
            call = run.call(c.step, planned)
            extra = {"step": c.step, **c.planned}
            calls.append((c.agent, self._resume_lane, (call, c, slots), extra))
        handles = run.session.agents.start_all(calls)  # every spawn on the file before any call starts
        return self._close(run, handles, rep._tail.group[0].step + len(rep._tail.group))

    def _resume_lane(self, call: _Run, c: Call, slots: threading.BoundedSemaphore) -> Outcome:
        """One call of a parallel step, from where its lane stood (as _continue does for the run)."""
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
                if c.last["from"] == S.ACT and c.intent is not None:  # as _continue: the same key, what is left of
                    call.reuse = _reused_key(c.last, c.intent)  # the wait (its recorded crossing served again)
                    self._backoff(call)
            return self._lane(call, slots)
        if c.intent is None or call.planned is None:
            raise internal(f"call {c.agent} resumed in {c.state} with no intent", call.journal.path)
        call.attempt, call.result, call.result_seq = c.intent.get("attempt", 1), c.result, c.result_seq
        call.intent = {**c.intent, "args": call.planned.args}  # the live args (see _live_calls), as a run's resume
        call.shown = check_value("result", c.result)
        if c.state == S.PAUSED:
            if c.reconcile is None:
                return call.outcome()
            if c.reconcile["happened"]:
                call.result = c.reconcile["result"]
                call.shown = check_value("result", call.result)
                call.result = call.move(S.VERIFY, sync=True, user=("result",), result=call.result)["result"]
            else:
                call.move(S.ACT, sync=True, user=("args",), **{k: call.intent[k] for k in _INTENT if k in call.intent})
        elif c.state == S.ACT and self.contracts[c.intent["tool"]]["effect"] == "unsafe":
            call.move(S.PAUSED, sync=True)
            return call.outcome()
        return self._lane(call, slots)

    def _check_planned(self, planned: Any) -> None:
        if not isinstance(planned, Step):
            if inspect.isawaitable(planned):
                raise _async("the planner", planned)
            raise HarnessError(
                f"the planner returned {planned!r}; it must return a Step or None "
                "(or a list of Steps to run in parallel)"
            )
        if planned.tool not in self.tools:
            raise HarnessError(
                f"the planner chose tool {planned.tool!r}, which this executor does not have "
                f"(it has: {', '.join(self.tools) or 'none'})"
            )

    def _ask(self, run: _Run, question: Any) -> Outcome:
        return ask(run, question)

    def _retry_or_fail(self, run: _Run, error: dict[str, Any], *, backoff: bool = False) -> bool:
        """Record a failed attempt (redacted): re-plan while attempts are left; True when the run FAILED."""
        if run.attempt >= self.retry.max_attempts:
            run.end(S.FAILED, user=("error",), error=error)
            return True
        run.move(S.PLAN, user=("error",), error=error)
        run.attempt += 1
        if backoff:
            self._backoff(run)
        return False

    def _backoff(self, run: _Run) -> None:
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

    def _verify(self, run: _Run) -> str | None:
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
            raise _async("the verifier", ok)
        raise HarnessError(
            f"the verifier returned {ok!r:.200} for step {run.step} ({step.name!r}, tool {step.tool!r}); only True "
            "and False are answers (a forgotten `return` gives None). Return True or False, or raise "
            "VerificationFailed. The run stopped as a crash would: fix the verifier and resume."
        )


class Progress(list[Checkpoint]):
    """The verified checkpoints so far, as the planner sees them: a list that refuses changes.

    Reading costs what a list's reading costs (len, [i], iteration, slices are
    the list's own); the executor appends through `list.append`. A planner
    that edits it would desynchronise its view from the trace, so any change
    raises TypeError.
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("progress is read only: it is the run's record of verified steps; copy it to change it")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __copy__(self) -> list[Checkpoint]:  # a copy is the planner's own: a plain list
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Checkpoint]:
        return copy.deepcopy(list(self), memo)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled, it comes back as a plain list
        return (list, (list(self),))


def _within(fn: Callable[..., Any], kwargs: dict[str, Any], timeout: float, name: str, session: Session) -> Any:
    """fn(**kwargs) on a worker thread; ToolTimeout when it has not returned after `timeout` seconds.

    The worker sees a session of its own that records nothing (as a tool's
    crossings are not recorded) but shares the run's answers for interrupt():
    a call that outlives its timeout can never write to the trace.
    """
    shadow = Session(None)
    ctx = contextvars.copy_context()

    def enter() -> None:  # in the worker's context: the calling agent's own state is never touched
        set_run(shadow)
        set_agent(AgentState((running_agent() or session.agents.main).name))  # (a lane's name: step-N)
        start_call()  # (a worker's own context: never ended)
        shadow.answers = session.answers

    ctx.run(enter)
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = ctx.run(fn, **kwargs)
        except BaseException as e:  # handed to the caller's thread, raised there
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=work, name=f"harness-tool-{name}", daemon=True).start()
    if not done.wait(timeout):
        raise ToolTimeout(name, timeout)
    if "error" in box:
        raise box["error"]
    return box["value"]


NOT_SERVED: Any = object()  # served(): the call is not in the recording, make it live


def _way_back(rep: Replay) -> dict[str, Any] | None:
    """The transition out of PAUSED back to where an answered question was asked, when that is PLAN or VERIFY
    (the planner or verifier is asked again; into ACT the tool is called again, live, right after it)."""
    question = rep._tail.question
    if rep.state != S.PAUSED or not rep._tail.answered or question is None or question["from"] == S.ACT:
        return None
    back: dict[str, Any] = {"from": S.PAUSED, "to": question["from"], "step": question["step"]}
    if question.get("attempt", 1) != 1:
        back["attempt"] = question["attempt"]
    return back


def served(session: Session, intent: dict[str, Any]) -> Any:
    """A tool call's recorded result when the session serves it (a rerun, a resume's recording), else NOT_SERVED.

    A recorded ToolError is raised again, as it was recorded.
    """
    if session.strict or (session.recorded and session.serving):  # recorded args are redacted: so is what
        recorded = session.serve("tool", session.redact({"tool": intent["tool"], "args": intent["args"]}))
        if recorded is not None:  # they are compared with
            if recorded.error is not None:
                raise _Served(recorded.error)
            return recorded.response
    return NOT_SERVED


def invoke(session: Session, fn: Callable[..., Any], intent: dict[str, Any], timeout: float | None = None) -> Any:
    """Call a tool live for its intent: its args, and its `idempotency_key` when the intent has a key.

    `timeout`: see RetryPolicy (the call then runs on a worker thread).
    """
    with _InCall(session, intent.get("key")):
        if timeout is not None:
            return _within(fn, _kwargs(intent), timeout, intent["tool"], session)
        return fn(**_kwargs(intent))


async def ainvoke(session: Session, fn: Callable[..., Any], intent: dict[str, Any]) -> Any:
    """invoke() for a workflow's `harness.acall`: awaits what the tool returns when it is awaitable."""
    with _InCall(session, intent.get("key")):
        out = fn(**_kwargs(intent))
        return await out if inspect.isawaitable(out) else out


def _kwargs(intent: dict[str, Any]) -> dict[str, Any]:
    kwargs = dict(intent["args"])
    if "key" in intent:
        kwargs["idempotency_key"] = intent["key"]
    return kwargs


class _InCall:
    """A live tool call of the current agent, for its length: in flight (a helper thread's crossings belong to
    it, they are no strays), counted as a live call, its own crossings not recorded (they belong to it), and
    its idempotency key (or None) what `harness.idempotency_key()` returns inside it."""

    __slots__ = ("key", "keyed", "me", "session", "token")

    def __init__(self, session: Session, key: str | None = None):
        self.session, self.key = session, key

    def __enter__(self) -> None:
        session = self.session
        self.me = me = session.agent()
        session.agents.enter_call(me)
        session.count_live(me)
        self.token = start_call()
        self.keyed = set_key(self.key)

    def __exit__(self, *exc: object) -> None:
        reset_key(self.keyed)
        end_call(self.token)
        self.session.agents.leave_call(self.me)


def _reused_key(error: dict[str, Any], intent: dict[str, Any]) -> tuple[tuple[str, bytes], str] | None:
    """After an idempotent call timed out: (its call, its key), for the next attempt of the same call."""
    error = error.get("error", error) if "from" in error else error  # a transition record, or the error itself
    if not isinstance(error, dict) or error.get("type") != "ToolTimeout" or "key" not in intent:
        return None
    return (intent["tool"], canonical(intent["args"])), intent["key"]


def _crash(run: _Run, e: BaseException) -> None:
    """Record why the run stopped (a `crash` record) before the exception propagates; never masks it."""
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-5))
    error = error_of(e)
    error["message"] = error["message"][:2000]
    fields = {"state": run.state, "step": run.step, "attempt": run.attempt, "error": error, "traceback": tb[-4000:]}
    with contextlib.suppress(HarnessError, OSError):  # the journal is the problem (or refuses): the exception says why
        run.journal.append("crash", fields, sync=True, user=("error", "traceback"))


def _async(what: str, made: Any = None) -> HarnessError:
    """The error for an async planner, verifier or tool given to run(); closes the coroutine it made."""
    if inspect.iscoroutine(made):
        made.close()  # no "coroutine was never awaited" warning on top of this error
    return HarnessError(
        f"{what} is async, and run() calls it without awaiting it: use `await executor.arun(goal)` "
        "for async planners, verifiers and tools, or make it a plain def"
    )


# a checkpoint record makes S.CHECKPOINT_MOVES from VERIFY: checked against the table once, here
_CHECKPOINT_FROM_VERIFY = [S.check(a, b) for a, b in zip((S.VERIFY, *S.CHECKPOINT_MOVES), S.CHECKPOINT_MOVES)]  # noqa: B905
if any(_CHECKPOINT_FROM_VERIFY):  # the table and the checkpoint record disagree: a bug, found at import
    raise internal(str(_CHECKPOINT_FROM_VERIFY))
# a resume moves out of these before the state's code runs again (its recorded crossings not yet served again)
_RESUMED_FROM = frozenset({S.PAUSED, S.INIT})


class _Run:
    """A run in progress: where it stands, and the trace it writes.

    `result` is the trace's own copy of the step's result (what the checkpoint
    will hold); `shown` is what the verifier is shown, so that nothing the
    verifier does to it can change the checkpoint.
    """

    __slots__ = (
        "attempt",
        "failed_at",
        "goal",
        "id",
        "index",
        "intent",
        "journal",
        "lane",
        "planned",
        "progress",
        "result",
        "result_seq",
        "reuse",
        "session",
        "shown",
        "state",
        "step",
        "tail",
        "wrote",
    )  # fmt: skip

    def __init__(
        self,
        journal: Journal,
        session: Session,
        goal: Any,
        run_id: str,
        progress: list[Checkpoint] | _index.ResumedProgress,
        state: str,
    ):
        self.journal, self.session, self.goal, self.id = journal, session, goal, run_id
        # the planner's view; `tail` is the list the run appends its checkpoints to (after a resume, the older ones
        # stay in the trace and are read on access)
        self.progress: Progress | _index.ResumedProgress
        if isinstance(progress, _index.ResumedProgress):
            self.progress, self.tail = progress, progress.tail
        else:
            self.progress = self.tail = Progress(progress)
        self.index: _index.Writer | None = None  # the trace's index (trace/index.py), for the run itself
        self.state, self.step, self.attempt = state, 0, 1
        self.intent: dict[str, Any] = {}
        self.planned: Step | None = None
        self.result: Any = None
        self.result_seq = 0  # the record holding result (its transition into VERIFY), which a checkpoint names
        self.wrote = 0  # the seq of the last record this (sub-)run wrote
        self.shown: Any = None
        self.reuse: tuple[tuple[str, bytes], str] | None = None  # a timed-out idempotent call and its key
        self.lane = False  # a call of a parallel step: its own sub-run, which ends at its checkpoint
        self.failed_at: dict[str, Any] | None = None

    def call(self, step: int, planned: Step) -> _Run:
        """The sub-run of one call of a parallel step, in PLAN at its own step."""
        sub = _Run(self.journal, self.session, self.goal, self.id, [], S.PLAN)
        sub.step, sub.planned, sub.lane = step, planned, True
        return sub

    def move(
        self, to: str, *, sync: bool = False, user: tuple[str, ...] = (), check: tuple[str, ...] = (), **fields: Any
    ) -> dict[str, Any]:
        """Write the transition into `to` and take it; returns its fields as written.

        `check` fields must come back equal from JSON (NotSerializable, nothing
        written, the state unchanged) and are returned as the line's own copies;
        those and `user` ones are redacted. A run that ends writes its seal
        with its last record, in one write.
        """
        if to not in S.EDGES[self.state]:
            raise internal(S.check(self.state, to) or to, self.journal.path, self.journal.seq + 1)
        if self.session.checking and self.state not in _RESUMED_FROM:  # the state's code ran: did it all again?
            self.session.settled()
        if self.attempt == 1:  # the first attempt is written by leaving `attempt` out (FORMAT.md)
            written = {"from": self.state, "to": to, "step": self.step, **fields}
        else:
            written = {"from": self.state, "to": to, "step": self.step, "attempt": self.attempt, **fields}
        if to in S.TERMINAL and not self.lane:  # (a call's FAILED is its own end, not the run's)
            self.wrote = self.journal.finish("transition", written, state=to, key=self.journal.seal_key, user=user)
        else:
            self.wrote = self.journal.append("transition", written, sync=sync, check=check, user=user)
            if to == S.VERIFY and "result" in fields:
                self.result_seq = self.wrote
        self.state = to
        return written

    def end(self, to: str, **fields: Any) -> None:
        """Write the run's last record, once every agent it started has ended (and is joined)."""
        if self.lane:  # a call's own end: the run decides after joining every call
            self.failed_at = {"step": self.step, "attempt": self.attempt}
            self.move(to, **fields)
            return
        self.session.agents.settle()
        self.check_session()
        self.move(to, **fields)

    def too_many(self, name: str, max_steps: int) -> Outcome:
        """End the run FAILED: the planner planned a step past the limit."""
        error = {
            "type": "MaxSteps",
            "message": f"the planner planned step {max(self.step, max_steps)} ({name!r}) after "
            f"{max_steps} steps, the limit (Executor(max_steps=...), None for no limit)",
            "max_steps": max_steps,
        }
        self.end(S.FAILED, user=("error",), error=error)
        return self.outcome(error)

    def check_session(self) -> None:
        """Raise what went wrong in agent code that swallowed it (a stray thread's crossing, say)."""
        if self.session.failure is not None:
            raise self.session.failure

    def checkpoint(self) -> None:
        """Write the checkpoint record: the moves VERIFY -> CHECKPOINT -> PLAN, vouching for the result.

        Neither the result nor the step's name is copied: the result is the
        record just written before the verifier ran (result_seq), which
        follows the intent naming the step. The checkpoint the planner gets
        holds the result as the tool returned it (a JSON copy), secrets and
        all: the trace holds it redacted, its secrets kept beside it.
        """
        if self.state != S.VERIFY:  # the table allows the moves from VERIFY (_CHECKPOINT_FROM_VERIFY)
            raise internal(f"a checkpoint in state {self.state}", self.journal.path, self.journal.seq + 1)
        if self.session.checking:
            self.session.settled()
        seq = self.journal.append("checkpoint", {"step": self.step})
        self.state = S.CHECKPOINT_MOVES[-1]
        list.append(self.tail, Checkpoint(self.step, self.intent["name"], self.result, seq, self.result_seq))
        if self.lane:  # a call ends with its checkpoint: back in PLAN, done
            return
        self.step, self.attempt, self.planned = self.step + 1, 1, None
        if self.index is not None:
            self.index.step()

    def snapshot(self) -> Sequence[Checkpoint]:
        """The progress as an Outcome holds it: a tuple, or after a resume a sequence reading older ones on access."""
        progress = self.progress
        return progress.snapshot() if isinstance(progress, _index.ResumedProgress) else tuple(progress)

    def outcome(self, error: dict[str, Any] | None = None) -> Outcome:
        return Outcome(self.state, self.snapshot(), self.id, self.journal.path, self.failed_at, error)


def reseal(journal: Journal, rep: Replay) -> Outcome:
    """Write the seal of a run that ended but whose writer died writing its seal (a torn one is set aside)."""
    aside = set_aside(rep.path, rep._tail.end) if rep.torn_tail else None
    seal = journal.seal_fields(rep._tail.end, state=rep.state, key=journal.seal_key)
    if aside:
        seal["set_aside"] = os.path.basename(aside)
    start = rep.header["ts"]  # (written over the torn seal)
    journal.continue_after(rep.last_seq, rep._tail.crc, rep._tail.end, ("seal", seal), start=start, sync=True)
    return finished(replay(rep.path))


def finished(rep: Replay) -> Outcome:
    """The outcome a trace records, for a run that needs nothing more done."""
    error = (rep._tail.last or {}).get("error") if rep.state == S.FAILED else None
    checkpoints = tuple(rep.checkpoints) if is_url(rep.path) else _index.ResumedProgress(rep.checkpoints, ())
    result = rep.returned if rep.state == S.DONE else None
    return Outcome(rep.state, checkpoints, rep.run_id, rep.path, pending=rep.pending, error=error, result=result)
