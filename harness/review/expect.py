"""Readable assertions on what a run did: `harness.expect(trace).tools(...).never(...).at_most(...)`.

`expect(trace)` (a path, an Outcome or a Replay) reads the trace once with
`replay()` (so a corrupt file is refused, and a run still unfinished, or cut
by a crash, reads as far as it got) and gathers its calls (`calls()` below):

- a **tool call** is one call of a tool, whatever door it came through: a
  step (`PLAN -> ACT` of an Executor, `harness.call`/`acall`, an
  `@harness.tool` function, a Pydantic AI or Agents SDK tool in a workflow,
  a `harness.mcp` tool), or a crossing of a framework's tool outside a
  workflow (`pydantic_ai.tool`, `openai_agents.tool`, `openai_agents.mcp`
  `call_tool`, `mcp.call_tool`). Its `name` is the one the model (or the
  code) used: an MCP tool's own name (`refund`), its step's name
  (`mcp.refund`) being `tool`, and either spelling matches it. The retries
  of one call (the next attempt of its step, same tool and same args) are
  that call (`attempts`), with the last attempt's outcome;
- a **model call** is a crossing of `llm()`, of a framework's model
  (`pydantic_ai.model`, `openai_agents.model`, `openai_agents.stream`), or
  an `http` one to a model's API that names a model; its `tokens` are the
  usage its response records (`total_tokens`, else input plus output).

Both are read by `calls.py`, the one place that knows each door's records
(the export and the ledger read them there too).

Each method checks one rule and returns the object, so they chain; the
first rule broken raises `ExpectationFailed` (an AssertionError) whose
message names the seq and the field path that broke it and lists the calls
made. Nothing is written; the calls are read once per `expect()`.
"""

from __future__ import annotations

import fnmatch
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any

import orjson

from .._errors import ExpectationFailed, HarnessError
from ..storage import blobs as _blobs
from ..storage import local_copy
from ..trace import state as S
from ..trace.reader import Replay, replay
from .calls import MODEL_KINDS, TOOL_KINDS, mcp_tool, model_call, role, tool_call

if TYPE_CHECKING:
    from ..runtime.step import Outcome


class _Any:
    """`harness.ANY`: matches any value of an argument that is there."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ANY"

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


ANY: Any = _Any()
"""Matches any value of an argument that is there: `expect(t).called("send", to=harness.ANY)`."""
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class _Call:
    """What every call has: its name, its args (a model's: the request), what came back, the record that made
    it, and whether that record was served from a recording (a rerun, a fork's prefix) rather than made live
    (`answered`: a fork's branch, the value given by hand; `live`: neither)."""

    name: str
    args: Any
    result: Any
    seq: int
    served: bool
    _: KW_ONLY
    answered: bool = False  # a fork's branch: the value was given by hand, neither served nor made live

    @property
    def live(self) -> bool:
        return not self.served and not self.answered


@dataclass(frozen=True, slots=True)
class ToolCall(_Call):
    """One tool call, as the trace holds it.

    `name`: as the model used it; `tool`: the name its record holds (an MCP
    tool's step is `<server>.<name>`; otherwise the same). `seq`: the record
    that made the call (its intent, or its crossing). `result` or `error`
    (`{"type", "message"}`) is its outcome, both None while the call is
    unfinished (`done` False). `attempts`: 1, or more when its step retried
    it.
    """

    tool: str = ""
    error: dict[str, Any] | None = None
    done: bool = True
    attempts: int = 1
    agent: str = "main"
    server: str | None = None  # an MCP tool's server


@dataclass(frozen=True, slots=True)
class ModelCall(_Call):
    """One model call: `name` the model when its request or reply says it, else the crossing's kind; `args` the
    request, `result` the response; `tokens` the usage it records (None when it records none)."""

    kind: str = ""
    error: dict[str, Any] | None = None
    tokens: int | None = None
    agent: str = "main"


@dataclass(frozen=True, slots=True)
class Calls:
    """What a run did: its tool calls and model calls in trace order, and how it stands."""

    path: str
    state: str
    tools: tuple[ToolCall, ...]
    models: tuple[ModelCall, ...]
    result: Any = None
    result_seq: int | None = None
    last_seq: int = 0


def calls(trace: str | os.PathLike[str] | Replay | Outcome) -> Calls:
    """The tool calls and model calls of a trace (see the module docstring), read once with replay()."""
    path = _path_of(trace)
    records: list[dict[str, Any]] = []

    def keep(_: bytes, rec: dict[str, Any]) -> None:
        kind = rec["kind"]
        if kind in ("transition", "crossing") or kind == "header":
            records.append(rec)

    rep = replay(path, on_record=keep)
    return _gather(rep, records)


def _path_of(trace: Any) -> str:
    if isinstance(trace, Replay):
        return trace.path
    if isinstance(trace, str | os.PathLike):
        return os.fspath(trace)
    path = getattr(trace, "trace", None)  # an Outcome (not imported: the runtime need not load to read a trace)
    if isinstance(path, str) and hasattr(trace, "checkpoints"):
        return path
    raise HarnessError(f"expect() takes a trace path, an Outcome or a Replay, not {trace!r:.80}")


def _gather(rep: Replay, records: list[dict[str, Any]]) -> Calls:
    local = local_copy(rep.path)
    header = records[0] if records else {}
    servers = {
        r["request"].get("server")
        for r in records
        if r.get("boundary") == "mcp.list_tools" and isinstance(r.get("request"), dict)
    }
    tools: list[ToolCall] = []
    models: list[ModelCall] = []
    open_: dict[str, int] = {}  # agent -> index in tools of its call in ACT (or paused in it)
    last: dict[str, tuple[int, int, Any]] = {}  # agent -> (its last call's index, step, args bytes) that failed
    result, result_seq = None, None

    def inline(rec: dict[str, Any]) -> dict[str, Any]:
        return _blobs.inline(local, rec) if "blobs" in rec else rec

    for rec in records:
        kind, agent = rec["kind"], rec.get("agent", "main")
        how = role(rec, header)  # a rerun serves every call; a fork what it reused, and answers its branch
        served, answered = how == "served", how == "answered"
        if kind == "crossing":
            boundary = rec["boundary"]
            if boundary in TOOL_KINDS:
                call = _tool_crossing(inline(rec), served, agent, answered)
                if call is not None:
                    tools.append(call)
            elif boundary in MODEL_KINDS:
                model = _model_call(inline(rec), served, agent, answered)
                if model is not None:
                    models.append(model)
            continue
        if kind != "transition":
            continue
        to, frm = rec["to"], rec["from"]
        if to == S.ACT and frm == S.PAUSED and agent in open_:
            continue  # a reconciled call made again: the same call
        if to == S.ACT:
            step, args = rec["step"], rec.get("args")
            name, tool, server = _named(rec["tool"], servers, None)
            retried = last.get(agent)
            if (
                retried is not None
                and retried[1] == step
                and tools[retried[0]].tool == tool
                and retried[2] == _bytes(args)
            ):  # the next attempt of the same call: a retry, not a new call
                i = retried[0]
                prev = tools[i]
                tools[i] = ToolCall(prev.name, prev.args, None, prev.seq, prev.served, prev.tool, None, False,
                                    prev.attempts + 1, agent, prev.server, answered=prev.answered)  # fmt: skip
            else:
                i = len(tools)
                made = ToolCall(
                    name, args, None, rec["seq"], served, tool, None, False, 1, agent, server, answered=answered
                )
                tools.append(made)
            open_[agent] = i
            last.pop(agent, None)
            continue
        i = open_.get(agent, -1)
        if frm == S.ACT and to != S.PAUSED and i >= 0:
            prev = tools[i]
            if to == S.VERIFY:
                value = inline(rec).get("result")
                name, _, server = _named(prev.tool, servers, value)
                tools[i] = _ended(prev, name, server, value, None)
            else:  # ACT -> PLAN or FAILED: the attempt raised
                tools[i] = _ended(prev, prev.name, prev.server, None, rec.get("error"))
                last[agent] = (i, rec["step"], _bytes(prev.args))
            del open_[agent]
        elif frm == S.PAUSED and to == S.VERIFY and i >= 0:  # an operator's reconcile: it happened, with this result
            prev = tools[i]
            tools[i] = _ended(prev, prev.name, prev.server, inline(rec).get("result"), None)
            del open_[agent]
        elif to == S.DONE and agent == "main":
            result_seq = rec["seq"]
            result = inline(rec).get("result") if rep.workflow is not None else None
    if rep.workflow is None and rep.checkpoints:  # an Executor's run: what its last step verified
        result = rep.checkpoints[-1].result
        result_seq = result_seq or rep.checkpoints[-1].seq
    return Calls(rep.path, rep.state, tuple(tools), tuple(models), result, result_seq, rep.last_seq)


def _ended(prev: ToolCall, name: str, server: str | None, result: Any, error: Any) -> ToolCall:
    return ToolCall(name, prev.args, result, prev.seq, prev.served, prev.tool, error, True, prev.attempts, prev.agent,
                    server, answered=prev.answered)  # fmt: skip


def _bytes(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(value).encode()


def _named(tool: str, servers: set[Any], result: Any) -> tuple[str, str, str | None]:
    """(name as the model used it, name as recorded, MCP server): a harness.mcp step `<server>.<tool>` is an MCP
    tool's (`calls.mcp_tool`)."""
    found = mcp_tool(tool, servers, result)
    return (found[1], tool, found[0]) if found is not None else (tool, tool, None)


def _tool_crossing(rec: dict[str, Any], served: bool, agent: str, answered: bool) -> ToolCall | None:
    call = tool_call(rec)
    if call is None or call.method == "tools/list":
        return None
    return ToolCall(call.name, call.args, call.response, rec["seq"], served, call.tool, call.error, True, 1, agent,
                    call.server, answered=answered)  # fmt: skip


def _model_call(rec: dict[str, Any], served: bool, agent: str, answered: bool) -> ModelCall | None:
    call = model_call(rec)
    if call is None:  # an http call to no model's API
        return None
    boundary = rec["boundary"]
    name = call.request_model or call.response_model or boundary
    tokens = call.usage.tokens if call.usage is not None else None
    return ModelCall(name, rec.get("request"), rec.get("response"), rec["seq"], served, boundary, rec.get("error"),
                     tokens, agent, answered=answered)  # fmt: skip


class Expectation:
    """The calls of one trace, and rules to check on them (see the module docstring). Made by `expect()`."""

    __slots__ = ("_calls", "_shown")

    def __init__(self, found: Calls):
        self._calls = found
        self._shown = os.path.basename(found.path)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self._calls.tools

    @property
    def model_calls(self) -> tuple[ModelCall, ...]:
        return self._calls.models

    def tools(self, *names: str, mode: str = "strict") -> Expectation:
        """The tool calls, by name, against `names`: `strict` the same sequence, `unordered` the same multiset,
        `subset` every call made is one of `names` (each name once per time it is listed), `superset` every
        name listed was called (as many times as listed; other calls allowed)."""
        if mode not in _MODES:
            raise HarnessError(f"tools(mode={mode!r}): give one of {', '.join(map(repr, _MODES))}")
        bad = [n for n in names if not isinstance(n, str)]
        if bad:
            raise HarnessError(f"tools(): names are strings, not {bad[0]!r}")
        made = self.tool_calls
        wanted = [self._canonical(n) for n in names]
        problem = _MODES[mode](wanted, made)
        if problem is not None:
            seq, path, why = problem
            self._fail(f"tools({_listed(names)}, mode={mode!r})", seq, path, why)
        return self

    def called(self, name: str, /, times: int | None = None, **args: Any) -> Expectation:
        """At least one call of tool `name` whose args match (`times=N`: exactly N such calls).

        An argument matches when it is equal, when it is a callable returning true for the actual value (a type:
        an instance of it), or when it is `harness.ANY` (present, whatever its value).
        """
        if times is not None and (type(times) is not int or times < 0):
            raise HarnessError(f"called({name!r}, times={times!r}): times is an int >= 0")
        key = self._canonical(name)
        mine = [c for c in self.tool_calls if c.name == key]
        matching = [c for c in mine if _mismatch(c.args, args) is None]
        shown = f"called({_listed([name])}{''.join(f', {k}={_matcher(v)}' for k, v in args.items())}"
        shown += f", times={times})" if times is not None else ")"
        if times is None and matching:
            return self
        if times is not None and len(matching) == times:
            return self
        if times is not None and len(matching) > times:
            extra = matching[times]
            self._fail(shown, extra.seq, "name", f"{len(matching)} matching calls, expected {times}; call "
                       f"{times + 1} is at seq {extra.seq}")  # fmt: skip
        if not mine:
            self._fail(shown, None, "name", f"no call of {name!r}")
        near = next((c for c in mine if c not in matching), mine[0])
        miss = _mismatch(near.args, args)
        path, why = miss if miss is not None else ("args", "matches")
        count = f"{len(matching)} matching call(s), expected {times}; " if times is not None else ""
        self._fail(shown, near.seq, path, f"{count}no call of {name!r} matches: at seq {near.seq} {why}")
        return self

    def never(self, *patterns: str) -> Expectation:
        """No tool whose name (as the model used it, or as recorded) matches one of the globs was called."""
        for c in self.tool_calls:
            for p in patterns:
                if fnmatch.fnmatchcase(c.name, p) or fnmatch.fnmatchcase(c.tool, p):
                    self._fail(f"never({_listed(patterns)})", c.seq, "name", f"{c.name!r} was called (matches {p!r})")
        return self

    def at_most(
        self, model_calls: int | None = None, tool_calls: int | None = None, tokens: int | None = None
    ) -> Expectation:
        """At most this many model calls, tool calls, and tokens (the usage recorded on model calls, summed)."""
        shown = "at_most(" + ", ".join(
            f"{k}={v}" for k, v in (("model_calls", model_calls), ("tool_calls", tool_calls), ("tokens", tokens))
            if v is not None
        ) + ")"  # fmt: skip
        for what, limit in (("model_calls", model_calls), ("tool_calls", tool_calls), ("tokens", tokens)):
            if limit is not None and (type(limit) is not int or limit < 0):
                raise HarnessError(f"at_most({what}={limit!r}): a limit is an int >= 0")
        for what, limit, made in (("model_calls", model_calls, self.model_calls), ("tool_calls", tool_calls,
                                                                                  self.tool_calls)):  # fmt: skip
            if limit is not None and len(made) > limit:
                over = made[limit]
                self._fail(shown, over.seq, what, f"{len(made)} made, at most {limit}: call {limit + 1} is at seq "
                           f"{over.seq}")  # fmt: skip
        if tokens is not None:
            total = 0
            for m in self.model_calls:
                total += m.tokens or 0
                if total > tokens:
                    spent = sum(x.tokens or 0 for x in self.model_calls)
                    self._fail(shown, m.seq, "response.usage", f"{spent} tokens used, at most {tokens}: passed at "
                               f"seq {m.seq} ({m.name})")  # fmt: skip
        return self

    def result(self, expected: Any) -> Expectation:
        """What the run returned (a workflow's return value; an Executor's last verified result) matches `expected`
        as an argument of `called()` does: equal, an instance of a type, `expected(result)` true for a callable."""
        why = _unmatched("result", expected, self._calls.result)
        if why is not None:
            self._fail(f"result({_matcher(expected)})", self._calls.result_seq, "result", why)
        return self

    def state(self, expected: str) -> Expectation:
        """The run is in state `expected` (`"DONE"`, `"FAILED"`, `"PAUSED"`, ...; an unfinished run's is where it
        stopped)."""
        if self._calls.state != expected:
            self._fail(f"state({expected!r})", self._calls.last_seq, "state",
                       f"the run is {self._calls.state}, expected {expected}")  # fmt: skip
        return self

    def _canonical(self, name: str) -> str:
        """A name as the model used it: an MCP step's recorded name (`mcp.refund`) reads as its tool's."""
        for c in self.tool_calls:
            if c.name == name:
                return name
        for c in self.tool_calls:
            if c.tool == name:
                return c.name
        return name

    def _fail(self, rule: str, seq: int | None, path: str, why: str) -> None:
        where = f"at seq {seq}, field {path}" if seq is not None else f"on field {path}"
        raise ExpectationFailed(
            f"expect({self._shown}).{rule} failed {where}: {why}\n{_listing(self._calls)}", seq=seq, path=path,
            calls=self.tool_calls,
        )  # fmt: skip


def expect(trace: str | os.PathLike[str] | Replay | Outcome) -> Expectation:
    """The calls of the run at `trace` (a path, an Outcome or a Replay), to check with chained rules."""
    return Expectation(calls(trace))


# --- the four modes: each returns None, or (seq, field path, why) of the first call or name that breaks it ----

_Problem = tuple[int | None, str, str] | None


def _strict(wanted: list[str], made: tuple[ToolCall, ...]) -> _Problem:
    for i, c in enumerate(made):
        if i >= len(wanted):
            return c.seq, "name", f"tool call {i + 1} is {c.name!r}, past the {len(wanted)} expected"
        if c.name != wanted[i]:
            return c.seq, "name", f"tool call {i + 1} is {c.name!r}, expected {wanted[i]!r}"
    if len(made) < len(wanted):
        return None, "name", f"{len(made)} tool calls made, expected {len(wanted)}: {wanted[len(made)]!r} is missing"
    return None


def _extra(allowed: list[str], made: tuple[ToolCall, ...]) -> _Problem:
    """The first call made beyond what `allowed` lists (each listed name allows one call)."""
    left = Counter(allowed)
    for i, c in enumerate(made):
        if left[c.name] <= 0:
            listed = allowed.count(c.name)
            why = "not among the names" if not listed else f"one more than the {listed} listed"
            return c.seq, "name", f"tool call {i + 1} is {c.name!r}: {why}"
        left[c.name] -= 1
    return None


def _missing(wanted: list[str], made: tuple[ToolCall, ...]) -> _Problem:
    """The first name listed more times than it was called."""
    have = Counter(c.name for c in made)
    need = Counter(wanted)
    for name in wanted:
        if have[name] < need[name]:
            return None, "name", f"{name!r} was called {have[name]} time(s), expected {need[name]}"
    return None


def _unordered(wanted: list[str], made: tuple[ToolCall, ...]) -> _Problem:
    return _extra(wanted, made) or _missing(wanted, made)


_MODES: dict[str, Callable[[list[str], tuple[ToolCall, ...]], _Problem]] = {
    "strict": _strict,
    "unordered": _unordered,
    "subset": _extra,
    "superset": _missing,
}


def _mismatch(actual: Any, expected: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first argument of `expected` the call's args do not match: (field path, what is there); None if all do."""
    for key, want in expected.items():
        got = actual.get(key, _MISSING) if isinstance(actual, dict) else _MISSING
        path = f"args.{key}"
        if got is _MISSING:
            return path, f"{path} is absent"
        why = _unmatched(path, want, got)
        if why is not None:
            return path, why
    return None


def _unmatched(path: str, want: Any, got: Any) -> str | None:
    """Why `got` (at path) does not match `want`: equal, ANY, a type (an instance of it) or a callable returning
    true (one that raises: no match, said so); None when it matches."""
    if want is ANY:
        return None
    if isinstance(want, type):
        return None if isinstance(got, want) else f"{path} is {got!r:.120}, not an instance of {want.__name__}"
    if callable(want):
        name = getattr(want, "__name__", "the check")
        try:
            ok = bool(want(got))
        except Exception as e:  # a predicate that cannot read the value: no match, said so
            return f"{path} is {got!r:.120}: {name} raised {e!r:.80}"
        return None if ok else f"{path} is {got!r:.120}: {name}() is false"
    return None if got == want else f"{path} is {got!r:.120}, expected {want!r:.120}"


def _matcher(value: Any) -> str:
    """A matcher as a message shows it: ANY, a type's or a function's name, else its repr."""
    if value is ANY or not callable(value):
        return f"{value!r:.80}"
    return str(getattr(value, "__name__", None) or f"{value!r:.80}")


def _listed(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in names)


_SHOWN = 40  # calls listed in a message at most (the first ones, then how many more)


def _listing(found: Calls) -> str:
    """The calls made, one a line, in trace order: what a failure message shows."""
    rows: list[tuple[int, str]] = []
    for t in found.tools:
        outcome = "" if t.done else " (unfinished)"
        if t.error is not None:
            outcome = f" -> raised {t.error.get('type')}"
        tries = f" x{t.attempts}" if t.attempts > 1 else ""
        rows.append((t.seq, f"tool  {t.name} {_short(t.args)}{tries}{outcome}"))
    for m in found.models:
        tokens = f" ({m.tokens} tokens)" if m.tokens is not None else ""
        rows.append((m.seq, f"model {m.name}{tokens}"))
    rows.sort()
    head = f"calls made ({len(found.tools)} tool, {len(found.models)} model; the run is {found.state}):"
    lines = [f"  seq {seq:<5} {text}" for seq, text in rows[:_SHOWN]]
    if len(rows) > _SHOWN:
        lines.append(f"  ... and {len(rows) - _SHOWN} more")
    return "\n".join([head, *lines]) if rows else f"no calls made (the run is {found.state})"


def _short(value: Any, width: int = 80) -> str:
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
