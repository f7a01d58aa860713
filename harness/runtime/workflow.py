"""Durable functions: `@harness.workflow` makes a plain function (sync or async) a run that resumes, reruns and forks.

A workflow run is a run on the Executor's state machine with the function
in the planner's role, written to the same kind of trace:

- the header names the workflow (`workflow`: `module:qualname`), its
  arguments as the goal (`{"args": [...], "kwargs": {...}}`) and no tools
  (`{}`: each call carries its tool's contract), then INIT -> PLAN;
- each crossing the function makes (`harness.llm`, `now`, `sleep`, ...) is
  a crossing record in PLAN, as a planner's is; each `harness.call` is a
  step (see calls.py);
- the end: PLAN -> DONE with `result` (what the function returned), PLAN ->
  FAILED with `error` (what it raised: `{"type": "module.QualName",
  "message"}`), or PLAN -> PAUSED with the question `interrupt()` asked;
  then the seal.

The function runs on the caller's own thread (`W.run`) or as a coroutine on
the caller's own loop (`await W.arun`), with the run's Session active: no
thread hands it over. `W.run` returns the Outcome: an exception the function
raised ends the run FAILED and is not raised again (`outcome.error` names
its type and message, as Temporal returns a failed workflow's failure).
Harness's own verdicts (a drift, a value that is not JSON, a call of
something not callable, a journal that failed) are raised, with a crash
record when the run had written something (so `harness runs` shows why).
A pause, a question or a verdict raised inside an exception group (a
TaskGroup's: the MCP client's, a framework's) means the same (control.py).

Resume is re-execution (history.py): the function runs again from its
start, what the trace holds is served to it (nothing written, no call made
again) and the first thing the trace does not hold goes live, after the
`resume` record. A finished run returns its outcome and calls nothing.
Guarantees: arguments that do not survive JSON are refused before anything
is written (NotSerializable); a resume that drifts, mismatches or pauses
again writes nothing.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, ParamSpec, TypeVar, cast

from .._errors import (
    BudgetExceeded,
    HarnessError,
    Interrupted,
    JournalError,
    NotATool,
    NotSerializable,
    ReplayDrift,
    ReplayViolation,
    ResumeMismatch,
    TraceCorruption,
    error_of,
    internal,
)
from ..storage import FenceLost
from ..trace import index as _index
from ..trace import state as S
from ..trace.clock import MAIN
from ..trace.journal import Journal
from ..trace.line import canonical, check_value
from ..trace.reader import Replay
from ..trace.redact import Redaction, Rule
from .boundary import Session, deactivate
from .budget import Budget
from .calls import Flow, _flow
from .control import Paused, decisive, verdict
from .fingerprint import code_of_modules
from .history import Recorded, Resumed
from .opener import Opened, check
from .resume import NO_ANSWER, main_event, no_marker_owed, owed_answers, seam, start_over, waits
from .step import Outcome, Run, ask, crash, finished, over_budget, reseal, write_header
from .tasks import numbering
from .tool import is_async_fn

P = ParamSpec("P")
R = TypeVar("R")
NO_BUDGET: Any = object()  # W.run() without budget=
# no crash record: the journal failed, the run drifted, or a bad value was refused before anything was written
_UNRECORDED = (JournalError, ReplayDrift, ReplayViolation, FenceLost, NotSerializable, NotATool)


class Workflow(Generic[P, R]):
    """A function made durable by `@harness.workflow`; `W.run(...)` runs it, `W(...)` just calls it.

    `name` is `module:qualname`, what its traces record (the module by its
    importable name, however the program was launched: module_name); `importable` says
    whether a command (`harness rerun --workflow`, Ray workers) can import
    it by that name (None when it can, else why not: a lambda, a closure).
    """

    def __init__(self, fn: Callable[P, R]):
        if isinstance(fn, Workflow):
            fn = fn.fn
        if not callable(fn):
            raise TypeError(f"@harness.workflow needs a function, not {fn!r:.80}")
        self.fn: Callable[P, R] = fn
        qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        self.name = f"{module_name(getattr(fn, '__module__', None) or '__main__')}:{qualname}"
        self.is_async = is_async_fn(fn)
        self.importable: str | None = None
        if "<lambda>" in qualname:
            self.importable = "it is a lambda"
        elif "<locals>" in qualname:
            self.importable = "it is defined inside a function (a closure or a nested function)"
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<harness.workflow {self.name}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def run(
        self,
        *args: Any,
        trace: str | os.PathLike[str] | None = None,
        runs_dir: str | os.PathLike[str] | None = None,
        resume: bool | str = False,
        durability: str = "flush",
        redact: Redaction | Iterable[Rule] | None = None,
        seal_key: str | bytes | None = None,
        storage_options: dict[str, Any] | None = None,
        answer: Any = NO_ANSWER,
        budget: Budget | Any = NO_BUDGET,
        **kwargs: Any,
    ) -> Outcome:
        """Run the function with args and kwargs as a durable run; returns DONE (`.result`), FAILED or PAUSED.

        `resume=True` finishes the run `trace` holds (TraceMissing when there
        is none), `"auto"` resumes it if it exists, else starts it; `answer`
        answers the question the run paused on; `budget` (`harness.Budget`)
        limits what its live model calls spend across resumes, pausing the
        run before a call that would pass it (None: no limit; any other
        value is the function's own `budget` argument). An async function
        is run with asyncio.run (from code that is not on an event loop;
        else `await W.arun(...)`).
        """
        budget = _budget(budget, kwargs)
        options = _Options(trace, runs_dir, resume, durability, redact, seal_key, storage_options, answer, budget)
        if self.is_async:
            import asyncio  # (only async code loads asyncio, and ssl with it)

            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(self._arun(args, kwargs, options))
            raise HarnessError(f"{self.name} is async and an event loop is running here: `await W.arun(...)`")
        with _Opened(self, args, kwargs, options) as opened:
            return opened.outcome or execute(self, opened.flow, args, kwargs)

    async def arun(
        self,
        *args: Any,
        trace: str | os.PathLike[str] | None = None,
        runs_dir: str | os.PathLike[str] | None = None,
        resume: bool | str = False,
        durability: str = "flush",
        redact: Redaction | Iterable[Rule] | None = None,
        seal_key: str | bytes | None = None,
        storage_options: dict[str, Any] | None = None,
        answer: Any = NO_ANSWER,
        budget: Budget | Any = NO_BUDGET,
        **kwargs: Any,
    ) -> Outcome:
        """run() as a coroutine on the running loop: an async function is awaited there (a plain one is called)."""
        budget = _budget(budget, kwargs)
        options = _Options(trace, runs_dir, resume, durability, redact, seal_key, storage_options, answer, budget)
        return await self._arun(args, kwargs, options)

    async def _arun(self, args: tuple[Any, ...], kwargs: dict[str, Any], options: _Options) -> Outcome:
        with _Opened(self, args, kwargs, options) as opened:
            return opened.outcome or await aexecute(self, opened.flow, args, kwargs)


def _budget(given: Any, kwargs: dict[str, Any]) -> Budget | None:
    """W.run's `budget=`: a harness.Budget (or None: no limit) is the run's; any other value is the function's own
    `budget` argument (a workflow may have one, as it had before runs had budgets), put back among its kwargs."""
    if given is NO_BUDGET or given is None:
        return None
    if isinstance(given, Budget):
        return given
    kwargs["budget"] = given
    return None


def execute(w: Workflow[Any, Any], flow: Flow, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Outcome:
    """Run w's (sync) function in flow, its session active, to its end: DONE, FAILED, PAUSED, or raised."""
    token = flow.run.session.activate(), _flow.set(flow)
    try:
        try:
            value = w.fn(*args, **kwargs)
        except BaseException as e:
            return _raised(flow, e)
        if inspect.isawaitable(value):
            stop = _awaitable(w, value)
            _stopped(flow.run, stop)
            raise stop
        return _returned(flow, value)
    finally:
        _flow.reset(token[1])
        deactivate(token[0])


async def aexecute(w: Workflow[Any, Any], flow: Flow, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Outcome:
    """execute() on the running loop: an async function is awaited (a plain one is called)."""
    token = flow.run.session.activate(), _flow.set(flow)
    try:
        try:
            with numbering():  # its tasks are named by the order it creates them in (tasks.py)
                value: Any = w.fn(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
        except BaseException as e:
            return _raised(flow, e)
        return _returned(flow, value)
    finally:
        _flow.reset(token[1])
        deactivate(token[0])


def run_anywhere(w: Workflow[Any, Any], flow: Flow, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Outcome:
    """execute(), or for an async function aexecute() on a loop of its own (in a thread when this one has one)."""
    if not w.is_async:
        return execute(w, flow, args, kwargs)
    import asyncio  # (only async code loads asyncio, and ssl with it)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(aexecute(w, flow, args, kwargs))
    box: dict[str, Any] = {}

    def own() -> None:
        try:
            box["out"] = asyncio.run(aexecute(w, flow, args, kwargs))
        except BaseException as e:  # raised in the caller's thread
            box["error"] = e

    ctx = contextvars.copy_context()
    t = threading.Thread(target=ctx.run, args=(own,), name="harness-workflow")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return cast(Outcome, box["out"])


def workflow(fn: Callable[P, R]) -> Workflow[P, R]:
    """Make fn (sync or `async def`) a durable function: `fn.run(*args, trace=...)` runs it (see Workflow)."""
    return Workflow(fn)


def _awaitable(w: Workflow[Any, Any], value: Any) -> HarnessError:
    if inspect.iscoroutine(value):
        value.close()
    return HarnessError(f"{w.name} returned an awaitable: run an async workflow with `await W.arun(...)`")


@dataclass(frozen=True, slots=True)
class _Options:
    trace: str | os.PathLike[str] | None
    runs_dir: str | os.PathLike[str] | None
    resume: bool | str
    durability: str
    redact: Redaction | Iterable[Rule] | None
    seal_key: str | bytes | None
    storage_options: dict[str, Any] | None
    answer: Any
    budget: Budget | None


class _Opened:
    """The trace of one W.run, open and locked (opener.Opened): a new run started, a resume ready, or a finished
    run's outcome."""

    def __init__(self, w: Workflow[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any], options: _Options):
        check(durability=options.durability, resume=options.resume, trace=options.trace)
        self.w, self.options = w, options
        self.goal = goal_of(args, kwargs)
        if options.answer is not NO_ANSWER:
            check_value("answer", options.answer)
        self.redact = Redaction.of(options.redact)
        self.outcome: Outcome | None = None
        self.flow: Flow = cast(Flow, None)
        self.opened = Opened(
            options.trace, options.runs_dir, resume=options.resume, answer=options.answer,
            durability=options.durability, redact=self.redact, seal_key=options.seal_key,
            storage_options=options.storage_options,
        )  # fmt: skip

    def __enter__(self) -> _Opened:
        journal = self.opened.__enter__().journal
        try:
            if self.opened.run_id is None:
                self._resume(journal)
            else:
                self._start(journal, self.opened.run_id)
        except BaseException:
            journal.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.opened.__exit__(kind, *exc)

    def _start(self, journal: Journal, run_id: str) -> None:
        """A new run: its header, with the budget it starts with, and its ledger (budget.py)."""
        budget = self.options.budget
        limit = budget.to_json() if budget is not None else None
        self.flow = start(
            journal, self.w.name, self.goal, run_id, redact=self.redact, fsync=journal.fsync, budget=limit
        )
        self.flow.run.session.limit(budget)

    def _resume(self, journal: Journal) -> None:
        path, w, answer = journal.path, self.w, self.options.answer
        try:
            rep, recorded = Recorded.read(path)
        except TraceCorruption as e:
            start_over(journal, e, answer)  # a torn header: never started, a new run in the emptied file
            self._start(journal, uuid.uuid4().hex)
            return
        self.redact = self.redact.as_of(rep.header)  # a trace of 0.3.x: compared and written redacted as then
        journal.redacting(self.redact)
        if rep.workflow is None or not same_workflow(rep.workflow, w.name):
            raise ResumeMismatch(path, "workflow", rep.workflow, w.name)
        if canonical(rep.goal) != canonical(self.redact(self.goal)):
            raise ResumeMismatch(path, "arguments", rep.goal, self.goal)
        asked = rep.tail.asking is not None
        # the function run again is owed every answer it was given: those its interrupt() crossings delivered
        # (served again), then those the trace holds and no crossing delivered yet. An answer given while no
        # question waits is taken only as one of them given again, in place of its redacted record (before the
        # seal's repair: a refusal writes nothing).
        delivered = [i for i, c in enumerate(recorded.crossings) if c.kind == "interrupt" and c.error is None]
        given = [recorded.crossings[i].response for i in delivered] + list(rep.tail.pending_answers)
        owed, answer = owed_answers(rep, answer, asked, self.redact, given)
        journal.digests.update(rep.tail.blobs)
        if rep.complete and rep.seal is None:  # its writer died writing the end: the seal is all that is missing
            self.outcome = reseal(journal, rep)
            return
        if rep.complete or waits(rep, answer):
            self.outcome = finished(rep)  # a finished run (or one waiting for a human) is never appended to
            return
        if recorded.unrevealed is not None:  # a served value's secret cannot be read back: before any live call
            raise recorded.unrevealed
        no_marker_owed(rep, owed, self.redact.marker, "the re-executed function is given again")
        for i, live in zip(delivered, owed, strict=False):  # an answer given again is served in its record's place
            recorded.crossings[i] = replace(recorded.crossings[i], response=live)
        # asked in PLAN: the function asks it again (a pause on the budget asked nothing: its call is made again)
        question = rep.tail.question if rep.state == S.PAUSED and rep.tail.over_budget is None else None
        again = question if question is not None and question["from"] == S.PLAN else None
        session = Resumed(journal, recorded, redact=self.redact, asked=again)
        self.flow = go_on(
            journal, session, rep, fsync=journal.fsync, answer=answer, lazy=True, answers=owed[len(delivered) :]
        )
        # its ledger (budget.py): a resume given no budget keeps the one the run started with
        session.limit(self.options.budget or Budget.recorded(rep.header))


def module_name(module: str) -> str:
    """The importable name of a module, the same whether it was imported, run with `python -m`, or run as a script.

    A script's functions belong to `__main__` (`__mp_main__` in a multiprocessing child), so one workflow would be
    `__main__:research` in one run and `research_agent:research` in another, and their goldens would differ.
    `python -m` leaves the module's real name in `__spec__`; a script has only its file: its name is the file's
    stem, under the packages (folders with `__init__.py`) that hold it. A `__main__` with neither (a REPL,
    `python -c`) or a file no import could name (`my-agent.py`) stays `__main__`: no other launch can name it.
    """
    if module not in ("__main__", "__mp_main__"):
        return module
    main = sys.modules.get(module)
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name not in ("__main__", "__mp_main__"):
        return str(spec.name)
    file = getattr(main, "__file__", None)
    if not file or not file.endswith(".py"):
        return module
    path = os.path.realpath(file)
    parts = [os.path.basename(path)[: -len(".py")]]
    folder = os.path.dirname(path)
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.insert(0, os.path.basename(folder))
        folder = os.path.dirname(folder)
    return ".".join(parts) if all(p.isidentifier() for p in parts) else module


def goal_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A workflow's goal, as its header holds it: `{"args": [...], "kwargs": {...}}` (NotSerializable if not JSON)."""
    goal: dict[str, Any] = check_value("arguments", {"args": list(args), "kwargs": dict(kwargs)})
    return goal


def same_workflow(recorded: str, name: str) -> bool:
    """Whether a trace's workflow is this one: the same `module:qualname`, or the same qualname when one of them
    is named `__main__` (a trace of a script written before module_name, a REPL's workflow)."""
    if recorded == name:
        return True
    (m1, _, q1), (m2, _, q2) = recorded.partition(":"), name.partition(":")
    return q1 == q2 and "__main__" in (m1, m2)


def start(
    journal: Journal,
    name: str,
    goal: Any,
    run_id: str,
    *,
    redact: Redaction,
    fsync: bool,
    session: Session | None = None,
    lineage: dict[str, Any] | None = None,
    entrypoint: str | None = None,
    budget: dict[str, Any] | None = None,
) -> Flow:
    """Write a new workflow run's header (with the budget it starts with) and INIT -> PLAN; the Flow its function
    runs in."""
    entrypoint = entrypoint or (sys.argv[0] if sys.argv and sys.argv[0] else "<python>")
    code = code_of_modules((name.partition(":")[0],))
    write_header(journal, run_id, goal, {}, redact, entrypoint, lineage or {}, workflow=name, code=code, budget=budget)
    journal.give = True  # a tool's result reaches the function with its secrets (kept beside the trace: vault.py)
    run = Run(journal, session or Session(journal, redact=redact), goal, run_id, [], S.INIT)
    run.move(S.PLAN)
    return Flow(run, fsync=fsync)


def go_on(
    journal: Journal,
    session: Session,
    rep: Replay,
    *,
    fsync: bool,
    answer: Any = NO_ANSWER,
    lazy: bool,
    entrypoint: str | None = None,
    answers: Sequence[Any] | None = None,
) -> Flow:
    """The Flow that re-executes the run `rep` read, its history served by `session`.

    lazy (a resume): the seam is owed (Journal.owe()): the `resume` record
    (naming where a torn tail goes), the `answer` given, and PAUSED -> PLAN
    for a question the function asked in PLAN are written with the run's
    first new record, or never. Not lazy (a rerun at a recorded seam): the
    caller wrote the resume record; a question asked in PLAN is left now.
    """
    entrypoint = entrypoint or (sys.argv[0] if sys.argv and sys.argv[0] else "<python>")
    journal.give = True  # as start()
    run = Run(journal, session, rep.goal, rep.run_id, _index.resumed(rep), rep.state)
    run.step, run.attempt = position(rep)
    question = rep.tail.question
    back = rep.state == S.PAUSED and question is not None and question["from"] == S.PLAN
    if back and question is not None:  # where it was asked: the function asks it again there
        run.step, run.attempt = question["step"], question.get("attempt", 1)
    if lazy:
        aside, owed, clocks = seam(rep, answer, entrypoint)  # (_Opened refused an answer when no question waits)
        if back:  # back to PLAN, where the function asks its question again and gets the answer
            moved: dict[str, Any] = {"from": S.PAUSED, "to": S.PLAN, "step": run.step}
            if run.attempt != 1:
                moved["attempt"] = run.attempt
            if clocks is not None:  # one more event of main
                moved["vc"], clocks = main_event(clocks)
            owed.append(("transition", moved, ()))
            run.state = S.PLAN
        elif rep.state == S.INIT:  # killed between its header and INIT -> PLAN (before any spawn): it starts here
            owed.append(("transition", {"from": S.INIT, "to": S.PLAN, "step": 0}, ()))
            run.state = S.PLAN
        if clocks is not None:  # a run with agents: main's first new record follows the resume's own
            session.agents.seam = clocks[MAIN]
        journal.owe(rep.last_seq, rep.tail.crc, rep.tail.end, owed, start=rep.header["ts"], aside=aside)
    elif back or rep.state == S.INIT:
        run.move(S.PLAN, sync=back)
    session.patches.clear()  # the function starts again: it asks again, and the history answers
    session.answers.extend(rep.tail.pending_answers if answers is None else answers)  # (a resume's: as given again)
    if answer is not NO_ANSWER:
        session.answers.append(answer)
    return Flow(run, fsync=fsync)


def position(rep: Replay) -> tuple[int, int]:
    """The step and attempt the run is at, at the end of its trace."""
    last = rep.tail.last or {}
    if last.get("kind") == "checkpoint":
        return last["step"] + 1, 1
    step, attempt = last.get("step", 0), last.get("attempt", 1)
    if last.get("to") == S.PLAN and last.get("from") in (S.ACT, S.VERIFY):  # a failed attempt: the next one
        attempt += 1
    return step, attempt


def _returned(flow: Flow, value: Any) -> Outcome:
    """The function returned value: PLAN -> DONE with it (and the seal)."""
    run = flow.run
    try:
        value = check_value("result", value)  # nothing written for a value that is not JSON
        _at_plan(run)
        run.end(S.DONE, user=("result",), result=value)
    except BaseException as e:
        _stopped(run, e)
        raise
    return Outcome(S.DONE, run.snapshot(), run.id, run.journal.path, result=value)


def _raised(flow: Flow, e: BaseException) -> Outcome:
    """The function raised e: FAILED with its error, PAUSED on a question, or harness's own verdict raised; e
    inside any exception group means what it means bare (control.decisive)."""
    run = flow.run
    raised, e = e, decisive(e)
    if isinstance(e, Paused):
        return cast(Outcome, e.outcome)
    if run.state == S.PAUSED:  # a pause beside real errors: PAUSED is on the file (and the last word), the errors
        raise e from None  # are the caller's
    try:
        if verdict(e) or not isinstance(e, Exception | Interrupted | BudgetExceeded):
            if e is not raised:
                raise e from None  # the group it came in: its other members are in e's note, or dropped
            raise e
        if isinstance(e, BudgetExceeded):  # PAUSED before the call (runtime/budget.py)
            if run.session.checking:
                run.session.settled()
            return over_budget(run, e)
        if isinstance(e, Interrupted):  # asked in PLAN, or by a tool in ACT
            if run.session.checking:
                run.session.settled()
            return ask(run, e.question)
        _at_plan(run)
        error = error_of(e)
        error["message"] = error["message"][:2000]
        run.end(S.FAILED, user=("error",), error=error)
        return Outcome(S.FAILED, run.snapshot(), run.id, run.journal.path, error=error)
    except BaseException as stop:
        _stopped(run, stop)
        raise


def _at_plan(run: Run) -> None:
    """Before the run's end: a re-executed function that stopped where its trace goes on is a ReplayDrift
    (settled()); a function that ends does so in PLAN."""
    if run.session.checking:
        run.session.settled()
    if run.state != S.PLAN:
        raise internal(f"the workflow ended in state {run.state} at step {run.step}", run.journal.path)


def _stopped(run: Run, e: BaseException) -> None:
    """Record why the run stopped (a crash record), when it wrote anything and the journal is not the problem."""
    if isinstance(e, _UNRECORDED) or run.journal.owes:
        return
    if isinstance(e, Exception | KeyboardInterrupt):
        crash(run, e)
