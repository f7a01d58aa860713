"""The reader's rules for the rarer record kinds, as a table: `RULES[kind](scan, rec, n, seq)`.

`reader._scan` frames every line (checksum, parse, canonical bytes, seq,
clock) and keeps the rules of the kinds nearly every line is (transition,
checkpoint, crossing) inline, in its locals: the hot path. Each other kind
has one small function here, registered by kind in `RULES`: header, seal,
resume, reconcile, answer, crash, artifact, the agents' spawn, exit and
join, a Recorder's event and end. A rule reads the scan's state from a
`Scan` it is handed (the current lane's position and the run's facts),
raises TraceCorruption naming the line when the record cannot be true, and
otherwise records what the record changed on that same `Scan`; the scan
takes the changes back into its locals. A kind missing from the table is
`unknown-kind`.

Here too: which fields each kind (and each transition edge) carries, and
no other ("One reading per field" in docs/FORMAT.md); the rare edges of a
transition (leaving a parallel step or a pause, an unsafe call in flight at
a resume, a timeout) and the framing's rarer checks (a fork's marks, a
record after a crash), each a function the scan calls only on its edge or
record, where its check stands in the order (so a line with two faults gets
the same reason); and the small checks the hot path shares with them. What
may follow what is state.py's table, the clocks are clock.py's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import orjson

from .._errors import TraceCorruption, internal
from ..storage import blobs as _blobs
from ..storage.blobs import BlobRef
from . import state as S
from .clock import ClockRules
from .line import SCHEMA
from .tasks import TASK, well_formed

_fail = TraceCorruption
SORTED = orjson.OPT_SORT_KEYS

# One reading per field: the fields each kind of record carries (a transition: each edge), and no other. A field
# that means something on one kind (a result, a key, an error) is refused on any other, as is a field no kind has:
# two readers must never tell two stories from one line (replay() ignoring what `harness show` prints, say).
_LINE = frozenset({"seq", "kind", "ts", "crc"})
_AGENT = frozenset({"agent", "vc"})  # who wrote it, and its clock (checked by clock.ClockRules)
_LINEAGE = frozenset({"reused", "mutated"})  # a fork's marks, in a fork only (a header with `branch`)
_STEP = frozenset({"from", "to", "step", "attempt"})
_INTENT_FIELDS = frozenset({"name", "tool", "args", "key", "contract", TASK})  # contract: a workflow's only
_EDGE_FIELDS: dict[tuple[str, str], frozenset[str]] = {
    (S.PLAN, S.ACT): _INTENT_FIELDS,
    (S.PAUSED, S.ACT): _INTENT_FIELDS,
    (S.ACT, S.VERIFY): frozenset({"result", "blobs"}),
    (S.PAUSED, S.VERIFY): frozenset({"result", "blobs"}),  # a reconciled result (none after an answer)
    (S.PLAN, S.DONE): frozenset({"result", "blobs"}),  # a workflow's return value (refused on other runs)
    (S.PLAN, S.FAILED): frozenset({"error"}),
    (S.ACT, S.PLAN): frozenset({"error"}),
    (S.ACT, S.FAILED): frozenset({"error"}),
    (S.VERIFY, S.PLAN): frozenset({"error"}),
    (S.VERIFY, S.FAILED): frozenset({"error"}),
    # a timeout's error, interrupt()'s question, or why a call in flight was not made again (harness.mcp)
    (S.ACT, S.PAUSED): frozenset({"error", "question", "reason"}),
    # interrupt()'s question, or a budget's pause (reason "budget", and what: the limit, what was spent, the call)
    (S.PLAN, S.PAUSED): frozenset({"question", "reason", "budget"}),
    (S.VERIFY, S.PAUSED): frozenset({"question", "reason", "budget"}),
}
_KIND_FIELDS: dict[str, frozenset[str]] = {
    "header": frozenset(
        {"schema", "run_id", "goal", "tools", "workflow", "redact", "parent", "branch", "budget", "env"}
    ),
    "seal": frozenset({"state", "content_hash", "digests", "hmac", "set_aside"}),
    # main's own records: a clock once the run spawned, never another agent's name
    "resume": frozenset({"set_aside", "env", "vc"}),
    "reconcile": frozenset({"op", "happened", "result", "evidence", "set_aside", "blobs", "vc"}),
    "answer": frozenset({"op", "answer", "vc"}),
    "crash": frozenset({"state", "step", "attempt", "error", "traceback", "vc"}),
    # any agent's
    "checkpoint": frozenset({"step"}) | _AGENT,
    "artifact": frozenset({"name", "sha256", "size"}) | _AGENT,
    "crossing": frozenset({"boundary", "request", "hash", "response", "error", "blobs", TASK}) | _AGENT,
    "event": frozenset({"type", "data", "blobs"}) | _AGENT,
    "end": frozenset({"status", "error"}) | _AGENT,
    "spawn": frozenset({"child", "step", "name", "tool", "args"}) | _AGENT,
    "exit": frozenset({"status", "error"}) | _AGENT,
    "join": frozenset({"child"}) | _AGENT,
}


# The fields a transition of each edge must have besides seq, kind, from, to, step, ts and crc (the scan reads each,
# so a line missing one is refused): a transition with exactly these has no room for another, and is not looked at
# further (the fast path; set operations on every line would cost replay() a tenth of its time).
_EDGE_REQUIRED = {
    (S.PLAN, S.ACT): 3, (S.PAUSED, S.ACT): 3,  # name, tool, args
    (S.ACT, S.VERIFY): 1,  # result (or the blobs holding it)
    (S.PLAN, S.FAILED): 1, (S.ACT, S.PLAN): 1, (S.ACT, S.FAILED): 1, (S.VERIFY, S.PLAN): 1, (S.VERIFY, S.FAILED): 1,
    (S.PLAN, S.PAUSED): 1, (S.VERIFY, S.PAUSED): 1,  # error; question (or reason and budget)
}  # fmt: skip
CHECKPOINT_KEYS = len(_LINE) + 1  # step
CROSSING_KEYS = len(_LINE) + 4  # boundary, request, hash, response or error (inline)

Fields = tuple[dict[str, frozenset[str]], dict[str, dict[str, tuple[int, frozenset[str]]]]]


def _fields_table(fork: bool) -> Fields:
    """(fields by kind, (size of the minimal record, fields) by transition edge `[from][to]`), a fork's marks too
    when `fork`."""
    lineage = _LINEAGE if fork else frozenset()
    kinds = {k: _LINE | v | (lineage if k not in ("header", "seal") else frozenset()) for k, v in _KIND_FIELDS.items()}
    base = _LINE | _AGENT | lineage | _STEP
    edges = {
        src: {
            dst: (len(_LINE) + 3 + _EDGE_REQUIRED.get((src, dst), 0), base | _EDGE_FIELDS.get((src, dst), frozenset()))
            for dst in S.EDGES[src]  # the legal edges only: the scan asks this table whether an edge is one
        }
        for src in S.EDGES
    }
    return kinds, edges


FIELDS, FIELDS_FORK = _fields_table(False), _fields_table(True)
_ERROR_EXTRA = {"ToolTimeout": "timeout", "MaxSteps": "max_steps"}  # the one more field these errors carry
_EFFECTS = frozenset({"at-least-once", "idempotent", "unsafe"})
_CALL = frozenset({"name", "tool", "args"})
INTENT = ("name", "tool", "args", "key", "contract", TASK)  # what PAUSED -> ACT repeats of the uncertain intent
_ASIDE = re.compile(r"[^/\\\x00]+\.torn-[1-9][0-9]*")  # a sibling's file name, as set_aside() makes it
_WALL = (-62135596800.0, 253402300800.0)  # the header's ts: a time a date can hold (0001-01-01 to 9999-12-31, UTC)


class Lane:
    """The state-machine position of one sub-run: the run itself ("main"), or one call of a parallel step.

    A call's lane starts in PLAN at its step, walks the same table as the run,
    and ends at its checkpoint (`done`), in FAILED, or PAUSED.
    """

    __slots__ = (
        "agent", "at_attempt", "at_step", "ck", "ck_rec", "done", "intent", "intent_pos", "last", "planned",
        "reconcile", "result", "result_crossing", "result_seq", "resumes", "state",
    )  # fmt: skip

    def __init__(self, agent: str, state: str, step: int):
        self.agent, self.state, self.at_step, self.at_attempt = agent, state, step, 1
        self.result_seq = self.result_crossing = 0  # the record holding its result, and that crossing's index
        self.last: dict[str, Any] | None = None
        self.intent: dict[str, Any] | None = None
        self.intent_pos = (0, 0)  # its line: offset, length << 32 | crc before
        self.result: Any = None
        self.reconcile: dict[str, Any] | None = None
        self.ck: tuple[int, int, int] | None = None  # where its checkpoint is (and its result's crossing), packed
        self.ck_rec: Any = None  # its Checkpoint (reader.py's value), once made
        self.planned: dict[str, Any] = {}  # name, tool, args, as the spawn record gives them
        self.done = False
        self.resumes = 0  # resume records before its last intent

    @property
    def step(self) -> int:
        return self.at_step


class Scan:
    """What a rule may read and change: the scan's state, handed over before each rule, taken back after it.

    The first group is the current lane's position and the record's line, which the scan keeps in its locals
    and writes here before a rule runs; the rest is the run's: who may come next, what waits for an answer.
    Containers (lanes, group, answers, blobs, artifacts, asides) are shared with the scan, changed in place.
    """

    __slots__ = (
        "add_checkpoint", "answered", "answers", "artifacts", "asides", "at_step", "blobs", "clocks", "crash",
        "crossed", "dying", "edge_fields", "ended", "fork", "fresh", "group", "header", "header_pos", "intent",
        "joined", "kind_fields", "lane", "lanes", "offset", "path", "planned", "prev", "question", "reconcile",
        "resumes", "run_lane", "seal", "size", "state", "tools",
    )  # fmt: skip

    def __init__(self, path: str, run_lane: Lane, add_checkpoint: Callable[[tuple[int, int, int]], None]):
        self.path = path
        self.add_checkpoint = add_checkpoint  # a row of the run's checkpoints: (offset, packed, result's crossing)
        self.offset = self.size = self.prev = 0
        self.state, self.at_step = S.INIT, 0
        self.intent: dict[str, Any] | None = None
        self.reconcile: dict[str, Any] | None = None
        self.lane = self.run_lane = run_lane
        self.crossed = self.fresh = 0
        self.header: dict[str, Any] = {}
        self.tools: dict[str, Any] = {}  # the header's contracts: an intent must name one of them
        self.header_pos = (0, 0, 0)
        self.fork = False
        self.kind_fields, self.edge_fields = FIELDS  # the fields each kind (and each edge) carries
        self.clocks: ClockRules | None = None  # once the run spawned an agent
        self.lanes: dict[str, Lane] = {}  # the calls of parallel steps, by agent
        self.group: list[Lane] = []  # the open parallel step's calls, in planner order
        self.joined = 0  # how many of them the run joined (in that order)
        self.planned = (0, 0)  # the crossings made while planning the last intent, as indexes into crossings
        self.question: dict[str, Any] | None = None  # the pause on interrupt() the run is in
        self.answered = False
        self.answers: list[Any] = []  # answers not yet delivered: an `interrupt` crossing delivers one
        self.crash: dict[str, Any] | None = None  # the last crash record, until the run moves on
        self.dying = False  # main wrote a crash record: its next record is the resuming process's `resume`
        self.resumes = 0
        self.seal: dict[str, Any] | None = None
        self.ended = False  # the run reached DONE or FAILED
        self.artifacts: list[tuple[int, str, str, int]] = []  # seq, name, sha256, size
        self.blobs: dict[str, tuple[int, int]] = {}  # sha256 -> (size, first line naming it)
        self.asides: set[str] = set()  # the .torn-N files named so far


Rule = Callable[[Scan, dict[str, Any], int, int], None]


# ---------------------------------------------------------------- the rules, one per kind


def header(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    fields_of(sc.path, n, seq, rec, sc.kind_fields["header"])
    if n != 1:
        raise _fail(sc.path, n, "bad-header", "a header after the first line", seq)
    found = header_problem(sc.path, rec)
    if found is not None:
        raise _fail(sc.path, n, found[0], found[1], seq)
    if "budget" in rec and (why := budget_problem(rec["budget"])) is not None:
        raise _fail(sc.path, n, "malformed", f"a header whose budget {why}", seq)
    sc.header, sc.tools, sc.header_pos = rec, dict(rec["tools"]), (sc.offset, sc.size, sc.prev)
    sc.fork = "branch" in rec
    sc.kind_fields, sc.edge_fields = FIELDS_FORK if sc.fork else FIELDS


def seal(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    fields_of(sc.path, n, seq, rec, sc.kind_fields["seal"])
    if sc.state not in S.TERMINAL:
        raise _fail(sc.path, n, "seal", f"a seal in state {sc.state}: only a run that ended is sealed", seq)
    unsealed = _seal_mismatch(sc.path, sc.offset, rec, sc.blobs, sc.state)
    if unsealed is None and "set_aside" in rec:  # a resume completed a torn seal: where it went
        unsealed = aside_problem(sc.path, sc.header, rec["set_aside"], sc.asides)
    if unsealed:
        raise _fail(sc.path, n, "seal", unsealed, seq)
    sc.seal = rec


def resume(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    fields_of(sc.path, n, seq, rec, sc.kind_fields["resume"])
    aside = rec["set_aside"]
    bad = aside_problem(sc.path, sc.header, aside, sc.asides) if aside is not None else None
    if bad is None and type(rec["env"]) is not dict:
        bad = "a resume record whose env is not an object"
    if bad is not None:
        raise _fail(sc.path, n, "bad-resume", bad, seq)
    sc.resumes += 1
    sc.dying = False


def reconcile(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    path = sc.path
    fields_of(path, n, seq, rec, sc.kind_fields["reconcile"])
    if sc.state != S.PAUSED or sc.reconcile is not None or sc.question is not None:
        raise _fail(path, n, "bad-reconcile", "a reconcile record with no uncertain operation before it", seq)
    op, happened, intent = rec["op"], rec["happened"], sc.intent
    if intent is None or type(op) is not int or op != intent["seq"] or type(happened) is not bool:
        why = "the reconcile record does not name the paused operation's seq with happened true or false"
        raise _fail(path, n, "bad-reconcile", why, seq)
    if not happened and payload(rec, "result") is not None:
        why = "a reconcile record with a result for an operation that did not happen"
        raise _fail(path, n, "bad-reconcile", why, seq)
    if type(rec["evidence"]) is not str:
        raise _fail(path, n, "malformed", "a reconcile record whose evidence is not a str", seq)
    if "set_aside" in rec:
        bad = aside_problem(path, sc.header, rec["set_aside"], sc.asides)
        if bad is not None:
            raise _fail(path, n, "bad-reconcile", bad, seq)
    sc.reconcile = rec


def answer(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    fields_of(sc.path, n, seq, rec, sc.kind_fields["answer"])
    if sc.state != S.PAUSED or sc.question is None or sc.answered or "question" not in sc.question:
        raise _fail(sc.path, n, "bad-answer", "an answer record with no question waiting for it", seq)
    if rec["op"] != sc.question["seq"] or "answer" not in rec:
        raise _fail(sc.path, n, "bad-answer", "the answer record does not name the question's seq", seq)
    sc.answered = True
    sc.answers.append(rec["answer"])


def crash(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    fields_of(sc.path, n, seq, rec, sc.kind_fields["crash"])
    # where the process was, in words: not part of the run's story (a signal can land between a state change and
    # its record), so only its types are checked, never its agreement with the run
    if (
        not error_ok(rec["error"])
        or type(rec["traceback"]) is not str
        or rec["state"] not in S.EDGES
        or type(rec["step"]) is not int
        or type(rec["attempt"]) is not int
    ):
        why = "a crash record needs a state, int step and attempt, error {type, message}, traceback"
        raise _fail(sc.path, n, "malformed", why, seq)
    sc.crash, sc.dying = rec, True


def artifact(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    fields_of(sc.path, n, seq, rec, sc.kind_fields["artifact"])
    if type(rec["name"]) is not str:
        raise _fail(sc.path, n, "malformed", "an artifact record whose name is not a str", seq)
    sc.artifacts.append((seq, rec["name"], rec["sha256"], rec["size"]))


def _agent_life(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    """What spawn, exit and join share: their fields, and a clock (an agent's life's rules are the clock's)."""
    kind = rec["kind"]
    fields_of(sc.path, n, seq, rec, sc.kind_fields[kind])
    if sc.clocks is None:
        raise _fail(sc.path, n, "vector-clock", f"a {kind} record without its clock", seq)


def spawn(sc: Scan, rec: Any, n: int, seq: int) -> None:
    _agent_life(sc, rec, n, seq)
    path, child = sc.path, rec.get("child")  # (the clock checked it names the agent spawned)
    if "step" not in rec:
        if not _CALL.isdisjoint(rec):
            why = "a spawn with a call's name, tool or args but no step: only a parallel call has them"
            raise _fail(path, n, "malformed", why, seq)
        return
    # a call of a parallel step
    if sc.group and sc.joined == len(sc.group) and child not in sc.lanes:
        # a parallel step right after another (the planner returned a list again): the one before is over, as a
        # transition would have left it (left_group), and this one's calls number on from its last
        if any(x.state == S.FAILED for x in sc.group):
            why = f"call {child!r} after a parallel step whose call failed: the run must fail with its error"
            raise _fail(path, n, "bad-transition", why, seq)
        sc.at_step = sc.group[0].at_step + len(sc.group)
        sc.group.clear()
        sc.joined = 0
    call, group = sc.lanes.get(child), sc.group
    if sc.lane is not sc.run_lane or sc.state != S.PLAN:
        raise _fail(path, n, "bad-transition", "a parallel call started outside PLAN", seq)
    if call is None or call not in group[sc.joined :] or call.at_step != rec["step"]:
        if rec["step"] != sc.at_step + len(group) or sc.joined or call is not None:
            why = f"call {child!r} of step {rec['step']!r}; step {sc.at_step + len(group)} comes next"
            raise _fail(path, n, "bad-transition", why, seq)
        call = sc.lanes[child] = Lane(child, S.PLAN, rec["step"])
        name, tool, args = rec["name"], rec["tool"], rec["args"]
        if type(name) is not str or type(tool) is not str or type(args) is not dict:
            raise _fail(path, n, "malformed", "a parallel call needs a str name, a str tool, a dict of args", seq)
        call.planned = {"name": name, "tool": tool, "args": args}
        if not group:  # the planner's crossings that planned the list: a resume asks it again
            sc.planned = (sc.crossed - sc.fresh, sc.crossed)
        group.append(call)
    elif planned_call(rec) != planned_call(call.planned):  # spawned again after a resume
        why = f"call {child!r} spawned again with another name, tool or args than it was planned"
        raise _fail(path, n, "bad-intent", why, seq)


def exit_(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:  # (exit: a builtin)
    _agent_life(sc, rec, n, seq)
    if (rec["status"] != "ok" or "error" in rec) and (rec["status"] != "error" or not error_ok(rec.get("error"))):
        why = 'an exit whose status is not "ok" (and no error) or "error" (with its error object)'
        raise _fail(sc.path, n, "malformed", why, seq)


def join(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    _agent_life(sc, rec, n, seq)
    child, lanes, group = rec.get("child"), sc.lanes, sc.group
    if child not in lanes or lanes[child] not in group:  # an agent's, not a parallel call's: the clock's rules
        return
    if group[sc.joined] is not lanes[child]:
        why = f"call {child!r} joined out of planner order ({group[sc.joined].agent} comes first)"
        raise _fail(sc.path, n, "bad-transition", why, seq)
    if not lanes[child].done and lanes[child].state != S.FAILED:
        why = (
            f"call {child!r} joined in state {lanes[child].state} without its checkpoint: the run "
            "joins a call once it checkpointed or failed for good"
        )
        raise _fail(sc.path, n, "bad-transition", why, seq)
    sc.joined += 1
    ck = lanes[child].ck
    if ck is not None:  # the call's checkpoint joins the run's progress now, in planner order
        sc.add_checkpoint(ck)


def event(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:  # a Recorder's: its run stays in INIT until its end
    fields_of(sc.path, n, seq, rec, sc.kind_fields["event"])
    if sc.state != S.INIT:
        raise _fail(sc.path, n, "bad-transition", f"an event record in state {sc.state}", seq)
    if type(rec["type"]) is not str or not ("data" in rec or "data" in (rec.get("blobs") or {})):
        raise _fail(sc.path, n, "malformed", "an event record needs a str type and its data", seq)


def end(sc: Scan, rec: dict[str, Any], n: int, seq: int) -> None:
    fields_of(sc.path, n, seq, rec, sc.kind_fields["end"])
    if sc.state != S.INIT:
        raise _fail(sc.path, n, "bad-transition", f"an end record in state {sc.state}", seq)
    if rec["status"] not in ("success", "failure", "error"):
        raise _fail(sc.path, n, "malformed", f"end status {rec['status']!r} is not success, failure or error", seq)
    if "error" in rec and not error_ok(rec["error"]):
        why = 'an end record whose error is not {"type": str, "message": str}'
        raise _fail(sc.path, n, "malformed", why, seq)
    sc.state = S.DONE if rec["status"] == "success" else S.FAILED
    sc.ended = True
    all_joined(sc.path, n, seq, sc.clocks)


# The table: a kind's rule, for every kind but the three the scan checks inline (transition, checkpoint, crossing).
RULES: dict[str, Rule] = {
    "artifact": artifact,
    "answer": answer,
    "crash": crash,
    "resume": resume,
    "seal": seal,
    "spawn": spawn,
    "exit": exit_,
    "join": join,
    "header": header,
    "reconcile": reconcile,
    "event": event,
    "end": end,
}


# ---------------------------------------------------------------- the rarer edges of a transition
# The scan checks every transition inline; these are the parts of it only a rare edge reaches (leaving a parallel
# step, a pause, a resume's call in flight), called by the scan only on that edge. Each raises, or returns what the
# scan needs to move on; the scan changes its own state.


def left_group(path: str, n: int, seq: int, rec: dict[str, Any], group: list[Lane], joined: int) -> tuple[Any, Any]:
    """The run moves on from a parallel step: every call joined, a failed call's failure the run's. Returns the
    step and attempt that come next."""
    if joined < len(group):
        raise _fail(path, n, "bad-transition", "the run moved on before it joined every call of its parallel step", seq)
    failed_call = next((x for x in group if x.state == S.FAILED), None)
    if failed_call is not None and failed_call.last is not None:
        if rec["to"] != S.FAILED or rec.get("error") != failed_call.last.get("error"):
            why = f"call {failed_call.agent} failed: the run must fail with its error"
            raise _fail(path, n, "bad-transition", why, seq)
        return failed_call.last["step"], failed_call.last.get("attempt", 1)
    return group[0].at_step + len(group), 1


def in_flight(path: str, n: int, seq: int, rec: dict[str, Any], intent: dict[str, Any], tools: dict[str, Any]) -> None:
    """ACT -> anything but a plain pause, for an unsafe tool whose intent a process before the resume wrote."""
    dst = rec["to"]
    if (dst != S.PAUSED or "question" in rec or "error" in rec) and tools[intent["tool"]]["effect"] == "unsafe":
        why = (
            f"ACT -> {dst} for unsafe tool {intent['tool']!r} whose intent (seq {intent['seq']}) a "
            "process before the resume wrote: a resumed process never calls an unsafe tool that was "
            "in flight, it pauses the run (ACT -> PAUSED) until an operator reconciles the call"
        )
        raise _fail(path, n, "bad-transition", why, seq)


def rejected(path: str, n: int, seq: int, intent: dict[str, Any], tools: dict[str, Any]) -> None:
    """VERIFY -> PLAN: an unsafe tool's rejected result is planned again only if its contract says so."""
    if (tools.get(intent["tool"]) or {}).get("effect") == "unsafe" and not tools[intent["tool"]].get("retry_rejected"):
        why = f"a rejected result of unsafe tool {intent['tool']!r} re-planned (its effect happened)"
        raise _fail(path, n, "bad-transition", why, seq)


def paused_on_operation(
    path: str,
    n: int,
    seq: int,
    rec: dict[str, Any],
    intent: dict[str, Any] | None,
    tools: dict[str, Any],
    resumed: bool,
) -> None:
    """ACT -> PAUSED without a question: an operation of uncertain outcome.

    Written by a process that resumed after the intent (`resumed`: a resume record between them, or just
    before): the call was in flight at a crash. Records of sibling tasks (a crossing made while a resume listed
    an MCP server's tools again) and a parallel step's other calls may come in between. Or after a ToolTimeout.
    """
    if intent is None:  # (ACT is entered with an intent)
        raise internal("a pause on an operation with no intent", path, seq)
    timed_out = isinstance(rec.get("error"), dict) and rec["error"].get("type") == "ToolTimeout"
    if not resumed and not timed_out:
        why = (
            "ACT -> PAUSED with no resume record since its intent and not after a ToolTimeout: "
            "only a resuming process, or a call that timed out, pauses a run on an operation"
        )
        raise _fail(path, n, "bad-transition", why, seq)
    effect = tools[intent["tool"]]["effect"]
    reason = rec.get("reason")
    if "reason" in rec and (type(reason) is not str or not reason or timed_out):
        why = "ACT -> PAUSED with a reason that is not a non-empty str, or beside a timeout"
        raise _fail(path, n, "malformed", why, seq)
    if effect != "unsafe" and reason is None:
        why = (
            f"ACT -> PAUSED for {intent['tool']!r}, an {effect} tool, with no reason: a resume "
            "calls it again; only an unsafe tool's interrupted call is of uncertain outcome, or a "
            "call the resume found a reason not to make again (its `reason`)"
        )
        raise _fail(path, n, "bad-transition", why, seq)


def left_pause(
    path: str,
    n: int,
    seq: int,
    dst: str,
    question: dict[str, Any] | None,
    answered: bool,
    reconcile: dict[str, Any] | None,
    result: Any,
) -> None:
    """PAUSED -> dst: after the answer to the question the run asked (`question`), or as the operator's reconcile
    record says (its result, when the operation happened, the one delivered)."""
    if question is not None:  # (a pause on its budget waits for no answer: a resume goes back where it paused)
        if not answered and "question" in question:
            raise _fail(path, n, "bad-transition", "a run paused on a question moved on before it was answered", seq)
        if dst != question["from"]:
            said = "the question was asked" if "question" in question else "the run paused on its budget"
            why = f"PAUSED -> {dst}, but {said} in {question['from']}"
            raise _fail(path, n, "bad-transition", why, seq)
        return
    if reconcile is None:
        raise _fail(path, n, "bad-transition", "a paused run moved on before it was reconciled", seq)
    if reconcile["happened"] is not (dst == S.VERIFY) or (
        dst == S.VERIFY and not same_value(result, payload(reconcile, "result"))
    ):
        why = f"PAUSED -> {dst} contradicts the reconcile record (happened={reconcile['happened']})"
        if dst == S.VERIFY and reconcile["happened"]:
            why += ": its result is not the reconciled one (compared by type and value)"
        raise _fail(path, n, "bad-reconcile", why, seq)


def pause_question(path: str, n: int, seq: int, rec: dict[str, Any]) -> dict[str, Any]:
    """PLAN or VERIFY -> PAUSED, or ACT -> PAUSED with a question: a pause on the question interrupt() asked,
    without an error; or PLAN or VERIFY -> PAUSED on the run's budget (`reason` "budget" and `budget`, an object
    with the `limit` and what was `spent`), which a resume leaves with no answer. Returns the pause's record."""
    if rec["from"] != S.ACT and rec.get("reason") == "budget" and "question" not in rec:
        said = rec.get("budget")
        if (
            not isinstance(said, dict)
            or not isinstance(said.get("limit"), dict)
            or not isinstance(said.get("spent"), dict)
        ):
            why = f"{rec['from']} -> PAUSED on its budget without the budget object (its limit, what was spent)"
            raise _fail(path, n, "malformed", why, seq)
        return rec
    if "reason" in rec or "budget" in rec:
        why = f'{rec["from"]} -> PAUSED with a reason other than "budget", or a budget beside a question'
        raise _fail(path, n, "malformed", why, seq)
    if "question" not in rec:
        why = f"{rec['from']} -> PAUSED without the question that interrupt() asked"
        raise _fail(path, n, "malformed", why, seq)
    if "error" in rec:
        raise _fail(path, n, "malformed", "a pause on a question with an error", seq)
    return rec


def planned_intent(path: str, n: int, seq: int, rec: dict[str, Any], lane: Lane) -> None:
    """A parallel call's intent is the call its spawn planned: name, tool and args, by type and value."""
    if planned_call(rec) != planned_call(lane.planned):
        why = (
            f"an intent of {lane.agent} that is not the call its spawn planned (name, tool and "
            "args, by type and value): a resume makes the call its spawn names"
        )
        raise _fail(path, n, "bad-intent", why, seq)


def crossing_fields(path: str, n: int, seq: int, rec: dict[str, Any], allowed: frozenset[str]) -> None:
    """A crossing with more than its minimal fields: each one a crossing carries, its task well formed."""
    if not allowed.issuperset(rec):
        raise stray_field(path, n, seq, rec, allowed, "a crossing record")
    if TASK in rec and not well_formed(rec[TASK]):
        raise _fail(path, n, "malformed", bad_task(rec[TASK]), seq)


def bad_task(value: Any) -> str:
    return f'a task {value!r:.80} that is not a str of dot-separated positive ints ("1", "2.1"): see FORMAT.md "Tasks"'


def asked_again(path: str, n: int, seq: int, rec: dict[str, Any], intent: dict[str, Any]) -> None:
    """PAUSED -> ACT after an answer: the intent that asked, again."""
    if any(rec.get(k) != intent.get(k) for k in INTENT):
        raise _fail(path, n, "bad-transition", "the intent after an answer is not the one that asked", seq)


def timed_out(path: str, n: int, seq: int, dst: str, intent: dict[str, Any], tools: dict[str, Any]) -> bool:
    """ACT -> dst after a ToolTimeout: never for an unsafe tool (its call may have taken effect). Returns whether
    the call's next attempt keeps its idempotency key (ACT -> PLAN of an intent with a key)."""
    if tools[intent["tool"]]["effect"] == "unsafe":
        why = (
            f"ACT -> {dst} after a ToolTimeout of unsafe tool {intent['tool']!r}: the call may "
            "have taken effect, so harness pauses the run (ACT -> PAUSED) for a reconcile"
        )
        raise _fail(path, n, "bad-transition", why, seq)
    return dst == S.PLAN and "key" in intent


def result_placement(path: str, n: int, seq: int, rec: dict[str, Any], returned: bool, workflow_end: bool) -> None:
    """A result only on the transition into VERIFY that delivers one, and on a workflow's PLAN -> DONE (there it
    must be: what the function returned). Called on an end, or on a result anywhere but a delivery."""
    src, dst = rec["from"], rec["to"]
    if workflow_end and dst == S.DONE:  # (workflow_end: the header names a workflow; the run's own lane)
        if not returned:
            why = "a workflow's PLAN -> DONE without its result (what the function returned)"
            raise _fail(path, n, "malformed", why, seq)
    elif returned:
        why = f"a result on {src} -> {dst}: only the transition into VERIFY that delivers one has it"
        if dst == S.DONE:
            why += " (and a workflow's PLAN -> DONE; this trace's header names no workflow)"
        raise _fail(path, n, "malformed", why, seq)


# ---------------------------------------------------------------- the framing's rarer checks


def fork_marks(
    path: str, n: int, seq: int, rec: dict[str, Any], header: dict[str, Any], spawned: bool, mutated_at: int | None
) -> int | None:
    """A fork's marks: `reused` and `mutated` are true when present, and one record only is mutated, its branch
    (with agents: the first one marked). Returns the seq of the mutated record, once seen."""
    if rec.get("reused", True) is not True or rec.get("mutated", True) is not True:
        raise _fail(path, n, "malformed", "a fork's reused or mutated mark that is not true", seq)
    if "mutated" not in rec:
        return mutated_at
    if (seq != header["branch"] if not spawned else mutated_at is not None) or "reused" in rec:
        why = (
            f"a mutated mark on seq {seq}: a fork answered one record differently, its branch "
            f"(seq {header['branch']}), and served none it answered"
        )
        raise _fail(path, n, "bad-lineage", why, seq)
    return seq


def after_crash(path: str, n: int, seq: int, kind: Any) -> TraceCorruption:
    """The error for a record of main's between its crash record and the resume."""
    why = (
        f"a {kind} record after a crash record and before a resume: a process that wrote its crash "
        "writes nothing more, the next record of the run is the resuming process's"
    )
    return _fail(path, n, "bad-resume", why, seq)


# ---------------------------------------------------------------- checks the rules and the hot path share


def fields_of(path: str, n: int, seq: int, rec: dict[str, Any], allowed: frozenset[str]) -> None:
    """TraceCorruption (malformed) when rec carries a field its kind does not: on the rarer kinds' lines."""
    if not allowed.issuperset(rec):
        raise stray_field(path, n, seq, rec, allowed, f"a {rec['kind']} record")


def stray_field(
    path: str, n: int, seq: int, rec: dict[str, Any], allowed: frozenset[str], what: str
) -> TraceCorruption:
    """The malformed error for a record carrying a field its kind (or edge) does not: the slow path."""
    stray = sorted(set(rec) - allowed)
    if set(stray) <= _LINEAGE:
        why = f"{stray[0]!r} on a record of a trace that is not a fork (only a fork marks what it reused)"
    else:
        why = (
            f"field {stray[0]!r} on {what}, which does not carry it: harness writes it on no such record, and a "
            "reader must not tell another story from it than replay() does"
        )
    return _fail(path, n, "malformed", why, seq)


def all_joined(path: str, n: int, seq: int, clocks: ClockRules | None) -> None:
    """A run ends only once every agent it started has exited and been joined (bad-transition if not)."""
    left = clocks.unjoined() if clocks is not None else []
    if left:
        why = f"the run ended while agent(s) {', '.join(map(repr, left))} had not exited and been joined"
        raise _fail(path, n, "bad-transition", why, seq)


def misplaced(path: str, n: int, seq: int, rec: dict[str, Any], at_step: int, at_attempt: int) -> None:
    """A transition at another step or attempt than the one that comes next, spelled so that it cannot be, or
    into CHECKPOINT; a retry's transition (`attempt` written, > 1) where it comes next passes."""
    step, attempt = rec["step"], rec.get("attempt", 1)
    if step != at_step or attempt != at_attempt or type(step) is not int or type(attempt) is not int:
        why = f"step {step!r}, attempt {attempt!r} where step {at_step}, attempt {at_attempt} comes next"
        raise _fail(path, n, "bad-transition", why, seq)
    if attempt == 1 and "attempt" in rec:  # one spelling: the first attempt leaves `attempt` out
        why = "attempt 1 written out (the first attempt omits it; 0.2.0 development builds wrote it)"
        raise _fail(path, n, "non-canonical", why, seq)
    if rec["to"] == S.CHECKPOINT:
        raise _fail(
            path, n, "bad-transition", "VERIFY -> CHECKPOINT is written as a checkpoint record, not a transition", seq
        )


def checkpoint_fields(path: str, n: int, seq: int, rec: dict[str, Any], allowed: frozenset[str]) -> None:
    """A checkpoint with more than its step: a clock, an agent, a fork's mark; anything else is refused."""
    if "verified" in rec:  # one spelling: the result it vouches for is fixed by where it stands
        why = "a checkpoint naming its result's seq (verified), as 0.2.0 development builds wrote"
        raise _fail(path, n, "non-canonical", why, seq)
    if not allowed.issuperset(rec):
        raise stray_field(path, n, seq, rec, allowed, "a checkpoint record")


def malformed_crossing(path: str, n: int, seq: int, rec: dict[str, Any], named: dict[str, Any]) -> TraceCorruption:
    """A crossing without a str boundary, a request and a str hash, or without exactly one of response and error."""
    if type(rec["boundary"]) is not str or ("request" not in rec and "request" not in named):
        return _fail(path, n, "malformed", "a crossing needs a str boundary, a request and a str hash", seq)
    if type(rec["hash"]) is not str:
        return _fail(path, n, "malformed", "a crossing needs a str boundary, a request and a str hash", seq)
    why = 'a crossing needs either a response or an error object {"type": str, "message": str}'
    return _fail(path, n, "malformed", why, seq)


def budget_problem(budget: Any) -> str | None:
    """What is wrong with a header's `budget` (FORMAT.md), or None: limits (`usd` a number, `tokens` and
    `model_calls` ints, each >= 0, one at least) and the `prices` the USD limit is counted at."""
    if not isinstance(budget, dict) or not budget or not set(budget) <= {"usd", "tokens", "model_calls", "prices"}:
        return "is not an object of usd, tokens, model_calls and prices"
    for k in ("tokens", "model_calls"):
        if k in budget and (type(budget[k]) is not int or budget[k] < 0):
            return f"has {k} {budget[k]!r}, not an int >= 0"
    if "usd" in budget and (type(budget["usd"]) not in (int, float) or not budget["usd"] >= 0):
        return f"has usd {budget['usd']!r}, not a number >= 0"
    if set(budget) == {"prices"} or ("usd" in budget and "prices" not in budget):
        return "has no limit, or a usd limit without prices"
    prices = budget.get("prices", {})
    keys = {"input", "output", "cached_input"}
    if not isinstance(prices, dict) or not all(
        isinstance(p, dict) and set(p) == keys and all(type(v) in (int, float) and v >= 0 for v in p.values())
        for p in prices.values()
    ):
        return "has prices that are not {model: {input, output, cached_input}} in USD per million tokens"
    return None


def error_ok(error: Any) -> bool:
    """Whether error is an `{"type": str, "message": str}` object, as every error field is.

    Nothing more, but a ToolTimeout's `timeout` (a number) and a MaxSteps' `max_steps` (an int).
    """
    if type(error) is not dict or type(error.get("type")) is not str or type(error.get("message")) is not str:
        return False
    if len(error) == 2:
        return True
    extra = _ERROR_EXTRA.get(error["type"])
    return len(error) == 3 and extra in error and type(error[extra]) in ((int, float) if extra == "timeout" else (int,))


def payload(rec: dict[str, Any], field: str) -> Any:
    """The record's field, or a BlobRef when it is stored in a blob (KeyError when it has neither)."""
    if field in rec:
        return rec[field]
    return BlobRef(**rec["blobs"][field])


def same_value(a: Any, b: Any) -> bool:
    """Whether two results are the same value, compared by type and value; either may be a blob not read."""
    if isinstance(a, BlobRef) or isinstance(b, BlobRef):
        return _blobs.value_digest(a) == _blobs.value_digest(b)
    return bool(orjson.dumps(a, option=SORTED) == orjson.dumps(b, option=SORTED))


def planned_call(rec: dict[str, Any]) -> bytes:
    """A call as planned (name, tool and args, canonical): a parallel call's spawn and each of its intents."""
    return orjson.dumps([rec.get("name"), rec.get("tool"), rec.get("args")], option=SORTED)


def contract_ok(c: Any) -> bool:
    """Whether c is an effect contract harness writes: {"effect": one of the three, "version": str or null}, and
    `"retry_rejected": true` on an unsafe tool only (`"no"` must not read as true)."""
    return (
        type(c) is dict
        and c.get("effect") in _EFFECTS
        and "version" in c
        and (c["version"] is None or type(c["version"]) is str)
        and c.keys() <= {"effect", "version", "retry_rejected"}
        and ("retry_rejected" not in c or (c["retry_rejected"] is True and c["effect"] == "unsafe"))
    )


# ---------------------------------------------------------------- the rarer kinds' own checks


def aside_problem(path: str, header: dict[str, Any], name: Any, named: set[str]) -> str | None:
    """Why a `set_aside` value cannot name a sibling of the trace that holds a torn tail; None if it can.

    named: the names set aside before in the trace, which it joins (each torn tail goes to a new file).
    """
    if type(name) is not str or not _ASIDE.fullmatch(name):
        return f"set_aside {name!r} is not the file name of a sibling `<trace>.torn-N` (no folder, no path)"
    if name in named:
        return f"set_aside {name!r} names a file an earlier record set a torn tail aside in: each goes to a new one"
    named.add(name)
    if "parent" in header:  # a rerun or fork repeats its recording's seam: the file is beside the recording
        return None
    if not os.path.isfile(os.path.join(os.path.dirname(path), name)):
        return (
            f"set_aside names {name!r}, which is not beside the trace: the torn bytes it kept were moved or "
            "deleted. Put the file back (its content is not checked), or keep traces with their .torn-N files"
        )
    return None


def header_problem(path: str, rec: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, why) when a header record cannot start a run; None when it can."""
    schema = rec.get("schema")
    if type(schema) is not int or schema != SCHEMA:
        return "schema", _schema_advice(path, schema)
    if type(rec.get("run_id")) is not str or "goal" not in rec:
        return "malformed", "a header without its str run_id and its goal"
    tools = rec.get("tools")
    if type(tools) is not dict or not all(contract_ok(c) for c in tools.values()):
        why = 'a header whose tools is not an object of {"effect": at-least-once|idempotent|unsafe, "version"}'
        return "malformed", why
    for name, c in tools.items():
        # `retry_rejected: true` on an unsafe tool only, and nothing else: "no" must not read as true
        if not c.keys() <= {"effect", "version", "retry_rejected"} or (
            "retry_rejected" in c and (c["retry_rejected"] is not True or c["effect"] != "unsafe")
        ):
            why = (
                f"a header whose contract for tool {name!r} is not one harness writes: {c!r:.200} (fields effect, "
                'version, and "retry_rejected": true on an unsafe tool only)'
            )
            return "malformed", why
    if "env" in rec and type(rec["env"]) is not dict:
        return "malformed", "a header whose env is not an object"
    if "redact" in rec and _redact_problem(rec["redact"]):
        why = (
            'a header whose redact is not {"rules": [str], "patterns": [[str, int]], "defaults": bool} '
            '(and "marker": str): a rerun reads these rules back'
        )
        return "malformed", why
    if ("parent" in rec and type(rec["parent"]) is not str) or ("branch" in rec and type(rec["branch"]) is not int):
        return "malformed", "a header whose parent is not a str or whose branch is not an int"
    if "branch" in rec and ("parent" not in rec or rec["branch"] < 2):
        why = (
            f"a fork's header with branch {rec['branch']!r} and {'no parent' if 'parent' not in rec else 'a parent'}: "
            "a fork names the run it came from (parent) and the seq it answered, after the header (2 or more)"
        )
        return "bad-lineage", why
    if "workflow" in rec and (type(rec["workflow"]) is not str or not rec["workflow"] or tools):
        why = "a workflow's header needs its name (a non-empty str) and tools {} (its calls carry their contracts)"
        return "malformed", why
    ts = rec.get("ts")
    if type(ts) is float and not _WALL[0] <= ts < _WALL[1]:
        return "malformed", f"a header whose ts {ts!r} is no wall-clock time (seconds since the epoch, years 1-9999)"
    return None


def _redact_problem(redact: Any) -> bool:
    """Whether a header's `redact` is not the rules object harness writes (which a rerun or fork reads back)."""
    return not (
        type(redact) is dict
        and redact.keys() - {"marker"} == {"rules", "patterns", "defaults"}
        and type(redact["rules"]) is list
        and all(type(r) is str for r in redact["rules"])
        and type(redact["patterns"]) is list
        and all(type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is int for p in redact["patterns"])
        and type(redact["defaults"]) is bool
        and type(redact.get("marker", "")) is str
    )


def _schema_advice(path: str, found: Any) -> str:
    if type(found) is int and found < SCHEMA:
        return (
            f"trace schema version {found}; this harness reads version {SCHEMA}. Run `harness migrate {path}` "
            "to upgrade it in place (a backup of the original is kept beside it)"
        )
    return f"trace schema version {found!r}; this harness reads version {SCHEMA} (a newer harness wrote it?)"


def _seal_mismatch(path: str, offset: int, rec: dict[str, Any], blobs: dict[str, Any], state: str) -> str | None:
    from .seal import content_hash, mismatch

    if type(rec.get("content_hash")) is not str or type(rec.get("digests")) is not list:
        return "a seal without its content_hash and digests"
    return mismatch(rec, content_hash(path, offset), blobs, state)
