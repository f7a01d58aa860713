"""One step of the state machine, for every door: the Executor's tool steps, `harness.call`/`acall` (and through
them `@harness.tool`, MCP tools and the framework doors' tool calls).

A step's life, on the file (docs/ARCHITECTURE.md draws it):

    PLAN --open()--> ACT --the call: served | answered | live--> VERIFY --Run.checkpoint()--> PLAN
                      |  record(): the result, checked and redacted
                      +--> PLAN (the attempt's error: failed(), or the Executor's retry) or FAILED
                      +--> PAUSED (in flight at a crash and unsafe, timed out and unsafe, its tool gone):
                           reopen() after a reconcile: VERIFY (it happened) or ACT again (it did not)

- `intent()` makes what the transition into ACT holds (the idempotency key, made here only: `key()`);
  `open()` writes it before anything is called (fsynced for a declared tool, or with durability="fsync");
- `served()` is the recorded outcome a rerun (or a resume's recording) serves; `invoke()`/`ainvoke()` make
  the call live, with the key and the context a tool reads (`harness.idempotency_key()`, in_call());
- `record()` writes the result (ACT -> VERIFY); a value that is not JSON writes nothing and leaves the step
  open; `Run.checkpoint()` vouches for it;
- `reopen()` goes on with a step a trace left open, by its state and contract: the same rule for an
  Executor's run, a call of its parallel step and a workflow's call.

`Run` is a run in progress (where it stands, the journal it writes); `Outcome` how it ended; `write_header()`,
`ask()`, `crash()`, `reseal()` and `finished()` its other records and ends.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import inspect
import os
import threading
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from .._errors import BudgetExceeded, HarnessError, NotSerializable, ToolError, ToolTimeout, error_of, internal
from ..storage import is_url
from ..trace import index as _index
from ..trace import state as S
from ..trace.journal import Journal
from ..trace.line import SCHEMA, canonical
from ..trace.reader import Checkpoint, Replay, replay
from ..trace.redact import Redaction
from ..trace.tasks import TASK
from ..trace.torn import set_aside
from .boundary import Session
from .context import AgentState, end_call, reset_key, running_agent, set_agent, set_key, set_run, start_call
from .environment import environment

# what a call made again repeats of its intent (an Executor's intent has no task and no contract)
REPEATED = (TASK, "name", "tool", "args", "key", "contract")
CALL, CHECK, WAIT = "call", "check", "wait"  # reopen(): make the call (again), verify the result on file, wait


def key(run: Run) -> str:
    """The idempotency key of the call the run's step makes now: the same in every process that makes it again."""
    return S.key_of(run.id, run.step, run.attempt)


def plain_key() -> str:
    """The key of an idempotent tool's call made outside any run's step: its own, since nothing will make it again."""
    return uuid.uuid4().hex


def intent(
    run: Run,
    tool: str,
    args: dict[str, Any],
    effect: str,
    *,
    name: str | None = None,
    task: str | None = None,
    contract: dict[str, Any] | None = None,
    reuse: tuple[tuple[str, bytes], str] | None = None,
) -> dict[str, Any]:
    """What the transition into ACT holds: the task that made the call (when named), the step's `name`, the
    `tool`, its `args`, an idempotent tool's `key` (`reuse`: the key of the same call that timed out, kept) and
    the tool's `contract` when the header does not hold it (a workflow's)."""
    made: dict[str, Any] = {} if task is None else {TASK: task}
    made["name"], made["tool"], made["args"] = tool if name is None else name, tool, args
    if effect == "idempotent":
        made["key"] = reuse[1] if reuse is not None and reuse[0] == (tool, canonical(args)) else key(run)
    if contract is not None:
        made["contract"] = contract
    return made


def open(run: Run, made: dict[str, Any], *, sync: bool) -> None:
    """PLAN -> ACT with the intent, on the file before the call: its args checked (NotSerializable, nothing written)
    and redacted on the line's own copy; the call gets the caller's."""
    run.intent = made
    run.move(S.ACT, sync=sync, check=("args",), **made)


def durable(run: Run, synced: bool) -> None:
    """Before a call of a tool whose intent is synced: a resumed call's too, with what the resume owes before it."""
    if synced and (run.journal.dirty or run.journal.owes):
        run.journal.sync()


def record(run: Run, raw: Any, awaitable: Callable[[str], HarnessError]) -> Any:
    """The call returned raw: ACT -> VERIFY with it (checked, redacted as written); the trace's own copy of it,
    which the checkpoint names. Not JSON: nothing written, the step stays open (a resume decides by its contract);
    an awaitable: `awaitable(tool)`, the error of the door that called it without awaiting."""
    try:
        run.result = run.move(S.VERIFY, check=("result",), result=raw)["result"]
    except NotSerializable as e:
        if inspect.isawaitable(raw):
            if inspect.iscoroutine(raw):
                raw.close()  # no "never awaited" warning on top of this error
            raise awaitable(run.intent["tool"]) from None
        raise NotSerializable(e.field, e.where, e.problem, tool=run.intent["tool"], step=run.step) from None
    return run.result


def reopen(
    run: Run,
    state: str,
    contract: dict[str, Any],
    reconcile: dict[str, Any] | None,
    *,
    asked: bool = False,
    live: Callable[[], dict[str, Any]] | None = None,
) -> str:
    """Go on with the step a trace left open in `state` (run.intent is its intent, the live args in it).

    VERIFY: its result is on the file (CHECK). PAUSED: an operator's `reconcile` that it happened moves it to
    VERIFY with the result they gave (CHECK); one that it did not, or the answer to the question it `asked`,
    makes it again, its intent repeated (CALL); with neither it still WAITs. ACT (in flight at the crash): an
    unsafe tool is never called again blindly, the run PAUSES there (WAIT); any other is called again (CALL: an
    idempotent tool with the same key). `live()`, asked only when the call is made again, gives the intent with
    the live args (an Executor's planner asked again for args redaction hid); else run.intent already has them.
    """
    if state == S.VERIFY:
        return CHECK
    if state == S.PAUSED:
        if not asked and reconcile is None:
            return WAIT
        if not asked and reconcile is not None and reconcile["happened"]:
            run.result = run.move(S.VERIFY, sync=True, user=("result",), result=reconcile["result"])["result"]
            return CHECK
        if live is not None:
            run.intent = live()
        run.move(S.ACT, sync=True, user=("args",), **{k: run.intent[k] for k in REPEATED if k in run.intent})
        return CALL
    if state != S.ACT:
        raise internal(f"a step reopened in {state}", run.journal.path, run.journal.seq)
    if contract["effect"] == "unsafe":
        run.move(S.PAUSED, sync=True)
        return WAIT
    if live is not None:
        run.intent = live()
    return CALL


def failed(run: Run, error: dict[str, Any]) -> None:
    """The call raised: the step's failed attempt (ACT -> PLAN with its error, redacted); the next attempt follows."""
    run.move(S.PLAN, user=("error",), error={**error, "message": str(error["message"])[:2000]})
    run.attempt += 1


@dataclass(frozen=True, slots=True)
class Step:
    """What the planner wants done next: call `tool` with `args`."""

    name: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.name) is not str or type(self.tool) is not str or type(self.args) is not dict:
            raise TypeError(f"Step needs a str name, a str tool and a dict of args, not {self!r}")


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
    budget: dict[str, Any] | None = None,
) -> None:
    """Write a new run's header (synced): its goal, its tools' contracts (or its workflow), lineage, the budget it
    starts with (`Budget.to_json()`), environment (with the fingerprint of the agent's code, `code`)."""
    header = {"schema": SCHEMA, "run_id": run_id, "goal": goal, "tools": tools}
    if workflow is not None:  # a workflow's name; its calls carry their contracts (tools is {})
        header["workflow"] = workflow
    header["redact"] = redact.header()  # the user's rules (not secrets): what a rerun reads back
    header.update((k, v) for k, v in lineage.items() if k != "budget")
    if header["redact"] is None:
        del header["redact"]
    budget = budget if budget is not None else lineage.get("budget")  # (a rerun's or fork's: its parent's)
    if budget is not None:
        header["budget"] = budget
    header["env"] = environment(entrypoint)
    if code is not None:
        header["env"]["code"] = code
    if not is_url(journal.path):
        _index.remove(journal.path)  # an index beside a new trace is another trace's
    journal.append("header", header, sync=True, user=("goal",))


def ask(run: Run, question: Any) -> Outcome:
    """interrupt() was called with no answer waiting: PAUSE on the question."""
    asked_in = run.state
    run.move(S.PAUSED, sync=True, user=("question",), question=question)
    pending = {"seq": run.wrote, "step": run.step, "state": asked_in, "question": question}
    return Outcome(S.PAUSED, run.snapshot(), run.id, run.journal.path, pending=pending)


def over_budget(run: Run, stop: BudgetExceeded) -> Outcome:
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


def reused_key(error: dict[str, Any], intent: dict[str, Any]) -> tuple[tuple[str, bytes], str] | None:
    """After an idempotent call timed out: (its call, its key), for the next attempt of the same call."""
    error = error.get("error", error) if "from" in error else error  # a transition record, or the error itself
    if not isinstance(error, dict) or error.get("type") != "ToolTimeout" or "key" not in intent:
        return None
    return (intent["tool"], canonical(intent["args"])), intent["key"]


def crash(run: Run, e: BaseException) -> None:
    """Record why the run stopped (a `crash` record) before the exception propagates; never masks it."""
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-5))
    error = error_of(e)
    error["message"] = error["message"][:2000]
    fields = {"state": run.state, "step": run.step, "attempt": run.attempt, "error": error, "traceback": tb[-4000:]}
    with contextlib.suppress(HarnessError, OSError):  # the journal is the problem (or refuses): the exception says why
        run.journal.append("crash", fields, sync=True, user=("error", "traceback"))


def unawaited(what: str, made: Any = None) -> HarnessError:
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


class Run:
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

    def call(self, step: int, planned: Step) -> Run:
        """The sub-run of one call of a parallel step, in PLAN at its own step."""
        sub = Run(self.journal, self.session, self.goal, self.id, [], S.PLAN)
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
    aside = set_aside(rep.path, rep.tail.end) if rep.torn_tail else None
    seal = journal.seal_fields(rep.tail.end, state=rep.state, key=journal.seal_key)
    if aside:
        seal["set_aside"] = os.path.basename(aside)
    start = rep.header["ts"]  # (written over the torn seal)
    journal.continue_after(rep.last_seq, rep.tail.crc, rep.tail.end, ("seal", seal), start=start, sync=True)
    return finished(replay(rep.path))


def finished(rep: Replay) -> Outcome:
    """The outcome a trace records, for a run that needs nothing more done."""
    error = (rep.tail.last or {}).get("error") if rep.state == S.FAILED else None
    checkpoints = tuple(rep.checkpoints) if is_url(rep.path) else _index.ResumedProgress(rep.checkpoints, ())
    result = rep.returned if rep.state == S.DONE else None
    return Outcome(rep.state, checkpoints, rep.run_id, rep.path, pending=rep.pending, error=error, result=result)
