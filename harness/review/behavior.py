"""The behavior view: what an agent did, in harness's own shape, the same across runs and framework releases.

A model call or a tool call reaches a trace through one of several doors,
each recording it in its own shape: `harness.http` keeps the OpenAI chat
completions or responses API exchange; `harness.pydantic_ai` Pydantic AI's
`ModelRequest`/`ModelResponse` as its codec writes them; `harness.openai_agents`
the Agents SDK's items; `harness.mcp` an MCP `CallToolResult`. `calls.py`
reads each of those (`exchange()`, `tool_call()`: the one place that knows
the doors' shapes); `Behavior` maps what it reads, record by record in trace
order, to one view record of its own shape (`VIEW`, documented field by
field in docs/FORMAT.md):

    {"kind": "model_call", "via": "http" | "pydantic_ai" | "openai_agents",
     "model": ..., "settings": {...}, "tools": [{"name", "description", "parameters"}],
     "output": {...}, "history": n, "messages": [...], "reply": {...}, "finish": ...,
     "usage": {...}, "origin": "served" | "answered"}
    {"kind": "tool_call", "via": ..., "tool": ..., "args": {...}, "result": ... | "error": ...,
     "origin": ...}

A message is `{"role": "system" | "user" | "assistant" | "tool", "text",
"reasoning", "tool_calls": [{"id", "name", "args"}], "call", "name",
"result" | "error"}` (each field only when it has a value). Tool-call
arguments are JSON objects (a door that sends them as a JSON string is read).

Rules kept here:
- the view holds what the agent did, never a framework's serialization: a
  field is mapped by name from each door's shape, and one it does not know is
  left out, so a framework release that adds a field changes no view;
- what a framework or a server makes up is gone: response, message, item and
  reasoning ids, signatures, timestamps, durations, provider details, the
  history digest; tool-call ids are renamed `call-1`, `call-2`, ... in order
  of first appearance in the trace, the same name wherever the same call is
  named, so a tool result still points to its call;
- a call's `messages` are only those its conversation did not already hold:
  the earlier messages (the previous call's messages and its reply, sent
  again) are counted in `history`; `tools` and `output` are written when they
  differ from the conversation's previous call. So a change reads once, where
  it happened, and one call fits on a screen;
- `usage` (tokens) stays in its own field: goldens mark it ignored by default;
- in a rerun or a fork, a call taken from the parent's recording says
  `"origin": "served"`, a fork's branch `"answered"` (a step's `-> ACT`
  intent too: `calls.role()` on the trace's header); one made live says
  nothing, so a plain run's view is what view 1 was. The default rules leave
  `origin` out: served or live, it is the same call;
- pure: `Behavior` holds only the trace's header, ids and conversations so far, reads
  records, never files; a record that is none of these is not its business
  (`view()` returns None) and bad input is never an exception.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .calls import EXCHANGE_KINDS, Exchange, exchange, role, tool_call

VIEW = 2  # the behavior view's version: golden files name it (`"view": 2`); 2: a rerun's calls say `origin`

# the crossings mapped here: model calls (calls.exchange) and tool calls (calls.tool_call)
TOOL_CALLS = frozenset({"pydantic_ai.tool", "openai_agents.tool", "openai_agents.mcp", "mcp.call_tool"})
BOUNDARIES = EXCHANGE_KINDS | TOOL_CALLS
_VIA = {"http": "http", "pydantic_ai.model": "pydantic_ai", "openai_agents.model": "openai_agents",
        "openai_agents.stream": "openai_agents"}  # fmt: skip
_ORIGIN = {"served": "served", "answered": "answered"}  # calls.role() -> the view's `origin` (live: not written)


@dataclass
class _Conversation:
    """One conversation's latest call: what it sent and got back, its tools and output (view form, raw ids)."""

    transcript: list[dict[str, Any]] = field(default_factory=list)  # messages sent, then the reply
    sent: list[dict[str, Any]] = field(default_factory=list)  # messages sent (Pydantic AI: to extend with `new`)
    tools: Any = None
    output: Any = None
    scope: str = ""  # Pydantic AI's per-run tool call names (`<tool-call-0>`) are unique within it


class Behavior:
    """Maps the records of one trace, in order, to their behavior view (the module docstring)."""

    def __init__(self, header: Mapping[str, Any] | None = None) -> None:
        self._header: Mapping[str, Any] = header or {}  # the trace's: says which of its records were served
        self._ids: dict[str, str] = {}  # a raw tool-call id -> call-N
        self._calls: list[_Conversation] = []  # every model call so far, latest last (full-history doors)
        self._digests: dict[str, _Conversation] = {}  # Pydantic AI: the history digest a next request names
        self._scopes = 0
        self._named_so_far = 0
        self._tools: dict[str, Any] = {}  # a raw tool-call id -> the tool it called (a result names it too)

    # --- records ------------------------------------------------------------------------------------------------

    def view(self, record: Mapping[str, Any]) -> dict[str, Any] | None:
        """The view of a crossing this module maps (or of a rerun's step intent: with its `origin`), else None (the
        record is shown as it is)."""
        kind = record.get("kind")
        if kind == "header":
            self._header = record
            return None
        if kind == "transition" and record.get("to") == "ACT":  # a step's intent: the tool call it makes
            origin = self._origin(record)
            return None if origin is None else {**record, "origin": origin}
        boundary = record.get("boundary")
        if kind != "crossing" or boundary not in BOUNDARIES:
            return None
        out: dict[str, Any] | None
        if boundary in TOOL_CALLS:
            out = self._tool(record)
        else:
            call = exchange(record)
            out = None if call is None else self._model(call)
        if out is None:
            return None
        if "response" not in record and "error" in record:
            out.pop("reply", None)
            out.pop("result", None)
            out["error"] = record["error"]
        origin = self._origin(record)
        if origin is not None:
            out["origin"] = origin
        return out

    def _origin(self, record: Mapping[str, Any]) -> str | None:
        """`served` (from a parent's recording), `answered` (a fork's branch), or None: made live."""
        return _ORIGIN.get(role(record, self._header)) if "parent" in self._header else None

    # --- doors --------------------------------------------------------------------------------------------------

    def _model(self, call: Exchange) -> dict[str, Any]:
        """A model call's view; Pydantic AI's new messages on the conversation its history digest names."""
        via = _VIA[call.door]
        if call.door != "pydantic_ai.model":
            out = self._call(via, call.model, call.settings, call.tools, call.output, call.messages, call.reply,
                             call.finish, call.usage)  # fmt: skip
            if call.failure is not None:  # an error status, a body it does not read: what came back
                out["error"] = call.failure
            return out
        prior = self._digests.get(call.continues) if call.continues is not None else None
        conversation = prior if prior is not None else _Conversation(scope=self._scope())
        scope = conversation.scope
        sent = conversation.sent + [_scoped(m, scope) for m in call.messages]
        tools, output = (call.tools, call.output) if call.declared else (conversation.tools, conversation.output)
        reply = _scoped(call.reply, scope) if call.reply is not None else None
        out = self._call(via, call.model, call.settings, tools, output, sent, reply, call.finish, call.usage, prior,
                         scope)  # fmt: skip
        if call.digest is not None:
            self._digests[call.digest] = self._calls[-1]
            if len(self._digests) > 1024:  # a request continues a recent one: the oldest are let go
                del self._digests[next(iter(self._digests))]
        return out

    def _tool(self, record: Mapping[str, Any]) -> dict[str, Any] | None:
        """A tool call made as a crossing (a Recorder's or a planner's): name, args, result, and its origin."""
        call = tool_call(record)
        if call is None or call.method == "tools/list":
            return None  # a tool list: shown as it is
        out: dict[str, Any] = {"kind": "tool_call", "via": str(record["boundary"]).partition(".")[0],
                               "tool": call.tool, "args": call.args}  # fmt: skip
        if call.returned:
            value, failed = call.outcome()
            out["error" if failed else "result"] = value
        return out

    # --- one model call -----------------------------------------------------------------------------------------

    def _scope(self) -> str:
        self._scopes += 1
        return f"{self._scopes}:"

    def _call(
        self, via: str, model: Any, settings: Any, tools: Any, output: Any, sent: list[dict[str, Any]],
        reply: Any, finish: Any, usage: Any, prior: _Conversation | None = None, scope: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        """The view of a model call that sent `sent` (the whole conversation) and got `reply` back."""
        if prior is None:  # a door that sends the whole history: the latest call whose transcript it extends
            prior = next((c for c in reversed(self._calls) if _extends(sent, c.transcript)), None)
        history = len(prior.transcript) if prior is not None and _extends(sent, prior.transcript) else 0
        if history:  # the same calls named again (Pydantic AI renames its own ids in a request): one name each
            for old, now in zip(prior.transcript, sent[:history], strict=True):  # type: ignore[union-attr]
                self._unify(old, now)
        transcript = sent + ([reply] if reply is not None else [])
        self._calls.append(_Conversation(transcript, sent, tools, output, scope))
        if len(self._calls) > 64:  # a conversation continues one of the latest calls; older ones are not looked at
            del self._calls[:-64]
        out: dict[str, Any] = {"kind": "model_call", "via": via, "model": model}
        if settings:
            out["settings"] = settings
        if tools is not None and (prior is None or tools != prior.tools):
            out["tools"] = tools
        if output is not None and (prior is None or output != prior.output):
            out["output"] = output
        if history:
            out["history"] = history
        out["messages"] = [self._named(m) for m in sent[history:]]
        if reply is not None:
            out["reply"] = self._named(reply)
        if finish is not None:
            out["finish"] = finish
        if usage is not None:
            out["usage"] = usage
        return out

    def _unify(self, old: dict[str, Any], now: dict[str, Any]) -> None:
        """Give a call named again under another raw id (Pydantic AI's `<tool-call-0>`) the name it had."""
        for a, b in zip(old.get("tool_calls") or [], now.get("tool_calls") or [], strict=False):
            if a.get("id") is not None and b.get("id") is not None and b["id"] not in self._ids:
                self._ids[b["id"]] = self.name(a["id"])
        if old.get("call") is not None and now.get("call") is not None and now["call"] not in self._ids:
            self._ids[now["call"]] = self.name(old["call"])

    def name(self, raw: Any) -> Any:
        """A tool call's name in the view: call-1, call-2, ... in order of first appearance."""
        if not isinstance(raw, str):
            return raw
        known = self._ids.get(raw)
        if known is None:
            self._named_so_far += 1
            known = self._ids[raw] = f"call-{self._named_so_far}"
        return known

    def _named(self, message: dict[str, Any]) -> dict[str, Any]:
        out = dict(message)
        if "tool_calls" in out:
            for c in out["tool_calls"]:
                if isinstance(c.get("id"), str):
                    self._tools[c["id"]] = c.get("name")
            out["tool_calls"] = [{**c, "id": self.name(c.get("id"))} for c in out["tool_calls"]]
        if "call" in out:
            if "name" not in out and self._tools.get(out["call"]) is not None:  # a door whose result names no tool
                out = {**out, "name": self._tools[out["call"]]}
            out["call"] = self.name(out["call"])
        return out


def _scoped(message: dict[str, Any], scope: str) -> dict[str, Any]:
    """A Pydantic AI message with its own tool-call names (`<tool-call-0>`, per agent run) scoped to the run."""
    out = message
    if any(_own(c.get("id")) for c in message.get("tool_calls") or []):
        out = {**out, "tool_calls": [{**c, "id": f"{scope}{c['id']}"} if _own(c.get("id")) else c
                                      for c in message["tool_calls"]]}  # fmt: skip
    if _own(message.get("call")):
        out = {**out, "call": f"{scope}{message['call']}"}
    return out


def _own(raw: Any) -> bool:
    return isinstance(raw, str) and raw.startswith("<tool-call-")


def _extends(sent: list[dict[str, Any]], transcript: list[dict[str, Any]]) -> bool:
    """Whether sent begins with transcript, tool-call ids aside (a framework may rename its own)."""
    if not transcript or len(transcript) > len(sent):
        return False
    return all(_bare(a) == _bare(b) for a, b in zip(transcript, sent, strict=False))


def _bare(message: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k != "call"}
    if "tool_calls" in out:
        out["tool_calls"] = [{k: v for k, v in c.items() if k != "id"} for c in out["tool_calls"]]
    return out


# --- the calls of a view, for tests -----------------------------------------------------------------------------


def model_calls(view: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The model calls of a behavior view (`normalize(trace)`), in its order."""
    return (r for r in view if r.get("kind") == "model_call")


def tool_calls(view: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The tool calls of a behavior view, in its order: a workflow's steps and tool crossings alike.

    Each is {"tool", "args", and "result" or "error"} (a step's from its ACT
    and VERIFY transitions; a step that never finished has neither), plus
    "via" for a crossing ("pydantic_ai", "openai_agents", "mcp") and "step".
    """
    open_: dict[Any, dict[str, Any]] = {}
    for r in view:
        kind = r.get("kind")
        if kind == "tool_call":
            yield {k: v for k, v in r.items() if k != "kind"}
        elif kind == "transition" and r.get("to") == "ACT":
            key = (r.get("agent"), r.get("step"))
            if key in open_:
                yield open_.pop(key)
            open_[key] = {"tool": r.get("tool"), "args": r.get("args"), "step": r.get("step")}
            if "origin" in r:
                open_[key]["origin"] = r["origin"]
        elif kind == "transition" and r.get("from") == "ACT":
            call = open_.pop((r.get("agent"), r.get("step")), None)
            if call is not None:
                if "error" in r:
                    call["error"] = r["error"]
                elif "result" in r:
                    call["result"] = r["result"]
                yield call
    yield from open_.values()
