"""Re-execution: what a workflow's trace holds beyond its crossings, served again while its function runs again.

A workflow resumes by running its function again from its first line. Its
crossings are served the way every resume serves them (boundary.py: by
what they are, each at most once, a ReplayDrift for one that matches none
while its agent has recorded ones left, `settled()` before the run writes
its next state), and the resume's own records (`resume`, an `answer`) are
owed to the journal (`Journal.owe()`): written with the run's first new
record, or never. This module adds what only a re-executed function does:

- its tool calls: `Recorded.read()` turns the trace into its `Step`s (each
  with its contract and its result or error; the last one may still be
  open: ACT, VERIFY, PAUSED, reconciled or not) and its artifacts, the
  `held` items; `Serving.take()` serves one by what it is (the tool and
  its args, redacted as they were written; an artifact's name and bytes)
  at most once, whatever order the function asks them in;
- one history: a crossing goes live only once the held items are used up
  too, and a held item left when the function writes its next state is a
  ReplayDrift, as a crossing left is (`unsettled`);
- in async code a call or crossing that matches nothing while items are
  left waits for its sibling tasks to take theirs (`HOLD_QUIET` seconds
  with nothing served: then it is the drift), as boundary.py's crossings do;
- `patched(change_id)`: True where the run is live (and a `patch` crossing
  records it) or the history's next item of this agent is that marker,
  False while the history holds something else there: an old run keeps its
  old path.

Guarantees: a served call or artifact writes nothing; a resume that
drifts, is refused or pauses again leaves the file byte for byte as it was
(the journal still owes its seam then).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any

from .._errors import HarnessError, ReplayDrift
from ..storage import blobs as _blobs
from ..trace import state as S
from ..trace.clock import MAIN
from ..trace.journal import Journal
from ..trace.line import canonical
from ..trace.reader import Crossing, Replay, replay
from ..trace.redact import DEFAULT, Redaction
from ..trace.tasks import TASK
from ..trace.vault import SERVED, Vault
from .boundary import ANY, HOLD_QUIET, Match, Session, _Hold, _may_hold, differences, marked, patiently
from .context import current_run
from .tasks import current as current_task
from .tasks import unordered
from .timers import replaying

STEP, ARTIFACT = "tool call", "artifact"  # what a held item is: a drift names it
SPAWN, EXIT, JOIN = "spawn", "exit", "join"  # an agent's life: its parent's spawn, its own exit, the join
_OWN = frozenset({"seq", "kind", "ts", "crc", "vc", "agent"})  # a record's fields that are not what it says


class Step:
    """One tool call of the history: its intent, and where it got to.

    `state`: "done" (checkpointed), "failed" (the tool raised: ACT -> PLAN or
    FAILED, `error` set), or, for the last call of a trace that stopped in
    it, the run's state there: ACT (in flight), VERIFY (result recorded, no
    checkpoint) or PAUSED (uncertain, or asking a question: `question`), with
    the operator's `reconcile` record when there is one.
    """

    __slots__ = ("contract", "error", "intent", "question", "reconcile", "result", "state")

    def __init__(self, intent: dict[str, Any]):
        self.intent = intent
        self.contract: dict[str, Any] = intent.get("contract") or {}
        self.state = S.ACT
        self.result: Any = None
        self.error: dict[str, Any] | None = None
        self.reconcile: dict[str, Any] | None = None
        self.question: Any = None

    @property
    def over(self) -> bool:
        """Whether the call ended in the trace (its result checkpointed, or its error recorded)."""
        return self.state in ("done", "failed")


def _moved(step: Step, rec: dict[str, Any]) -> None:
    """A transition of the tool call in progress."""
    dst = rec["to"]
    step.state = dst
    if dst == S.VERIFY and "result" in rec:
        step.result = rec["result"]
    elif dst == S.PAUSED:
        step.question = rec.get("question")
    elif dst in (S.PLAN, S.FAILED):  # the tool raised: the call is over
        step.state, step.error = "failed", rec["error"]
    elif dst == S.ACT:  # reconciled as not happened, or the question answered: it is made again
        step.reconcile = step.question = None


class Item:
    """A tool call, an artifact or an agent's spawn, exit or join of the history, matched by `space`, `kind`
    and the canonical JSON of `request` among its agent's (a call: made by the same `task`); `vc` is its
    record's clock."""

    __slots__ = ("key", "kind", "request", "seq", "space", "step", "task", "vc")

    def __init__(
        self,
        space: str,
        kind: str,
        request: Any,
        seq: int,
        step: Step | None = None,
        vc: dict[str, int] | None = None,
        task: str | None = None,
    ):
        self.space, self.kind, self.request, self.seq, self.step = space, kind, request, seq, step
        self.vc = vc or {MAIN: seq}  # (before the first spawn a record's clock is its seq)
        self.key = canonical(request)
        self.task = task


class Recorded:
    """What a workflow's trace says its function did: its crossings, and its held items (calls, artifacts and
    the spawns, exits and joins of its agents), each agent's in its own order."""

    def __init__(self, path: str):
        self.path = path
        self.crossings: list[Crossing] = []
        self.held: dict[str, list[Item]] = {}
        self.tagged = False  # whether a call of the trace names its task (see Session.whose)
        # the first served value whose secret could not be read back (vault.py): raised by whoever goes on to
        # serve (a finished run is reported as it is, without the key)
        self.unrevealed: HarnessError | None = None

    @classmethod
    def read(cls, path: str) -> tuple[Replay, Recorded]:
        """replay() of the trace at path, and what it recorded, in one pass; each served value (a call's result,
        a crossing's response) with its secrets kept beside the trace back in place."""
        out = cls(path)
        step: Step | None = None
        vault: Vault | None = None

        def take(line: bytes, rec: dict[str, Any]) -> None:
            nonlocal step, vault
            kind, seq, agent = rec["kind"], rec["seq"], rec.get("agent", MAIN)
            vc = rec.get("vc") or {MAIN: seq}
            if kind in (SPAWN, EXIT, JOIN):
                said = {k: v for k, v in rec.items() if k not in _OWN}
                out.held.setdefault(agent, []).append(Item(kind, said.get("child", agent), said, seq, vc=vc))
                return
            # a served value whose line (or blob) holds the marker may hold kept secrets: put back (vault.py)
            secret = vault is not None and kind in SERVED and ("blobs" in rec or vault.needle in line)
            if "blobs" in rec:
                rec = _blobs.inline(path, rec)
            if kind == "header":
                vault = Vault(path, Redaction.from_header(rec.get("redact"), path).marker)
            elif secret and vault is not None and out.unrevealed is None:
                try:
                    rec = vault.revealed(rec)
                except HarnessError as e:
                    out.unrevealed = e
            if kind == "crossing":
                response, error, task = rec.get("response"), rec.get("error"), rec.get(TASK)
                out.crossings.append(
                    Crossing(seq, rec["boundary"], rec["request"], response, error, seq, agent, vc, task)
                )
                out.tagged = out.tagged or task is not None
            elif kind == "artifact":
                name = rec["name"]
                item = Item(ARTIFACT, name, {"name": name, "sha256": rec["sha256"]}, seq, vc=vc)
                out.held.setdefault(agent, []).append(item)
            elif kind == "transition":
                if rec["to"] == S.ACT and rec["from"] == S.PLAN:
                    step, task = Step(rec), rec.get(TASK)
                    out.held.setdefault(MAIN, []).append(Item(STEP, rec["tool"], rec["args"], seq, step, vc, task))
                    out.tagged = out.tagged or task is not None
                elif step is not None:  # (INIT -> PLAN, a question asked in PLAN and its answer, the end: none)
                    _moved(step, rec)
                    if step.over:
                        step = None
            elif kind == "checkpoint" and step is not None:
                step.state, step = "done", None
            elif kind == "reconcile" and step is not None:
                step.reconcile = rec

        rep = replay(path, on_record=take)
        return rep, out


class Serving(Session):
    """A session that re-executes a workflow: its held items are served by what they are (see the docstring)."""

    held: dict[str, deque[Item]]
    path: str

    def hold(self, recorded: Recorded) -> None:
        """Serve recorded's calls, artifacts and agents' lives (its crossings are the Session's own)."""
        self.held = {agent: deque(items) for agent, items in recorded.held.items()}
        self.path = recorded.path
        self.checking = True
        self.tagged = self.tagged or recorded.tagged
        self.naming = self.tagged or not (self.recorded or any(recorded.held.values()))

    def mine(self) -> deque[Item]:
        """The current agent's held items not served yet."""
        name = self.agent().name
        held = self.held.get(name)
        if held is None:
            held = self.held[name] = deque()
        return held

    def take_held(self, space: str, kind: str, request: Any) -> Item | None:
        """The current agent's held item that is `space kind request` (a request as written: redacted), now
        served; None once its held items are used up (go live). ReplayDrift when items are left and none is
        this one (_Hold in async code that may still wait for its siblings)."""
        held = self.mine()
        if not held:
            return None
        key = canonical(request)
        task = self.whose_call(held, kind, request, key) if space == STEP else ANY  # (only calls name their task)
        for i, item in enumerate(held):
            if item.space == space and item.kind == kind and item.key == key and (task is ANY or item.task == task):
                return self._served(held, i)
        if task is not ANY and not marked(self.redact.marker, request):  # (equal args, none redacted: the same
            for i, item in enumerate(held):  # call, whichever task makes it; see Session.whose)
                if item.space == space and item.kind == kind and item.key == key:
                    return self._served(held, i)
        if _may_hold.get():
            raise _Hold
        drift = self.drift_from(held[0], space, kind, request)
        self.failure = self.failure or drift
        raise drift

    def _served(self, held: deque[Item], i: int) -> Item:
        item = held[i]
        del held[i]
        self.served += 1
        self.reached(item.vc)
        return item

    def whose_call(self, held: deque[Item], kind: str, request: Any, key: bytes) -> str | object | None:
        """Session.whose() for a tool call: the task whose recorded calls may answer it (ANY in a trace that names
        no task, after refusing one that matches only as redacted; and in any, a call of a task unordered() names)."""
        task = current_task()
        if (unordered() if self.tagged else task is not None) and marked(self.redact.marker, request):
            alike = [item.seq for item in held if item.space == STEP and item.kind == kind and item.key == key]
            if alike:
                raise self.ambiguous(alike, f"call of tool {kind!r}", str(task), self.agent().name)
        return task if self.tagged else ANY

    def reached(self, vc: dict[str, int]) -> None:
        """The current agent re-executed its recorded event with clock vc (a resume's clocks follow it)."""

    async def atake_held(self, space: str, kind: str, request: Any) -> Item | None:
        """take_held() for async code: what matches nothing while items are left waits for its siblings to take theirs
        (see patiently)."""
        return await patiently(self, lambda: self.take_held(space, kind, request))

    def event_served(self, space: str, name: str, fields: dict[str, Any]) -> bool:
        """Whether the current agent's spawn, exit or join (`fields` as its record holds them) is in the history:
        served (True), or live (False: the agent's part of the history is used up). ReplayDrift otherwise."""
        if "error" in fields:  # (an exit's error is written redacted)
            fields = {**fields, "error": self.redact(fields["error"])}
        return self.take_held(space, name, fields) is not None

    def drift_from(self, first: Item, space: str, kind: str, request: Any) -> ReplayDrift:
        """The error for a re-executed function that did `space kind request` where its history has `first`."""
        if (first.space, first.kind) == (space, kind):
            fields = differences(first.request, request)
            if space == STEP:
                fields = {f"args.{k}" if k != "request" else "args": v for k, v in fields.items()}
        else:
            fields = {"kind": (f"{first.space} {first.kind}", f"{space} {kind}")}
        shown = "; ".join(f"{k}: recorded {a!r:.200}, now {b!r:.200}" for k, (a, b) in fields.items())
        agent = self.agent().name
        who = "" if agent == MAIN else f" (agent {agent})"
        return ReplayDrift(
            f"{self.path}: seq {first.seq}{who}: the re-executed workflow made a {space} {kind!r} where its trace "
            f"holds the {first.space} {first.kind!r}: {shown}. {self._changed()}, or mark the change with "
            "harness.patched()",
            seq=first.seq,
            line=first.seq,
            fields=fields,
            agent=agent,
        )

    def settled(self) -> None:
        """Session.settled(), with held items: main checks itself first, then every agent not running now."""
        if self.failure is not None:
            raise self.failure
        me = self.agent().name
        names = [me]
        if me == MAIN:
            names += [n for n in {**self.recorded, **self.held} if n != MAIN and n not in self.agents.live]
        for name in names:
            drift = self.unsettled(name)
            if drift is not None:
                raise drift

    def unsettled(self, agent: str) -> ReplayDrift | None:
        """A crossing left (the Session's rule), else a held item of agent the function went past."""
        drift = super().unsettled(agent)
        held = self.held.get(agent)
        if drift is not None or not held:
            return drift
        first = held[0]
        who = "" if agent == MAIN else f" (agent {agent})"
        drift = ReplayDrift(
            f"{self.path}: seq {first.seq}{who}: the re-executed workflow went past (or ended before) the "
            f"{first.space} {first.kind!r} its trace holds here. {self._changed()}",
            seq=first.seq,
            line=first.seq,
            fields={"kind": (f"{first.space} {first.kind}", None)},
            agent=agent,
        )
        self.failure = self.failure or drift
        return drift

    def upcoming(self) -> Crossing | Item | None:
        """What the history holds next for the current agent: its next crossing or held item, whichever the
        trace has first (patched() looks at it)."""
        queue, held = self.queue(), self.mine()
        nxt: Crossing | Item | None = queue[0] if queue else None
        if held and (nxt is None or held[0].seq < nxt.seq):
            return held[0]
        return nxt

    def artifact_served(self, name: str, sha256: str) -> bool:
        return self.take_held(ARTIFACT, name, {"name": name, "sha256": sha256}) is not None


class Resumed(Serving):
    """A resumed workflow's session: the trace's crossings and held items served first (nothing written), then
    live. `asked`: the question the run paused on, asked live again (with its answer) when the function gets
    there; a different question there is a drift.

    Clocks (a run with agents): each agent's clock follows the records it is
    served (the maximum of their clocks), so its first live record takes the
    clock the rules give after its last recorded one; main's first live
    record also follows the resume's own records (`Agents.seam`).
    """

    def __init__(self, journal: Journal, recorded: Recorded, *, redact: Redaction = DEFAULT, asked: Any = None):
        super().__init__(journal, recorded.crossings, redact=redact)
        self.hold(recorded)
        self.asked = asked

    def reached(self, vc: dict[str, int]) -> None:
        agent = self.agent()
        # An agent's records are its own events: the one with the higher own count covers every clock before it,
        # so the maximum is the latest one served (one served before an earlier one, tasks of a gather, changes
        # nothing). Records hold their keys sorted; an agent's clock is replaced, never changed in place.
        if vc.get(agent.name, 0) > agent.vc.get(agent.name, 0):
            agent.vc = vc

    def event_served(self, space: str, name: str, fields: dict[str, Any]) -> bool:
        if super().event_served(space, name, fields):
            return True
        queue = self.recorded.get(self.agent().name)
        if queue:  # it goes live where its recording still holds crossings: one it went past
            raise self.missed(queue[0])
        self.go_live()
        return False

    def take_held(self, space: str, kind: str, request: Any) -> Item | None:
        item = super().take_held(space, kind, request)
        if item is None:
            self.go_live()
        return item

    def go_live(self) -> None:
        """Before the current agent writes what its history does not hold: the failure an agent met, raised
        (a drift anywhere stops the run); and before the resume's first record, a wait for the other agents
        of a thread to serve their histories first, so that one of them that drifts finds nothing written.

        It waits while another agent has recorded items left and runs (not waiting in receive() or for a
        thread to end, and started), HOLD_QUIET seconds at most with none served. Agents that are tasks
        share this thread's loop: no wait there (a drift found after another task went live keeps what
        was written, a valid trace; the drift says so).
        """
        if self.failure is not None:
            raise self.failure
        if self.journal is None or not self.journal.owes or _on_a_loop():
            return
        me = self.agent().name
        served, since = self.served, time.monotonic()
        while self._busy(me) and time.monotonic() - since < HOLD_QUIET:
            time.sleep(0.002)
            if self.failure is not None:
                raise self.failure
            if self.served != served:
                served, since = self.served, time.monotonic()
        if self.failure is not None:
            raise self.failure

    def _busy(self, me: str) -> bool:
        """Whether an agent other than me may still serve recorded items (see go_live)."""
        agents = self.agents
        for name in {*self.recorded, *self.held}:
            if name == me or not (self.recorded.get(name) or self.held.get(name)):
                continue
            running = name == MAIN or (name in agents.live and name not in agents.ended)
            if running and name not in agents.blocked and name not in agents.joining:
                return True
        return False

    async def atake_held(self, space: str, kind: str, request: Any) -> Item | None:
        """Serving.atake_held(); a call it does not serve whole (made live, or gone on with) first waits for the
        crossings its siblings still have to take: what it writes comes after them."""
        item = await super().atake_held(space, kind, request)
        if item is None or (item.step is not None and not item.step.over):
            await patiently(self, self._crossed)
        return item

    def _crossed(self) -> None:
        """_Hold while the main agent's crossings are not all served (once quiet, settled() says what is left)."""
        if self.recorded.get(MAIN) and _may_hold.get():
            raise _Hold

    def serve(self, kind: str, request: Any, match: Match | None = None) -> Crossing | None:
        rec = super().serve(kind, request, match)
        if rec is not None:
            self.reached(rec.vc)
            return rec
        held = self.mine()
        if held:  # the crossings are used up, the held items are not: a drift (or a wait for siblings)
            first = held[0]
            if _may_hold.get():
                raise _Hold
            drift = self.drift_from(first, "crossing", kind, request)
            self.failure = self.failure or drift
            raise drift
        if self.asked is not None and kind == "interrupt" and self.agent().name == MAIN:  # asked again
            asked, self.asked = self.asked, None
            if canonical(asked["question"]) != canonical(request):
                fields = differences(asked["question"], request)
                drift = ReplayDrift(
                    f"{self.path}: seq {asked['seq']}: the re-executed workflow asked another question than the one "
                    f"its run paused on ({fields}). {self._changed()}",
                    seq=asked["seq"],
                    line=asked["seq"],
                    fields=fields,
                )
                self.failure = self.failure or drift
                raise drift
        self.go_live()
        return None


def _on_a_loop() -> bool:
    """Whether this thread runs an event loop (its agents are tasks: a blocking wait would stop them)."""
    asyncio = sys.modules.get("asyncio")  # not imported: no loop runs (a sync run never imports it)
    if asyncio is None:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def patched(change_id: str) -> bool:
    """Whether this run takes the new code path of a change: `if harness.patched("id"): new else: old`.

    Live (the recording of this agent has run out, or no run at all): True,
    and a `patch` crossing records it. Re-executing a recording whose next
    item is that marker: True. Re-executing a recording that holds something
    else there (a run made before the change): False, and nothing is
    recorded. Asked again in the same run, it answers the same.
    """
    if type(change_id) is not str or not change_id:
        raise HarnessError(f"harness.patched() needs a non-empty str change id, not {change_id!r}")
    session: Session | None = current_run()
    if session is None or session.nested:  # outside a run, or inside a call: the code as it is now
        return True
    known = session.patches.get(change_id)
    if known is not None:
        return known
    if isinstance(session, Serving):
        nxt = session.upcoming()
    else:
        queue = session.queue()
        nxt = queue[0] if queue else None
    if nxt is None:
        taken = not replaying(session)  # a rerun past its recording: the recording never got here
    else:
        taken = isinstance(nxt, Crossing) and nxt.kind == "patch" and nxt.request == change_id
    if taken:
        session.cross("patch", change_id, _true)
    session.patches[change_id] = taken
    return taken


def _true() -> bool:
    return True
