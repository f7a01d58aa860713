"""Compare two traces after normalization, and say what moved.

How it aligns: the common prefix and suffix are skipped first, read from
both ends of the files (two lines whose bytes agree once seq, ts and crc are
cut off are equal unparsed), so two long traces that differ in one place
cost one linear pass, and only the middle is ever held in memory. Each
record of the middle is tagged with its step's identity (the step number,
name and tool of its intent; a model call made while planning belongs to
the step being planned), and only records with the same identity can match
or pair: a run that took another path reads as steps removed and inserted.
The middle is aligned on identity and canonical record bytes with patience diff
(records unique on both sides anchor the alignment, recursively); a stretch
with no such record is aligned by difflib when short, by Myers' shortest edit
script when long and nearly equal (repeated records shifted by one), and is
otherwise reported whole. Unmatched stretches facing each other are
then paired by identity and shape (kind, from, to, step, boundary): a paired record is
"changed", with dotted field paths and old and new values; the rest are
"inserted" or "removed". An inserted retry is therefore two inserted records
(and the attempt numbers it moves), never a cascade of changes to the end. A
call (a model, tool or other crossing) removed in one place and inserted
equal in another is one call "moved". What is compared is the behavior view
(normalize.py) unless the rules say "raw".

`Diff.as_json()` is a documented contract (`harness diff --format json`):
{"equal", "first": {seq_a, seq_b, line_a, line_b, kind, from, to, step,
attempt, changes: [{field, old, new}]} or null, "changed": [same shape],
"inserted": [...], "removed": [...], "moved": [...], "notes": [str]} where
inserted and removed entries are {seq, line, kind, from, to, step, attempt,
record}, moved ones {seq_a, seq_b, line_a, line_b, kind, ..., record}, and
notes say what to know first (a golden of an older format). For a first divergence
that is an insertion, seq_a and line_a are null and changes is empty (a
removal: seq_b and line_b). An absent field is null on its side.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._errors import internal
from ..trace.reader import attempt_of
from .normalize import Item, Loaded, Rules, Source, compact, describe_record, normalize_record, quick, raw_golden, view

_SMALL = 250_000  # product of stretch lengths up to which difflib aligns an anchorless stretch
_EDITS = 300  # beyond it, Myers gives up on a long anchorless stretch (its records are then all reported)
_SHOW = 60  # characters of a value shown in text (around the first difference when it is longer)
WEB_WIDTH = 600  # characters of a value the viewer's diff page shows (around the first difference)
_MIDDLE = 4000  # characters of a changed middle compared word by word; a longer one is marked whole
_WORD = re.compile(r"\w+|\s+|[^\w\s]")  # what the web diff compares: words, runs of spaces, any other character


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()  # the value of a field a record does not have


@dataclass(frozen=True, slots=True)
class Change:
    """One field that differs: `field` is a dotted path such as `result.value` or `args.items[2]`."""

    field: str
    old: Any = dataclasses.field(hash=False)
    new: Any = dataclasses.field(hash=False)


@dataclass(frozen=True, slots=True)
class Moved:
    """A record that differs: op is "changed", "inserted" (only in b), "removed" (only in a) or "moved" (equal
    records at other places: it was at seq_a, it is at seq_b)."""

    op: str
    kind: str | None
    from_: str | None
    to: str | None
    step: int | None
    attempt: int | None
    seq_a: int | None
    seq_b: int | None
    line_a: int | None
    line_b: int | None
    changes: tuple[Change, ...] = ()
    record: dict[str, Any] | None = field(default=None, hash=False)  # the record (b's when changed)

    def as_json(self) -> dict[str, Any]:
        where = {"kind": self.kind, "from": self.from_, "to": self.to, "step": self.step, "attempt": self.attempt}
        if self.op == "inserted":
            return {"seq": self.seq_b, "line": self.line_b, **where, "record": self.record}
        if self.op == "removed":
            return {"seq": self.seq_a, "line": self.line_a, **where, "record": self.record}
        if self.op == "moved":
            return {
                "seq_a": self.seq_a, "seq_b": self.seq_b, "line_a": self.line_a, "line_b": self.line_b, **where,
                "record": self.record,
            }  # fmt: skip
        return {
            "seq_a": self.seq_a, "seq_b": self.seq_b, "line_a": self.line_a, "line_b": self.line_b, **where,
            "changes": [{"field": c.field, "old": _plain(c.old), "new": _plain(c.new)} for c in self.changes],
        }  # fmt: skip

    def first_json(self) -> dict[str, Any]:
        """This difference in the shape of `first`, whatever its op."""
        return {
            "seq_a": self.seq_a, "seq_b": self.seq_b, "line_a": self.line_a, "line_b": self.line_b,
            "kind": self.kind, "from": self.from_, "to": self.to, "step": self.step, "attempt": self.attempt,
            "changes": [{"field": c.field, "old": _plain(c.old), "new": _plain(c.new)} for c in self.changes],
        }  # fmt: skip

    def describe(self) -> str:
        """`transition ACT -> VERIFY, step 1, attempt 2` and the like."""
        return describe_record(self.record or {"kind": self.kind})


@dataclass(frozen=True, slots=True)
class Diff:
    """What differs between trace a and trace b, in the order it appears."""

    a: str
    b: str
    records_a: int
    records_b: int
    moved: tuple[Moved, ...]
    notes: tuple[str, ...] = ()  # what to know first (a golden of an older format: how to re-record it)

    @property
    def equal(self) -> bool:
        return not self.moved

    @property
    def first(self) -> Moved | None:
        return self.moved[0] if self.moved else None

    @property
    def changed(self) -> tuple[Moved, ...]:
        return tuple(m for m in self.moved if m.op == "changed")

    @property
    def inserted(self) -> tuple[Moved, ...]:
        return tuple(m for m in self.moved if m.op == "inserted")

    @property
    def removed(self) -> tuple[Moved, ...]:
        return tuple(m for m in self.moved if m.op == "removed")

    @property
    def relocated(self) -> tuple[Moved, ...]:
        """Records found on both sides, at another place (op "moved")."""
        return tuple(m for m in self.moved if m.op == "moved")

    def as_json(self) -> dict[str, Any]:
        first = self.first
        return {
            "equal": self.equal,
            "first": first.first_json() if first else None,
            "changed": [m.as_json() for m in self.changed],
            "inserted": [m.as_json() for m in self.inserted],
            "removed": [m.as_json() for m in self.removed],
            "moved": [m.as_json() for m in self.relocated],
            "notes": list(self.notes),
        }

    def counts(self) -> str:
        moved = f", {len(self.relocated)} moved" if self.relocated else ""
        return f"{len(self.changed)} changed, {len(self.inserted)} inserted, {len(self.removed)} removed{moved}"

    def headline(self, *, a: str = "a", b: str = "b") -> str:
        """One line that names the first record that moved, in b's seq numbers when it has one."""
        first = self.first
        if first is None:
            return f"equal after normalization ({self.records_b} records)"
        return f"first difference at {where(first, a=a, b=b)}: {first.describe()} {first.op}"

    def lines(self, *, a: str = "a", b: str = "b", limit: int | None = 50) -> Iterator[str]:
        """The text report: the headline, the first record's fields, then every other difference."""
        yield self.headline(a=a, b=b) + ("" if self.equal else f" ({self.counts()})")
        yield from self.notes
        if self.first is None:
            return
        yield from (f"  {line}" for line in details(self.first))
        rest = self.moved[1:]
        shown = rest if limit is None else rest[:limit]
        for m in shown:
            yield f"{m.op} {where(m, a=a, b=b)}: {m.describe()}"
            yield from (f"  {line}" for line in details(m))
        if len(shown) < len(rest):
            yield f"... and {len(rest) - len(shown)} more"

    def text(self, *, limit: int | None = 50) -> str:
        """The text report; "a" is the first trace, "b" the second, and seq numbers are b's unless marked."""
        return "\n".join(self.lines(limit=limit)) + "\n"

    def markdown(self, *, limit: int | None = 100) -> str:
        """A report ready to paste into a pull-request comment."""
        if self.equal:
            return f"**Traces equal** after normalization: `{self.a}` and `{self.b}` ({self.records_b} records).\n"
        first = self.first
        if first is None:
            raise internal("unequal traces with no first difference", self.b)
        out = [
            f"**Traces differ**: `{self.a}` → `{self.b}`: {self.counts()}.",
            *(f"\n> {note}" for note in self.notes),
            "",
            f"First difference at {where(first)}: `{first.describe()}` {first.op}.",
            "",
            "| | seq a | seq b | record | what |",
            "|---|---:|---:|---|---|",
        ]
        shown = self.moved if limit is None else self.moved[:limit]
        for m in shown:
            what = "<br>".join(_md(line) for line in details(m)) or ""
            seq_a = "" if m.seq_a is None else str(m.seq_a)
            seq_b = "" if m.seq_b is None else str(m.seq_b)
            out.append(f"| {m.op} | {seq_a} | {seq_b} | {_md(m.describe())} | {what} |")
        if len(shown) < len(self.moved):
            out.append(f"\n… and {len(self.moved) - len(shown)} more.")
        return "\n".join(out) + "\n"


def diff(
    a: Source | Loaded,
    b: Source | Loaded,
    *,
    ignore: str | Iterable[str] | None = None,
    defaults: bool = True,
    view: str = "behavior",
) -> Diff:
    """Compare two traces (paths, Replays, Outcomes, record lists or golden files) after normalization.

    `ignore`: field paths left out of the comparison (`"response.body.usage"`,
    `"*.id"`: see `harness.normalize`); `defaults=False` compares what the
    default rules leave out (a loopback port, request ids, a model response's
    ids and times). `view="raw"` compares each record as the trace holds it
    (`harness diff --raw`), not its behavior view. Memory: the common prefix
    and suffix are compared as they are read, so what is held grows with the
    region where the traces differ (the records between them), plus a fixed
    read window; two equal traces of any length whose calls the behavior view
    leaves as they are (no model or tool call of a door) are compared in
    constant memory; a trace with such calls is held whole, as its view.
    Raises HarnessError (TraceCorruption for a corrupt trace) naming the file.
    """
    rules = Rules.of(ignore, defaults, view)
    if rules.behavior and (raw_golden(a) or raw_golden(b)):  # a golden is compared in the view it was written in
        rules = Rules.of(ignore, defaults, "raw")
    return diff_with(Loaded.load(a, rules), Loaded.load(b, rules))


def diff_with(la: Loaded, lb: Loaded) -> Diff:
    """diff() of two loaded sides, each read under its own rules (give both the same)."""
    na, nb = len(la), len(lb)
    if la.causal or lb.causal:  # a run with agents: each agent's records aligned with its own
        return Diff(la.name, lb.name, na, nb, _moves(_by_agent(la, lb)), _notes(la, lb))
    steps = _Steps()
    lo, start_a, start_b = 0, _end(la), _end(lb)
    walk_a, walk_b = la.forward(), lb.forward()
    for x, at_a in walk_a:
        y, at_b = next(walk_b, (None, start_b))
        if y is None or not _same(x, y, la.rules):
            start_a, start_b = at_a, at_b
            break
        steps.remember(x)
        lo += 1
    else:
        start_b = next(walk_b, (None, start_b))[1]
    walk_a.close()
    walk_b.close()
    hi_a, hi_b = na, nb
    stop_a, stop_b = _end(la), _end(lb)
    if hi_a > lo and hi_b > lo:
        back_a, back_b = la.backward(), lb.backward()
        for (x, at_a), (y, at_b) in zip(back_a, back_b, strict=False):
            if hi_a == lo or hi_b == lo or not _same(x, y, la.rules):
                break
            hi_a, hi_b, stop_a, stop_b = hi_a - 1, hi_b - 1, at_a, at_b
        back_a.close()
        back_b.close()
    moved: list[Moved] = []
    if lo < hi_a or lo < hi_b:
        la.hold(lo, hi_a, start_a, stop_a)
        lb.hold(lo, hi_b, start_b, stop_b)
        ids_a, ids_b = steps.of(la, lo, hi_a), steps.of(lb, lo, hi_b)
        keys_a = [ids_a[n] + la.key(i) for n, i in enumerate(range(lo, hi_a))]
        keys_b = [ids_b[n] + lb.key(j) for n, j in enumerate(range(lo, hi_b))]
        pairs = _align(keys_a, keys_b)
        i = j = 0
        for pi, pj in [*pairs, (len(keys_a), len(keys_b))]:
            if i < pi or j < pj:
                moved.extend(_stretch(la, lb, lo + i, lo + pi, lo + j, lo + pj, ids_a[i:pi], ids_b[j:pj]))
            i, j = pi + 1, pj + 1
    return Diff(la.name, lb.name, na, nb, _moves(tuple(moved)), _notes(la, lb))


_MOVABLE = frozenset({"model_call", "tool_call", "crossing"})


def _notes(la: Loaded, lb: Loaded) -> tuple[str, ...]:
    """What a reader should know first: a side that is a golden of an older format (it reads, but may differ)."""
    return tuple(f"{side.name}: {side.note}" for side in (la, lb) if side.note)


def _moves(moved: tuple[Moved, ...]) -> tuple[Moved, ...]:
    """A removed call and an inserted one that are equal, as one call moved (where it was, where it is).

    Calls only (model, tool and other crossings): a checkpoint or a transition
    is its step's, and equal ones in two different steps are not one record moved.
    """
    removed: dict[bytes, list[int]] = {}
    for n, m in enumerate(moved):
        if m.op == "removed" and m.kind in _MOVABLE:
            removed.setdefault(orjson.dumps(m.record, option=orjson.OPT_SORT_KEYS), []).append(n)
    if not removed:
        return moved
    pairs: dict[int, int] = {}  # the inserted one's index -> the removed one's
    for n, m in enumerate(moved):
        if m.op == "inserted" and m.kind in _MOVABLE:
            same = removed.get(orjson.dumps(m.record, option=orjson.OPT_SORT_KEYS))
            if same:
                pairs[n] = same.pop(0)
    if not pairs:
        return moved
    gone = set(pairs.values())
    out = []
    for n, m in enumerate(moved):
        if n in gone:
            continue
        if n in pairs:
            was = moved[pairs[n]]
            m = dataclasses.replace(m, op="moved", seq_a=was.seq_a, line_a=was.line_a)
        out.append(m)
    return tuple(out)


def _end(side: Loaded) -> int:
    """Where a walk of side ends: its last complete line's end in a trace file, else its length."""
    return side._end if side._path is not None else len(side)


class _View:
    """One agent's records of a side, in its own order, read through the side (seq and line kept)."""

    def __init__(self, side: Loaded, rows: list[int]):
        self.side, self.rows = side, rows

    def __len__(self) -> int:
        return len(self.rows)

    def record(self, i: int) -> dict[str, Any]:
        return self.side.record(self.rows[i])

    def key(self, i: int) -> bytes:
        return self.side.key(self.rows[i])

    def seq(self, i: int) -> int:
        return self.side.seq(self.rows[i])

    def line(self, i: int) -> int:
        return self.side.line(self.rows[i])


def _by_agent(la: Loaded, lb: Loaded) -> tuple[Moved, ...]:
    """Align each agent's own sequence with the same agent's on the other side; report in causal order.

    Both sides are in the canonical causal order (sum of the clock, then agent),
    so the first difference reported is a causally earliest one: the branch point.
    """
    rows: dict[str, tuple[list[int], list[int]]] = {}
    for side, k in ((la, 0), (lb, 1)):
        if side._path is not None:  # a run without agents facing one with: all of it, held
            side.hold(0, len(side), 0, side._end)
        for i in range(len(side)):
            rows.setdefault(str(side.record(i).get("agent", "main")), ([], []))[k].append(i)
    place_b = {lb.seq(j): j for j in range(len(lb))}
    found: list[tuple[float, Moved]] = []
    for ia, ib in rows.values():
        va, vb = _View(la, ia), _View(lb, ib)
        pairs = _align([va.key(i) for i in range(len(va))], [vb.key(j) for j in range(len(vb))])
        i = j = 0
        for pi, pj in [*pairs, (len(va), len(vb))]:
            if i < pi or j < pj:
                before = ib[j - 1] if 0 < j <= len(ib) else -1  # where a removed record sat: after this one of b
                ids_a, ids_b = [b""] * (pi - i), [b""] * (pj - j)  # an agent's records pair by shape alone
                for m in _stretch(va, vb, i, pi, j, pj, ids_a, ids_b):  # type: ignore[arg-type]  # reads as a Loaded
                    found.append((place_b[m.seq_b] if m.seq_b is not None else before + 0.5, m))
            i, j = pi + 1, pj + 1
    found.sort(key=lambda x: x[0])  # stable: one agent's differences keep their order
    return tuple(m for _, m in found)


def _same(x: Item, y: Item, rules: Rules) -> bool:
    qa = quick(x)
    if qa is not None and qa == quick(y):
        return True
    vx, vy = view(x, rules), view(y, rules)
    return vx == vy and orjson.dumps(vx, option=orjson.OPT_SORT_KEYS) == orjson.dumps(vy, option=orjson.OPT_SORT_KEYS)


class _Steps:
    """Which step each record belongs to, so that only records of the same step are paired.

    A record belongs to the step whose intent (the transition into ACT, with
    its name and tool) came last; a record made while the run plans its next
    step (a model call deciding it) belongs to that step's planning. Two runs
    that took other paths after a decision thus differ in these identities,
    and the diff reads "these steps were replaced by those" instead of pairing
    unrelated records by position.
    """

    def __init__(self) -> None:
        self.intent: bytes = b""
        self.planning: int | None = 0
        self.last_intent: Item | None = None  # of the common prefix
        self.last_transition: Item | None = None

    def remember(self, item: Item) -> None:
        """Note a record of the common prefix (cheaply: only its last transitions are decoded, once)."""
        if isinstance(item, bytes):
            if b'"kind":"transition"' in item[:64]:
                self.last_transition = item
                to = item.find(b',"to":"')  # the first is the record's own: from and to come before any value
                if item.startswith(b'ACT"', to + 7):
                    self.last_intent = item
        elif item.get("kind") == "transition":
            self.last_transition = item
            if item.get("to") == "ACT":
                self.last_intent = item

    def of(self, side: Loaded, lo: int, hi: int) -> list[bytes]:
        """The step identity of records lo to hi of side, from where the common prefix left off."""
        state = _Steps()
        for item in (self.last_intent, self.last_transition):
            if item is not None:
                state.feed(view(item, side.rules))
        return [state.feed(side.record(i)) for i in range(lo, hi)]

    def feed(self, rec: Mapping[str, Any]) -> bytes:
        if rec.get("kind") != "transition":
            return self.intent if self.planning is None else b"plan %d|" % self.planning
        to, step = rec.get("to"), rec.get("step")
        if to == "ACT":
            self.intent, self.planning = orjson.dumps([step, rec.get("name"), rec.get("tool")]) + b"|", None
            return self.intent
        if to == "PLAN":
            mine = self.intent if self.intent and rec.get("from") != "INIT" else b"plan %d|" % (step or 0)
            if type(step) is int:
                self.planning = step + 1 if rec.get("from") == "CHECKPOINT" else step
            return mine
        if to in ("DONE", "FAILED") and rec.get("from") == "PLAN":
            return b"plan %s|" % str(step).encode()
        return self.intent if self.planning is None else b"plan %d|" % self.planning


def _align(a: list[bytes], b: list[bytes]) -> list[tuple[int, int]]:
    """Matched index pairs (increasing in both) of two key lists: patience diff, difflib for small stretches."""
    pairs: list[tuple[int, int]] = []
    todo = [(0, len(a), 0, len(b))]
    while todo:
        alo, ahi, blo, bhi = todo.pop()
        while alo < ahi and blo < bhi and a[alo] == b[blo]:
            pairs.append((alo, blo))
            alo, blo = alo + 1, blo + 1
        while alo < ahi and blo < bhi and a[ahi - 1] == b[bhi - 1]:
            ahi, bhi = ahi - 1, bhi - 1
            pairs.append((ahi, bhi))
        if alo == ahi or blo == bhi:
            continue
        anchors = _anchors(a, b, alo, ahi, blo, bhi)
        if anchors:
            pi, pj = alo, blo
            for i, j in anchors:
                pairs.append((i, j))
                todo.append((pi, i, pj, j))
                pi, pj = i + 1, j + 1
            todo.append((pi, ahi, pj, bhi))
        else:
            pairs.extend((alo + i, blo + j) for i, j in _match(a[alo:ahi], b[blo:bhi]))
    pairs.sort()
    return pairs


def _match(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int]]:
    """Matched index pairs of two short sequences (difflib), or of long ones with few edits (Myers)."""
    if len(a) * len(b) <= _SMALL:
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        return [(i + k, j + k) for i, j, size in sm.get_matching_blocks() for k in range(size)]
    return _myers(a, b, _EDITS) or []


def _myers(a: Sequence[Hashable], b: Sequence[Hashable], max_edits: int) -> list[tuple[int, int]] | None:
    """The pairs of a shortest edit script (Myers 1986), or None when it needs more than max_edits edits."""
    n, m = len(a), len(b)
    v = {1: 0}
    rounds: list[dict[int, int]] = []  # v as it was before each round, to walk the path back
    for d in range(max_edits + 1):
        rounds.append(dict(v))
        for k in range(-d, d + 1, 2):
            x = v[k + 1] if k == -d or (k != d and v[k - 1] < v[k + 1]) else v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[k] = x
            if x >= n and y >= m:
                return _walk_back(rounds, n, m)
    return None


def _walk_back(rounds: list[dict[int, int]], x: int, y: int) -> list[tuple[int, int]]:
    pairs = []
    for d in range(len(rounds) - 1, -1, -1):
        v, k = rounds[d], x - y
        prev_k = k + 1 if k == -d or (k != d and v[k - 1] < v[k + 1]) else k - 1
        prev_x = v[prev_k]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        x, y = prev_x, prev_y
    return pairs[::-1]


def _anchors(a: list[bytes], b: list[bytes], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """The longest increasing run of records that occur exactly once on each side (patience sorting)."""
    count: dict[bytes, int] = {}
    for k in a[alo:ahi]:
        count[k] = count.get(k, 0) + 1
    where_b: dict[bytes, int] = {}
    seen_b: dict[bytes, int] = {}
    for j in range(blo, bhi):
        k = b[j]
        if count.get(k) == 1:
            seen_b[k] = seen_b.get(k, 0) + 1
            where_b[k] = j
    cands = [(i, where_b[a[i]]) for i in range(alo, ahi) if seen_b.get(a[i]) == 1]
    if not cands:
        return []
    tops: list[int] = []  # the smallest b index ending an increasing run of each length
    back: list[int] = []  # for each candidate, the candidate before it in its run
    ends: list[int] = []  # for each run length, the candidate ending it
    for n, (_, j) in enumerate(cands):
        at = bisect.bisect_left(tops, j)
        if at == len(tops):
            tops.append(j)
            ends.append(n)
        else:
            tops[at], ends[at] = j, n
        back.append(ends[at - 1] if at else -1)
    out, n = [], ends[-1]
    while n >= 0:
        out.append(cands[n])
        n = back[n]
    return out[::-1]


def _shape(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    return (rec.get("kind"), rec.get("from"), rec.get("to"), rec.get("step"), rec.get("boundary"), rec.get("name"))


def _stretch(
    la: Loaded, lb: Loaded, ai: int, ah: int, bj: int, bh: int, ids_a: list[bytes], ids_b: list[bytes]
) -> Iterator[Moved]:
    """The differences in a stretch a[ai:ah] facing b[bj:bh] that share no record; ids: their step identities."""
    pairs: list[tuple[int, int]] = []
    if ai < ah and bj < bh:
        shapes_a = [(ids_a[n], *_shape(la.record(i))) for n, i in enumerate(range(ai, ah))]
        shapes_b = [(ids_b[n], *_shape(lb.record(j))) for n, j in enumerate(range(bj, bh))]
        if shapes_a == shapes_b:  # the common case: the same records with other values
            pairs = [(ai + n, bj + n) for n in range(ah - ai)]
        else:
            pairs = [(ai + x, bj + y) for x, y in _match(shapes_a, shapes_b)]
    i, j = ai, bj
    for pi, pj in [*pairs, (ah, bh)]:
        yield from (_one(la, "removed", x, None) for x in range(i, pi))
        yield from (_one(lb, "inserted", None, y) for y in range(j, pj))
        if pi < ah:
            yield _changed(la, lb, pi, pj)
        i, j = pi + 1, pj + 1


def _one(side: Loaded, op: str, i: int | None, j: int | None) -> Moved:
    n = i if i is not None else j
    if n is None:
        raise internal(f"a {op} record at no position")
    rec = normalize_record(side.record(n), rules=side.rules)  # nested keys sorted, as normalize() gives them
    seq, line = side.seq(n), side.line(n)
    return Moved(
        op, rec.get("kind"), rec.get("from"), rec.get("to"), rec.get("step"), attempt_of(rec),
        seq if i is not None else None, seq if j is not None else None,
        line if i is not None else None, line if j is not None else None,
        record=rec,
    )  # fmt: skip


def _changed(la: Loaded, lb: Loaded, i: int, j: int) -> Moved:
    old, new = la.record(i), lb.record(j)
    out: list[Change] = []
    _fields(old, new, "", out)
    return Moved(
        "changed", new.get("kind"), new.get("from"), new.get("to"), new.get("step"), attempt_of(new),
        la.seq(i), lb.seq(j), la.line(i), lb.line(j), tuple(out), new,
    )  # fmt: skip


def _fields(old: Any, new: Any, path: str, out: list[Change]) -> None:
    if old == new and type(old) is type(new) and type(old) in (dict, list, str):  # the common case, in C
        return
    if type(old) is dict and type(new) is dict:
        # a record's own fields in view order; nested ones sorted, as normalize() gives them
        keys = [*old, *(k for k in new if k not in old)] if not path else sorted(old.keys() | new.keys())
        for k in keys:
            _fields(old.get(k, ABSENT), new.get(k, ABSENT), f"{path}.{k}" if path else k, out)
    elif type(old) is list and type(new) is list and len(old) == len(new):
        for n, (x, y) in enumerate(zip(old, new, strict=True)):
            _fields(x, y, f"{path}[{n}]", out)
    elif type(old) is not type(new) or old != new:
        out.append(Change(path or "record", old, new))


def _plain(value: Any) -> Any:
    return None if value is ABSENT else value


def show(value: Any, width: int = _SHOW) -> str:
    """A value as compact JSON, cut to width characters."""
    return "(absent)" if value is ABSENT else compact(value, width)


def where(m: Moved, *, a: str = "a", b: str = "b") -> str:
    """`seq 7` (in b), with a's seq when it differs, or `a seq 7` for a removal."""
    if m.seq_b is None:
        return f"{a} seq {m.seq_a}"
    if m.seq_a is not None and m.seq_a != m.seq_b:
        return f"seq {m.seq_b} ({a} seq {m.seq_a})"
    return f"seq {m.seq_b}"


_SKIP = frozenset({"kind", "from", "to", "step", "attempt"})


def show_pair(old: Any, new: Any, width: int = _SHOW) -> tuple[str, str]:
    """Two values as compact JSON, each cut to width characters around where they first differ.

    As pytest does for long strings: when a text is too long, the window
    starts a little before the first differing character, the same place on
    both sides, and `…` marks each side that was cut; so the difference is
    always in view.
    """
    a, b = show(old, 1 << 62), show(new, 1 << 62)
    if len(a) <= width and len(b) <= width:
        return a, b
    start = max(0, first_difference(a, b) - width // 3)
    return _window(a, start, width), _window(b, start, width)


def first_difference(a: str, b: str) -> int:
    """Where two texts first differ: the length of their common prefix."""
    if a == b:
        return len(a)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # halving: two long texts that differ near their end compare in C, in a few slices
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def spans(a: str, b: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The characters that changed: [start, end) spans of a (removed) and of b (added).

    The common prefix and suffix are never marked; between them, a short
    middle is compared word by word (difflib over words, spaces and single
    other characters), a mark spreading over the spaces between two marked
    words; a middle whose two sides are mostly different (under half their
    words in common), or long (over _MIDDLE characters), is marked whole.
    """
    head = first_difference(a, b)
    tail = 0
    while tail < min(len(a), len(b)) - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    while head and (_inside(a, head) or _inside(b, head)):  # never in the middle of a word: `10 -> 11` marks both
        head -= 1
    while tail and (_inside(a, len(a) - tail) or _inside(b, len(b) - tail)):
        tail -= 1
    ma, mb = a[head : len(a) - tail], b[head : len(b) - tail]
    if not ma and not mb:
        return [], []
    whole = ([(head, len(a) - tail)] if ma else []), ([(head, len(b) - tail)] if mb else [])
    if len(ma) > _MIDDLE or len(mb) > _MIDDLE or not ma or not mb:
        return whole
    wa, wb = _WORD.findall(ma), _WORD.findall(mb)
    sm = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
    if sm.ratio() < 0.5:
        return whole
    at_a, at_b = [head], [head]  # where each word starts
    for w in wa:
        at_a.append(at_a[-1] + len(w))
    for w in wb:
        at_b.append(at_b[-1] + len(w))
    out_a: list[tuple[int, int]] = []
    out_b: list[tuple[int, int]] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            continue
        for out, words, at, lo, hi in ((out_a, wa, at_a, i1, i2), (out_b, wb, at_b, j1, j2)):
            if lo < hi:
                gap = "".join(words[k] for k in range(_back(out, at), lo)) if out else "x"
                if not gap.strip():  # only spaces since the last mark: one mark over both
                    out[-1] = (out[-1][0], at[hi])
                else:
                    out.append((at[lo], at[hi]))
    return _trim(a, out_a), _trim(b, out_b)


def _trim(text: str, marks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Marks without the spaces at their ends (a mark of spaces alone stays whole)."""
    out = []
    for lo, hi in marks:
        inner = text[lo:hi]
        if inner.strip():
            lo, hi = lo + len(inner) - len(inner.lstrip()), hi - (len(inner) - len(inner.rstrip()))
        out.append((lo, hi))
    return out


def _inside(text: str, at: int) -> bool:
    """Whether position at (between two characters) falls inside a word of text."""
    return (
        0 < at < len(text)
        and (text[at - 1].isalnum() or text[at - 1] == "_")
        and (text[at].isalnum() or text[at] == "_")
    )


def _back(out: list[tuple[int, int]], at: list[int]) -> int:
    """The word index where the last mark in out ends."""
    return bisect.bisect_left(at, out[-1][1])


def marked(old: Any, new: Any, width: int = WEB_WIDTH) -> dict[str, Any]:
    """Two values as compact JSON in a window around their first difference, with the changed characters.

    {"old": text, "new": text, "old_marks": [[start, end], ...], "new_marks": [...]}: what the
    viewer's diff page highlights; the window is show_pair()'s, with room for width characters.
    """
    a, b = show(old, 1 << 62), show(new, 1 << 62)
    marks_a, marks_b = spans(a, b)
    start = 0 if len(a) <= width and len(b) <= width else max(0, first_difference(a, b) - width // 4)
    out: dict[str, Any] = {}
    for name, text, marks in (("old", a, marks_a), ("new", b, marks_b)):
        head, body, tail = _cut(text, start, width)
        out[name] = head + body + tail
        out[f"{name}_marks"] = [
            [max(lo - start, 0) + len(head), min(hi - start, len(body)) + len(head)]
            for lo, hi in marks
            if hi > start and lo - start < len(body)
        ]
    return out


def marked_changes(m: Moved, width: int = WEB_WIDTH) -> list[dict[str, Any]]:
    """marked() of each changed field of m: the viewer's diff page shows these."""
    return [{"field": c.field, **marked(c.old, c.new, width)} for c in m.changes]


def _window(text: str, start: int, width: int) -> str:
    return "".join(_cut(text, start, width))


def _cut(text: str, start: int, width: int) -> tuple[str, str, str]:
    """text from start in at most width characters: (`…` when cut before, what is shown, `…` when cut after)."""
    if len(text) <= width and start == 0:
        return "", text, ""
    cut = text[start:]
    head = "…" if start else ""
    if len(head) + len(cut) <= width:
        return head, cut, ""
    return head, cut[: width - len(head) - 1], "…"


def details(m: Moved) -> list[str]:
    """`field: old -> new` per change; for an inserted or removed record, its payload in one line."""
    if m.op == "changed":
        return [f"{c.field}: {' -> '.join(show_pair(c.old, c.new))}" for c in m.changes]
    rest = {k: v for k, v in (m.record or {}).items() if k not in _SKIP}
    return [show(rest, 110)] if rest else []


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
