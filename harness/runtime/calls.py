"""Tool calls with effects inside a workflow: `harness.call(tool, **kwargs)` and `await harness.acall(...)`.

Inside a workflow run (`@harness.workflow`) each call is one step of the
state machine, written by step.py as an Executor's step is: PLAN -> ACT (the intent: `name` and `tool`
are the tool's name, `args`, `key` for an idempotent tool, and the tool's
`contract`, since a workflow's tools are not known when it starts), the
call, ACT -> VERIFY (`result`), the checkpoint. An exception the tool raises
is the step's failed attempt (ACT -> PLAN with its `error`) and is raised at
the call site: the function may catch it and call again (the next attempt of
the same step) or move on. What the call returns is the tool's value as a
JSON round trip gives it back (tuples become lists), secrets and all: the
trace holds them redacted, and keeps them encrypted beside it
(trace/vault.py), so a live run and its re-execution see the same value.

Every rule of an Executor's tool step holds: the intent is on the file
before the call (and fsynced for an idempotent or unsafe tool, or for every
tool with durability="fsync"); after a crash the resumed function, reaching
the same call, makes an idempotent call again with the same key and an
at-least-once one again, and never makes an unsafe one blindly: the run
PAUSES (ACT -> PAUSED) until `harness reconcile` says whether it happened.
An async tool whose spec has a `recheck` (an MCP tool: is the server's tool
still the one the trace listed?) is asked first; a reason it gives pauses
the run the same way (ACT -> PAUSED with the `reason`) instead of the call.
A call the trace holds whole returns its recorded result (or raises its
recorded error) and writes nothing. A recorded call met with another
contract is a ResumeMismatch; within one run a tool name keeps one contract.

Tool steps of one run go one at a time: sync calls under a lock, async ones
under an asyncio.Lock, in the order they reach it; crossings (model calls)
run concurrently. A call from a spawned agent is refused (call tools from
the workflow's own code). Outside a workflow run, or inside another call,
`call` just calls the tool, as boundaries do (an idempotent tool with a
fresh `idempotency_key`: nothing will make that call again).
"""

from __future__ import annotations

import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from .._errors import HarnessError, ResumeMismatch, error_of, internal
from ..trace import state as S
from ..trace.clock import MAIN
from ..trace.line import canonical, check_value
from ..trace.reader import replay
from ..trace.tasks import TASK
from . import step
from .boundary import ANY, _Hold, _may_hold, patiently, rebuild
from .context import current_run, in_call, running_agent
from .control import Paused, decisive
from .history import STEP, Item, Serving, Step
from .step import NOT_SERVED, Run, _Served, ainvoke, finished, invoke, served
from .tasks import current as current_task
from .tool import ToolSpec, spec_of

if TYPE_CHECKING:
    import asyncio


class Flow:
    """A workflow run in progress: its Run (state, step, attempt, trace), its session when that serves a
    history (a re-execution), the contracts its tools have had, and the locks that keep its tool steps one at
    a time."""

    __slots__ = ("alock", "contracts", "fsync", "lock", "run", "serving")

    def __init__(self, run: Run, *, fsync: bool):
        self.run, self.fsync = run, fsync
        self.serving = run.session if isinstance(run.session, Serving) else None
        self.contracts: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.alock: asyncio.Lock | None = None


_flow: contextvars.ContextVar[Flow | None] = contextvars.ContextVar("harness_workflow", default=None)


class _Given:
    """A step's start that decided its outcome: the value to return, or the error to raise (no live call)."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error

    def give(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _here(spec: ToolSpec) -> Flow | None:
    """The workflow run this call is a step of; None when it is a plain call (no run, or inside another call)."""
    flow = _flow.get()
    if flow is None or current_run() is not flow.run.session or in_call():
        return None
    agent = running_agent()
    if agent is not None and agent.name != MAIN:
        raise HarnessError(
            f"harness.call({spec.name}) from agent {agent.name!r}: a workflow's tool calls are its steps, made from "
            "the workflow's own code (its main agent). Return what the agent found and call the tool from there"
        )
    return flow


def stepping() -> bool:
    """Whether a harness.call made here would be a step of a workflow run (not a plain call)."""
    flow = _flow.get()
    return flow is not None and current_run() is flow.run.session and not in_call()


def call(tool: Any, /, **kwargs: Any) -> Any:
    """Call `tool(**kwargs)` as a step of the workflow run in progress (see the module docstring); its result."""
    spec = spec_of(tool)
    flow = _here(spec)
    if spec.is_async:
        raise HarnessError(f"tool {spec.name!r} is async: call it with `await harness.acall(...)`")
    if flow is None:
        return spec.fn(**_plain(spec, kwargs))
    if flow.alock is not None and flow.alock.locked():
        raise HarnessError(
            f"harness.call({spec.name}) while an `await harness.acall(...)` of the same run is in flight: in async "
            "code call every tool with `await harness.acall(...)`, so their steps go one at a time"
        )
    with flow.lock:
        item = flow.serving.take_held(STEP, spec.name, _shown(flow, spec, kwargs)) if flow.serving is not None else None
        intent = _begin(flow, spec, kwargs, item)
        if not isinstance(intent, _Given):
            intent = _recorded(flow, intent)
        if isinstance(intent, _Given):
            return intent.give()
        try:
            raw = invoke(flow.run.session, spec.fn, intent)
        except BaseException as e:  # a question (the run pauses in ACT: the workflow's end handles it), or a failure
            _raised(flow, e)
            raise
        return _done(flow, raw)


async def acall(tool: Any, /, **kwargs: Any) -> Any:
    """call() for async code: `await`s the tool when it is async (a plain one is called as it is)."""
    spec = spec_of(tool)
    flow = _here(spec)
    if flow is None:
        out = spec.fn(**_plain(spec, kwargs))
        return await out if inspect.isawaitable(out) else out
    item, session, mine = None, flow.run.session, None
    if flow.serving is not None:  # a re-execution: taken by what it is, sibling tasks taking theirs meanwhile
        shown = _shown(flow, spec, kwargs)
        item = await flow.serving.atake_held(STEP, spec.name, shown)
        if item is None and session.strict:  # a rerun: this call's intent goes where the recording has it
            # (its own task's: a sibling's equal call, recorded elsewhere, would move it; see Session.whose)
            mine = _intent_of(spec.name, shown, current_task() if session.tagged else ANY)
    await _in_turn(flow, item, mine)
    try:
        in_flight = item is not None and item.step is not None and item.step.state == S.ACT
        intent = _begin(flow, spec, kwargs, item)
        if not isinstance(intent, _Given):
            if session.strict:  # a rerun: sibling crossings the recording has while the call ran go first
                await session.aturn(_outcome)
            intent = _recorded(flow, intent)
        if isinstance(intent, _Given):
            return intent.give()
        try:
            if in_flight and spec.recheck is not None:  # made again: only if the tool is still the one it was
                await _recheck(flow, spec.recheck)  # (its failure is the attempt's, as the call's would be)
            raw = await ainvoke(session, spec.fn, intent)
        except BaseException as e:
            _raised(flow, e)
            raise
        return _done(flow, raw)
    finally:
        cast("asyncio.Lock", flow.alock).release()


async def _in_turn(flow: Flow, item: Item | None, mine: Callable[[dict[str, Any]], bool] | None) -> None:
    """Take the run's step lock once this call's turn came.

    A new call of a resumed run (`item` None) waits while the call the trace
    left open is not gone on with: a sibling task took it and goes first (the
    run is in that call's state until then); that call (`item`, open) waits
    until the sibling tasks took every other call the trace holds (it is gone
    on with once the function did all it did before it). In a rerun (`mine`: the
    recording's intent of this call), a call waits until the recording's next
    record is its intent, so that what a sibling task wrote before it then is
    written before it again (and two equal calls in flight each take their
    own). A wait ends once nothing was served for HOLD_QUIET seconds: what the
    call writes then says what differs. Never a hang.
    """
    import asyncio  # (only async code loads asyncio, and ssl with it)

    session = flow.run.session
    if flow.alock is None:
        flow.alock = asyncio.Lock()

    def ready() -> bool:
        if item is None:
            return flow.run.state == S.PLAN and (mine is None or session.turn(mine))
        return item.step is None or item.step.over or not (flow.serving is not None and flow.serving.mine())

    def attempt() -> None:
        if not ready() and _may_hold.get():
            raise _Hold

    came = True
    while True:
        if not ready():
            await patiently(session, attempt)
            came = ready()
        await flow.alock.acquire()
        if not came or ready():
            return
        flow.alock.release()  # a sibling took the turn meanwhile


def _intent_of(tool: str, args: Any, task: str | object | None) -> Callable[[dict[str, Any]], bool]:
    """Whether a recorded record is the intent of a call of tool with args (as written: redacted) made by task
    (any task when ANY: a recording that names none, or args with nothing redacted)."""
    return lambda r: (
        r["kind"] == "transition"
        and r["to"] == S.ACT
        and r.get("tool") == tool
        and r["args"] == args
        and (task is ANY or r.get(TASK) == task)
    )


def _outcome(record: dict[str, Any]) -> bool:
    """Whether a recorded record is the outcome of the tool step in flight (the only one: steps take the lock)."""
    return record["kind"] == "transition" and record.get("from") == S.ACT


def _plain(spec: ToolSpec, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A plain call's arguments: an idempotent tool gets a key of its own (no run will make the call again)."""
    if spec.contract["effect"] == "idempotent":
        return {**kwargs, "idempotency_key": step.plain_key()}
    return kwargs


def _shown(flow: Flow, spec: ToolSpec, kwargs: dict[str, Any]) -> Any:
    """A call's args as its intent writes them (checked: NotSerializable; redacted), to match a recorded call."""
    return flow.run.session.redact(check_value("args", kwargs, tool=spec.name, step=flow.run.step))


def _begin(flow: Flow, spec: ToolSpec, kwargs: dict[str, Any], item: Item | None) -> dict[str, Any] | _Given:
    """Start a step: the recorded call `item` served or gone on with, or a new call's intent written; then the
    caller asks `_recorded()` whether a rerun serves its outcome."""
    run = flow.run
    contract = spec.contract
    known = flow.contracts.get(spec.name)
    if known is None:
        flow.contracts[spec.name] = contract
    elif known is not contract and known != contract:
        raise HarnessError(
            f"tool {spec.name!r} is called with contract {contract!r} after {known!r} in this run: a tool name keeps "
            "one contract within a run (its trace could not tell the two apart). Give the two tools distinct names; "
            "nothing was written"
        )
    if item is not None:
        held = item.step
        if held is None:
            raise internal(f"a served {item.space} is no call", run.journal.path, item.seq)
        if canonical(held.contract) != canonical(contract):
            what = f"contract of tool {spec.name!r} (the call at seq {item.seq})"
            raise ResumeMismatch(run.journal.path, what, held.contract, contract)
        return _reopen(flow, held, kwargs)
    if run.state != S.PLAN:
        raise internal(f"a tool call in state {run.state} at step {run.step}", run.journal.path, run.journal.seq)
    effect = contract["effect"]
    task = current_task() if run.session.naming else None  # a task other than the root: named (trace/tasks.py)
    made = step.intent(run, spec.name, kwargs, effect, task=task, contract=contract)
    run.planned = None
    step.open(run, made, sync=flow.fsync or effect != "at-least-once")
    return made


def _recorded(flow: Flow, intent: dict[str, Any]) -> dict[str, Any] | _Given:
    """A call whose intent is written: its result served by a rerun's recording, or the intent to call live."""
    session = flow.run.session
    if not session.strict:  # a run or a resume: a call is served from its history (_begin), never from here
        return intent
    try:
        recorded = served(flow.run.session, intent)
    except _Served as e:
        _failed(flow, e.error)
        return _Given(error=rebuild(e.error))
    if recorded is not NOT_SERVED:
        return _Given(_done(flow, recorded))
    return intent


def _reopen(flow: Flow, held: Step, args: dict[str, Any]) -> dict[str, Any] | _Given:
    """A call the history holds: its recorded outcome, or the call the trace left open, gone on with (step.reopen)."""
    run = flow.run
    if held.state == "done":
        return _Given(check_value("result", held.result))
    if held.state == "failed":
        return _Given(error=rebuild(held.error or {"type": "ToolError", "message": "(no error recorded)"}))
    recorded = held.intent
    made: dict[str, Any] = {k: recorded[k] for k in step.REPEATED if k in recorded}
    made["args"] = args  # the live args (they redact to the recorded ones: matched so)
    run.intent, run.planned, run.result = made, None, held.result
    asked = held.state == S.PAUSED and held.question is not None
    if held.state == S.ACT and held.contract["effect"] != "unsafe":
        run.session.settled()  # the call is made again: only once the function did all it did before it
    todo = step.reopen(run, held.state, held.contract, held.reconcile, asked=asked)
    if todo == step.CHECK:  # its result is on the file (or the operator's): only the checkpoint is missing
        result = held.reconcile["result"] if held.reconcile is not None and held.state == S.PAUSED else held.result
        run.checkpoint()
        return _Given(check_value("result", result))
    if todo == step.WAIT:
        if held.state == S.PAUSED:
            raise internal("a call paused and not reconciled was resumed", run.journal.path, run.journal.seq)
        raise Paused(finished(replay(run.journal.path)))  # in flight at the crash, unsafe: never made again blindly
    step.durable(run, flow.fsync or held.contract["effect"] != "at-least-once")  # the resume's seam before the call
    return made  # made again (an idempotent tool with the same key)


async def _recheck(flow: Flow, recheck: Callable[[], Awaitable[str | None]]) -> None:
    """Before a call in flight at the crash is made again: a reason from `recheck` pauses the run there (ACT ->
    PAUSED with the `reason`, for harness reconcile) instead."""
    reason = await recheck()
    if reason is not None:
        run = flow.run
        run.move(S.PAUSED, sync=True, reason=reason)
        raise Paused(finished(replay(run.journal.path)))


def _done(flow: Flow, raw: Any) -> Any:
    """The call returned raw: its result on the file (ACT -> VERIFY), then its checkpoint; the result as the
    trace gives it back (a JSON round trip; its secrets kept beside the trace), which is what a resumed run is
    served."""
    run = flow.run
    step.record(run, raw, _returned_awaitable)
    run.checkpoint()
    return run.result


def _raised(flow: Flow, e: BaseException) -> None:
    """The tool raised e: a real error (inside any exception group: control.decisive) is the step's failed
    attempt; a question, a pause or a KeyboardInterrupt leaves the step in ACT for the workflow's end."""
    e = decisive(e)
    if isinstance(e, Exception):
        _failed(flow, error_of(e))


def _failed(flow: Flow, error: dict[str, Any]) -> None:
    """The call raised: the step's failed attempt (ACT -> PLAN with its error); the caller raises it."""
    step.failed(flow.run, error)


def _returned_awaitable(tool: str) -> HarnessError:
    """A tool's awaitable that harness.call got (step.record)."""
    return HarnessError(f"tool {tool!r} returned an awaitable: call it with `await harness.acall(...)`")
