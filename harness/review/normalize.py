"""The deterministic view of a trace: what golden files hold and what diffs compare.

Two views (`Rules.view`): "behavior", the default, in which each model and
tool call a door recorded is its behavior view (`behavior.py`: harness's own
shape, what a framework or server made up left out; `behave`), the run's
own id in a value reads `<run>`, and calls of concurrent tasks come in the
order their tasks were created (`by_task`); and "raw", each record as the
trace holds it. Both apply the rules below.

`normalize()` keeps what describes control flow and data (kinds, states,
steps, attempts, tools, args, results, errors, checkpoints, crossings,
resumes) and drops what changes between two runs of the same program: seq
numbers, wall-clock values, run ids, checksums and hashes, the host
environment, idempotency keys (they embed the run id), fork lineage, the
trace's own file name, the seq a reconcile or an answer record points
to, a seal's digests (its `state` stays), and a crash record's traceback (file
paths). Payloads stored in blobs
are read back in place: the view is the same whether a payload was inline
or not. Dropping seq makes an inserted record an insertion, not a
renumbering of every later one; the record's position still gives it. An
http crossing's streamed model reply reads as the message it adds up to
(`_stream.http_view`: `response.stream` instead of `response.chunks`).

`Rules` adds what a project chooses: field paths marked `<ignored>` in
every record (`_fieldpath`), and the defaults, on unless turned off (each
replaces a value with a marker, so a golden shows what was left out):
- a loopback URL's port, in any string of an exchange with a server (an
  `http` crossing, a framework's model call: its request and response):
  `http://127.0.0.1:<port>/v1` (also `localhost`, `[::1]`, `0.0.0.0`): a
  test server binds a free port; a port in a tool's args or result, or
  anywhere else, counts;
- an http response's per-request headers (`VOLATILE_RESPONSE_HEADERS`:
  request ids, server timings, rate-limit counters);
- a Pydantic AI model response's `timestamp` and `provider_response_id`, and
  the tool call ids it made up (`pyd_ai_<id>`);
- a model response's `id`, `created`, `created_at` and `system_fingerprint`
  (and a responses API output item's `id`), in a JSON body whose `object`
  names a model response and in an assembled stream: the server assigns
  them per call, from a counter, a random id or the clock.

Rules kept here:
- one record in, one record out, in order: record i of the view is seq i+1,
  except in a run with agents, whose records come in one canonical linear
  extension of happens-before (`causal_key`: the sum of the clock, then the
  agent; within an agent its own order), so the view of a concurrent run is
  the same however its threads interleaved; and, in the behavior view, the
  calls of an agent's concurrent tasks, in the order the tasks were created
  (`by_task`);
- the same keys come out in the same order every time (kind, then ORDER,
  then the rest sorted; nested objects sorted), so a run renders to the
  same bytes whenever it behaves the same;
- normalizing a normalized record changes nothing;
- a trace is validated by replay() before it is read: a corrupt or foreign
  file raises, it is never half-read.

A golden file is the view as JSONL after one line naming its format,
version and view (`GOLDEN_HEAD`; a golden of an `OLDER` version still reads,
through today's view, and `older()` says how to re-record it); `Loaded`
reads traces, golden files and lists of records alike, for the diff engine:
a trace file is walked from either end and only the region the engine asks
for is held in memory, unless the behavior view maps a record of it (the
view of a call depends on the calls before it): then it is held whole.

`describe_record` says what a record is in a few words, for `show` and the
diff's messages (here, not in diff: `harness show` then never loads the
diff engine).
"""

from __future__ import annotations

import heapq
import os
import re
import stat
import sys
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import orjson

from .._errors import HarnessError, TraceUnreadable
from ..storage import blobs as _blobs
from ..storage import is_url, local_copy
from ..trace.reader import Replay, attempt_of, replay
from ..trace.stream import http_view
from ..trace.tasks import TASK, task_of
from .behavior import BOUNDARIES, VIEW, Behavior
from .fieldpath import MARKER, Path, mark, parse

if TYPE_CHECKING:  # (at run time: _trace_of; `harness show` need not load the runtime to read a trace)
    from ..runtime.step import Outcome

FORMAT, VERSION = "harness-golden", 3  # 2: trace schema 2 (one checkpoint record per step, seals); 3: the behavior view
GOLDEN_HEAD = orjson.dumps({"format": FORMAT, "version": VERSION, "view": VIEW}).decode()
RAW_HEAD = orjson.dumps({"format": FORMAT, "version": VERSION, "view": "raw"}).decode()  # golden_view = "raw"
OLDER = frozenset({2})  # golden versions still read (version 2: the raw view, before the behavior view)
# behavior views a golden of this version may name, and what today's view adds to them (their records still read:
# a golden of a run made live holds the same records in both)
OLDER_VIEWS = {1: "it did not say which calls a rerun or a fork served (`origin`: served, answered)"}
RERECORD = "re-record it with `pytest --snapshot-update` (or `harness show --golden TRACE`)"
IGNORED = MARKER

# top-level fields that differ between two runs of the same program
DROP = frozenset(
    {"seq", "ts", "crc", "hash", "run_id", "env", "key", "parent", "branch", "reused", "mutated", "duration", "elapsed"}
) | {"traceback"}  # a crash record's traceback: file paths and line numbers
# the fields that come first, in this order; others follow sorted
ORDER = (
    "kind", "from", "to", "step", "attempt", "name", "tool", "args", "result", "error",
    "boundary", "request", "response", "status", "happened", "evidence", "set_aside", "schema", "goal", "tools",
)  # fmt: skip
_RANK = {k: i for i, k in enumerate(ORDER)}
# a behavior view's model and tool calls (review/behavior.py): their fields in this order, the rest after, sorted
VIEW_ORDER = (
    "kind", "via", "model", "settings", "tools", "output", "history", "messages", "reply", "finish",
    "tool", "args", "result", "error", "origin", "usage",
)  # fmt: skip
_VIEW_RANK = {k: i for i, k in enumerate(VIEW_ORDER)}
VIEWS = ("behavior", "raw")
VIEW_KINDS = frozenset({"model_call", "tool_call"})
_MAPPED = frozenset({"kind", "boundary", "request", "response", "error", "hash"})  # a crossing's, as the view has them

Source: TypeAlias = "str | os.PathLike[str] | Sequence[Mapping[str, Any]] | Replay | Outcome"

# the defaults (see the module docstring)
VOLATILE_RESPONSE_HEADERS = (
    "x-request-id", "request-id", "cf-ray", "openai-processing-ms", "x-envoy-upstream-service-time",
    "x-ratelimit-*", "anthropic-ratelimit-*",
)  # fmt: skip
MODEL_OBJECTS = frozenset({"chat.completion", "response", "text_completion"})  # a JSON body's `object`
_MODEL_IDS = tuple(parse(p) for p in ("id", "created", "created_at", "system_fingerprint", "output[*].id"))
_HEADERS = tuple(parse(f"headers.{h}") for h in VOLATILE_RESPONSE_HEADERS)
# the crossings that are exchanges with a server (a test's binds a free port): an http one, a framework's model call
_EXCHANGES = frozenset({"http", "pydantic_ai.model", "openai_agents.model", "openai_agents.stream"})
# a Pydantic AI model response (harness.pydantic_ai): when it was made, the provider's id of it
_PAI_IDS = tuple(parse(p) for p in ("timestamp", "provider_response_id"))
_PAI_GENERATED = re.compile(rb"pyd_ai_[0-9a-f]{32}")  # a tool call id Pydantic AI made up (uuid4 hex)
_LOOPBACK = r"(://(?:[^/@\s\"]*@)?(?:localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\]|0\.0\.0\.0)):\d{1,5}(?!\d)"
_PORT, _PORT_BYTES = re.compile(_LOOPBACK), re.compile(_LOOPBACK.encode())


@dataclass(frozen=True, slots=True)
class Rules:
    """What a view leaves out beyond the fixed rules: `ignore`d field paths, and whether the defaults apply.

    `Rules.of(ignore, defaults)` takes a path or a list of them;
    FieldPathError names a path that cannot be read.
    """

    ignore: tuple[str, ...] = ()
    defaults: bool = True
    view: str = "behavior"  # or "raw": each record as the trace holds it (the fixed rules and the defaults aside)
    paths: tuple[Path, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if type(self.defaults) is not bool:
            raise HarnessError(f"defaults must be True or False, not {self.defaults!r}")
        if self.view not in VIEWS:
            raise HarnessError(f"view must be one of {', '.join(map(repr, VIEWS))}, not {self.view!r}")
        object.__setattr__(self, "paths", tuple(parse(p) for p in self.ignore))

    @classmethod
    def of(cls, ignore: str | Iterable[str] | None = None, defaults: bool = True, view: str = "behavior") -> Rules:
        paths = () if ignore is None else (ignore,) if isinstance(ignore, str) else tuple(ignore)
        return cls(paths, defaults, view)

    def plus(
        self, ignore: str | Iterable[str] | None = None, defaults: bool | None = None, view: str | None = None
    ) -> Rules:
        """These rules with more paths ignored, and the defaults and the view set when given."""
        more = Rules.of(ignore)
        return Rules((*self.ignore, *more.ignore), self.defaults if defaults is None else defaults, view or self.view)

    @property
    def behavior(self) -> bool:
        return self.view == "behavior"


RULES = Rules()  # the defaults, and nothing ignored


def project_rules(start: str | os.PathLike[str]) -> tuple[Rules, str | None]:
    """The rules `[tool.harness]` of the nearest pyproject.toml at or above `start` sets, and that file.

    `golden_ignore = ["response.body.usage", ...]` adds paths to ignore;
    `golden_defaults = false` turns the defaults off; `golden_view = "raw"`
    compares each record as the trace holds it, not its behavior view. HarnessError naming the
    file for one that cannot be read or a setting of the wrong type.
    """
    for candidate in _pyprojects(start):
        return _read_rules(candidate), candidate
    return RULES, None


def _pyprojects(start: str | os.PathLike[str]) -> Generator[str]:
    """The pyproject.toml files at or above `start` (a folder), nearest first."""
    here = os.path.abspath(start)
    while True:
        candidate = os.path.join(here, "pyproject.toml")
        if os.path.isfile(candidate):
            yield candidate
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def rules_for(
    *traces: str | os.PathLike[str],
    config: str | os.PathLike[str] | None = None,
    ignore: Iterable[str] = (),
    defaults: bool | None = None,
) -> Rules:
    """The rules to review `traces` with, wherever the command runs: what `harness diff`, `show` and `serve` use.

    The project's `[tool.harness]` comes from `config` (a pyproject.toml) when given, else from the project that
    holds the first trace (of a runs folder: the folder itself) that is in one: the nearest pyproject.toml at or
    above it with a `[tool.harness]` table (a pyproject.toml without one is passed by: a package nested in the
    project), else the current directory's. `ignore` adds paths; `defaults` sets the default rules, over the
    project's choice. HarnessError naming the file: a config that is missing, unreadable or without the table.
    """
    if config is not None:
        path = os.fspath(config)
        if not os.path.isfile(path):
            raise HarnessError(f"{path}: no such file (--config names a pyproject.toml with a [tool.harness] table)")
        if not _has_rules(data := _toml(path)):
            raise HarnessError(f"{path}: no [tool.harness] table (golden_ignore, golden_defaults) to read")
        return _read_rules(path, data).plus(ignore, defaults)
    starts = [os.path.abspath(t) for t in (os.fspath(t) for t in traces) if not is_url(t)]
    for start in [*(t if os.path.isdir(t) else os.path.dirname(t) for t in starts), os.getcwd()]:
        for candidate in _pyprojects(start):
            if _has_rules(data := _toml(candidate)):
                return _read_rules(candidate, data).plus(ignore, defaults)
    return RULES.plus(ignore, defaults)


def _toml(path: str) -> dict[str, Any]:
    import tomllib  # only when a project is read: the CLI starts without it

    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise HarnessError(f"{path}: cannot read it: {e}") from None


def _has_rules(data: dict[str, Any]) -> bool:
    tool = data.get("tool")
    return isinstance(tool, dict) and isinstance(tool.get("harness"), dict)


def _read_rules(path: str, data: dict[str, Any] | None = None) -> Rules:
    data = _toml(path) if data is None else data
    section = data.get("tool", {}).get("harness", {})
    ignore = section.get("golden_ignore", [])
    defaults = section.get("golden_defaults", True)
    view = section.get("golden_view", "behavior")
    if view not in VIEWS:
        raise HarnessError(f'{path}: [tool.harness] golden_view must be "behavior" or "raw", not {view!r}')
    if not isinstance(ignore, list) or not all(isinstance(p, str) for p in ignore):
        what = "must be a list of field paths (strings)"
        raise HarnessError(f"{path}: [tool.harness] golden_ignore {what}, not {ignore!r}")
    if type(defaults) is not bool:
        raise HarnessError(f"{path}: [tool.harness] golden_defaults must be true or false, not {defaults!r}")
    try:
        return Rules(tuple(ignore), defaults, view)
    except HarnessError as e:
        raise HarnessError(f"{path}: [tool.harness] golden_ignore: {e}") from None


_plans: dict[tuple[str, ...], tuple[str, ...]] = {}  # a record's keys -> the keys of its view, in order


def _plan(keys: tuple[str, ...], called: bool = False) -> tuple[str, ...]:
    plan = _plans.get(keys if not called else ("", *keys))
    if plan is None:
        if len(_plans) > 4096:  # records of many shapes (free-form events): keep the cache small
            _plans.clear()
        rank, last = (_VIEW_RANK, len(VIEW_ORDER)) if called else (_RANK, len(ORDER))
        plan = _plans[keys if not called else ("", *keys)] = tuple(
            sorted((k for k in keys if k not in DROP), key=lambda k: (rank.get(k, last), k))
        )
    return plan


def causal_key(record: Mapping[str, Any], seq: int) -> tuple[int, str]:
    """Where a record goes in the canonical order: the sum of its clock, then its agent.

    If a happened before b, a's clock is below b's and so is its sum; two
    records of one agent never tie. A record without a clock was written
    before the run spawned: its clock is {"main": seq}, whose sum is seq.
    """
    vc = record.get("vc")
    if isinstance(vc, dict):
        return sum(vc.values()), str(record.get("agent", "main"))
    if record.get("kind") == "seal":  # no agent's event: it closes the file, after every record
        return sys.maxsize, ""
    return seq, "main"


def normalize_record(record: Mapping[str, Any], *, nested: bool = True, rules: Rules = RULES) -> dict[str, Any]:
    """The deterministic view of one record (see the module docstring), under `rules`.

    nested=False leaves nested objects in their own key order: equal as
    dicts and as canonical bytes, cheaper, for comparing (the diff engine).
    """
    kind = record.get("kind")
    plan = _plan(tuple(record), kind in VIEW_KINDS)
    out = {k: record[k] for k in plan}
    if kind in ("reconcile", "answer"):
        out.pop("op", None)  # the seq of the paused operation or of the question: a seq number
    elif kind == "seal":  # digests of bytes that hold wall-clock times; keyed or not is not behaviour
        out = {k: v for k, v in out.items() if k in ("kind", "state")}
    elif kind == "crossing" and out.get("boundary") in ("now", "sleep", "backoff"):
        out.pop("response", None)  # a wall-clock reading (a wake-up time; a backoff's also a random delay)
    elif kind == "crossing" and out.get("boundary") == "http" and "response" in out:
        out["response"] = _http(out["response"], rules.defaults)
    elif kind == "crossing" and out.get("boundary") == "pydantic_ai.model" and rules.defaults:
        out["response"] = _pydantic_ai(out.get("response"))
    aside = out.get("set_aside")
    if isinstance(aside, str) and ".torn-" in aside:  # "<trace name>.torn-N": keep N, not the name
        out["set_aside"] = "torn-" + aside.rpartition(".torn-")[2]
    elif kind == "model_call" and rules.defaults and "usage" in out:
        out["usage"] = IGNORED  # tokens: kept apart, for `harness cost`; a golden does not compare them
    if rules.defaults and "origin" in out:  # served or made live: the same call (a rerun equals its recording)
        del out["origin"]
    for path in rules.paths:
        out = mark(out, path)
    if rules.defaults and kind == "crossing" and out.get("boundary") in _EXCHANGES:
        return _ports(out, nested)  # a test server's port: in an exchange with a server only, not in a tool's args
    if nested:
        for k, v in out.items():
            if type(v) is dict or type(v) is list:  # nested keys sorted (in C)
                out[k] = orjson.loads(orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
    return out


def _ports(out: dict[str, Any], nested: bool) -> dict[str, Any]:
    """The http crossing with each loopback URL's port read `<port>` (nested keys sorted when `nested`)."""
    for k, v in out.items():
        if type(v) is dict or type(v) is list:
            data = orjson.dumps(v, option=orjson.OPT_SORT_KEYS) if nested else orjson.dumps(v)
            if _PORT_BYTES.search(data):  # its literal `://` is looked for first, in C
                out[k] = orjson.loads(_PORT_BYTES.sub(rb"\1:<port>", data))
            elif nested:
                out[k] = orjson.loads(data)
        elif type(v) is str and _PORT.search(v):
            out[k] = _PORT.sub(r"\1:<port>", v)
    return out


def _http(response: Any, defaults: bool) -> Any:
    """An http response as shown (a stream as its message), with the defaults marked when they apply."""
    shown = http_view(response)
    if not defaults or not isinstance(shown, dict):
        return shown
    for path in _HEADERS:
        shown = mark(shown, path)
    body = shown.get("body")
    if isinstance(body, dict) and body.get("object") in MODEL_OBJECTS:
        shown = {**shown, "body": _model_ids(body)}
    if isinstance(shown.get("stream"), dict):
        shown = {**shown, "stream": _model_ids(shown["stream"])}
    return shown


def _pydantic_ai(response: Any) -> Any:
    """A Pydantic AI model response with its clock reading, provider id and made-up tool call ids marked."""
    if not isinstance(response, dict):
        return response
    for path in _PAI_IDS:
        response = mark(response, path)
    data = orjson.dumps(response)
    return orjson.loads(_PAI_GENERATED.sub(b"pyd_ai_<id>", data)) if b"pyd_ai_" in data else response


def _model_ids(value: dict[str, Any]) -> dict[str, Any]:
    for path in _MODEL_IDS:
        value = mark(value, path)
    return value


def _trace_of(source: Any) -> Any:
    """An Outcome's trace path; anything else as it is."""
    executor = sys.modules.get("harness.runtime.executor")  # no Outcome exists before the executor is imported
    return source.trace if executor is not None and isinstance(source, executor.Outcome) else source


def behave(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Records (payloads inline, in the view's order) with each model and tool call as its behavior view.

    The run's own id, wherever a value holds it (an idempotency key a server
    echoes back), reads `<run>`; a record's `task` is left out (give the
    records in `by_task` order: the order is what the view keeps of it).

    A mapped record keeps its other fields (`agent`, `vc`, `seq`, ...: the
    fixed rules drop what they drop); any other record is passed as it is.
    """
    behavior = Behavior()
    out: list[Mapping[str, Any]] = []
    run: bytes | None = None  # the run's id: in a key a server echoes back, a tool's result names it
    for rec in records:
        if rec.get("kind") == "header" and isinstance(rec.get("run_id"), str) and len(rec["run_id"]) >= 8:
            run = rec["run_id"].encode()
        elif run is not None:
            data = orjson.dumps(rec)
            if run in data:
                rec = orjson.loads(data.replace(run, b"<run>"))
        if TASK in rec:  # its place in the view says it; its name counts tasks a framework makes for its own use
            rec = {k: v for k, v in rec.items() if k != TASK}
        mapped = behavior.view(rec)
        if mapped is None:
            out.append(rec)
        else:
            out.append({**mapped, **{k: v for k, v in rec.items() if k not in _MAPPED and k not in mapped}})
    return out


def mapped(record: Mapping[str, Any], *, origin: bool = True) -> bool:
    """Whether the behavior view may change this record or its place (a call through a door; a task's call), or
    with `origin`, the records after it (a rerun's or a fork's header: its calls say which were served)."""
    kind = record.get("kind")
    return (
        TASK in record
        or (kind == "crossing" and record.get("boundary") in BOUNDARIES)
        or (origin and kind == "header" and "parent" in record)
    )


def by_task(records: Sequence[Mapping[str, Any]]) -> list[int]:
    """The behavior view's order of records: concurrent calls in the order their tasks were created.

    A run of consecutive records of one agent that carry a `task` (calls its
    concurrent tasks made, written in the order they finished) is put in
    order of task (`task_of`: creation order), except that two records of
    related tasks (the same task, or one an ancestor of the other) keep the
    order they were written in: a task's own calls in the order it made
    them, and a task's call after a subtask it awaited after that subtask's.
    So only calls that ran concurrently move, and the result is the same
    whichever of them finished first.
    """
    order = list(range(len(records)))
    n = 0
    while n < len(records):
        if TASK not in records[n]:
            n += 1
            continue
        end, agent = n, records[n].get("agent")
        while end < len(records) and TASK in records[end] and records[end].get("agent") == agent:
            end += 1
        order[n:end] = _by_task(records, n, end)
        n = end
    return order


def _by_task(records: Sequence[Mapping[str, Any]], lo: int, hi: int) -> list[int]:
    """Records lo to hi in task order, related tasks' records kept in trace order (a priority topological sort)."""
    tasks = [task_of(dict(records[i])) for i in range(lo, hi)]
    if tasks == sorted(tasks):
        return list(range(lo, hi))  # already in the view's order: nothing finished out of turn
    after: list[list[int]] = [[] for _ in tasks]  # each record's related successors in the trace
    waits = [0] * len(tasks)
    for j, b in enumerate(tasks):
        for i in range(j):
            a = tasks[i]
            if a[: len(b)] == b or b[: len(a)] == a:  # related: the same task, or an ancestor of the other
                after[i].append(j)
                waits[j] += 1
    ready = [(t, i) for i, t in enumerate(tasks) if not waits[i]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(lo + i)
        for j in after[i]:
            waits[j] -= 1
            if not waits[j]:
                heapq.heappush(ready, (tasks[j], j))
    return out


def normalize(
    trace: Source,
    *,
    ignore: str | Iterable[str] | None = None,
    defaults: bool = True,
    view: str = "behavior",
) -> list[dict[str, Any]]:
    """The deterministic view of a trace: a path (trace or golden file), a Replay, an Outcome, or records.

    Records are dicts as read from a trace (`harness.testing.read_records`).
    `view`: "behavior" (the default: each model and tool call in harness's own
    shape, what a framework or server made up left out: docs/FORMAT.md
    "The behavior view") or "raw" (each record as the trace holds it, less the
    fixed rules). `ignore`: field paths whose values read `<ignored>`
    (`"messages[0].text"`, `"*.id"`); `defaults=False` keeps what the defaults
    would mark (a loopback port, request ids, a model response's ids and
    times, a model call's usage).
    Raises HarnessError (TraceCorruption for a corrupt trace) naming the file.
    """
    return normalize_with(trace, Rules.of(ignore, defaults, view))


def normalize_with(trace: Source, rules: Rules) -> list[dict[str, Any]]:
    """normalize() under rules."""
    trace = _trace_of(trace)
    if isinstance(trace, Replay):
        trace = trace.path
    if isinstance(trace, str | os.PathLike) and not is_golden_file(os.fspath(trace)):
        raw: list[dict[str, Any]] = []  # one pass: replay() validates and hands over each record
        path = os.fspath(trace)
        keys: list[tuple[int, str]] = []
        spawned = False
        local: list[str] = []  # the local file holding the trace (a URL's copy), once a record names blobs

        def take(line: bytes, rec: dict[str, Any]) -> None:
            nonlocal spawned
            if "blobs" in rec:
                if not local:
                    local.append(local_copy(path))
                rec = _blobs.inline(local[0], rec)
            raw.append(rec)
            keys.append(causal_key(rec, rec["seq"]))
            spawned = spawned or "vc" in rec

        replay(path, on_record=take)
        if spawned:  # a run with agents: its records in the canonical causal order
            order = sorted(range(len(raw)), key=keys.__getitem__)
            raw = [raw[i] for i in order]
        if not rules.behavior:
            return [normalize_record(r, rules=rules) for r in raw]
        # concurrent calls in the order of their tasks; each call in the view's shape
        return [normalize_record(r, rules=rules) for r in behave([raw[i] for i in by_task(raw)])]
    loaded = Loaded.load(trace, rules)
    return [normalize_record(loaded.record(i), rules=rules) for i in range(len(loaded))]


def render(records: Sequence[Mapping[str, Any]], rules: Rules = RULES) -> str:
    """A golden file's text: the format line, then one normalized record per line."""
    body = b"\n".join(orjson.dumps(normalize_record(r, rules=rules)) for r in records)
    return golden_head(rules) + "\n" + (body.decode() + "\n" if records else "")


def golden_head(rules: Rules = RULES) -> str:
    """A golden file's first line: its format and the view its records are in (so a diff compares it in that view)."""
    return GOLDEN_HEAD if rules.behavior else RAW_HEAD


def raw_golden(source: object) -> bool:
    """Whether source is a golden file whose first line says its records are in the raw view."""
    if not isinstance(source, str | os.PathLike) or not is_golden_file(path := os.fspath(source)):
        return False
    try:
        with open(path, "rb") as f:
            head = orjson.loads(f.readline())
    except (OSError, orjson.JSONDecodeError):
        return False  # read again, and refused with its reason, by whoever loads it
    return isinstance(head, dict) and head.get("view") == "raw"


def golden_version(first_line: str | bytes) -> int | None:
    """The format version a golden file's first line names; None when it is not a harness golden's."""
    try:
        head = orjson.loads(first_line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(head, dict) or head.get("format") != FORMAT or type(head.get("version")) is not int:
        return None
    return int(head["version"])


def stale(first_line: str | bytes) -> str | None:
    """None when first_line is the head of a golden this harness reads, else why the file is not one."""
    version = golden_version(first_line)
    if version is None:
        return f"its first line is not {GOLDEN_HEAD} (not a harness golden, or written before goldens had a version)"
    if version != VERSION and version not in OLDER:
        return f"it was written as golden format version {version!r}; this harness writes version {VERSION}"
    return None


def older(first_line: str | bytes) -> str | None:
    """Why a golden of an older format this harness still reads may differ (it reads, and is compared); else None."""
    version = golden_version(first_line)
    if version == VERSION:
        view = orjson.loads(first_line).get("view")
        if view in OLDER_VIEWS:
            return f"golden written with behavior view v{view}: {OLDER_VIEWS[view]}; {RERECORD}"
        return None
    if version is None or version not in OLDER:
        return None
    return (
        f"golden written in format version {version} (the raw view: each framework's records as they were); "
        f"this harness writes version {VERSION}, behavior view v{VIEW}: {RERECORD}"
    )


_NAME = 60  # characters of a checkpoint's name in describe_record (as many as diff shows of a value)


def compact(value: Any, width: int) -> str:
    """A value as compact JSON (its repr when it is not JSON), cut to width characters."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def describe_record(rec: Mapping[str, Any]) -> str:
    """A record in a few words: `transition ACT -> VERIFY, step 1, attempt 2`, `checkpoint, step 0 "fetch"`."""
    kind = rec.get("kind")
    text = str(kind)
    if kind == "transition":
        text = f"transition {rec.get('from')} -> {rec.get('to')}"
    elif kind == "crossing":
        text = f"crossing {rec.get('boundary')}"
    elif kind == "model_call":
        text = f"model call {compact(rec.get('model'), _NAME)} ({rec.get('via')})"
    elif kind == "tool_call":
        text = f"tool call {compact(rec.get('tool'), _NAME)} ({rec.get('via')})"
    elif kind in ("end", "event") and rec.get("status", rec.get("type")) is not None:
        text = f"{kind} {rec.get('status', rec.get('type'))}"
    if rec.get("step") is not None:
        text += f", step {rec['step']}"
    if attempt_of(rec) is not None:
        text += f", attempt {attempt_of(rec)}"
    if kind == "checkpoint" and rec.get("name") is not None:
        text += f" {compact(rec['name'], _NAME)}"
    return text


def parse_golden(text: str | bytes, name: str) -> list[dict[str, Any]]:
    """The records of a golden file's text; HarnessError naming `name` and the line when it is not one."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError as e:
            raise HarnessError(f"{name}: not UTF-8 text ({e}); {RERECORD}") from None
    lines = text.splitlines()
    why = stale(lines[0]) if lines else "it is empty"
    if why:
        raise HarnessError(f"{name}: stale golden: {why}; {RERECORD}")
    out = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise HarnessError(f"{name}:{n}: not valid JSON ({e}); fix the line or {RERECORD}") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
            raise HarnessError(f"{name}:{n}: not a record (a JSON object with a kind); fix the line or {RERECORD}")
        out.append(rec)
    return out


def is_golden_file(path: str) -> bool:
    """Whether the file at path starts like a golden file (any version) rather than a trace.

    Only a regular file is opened (a FIFO would block): anything else is left to replay() to refuse.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            start = f.read(64).lstrip()
    except OSError:
        return False
    return start.startswith(b'{"format"') or start.startswith(b'{ "format"')


_CHUNK = 1 << 16  # bytes read at a time when a trace file is walked forward or backward
Item = bytes | Mapping[str, Any]  # one record as a walk yields it: a trace file's raw line, or a record


class Loaded:
    """One side of a comparison: a trace file, a golden file or a list of records, read on demand.

    A trace file is validated by replay() and then only walked: `forward()`
    and `backward()` yield its raw lines from either end, 64 KiB at a time,
    and `hold(lo, hi, ...)` keeps the lines of one region in memory; records
    are only ever decoded there. So the diff engine compares two long traces
    in memory proportional to the region where they differ. Two lines whose
    bytes match once seq, ts and crc are cut off (`quick`) are equal without
    being parsed.
    """

    __slots__ = (
        "_base", "_end", "_n", "_norm", "_path", "_raw", "_records", "_seqs", "causal", "first_line", "held", "name",
        "note", "rules", "torn_tail",
    )  # fmt: skip

    def __init__(
        self, name: str, *, records: Sequence[Mapping[str, Any]] | None = None, path: str | None = None,
        end: int = 0, count: int = 0, first_line: int = 1, seqs: list[int] | None = None, torn_tail: bool = False,
        rules: Rules = RULES,
    ):  # fmt: skip
        self.name, self._records, self._path, self._end = name, records, path, end
        self.rules = rules  # what the view of each record leaves out
        self._n = len(records) if records is not None else count
        self.first_line, self._seqs = first_line, seqs
        self.torn_tail = torn_tail  # the trace ends in an unfinished line, left out
        self._raw: list[bytes] = []  # a trace file's held lines: records _base to _base + len(_raw)
        self._base = 0
        self._norm: dict[int, dict[str, Any]] = {}
        # a run with agents, in the canonical causal order (held in memory; its line numbers are its seqs)
        self.causal = records is not None and any("vc" in r for r in records)
        self.held = False  # a trace file held whole (a run with agents, or with calls the behavior view maps)
        self.note: str | None = None  # a golden of an older format: why it may differ, and how to re-record it

    @classmethod
    def load(cls, source: Source | Loaded, rules: Rules = RULES) -> Loaded:
        if isinstance(source, Loaded):
            return source
        source = _trace_of(source)
        if isinstance(source, Replay):
            return cls.trace(source.path, rules)
        if isinstance(source, str | os.PathLike):
            path = os.fspath(source)
            if is_golden_file(path):
                try:
                    with open(path, "rb") as f:
                        text = f.read()
                except OSError as e:
                    raise TraceUnreadable(path, f"cannot read: {e.strerror}") from None
                return cls.golden(text, path, rules)
            return cls.trace(path, rules)
        if isinstance(source, Sequence):
            records: Sequence[Mapping[str, Any]] = source  # type: ignore[assignment]  # str was handled above
            bad = next((i for i, r in enumerate(records) if not isinstance(r, Mapping)), None)
            if bad is not None:
                what = type(records[bad]).__name__
                raise HarnessError(f"record {bad} is a {what}, not a dict; pass a path or a list of records")
            seqs = [r["seq"] if type(r.get("seq")) is int else i + 1 for i, r in enumerate(records)]
            if any("vc" in r for r in records):
                order = sorted(range(len(records)), key=lambda i: causal_key(records[i], seqs[i]))
                records, seqs = [records[i] for i in order], [seqs[i] for i in order]
            if rules.behavior and any(mapped(r, origin=not rules.defaults) for r in records):
                order = by_task(records)
                records, seqs = behave([records[i] for i in order]), [seqs[i] for i in order]
            return cls("<records>", records=records, seqs=seqs, rules=rules)
        what = type(source).__name__
        raise HarnessError(f"cannot read a trace from a {what}; pass a path, a Replay, an Outcome or a list of records")

    @classmethod
    def trace(cls, path: str, rules: Rules = RULES) -> Loaded:
        calls: list[bool] = []  # whether the behavior view maps a record of it (then it is held, as a whole)

        def note(line: bytes, rec: dict[str, Any]) -> None:
            if not calls and mapped(rec, origin=not rules.defaults):  # the default rules leave `origin` out
                calls.append(True)

        # raises on a corrupt or foreign file, naming line and reason
        rep = replay(path, on_record=note) if rules.behavior else replay(path)
        local = local_copy(path)  # a URL: the copy replay() just checked
        if rep.tail.agents or calls:  # its records in the view's order, held
            try:
                with open(local, "rb") as f:
                    data = f.read(rep.tail.end)
            except OSError as e:
                raise TraceUnreadable(path, f"cannot read: {e.strerror}") from None
            # blob-stored payloads read back in place: records compare by what they hold, not by reference
            records = [_blobs.inline(local, orjson.loads(line)) for line in data.split(b"\n")[:-1]]
            order = sorted(range(len(records)), key=lambda i: causal_key(records[i], i + 1))
            ordered: list[Mapping[str, Any]] = [records[i] for i in order]
            seqs = [i + 1 for i in order]
            if calls:  # concurrent calls in the order of their tasks; each call in the view's shape
                tasks = by_task(ordered)
                ordered, seqs = behave([ordered[i] for i in tasks]), [seqs[i] for i in tasks]
            loaded = cls(path, records=ordered, seqs=seqs, torn_tail=rep.torn_tail, rules=rules)
            loaded.causal, loaded.held = rep.tail.agents, True
            return loaded
        # complete lines only: a torn tail is not part of the run
        return cls(path, path=local, end=rep.tail.end, count=rep.records, torn_tail=rep.torn_tail, rules=rules)

    @classmethod
    def golden(cls, text: str | bytes, name: str, rules: Rules = RULES) -> Loaded:
        records: Sequence[Mapping[str, Any]] = parse_golden(text, name)
        if rules.behavior and any(mapped(r) for r in records):  # a golden of the raw view (format 2)
            records = behave(records)
        loaded = cls(name, records=records, first_line=2, rules=rules)
        loaded.note = older(text.split(b"\n", 1)[0] if isinstance(text, bytes) else text.split("\n", 1)[0])
        return loaded

    def __len__(self) -> int:
        return self._n

    def _changed(self) -> HarnessError:
        return HarnessError(f"{self.name} changed while it was compared; compare it again")

    def forward(self) -> Generator[tuple[Item, int]]:
        """Each record from the first, with where it starts (a byte offset in a trace file, else its index)."""
        try:
            yield from self._forward()
        except OSError as e:  # a read error after replay() read it (EIO): named, never a traceback
            raise TraceUnreadable(self.name, f"cannot read: {e.strerror}") from None

    def backward(self) -> Generator[tuple[Item, int]]:
        """Each record from the last, with where it starts (as forward())."""
        try:
            yield from self._backward()
        except OSError as e:
            raise TraceUnreadable(self.name, f"cannot read: {e.strerror}") from None

    def _forward(self) -> Generator[tuple[Item, int]]:
        if self._path is None:
            yield from ((r, i) for i, r in enumerate(self._records or ()))
            return
        with open(self._path, "rb") as f:
            pos = n = 0
            rest = b""
            while pos < self._end:
                chunk = f.read(min(_CHUNK, self._end - pos))
                if not chunk:
                    raise self._changed()
                lines = (rest + chunk).split(b"\n")
                start = pos - len(rest)
                pos += len(chunk)
                rest = lines.pop()
                for line in lines:
                    yield self._item(line), start
                    start += len(line) + 1
                    n += 1
            if rest or n != self._n:
                raise self._changed()

    def _backward(self) -> Generator[tuple[Item, int]]:
        if self._path is None:
            records = self._records or ()
            yield from ((records[i], i) for i in range(len(records) - 1, -1, -1))
            return
        with open(self._path, "rb") as f:
            pos, rest = self._end, b""  # rest: the end of a line whose start lies before pos
            while pos > 0:
                size = min(_CHUNK, pos)
                pos -= size
                f.seek(pos)
                block = f.read(size)
                if len(block) != size or (not rest and not block.endswith(b"\n")):
                    raise self._changed()
                lines = (block + rest).split(b"\n")
                lines.pop()  # the empty string after the last newline
                at = pos + len(block) + len(rest)
                first = lines[0] if pos > 0 else None  # may be cut: completed by the next block
                for line in reversed(lines[1:] if pos > 0 else lines):
                    at -= len(line) + 1
                    yield self._item(line), at
                rest = first + b"\n" if first is not None else b""  # b"\n" alone: the block began with a newline

    def _item(self, line: bytes) -> Item:
        """The raw line, or the record with its blob-stored payloads read back in place when it names blobs."""
        if b'"blobs":{' not in line or self._path is None:
            return line
        return _blobs.inline(self._path, orjson.loads(line))

    def hold(self, lo: int, hi: int, start: int, stop: int) -> None:
        """Keep records lo to hi (starting at `start`, the next one at `stop`) in memory; forget the others."""
        self._norm.clear()
        if self._path is None:
            return
        try:
            with open(self._path, "rb") as f:
                f.seek(start)
                data = f.read(stop - start)
        except OSError as e:
            raise TraceUnreadable(self.name, f"cannot read: {e.strerror}") from None
        raw = data.split(b"\n")
        raw.pop()
        if len(raw) != hi - lo:
            raise self._changed()
        self._raw, self._base = raw, lo

    def seq(self, i: int) -> int:
        """The record's seq in its trace (in a valid trace, its line number; in a golden, its position)."""
        return self._seqs[i] if self._seqs is not None else i + 1

    def line(self, i: int) -> int:
        if self.held and self._seqs is not None:  # a trace held in the view's order: its line is its seq
            return self._seqs[i]
        return i + self.first_line

    def record(self, i: int) -> dict[str, Any]:
        """The normalized record i (of the held region, for a trace file)."""
        rec = self._norm.get(i)
        if rec is None:
            if self._path is not None:
                raw = orjson.loads(self._raw[i - self._base])
                if "blobs" in raw:
                    raw = _blobs.inline(self._path, raw)
            else:
                raw = self._records[i]  # type: ignore[index]
            rec = self._norm[i] = normalize_record(raw, nested=False, rules=self.rules)
        return rec

    def key(self, i: int) -> bytes:
        """Canonical bytes of the normalized record: equal keys, equal records."""
        return orjson.dumps(self.record(i), option=orjson.OPT_SORT_KEYS)


def quick(item: Item) -> bytes | None:
    """A raw line without seq, ts and crc (equal ones are equal records); None for a record."""
    if not isinstance(item, bytes):
        return None
    start, end = item.find(b","), item.rfind(b',"ts":')
    return item[start:end] if start > 0 and end > start else None


def view(item: Item, rules: Rules = RULES) -> dict[str, Any]:
    """The normalized record of a raw line or a record, nested objects as they come (for comparing)."""
    return normalize_record(orjson.loads(item) if isinstance(item, bytes) else item, nested=False, rules=rules)
