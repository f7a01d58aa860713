"""Agents: the threads of a run, and the vector clocks that order their records.

A run is a set of agents. The run's own thread is agent "main"; `spawn()`
starts another on a new OS thread. Each agent is a process in the
vector-clock sense: every record it writes is one event and adds one to its
own component; it learns of other agents' events only through `spawn` (the
child starts from its parent's clock), `join` (the joiner merges the child's
final clock) and messages (a receive merges the clock of its send). Merging
is the element-wise maximum, so the order in which threads happen to run
cannot change a clock.

A run that never spawns writes no clock at all: main's clock is then
implicitly `{"main": seq}`. At the first spawn the journal becomes shared:
from then on every record carries `vc` (and `agent` when not main), and
appends from several threads are serialized only around seq, crc and the
write itself (see Journal).

Rules kept here:
- file order is a linear extension of happens-before: a spawn is written
  before its thread starts, an exit before its thread ends, a message is
  delivered only after its send is written, a join is written after the exit;
- a crossing made on a thread the run did not start, while no call of the
  run is in flight, is refused (HarnessError) and remembered by the session,
  so the run fails instead of recording a lie (its rerun would not serve it);
  only when that run is the only one in progress in the process: with several,
  the crossing raises in its own thread and no run is blamed (see boundary._stray);
- a spawn made inside a call (a tool, or another crossing) is a plain thread:
  like the crossings of that call, it belongs to the call and is not recorded.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .._errors import HarnessError, ReplayDrift, error_of, internal
from ..trace.clock import MAIN, merged
from .context import AgentState, current_run, in_call, running_agent, set_agent
from .control import decisive
from .tasks import root

if TYPE_CHECKING:
    from ..trace.journal import Journal

T = TypeVar("T")


class Run(Protocol):
    """What the agents use of their run: boundary.Session is one (typed so, agents need not import boundary)."""

    journal: Journal | None
    checking: bool  # whether every recorded crossing must be made again (a resume's, a re-execution's)
    failure: HarnessError | None
    agents: Agents

    def event_served(self, space: str, name: str, fields: dict[str, Any]) -> bool: ...

    def unsettled(self, agent: str) -> ReplayDrift | None: ...

    def cross(
        self, kind: str, request: Any, call: Callable[[], T], *, arrived: Callable[[Any, bool], None] | None = None
    ) -> T: ...


def exit_fields(error: BaseException | None) -> dict[str, Any]:
    """An agent's `exit` record's fields: its status, and its error when it raised."""
    fields: dict[str, Any] = {"status": "ok" if error is None else "error"}
    if error is not None:
        fields["error"] = error_of(error)
    return fields


def write_exit(journal: Any, error: BaseException | None) -> None:
    """Write an agent's `exit` record (exit_fields)."""
    journal.append("exit", exit_fields(error), user=("error",))  # an error message may hold a secret: redacted


@dataclass(frozen=True, slots=True)
class Message:
    """What `receive()` returns: who sent it, and what."""

    sender: str
    body: Any


@dataclass(slots=True)
class _Mail:
    sender: str
    body: Any
    vc: dict[str, int] | None  # the clock of its send record (None before the run spawned)


class Agents:
    """The agents of one run: names, clocks, mailboxes. One per run (a Session)."""

    def __init__(self, session: Run):
        self.session = session
        self.cond = threading.Condition()
        self.spawned = False  # once True, every record carries a clock
        self.main = AgentState(MAIN)
        self.live: dict[str, Handle[Any]] = {}
        self.last: dict[str, dict[str, int]] = {}  # each agent's last clock, for a re-spawned name
        self.mail: dict[str, list[_Mail]] = {}
        self.ended: set[str] = set()  # agents whose thread finished (a waiting receive gives up on them)
        self.sent: dict[str, int] = {}  # agent -> own count of its last send delivered (served receives wait on it)
        self.states: dict[str, AgentState] = {}  # the agents started, by name (their latest life)
        self.blocked: set[str] = set()  # agents waiting in receive() now
        self.joining: set[str] = set()  # agents waiting for another agent's thread to end (Handle.wait, join)
        self.ending = False  # the run is joining its agents before its end: nobody else will send
        self.seam: dict[str, int] | None = None  # a resumed workflow: the clock of the resume's last own record

    def in_flight(self) -> bool:
        """Whether a call (a tool, a crossing) of any agent is running now."""
        return self.main.calls > 0 or any(a.calls for a in list(self.states.values()))

    def enter_call(self, agent: AgentState) -> None:
        """A call of agent starts (it is in flight until leave_call).

        Concurrent calls of one agent are fine on one thread (tasks on its
        loop); from two threads at once (a copied context running as the same
        agent) their records would race for one clock and no rerun could
        order them: HarnessError, and the run fails.
        """
        me = threading.get_ident()
        with self.cond:
            if agent.calls and agent.thread != me:
                e = HarnessError(
                    f"two threads make calls as agent {agent.name!r} at once (thread "
                    f"{threading.current_thread().name!r} too): their records could not be ordered on rerun. "
                    "Start each thread as its own agent with harness.spawn() (or each task with harness.aspawn())"
                )
                self.session.failure = self.session.failure or e
                raise e
            agent.calls += 1
            agent.thread = me

    def leave_call(self, agent: AgentState) -> None:
        with self.cond:
            agent.calls -= 1

    # --- clocks --------------------------------------------------------------------------------------

    def shared(self, journal: Journal) -> None:
        """Clocked records from now on, main's clock as it is (a re-executed workflow serves its first spawn)."""
        if not self.spawned:
            journal.share(self.stamp, self.tick)
            self.spawned = True

    def share(self, journal: Journal, last: dict[str, dict[str, int]] | None = None) -> None:
        """Switch the journal to shared, clocked records (at the first spawn, or resuming a spawned trace)."""
        if self.spawned:
            return
        journal.share(self.stamp, self.tick)  # first: a resumed workflow's journal writes its resume record then
        if last:  # a resumed trace: every agent goes on from its last recorded clock
            self.main.vc = dict(sorted(last.get(MAIN, {MAIN: journal.seq}).items()))
            self.last = {a: dict(vc) for a, vc in last.items()}
        else:
            self.main.vc = {MAIN: journal.seq}  # every record so far was main's
        self.spawned = True

    def stamp(self, after: dict[str, int] | None = None) -> tuple[str, dict[str, int]]:
        """The current agent's name and the clock its next record carries, not yet taken (see `tick`).

        `after`: the clock of the agent's record just before it in the same write, not taken either.
        """
        agent = running_agent() or self.main
        if self.seam is not None and agent is self.main:  # main's first live record follows the resume's records
            agent.vc, self.seam = dict(sorted(merged(agent.vc, self.seam).items())), None
        if after is not None:  # (any merge went into that one)
            vc = dict(after)
            vc[agent.name] += 1
            return agent.name, vc
        known = len(agent.vc)
        vc = agent.next_vc()
        if len(vc) != known or agent.merge is not None:  # a key may have come: keep them sorted
            vc = dict(sorted(vc.items()))
        return agent.name, vc

    def tick(self, vc: dict[str, int]) -> None:
        """The current agent's records up to the one carrying vc are encoded: its clock moves on to vc.

        Only then: a record that cannot be encoded (NotSerializable) takes no event,
        or the next record would skip a count and replay() would refuse the trace.
        """
        agent = running_agent() or self.main
        agent.vc, agent.merge = dict(vc), None

    def current(self) -> str:
        return (running_agent() or self.main).name

    def next_vc(self, journal: Journal) -> dict[str, int]:
        if not self.spawned:
            return {MAIN: journal.seq + 1}
        return (running_agent() or self.main).next_vc()

    # --- spawn and join ------------------------------------------------------------------------------

    def spawn(
        self,
        name: str,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        extra: dict[str, Any] | None = None,
    ) -> Handle[T]:
        """Write agent name's spawn record, then start `fn(*args, **kwargs)` on its thread."""
        handle = Handle[T](name)
        child = self.begin(handle, extra)
        self.launch(handle, child, fn, args, kwargs)
        return handle

    def begin(self, handle: Any, extra: dict[str, Any] | None = None) -> AgentState:
        """Register an agent (a Handle or an AsyncHandle) and write its spawn record; its own state.

        Nothing runs yet: the caller starts it (`launch`, or a task), so several
        spawns can all be on the file before any of them starts (a parallel step).
        """
        journal = self.session.journal
        if journal is None:
            raise internal(f"agent {handle.name!r} begun in a session that writes nothing")
        name = handle.name
        with self.cond:
            if name in self.live or name == MAIN:
                raise HarnessError(
                    f"an agent named {name!r} is already running in this run; give each live agent its own name"
                )
            self.live[name] = handle
            self.ended.discard(name)
        fields = {"child": name, **(extra or {})}
        try:
            if self.session.event_served("spawn", name, fields):  # a re-executed workflow's: its clock followed
                self.shared(journal)
            else:
                self.share(journal)
                journal.append("spawn", fields, user=("args",) if extra else ())
        except BaseException:
            self.forget(handle)
            raise
        parent = running_agent() or self.main
        child = self.states[name] = AgentState(name, merged(self.last.get(name, {}), parent.vc))
        return child

    def forget(self, handle: Any) -> None:
        """Drop an agent that was begun but will never start (its spawn could not be written, or a sibling's)."""
        name = handle.name
        with self.cond:
            if self.live.get(name) is handle:
                del self.live[name]

    def launch(
        self, handle: Handle[T], child: AgentState, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Start a begun agent's function on its own thread, as that agent."""
        ctx = contextvars.copy_context()

        def body() -> None:
            set_agent(child)
            root()  # its tasks are numbered from its own thread on
            error: BaseException | None = None
            try:
                handle._result = fn(*args, **kwargs)
            except BaseException as e:
                error = e
            self.finished(handle, child, error)

        handle._thread = threading.Thread(
            target=ctx.run, args=(body,), name=f"harness-agent-{handle.name}", daemon=True
        )
        handle._agents = self
        handle._thread.start()

    def finished(self, handle: Any, child: AgentState, error: BaseException | None) -> None:
        """An agent's end, in its own thread or task, whatever it raised (BaseException too): its exit
        record, then it counts as ended (a receive waiting on it gives up, a join may go on)."""
        session, served = self.session, False
        error = None if error is None else decisive(error)  # a drift inside a task group is a drift
        if session.checking and not isinstance(error, ReplayDrift):  # a re-executed agent made all it recorded
            try:
                served = session.event_served("exit", handle.name, exit_fields(error))
                if error is None:
                    error = session.unsettled(handle.name)
            except ReplayDrift as drift:
                served, error = False, drift
        handle._error = error
        try:
            # a drift while re-executing writes no exit: the run stops with it, and the trace stays one replay()
            # accepts (the agent's recorded exit, or none, as after a crash), whatever was written before
            if not served and not (isinstance(error, ReplayDrift) and session.checking):
                write_exit(session.journal, error)
        except BaseException as e:  # the journal refused: the run must not believe this agent ended well
            handle._error = handle._error or e
        handle._vc = dict(child.vc)
        with self.cond:
            self.last[handle.name] = dict(child.vc)
            self.ended.add(handle.name)
            self.cond.notify_all()

    def joined(self, handle: Handle[Any]) -> None:
        """Write the join record (the joiner's clock merges the child's last) and free the name."""
        journal = self.session.journal
        if journal is None:
            raise internal(f"agent {handle.name!r} joined in a session that writes nothing")
        with self.cond:
            if self.live.get(handle.name) is not handle:
                return  # joined already
            del self.live[handle.name]
        me = running_agent() or self.main
        me.merge = merged(me.merge or {}, handle._vc or {})
        if not self.session.event_served("join", handle.name, {"child": handle.name}):
            journal.append("join", {"child": handle.name})

    def settle(self) -> None:
        """Join the agents still running, in the order they were spawned (before a run's last record).

        A receive that can no longer get a message gives up meanwhile (see _wait).
        An agent task on the loop of this very thread cannot be joined from
        here without blocking that loop for good: HarnessError, telling to
        await its handle before the run ends.
        """
        with self.cond:
            self.ending = True
            self.cond.notify_all()
        for handle in list(self.live.values()):
            task = getattr(handle, "_task", None)
            if task is not None:  # a task (aspawn): joined on its loop, from this thread
                import asyncio

                try:
                    running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
                except RuntimeError:
                    running = None
                if task.get_loop() is running:
                    raise HarnessError(
                        f"agent {handle.name!r} (an aspawn() task) was not joined when its run ended, and the run "
                        "ends on the task's own event loop, which joining it here would block for good: "
                        f"`await` its handle (or its join()) before the run ends"
                    )
            try:
                if task is not None:
                    asyncio.run_coroutine_threadsafe(handle.join(), task.get_loop()).result()
                else:
                    handle.join()
            except BaseException as e:  # its own error is in its exit record; anything else is not
                if e is not handle._error and not isinstance(e, Exception):
                    raise

    def start_all(
        self, calls: list[tuple[str, Callable[..., Any], tuple[Any, ...], dict[str, Any]]]
    ) -> list[Handle[Any]]:
        """Spawn several agents, (name, fn, args, extra) each: every spawn record is written before any starts.

        A crash while they run then finds every one of them on the file. If a
        spawn cannot be written, none of them starts.
        """
        begun: list[tuple[Handle[Any], AgentState]] = []
        try:
            for name, _, _, extra in calls:
                handle = Handle[Any](name)
                begun.append((handle, self.begin(handle, extra)))
        except BaseException:
            for handle, _ in begun:
                self.forget(handle)
            raise
        for (handle, child), (_, fn, args, _) in zip(begun, calls, strict=True):
            self.launch(handle, child, fn, args, {})
        return [handle for handle, _ in begun]

    # --- messages ------------------------------------------------------------------------------------

    def deliver(self, to: str, body: Any, vc: dict[str, int] | None, sender: str) -> None:
        with self.cond:
            self.mail.setdefault(to, []).append(_Mail(sender, body, vc))
            if vc is not None:
                self.sent[sender] = vc[sender]
            self.cond.notify_all()

    def take(self, me: str, sender: str | None, timeout: float | None) -> _Mail:
        """The first message for me (from sender), waiting up to timeout seconds.

        HarnessError once no message can come: sender ended without sending
        one, or the run is ending and every other agent is waiting too.
        """
        with self.cond:
            if not self._wait(lambda: self._first(me, sender) is not None, timeout, me, sender):
                who = f"from {sender!r} " if sender else ""
                raise TimeoutError(f"agent {me!r} received no message {who}within {timeout} s")
            i = self._first(me, sender)
            if i is None:
                raise internal(f"agent {me!r} was woken for a message that is not there")
            return self.mail[me].pop(i)

    def _wait(self, ready: Callable[[], bool], timeout: float | None, me: str, sender: str | None = None) -> bool:
        """cond.wait_for(ready, timeout), giving up with HarnessError once no message can come.

        That is: the run's journal is closed; sender (when given) ended without
        sending; or the run is ending (joining its agents) and no other agent
        that could still send is running (each ended, or waits as well).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self.blocked.add(me)
        self.cond.notify_all()  # an agent that waits can change another's verdict
        try:
            while not ready():
                journal = self.session.journal
                if journal is not None and journal.fd < 0:
                    raise HarnessError(f"the run ended while agent {me!r} was waiting for a message")
                if sender is not None and sender in self.ended:
                    raise HarnessError(
                        f"agent {me!r} waits for a message from agent {sender!r}, which ended without sending one"
                    )
                if self.ending and all(n in self.ended or n in self.blocked for n in self.live if n != me):
                    raise HarnessError(
                        f"the run is ending (joining its agents) while agent {me!r} waits for a message no "
                        "running agent can send; join your agents, or receive with a timeout"
                    )
                left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True
        finally:
            self.blocked.discard(me)

    def _first(self, me: str, sender: str | None) -> int | None:
        for i, m in enumerate(self.mail.get(me, ())):
            if sender is None or m.sender == sender:
                return i
        return None

    def claim(self, me: str, sender: str, vc: dict[str, int] | None) -> None:
        """A receive served from the recording: wait until its send is made again, then take that message."""
        if vc is None:
            return
        count = vc[sender]

        def ready() -> bool:
            return self.sent.get(sender, 0) >= count or sender in self.ended

        with self.cond:
            self._wait(ready, None, me)
            for i, m in enumerate(self.mail.get(me, ())):
                if m.sender == sender and m.vc == vc:
                    del self.mail[me][i]
                    return


class Handle(Generic[T]):
    """A running agent. `join()` waits for it and returns what its function returned, or raises what it raised."""

    def __init__(self, name: str):
        self.name = name
        self._thread: threading.Thread | None = None
        self._agents: Agents | None = None
        self._result: Any = None
        self._error: BaseException | None = None
        self._vc: dict[str, int] | None = None

    def join(self, timeout: float | None = None) -> T:
        self.wait(timeout)
        if not self.done:
            raise TimeoutError(f"agent {self.name!r} is still running after {timeout} s")
        if self._agents is not None:
            self._agents.joined(self)
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[no-any-return]

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the agent's thread to end, without joining it (nothing is recorded)."""
        if self._thread is None:
            raise internal(f"agent {self.name!r} waited on before its thread started")
        agents = self._agents
        if agents is None:
            self._thread.join(timeout)
            return
        me = agents.current()
        agents.joining.add(me)  # (a resumed workflow's agent going live does not wait for one that waits)
        try:
            self._thread.join(timeout)
        finally:
            agents.joining.discard(me)

    @property
    def value(self) -> T:
        """What the agent's function returned, once it ended."""
        return self._result  # type: ignore[no-any-return]

    @property
    def error(self) -> BaseException | None:
        """What the agent's function raised, once it ended."""
        return self._error

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def __repr__(self) -> str:
        return f"<harness agent {self.name!r}{' done' if self.done else ''}>"


# --- the public functions ----------------------------------------------------------------------------


def _session() -> Run | None:
    session: Run | None = current_run()
    return session


def current_agent() -> str | None:
    """The name of the agent whose code is running: "main" in the run's thread, None outside a run."""
    session = _session()
    if session is None:
        return None
    agent = running_agent()
    return agent.name if agent is not None else MAIN


def spawn(name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Handle[T]:
    """Start `fn(*args, **kwargs)` on a new thread as agent `name`; returns its handle.

    Outside a run (or inside a call, whose crossings are not recorded) it is a plain thread.
    """
    if type(name) is not str or not name or name == MAIN:
        raise HarnessError(f"an agent needs a non-empty str name other than 'main', not {name!r}")
    session = _session()
    if session is None or session.journal is None or in_call():
        return _plain(name, fn, args, kwargs)
    return session.agents.spawn(name, fn, args, kwargs)


def _plain(name: str, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Handle[T]:
    handle = Handle[T](name)
    ctx = contextvars.copy_context()

    def body() -> None:
        try:
            handle._result = fn(*args, **kwargs)
        except BaseException as e:
            handle._error = e

    handle._thread = threading.Thread(target=ctx.run, args=(body,), name=f"harness-agent-{name}", daemon=True)
    handle._thread.start()
    return handle


def join(*handles: Handle[Any], timeout: float | None = None) -> list[Any]:
    """Join the handles in the given order; their results as a list.

    Every handle is joined (and recorded) before anything is raised; if several
    raised, the first in the given order is raised, whatever the timing.
    """
    results: list[Any] = []
    first: BaseException | None = None
    for h in handles:
        try:
            results.append(h.join(timeout))
        except BaseException as e:
            results.append(None)
            first = first or e
    if first is not None:
        raise first
    return results


def send(to: str, message: Any) -> None:
    """Send `message` (a JSON value) to agent `to`: a recorded crossing, delivered once it is written."""
    session = _session()
    if session is None:
        raise HarnessError("harness.send() works between the agents of a run; call it inside a run")
    if type(to) is not str or not to:
        raise HarnessError(f"send() needs the name of an agent, not {to!r}")
    agent = running_agent() or session.agents.main
    session.cross("agent_msg", {"send": to, "message": message}, _none)
    agents = session.agents
    agents.deliver(to, message, dict(agent.vc) if agents.spawned else None, agent.name)


def _none() -> None:
    return None


def receive(sender: str | None = None, *, timeout: float | None = None) -> Message:
    """The next message for this agent (from `sender` when given), waiting up to `timeout` seconds.

    A recorded crossing: its clock merges the send's. On rerun the recorded
    message is served (after its send was made again); none recorded is a
    ReplayViolation. A timeout raises TimeoutError, recorded too.
    """
    session = _session()
    if session is None:
        raise HarnessError("harness.receive() works between the agents of a run; call it inside a run")
    agents = session.agents
    me = (running_agent() or agents.main).name

    def call() -> dict[str, Any]:
        m = agents.take(me, sender, timeout)
        return {"from": m.sender, "message": m.body, "sent": m.vc}

    def arrived(response: Any, served: bool) -> None:
        if not isinstance(response, dict):
            return
        vc = response.get("sent")
        if served:
            agents.claim(me, response["from"], vc)
        if vc:
            agent = running_agent() or agents.main
            agent.merge = merged(agent.merge or {}, vc)

    got = session.cross("agent_msg", {"receive": sender}, call, arrived=arrived)
    return Message(got["from"], got["message"])
