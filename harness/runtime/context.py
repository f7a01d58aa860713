"""Who is running here: the run, the agent, the call and its key, read and set through small functions.

Four context variables, private to this module:

- the run: the Session recording or serving the crossings of this context
  (`current_run()`, None outside a run; set by `enter_run()`/`exit_run()`
  around a run, `set_run()` in a copied context);
- the agent whose code runs (`running_agent()`, an AgentState; None: the
  run's own thread, "main"; `set_agent()` in a new agent's context);
- whether this is a call's own context, a tool's or a crossing's, whose
  crossings belong to the call and are not recorded (`in_call()`;
  `start_call()`/`end_call()` around the call);
- the key of the idempotent tool call running here (`call_key()`, what
  `harness.idempotency_key()` returns, None outside one; `set_key()`/
  `reset_key()`).

They are context variables, so a thread or task started with a copy of the
context carries them. Every read is one function call: the readers are on
the hot path of every crossing. This module is the lowest of the runtime's
core (boundary > agents > context): it imports neither, so AgentState, the
agent's own state the variable holds, is defined here, and `current_run()`
is typed Any: each reader names what it holds (`session: Session | None =
current_run()`), boundary.Session above, agents' small `Run` protocol below.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any

_run: ContextVar[Any] = ContextVar("harness_session", default=None)  # a boundary.Session, or None
_agent: ContextVar[AgentState | None] = ContextVar("harness_agent", default=None)
_in_call: ContextVar[bool] = ContextVar("harness_in_call", default=False)  # a call's own context: not recorded
_key: ContextVar[str | None] = ContextVar("harness_idempotency_key", default=None)  # the idempotent call's key


class AgentState:
    """One agent's own view: its name, its clock, and how many of its calls are in flight (and on which thread).

    Whether code runs *inside* a call (so its crossings belong to the call) is
    not the agent's but the call's: `in_call()`, set in the call's own
    context, so two concurrent calls of one agent (tasks of asyncio.gather)
    are each recorded.
    """

    __slots__ = ("calls", "finished", "merge", "name", "thread", "ticket", "vc", "waiting", "written")

    def __init__(self, name: str, vc: dict[str, int] | None = None):
        self.name = name
        self.vc: dict[str, int] = dict(sorted(vc.items())) if vc else {}  # keys sorted, as records hold them
        self.calls = 0  # calls of this agent in flight (a helper thread's crossings then belong to one)
        self.thread: int | None = None  # the thread they run on: one agent's calls never overlap across threads
        self.merge: dict[str, int] | None = None  # a clock to merge into the next event (join, receive)
        self.ticket = self.written = 0  # async crossings: taken in order of start, written in that order
        self.waiting: dict[int, Any] = {}  # ticket -> the future of a finished crossing waiting for its turn
        self.finished: set[int] = set()  # tickets done while an earlier one is still in flight

    def next_vc(self) -> dict[str, int]:
        """The clock the agent's next event will carry (without taking it)."""
        vc = dict(self.vc)
        if self.merge:
            for k, v in self.merge.items():
                if vc.get(k, 0) < v:
                    vc[k] = v
        vc[self.name] = vc.get(self.name, 0) + 1
        return vc


# --- reading -----------------------------------------------------------------------------------------


def current_run() -> Any:
    """The Session recording or serving this context's crossings; None outside a run."""
    return _run.get()


def running_agent() -> AgentState | None:
    """The agent whose code runs here; None in the run's own thread (the main agent) and outside a run."""
    return _agent.get()


def in_call() -> bool:
    """Whether this is a call's own context (a tool, a crossing): its crossings belong to the call."""
    return _in_call.get()


def call_key() -> str | None:
    """The key of the idempotent tool call running here; None outside one."""
    return _key.get()


# --- setting: each setter's token undoes it ----------------------------------------------------------


def enter_run(session: Any) -> Token[Any]:
    """Make session this context's run, until exit_run(token)."""
    return _run.set(session)


def exit_run(token: Token[Any]) -> None:
    """Undo the enter_run() that returned token."""
    _run.reset(token)


def set_run(session: Any) -> None:
    """Make session the run of this context for good (a copied context: a worker's own)."""
    _run.set(session)


def set_agent(agent: AgentState) -> None:
    """Make agent the one whose code runs in this context (a new agent's own copied context)."""
    _agent.set(agent)


def start_call() -> Token[bool]:
    """Mark this context a call's own (its crossings are not recorded), until end_call(token)."""
    return _in_call.set(True)


def end_call(token: Token[bool]) -> None:
    """Undo the start_call() that returned token."""
    _in_call.reset(token)


def set_key(key: str | None) -> Token[str | None]:
    """Make key what call_key() returns here (None: no idempotent call), until reset_key(token)."""
    return _key.set(key)


def reset_key(token: Token[str | None]) -> None:
    """Undo the set_key() that returned token."""
    _key.reset(token)
