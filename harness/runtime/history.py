"""Re-execution: what a workflow's trace already holds, served again while its function runs from the start.

A workflow resumes by running its function again from its first line.
`History.of(rep)` turns the trace (read by `replay()`, every check made)
into what the function did, in order: its crossings, its tool calls (each
with its contract and its result or error, the last one possibly still
open), the question it paused on, its artifacts. While the function runs
again, everything it does is matched with an item by what it is (the
crossing's kind and request, or the tool and its args, redacted as they
were written) among the items not served yet; each item is served at most
once, nothing served is written again, and the first thing the history
does not hold goes live and is appended to the same file.

Rules kept here:
- live only once the history is used up: something that matches no
  unserved item while some are left is a `ReplayDrift` naming the first
  unserved item's seq and the first path where they differ; so is a
  function that ends (returns or raises) with items left;
- items may be served out of their recorded order (tasks of
  `asyncio.gather` that start in another order than they did when the run
  was recorded: a nested gather starts its inner calls in the order the outer
  ones returned); in async code a crossing that matches nothing yields to
  its sibling tasks (up to `WAIT` seconds) before it is called a drift;
- a resume writes nothing until its first new record: `Deferred` holds the
  journal's first write back and writes the resume's own records (its
  `resume`, an `answer`) just before it, so a resume that drifts, is refused
  or pauses again leaves the file byte for byte as it was;
- `patched(change_id)`: True where the run is live (and a `patch` crossing
  records it) or its history's next item is that marker, False while the
  history holds something else there: an old run keeps its old path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._errors import HarnessError, ReplayDrift
from ..storage import blobs as _blobs
from ..trace import state as S
from ..trace.clock import MAIN
from ..trace.journal import Journal, canonical, check_value
from ..trace.reader import Crossing, Replay, replay
from .boundary import Match, Session, differences
from .context import _current
from .timers import replaying

T = TypeVar("T")
WAIT = 1.0  # seconds an async crossing that matches nothing waits for its sibling tasks before it is a drift
CROSSING, STEP, ARTIFACT = "crossing", "tool call", "artifact"  # what an item is: a drift names it


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
    """Something the function did, as its trace has it: matched by `space`, `kind` and `request` (its canonical
    JSON: equal by type and value, as a request hash compares them)."""

    __slots__ = ("key", "kind", "rec", "request", "seq", "served", "space", "step")

    def __init__(self, space: str, kind: str, request: Any, seq: int):
        self.space, self.kind, self.request, self.seq = space, kind, request, seq
        self.key = canonical(request)
        self.served = False
        self.rec: dict[str, Any] | None = None  # a crossing's own record, to serve
        self.step: Step | None = None  # a tool call's

    @property
    def asked(self) -> bool:
        """Whether this is the question the run paused on (asked live again when the function gets there)."""
        return self.space == CROSSING and self.rec is None

    @property
    def crossing(self) -> Crossing | None:
        """The crossing to serve (None for a tool call, or a question the run paused on: asked live)."""
        rec = self.rec
        if rec is None:
            return None
        return Crossing(rec["seq"], rec["boundary"], rec["request"], rec.get("response"), rec.get("error"), rec["seq"])


class History:
    """The items of a trace, per agent in order, and which of them the re-executed function has used."""

    def __init__(self, path: str, items: list[Item], spawned: int | None = None):
        self.path = path
        self.items: dict[str, list[Item]] = {MAIN: items} if items else {}
        self.first: dict[str, int] = {}  # per agent: the index of its first unserved item
        self.spawned = spawned  # the seq of the first spawn record, if the run spawned agents

    @classmethod
    def read(cls, path: str) -> tuple[Replay, History]:
        """replay() of the trace at path, and its history, in one pass."""
        items: list[Item] = []
        step: Step | None = None
        spawned: int | None = None

        def take(line: bytes, rec: dict[str, Any]) -> None:
            nonlocal step, spawned
            kind = rec["kind"]
            if kind in ("spawn", "exit", "join"):
                spawned = spawned or rec["seq"]
                return
            if "blobs" in rec:
                rec = _blobs.inline(path, rec)
            if kind == "crossing":
                item = Item(CROSSING, rec["boundary"], rec["request"], rec["seq"])
                item.rec = rec
                items.append(item)
            elif kind == "artifact":
                items.append(Item(ARTIFACT, rec["name"], {"name": rec["name"], "sha256": rec["sha256"]}, rec["seq"]))
            elif kind == "transition":
                src, dst = rec["from"], rec["to"]
                if src == S.PLAN and dst == S.PAUSED:  # interrupt() asked, not answered (yet): asked live again
                    items.append(Item(CROSSING, "interrupt", rec["question"], rec["seq"]))
                elif src == S.PAUSED and dst == S.PLAN and items and items[-1].asked:
                    items.pop()  # answered: the interrupt crossing that follows delivers the answer
                elif dst == S.ACT and src == S.PLAN:
                    step = Step(rec)
                    item = Item(STEP, rec["tool"], rec["args"], rec["seq"])
                    item.step = step
                    items.append(item)
                elif step is not None:  # (INIT -> PLAN, a question asked in PLAN and its answer, the end: none)
                    _moved(step, rec)
                    if step.state == "failed":
                        step = None
            elif kind == "checkpoint" and step is not None:
                step.state, step = "done", None
            elif kind == "reconcile" and step is not None:
                step.reconcile = rec

        rep = replay(path, on_record=take)
        return rep, cls(path, items, spawned)

    def check(self) -> None:
        """HarnessError when the function cannot be run again over this history."""
        if self.spawned is not None:
            raise HarnessError(
                f"{self.path}: a workflow run that spawned agents (seq {self.spawned}) cannot be resumed yet: "
                "nothing was written. Rerun it (harness.rerun), or start it again"
            )

    def next(self, agent: str) -> Item | None:
        """The first item of agent's history not served yet."""
        items = self.items.get(agent)
        if not items:
            return None
        i = self.first.get(agent, 0)
        while i < len(items) and items[i].served:
            i += 1
        self.first[agent] = i
        return items[i] if i < len(items) else None

    def find(self, agent: str, space: str, kind: str, request: Any, match: Match | None = None) -> Item | None:
        """The first unserved item of agent that is what request is (None when none is), without taking it.

        Usually the first unserved item itself: the scan goes further only for items served out of order.
        """
        items = self.items.get(agent)
        if not items:
            return None
        i, n = self.first.get(agent, 0), len(items)
        key = canonical(request if match is None else match(request))
        while i < n:
            item = items[i]
            i += 1
            if item.served or item.space != space or item.kind != kind:
                continue
            if (item.key if match is None else canonical(match(item.request))) == key:
                return item
        return None

    def take(self, agent: str, space: str, kind: str, request: Any, match: Match | None = None) -> Item | None:
        """The item that answers request, now served; None once agent's history is used up (go live).

        ReplayDrift when items are left and none is this request.
        """
        item = self.find(agent, space, kind, request, match)
        if item is not None:
            item.served = True
            self.next(agent)  # (moves past it when it was the first)
            return item
        first = self.next(agent)
        if first is None:
            return None
        raise self.drift(first, space, kind, request, match)

    def drift(self, first: Item, space: str, kind: str, request: Any, match: Match | None = None) -> ReplayDrift:
        """The error for a re-executed function that did `space kind request` where its history has `first`."""
        if (first.space, first.kind) == (space, kind):
            was, now = (first.request, request) if match is None else (match(first.request), match(request))
            fields = differences(was, now)
            if space == STEP:
                fields = {f"args.{k}" if k != "request" else "args": v for k, v in fields.items()}
        else:
            fields = {"kind": (f"{first.space} {first.kind}", f"{space} {kind}")}
        shown = "; ".join(f"{k}: recorded {a!r:.200}, now {b!r:.200}" for k, (a, b) in fields.items())
        return ReplayDrift(
            f"{self.path}: seq {first.seq}: the re-executed workflow made a {space} {kind!r} where its trace holds "
            f"the {first.space} {first.kind!r} (the code changed?): {shown}. Nothing was written; resume with the "
            "code that made the trace, or mark the change with harness.patched()",
            seq=first.seq,
            line=first.seq,
            fields=fields,
        )

    def left(self, agent: str = MAIN) -> ReplayDrift | None:
        """The error for a function that ended while its history still holds items (None when it holds none)."""
        first = self.next(agent)
        if first is None:
            return None
        return ReplayDrift(
            f"{self.path}: seq {first.seq}: the re-executed workflow ended, but its trace goes on with the "
            f"{first.space} {first.kind!r} (the code changed?). Nothing was written; resume with the code that made "
            "the trace",
            seq=first.seq,
            line=first.seq,
            fields={"kind": (f"{first.space} {first.kind}", None)},
        )


class Serving(Session):
    """A session that re-executes a workflow: its history is served first (the kinds add what comes after)."""

    history: History

    async def wait_turn(self, space: str, kind: str, shown: Any, match: Match | None = None) -> None:
        """Wait (WAIT seconds at most) until `shown` (a request as written) matches an unserved item, or the
        history is used up.

        Sibling tasks of asyncio.gather may take the items before this one:
        each yields to the loop between its turns.
        """
        agent = self.agents.current()
        history = self.history
        await turn(lambda: history.next(agent) is None or history.find(agent, space, kind, shown, match) is not None)

    def artifact_served(self, name: str, sha256: str) -> bool:
        return self.history.take(self.agents.current(), ARTIFACT, name, {"name": name, "sha256": sha256}) is not None

    async def across(self, kind: str, request: Any, acall: Callable[[], Awaitable[T]], match: Match | None = None) -> T:
        if not self.nested:
            check_value("request", request)
            await self.wait_turn(CROSSING, kind, self.redact(request), match)
        return await super().across(kind, request, acall, match)


class Resumed(Serving):
    """A resumed workflow's session: its history served first (nothing written), then live."""

    def __init__(self, journal: Journal, history: History, **kwargs: Any):
        super().__init__(journal, **kwargs)
        self.history = history

    def serve(self, kind: str, request: Any, match: Match | None = None) -> Crossing | None:
        item = self.history.take(self.agents.current(), CROSSING, kind, request, match)
        return item.crossing if item is not None else None  # (a question the run paused on: asked live)


# the journal's methods that write (or, for share, make what follows carry clocks: the resume record goes first)
async def turn(ready: Callable[[], bool]) -> None:
    """Yield to sibling tasks until ready() (WAIT seconds at most: then the caller's own check says what drifted).

    Served siblings take no time: a few turns of the loop let them all go; after that, a short poll.
    """
    spins, deadline = 0, None
    while not ready():
        if spins < 100:
            spins += 1
            await asyncio.sleep(0)
            continue
        deadline = deadline or time.monotonic() + WAIT
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.01)


_WRITES = frozenset({"append", "append_many", "finish", "put_blob", "share"})


class Deferred:
    """A journal whose first write is preceded by `before()`: what a resume writes, written only if it goes on.

    Every attribute is the journal's; the first call of a writing method runs
    `before()` (set aside a torn tail, the `resume` record, an `answer`) first.
    """

    __slots__ = ("_before", "_journal")

    def __init__(self, journal: Journal, before: Callable[[], None]):
        self._journal = journal
        self._before: Callable[[], None] | None = before

    @property
    def live(self) -> bool:
        """Whether the resume has written its records (the run appended something new)."""
        return self._before is None

    def __getattr__(self, name: str) -> Any:
        if name in _WRITES and self._before is not None:
            before, self._before = self._before, None
            before()
        return getattr(self._journal, name)


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
    session = _current.get()
    if session is None or session.nested:  # outside a run, or inside a call: the code as it is now
        return True
    known = session.patches.get(change_id)
    if known is not None:
        return known
    history: History | None = getattr(session, "history", None)
    agent = session.agents.current()
    nxt: Any = history.next(agent) if history is not None else None
    if nxt is None:
        queue = session.queue()
        nxt = queue[0] if queue else None
    if nxt is None:
        taken = not replaying(session)  # a rerun past its recording: the recording never got here
    else:
        taken = getattr(nxt, "space", CROSSING) == CROSSING and nxt.kind == "patch" and nxt.request == change_id
    if taken:
        session.cross("patch", change_id, _true)
    session.patches[change_id] = taken
    return taken


def _true() -> bool:
    return True
