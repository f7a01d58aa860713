"""harness.mcp: an MCP client session whose tool calls are a workflow's steps, their contracts from MCP annotations.

`record(session)` wraps a `mcp.ClientSession` or `mcp.Client` (anything with
their `list_tools()` and `call_tool(name, arguments, ..., meta=)`);
`stdio(params)` opens one over stdio lazily, at the first call that must
reach the server. In a run:

- `await s.list_tools(...)` is a crossing (boundary `mcp.list_tools`, request
  `{"server": name, ...}`, response the `ListToolsResult`'s wire JSON),
  recorded or served like any other, and rebuilt into the same object;
- `await s.call_tool(tool, arguments)` made where `harness.acall` makes a
  step (a workflow's own code) is that step: tool `<name>.<tool>` (`mcp.refund`),
  `args` the arguments, the result the `CallToolResult`'s wire JSON
  (`model_dump(mode="json", by_alias=True, exclude_none=True)`; `harness
  reconcile --result` takes it, or a string for one text item: `reconciled()`
  checks it before anything is written), rebuilt with
  `CallToolResult.model_validate` so `.content`, `.structured_content`
  and `.is_error` read the same live, resumed and rerun. An error result
  (`isError`: a tool that raised, a tool the server does not list) is a
  result, not a failure.

The contract comes from the tool's annotations, as the server lists them
(the wrapper lists the tools itself, once, as a recorded crossing, when a
call needs a tool it has not seen listed): `readOnlyHint` -> a read,
at-least-once (made again after a crash, never pauses); else
`idempotentHint` -> idempotent, its key sent in the request's `_meta` as
`{"harness/idempotency_key": key}` so the server can dedupe; else unsafe
(`destructiveHint`, or no annotations: MCP's default is destructive), whose
call in flight at a crash pauses the run for `harness reconcile`.
`contracts={"tool": "read" | "idempotent" | "unsafe"}` overrides them.
Before a resume makes a call again that the crash left in flight (a read or
an idempotent one), it lists the server's tools live again: a tool the
server no longer lists, or one whose hints changed since the trace's
listing (idempotent -> not, say), is not called: the run PAUSES there
(ACT -> PAUSED with the `reason`) for `harness reconcile`.

In a run outside a workflow's own code (an Executor's planner, a
`Recorder`'s loop) a read is a crossing (boundary `mcp.call_tool`, request
`{"server", "tool", "arguments"}`, response the result's wire JSON) and any
other call is refused (HarnessError: it could be neither durable nor
served). Outside a run, or inside another call (a tool's own code), every
method passes through to the session unchanged. On rerun, and on the served part of a resume, nothing
reaches the server: a `stdio()` session is then never even started.

Guarantees: bad arguments are refused when `record()` is called; the `mcp`
SDK is imported only here (`harness-trace[mcp]`), never by `import harness`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from ._errors import HarnessError, MissingExtra
from .runtime.boundary import aboundary, active
from .runtime.calls import acall, stepping
from .runtime.context import in_call
from .runtime.tool import ToolSpec, relisted

if TYPE_CHECKING:
    from mcp import StdioServerParameters

KEY = "harness/idempotency_key"  # the request _meta field an idempotent call's key travels in
EFFECTS = {"read": "at-least-once", "idempotent": "idempotent", "unsafe": "unsafe"}


def contract_of(annotations: Mapping[str, Any] | None) -> str:
    """A tool's contract ("read", "idempotent" or "unsafe") from its annotations' wire JSON (camelCase hints)."""
    hints = annotations or {}
    if hints.get("readOnlyHint") is True:
        return "read"
    if hints.get("idempotentHint") is True:
        return "idempotent"
    return "unsafe"  # destructive, or nothing said: the MCP default is destructive


def record(session: Any, *, contracts: Mapping[str, str] | None = None, name: str = "mcp") -> Recorded:
    """`session` (a mcp.ClientSession, a mcp.Client) with its tool calls recorded in a run (see the module docstring).

    `name` prefixes the tools' names in the trace (`mcp.refund`): give two servers two names.
    """
    for method in ("list_tools", "call_tool"):
        if not callable(getattr(session, method, None)):
            raise TypeError(f"harness.mcp.record() needs an MCP client session (with {method}()), not {session!r:.80}")
    return Recorded(lambda: _given(session), _contracts(contracts), _name(name), session)


@contextlib.asynccontextmanager
async def stdio(
    params: StdioServerParameters,
    *,
    contracts: Mapping[str, str] | None = None,
    name: str = "mcp",
    errlog: TextIO | None = None,
) -> AsyncIterator[Recorded]:
    """`async with harness.mcp.stdio(StdioServerParameters(...)) as s`: record() on a stdio session, started (and
    initialized) at the first call that must reach the server, closed when the block ends."""
    try:
        from mcp import ClientSession
        from mcp.client.stdio import stdio_client
    except ImportError:
        raise MissingExtra("harness.mcp.stdio", "mcp", "pip install 'harness-trace[mcp]'") from None

    async def connect(stack: contextlib.AsyncExitStack) -> Any:
        read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog or sys.stderr))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        return session

    held = _Held(connect)
    try:
        yield Recorded(held.get, _contracts(contracts), _name(name), None)
    finally:
        await held.close()


def reconciled(value: Any) -> Any:
    """A tool's result as given to `harness reconcile` (a CallToolResult's wire JSON, or a string: one text item)
    as a call of it is recorded; ValueError saying why a value is not one."""
    from mcp.types import CallToolResult
    from pydantic import ValidationError

    if isinstance(value, str):
        value = _one_text(value)
    if not isinstance(value, dict):
        raise ValueError(f"{type(value).__name__} {value!r:.80} is neither a CallToolResult's wire JSON nor a string")
    try:
        result = CallToolResult.model_validate(value)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise ValueError(f"it is not a CallToolResult ({where or 'the value'}: {first['msg']})") from None
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


class Recorded:
    """An MCP client session whose calls a run records; made by `record()` and `stdio()`."""

    def __init__(
        self, live: Callable[[], Awaitable[Any]], contracts: dict[str, str], name: str, session: Any | None
    ) -> None:
        self._live, self._contracts, self.name, self._session = live, contracts, name, session
        self._annotations: dict[str, Any] = {}  # the tools listed so far: name -> annotations (wire JSON) or None
        self._listed = False  # whether every page of the tools was listed

    def __getattr__(self, attr: str) -> Any:  # the rest of a given session's surface, unchanged
        if self._session is None:
            raise AttributeError(f"a harness.mcp.stdio() session has list_tools() and call_tool(), not {attr!r}")
        return getattr(self._session, attr)

    async def list_tools(self, **kwargs: Any) -> Any:
        """The session's `list_tools(**kwargs)`; in a run a crossing, recorded or served."""
        if not active():
            return await (await self._live()).list_tools(**kwargs)
        from mcp.types import ListToolsResult

        async def listed() -> Any:
            result = await (await self._live()).list_tools(**kwargs)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        request = {"server": self.name, **{k: _json(v) for k, v in kwargs.items()}}
        wire = await aboundary("mcp.list_tools", request, listed)
        self._learn(wire, whole=not kwargs and wire.get("nextCursor") is None)
        return ListToolsResult.model_validate(wire)

    async def call_tool(self, tool: str, arguments: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        """The session's `call_tool(tool, arguments, **kwargs)`; in a workflow's code a step with its contract."""
        if not stepping() and (not active() or in_call()):
            return await (await self._live()).call_tool(tool, arguments, **kwargs)
        from mcp.types import CallToolResult

        if type(tool) is not str:
            raise TypeError(f"call_tool(name, arguments): the name is a str, not {tool!r:.80}")
        arguments = dict(arguments or {})
        contract = await self._contract(tool)
        if not stepping():
            return CallToolResult.model_validate(await self._crossing(tool, contract, arguments, kwargs))
        effect = EFFECTS[contract]
        if effect == "idempotent" and "idempotency_key" in arguments:
            raise HarnessError(
                f"MCP tool {tool!r} is idempotent and has an argument named 'idempotency_key', which harness "
                f"passes the key in: give it contracts={{{tool!r}: 'unsafe'}} or rename the argument"
            )
        meta = kwargs.pop("meta", None)

        async def made(**args: Any) -> Any:
            key = args.pop("idempotency_key", None) if effect == "idempotent" else None
            sent = {**(meta or {}), KEY: key} if key is not None else meta
            result = await (await self._live()).call_tool(tool, args, meta=sent, **kwargs)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        spec = ToolSpec(
            f"{self.name}.{tool}", {"effect": effect, "version": None}, made, is_async=True,
            recheck=lambda: self._changed(tool),
        )  # fmt: skip
        result = await acall(spec, **arguments)
        if isinstance(result, str):  # reconciled as a plain value: a call whose contract came from contracts= in a
            result = _one_text(result)  # run that never listed the tools (the trace names no MCP door to check it)
        return CallToolResult.model_validate(result)

    async def _changed(self, tool: str) -> str | None:
        """Why the call of tool the trace left in flight must not be made again: the server, listed live again (not
        recorded: a check, whose outcome is the call or the pause), no longer lists it, or lists it with other
        hints than the trace's listing had. None when it may be made again."""
        session, live, cursor = await self._live(), {}, None
        while True:
            page = await session.list_tools(**self._paged(cursor)) if cursor else await session.list_tools()
            for t in page.tools:
                live[t.name] = (
                    t.annotations.model_dump(mode="json", by_alias=True, exclude_none=True) if t.annotations else None
                )
            cursor = page.next_cursor
            if not cursor:
                break
        if tool not in live and tool not in self._annotations:  # never listed (its contract given): no change seen
            return None
        if tool in live and tool in self._contracts:  # its contract given: its hints do not decide it
            return None
        return relisted(f"MCP tool {tool!r} of server {self.name!r}", tool, self._annotations.get(tool), live)

    async def _crossing(self, tool: str, contract: str, arguments: dict[str, Any], kwargs: dict[str, Any]) -> Any:
        """A read made in a run outside a workflow's steps (an Executor's planner, a Recorder's loop): a crossing."""
        if contract != "read":
            raise HarnessError(
                f"MCP tool {tool!r} is {contract} (its annotations, or contracts=) and was called in a run outside a "
                "workflow's own code (an Executor's planner, a Recorder): there it could be neither made durable nor "
                "served on rerun. Call it from a @harness.workflow function, or from inside a tool of the Executor"
            )

        async def read() -> Any:
            result = await (await self._live()).call_tool(tool, arguments, **kwargs)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        return await aboundary("mcp.call_tool", {"server": self.name, "tool": tool, "arguments": arguments}, read)

    async def _contract(self, tool: str) -> str:
        if tool in self._contracts:
            return self._contracts[tool]
        if tool not in self._annotations and not self._listed:
            await self._list_all()
        return contract_of(self._annotations.get(tool))

    async def _list_all(self) -> None:
        """Every page of the tools, each a recorded crossing: what the contracts are read from."""
        cursor: str | None = None
        while True:
            page = await self.list_tools(**self._paged(cursor)) if cursor else await self.list_tools()
            self._learn(page.model_dump(mode="json", by_alias=True, exclude_none=True), whole=False)
            cursor = page.next_cursor
            if not cursor:
                break
        self._listed = True

    def _paged(self, cursor: str) -> dict[str, Any]:
        """The keyword a session's list_tools takes a cursor in: mcp.Client's `cursor=`, ClientSession's `params=`
        (a stdio() session is a ClientSession)."""
        if self._session is not None and "cursor" in inspect.signature(self._session.list_tools).parameters:
            return {"cursor": cursor}
        from mcp.types import PaginatedRequestParams

        return {"params": PaginatedRequestParams(cursor=cursor)}

    def _learn(self, wire: Mapping[str, Any], *, whole: bool) -> None:
        for t in wire.get("tools", []):
            self._annotations[t["name"]] = t.get("annotations")
        self._listed = self._listed or whole


class _Held:
    """A connection opened at first use, in a task of its own (anyio's task groups are left in the task that
    entered them), kept open until close()."""

    def __init__(self, connect: Callable[[contextlib.AsyncExitStack], Awaitable[Any]]):
        self.connect = connect
        self.ready: asyncio.Future[Any] | None = None
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def get(self) -> Any:
        ready = self.ready
        if ready is None:
            ready = self.ready = asyncio.get_running_loop().create_future()
            # a context of its own: the connection's tasks belong to no run, no agent, no call
            self.task = asyncio.get_running_loop().create_task(self._hold(ready), context=contextvars.Context())
        try:
            return await asyncio.shield(ready)
        except BaseException:
            if ready.done() and not ready.cancelled() and ready.exception() is not None and self.ready is ready:
                self.ready = None  # it failed to open: the next call tries again
            raise

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        async with contextlib.AsyncExitStack() as stack:
            try:
                session = await self.connect(stack)
            except BaseException as e:
                ready.set_exception(e)
                return
            ready.set_result(session)
            await self.stop.wait()

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await self.task


def _one_text(text: str) -> dict[str, Any]:
    """A CallToolResult's wire JSON of one text item: what a string given to reconcile stands for."""
    return {"content": [{"type": "text", "text": text}]}


async def _given(session: Any) -> Any:
    return session


def _contracts(contracts: Mapping[str, str] | None) -> dict[str, str]:
    if contracts is None:
        return {}
    if not isinstance(contracts, Mapping):
        raise TypeError(f'contracts is a dict of tool name -> "read", "idempotent" or "unsafe", not {contracts!r:.80}')
    for tool, contract in contracts.items():
        if type(tool) is not str or contract not in EFFECTS:
            raise TypeError(
                f'contracts[{tool!r}] is {contract!r}: a contract is "read" (repeated freely), "idempotent" (called '
                'again with its key in _meta) or "unsafe" (never called again blindly)'
            )
    return dict(contracts)


def _name(name: str) -> str:
    if type(name) is not str or not name:
        raise TypeError(f"name is the non-empty str that prefixes the tools' names in the trace, not {name!r}")
    return name


def _json(value: Any) -> Any:
    """A list_tools keyword as its crossing's request holds it (a pydantic model as its wire JSON)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", by_alias=True, exclude_none=True) if callable(dump) else value
