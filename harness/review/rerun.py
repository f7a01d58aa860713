"""Re-execute a recorded run with every boundary served from the recording.

`rerun()` drives a fresh Executor over a strict Session holding the
recording's crossings in order: planner, verifier and control flow run for
real, no tool and no model is called, and each served crossing is written to
the new trace as it was recorded. A request that differs from the recorded
one raises ReplayDrift, a crossing the recording lacks ReplayViolation, both
at the first crossing concerned. `fork()` does the same up to one crossing,
answers that one with another value, and runs everything after it live.

Agents. Each agent is served its own recorded crossings in its own order,
checked at the same place in its own sequence (its clock's own component),
whatever the threads do; a served receive waits until its send is made
again. A fork's "after" is the branch's causal future: a record whose clock
has reached the branch's (or an agent that received a message from that
future) runs live; every other record is served and compared with the
parent's record of the same agent at the same count, and marked reused.

Concurrent tasks (asyncio.gather in one agent). Served crossings return at
once, so tasks reach theirs earlier, and in another order, than recorded.
Each record still goes where the recording has it: a served crossing waits
(unwritten, its response already given) until the new trace reaches its
seq, and is written by whichever write brings the trace there; a workflow's
async tool step writes its intent, then its outcome, only once the
recording's next record is that one (`aturn`; calls.py), so the crossings a
sibling task made while the call ran are written between them again. A
task that writes a state record while a crossing it took is still waiting
took it too soon: ReplayDrift. Waits end after HOLD_QUIET seconds with
nothing served: never a hang.

Resume seams. A recording can hold a process history rather than one
process: the run stopped (killed, or an exception escaped run()) and a later
process resumed it, writing a `resume` record (and for a paused run the
operator's `reconcile`). A re-execution reproduces that history: it stops at
the first write or crossing that would take a resume record's seq, writes
the resume record (its `set_aside` as recorded, its env the current one),
and goes on the way Executor resume does, serving again the crossings made
since the last transition; reconcile, answer and crash records are copied.
A pause the recording has (interrupt() waiting for an answer, an unsafe
tool's timeout) is reproduced where it stands: the crossing or tool call
made there raises what it raised then. Seqs thus line up with the
recording's. A recording with no terminal record is re-executed up to where
it stops.

Rules kept here:
- the recording is validated by replay() first and never written to;
- the session never calls live, except in a fork after the branch;
- before its branch a fork writes exactly the parent's records (each one
  compared after normalization, else ReplayDrift), marked `"reused": true`;
  so is every crossing it serves from the parent after the branch (a sibling
  task's, taken before the branch was reached): only what ran live is unmarked.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

import orjson

from .._errors import (
    BudgetExceeded,
    Control,
    HarnessError,
    Interrupted,
    ReplayDrift,
    ReplayViolation,
    ResumeMismatch,
    ToolTimeout,
    TraceUnreadable,
    internal,
)
from ..runtime import executor as running
from ..runtime.agents import Agents
from ..runtime.boundary import Arrived, Match, Session, _Hold, _may_hold, differences, patiently, same, take
from ..runtime.bridge import bridging
from ..runtime.environment import environment
from ..runtime.executor import MAX_STEPS, Executor
from ..runtime.history import Item, Recorded, Serving
from ..runtime.resume import reveal_crossings
from ..runtime.step import RetryPolicy, Step
from ..runtime.tool import Tool
from ..runtime.workflow import Workflow, go_on, run_anywhere, same_workflow, start
from ..storage import FenceLost, exists, is_url, join, local_copy
from ..storage import blobs as _blobs
from ..storage import open as open_store
from ..trace import state as S
from ..trace.clock import MAIN
from ..trace.journal import Journal
from ..trace.line import check_value
from ..trace.reader import Checkpoint, Crossing, Replay, replay, request_hash
from ..trace.redact import Redaction, Rule
from ..trace.remote import RemoteJournal
from ..trace.stream import http_unview, http_view
from ..trace.tasks import TASK
from ..trace.vault import Vault
from .fieldpath import put
from .normalize import normalize, normalize_record

_Served = tuple[Crossing, str, Match | None, Arrived | None]  # a served crossing to write: as write() takes it
Planner = Callable[[Any, list[Checkpoint]], Step | None]
Verifier = Callable[[Step, Any], bool]


class _Seam(Control):
    """The re-execution reached the point where a recorded process stopped.

    A control exception (a BaseException) so that agent code catching
    Exception cannot swallow it, and so that raised inside a task group (the
    MCP client's) it comes out of the workflow bare, as a pause does
    (control.decisive). `what` is what the re-execution was about to do there
    (`tool charge`, `llm crossing`, `end DONE`).
    """

    def __init__(self, what: str | None = None):
        super().__init__(what)
        self.what = what


@dataclass(frozen=True, slots=True)
class Rerun:
    """How a re-execution went.

    `equal`: the new trace equals the recording after normalization and no
    recorded crossing was left unused. `live_calls`: boundary calls made live
    (0 for a faithful rerun; in a fork, the calls after the branch).
    `trace` is the new trace's path, None when rerun() was given no `out`.
    """

    run_id: str
    parent: str
    branch: int | None
    state: str
    equal: bool
    live_calls: int
    unused: int
    trace: str | None
    records: tuple[dict[str, Any], ...] = field(repr=False)
    live_calls_by_agent: dict[str, int] = field(default_factory=dict)
    # a recording with no terminal record, re-executed to its end: what the code did next there, which a resume
    # would make live (`tool charge`, `llm crossing`, `end DONE`); None when it did not get there
    ahead: str | None = None


def rerun(
    trace: str | os.PathLike[str],
    *,
    planner: Planner | None = None,
    tools: Mapping[str, Callable[..., Any] | Tool] | None = None,
    verifier: Verifier | None = None,
    workflow: Callable[..., Any] | None = None,
    out: str | os.PathLike[str] | None = None,
    retry: RetryPolicy | None = None,
    redact: Redaction | Iterable[Rule] | None = None,
) -> Rerun:
    """Re-execute the run recorded in `trace`, calling no tool and no model.

    The agent is `planner=`, `tools=` (and `verifier=`) for an Executor's
    run, or `workflow=` (an `@harness.workflow`) for a workflow's: exactly
    one of the two shapes. The new trace goes to `out` when given (a new
    file, or a new trace URL whose segments ship as any run's do; after a
    ReplayDrift it keeps what was written up to it), else it is only
    returned as `.records`. `retry` defaults to what the recording shows;
    the redaction rules are those the recording's header names, plus
    `redact` (a list of rules; a Redaction replaces them).
    """
    runner = _runner(planner, tools, verifier, workflow)
    rec = _Recording(os.fspath(trace), runner.workflow)
    if out is not None:
        _fresh(os.fspath(out))
    scratch = None if out is not None else tempfile.mkdtemp(prefix="harness-rerun-")
    path = os.fspath(out) if out is not None else os.path.join(scratch or "", "rerun.jsonl")
    try:
        stops = sorted({*rec.resumes, *rec.crashes, *([] if rec.rep.complete else [rec.rep.last_seq + 1])})
        done = _execute(rec, path, runner, retry, stops=stops, redact=redact)
        return done if out is not None else replace(done, trace=None)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


_UNSET: Any = object()  # fork() was given no value=
_RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # a run id chosen by the caller: it names the child's file


def fork(
    trace: str | os.PathLike[str],
    *,
    at: int,
    value: Any = _UNSET,
    set: Mapping[str, Any] | None = None,  # the word the CLI and the docs use: fork(set={path: value})
    planner: Planner | None = None,
    tools: Mapping[str, Callable[..., Any] | Tool] | None = None,
    verifier: Verifier | None = None,
    workflow: Callable[..., Any] | None = None,
    out: str | os.PathLike[str] | None = None,
    retry: RetryPolicy | None = None,
    redact: Redaction | Iterable[Rule] | None = None,
    run_id: str | None = None,
) -> Rerun:
    """Re-execute `trace` up to the crossing at seq `at`, answer it with `value`, run the rest live.

    Exactly one of `value` (the whole new response) and `set` ({field path:
    new value}: the recorded response with those fields replaced, e.g.
    `{"body.choices[0].message.content": "no"}`). Paths and values are read
    on the response as `harness show` prints it: a streamed model reply of
    an http crossing as `stream` (`{"stream.message.content": "no"}`), which
    is re-chunked into a stream the client reads as the new message; a
    `value=` given in that form is re-chunked the same way. A path the
    recorded response does not hold is a HarnessError naming it and what is
    there.

    The child's run id is `run_id` (letters, digits, `-`, `_`), by default a
    new uuid4 hex; it goes to `out` (a new file or trace URL), by default
    `<child run_id>.jsonl` beside the parent (in its bucket for a URL). Its
    header names `parent` (run id) and `branch` (`at`). A fork that fails
    leaves no file (no segment at a URL), whatever the failure: a HarnessError
    (drift before the branch, say) or an exception the agent raised after the
    branch (a model server that is down); the exception is raised again.
    Redaction: the rules the parent's header names, plus `redact`, and the
    agent's shapes (`planner=`/`tools=` or `workflow=`), as rerun().
    """
    if (value is _UNSET) == (set is None):
        raise HarnessError(
            "fork: give exactly one of value= (the whole new response) and set= ({field path: value}: fields of "
            "the recorded response)"
        )
    runner = _runner(planner, tools, verifier, workflow)
    rec = _Recording(os.fspath(trace), runner.workflow)
    branch = next((c for c in rec.crossings if c.seq == at), None)
    if branch is None:
        seqs = ", ".join(str(c.seq) for c in rec.crossings) or "none"
        raise HarnessError(f"{rec.path}: seq {at!r} does not carry a crossing a fork can change (crossings: {seqs})")
    if run_id is not None and not (isinstance(run_id, str) and _RUN_ID.fullmatch(run_id)):
        raise HarnessError(f"fork: run_id={run_id!r}: give letters, digits, '-' and '_' only (it names a file)")
    value = _changed(rec.path, branch, value, set)
    check_value("value", value)
    run_id = run_id or uuid.uuid4().hex
    beside = rec.path.rsplit("/", 1)[0] if is_url(rec.path) else os.path.dirname(rec.path)
    path = os.fspath(out) if out is not None else join(beside, f"{run_id}.jsonl")
    _fresh(path)
    try:
        return _execute(
            rec,
            path,
            runner,
            retry,
            stops=sorted(s for s in {*rec.resumes, *rec.crashes} if s < at),
            branch=at,
            value=value,
            run_id=run_id,
            redact=redact,
        )
    except BaseException as e:  # a child that is no whole fork of its parent: leave nothing half made behind
        if is_url(path):
            if not isinstance(e, FenceLost):  # (a lost fence: the segments there are another writer's)
                _remove_segments(path)
        elif os.path.exists(path):
            os.unlink(path)
        raise


def _changed(path: str, branch: Crossing, value: Any, fields: Mapping[str, Any] | None) -> Any:
    """The response a fork answers at branch: value, or the recorded one with fields set; streams re-chunked."""
    recorded = branch.response
    http = branch.kind == "http"
    if fields is not None:
        if not isinstance(fields, Mapping) or not fields:
            raise HarnessError(f"fork: set= is a non-empty dict of field path -> new value, not {fields!r}")
        what = f"the recorded {branch.kind} response at seq {branch.seq} of {path}"
        if branch.error is not None and recorded is None:
            raise HarnessError(f"fork: {what} is an error ({branch.error}), with no field to set; give value=")
        value = http_view(recorded) if http else recorded
        for field_path, new in fields.items():
            value = put(value, field_path, check_value("set", new), what=what)
    if http:
        unviewed = http_unview(value, recorded)
        if unviewed is None:
            raise HarnessError(
                f"fork: the stream at seq {branch.seq} of {path} cannot carry that message: set text fields to "
                "strings (or null), tool calls to {id, name, arguments} with string name and arguments"
            )
        value = unviewed
    return value


def _remove_segments(url: str) -> None:
    """Remove the segments a failed fork shipped to url (its blobs stay: content-addressed, harmless)."""
    location = open_store(url)
    with contextlib.suppress(Exception):  # the fork's own error says more; a leftover child is listed, not harmful
        for _, segment in location.segments():
            location.fs.rm_file(segment)


def _fresh(path: str) -> None:
    if is_url(path):
        if exists(path):
            raise HarnessError(f"{path} already holds a run; a rerun or fork writes a new trace, choose another URL")
        return
    if os.path.exists(path):
        raise HarnessError(f"{path} already exists; a rerun or fork writes a new trace, choose another path")


class _Recording:
    """What a re-execution needs from the recording: its records, crossings and seams."""

    def __init__(self, path: str, workflow: str | None = None):
        self.path = path
        self.rep: Replay = replay(path)
        self.records = _records(local_copy(path), self.rep.tail.end)  # a URL: the copy replay() just checked
        if any(r["kind"] in ("event", "end") for r in self.records):
            raise HarnessError(f"{path}: written by a Recorder, not an Executor; there is no agent loop to re-execute")
        recorded = self.rep.workflow
        if recorded is None and workflow is not None:
            raise HarnessError(
                f"{path}: an Executor's run, not a workflow's: re-execute it with planner= and tools= "
                "(--agent MODULE:FACTORY), not workflow="
            )
        if recorded is not None and workflow is None:
            raise HarnessError(
                f"{path}: the run of workflow {recorded}: re-execute it with workflow= (--workflow MODULE:ATTR), "
                "not planner= and tools="
            )
        if recorded is not None and workflow is not None and not same_workflow(recorded, workflow):
            raise ResumeMismatch(path, "workflow", recorded, workflow)
        # a result taken from an operator's reconcile record is not served: resume reads it from the trace
        self.crossings = [c for c in self.rep.crossings if self.records[c.seq - 1].get("from") != S.PAUSED]
        # served with their secrets: the new trace keeps them again, in its own sidecar (trace/vault.py)
        marker = Redaction.from_header(self.rep.header.get("redact"), path).marker
        self.crossings = reveal_crossings(Vault(path, marker), self.crossings)
        self.resumes = [r["seq"] for r in self.records if r["kind"] == "resume"]
        self.crashes = [r["seq"] for r in self.records if r["kind"] == "crash"]  # the process stopped there
        # a workflow with agents resumed after its first spawn is re-executed in one pass from there (its
        # function, served its history, does what the processes did): main writes each of their resume and
        # crash records again when it reaches its place in main's own sequence (_Rewriting.copy_seams)
        self.spawned = next((r["seq"] for r in self.records if r["kind"] == "spawn"), math.inf)
        self.copies: dict[int, dict[str, Any]] = {}
        if self.rep.tail.agents and (self.resumes or not self.rep.complete):
            later = [r for r in self.records if r["seq"] > self.spawned and r["kind"] in _COPIED | {"resume", "answer"}]
            why = None
            if recorded is None:
                why = "an Executor's run with agents that was interrupted or resumed cannot be re-executed yet"
            elif not self.rep.complete:
                why = "a workflow's run with agents that has not ended cannot be re-executed yet"
            elif any(r["kind"] in ("answer", "reconcile") for r in later):
                seq = next(r["seq"] for r in later if r["kind"] in ("answer", "reconcile"))
                why = (
                    f"a workflow's run with agents that paused after its first spawn (seq {seq}: an answer or a "
                    "reconcile) cannot be re-executed yet"
                )
            if why is not None:
                raise HarnessError(f"{path}: {why}; re-execute a run that went from start to end in one process")
            self.copies = {r["vc"][MAIN]: r for r in later}

    def positions(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Each record by (agent, its own count): where a causal fork finds the parent's version of a record."""
        out = {}
        for r in self.records:
            vc = r.get("vc")
            agent = r.get("agent", MAIN)
            out[(agent, vc[agent] if vc else r["seq"])] = r
        return out

    def max_steps(self) -> int | None:
        """The step limit the recording shows it ran under: the one it hit, else the default."""
        last = self.rep.tail.last or {}
        error = last.get("error") if self.rep.state == S.FAILED and last.get("from") == S.PLAN else None
        return error["max_steps"] if isinstance(error, dict) and type(error.get("max_steps")) is int else MAX_STEPS

    def retry(self) -> RetryPolicy:
        """The policy the recording shows: the last attempt of a FAILED run, else at least the default."""
        last = self.rep.tail.last
        step_limit = last is not None and last["from"] == S.PLAN and "max_steps" in (last.get("error") or {})
        if self.rep.state == S.FAILED and last is not None and not step_limit:  # (a parallel call's last attempt too)
            return RetryPolicy(last.get("attempt", 1), **self.backoff())
        seen = [r.get("attempt", 1) for r in self.records if r["kind"] == "transition"]
        return RetryPolicy(max([RetryPolicy().max_attempts, *seen]), **self.backoff())

    def backoff(self) -> dict[str, float]:
        """The backoff the recording waited under, from its first `backoff` crossing (else none)."""
        for c in self.crossings:
            if c.kind == "backoff" and isinstance(c.request, dict):
                return {"backoff": c.request["backoff"], "max_delay": c.request["max_delay"]}
        return {}


def _task() -> object:
    """The asyncio task running here; None outside an event loop (sync code: one at a time)."""
    asyncio = sys.modules.get("asyncio")  # not imported: no loop runs (a sync rerun never imports it)
    if asyncio is None:
        return None
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _unsealed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without a final seal: a recording sealed or not (migrated, say) reruns equal."""
    return records[:-1] if records and records[-1]["kind"] == "seal" else records


def _records(path: str, end: int) -> list[dict[str, Any]]:
    """The records of the trace's complete lines, blob-stored payloads read back in place."""
    try:
        with open(path, "rb") as f:
            data = f.read(end)
    except OSError as e:  # replay() read it a moment ago: it was moved or its rights changed since
        raise TraceUnreadable(path, f"cannot read: {e.strerror}") from None
    return [_blobs.inline(path, orjson.loads(line)) for line in data.split(b"\n")[:-1]]


class _Rewriting(Journal):
    """The new trace: stops where the recording's process stopped, checks and marks a fork's prefix.

    What any writer of a re-execution does, on top of the journal it is: a
    local `_Writer`, or a `_RemoteWriter` shipping segments to a trace URL.
    """

    __slots__ = ()

    stops: deque[int]
    below: int
    parent: list[dict[str, Any]]
    branch_at: tuple[str, int] | None  # (agent, own count) of a fork's branch
    positions: dict[tuple[str, int], dict[str, Any]]  # the parent's records by (agent, own count)
    ahead: set[str]  # agents in the branch's causal future (a live receive may merge no clock of the branch)
    replaying: _Replaying | None  # the session whose served crossings wait for their place (flush() after a write)

    copies: dict[int, dict[str, Any]]  # main's own count -> a resume or crash record to write again there
    entrypoint: str
    agents: Agents
    reached: str | None  # what the re-execution was about to do at the last stop it reached (Rerun.ahead)

    def stop(self, what: str) -> _Seam:
        """The seam at a stop, saying what reached it (_drive keeps it: Rerun.ahead)."""
        return _Seam(what)

    def at_stop(self) -> bool:
        return bool(self.stops) and self.seq + 1 == self.stops[0]

    def share(self, stamp: Any, tick: Any) -> None:
        """The first spawn: where the recorded process stopped, the seam comes first (it has no clock)."""
        if self.at_stop():
            raise self.stop("spawn")
        super().share(stamp, tick)

    def copy_seams(self) -> None:
        """Before main's next record: the recorded resume and crash records main wrote at this count of its own
        sequence, written again as main's events (a workflow with agents re-executed in one pass; not in a
        fork's live future, which no recorded process made)."""
        while self.copies and self._stamp is not None:
            agent, vc = self._stamp(None)
            rec = self.copies.get(vc[MAIN]) if agent == MAIN else None
            if rec is None or (self.branch_at and vc.get(self.branch_at[0], 0) >= self.branch_at[1]):
                return
            del self.copies[vc[MAIN]]
            fields = {k: v for k, v in _copy(rec).items() if k not in ("vc", "agent")}
            if rec["kind"] == "resume":
                fields["env"] = environment(self.entrypoint)
            main = self.agents.main  # a merge main is about to make (its join, its receive) is its next record's
            pending, main.merge = main.merge, None
            try:
                super().append_many(((rec["kind"], fields),), sync=True)
            finally:
                main.merge = pending

    def append(
        self,
        kind: str,
        fields: dict[str, Any],
        *,
        sync: bool = False,
        check: tuple[str, ...] = (),
        user: tuple[str, ...] = (),
    ) -> int:
        for name in check:  # as Journal.append: each checked field becomes its own copy, as it reads back
            fields[name] = check_value(name, fields[name])
        return self.append_many(((kind, fields, (*check, *user)),), sync=sync)

    def append_many(self, records: Iterable[tuple[Any, ...]], *, sync: bool = False) -> int:
        if self.shared:  # agents write: a fork's lineage is decided by clocks, in annotate()
            self.copy_seams()
            return super().append_many(records, sync=sync)
        batch: list[tuple[str, dict[str, Any]]] = []
        given: list[tuple[dict[str, Any], str, Any]] = []  # served values as given (secrets kept: vault.py)
        for kind, fields, *user in records:
            before = self.redacted(fields, user[0] if user else ())  # as written: compared with the parent so
            seq = self.seq + len(batch) + 1
            if self.stops and seq == self.stops[0]:  # the recorded process stopped here
                if batch:
                    super().append_many(batch, sync=sync)
                raise self.stop(f"tool {fields.get('tool')}" if fields.get("to") == S.ACT else str(kind))
            kept = self._keep(seq, kind, before, fields) if before is not None else None
            if kept is not None:
                given.append((fields, *kept))
            batch.append((kind, self._vet(seq, kind, fields)))
        seq = super().append_many(batch, sync=sync)
        for fields, name, value in given:  # (written: the caller gets the value as given)
            fields[name] = value
        if self.replaying is not None:  # a served crossing whose place this write reached goes next
            self.replaying.flush()
        return seq

    def finish(
        self, kind: str, fields: dict[str, Any], *, state: str, key: bytes | None, user: tuple[str, ...] = ()
    ) -> int:
        if self.shared:  # a run with agents: its end is live or rerun as recorded, never before a branch
            self.copy_seams()
            return super().finish(kind, fields, state=state, key=key, user=user)
        before = self.redacted(fields, user)  # as it will be written: compared with the parent so
        seq = self.seq + 1
        if self.stops and seq == self.stops[0]:
            raise self.stop(f"end {state}")
        if before is not None:
            self._keep(seq, kind, before, fields)
        if self.replaying is not None:
            self.replaying.ending()
        return super().finish(kind, self._vet(seq, kind, fields), state=state, key=key)

    def _vet(self, seq: int, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        """fields as the new trace holds them: before a fork's branch, checked against the parent and marked."""
        if seq < self.below:
            self.same_as(self.parent[seq - 1], {"seq": seq, "kind": kind, **fields}, seq)
            if kind != "header":
                fields = {**fields, "reused": True}
        elif seq == self.below:
            fields = {**fields, "mutated": True}
        return fields

    def same_as(self, parent: dict[str, Any], record: dict[str, Any], seq: int) -> None:
        was, now = normalize_record(parent), normalize_record(record)
        if was != now:
            found = differences(was, now)
            shown = "; ".join(f"{k}: parent {x!r}, fork {y!r}" for k, (x, y) in found.items())
            agent = str(parent.get("agent", MAIN))
            raise ReplayDrift(
                f"seq {parent['seq']}: outside its branch's causal future the fork wrote another record than "
                f"the parent: {shown}",
                seq=parent["seq"],
                line=parent["seq"],
                fields=found,
                agent=agent,
            )

    def annotate(self, record: dict[str, Any], agent: str, vc: dict[str, int]) -> dict[str, Any]:
        """A causal fork's lineage: the branch is mutated, its causal future live, the rest reused (and checked)."""
        if not self.branch_at:
            return record
        b_agent, b_count = self.branch_at
        count = vc[agent]
        if agent == b_agent and count == b_count:
            record["mutated"] = True
        elif vc.get(b_agent, 0) < b_count and agent not in self.ahead:  # the branch's past, or concurrent with it
            parent = self.positions.get((agent, count))
            if parent is None:
                raise ReplayDrift(
                    f"the fork wrote a {record['kind']} record as event {count} of agent {agent!r}, which the "
                    "parent does not have outside the branch's causal future",
                    seq=0,
                    line=0,
                    fields={"event": (None, [agent, count])},
                    agent=agent,
                )
            self.same_as(parent, record, parent["seq"])
            record["reused"] = True
        return record


class _Writer(_Rewriting):
    """The new trace in a local file."""

    __slots__ = ("agents", "ahead", "below", "branch_at", "copies", "entrypoint", "parent", "positions", "reached",
                 "replaying", "stops")  # fmt: skip


class _RemoteWriter(_Rewriting, RemoteJournal):
    """The new trace at a trace URL: shipped as segments at the ship points of any run (trace/remote.py)."""

    __slots__ = ("agents", "ahead", "below", "branch_at", "copies", "entrypoint", "parent", "positions", "reached",
                 "replaying", "stops")  # fmt: skip


class _Replaying(Session):
    """A strict session that writes what it serves, stops at seams, and can branch to live."""

    journal: _Rewriting
    # after a seam, a crossing the new trace does not hold is served from the recording even while some it holds
    # are not made again yet (a workflow's: a sibling task makes its own later); an Executor's resume makes them first
    sibling_again = False

    def __init__(
        self,
        journal: _Rewriting,
        recorded: Iterable[Crossing],
        *,
        branch: Crossing | None,
        value: Any,
        redact: Redaction,
    ):
        super().__init__(journal, recorded, strict=True, redact=redact)
        self.checking = True
        self.again: deque[Crossing] = deque()  # served again after a seam, already in the new trace
        self.branch, self.value = branch, value
        self.live = False  # the branch was reached
        self.ahead: set[str] = set()  # agents that entered the branch's causal future
        # crossings served before the new trace reached their place, by recorded seq (see write): with one writer,
        # written once the trace reaches their seq; with agents, per agent, once every earlier one of theirs is
        self.pending: dict[int, _Served] = {}
        self.owners: dict[int, object] = {}  # the task each pending crossing was served to (None: no event loop)
        self.unwritten: dict[str, dict[int, _Served]] = {}
        self.flushing = False  # flush() is writing (its own writes call it again)

    def unsettled(self, agent: str) -> ReplayDrift | None:
        """A crossing served but not written because one the recording has before it was never made: with one
        writer, the crossing the recording has where the next state record goes; with agents, agent's first."""
        queue = self.recorded.get(agent)
        if self.journal.shared:
            return self.missed(queue[0]) if queue and self.unwritten.get(agent) else None
        here, parent = self.journal.seq, self.journal.parent  # (parent[here]: the recording's next record)
        if self.live or not self.pending:
            return None  # (one not made with none served after it: the rerun is unequal, `unused`)
        if queue and here < len(parent) and parent[here]["kind"] == "crossing":
            rec = next((c for c in queue if c.seq == here + 1), None)
            if rec is not None:
                return self.missed(rec)
        task = _task()  # a task that goes on past a crossing it took early: it took another's, or took it too soon
        mine = next((seq for seq, owner in self.owners.items() if owner is task), None)
        if mine is None:
            return None
        rec, kind = self.pending[mine][0], self.pending[mine][1]
        return self.misplaced(rec, kind, MAIN, here + 1)

    def horizon(self) -> float:
        """A crossing recorded after the next seam is not served before it: the recorded process made it later."""
        stops = self.journal.stops
        return stops[0] if stops else math.inf

    def place(self, kind: str = "", request: Any = None) -> tuple[str, int, bool]:
        """(agent, own count) of the current agent's next record, and whether it is in the branch's causal future.

        A receive knows its merge only from the message it gets: the recorded
        one's send clock decides (a message whose send is in the future is too).
        """
        agent = self.agents.current()
        if agent == MAIN and self.agents.spawned:
            self.journal.copy_seams()  # main's next record comes after them
        vc = self.agents.next_vc(self.journal)
        if self.branch is None:
            return agent, vc[agent], False
        b_agent = self.branch.agent
        future = agent in self.ahead or vc.get(b_agent, 0) >= self.branch.vc[b_agent]
        if not future and kind == "agent_msg" and isinstance(request, dict) and "receive" in request:
            queue = self.queue()
            sent = queue[0].response.get("sent") if queue and isinstance(queue[0].response, dict) else None
            future = isinstance(sent, dict) and sent.get(b_agent, 0) >= self.branch.vc[b_agent]
        if future and not (agent == b_agent and vc[agent] == self.branch.vc[b_agent]):
            self.ahead.add(agent)  # in the branch's causal future: every later event of this agent is too
        return agent, vc[agent], future

    def take(self, kind: str, request: Any, match: Match | None = None) -> tuple[Crossing, bool]:
        """The crossing to serve, and whether the new trace holds it already."""
        if self.again:  # as the resume did: what it served again first, by what it is
            task = self.whose(self.again, kind, request, match)
            rec = take(self.again, kind, request, match, task=task, marker=self.redact.marker)
            if rec is not None:
                self.served += 1
                return rec, True
            if not self.sibling_again:
                if _may_hold.get():
                    raise _Hold
                drift = self.drift(kind, request, match, self.again)
                self.failure = self.failure or drift
                raise drift
        if self.journal.at_stop():
            tool = request.get("tool") if kind == "tool" and isinstance(request, dict) else None
            raise self.journal.stop(f"tool {tool}" if tool is not None else f"{kind} crossing")
        if self.branch is not None and self.early(kind, request, match):
            raise _Hold
        self.pause_here()
        try:
            found = Session.serve(self, kind, request, match)
        except ReplayViolation as e:
            if _may_hold.get() and self.horizon() < math.inf:  # the recorded process stopped before it made this
                raise _Hold from None  # one: a sibling task reaches the seam meanwhile (else, once quiet: this)
            agent, here, _ = self.place()
            seq = self.journal.seq + 1  # where the recording would have had to hold it
            where = f"seq {seq}" if agent == MAIN and not self.agents.spawned else f"agent {agent!r} event {here}"
            violation = ReplayViolation(f"{where}: {e}", seq=seq, line=seq, agent=agent)
            self.failure = self.failure or violation
            raise violation from None
        except ReplayDrift as e:
            self.failure = self.failure or e
            raise
        if found is None:  # strict: serve() raises rather than answer None
            raise internal(f"a strict session served no {kind} crossing", self.journal.path, self.journal.seq + 1)
        if self.branch is not None and found.seq == self.branch.seq:
            self.live = True
            self.queue().clear()
            found = replace(found, response=self.value, error=None)
        return found, False

    def early(self, kind: str, request: Any, match: Match | None) -> bool:
        """Whether an async task reached a fork's branch before the records the recording has ahead of it are
        written (one writer): it waits, so the fork's prefix is the parent's, record for record."""
        if self.live or self.journal.shared or self.journal.seq + 1 >= cast(Crossing, self.branch).seq:
            return False
        if not _may_hold.get():
            return False
        task = self.whose(self.queue(), kind, request, match)
        taken = next((c for c in self.queue() if c.kind == kind and same(kind, c, request, match, task)), None)
        return taken is self.branch

    def write(self, rec: Crossing, kind: str, match: Match | None, arrived: Arrived | None) -> None:
        """Write a served crossing to the new trace at its recorded place.

        Served crossings return at once, so concurrent tasks reach theirs in
        another order, and earlier, than they were recorded. With one writer
        (no agents) a crossing is written at its recorded seq: now if the
        trace is there, else by the write that brings it there (flush(), run
        after every record of the new trace, whoever writes it): among a
        sibling task's tool step records too, as recorded (calls.py waits for
        a step's turn with aturn()). With agents, at its place among its
        agent's crossings: once every earlier one of the agent is written.
        """
        if not self.journal.shared:
            self.pending[rec.seq] = (rec, kind, match, arrived)
            self.owners[rec.seq] = _task()
            self.flush()
            return
        waiting = self.unwritten.setdefault(self.agents.current(), {})
        waiting[rec.seq] = (rec, kind, match, arrived)
        queue = self.queue()
        first = queue[0].seq if queue else math.inf  # the earliest not served yet
        for seq in sorted(waiting):
            if seq > first:
                break
            self._write(*waiting.pop(seq))

    def flush(self) -> None:
        """Write each pending crossing whose recorded seq the new trace has reached (one writer; after a fork's
        branch, each at once: what the task was served, where the fork is now)."""
        if self.flushing or not self.pending:
            return
        self.flushing = True
        try:
            while self.pending:
                seq = min(self.pending)
                if seq > self.journal.seq + 1 and not self.live:
                    return
                self.owners.pop(seq, None)
                self._write(*self.pending.pop(seq))
        finally:
            self.flushing = False

    def ending(self) -> None:
        """Before the run's end is written: ReplayDrift for a crossing served whose place the run never reached
        (or, for a workflow, one the new trace holds from before a seam that the run did not make again)."""
        if self.live:
            return
        if self.pending:
            raise self.missed(self.pending[min(self.pending)][0])
        if self.sibling_again and self.again:
            raise self.missed(self.again[0])

    def turn(self, mine: Callable[[dict[str, Any]], bool]) -> bool:
        """Whether the recording's next record is `mine` (what a tool step writes next), or nothing holds it to
        its place (a fork past its branch, agents, a seam next: the seam stops it)."""
        journal = self.journal
        if self.live or journal.shared or journal.at_stop() or journal.seq >= len(journal.parent):
            return True
        return mine(journal.parent[journal.seq])

    async def aturn(self, mine: Callable[[dict[str, Any]], bool]) -> bool:
        """Wait until the recording's next record is `mine`: sibling tasks write theirs first. False when none
        moved for HOLD_QUIET seconds (the run took another path: what it writes then is the drift)."""
        if self.turn(mine):
            return True

        def attempt() -> bool:
            if not self.turn(mine) and _may_hold.get():
                raise _Hold
            return self.turn(mine)

        return await patiently(self, attempt)

    def _write(self, rec: Crossing, kind: str, match: Match | None, arrived: Arrived | None) -> None:
        if not (self.live and not self.journal.shared):  # (after a fork's branch, one writer's seqs moved on)
            self.placed(rec, kind)
        if arrived is not None and rec.error is None:
            arrived(rec.response, True)
        key = rec.request if match is None else match(rec.request)  # the recorded request: what matching ignores
        fields = {"boundary": kind, "request": rec.request, "hash": request_hash(kind, key)}  # stays as recorded
        if rec.task is not None:  # (the task that takes it: the recorded one, in a recording that names tasks)
            fields = {TASK: rec.task, **fields}
        fields.update({"response": rec.response} if rec.error is None else {"error": rec.error})
        if self.branch is not None and rec.seq != self.branch.seq and not self.journal.shared:
            # served from the parent wherever it lands: a sibling task's crossing taken before the branch and
            # written after it is marked too, not left to read as live (with agents, annotate() marks by clocks)
            fields["reused"] = True
        self.journal.append("crossing", fields, check=("response",) if rec.error is None else (), user=("request",))

    def placed(self, rec: Crossing, kind: str) -> None:
        """ReplayDrift unless the record that carries rec's response now is the one that carried it then."""
        agent, here, _ = self.place()
        if rec.vc.get(agent) != here:  # the record that will carry its response is not the recorded one
            raise self.misplaced(rec, kind, agent, here)

    def misplaced(self, rec: Crossing, kind: str, agent: str, here: int) -> ReplayDrift:
        """The ReplayDrift of a crossing whose response the re-execution took at event `here` of agent."""
        was = rec.vc.get(agent)
        where = "seq" if agent == MAIN and not self.agents.spawned else f"agent {agent!r} event"
        drift = ReplayDrift(
            f"seq {rec.seq}: the re-execution reached this {kind} crossing at {where} {here}, not where the "
            "recording has it: the run took another path before it (harness diff shows where)",
            seq=rec.seq,
            line=rec.seq,
            fields={"seq": (rec.seq, self.journal.seq + 1)} if where == "seq" else {"event": (was, here)},
            agent=agent,
        )
        self.failure = self.failure or drift
        return drift

    def pause_here(self) -> None:
        """Raise what made the recorded run pause at this point, if it paused here."""
        here = self.journal.seq + 1
        parent = self.journal.parent
        rec = parent[here - 1] if here <= len(parent) else {}
        if rec.get("kind") != "transition" or rec.get("to") != S.PAUSED:
            return
        if "question" in rec:
            raise Interrupted(rec["question"])
        if rec.get("reason") == "budget":  # before a live model call past the run's budget: not made, as then
            raise BudgetExceeded(rec["budget"])
        error = rec.get("error")
        if isinstance(error, dict) and error.get("type") == "ToolTimeout":
            raise ToolTimeout(self.journal.parent[rec["seq"] - 2].get("tool", "?"), float(error.get("timeout", 0)))

    def serve(self, kind: str, request: Any, match: Match | None = None) -> Crossing | None:
        if self.branch is not None:
            agent, here, future = self.place(kind, request)
            if future and not (agent == self.branch.agent and here == self.branch.vc[agent]):
                self.queue().clear()  # this agent's recorded future no longer applies
                return None
        rec, written = self.take(kind, request, match)
        if not written:  # a tool's call, whose record the executor writes next: at its recorded place?
            self.placed(rec, kind)
        return rec

    def enter(
        self, kind: str, request: Any, match: Match | None = None, arrived: Arrived | None = None
    ) -> tuple[Any, Crossing | None]:
        """Serve the crossing and write it to the new trace as the recording has it (live in a fork's future)."""
        if self.branch is not None:
            agent, here, future = self.place(kind, request)
            if future and not (agent == self.branch.agent and here == self.branch.vc[agent]):
                self.queue().clear()
                return super().enter(kind, request, match, arrived)
        check_value("request", request)
        request = self.redact(request)
        rec, written = self.take(kind, request, match)
        if not written:
            self.write(rec, kind, match, arrived)
        return request, rec


class _Agent:
    """An Executor's agent, re-executed: its planner, tools and verifier drive the Executor's own loop."""

    workflow: str | None = None

    def __init__(self, planner: Planner, tools: Mapping[str, Callable[..., Any] | Tool], verifier: Verifier | None):
        self.planner, self.tools, self.verifier = planner, tools, verifier
        self.ex: Executor | None = None

    @contextlib.contextmanager
    def prepared(self, rec: _Recording, path: str, retry: RetryPolicy | None, redact: Redaction) -> Iterator[None]:
        planner, tools, verifier = self.planner, self.tools, self.verifier
        with bridging(planner, tools, verifier) as (planner, tools, verifier):  # async agents: on a private loop
            self.ex = Executor(
                planner=planner,
                tools=tools,
                verifier=verifier,
                trace=path,
                retry=retry or rec.retry(),
                max_steps=rec.max_steps(),
                entrypoint=_entrypoint(rec),
                redact=redact,
            )
            yield

    def session(
        self, writer: _Rewriting, rec: _Recording, at: Crossing | None, value: Any, redact: Redaction
    ) -> _Replaying:
        return _Replaying(writer, rec.crossings, branch=at, value=value, redact=redact)

    def executor(self) -> Executor:
        if self.ex is None:
            raise HarnessError("internal error, please report: a re-execution started before its executor was made")
        return self.ex

    def start(self, writer: _Rewriting, session: _Replaying, goal: Any, run_id: str, lineage: dict[str, Any]) -> None:
        running.start(self.executor(), writer, goal, run_id, session=session, **lineage)

    def go_on(self, writer: _Rewriting, session: _Replaying, rep: Replay) -> None:
        session.again = deque(rep.resumable_crossings())  # what Executor resume serves again
        running.go_on(self.executor(), writer, session, rep)


class _Flowing:
    """A workflow, re-executed: its function runs from the start at the run's start and again at each seam,
    over what the new trace holds by then (served, not written again, as a resume does)."""

    def __init__(self, w: Workflow[Any, Any]):
        self.w = w
        self.workflow: str | None = w.name
        self.redact: Redaction = Redaction.of(None)
        self.entrypoint = "<rerun>"

    @contextlib.contextmanager
    def prepared(self, rec: _Recording, path: str, retry: RetryPolicy | None, redact: Redaction) -> Iterator[None]:
        self.redact, self.entrypoint = redact, _entrypoint(rec)
        self.workflow = rec.rep.workflow or self.w.name  # its name as recorded (run as a script: `__main__:...`)
        yield

    def session(
        self, writer: _Rewriting, rec: _Recording, at: Crossing | None, value: Any, redact: Redaction
    ) -> _Replaying:
        return _Rerunning(writer, rec.crossings, branch=at, value=value, redact=redact)

    def start(self, writer: _Rewriting, session: _Replaying, goal: Any, run_id: str, lineage: dict[str, Any]) -> None:
        flow = start(writer, self.workflow or self.w.name, goal, run_id, redact=self.redact, fsync=writer.fsync,
                     session=session, lineage=lineage, entrypoint=self.entrypoint)  # fmt: skip
        run_anywhere(self.w, flow, *_arguments(goal))

    def go_on(self, writer: _Rewriting, session: _Replaying, rep: Replay) -> None:
        rep, written = Recorded.read(writer.path)
        if written.unrevealed is not None:
            raise written.unrevealed
        cast(_Rerunning, session).again_from(written)
        flow = go_on(writer, session, rep, fsync=writer.fsync, lazy=False, entrypoint=self.entrypoint)
        run_anywhere(self.w, flow, *_arguments(rep.goal))


def _arguments(goal: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A workflow's args and kwargs, from its goal as its header holds it."""
    return tuple(goal["args"]), dict(goal["kwargs"])


def _entrypoint(rec: _Recording) -> str:
    env = rec.rep.header.get("env") or {}
    return str(env.get("entrypoint") or "<rerun>")


_Runner = _Agent | _Flowing


def _runner(
    planner: Planner | None,
    tools: Mapping[str, Callable[..., Any] | Tool] | None,
    verifier: Verifier | None,
    workflow: Callable[..., Any] | None,
) -> _Runner:
    """What re-executes the recording: exactly one of an Executor's agent and a workflow."""
    if workflow is not None:
        if planner is not None or tools is not None or verifier is not None:
            raise HarnessError("give either workflow= or planner= and tools= (an Executor's agent), not both")
        return _Flowing(workflow if isinstance(workflow, Workflow) else Workflow(workflow))
    if planner is None or tools is None:
        raise HarnessError(
            "give the agent that made the run: planner= and tools= (and verifier=) for an Executor's run, "
            "or workflow= for a workflow's"
        )
    return _Agent(planner, tools, verifier)


class _Rerunning(Serving, _Replaying):
    """A workflow's re-execution: after a seam, what the new trace holds is served first (not written again):
    its crossings as an Executor's resume serves them (`again`), its calls and artifacts as a resume does."""

    sibling_again = True

    def __init__(self, journal: _Rewriting, recorded: Iterable[Crossing], **kwargs: Any):
        _Replaying.__init__(self, journal, recorded, **kwargs)
        self.held, self.path = {}, journal.path

    def again_from(self, written: Recorded) -> None:
        """At a seam: what the new trace holds by then is served again first."""
        self.again = deque(written.crossings)
        self.held = {agent: deque(items) for agent, items in written.held.items()}

    def upcoming(self) -> Crossing | Item | None:
        held = self.mine()
        if self.again or held:  # the new trace's own, after a seam
            nxt: Crossing | Item | None = self.again[0] if self.again else None
            if held and (nxt is None or held[0].seq < nxt.seq):
                return held[0]
            return nxt
        return Serving.upcoming(self)


def _execute(
    rec: _Recording,
    path: str,
    runner: _Runner,
    retry: RetryPolicy | None,
    *,
    stops: list[int],
    branch: int | None = None,
    value: Any = None,
    run_id: str | None = None,
    redact: Redaction | Iterable[Rule] | None = None,
) -> Rerun:
    recorded = rec.rep.header.get("redact")
    rules = Redaction.from_header(recorded, rec.path).plus(redact).as_of(rec.rep.header)  # (a 0.3.x trace's: as then)
    run_id = run_id or uuid.uuid4().hex
    # as the parent: its redaction rules (more rules are ours) and its budget (recorded, for the run's resumes)
    lineage: dict[str, Any] = {"parent": rec.rep.run_id, "redact": recorded, "budget": rec.rep.header.get("budget")}
    if branch is not None:
        lineage["branch"] = branch
    writer: _Rewriting
    if is_url(path):  # a trace URL: segments shipped as any run ships them, fenced by conditional create
        writer = cast(_RemoteWriter, _RemoteWriter.open_url(path, redact=rules))
    else:
        writer = cast(_Writer, _Writer.open(path, redact=rules))
    at = next((c for c in rec.crossings if c.seq == branch), None)
    with writer, runner.prepared(rec, path, retry, rules):
        writer.stops = deque(s for s in stops if s < rec.spawned)  # later seams: copy_seams()
        writer.below, writer.parent = branch or 0, rec.records
        writer.copies, writer.entrypoint, writer.reached = dict(rec.copies), _entrypoint(rec), None
        writer.branch_at = (at.agent, at.vc[at.agent]) if at is not None else None
        writer.positions = rec.positions()
        session = runner.session(writer, rec, at, value, rules)
        writer.ahead, writer.agents, writer.replaying = session.ahead, session.agents, session
        try:
            writer.reached = _drive(runner, writer, session, rec, run_id, lineage)
        except (ReplayDrift, ReplayViolation) as e:
            if session.failure is not None and session.failure is not e:
                raise session.failure from None  # the first one, which agent code swallowed
            raise
        if session.failure is not None:  # raised inside agent code that caught it
            raise session.failure
        if branch is not None and not session.live:
            raise HarnessError(
                f"{rec.path}: the fork ended at seq {writer.seq} without reaching the crossing at seq {branch}"
            )
        new = _records(local_copy(path), writer.size())  # a URL: the writer's spool
    same = normalize(_unsealed(new)) == normalize(_unsealed(rec.records))
    return Rerun(
        run_id=run_id,
        parent=rec.rep.run_id,
        branch=branch,
        state=replay(path).state,
        equal=same and not session.left(),
        live_calls=session.live_calls,
        unused=session.left(),
        trace=path,
        records=tuple(new),
        live_calls_by_agent=dict(sorted(session.calls.items())),
        ahead=writer.reached if not rec.rep.complete and writer.seq == rec.rep.last_seq else None,
    )


def _drive(
    runner: _Runner, writer: _Rewriting, session: _Replaying, rec: _Recording, run_id: str, lineage: dict[str, Any]
) -> str | None:
    """Run from the start, then from each seam on, as the recorded processes did; what the re-execution was about
    to do at the last stop it reached (Rerun.ahead)."""
    records = rec.records
    rep: Replay | None = None
    reached = None
    while True:
        try:
            if rep is None:
                runner.start(writer, session, rec.rep.goal, run_id, lineage)
            else:
                runner.go_on(writer, session, rep)
        except _Seam as stopped:
            reached = stopped.what
        except (ReplayDrift, ReplayViolation):
            raise
        except Exception:
            if not writer.at_stop():  # the recorded process did not stop here: a real error
                raise
        if session.live:  # a fork past its branch: no recorded seam applies any more
            return reached
        seq = writer.seq + 1
        while seq <= len(records) and records[seq - 1]["kind"] in _COPIED:  # written as the recording has them
            r = records[seq - 1]
            if writer.stops and writer.stops[0] == seq:  # a crash record: the stop is the record itself
                writer.stops.popleft()
            writer.append(r["kind"], _copy(r), sync=True)
            seq += 1
        if not (writer.at_stop() and seq <= len(records) and records[seq - 1]["kind"] == "resume"):
            return reached
        writer.stops.popleft()
        seam = {"set_aside": records[seq - 1].get("set_aside"), "env": environment(_entrypoint(rec))}
        writer.append("resume", seam)
        while seq < len(records) and records[seq]["kind"] == "answer":  # the answer this resume brought
            writer.append("answer", _copy(records[seq]), sync=True)
            seq += 1
        rep = replay(writer.path)


_COPIED = frozenset({"reconcile", "crash"})  # records a re-execution copies from the recording (and answers)


def _copy(record: dict[str, Any]) -> dict[str, Any]:
    """A recorded record's own fields, to write again (the journal adds seq, ts and crc; a fork marks reuse)."""
    return {k: v for k, v in record.items() if k not in ("seq", "kind", "ts", "crc", "reused")}
