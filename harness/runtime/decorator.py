"""`@harness.tool`: a function's effect contract declared on the function itself, and `harness.idempotency_key()`.

`@harness.tool(idempotent=None, name=None, version=None)` returns a function
with the original's signature, name, docstring and type hints
(`functools.wraps`: `inspect.signature` follows `__wrapped__`), so
frameworks that build a JSON schema from a function build the same one. Its
`__harness_tool__` is a `ToolSpec` (tool.py): the name (the function's
qualified name unless `name=`) and the contract, `idempotent=True` ->
`"idempotent"`, `False` -> `"unsafe"`, `None` -> `"at-least-once"`.

Calling it:

- where `harness.call` would make a step of a workflow run (calls.py), the
  call is that step: its arguments bound to the parameters' names (what the
  intent's `args` holds; `*args` and `**kwargs` under their own names), the
  contract kept, an unsafe call paused on after a crash, an idempotent one
  made again with the same key;
- anywhere else (no run, an Executor's planner, inside another call) it
  just calls the function; an idempotent one then gets a fresh key of its
  own (nothing will make that call again);
- given to `Executor(tools=...)` (or to `harness.call`), the spec's `fn` is
  what is called: it takes the recorded arguments by name and an
  `idempotency_key` keyword, which it keeps from the function (the function
  reads it with `harness.idempotency_key()`).

`harness.idempotency_key()` returns the key of the idempotent call running
in this context (`<run_id>-<step>-<attempt>` in a run: the same in every
process that makes the call again after a crash); outside one it raises
HarnessError saying where it may be called. A `Tool(idempotent=True)` still
gets its `idempotency_key=` keyword, and may read the key either way.

Guarantees: bad arguments to the decorator, or a decorator on something
that cannot be called, are a TypeError at decoration time; a decorated
function is never called by the decorator itself.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from .._errors import HarnessError
from .calls import acall, call, stepping
from .context import call_key, in_call, reset_key, set_key
from .step import plain_key
from .tool import ToolSpec, is_async_fn, name_of

F = TypeVar("F", bound=Callable[..., Any])
KEY = "idempotency_key"  # the keyword an idempotent tool's key comes in (step.invoke, calls._plain)


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(
    fn: None = None, /, *, idempotent: bool | None = None, name: str | None = None, version: str | None = None
) -> Callable[[F], F]: ...
def tool(
    fn: Any = None, /, *, idempotent: bool | None = None, name: str | None = None, version: str | None = None
) -> Any:
    """Declare fn's effect contract: `@harness.tool` or `@harness.tool(idempotent=True|False|None, name=, version=)`.

    See the module docstring for what a call of the decorated function is.
    """
    if idempotent is not None and type(idempotent) is not bool:
        raise TypeError(
            f"@harness.tool(idempotent=...) is True (called again with the same key), False (unsafe: never called "
            f"again blindly) or None (at-least-once), not {idempotent!r}"
        )
    if name is not None and (type(name) is not str or not name):
        raise TypeError(f"@harness.tool(name=...) is a non-empty str, or None for the function's name; not {name!r}")
    if version is not None and type(version) is not str:
        raise TypeError(f"@harness.tool(version=...) is a str or None, not {version!r}")
    if fn is None:
        return lambda f: _decorate(f, idempotent, name, version)
    return _decorate(fn, idempotent, name, version)


def idempotency_key() -> str:
    """The key of the idempotent tool call running here: the same in every process that makes the call again."""
    key = call_key()
    if key is None:
        raise HarnessError(
            "harness.idempotency_key() was called outside an idempotent tool call: call it inside a function "
            "declared @harness.tool(idempotent=True) (or a harness.Tool(fn, idempotent=True)) while it runs, "
            "and pass the key on to the service that dedupes"
        )
    return key


def _decorate(fn: Any, idempotent: bool | None, name: str | None, version: str | None) -> Any:
    if isinstance(fn, staticmethod | classmethod) or not callable(fn):
        raise TypeError(f"@harness.tool needs a function (sync or async), not {fn!r:.80}")
    if getattr(fn, "__harness_tool__", None) is not None:
        raise TypeError(f"{name_of(fn)} is already a harness tool: decorate the function once")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise TypeError(f"@harness.tool cannot read the signature of {fn!r:.80}: {e}") from None
    if idempotent is True and KEY in sig.parameters:
        raise TypeError(
            f"{name_of(fn)} has a parameter named {KEY!r}: an @harness.tool(idempotent=True) reads its key with "
            "harness.idempotency_key() (the parameter would reach a framework's JSON schema). Drop the parameter, "
            "or use harness.Tool(fn, idempotent=True), which passes it"
        )
    effect = "at-least-once" if idempotent is None else "idempotent" if idempotent else "unsafe"
    is_async = is_async_fn(fn)
    spec = ToolSpec(name or name_of(fn), {"effect": effect, "version": version}, _body(fn, sig, is_async), is_async)
    keyed = idempotent is True
    star = next((p.name for p in sig.parameters.values() if p.kind is p.VAR_POSITIONAL), None)

    if is_async:

        @functools.wraps(fn)
        async def atool(*args: Any, **kwargs: Any) -> Any:
            if stepping():
                return await acall(spec, **_named(spec, sig, star, args, kwargs))
            token = set_key(_inherited() if keyed else None)
            try:
                return await fn(*args, **kwargs)
            finally:
                reset_key(token)

        wrapper: Any = atool
    else:

        @functools.wraps(fn)
        def stool(*args: Any, **kwargs: Any) -> Any:
            if stepping():
                return call(spec, **_named(spec, sig, star, args, kwargs))
            token = set_key(_inherited() if keyed else None)
            try:
                return fn(*args, **kwargs)
            finally:
                reset_key(token)

        wrapper = stool
    wrapper.__harness_tool__ = spec
    return wrapper


def _inherited() -> str:
    """The key of a plain call of an idempotent tool: the key of the call it runs in, when that call has one (a
    framework's tool call made a workflow step by harness.pydantic_ai or .openai_agents, whose body calls this
    function), else a fresh one (nothing will make this call again)."""
    return (call_key() if in_call() else None) or plain_key()


def _named(
    spec: ToolSpec, sig: inspect.Signature, star: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """A call's arguments by parameter name, as its intent records them; `star` names fn's *args, if any."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{spec.name}(): {e}") from None
    named = bound.arguments
    if star is not None and star in named:  # *args as a list (a trace holds no tuple; the function gets them unpacked)
        named[star] = list(named[star])
    return named


def _body(fn: Callable[..., Any], sig: inspect.Signature, is_async: bool) -> Callable[..., Any]:
    """The spec's fn: called with the arguments by name (and an idempotent call's `idempotency_key`), it calls fn
    as the caller did, with the key (or None) what harness.idempotency_key() returns inside it."""

    def split(named: dict[str, Any]) -> tuple[str | None, list[Any], dict[str, Any]]:
        key = named.pop(KEY, None) if KEY not in sig.parameters else None
        args, kwargs = _unbind(sig, named)
        return key, args, kwargs

    if is_async:

        async def abody(**named: Any) -> Any:
            key, args, kwargs = split(named)
            token = set_key(key)
            try:
                return await fn(*args, **kwargs)
            finally:
                reset_key(token)

        return functools.wraps(fn)(abody)

    def body(**named: Any) -> Any:
        key, args, kwargs = split(named)
        token = set_key(key)
        try:
            return fn(*args, **kwargs)
        finally:
            reset_key(token)

    return functools.wraps(fn)(body)


def _unbind(sig: inspect.Signature, named: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments that call fn as `named` (a call's arguments by name) says."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    positional = True  # still filling the positional parameters from the left
    rest = dict(named)
    for p in sig.parameters.values():
        if p.name not in rest:
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                positional = False
            continue
        value = rest.pop(p.name)
        if p.kind is p.VAR_POSITIONAL:
            if value and not positional:
                raise TypeError(f"{p.name} given without the positional parameters before it")
            args.extend(value)
        elif p.kind is p.VAR_KEYWORD:
            kwargs.update(value)
        elif positional and p.kind is not p.KEYWORD_ONLY:
            args.append(value)
        elif p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"positional-only parameter {p.name!r} given without the ones before it")
        else:
            kwargs[p.name] = value
    kwargs.update(rest)  # names the function does not have: its own TypeError says so
    return args, kwargs
