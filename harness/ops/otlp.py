"""A run as OpenTelemetry spans (the GenAI conventions), in OTLP's protobuf JSON mapping: `harness export --otlp`.

`spans(trace)` reads a trace (replay(), every line checked) and gives its
run as one `ExportTraceServiceRequest` in OTLP/JSON (ids in hex, times in
nanoseconds as strings, enums as ints), the form the OpenTelemetry
Collector's file exporter writes and its file receiver reads; `export(paths,
out)` writes one such line per run. No OpenTelemetry package is needed.

The spans of a run:
- the root, `invoke_workflow {name}` (a workflow's run) or `invoke_agent
  {name}` (an Executor's, a Recorder's), from the header to the last record;
  its status OK for DONE, ERROR for FAILED, unset otherwise (`harness.state`
  says where it stands); a rerun or fork links to its parent's root;
- `chat {model}` (or the API's operation) per model call, CLIENT, with the
  GenAI attributes (provider, models, tokens, finish reason, `error.type`);
- `execute_tool {tool}` per tool call: a step's attempt, from its intent to
  its result (OK), error (ERROR) or pause; an MCP tool's carries
  `mcp.method.name` and `harness.mcp.server`; a tool called as a crossing too;
- `invoke_agent {child}` per agent a run spawned, parent of that agent's spans;
- every other crossing (`now`, `sleep`, an http call that is no model call,
  an MCP listing, ...) as a span named by its boundary (`GET`, `tools/list`).
Crashes, resumes, pauses, answers, reconciles, verifier rejections and
artifacts are events of the root (a crash or resume also of each tool span
open across it).

Every span carries `harness.run_id`, `harness.seq` (its first record) and
`harness.served`: true for a record a rerun or fork took from its parent's
recording. Ids are derived, never random: the trace id is the first 16 bytes
of sha256(run id), a span id the first 8 of sha256(run id, ":", seq), so an
export made again, or after the run resumed, names the same records with the
same ids and a backend de-duplicates them. A span starts when the record
before it (of its agent) was written and ends when its own was: harness
records when each record was written, not when a call started.

Message content is left out unless `content=True`: then `gen_ai.input.messages`,
`gen_ai.output.messages`, `gen_ai.tool.call.arguments` and `.result` (JSON
text), after the run's redaction rules (its header's, plus `redact`) ran
over them again.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import HarnessError, internal
from .._version import VERSION
from ..review.calls import (
    ModelCall,
    asked,
    mcp_tool,
    messages_in,
    messages_out,
    model_call,
    read,
    role,
    tool_call,
    tool_error,
)
from ..review.calls import traces as traces_of
from ..trace.redact import Redaction, Rule

INTERNAL, CLIENT = 1, 3  # SpanKind
UNSET, OK, ERROR = 0, 1, 2  # Status.code
MAIN = "main"
_NS = 1_000_000  # a record's time is to the millisecond


def trace_id(run_id: str) -> str:
    """The trace id of a run: the first 16 bytes of sha256(run id), in hex."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:32]


def span_id(run_id: str, seq: int) -> str:
    """The span id of the span a run's record `seq` starts: the first 8 bytes of sha256(run id:seq), in hex."""
    return hashlib.sha256(f"{run_id}:{seq}".encode()).hexdigest()[:16]


def _value(v: Any) -> dict[str, Any]:
    """An attribute value as OTLP/JSON's AnyValue (64-bit ints as strings, as the protobuf JSON mapping has them)."""
    if v is True or v is False:
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):  # the protobuf JSON mapping spells the floats JSON has no number for
        return {"doubleValue": v if math.isfinite(v) else "NaN" if v != v else "Infinity" if v > 0 else "-Infinity"}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": v if isinstance(v, str) else orjson.dumps(v).decode()}


_MADE: dict[str, dict[Any, dict[str, Any]]] = {}  # key -> a str, int or tuple value -> its KeyValue
_FLAGS: dict[tuple[str, bool], dict[str, Any]] = {}  # (key, a bool value) -> its KeyValue (True == 1: kept apart)
_SHARED = frozenset({str, int, tuple})  # (the only tuples here are the export's own, of strings)


def _attrs(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    """Attributes as OTLP/JSON's KeyValue list, a None left out. The hot loop of the export: a scalar's KeyValue
    is made once and shared (most repeat: operation names, models, tools, the run id, false), never changed."""
    out = []
    for k, v in pairs.items():
        t = type(v)
        if t in _SHARED:
            by = _MADE.get(k)
            if by is None:
                by = _MADE[k] = {}
            made = by.get(v)
            if made is None:
                if len(by) >= 4096:
                    by.clear()
                made = by[v] = {"key": k, "value": _value(v)}
            out.append(made)
        elif t is bool:
            made = _FLAGS.get((k, v))
            if made is None:
                made = _FLAGS[(k, v)] = {"key": k, "value": {"boolValue": v}}
            out.append(made)
        elif v is not None:
            out.append({"key": k, "value": _value(v)})
    return out


class _Span:
    """A span being built; `json()` gives its OTLP/JSON form."""

    __slots__ = ("attrs", "end", "events", "id", "kind", "links", "message", "name", "parent", "start", "status")

    def __init__(self, id: str, name: str, kind: int, start: int, parent: _Span | None, attrs: dict[str, Any]):
        self.id, self.name, self.kind, self.start, self.end = id, name, kind, start, start
        self.parent, self.attrs = parent, attrs
        self.events: list[dict[str, Any]] = []
        self.links: list[dict[str, Any]] = []
        self.status, self.message = UNSET, ""

    def fail(self, error: Any) -> None:
        self.status = ERROR
        if isinstance(error, dict):
            self.attrs["error.type"] = str(error.get("type") or "_OTHER")
            self.message = str(error.get("message") or "")
        else:
            self.attrs["error.type"] = str(error)

    def event(self, at: int, name: str, attrs: dict[str, Any]) -> None:
        self.events.append({"timeUnixNano": str(at), "name": name, "attributes": _attrs(attrs)})

    def json(self, trace: str) -> dict[str, Any]:
        start, end, attrs = str(self.start), str(self.end), _attrs(self.attrs)
        out: dict[str, Any]
        if self.parent is not None:  # (one literal each: faster than a key at a time)
            out = {
                "traceId": trace, "spanId": self.id, "parentSpanId": self.parent.id, "name": self.name,
                "kind": self.kind, "startTimeUnixNano": start, "endTimeUnixNano": end, "attributes": attrs,
            }  # fmt: skip
        else:
            out = {
                "traceId": trace, "spanId": self.id, "name": self.name, "kind": self.kind,
                "startTimeUnixNano": start, "endTimeUnixNano": end, "attributes": attrs,
            }  # fmt: skip
        if self.events:
            out["events"] = self.events
        if self.links:
            out["links"] = self.links
        status: dict[str, Any] = {"code": self.status} if self.status else {}
        if self.message:
            status["message"] = self.message
        out["status"] = status
        return out


class _Run:
    """The spans of one run, built record by record (see the module docstring)."""

    def __init__(self, path: str, content: bool, redact: Iterable[Rule] | None):
        self.path, self.content, self.extra = path, content, redact
        self.header: dict[str, Any] = {}
        self.run_id, self.t0 = "", 0
        self.ids = hashlib.sha256()  # sha256 of "run id:", copied for each span id (span_id(), faster)
        self.spans: list[_Span] = []
        self.root: _Span | None = None
        self.last: dict[str, int] = {}  # agent -> the time of its last record (its next span starts there)
        self.tools: dict[str, _Span] = {}  # agent (lane) -> its tool call in flight
        self.agents: dict[str, _Span] = {}  # agent -> its invoke_agent span, while it runs
        self.servers: set[str] = set()  # MCP servers this run listed
        self.asked: dict[str, list[tuple[Any, Any, Any]]] = {}  # agent -> the tool calls its last model reply asked
        self.resumes = 0
        self.redaction: Redaction | None = None
        self.now = 0
        self.forked = False
        self.done: Callable[[_Span], None] | None = None  # told of each span but the root once it is whole (live)

    def visit(self, rec: dict[str, Any]) -> None:
        kind = rec["kind"]
        if kind == "header":
            self._header(rec)
            return
        if self.root is None:  # the reader puts the header first
            raise internal("a record before the header", str(self.path))
        at = self.t0 + round(rec["ts"] * 1000) * _NS
        if at > self.now:
            self.now = at
        agent = rec.get("agent", MAIN)
        if kind == "transition":
            self._transition(rec, agent, at)
        elif kind == "crossing":
            self._crossing(rec, agent, at)
        elif kind == "checkpoint":  # (the third kind nearly every line is: no span, nothing to say)
            pass
        elif kind == "spawn":
            parent = self.agents.get(agent, self.root)
            child = str(rec["child"])
            self.agents[child] = self._open(rec, f"invoke_agent {child}", INTERNAL, at, parent, {
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": child, "harness.agent": child,
            })  # fmt: skip
            self.last[child] = at
        elif kind == "exit":
            span = self.agents.pop(agent, None)
            if span is not None:
                span.end = at
                if "error" in rec:
                    span.fail(rec["error"])
                else:
                    span.status = OK
                if self.done is not None:
                    self.done(span)
        elif kind in ("resume", "crash"):
            self._seam(rec, at)
        elif kind == "answer":
            self.root.event(at, "harness.answer", self._seqs(rec, op=rec["op"], answer=self._shown(rec.get("answer"))))
        elif kind == "reconcile":
            said = self._seqs(rec, op=rec["op"], happened=rec["happened"], evidence=rec.get("evidence"))
            self.root.event(at, "harness.reconcile", said)
        elif kind == "artifact":
            said = self._seqs(rec, name=rec["name"], sha256=rec["sha256"], size=rec["size"])
            self.root.event(at, "harness.artifact", said)
        elif kind == "event":
            said = self._seqs(rec, type=rec.get("type"), data=self._shown(rec.get("data")))
            self.root.event(at, "harness.event", said)
        elif kind == "end":
            self.root.attrs["harness.state"] = "DONE" if rec.get("status") == "success" else "FAILED"
            if rec.get("status") == "success":
                self.root.status = OK
            else:
                self.root.fail(rec.get("error") or {"type": str(rec.get("status")), "message": ""})
        elif kind == "seal":
            self.root.attrs["harness.sealed"] = True
        self.last[agent] = at

    def _header(self, rec: dict[str, Any]) -> None:
        self.header = rec
        self.forked = "parent" in rec  # a rerun or fork: some records were served
        self.run_id = str(rec["run_id"])
        self.ids = hashlib.sha256(f"{self.run_id}:".encode())
        self.t0 = round(rec["ts"] * 1000) * _NS
        self.now = self.t0
        self.last[MAIN] = self.t0
        workflow = rec.get("workflow")
        if isinstance(workflow, str):
            name, operation = workflow.rpartition(":")[2], "invoke_workflow"
        else:
            entry = rec.get("env", {}).get("entrypoint") if isinstance(rec.get("env"), dict) else None
            base = os.path.splitext(os.path.basename(entry))[0] if isinstance(entry, str) else ""
            name, operation = base if base and not base.startswith("-") else "harness", "invoke_agent"  # `python -c`
        attrs: dict[str, Any] = {"gen_ai.operation.name": operation}
        attrs["gen_ai.agent.name" if operation == "invoke_agent" else "harness.workflow"] = workflow or name
        attrs["gen_ai.conversation.id"] = self.run_id
        if "parent" in rec:
            attrs["harness.parent"] = rec["parent"]
            attrs["harness.branch"] = rec.get("branch")
        self.root = self._open(rec, f"{operation} {name}", INTERNAL, self.t0, None, attrs)
        if "parent" in rec:
            parent = str(rec["parent"])
            link = {"harness.link": "fork" if "branch" in rec else "rerun", "harness.branch": rec.get("branch")}
            to = {"traceId": trace_id(parent), "spanId": span_id(parent, 1), "attributes": _attrs(link)}
            self.root.links.append(to)

    def _open(
        self, rec: dict[str, Any], name: str, kind: int, start: int, parent: _Span | None, attrs: dict[str, Any]
    ) -> _Span:
        seq = rec["seq"]
        attrs["harness.run_id"] = self.run_id
        attrs["harness.seq"] = seq
        if self.forked:
            how = role(rec, self.header)
            attrs["harness.served"] = how == "served"
            if how == "answered":  # a fork's branch: the value the fork set, no call made
                attrs["harness.answered"] = True
        else:
            attrs["harness.served"] = False
        agent = rec.get("agent")
        if agent is not None:
            attrs.setdefault("harness.agent", agent)
        h = self.ids.copy()
        h.update(b"%d" % seq)
        span = _Span(h.hexdigest()[:16], name, kind, start, parent, attrs)
        self.spans.append(span)
        return span

    def _seqs(self, rec: dict[str, Any], **attrs: Any) -> dict[str, Any]:
        served = self.forked and role(rec, self.header) == "served"
        return {"harness.seq": rec["seq"], "harness.served": served, **attrs}

    def _shown(self, value: Any) -> Any:
        """A value of the run's content, only with content=True, redacted again, as JSON text."""
        if not self.content or value is None:
            return None
        if self.redaction is None:
            self.redaction = Redaction.from_header(self.header.get("redact"), self.path).plus(self.extra)
        return orjson.dumps(self.redaction(value)).decode()

    def _parent(self, agent: str) -> _Span:
        if self.root is None:  # the reader puts the header first
            raise internal("a record before the header", str(self.path))
        return self.agents.get(agent, self.root)

    def _transition(self, rec: dict[str, Any], agent: str, at: int) -> None:
        if self.root is None:  # the reader puts the header first
            raise internal("a record before the header", str(self.path))
        to, came = rec["to"], rec["from"]
        open_ = self.tools.get(agent)
        if to == "ACT":
            self._tool_step(rec, agent, at)
            return
        if came == "ACT" and open_ is not None:
            del self.tools[agent]
            open_.end = at
            if to == "VERIFY":
                result = rec.get("result")
                if "harness.mcp.server" in open_.attrs and tool_error(result):
                    open_.fail({"type": "tool_error", "message": "the MCP tool answered isError"})
                else:
                    open_.status = OK
                if self.content:
                    open_.attrs["gen_ai.tool.call.result"] = self._shown(result)
            elif "error" in rec:
                open_.fail(rec["error"])
            elif to == "PAUSED" and "question" not in rec:  # in flight at a crash: whether it happened is unknown
                open_.attrs["harness.uncertain"] = True
            if self.done is not None:
                self.done(open_)
        if to == "PAUSED":
            why = "question" if "question" in rec else "timeout" if "error" in rec else "uncertain"
            said = self._seqs(rec, reason=why, step=rec["step"], question=self._shown(rec.get("question")))
            self.root.event(at, "harness.pause", said)
        elif came == "VERIFY" and to == "PLAN":
            error = rec["error"] if isinstance(rec.get("error"), dict) else {}
            said = self._seqs(rec, step=rec["step"], attempt=rec.get("attempt", 1), **{
                "error.type": error.get("type"), "message": error.get("message"),
            })  # fmt: skip
            self.root.event(at, "harness.verification_failed", said)
        elif to == "DONE" and agent == MAIN:
            self.root.status = OK
        elif to == "FAILED" and agent == MAIN:
            self.root.fail(rec.get("error") or {"type": "_OTHER"})
        if agent == MAIN or to in ("DONE", "FAILED", "PAUSED"):
            self.root.attrs["harness.state"] = to

    def _tool_step(self, rec: dict[str, Any], agent: str, at: int) -> None:
        tool = str(rec["tool"])
        attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool"}
        found = mcp_tool(tool, self.servers) if self.servers else None
        shown = found[1] if found else tool
        attrs["gen_ai.tool.name"] = shown
        attrs["gen_ai.tool.call.id"] = self._call_id(agent, shown, rec.get("args"))
        if found:
            attrs["mcp.method.name"] = "tools/call"
            attrs["harness.mcp.server"] = found[0]
        attrs["harness.step"] = rec["step"]
        attrs["harness.attempt"] = rec.get("attempt", 1)
        contract = rec.get("contract") or self.header.get("tools", {}).get(tool)
        if isinstance(contract, dict):
            attrs["harness.tool.effect"] = contract.get("effect")
        if self.content:
            attrs["gen_ai.tool.call.arguments"] = self._shown(rec.get("args"))
        self.tools[agent] = self._open(rec, f"execute_tool {shown}", INTERNAL, at, self._parent(agent), attrs)

    def _call_id(self, agent: str, name: str, args: Any) -> Any:
        """The id the model gave the call of this tool with these arguments in its last reply (matched once)."""
        asked = self.asked.get(agent)
        if not asked:
            return None
        for i, (n, a, id_) in enumerate(asked):
            if n == name and a == args:
                del asked[i]
                return id_
        for i, (n, _, id_) in enumerate(asked):
            if n == name:
                del asked[i]
                return id_
        return None

    def _crossing(self, rec: dict[str, Any], agent: str, at: int) -> None:
        start, parent = self.last.get(agent, self.t0), self._parent(agent)
        kind = rec["boundary"]
        call = model_call(rec)
        if call is not None:
            self._chat(rec, call, start, at, parent, agent)
            return
        tool = tool_call(rec)
        if tool is not None:
            if tool.server is not None:
                self.servers.add(tool.server)
            if tool.method == "tools/list":
                attrs = {"mcp.method.name": "tools/list", "harness.mcp.server": tool.server}
                span = self._open(rec, "tools/list", CLIENT, start, parent, attrs)
            else:
                attrs = {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool.name,
                    "gen_ai.tool.call.id": self._call_id(agent, tool.name, tool.args),
                    "mcp.method.name": tool.method, "harness.mcp.server": tool.server,
                    "gen_ai.tool.call.arguments": self._shown(tool.args),
                    "gen_ai.tool.call.result": self._shown(rec.get("response")),
                }  # fmt: skip
                span = self._open(rec, f"execute_tool {tool.name}", INTERNAL, start, parent, attrs)
                if tool.method and tool_error(rec.get("response")):
                    span.fail({"type": "tool_error", "message": "the MCP tool answered isError"})
        elif kind == "mcp.list_tools" or kind == "pydantic_ai":
            span = self._open(rec, kind, INTERNAL, start, parent, {"harness.boundary": kind})
        elif kind == "http":
            request = rec["request"] if isinstance(rec.get("request"), dict) else {}
            response = rec["response"] if isinstance(rec.get("response"), dict) else {}
            method = str(request.get("method") or "HTTP")
            attrs = {"http.request.method": method, "url.full": request.get("url"), "harness.boundary": "http"}
            attrs["http.response.status_code"] = response.get("status")
            span = self._open(rec, method, CLIENT, start, parent, attrs)
            status = response.get("status")
            if type(status) is int and status >= 400:
                span.fail(str(status))
        else:
            span = self._open(rec, kind, INTERNAL, start, parent, {"harness.boundary": kind})
        span.end = at
        if "error" in rec:
            span.fail(rec["error"])
        if self.done is not None:
            self.done(span)

    def _chat(self, rec: dict[str, Any], call: ModelCall, start: int, at: int, parent: _Span, agent: str) -> None:
        model = call.request_model or call.response_model
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": call.operation, "gen_ai.provider.name": call.provider,
            "gen_ai.request.model": call.request_model, "gen_ai.response.model": call.response_model,
            "harness.boundary": rec["boundary"],
        }  # fmt: skip
        if call.usage is not None:  # billed by this run only when made live: a backend that sums gen_ai.usage
            # must not bill a rerun's or fork's served call again (`harness cost` counts the same way)
            billed = not self.forked or role(rec, self.header) == "live"
            usage = "gen_ai.usage" if billed else "harness.recorded_usage"
            attrs[f"{usage}.input_tokens"] = call.usage.input
            attrs[f"{usage}.output_tokens"] = call.usage.output
            attrs[f"{usage}.cache_read.input_tokens"] = call.usage.cached
        if call.finish_reason is not None:
            attrs["gen_ai.response.finish_reasons"] = (call.finish_reason,)  # (a tuple: its KeyValue is shared)
        if self.content:
            attrs["gen_ai.input.messages"] = self._shown(messages_in(rec))
            attrs["gen_ai.output.messages"] = self._shown(messages_out(rec) if call.error is None else None)
        span = self._open(rec, f"{call.operation} {model}" if model else call.operation, CLIENT, start, parent, attrs)
        span.end = at
        if call.error is not None:
            span.fail(rec.get("error") or call.error)
        if self.done is not None:
            self.done(span)
        self.asked[agent] = asked(rec) if call.error is None else []

    def _seam(self, rec: dict[str, Any], at: int) -> None:
        if self.root is None:  # the reader puts the header first
            raise internal("a record before the header", str(self.path))
        if rec["kind"] == "resume":
            self.resumes += 1
            env = rec["env"] if isinstance(rec.get("env"), dict) else {}
            said = self._seqs(rec, set_aside=rec.get("set_aside"), entrypoint=env.get("entrypoint"))
            name = "harness.resume"
        else:
            error = rec["error"] if isinstance(rec.get("error"), dict) else {}
            said = self._seqs(rec, state=rec.get("state"), step=rec.get("step"), **{
                "exception.type": error.get("type"), "exception.message": error.get("message"),
                "exception.stacktrace": rec.get("traceback"),
            })  # fmt: skip
            name = "harness.crash"
        self.root.event(at, name, said)
        for span in self.tools.values():  # a call in flight across the seam
            span.event(at, name, said)

    def root_span(self) -> dict[str, Any]:
        """The root span as the records so far make it: from the header to the last record (harness.otel sends
        it when a run's writer closes)."""
        if self.root is None:  # the reader puts the header first
            raise internal("a record before the header", str(self.path))
        self.root.end = self.now
        self.root.attrs["harness.resumes"] = self.resumes
        return self.root.json(trace_id(self.run_id))

    def request(self, service: str) -> dict[str, Any]:
        """The run as one ExportTraceServiceRequest (OTLP/JSON)."""
        for span in (*self.tools.values(), *self.agents.values()):  # still open where the trace ends
            span.end = self.now
            span.attrs["harness.open"] = True
        root = self.root_span()
        trace = trace_id(self.run_id)
        return as_request(service, [root, *(s.json(trace) for s in self.spans[1:])])


def as_request(service: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
    """An ExportTraceServiceRequest (OTLP/JSON) holding spans, under harness's resource and scope."""
    return {
        "resourceSpans": [{
            "resource": {"attributes": _attrs({"service.name": service})},
            "scopeSpans": [{"scope": {"name": "harness", "version": VERSION}, "spans": spans}],
        }]
    }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Exported:
    """What `export()` wrote: the file, the runs and the spans in it."""

    path: str
    runs: int
    spans: int


def spans(
    trace: str | os.PathLike[str],
    *,
    content: bool = False,
    redact: Iterable[Rule] | None = None,
    service: str = "harness",
    full: bool = False,
) -> dict[str, Any]:
    """The run of `trace` as one OTLP `ExportTraceServiceRequest`, as OTLP/JSON (a dict; see the module docstring).

    Each line is checked against the checksum chain; `full=True` checks every rule of replay() too.
    """
    path = os.fspath(trace)
    run = _Run(path, content, redact)
    read(path, run.visit, full=full)
    return run.request(service)


def requests(
    paths: Iterable[str | os.PathLike[str]],
    *,
    content: bool = False,
    redact: Iterable[Rule] | None = None,
    service: str = "harness",
    full: bool = False,
) -> Iterator[dict[str, Any]]:
    """One ExportTraceServiceRequest per run of `paths` (traces, runs folders or runs URLs), in order."""
    for path in traces_of(paths):
        yield spans(path, content=content, redact=redact, service=service, full=full)


def count(request: dict[str, Any]) -> int:
    """The spans in a request."""
    return sum(len(s["spans"]) for r in request["resourceSpans"] for s in r["scopeSpans"])


def export(
    paths: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    content: bool = False,
    redact: Iterable[Rule] | None = None,
    service: str = "harness",
    full: bool = False,
) -> Exported:
    """Write one OTLP/JSON ExportTraceServiceRequest per run to `out`, a line each (what the Collector's file
    receiver reads). `out` appears whole or not at all: a trace that cannot be read leaves no file behind."""
    target = os.fspath(out)
    folder = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".otlp-", dir=folder)
    except OSError as e:
        raise HarnessError(f"{target}: cannot write there: {e.strerror}") from None
    runs = n = 0
    try:
        with os.fdopen(fd, "wb") as f:
            for request in requests(paths, content=content, redact=redact, service=service, full=full):
                f.write(orjson.dumps(request, option=orjson.OPT_APPEND_NEWLINE))
                runs, n = runs + 1, n + count(request)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Exported(target, runs, n)
