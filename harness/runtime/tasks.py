"""Task names: the tasks an agent's async code creates are numbered, so its concurrent calls are told apart.

While a workflow's async function runs, `numbering()` puts a task factory
on the running loop. Each task created from an agent's code (asyncio.gather,
create_task, a TaskGroup) gets the next number of the task that created it,
and its name is the creator's name and that number (`"2"`, then `"2.1"`):
the order the code created its tasks in, which the same code repeats on
every run. The name lives in a context variable set in the new task's own
context before its first step (an eager task has it too). The calls a task
makes (its crossings and intents) carry the name in their `task` field
(trace/tasks.py); the agent's root task (the function's own task, an
agent's task or thread) has no name and its records no field.

A task's children are counted by the task that runs the code creating
them: a library may run a task's steps in a copy of a child's context
(Pydantic AI's agent runs its graph in its scoped task's), so the count
is the nearest node, from the context's up through its creators, that
the running task owns, and none when it owns none (a task running a copy
of an unrelated task's context: the MCP client starts a message's
handler in its sender's, at a time that moves with timing).

What is not counted, so that a resume numbers the tasks as the recording
did: a task created inside a call (a tool, a crossing: live only, its
crossings are not recorded); a task created with a context of its
creator's choosing (`context=`: `aspawn()` makes its agent a root of its
own that way; such a task keeps what that context holds, and counts no
child in a node it does not own); and a task created when something else
happens rather than by a task's own code: from a callback (a done
callback, `call_soon`, an async generator's finalizer: no task runs) or
by a `__del__` (the garbage collector's time). A resume that serves a
call at once moves those: counted, they would renumber the tasks their
creator makes after them, and a sibling's recorded result could go to
the wrong task. Such a task keeps the name of the context it was made in
(its calls are its creator's, as they were before tasks were named).
A task asyncio.as_completed() makes of a coroutine is counted, but in a
set's order (by address): `unordered()` says so, and a resume refuses
its calls that hold a secret rather than serve them by name.
Threads started by `harness.spawn()` are agents, roots of their own
(agents.py); a thread that runs a copy of a task's context
(`run_in_executor(None, ctx.run, ...)`) writes that task's name, so two
such threads' concurrent calls are not told apart (`asyncio.to_thread`
in a gather is: each runs in its own task).

Guarantees: outside `numbering()`, or in code that never creates a task,
nothing is named and nothing is written; the factory that was on the loop
before is kept under it (every task is still made by it) and put back when
the last run on the loop that numbers ends.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .context import in_call

if TYPE_CHECKING:
    import asyncio
    from types import FrameType


class Node:
    """A task of an agent: its name (None for the agent's root task), how many tasks it has created, the node of
    the task that created it, and the task it is (weakly: its context holds the node; None until known)."""

    __slots__ = ("loose", "made", "name", "owner", "parent")

    def __init__(self, name: str | None, parent: Node | None = None, loose: bool = False):
        self.name, self.made, self.parent = name, 0, parent
        self.owner: weakref.ref[asyncio.Task[Any]] | None = None
        self.loose = loose  # its number may differ on another run (unordered()); so may its tasks'

    def child(self, loose: bool = False) -> Node:
        self.made += 1
        return Node(f"{self.name}.{self.made}" if self.name else str(self.made), self, loose or self.loose)


def counting(running: asyncio.Task[Any] | None, here: Node) -> Node | None:
    """The node that counts a task created now by `running`, in a context whose node is `here`: the running task's own,
    `here` or the nearest of its creators (a root's first task to create one claims it); None when no task runs
    (a callback), or when the running task is none of them (it runs a copy of another's context)."""
    if running is None:
        return None
    node: Node | None = here
    while node is not None:
        if node.owner is None:
            node.owner = weakref.ref(running)
        if node.owner() is running:
            return node
        node = node.parent
    return None


_node: contextvars.ContextVar[Node | None] = contextvars.ContextVar("harness_task", default=None)


def current() -> str | None:
    """The name of the task running here (None: an agent's root task, or no numbering)."""
    node = _node.get()
    return None if node is None else node.name


def unordered() -> bool:
    """Whether the task running here was numbered in an order that may differ on another run (or descends from
    one): asyncio.as_completed() makes a task of each coroutine it is given in a set's order, by address. Its
    calls may not take a recorded one on their name alone (Session.whose)."""
    node = _node.get()
    return node is not None and node.loose


def root() -> None:
    """Make the code running here (in its own context: an agent's thread or task) a root task of its own."""
    _node.set(Node(None))


Factory = Callable[..., "asyncio.Task[Any]"]


FINALIZER, UNORDERED = "finalizer", "unordered"


def _origin() -> str | None:
    """What creates the task, from the task factory's caller's callers: FINALIZER for a `__del__` (run when the
    garbage collector frees its object, at a time the code does not choose: openai's async client closes its
    connections so), UNORDERED for asyncio's as_completed() (a task of each coroutine in a set's order), else None."""
    frame: FrameType | None = sys._getframe(3)  # (_origin, the factory, loop.create_task: then its callers)
    for _ in range(6):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "__del__":
            return FINALIZER
        if code.co_name in _AS_COMPLETED and frame.f_globals.get("__name__") == "asyncio.tasks":
            return UNORDERED
        frame = frame.f_back
    return None


_AS_COMPLETED = ("as_completed", "__init__")  # (3.13 on: _AsCompletedIterator.__init__)


def _over(previous: Factory | None) -> Factory:
    """A task factory that names each task created from an agent's code, then makes it as `previous` would."""
    import asyncio

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        here, child = _node.get(), None
        free = here is not None and kwargs.get("context") is None and not in_call()
        counter = counting(asyncio.current_task(loop), here) if free and here is not None else None
        origin = _origin() if counter is not None else None
        if counter is not None and origin != FINALIZER:
            child = counter.child(origin == UNORDERED)
            ctx = contextvars.copy_context()
            ctx.run(_node.set, child)
            kwargs["context"] = ctx
        task = previous(loop, coro, **kwargs) if previous is not None else asyncio.Task(coro, loop=loop, **kwargs)
        if child is not None and child.owner is None:  # (an eager task's first step may have claimed it already)
            child.owner = weakref.ref(task)
        return task

    factory.runs = 0  # type: ignore[attr-defined]  # the runs on this loop that number their tasks
    factory.previous = previous  # type: ignore[attr-defined]
    return factory


def number_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Name the tasks created on loop from code that runs as a root task (see root()), for as long as the loop
    lives: a loop harness made for itself (bridge.py)."""
    found: Any = loop.get_task_factory()
    if not hasattr(found, "runs"):
        loop.set_task_factory(_over(found))


@contextlib.contextmanager
def numbering() -> Iterator[None]:
    """For the length of the block, the code running here is a root task whose tasks are numbered."""
    import asyncio

    loop = asyncio.get_running_loop()
    found: Any = loop.get_task_factory()
    factory: Any = found if hasattr(found, "runs") else _over(found)
    if factory is not found:
        loop.set_task_factory(factory)
    factory.runs += 1
    top, running = Node(None), asyncio.current_task(loop)
    top.owner = None if running is None else weakref.ref(running)
    token = _node.set(top)
    try:
        yield
    finally:
        _node.reset(token)
        factory.runs -= 1
        previous = factory.previous
        if factory.runs == 0 and loop.get_task_factory() is factory:
            loop.set_task_factory(previous)
