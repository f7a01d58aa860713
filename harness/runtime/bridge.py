"""asyncio: async planners, tools and verifiers, and tasks as agents.

`Executor.arun()` runs the executor's one loop (the same state table, the
same records) in a worker thread and awaits it; every planner, tool or
verifier that returns an awaitable is run as a task on the caller's event
loop, in the context of the executor's agent, so `aboundary()`/`allm()`
inside it record (or serve) exactly as their sync forms do. A list of steps
thus runs as concurrent tasks on the running loop. `aspawn()` makes a task
an agent: its records carry its own name and clock, as a thread's do.

rerun(), fork(), resume(), recover() and the fleet's tasks (run(), from
plain code: the CLI, the viewer, a Ray worker) accept async agents too:
`bridging()` runs them on a private event loop in a helper thread for the
length of the call. asyncio itself is imported when async code is met: a sync
run or rerun never loads it (nor ssl, which it imports).

Rules kept here:
- a coroutine runs on one loop only, the caller's (arun) or the private one;
- the executor never blocks the loop: it waits in its own thread.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._errors import HarnessError, internal
from ..trace.clock import MAIN
from .agents import Agents
from .context import current_run, in_call, set_agent
from .tasks import number_tasks, root
from .tool import Tool, ToolSpec, spec_of

if TYPE_CHECKING:
    import asyncio
    import concurrent.futures

    from .boundary import Session

T = TypeVar("T")


class Bridge:
    """Runs the awaitables that agent code returns on one event loop, from the executor's threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self.loop = loop
        self._own: threading.Thread | None = None

    def __enter__(self) -> Bridge:
        if self.loop is None:  # a private loop, for rerun() and fork() of async agents
            import asyncio

            self.loop = asyncio.new_event_loop()
            number_tasks(self.loop)  # (a loop of its own: closed with the bridge)
            self._own = threading.Thread(target=self.loop.run_forever, name="harness-loop", daemon=True)
            self._own.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._own is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._own.join()
            self.loop.close()

    def run(self, awaitable: Awaitable[T]) -> T:
        """Run awaitable as a task on the loop, in the calling thread's context; wait for its result."""
        if self.loop is None:
            raise internal("a Bridge used outside its `with` block")
        import concurrent.futures

        ctx = contextvars.copy_context()
        ctx.run(root)  # each planner, tool or verifier call numbers its own tasks from 1 (a resume calls it again)
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        async def wrapped() -> T:
            return await awaitable

        loop = self.loop

        def start() -> None:
            task = loop.create_task(wrapped(), context=ctx)
            task.add_done_callback(lambda t: _settle(done, t))

        loop.call_soon_threadsafe(start)
        return done.result()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn, or a function that awaits what fn returns when it is awaitable."""

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            return self.run(out) if inspect.isawaitable(out) else out

        return call


def _settle(done: concurrent.futures.Future[Any], task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        done.set_exception(HarnessError("an async planner, tool or verifier was cancelled"))
    elif task.exception() is not None:
        done.set_exception(task.exception())
    else:
        done.set_result(task.result())


def bridged(bridge: Bridge, planner: Any, tools: Mapping[str, Any], verifier: Any) -> tuple[Any, dict[str, Any], Any]:
    """The planner, tools and verifier with their awaitables run on the bridge's loop."""
    out: dict[str, Any] = {}
    for name, tool in tools.items():
        if isinstance(tool, Tool):
            out[name] = dataclasses.replace(tool, fn=bridge.wrap(tool.fn))  # the same contract (retry_rejected too)
        elif isinstance(tool, ToolSpec) or hasattr(tool, "__harness_tool__"):  # (an @harness.tool: its contract)
            spec = spec_of(tool)
            out[name] = dataclasses.replace(spec, fn=bridge.wrap(spec.fn), is_async=False)
        else:
            out[name] = bridge.wrap(tool)
    return bridge.wrap(planner), out, bridge.wrap(verifier) if verifier is not None else None


def is_async(*fns: Any) -> bool:
    """Whether any of fns (or a Tool's or a ToolSpec's fn) is an async function."""
    return any(inspect.iscoroutinefunction(getattr(f, "fn", f)) for f in fns if f is not None)


@contextlib.contextmanager
def bridging(planner: Any, tools: Mapping[str, Any], verifier: Any) -> Iterator[tuple[Any, dict[str, Any], Any]]:
    """The planner, tools and verifier as plain code may call them: when any is async, its awaitables run on a
    private event loop for the length of the `with` block (what rerun(), fork(), resume() and recover() do)."""
    if not is_async(planner, verifier, *tools.values()):
        yield planner, dict(tools), verifier
        return
    with Bridge() as bridge:
        yield bridged(bridge, planner, tools, verifier)


class AsyncHandle(Generic[T]):
    """A task running as an agent. `await handle.join()` returns what it returned or raises what it raised."""

    def __init__(self, name: str, agents: Agents | None):
        self.name = name
        self._agents = agents
        self._task: asyncio.Task[None] | None = None
        self._result: Any = None
        self._error: BaseException | None = None
        self._vc: dict[str, int] | None = None
        self._joined = False

    async def join(self, timeout: float | None = None) -> T:
        if self._task is None:
            raise internal(f"agent {self.name!r} joined before its task started")
        import asyncio

        await asyncio.wait_for(asyncio.shield(self._task), timeout)
        if self._agents is not None and not self._joined:
            self._joined = True
            self._agents.joined(self)  # type: ignore[arg-type]
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[no-any-return]

    def __await__(self) -> Any:
        return self.join().__await__()


def aspawn(name: str, coro_fn: Callable[..., Coroutine[Any, Any, T]], /, *args: Any, **kwargs: Any) -> AsyncHandle[T]:
    """Start `coro_fn(*args, **kwargs)` as a task on the running loop, as agent `name`; returns its handle.

    Outside a run (or inside a call) it is a plain task.
    """
    if type(name) is not str or not name or name == MAIN:
        raise HarnessError(f"an agent needs a non-empty str name other than 'main', not {name!r}")
    import asyncio

    loop = asyncio.get_running_loop()
    session: Session | None = current_run()
    if session is None or session.journal is None or in_call():
        handle: AsyncHandle[T] = AsyncHandle(name, None)

        async def plain() -> None:
            try:
                handle._result = await coro_fn(*args, **kwargs)
            except BaseException as e:  # as a thread's plain agent does
                handle._error = e

        handle._task = loop.create_task(plain())
        return handle
    agents = session.agents
    handle = AsyncHandle(name, agents)
    child = agents.begin(handle)  # one code path with spawn(): the record, the clock, the end
    ctx = contextvars.copy_context()
    ctx.run(set_agent, child)
    ctx.run(root)  # its tasks are numbered from its own on (a task made with its own context is not numbered)

    async def body() -> None:
        error: BaseException | None = None
        try:
            handle._result = await coro_fn(*args, **kwargs)
        except BaseException as e:  # cancelled too: the exit record is written whatever ended it
            error = e
        agents.finished(handle, child, error)  # join() raises the error, after recording the join

    handle._task = loop.create_task(body(), context=ctx)
    return handle
