"""Boundaries: where a run's non-determinism comes in, recorded on the way.

Agent code calls `boundary(kind, request, call)` (or `now()`, `random()`,
`uuid4()`, `llm()`) instead of reading the world directly. Inside a run the
active Session records each crossing's request and response in the trace;
when the Session holds recorded crossings (a resume, a rerun) it serves them
instead, and checks that each request is one recorded.
Outside a run these functions just call through.

Matching: a crossing is served by what it is, not by when it starts. Within
an agent, a new crossing takes the first recorded crossing of that agent not
served yet with the same kind and the same request hash (of what `match`
keeps of both, when the crossing brings a `match`), whatever the order the
two runs started them in (tasks of asyncio.gather start in whatever order
their awaits finish); each recorded crossing is served at most once. Code
that makes its crossings in the recorded order costs one compare with the
head of the agent's queue; only a mismatch searches the rest of it.

Rules kept here:
- a crossing made while another crossing's call runs (a tool reading the
  clock) belongs to the outer one: it is neither recorded nor served;
- an exception raised by a call is recorded as the crossing's outcome,
  then raised again;
- never a silent switch from served to live: a crossing that matches no
  recorded crossing while its agent has recorded ones left is a ReplayDrift
  naming the recorded one it was compared with (the first of the same kind,
  else the next) and the paths that differ. A strict session (rerun, fork)
  never calls live: a missing crossing is a ReplayViolation. A resume calls
  live only once its agent's recording has run out (the crossings the
  crashed process never made), and one recorded crossing the resumed code
  does not make is a ReplayDrift too, raised before the agent writes a record
  of its own next state (`settled()`);
- an async crossing that matches nothing while its agent still has recorded
  crossings waits for the agent's concurrent crossings to take theirs first
  (a gather killed before all its crossings were written, started in another
  order): it is served or made live once they are, and is a ReplayDrift once
  none has been served for HOLD_QUIET seconds. A sync crossing cannot wait:
  it is a ReplayDrift at once;
- a request is redacted (the session's `Redaction`) before it is hashed,
  compared or written, and a response or error before it is written;
- a crossing may bring its own `match`: a function from a request to the
  part of it that must be equal (`harness.http` drops ignored query
  parameters and body fields this way). It is applied to the recorded and
  to the new request alike; the stored `hash` is the hash of that part.
- recorded crossings are served per agent, each agent its own (see
  agents.py); "a crossing made while another crossing's call runs" is per
  call context (a context variable), so concurrent calls of one agent (tasks
  of asyncio.gather) are each recorded, written in the order they started;
  concurrent calls of one agent from two threads are refused;
- a crossing from a thread the run did not start, while no call of the run
  is in flight, raises HarnessError and fails the run (it would be a lie).
"""

from __future__ import annotations

import hashlib
import math
import os
import random as _random
import sys
import threading
import time
import uuid as _uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson

from .._errors import AmbiguousCall, HarnessError, ReplayDrift, ReplayViolation, ToolError, error_of, internal
from ..trace.clock import MAIN
from ..trace.line import check_value
from ..trace.reader import Crossing, request_hash
from ..trace.redact import DEFAULT, Redaction
from ..trace.tasks import TASK
from .agents import Agents
from .budget import Budget, Gate, Ticket
from .context import AgentState, current_run, end_call, enter_run, exit_run, in_call, running_agent, start_call
from .tasks import current as current_task
from .tasks import unordered

if TYPE_CHECKING:
    from ..trace.journal import Journal

T = TypeVar("T")
Match = Callable[[Any], Any]  # a request -> the part of it a recorded crossing must equal
Arrived = Callable[[Any, bool], None]  # (response, served): runs before a crossing's record is written
_may_hold: ContextVar[bool] = ContextVar("harness_may_hold", default=False)  # set by across() around serving
HOLD_QUIET = 1.0  # seconds an unmatched async crossing waits while no crossing of the session is served


class _Hold(BaseException):  # not an Exception: no agent code or error handler may take it
    """serve(): this async crossing matches nothing yet, and its agent has recorded crossings left (see patiently)."""


class Session:
    """The crossings of one run: where new ones are written and recorded ones come from.

    Recorded crossings are kept per agent, each in its own order, so every
    agent is served its own whatever the threads do.
    """

    def __init__(
        self,
        journal: Journal | None,
        recorded: Iterable[Crossing] = (),
        *,
        strict: bool = False,
        redact: Redaction = DEFAULT,
    ):
        self.journal = journal
        self.recorded: dict[str, deque[Crossing]] = {}
        self.tagged = False  # whether the recording names the tasks of its calls (see whose())
        for c in recorded:
            self.recorded.setdefault(c.agent, deque()).append(c)
            if c.task is not None:
                self.tagged = True
        # whether the calls it writes name their tasks: a re-execution goes on in its recording's way (one that
        # names none keeps to it: its calls are matched by what they carry, see whose())
        self.naming = self.tagged or not self.recorded
        self.strict = strict
        # whether every recorded crossing must be made again before its agent moves on (settled()): a resume's,
        # a re-execution's (_rerun sets it)
        self.checking = bool(self.recorded) and not strict
        self.served = 0  # crossings served so far (an unmatched async crossing waits while this moves)
        self.redact = redact
        self.agents = Agents(self)
        self.calls: dict[str, int] = {}  # live calls per agent
        self.failure: HarnessError | None = None  # kept in case agent code swallows it
        self.answers: deque[Any] = deque()  # human answers for interrupt(), oldest first (see interrupt.py)
        self.patches: dict[str, bool] = {}  # harness.patched(): each change id's answer in this run (history.py)
        self.gate: Gate | None = None  # the run's budget, kept before each live model call (budget.py)

    def limit(self, budget: Budget | None) -> None:
        """Keep the run to `budget` (None: no limit): its ledger counts the live model calls the trace holds."""
        self.gate = Gate(budget, self.journal.path) if budget is not None and self.journal is not None else None

    def artifact_served(self, name: str, sha256: str) -> bool:
        """Whether an artifact of these bytes is already in the trace here (a re-executed workflow's): not again."""
        return False

    def event_served(self, space: str, name: str, fields: dict[str, Any]) -> bool:
        """Whether an agent's spawn, exit or join (`space`: the record's kind) is already in the trace here (a
        re-executed workflow's, history.py): not written again."""
        return False

    @property
    def nested(self) -> bool:
        """Whether the code runs inside a call (a tool, a crossing): its crossings belong to that call."""
        return in_call()

    @property
    def live_calls(self) -> int:
        return sum(self.calls.values())

    def agent(self) -> AgentState:
        """The state of the agent whose code is running."""
        return running_agent() or self.agents.main

    def count_live(self, me: AgentState) -> None:
        """One live call by agent me, the current one (only its own thread writes its count)."""
        self.calls[me.name] = self.calls.get(me.name, 0) + 1

    def left(self) -> int:
        """Recorded crossings not served (yet)."""
        return sum(len(q) for q in self.recorded.values())

    def queue(self) -> deque[Crossing]:
        """The current agent's recorded crossings, in its own order."""
        name = (running_agent() or self.agents.main).name
        q = self.recorded.get(name)
        if q is None:
            q = self.recorded[name] = deque()
        return q

    @property
    def serving(self) -> bool:
        """Whether a crossing may be served from the recording (or must be, in a strict session)."""
        return self.strict or bool(self.queue())

    def horizon(self) -> float:
        """The seq from which recorded crossings cannot be served yet (none here; a rerun's next seam)."""
        return math.inf

    def turn(self, mine: Callable[[dict[str, Any]], bool]) -> bool:
        """Whether a re-execution's next record is `mine` in its recording (what an async tool step writes next);
        always here: only a rerun holds records to their recorded place (review/rerun.py)."""
        return True

    async def aturn(self, mine: Callable[[dict[str, Any]], bool]) -> bool:
        """Wait for turn(mine); False if it did not come (here it always has)."""
        return True

    def serve(self, kind: str, request: Any, match: Match | None = None) -> Crossing | None:
        """The recorded crossing to use instead of a live call, or None to call live (see the module docstring)."""
        queue = self.queue()
        horizon = self.horizon()
        task = self.whose(queue, kind, request, match, horizon)
        rec = take(queue, kind, request, match, horizon, task, self.redact.marker)
        if rec is not None:
            self.served += 1
            return rec
        if queue and queue[0].seq < horizon:  # the agent's recording has not run out: never live here
            if _may_hold.get():
                raise _Hold
            drift = self.drift(kind, request, match, queue)
            self.failure = self.failure or drift  # agent code that catches it must not go on as if served
            raise drift
        if self.strict:
            raise ReplayViolation(
                f"a live {kind} call with request {request!r} during a re-execution: the recording "
                "has no crossing left here. Route it through harness, or record the run again.",
                agent=(running_agent() or self.agents.main).name,
            )
        return None

    def whose(
        self, queue: Iterable[Crossing], kind: str, request: Any, match: Match | None, horizon: float = math.inf
    ) -> str | object | None:
        """The task whose recorded crossings answer this one: the task making it, in a recording that names its
        tasks (another task's only when none of its own does and nothing was redacted: take()); ANY in one that
        does not (written before tasks were named), after refusing a crossing of a task other than the root
        whose request the redaction changed and that a recorded one matches: it could be a sibling's, whose
        secrets differ (AmbiguousCall, nothing served). A task whose name may differ from run to run (unordered():
        made by asyncio.as_completed) is refused so in any recording."""
        task = current_task()
        if (unordered() if self.tagged else task is not None) and queue and marked(self.redact.marker, request):
            key = request_hash(kind, request if match is None else match(request))
            alike = [c for c in queue if c.seq < horizon and c.kind == kind and _key(c, match) == key]
            if alike:
                raise self.ambiguous([c.seq for c in alike], f"{kind} crossing", str(task), alike[0].agent)
        return task if self.tagged else ANY

    def ambiguous(self, seqs: list[int], what: str, task: str, agent: str) -> AmbiguousCall:
        """The refusal of a call of task that recorded calls at seqs match only as redacted (see whose())."""
        where = self.journal.path if self.journal is not None else "the trace"
        named = " and ".join(f"seq {s}" for s in seqs[:2]) + (f" (and {len(seqs) - 2} more)" if len(seqs) > 2 else "")
        said = "both match" if len(seqs) > 1 else "matches"
        if unordered():
            why = (
                "asyncio.as_completed() made this task (or the task that made it) from a coroutine, and it numbers "
                "those in the order of a set, by address, which changes from run to run"
            )
            fix = (
                f"{self._left()[0].upper()}{self._left()[1:]}. Make the tasks before as_completed() "
                "(`[asyncio.create_task(c) for c in coros]`), then record a new run (or reconcile this one by hand)"
            )
        else:
            why = "this trace was written before harness named the task of each call"
            fix = (
                f"{self._changed()}. Finish it with the harness version that recorded it (or reconcile by hand), "
                "or start a new run"
            )
        error = AmbiguousCall(
            f"{where}: {named}: a {what} of concurrent task {task} whose args, as redacted, the recorded call at "
            f"{named} {said}; {why}, so harness cannot tell whether that recording is this call's or a sibling's "
            f"with other secrets. {fix}",
            seqs=seqs,
            agent=agent,
        )
        self.failure = self.failure or error
        return error

    def drift(self, kind: str, request: Any, match: Match | None, queue: deque[Crossing]) -> ReplayDrift:
        """The ReplayDrift of a crossing that matches none of queue: compared with its first crossing of the same
        kind (else its first), naming that one's seq and the paths that differ."""
        rec = next((c for c in queue if c.kind == kind and c.seq < self.horizon()), queue[0])
        was, now = (rec.request, request) if match is None else (match(rec.request), match(request))
        fields = differences(was, now) if rec.kind == kind else {"kind": (rec.kind, kind)}
        shown = "; ".join(f"{k}: recorded {a!r}, now {b!r}" for k, a, b in ((k, *v) for k, v in fields.items()))
        who = "" if rec.agent == MAIN else f" (agent {rec.agent})"
        if self.strict:
            said = f"the run drifted from its recording at a {rec.kind} crossing: {shown}"
        else:
            left = sum(1 for c in queue if c.seq < self.horizon())
            said = (
                f"the resumed code made a {kind} crossing that matches none of the {left} its agent recorded and "
                f"has not served yet; compared with this {rec.kind} crossing: {shown}. {self._changed()}"
            )
        return ReplayDrift(f"seq {rec.seq}{who}: {said}", seq=rec.seq, line=rec.seq, fields=fields, agent=rec.agent)

    def settled(self) -> None:
        """Before the current agent writes a record of its next state (a transition, a checkpoint), in a
        re-execution (`checking`): raise what says its code did not do what the recording did, a failure agent
        code swallowed, or a recorded crossing it went past without making (of this agent, and for main of every
        agent not running now). In a resume nothing is written then."""
        if self.failure is not None:
            raise self.failure
        me = self.agent().name
        names = [me] if me != MAIN else [n for n in self.recorded if n == MAIN or n not in self.agents.live]
        for name in names:
            drift = self.unsettled(name)
            if drift is not None:
                raise drift

    def unsettled(self, agent: str) -> ReplayDrift | None:
        """The ReplayDrift of a recorded crossing of agent that the code went past without making, if any (in a
        resume: any not served once the agent's state is done)."""
        queue = self.recorded.get(agent)
        return self.missed(queue[0]) if queue else None

    def missed(self, rec: Crossing) -> ReplayDrift:
        """The ReplayDrift of a recorded crossing the code went past without making."""
        who = "" if rec.agent == MAIN else f" (agent {rec.agent})"
        said = "the re-execution" if self.strict else "the resumed code"
        fix = "(harness diff shows where)" if self.strict else self._changed()
        drift = ReplayDrift(
            f"seq {rec.seq}{who}: {said} moved on without making the {rec.kind} crossing the recording has here "
            f"(request {rec.request!r:.200}). {fix}",
            seq=rec.seq,
            line=rec.seq,
            fields={"request": (rec.request, None)},
            agent=rec.agent,
        )
        self.failure = self.failure or drift
        return drift

    def _changed(self) -> str:
        """What a resume's ReplayDrift tells to do, and what it left."""
        fix = "resume it with the code that recorded it, or start a new run"
        return f"The code changed since the run was recorded: {self._left()}; {fix}"

    def _left(self) -> str:
        """What a re-execution that stops here leaves."""
        if self.journal is not None and not self.journal.owes:
            return "part of the resumed run had gone live before it: the trace keeps what that wrote (a valid trace)"
        return "nothing was called live and nothing was written"

    def enter(
        self, kind: str, request: Any, match: Match | None = None, arrived: Arrived | None = None
    ) -> tuple[Any, Crossing | None]:
        """The request as it is compared and written (redacted), and the crossing to serve, if any.

        `arrived(response, served)` runs before a crossing's record is written (a receive merges its clock).
        """
        check_value("request", request)  # before it is hashed: NotSerializable, not orjson's TypeError
        request = self.redact(request)
        rec = self.serve(kind, request, match)
        if rec is not None and arrived is not None and rec.error is None:
            arrived(rec.response, True)
        return request, rec

    def cross(
        self,
        kind: str,
        request: Any,
        call: Callable[[], T],
        match: Match | None = None,
        *,
        arrived: Arrived | None = None,
    ) -> T:
        if in_call():
            return call()
        request, rec = self.enter(kind, request, match, arrived)
        if rec is not None:
            return outcome(rec)  # type: ignore[no-any-return]
        ticket = self.gate.admit(kind, request) if self.gate is not None else None  # a model call within budget
        me = self.agent()
        self.agents.enter_call(me)
        self.count_live(me)
        token = start_call()  # in this call's context only: a concurrent call of the agent has its own
        try:
            response = call()
        except Exception as e:
            self._record(kind, request, "error", error_of(e), match, ticket)
            raise
        finally:  # also after a KeyboardInterrupt: later crossings must still be recorded
            end_call(token)
            self.agents.leave_call(me)
        if arrived is not None:
            arrived(response, False)
        self._record(kind, request, "response", response, match, ticket)
        return response

    async def across(self, kind: str, request: Any, acall: Callable[[], Awaitable[T]], match: Match | None = None) -> T:
        """cross() for a coroutine: the same recording, serving and strict rerun errors.

        Concurrent crossings of one agent (tasks of asyncio.gather) are each
        recorded, and written in the order they started, whatever order they
        finish in; a resume or a rerun serves each its own by what it is,
        whatever order they start in there (see the module docstring).
        """
        if in_call():
            return await acall()
        try:
            request, rec = self._enter_or_hold(kind, request, match)
        except _Hold:  # see patiently()
            request, rec = await patiently(self, lambda: self.enter(kind, request, match))
        if rec is not None:
            return outcome(rec)  # type: ignore[no-any-return]
        admitted = self.gate.admit(kind, request) if self.gate is not None else None  # a model call within budget
        me = self.agent()
        self.agents.enter_call(me)
        self.count_live(me)
        ticket, me.ticket = me.ticket, me.ticket + 1
        token = start_call()
        try:
            try:
                response = await acall()
            except Exception as e:
                await _turn(me, ticket)
                self._record(kind, request, "error", error_of(e), match, admitted)
                raise
            await _turn(me, ticket)
            self._record(kind, request, "response", response, match, admitted)
            return response
        finally:
            end_call(token)
            self.agents.leave_call(me)
            _done(me, ticket)

    def _enter_or_hold(self, kind: str, request: Any, match: Match | None) -> tuple[Any, Crossing | None]:
        """enter(), raising _Hold instead of ReplayDrift for a crossing that may still wait (see patiently)."""
        token = _may_hold.set(True)
        try:
            return self.enter(kind, request, match)
        finally:
            _may_hold.reset(token)

    def _record(
        self,
        kind: str,
        request: Any,
        outcome: str,
        value: Any,
        match: Match | None = None,
        ticket: Ticket | None = None,
    ) -> None:
        if self.journal is None:
            raise internal(f"a {kind} crossing recorded by a session that writes nothing")
        key = request if match is None else match(request)
        fields = {"boundary": kind, "request": request, "hash": request_hash(kind, key), outcome: value}
        task = current_task() if self.naming else None
        if task is not None:  # a task other than its agent's root made it: named first (see trace/tasks.py)
            fields = {TASK: task, **fields}
        self.journal.append("crossing", fields, check=(outcome,), user=("request",))  # the journal redacts
        if ticket is not None and self.gate is not None:  # its cost as recorded (its usage), for the budget
            self.gate.answered(ticket, {"kind": "crossing", **fields})

    def activate(self) -> Any:
        with _active_lock:
            _active.append(self)
        return (self, enter_run(self))

    def stray(self, kind: str) -> HarnessError:
        """The error for a crossing made on a thread this run did not start; the run fails with it too."""
        e = HarnessError(
            f"a {kind} crossing on thread {threading.current_thread().name!r}, which the run did not start: it "
            "would be neither recorded nor served on rerun. Start the thread with harness.spawn(), "
            "which makes it an agent of the run with its own recorded crossings."
        )
        self.failure = self.failure or e
        return e


async def patiently(session: Session, attempt: Callable[[], T]) -> T:
    """attempt() until it does not raise _Hold, for an async crossing (or a workflow's call) that matched
    nothing recorded while its agent has recorded ones left.

    Concurrent crossings of one agent may start in another order than they
    did when recorded; if the recording process died before all of them
    were written, one it never wrote can start before the recorded ones.
    It waits for them: once they are served it matches nothing left and is
    made live (or raises what a re-execution raises there). While crossings
    are being served it waits on; after HOLD_QUIET seconds with none served
    it is tried once more told not to wait (`_may_hold` unset): a ReplayDrift,
    as a sync crossing is at once. Never a hang.
    """
    import asyncio

    served, since, spins = session.served, time.monotonic(), 0
    while True:
        patient = time.monotonic() - since < HOLD_QUIET
        token = _may_hold.set(patient)
        try:
            return attempt()
        except _Hold:
            if not patient:
                raise internal(
                    "a crossing waited on after HOLD_QUIET", session.journal.path if session.journal else None
                ) from None
        finally:
            _may_hold.reset(token)
        spins += 1
        await asyncio.sleep(0 if spins < 100 else 0.005)  # served siblings take no time: a few turns let them go
        if session.served != served:
            served, since = session.served, time.monotonic()


TURN_WAIT = 30.0  # seconds a finished async crossing waits for the earlier ones of its agent (see _turn)


async def _turn(me: AgentState, ticket: int) -> None:
    """Wait until every async crossing of agent me that started before this one is done, TURN_WAIT at most.

    Written in start order, their place in the file does not depend on which
    call answered first. But an earlier crossing may wait on what this one's caller does next (a
    task that sets an event once its own call returned): after TURN_WAIT
    this one is written out of start order rather than wait forever (a rerun
    still serves each its own, and writes them in the recorded order); never
    a hang.
    """
    if me.written < ticket:
        import asyncio

        future = me.waiting[ticket] = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(future, TURN_WAIT)
        except TimeoutError:
            me.waiting.pop(ticket, None)


def _done(me: AgentState, ticket: int) -> None:
    """Async crossing `ticket` of agent me is done: the next one in start order may write."""
    me.waiting.pop(ticket, None)
    me.finished.add(ticket)
    while me.written in me.finished:
        me.finished.discard(me.written)
        me.written += 1
    future = me.waiting.pop(me.written, None)
    if future is not None and not future.done():
        future.set_result(None)


_active: list[Session] = []  # the sessions of runs in progress in this process
_active_lock = threading.Lock()


def deactivate(token: Any) -> None:
    session, var_token = token
    exit_run(var_token)
    with _active_lock:
        _active.remove(session)


def outcome(rec: Crossing) -> Any:
    """The recorded response, or the recorded exception raised again."""
    if rec.error is None:
        return rec.response
    raise rebuild(rec.error)


def rebuild(error: dict[str, str]) -> BaseException:
    """The exception a crossing recorded, of the same class when that class is already imported.

    Nothing is imported for it: reading a trace must never run code it names.
    """
    module, _, name = error["type"].rpartition(".")
    cls: Any = sys.modules.get(module)
    for part in name.split("."):
        cls = getattr(cls, part, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(error["message"])
        except Exception:  # a constructor that wants more than a message: build it bare
            e = cls.__new__(cls)
            Exception.__init__(e, error["message"])
            try:
                str(e)
                return e
            except Exception:  # its __str__ needs what __init__ would have set
                pass
    return ToolError(f"{error['type']}: {error['message']}")


ANY: Final = object()  # take(): a crossing of any task may answer (a recording that names no task)


def take(
    queue: deque[Crossing],
    kind: str,
    request: Any,
    match: Match | None,
    horizon: float = math.inf,
    task: str | object | None = ANY,
    marker: str | None = None,
) -> Crossing | None:
    """The first crossing of queue (before seq horizon) that answers request, removed from queue; None if none does.

    The head is compared first: code that makes its crossings in the recorded
    order never searches. A crossing answers when it has the same kind and
    the same hash (of what match keeps of both requests), and was made by
    `task` (unless ANY: Session.whose()); when none of task's does and the
    request holds no `marker` (nothing was redacted: equal requests are the
    same call), one of another task does.
    """
    if not queue or queue[0].seq >= horizon:
        return None
    key = request_hash(kind, request if match is None else match(request))
    head = queue[0]
    if head.kind == kind and (task is ANY or head.task == task) and _key(head, match) == key:
        return queue.popleft()
    for i, rec in enumerate(queue):
        if rec.seq >= horizon:
            break
        if i and rec.kind == kind and (task is ANY or rec.task == task) and _key(rec, match) == key:
            del queue[i]
            return rec
    if task is ANY or marker is None or marked(marker, request):
        return None
    return take(queue, kind, request, match, horizon)


def marked(marker: str, value: Any) -> bool:
    """Whether a value as written (redacted) holds the marker: a secret was replaced somewhere in it."""
    return orjson.dumps(marker)[1:-1] in orjson.dumps(value)


def _key(rec: Crossing, match: Match | None) -> str:
    return rec.hash if match is None else request_hash(rec.kind, match(rec.request))


def same(kind: str, rec: Crossing, request: Any, match: Match | None, task: str | object | None = ANY) -> bool:
    """Whether a recorded crossing answers request: equal hashes of both (of what match keeps of both), made by
    task (unless ANY)."""
    if task is not ANY and rec.task != task:
        return False
    if match is None:
        return rec.hash == request_hash(kind, request)
    return request_hash(kind, match(rec.request)) == request_hash(kind, match(request))


def differences(recorded: Any, now: Any, where: str = "") -> dict[str, tuple[Any, Any]]:
    """Paths where two JSON values differ, with both values, as `harness diff` names them.

    Objects are followed key by key (`request.model`), lists of the same
    length item by item (`messages[1].content`); a list whose length changed
    is reported whole, and a key on one side only has None on the other.
    """
    if isinstance(recorded, dict) and isinstance(now, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for k in [*recorded, *(k for k in now if k not in recorded)]:
            out.update(differences(recorded.get(k), now.get(k), f"{where}.{k}" if where else str(k)))
        return out
    if isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now):
        out = {}
        for n, (x, y) in enumerate(zip(recorded, now, strict=True)):
            out.update(differences(x, y, f"{where}[{n}]"))
        return out
    if recorded == now and type(recorded) is type(now):
        return {}
    return {where or "request": (recorded, now)}


def boundary(kind: str, request: Any, call: Callable[[], T], *, match: Match | None = None) -> T:
    """Cross a boundary: record (or, on re-execution, serve) what `call()` returns for `request`.

    `match(request)` (optional) is the part of a request a recorded one must equal to be served.
    """
    session: Session | None = current_run()
    if session is None:
        if _active:  # a run is in progress: is this a thread it did not start?
            stray = _stray(kind)
            if stray is not None:
                raise stray.stray(kind)
        return call()
    return session.cross(kind, request, call, match)


async def aboundary(kind: str, request: Any, acall: Callable[[], Awaitable[T]], *, match: Match | None = None) -> T:
    """boundary() for async code: `await acall()` is recorded (or served) for `request`."""
    session: Session | None = current_run()
    if session is None:
        if _active:  # a run is in progress: is this a thread it did not start?
            stray = _stray(kind)
            if stray is not None:
                raise stray.stray(kind)
        return await acall()
    return await session.across(kind, request, acall, match)


def active() -> bool:
    """Whether a run (an Executor or a Recorder) is recording or serving crossings here."""
    return current_run() is not None


def _stray(kind: str) -> Session | None:
    """The run a crossing from a foreign thread would lie to; None when the crossing may call through.

    While a call (a tool, a model call) is in flight, a helper thread's
    crossings belong to that call, as crossings nested in it do. A thread is
    blamed on a run only when that run is the only one in progress in this
    process: with several (recover(parallel=N), Executors on threads) no one
    can tell whose thread it is, so the crossing itself raises HarnessError
    and no run is failed for it.
    """
    with _active_lock:
        running = [s for s in _active if s.journal is not None]
    if not running or any(s.agents.in_flight() for s in running):
        return None
    if len(running) == 1:
        return running[0]
    raise HarnessError(
        f"a {kind} crossing on thread {threading.current_thread().name!r}, which no run started, while "
        f"{len(running)} runs are in progress in this process: it cannot be told whose it is, so it would be "
        "neither recorded nor served on rerun. Start the thread with harness.spawn() inside its run."
    )


async def allm(request: Any, acall: Callable[[Any], Awaitable[T]]) -> T:
    """llm() for an async model client: `await acall(request)`, recorded with the request."""
    return await aboundary("llm", request, lambda: acall(request))


def now() -> datetime:
    """The current time, as a timezone-aware UTC datetime, recorded."""
    return datetime.fromtimestamp(boundary("now", None, time.time), UTC)


def random() -> float:
    """A float in [0, 1), recorded."""
    return boundary("random", None, _random.random)


def uuid4() -> _uuid.UUID:
    """A random UUID, recorded."""
    return _uuid.UUID(boundary("uuid4", None, lambda: _uuid.uuid4().hex))


def llm(request: Any, call: Callable[[Any], T]) -> T:
    """A model call: `call(request)` returns the response, recorded with the request."""
    return boundary("llm", request, lambda: call(request))


def artifact(name: str, data: bytes | str | os.PathLike[str]) -> str:
    """Record a named output of the run (bytes, text, or the file at a path) as a blob; returns its sha256.

    Inside a run only, and from the agent's own code: a rerun does not call
    tools, so an artifact made inside one could not be recorded again.
    """
    session: Session | None = current_run()
    if session is None or session.journal is None:
        raise HarnessError(f"artifact({name!r}): outside a run; call it inside Executor.run() or a Recorder")
    if session.nested:
        raise HarnessError(
            f"artifact({name!r}) inside a tool or boundary call; return the data and record it from the "
            "planner or verifier, so that a rerun (which calls no tool) records it too"
        )
    if not isinstance(name, str) or not name:
        raise HarnessError(f"an artifact needs a non-empty str name, not {name!r}")
    if isinstance(data, os.PathLike):
        try:
            with open(data, "rb") as f:
                content = f.read()
        except OSError as e:
            raise HarnessError(f"artifact({name!r}): cannot read {os.fspath(data)}: {e.strerror}") from None
    elif isinstance(data, str):
        content = data.encode()
    elif isinstance(data, bytes | bytearray | memoryview):
        content = bytes(data)
    else:
        raise HarnessError(f"artifact({name!r}): data must be bytes, a str or a path, not {type(data).__name__}")
    if session.artifact_served(name, hashlib.sha256(content).hexdigest()):
        return hashlib.sha256(content).hexdigest()
    digest = session.journal.put_blob(content)
    session.journal.append("artifact", {"name": session.redact.name(name), "sha256": digest, "size": len(content)})
    return digest
