"""The deterministic view of a trace: what golden files hold and what diffs compare.

`normalize()` keeps what describes control flow and data (kinds, states,
steps, attempts, tools, args, results, errors, checkpoints, crossings,
resumes) and drops what changes between two runs of the same program: seq
numbers, wall-clock values, run ids, checksums and hashes, the host
environment, idempotency keys (they embed the run id), fork lineage, and the
trace's own file name. Dropping seq makes an inserted record an insertion,
not a renumbering of every later one; the record's position still gives it.

Rules kept here:
- one record in, one record out, in order: record i of the view is seq i+1;
- the same keys come out in the same order every time (kind, then ORDER,
  then the rest sorted; nested objects sorted), so a run renders to the
  same bytes whenever it behaves the same;
- normalizing a normalized record changes nothing;
- a trace is validated by replay() before it is read: a corrupt or foreign
  file raises, it is never half-read.

A golden file is the view as JSONL after one line naming its format and
version (`GOLDEN_HEAD`); `Loaded` reads traces, golden files and lists of
records alike, lazily, for the diff engine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ._errors import HarnessError
from ._executor import Outcome
from ._replay import Replay, replay

FORMAT, VERSION = "harness-golden", 1
GOLDEN_HEAD = orjson.dumps({"format": FORMAT, "version": VERSION}).decode()
RERECORD = "re-record it with `pytest --snapshot-update` (or `harness show --golden TRACE`)"

# top-level fields that differ between two runs of the same program
DROP = frozenset(
    {"seq", "ts", "crc", "hash", "run_id", "env", "key", "parent", "branch", "reused", "duration", "elapsed"}
)
# the fields that come first, in this order; others follow sorted
ORDER = (
    "kind", "from", "to", "step", "attempt", "name", "tool", "args", "result", "error",
    "boundary", "request", "response", "status", "happened", "evidence", "set_aside", "schema", "goal", "tools",
)  # fmt: skip
_RANK = {k: i for i, k in enumerate(ORDER)}

Source = str | os.PathLike[str] | Sequence[Mapping[str, Any]] | Replay | Outcome


def _canon(value: Any) -> Any:
    if isinstance(value, dict | list):  # nested keys sorted, in C
        return orjson.loads(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    return value


_plans: dict[tuple[str, ...], tuple[str, ...]] = {}  # a record's keys -> the keys of its view, in order


def _plan(keys: tuple[str, ...]) -> tuple[str, ...]:
    plan = _plans.get(keys)
    if plan is None:
        if len(_plans) > 4096:  # records of many shapes (free-form events): keep the cache small
            _plans.clear()
        plan = _plans[keys] = tuple(
            sorted((k for k in keys if k not in DROP), key=lambda k: (_RANK.get(k, len(ORDER)), k))
        )
    return plan


def normalize_record(record: Mapping[str, Any], *, nested: bool = True) -> dict[str, Any]:
    """The deterministic view of one record (see the module docstring).

    nested=False leaves nested objects in their own key order: equal as
    dicts and as canonical bytes, cheaper, for comparing (the diff engine).
    """
    kind = record.get("kind")
    plan = _plan(tuple(record))
    out = {k: _canon(record[k]) for k in plan} if nested else {k: record[k] for k in plan}
    if kind == "reconcile":
        out.pop("op", None)  # the seq of the paused operation: a seq number
    elif kind == "crossing" and out.get("boundary") == "now":
        out.pop("response", None)  # a wall-clock reading
    aside = out.get("set_aside")
    if isinstance(aside, str) and ".torn-" in aside:  # "<trace name>.torn-N": keep N, not the name
        out["set_aside"] = "torn-" + aside.rpartition(".torn-")[2]
    return out


def normalize(trace: Source) -> list[dict[str, Any]]:
    """The deterministic view of a trace: a path (trace or golden file), a Replay, an Outcome, or records.

    Records are dicts as read from a trace (`harness.testing.read_records`).
    Raises HarnessError (TraceCorruption for a corrupt trace) naming the file.
    """
    loaded = Loaded.load(trace)
    return [normalize_record(loaded.record(i)) for i in range(len(loaded))]


def render(records: Sequence[Mapping[str, Any]]) -> str:
    """A golden file's text: the format line, then one normalized record per line."""
    body = b"\n".join(orjson.dumps(normalize_record(r)) for r in records)
    return GOLDEN_HEAD + "\n" + (body.decode() + "\n" if records else "")


def stale(first_line: str | bytes) -> str | None:
    """None when first_line is this version's golden head, else why the file is not a current golden."""
    try:
        head = orjson.loads(first_line)
    except orjson.JSONDecodeError:
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        return f"its first line is not {GOLDEN_HEAD} (not a harness golden, or written before goldens had a version)"
    if head.get("version") != VERSION:
        return f"it was written as golden format version {head.get('version')!r}; this harness writes version {VERSION}"
    return None


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
    """Whether the file at path starts like a golden file (any version) rather than a trace."""
    try:
        with open(path, "rb") as f:
            start = f.read(64).lstrip()
    except OSError:
        return False
    return start.startswith(b'{"format"') or start.startswith(b'{ "format"')


class Loaded:
    """One side of a comparison: its records, normalized lazily, with their seq and line numbers.

    A trace file keeps its raw lines; two lines whose bytes match once seq,
    ts and crc are cut off are equal without being parsed (`quick`), which
    keeps diffing two long, nearly equal traces linear and cheap.
    """

    __slots__ = ("_norm", "_raw", "_records", "_seqs", "first_line", "name", "torn_tail")

    def __init__(
        self, name: str, *, raw: list[bytes] | None = None, records: Sequence[Mapping[str, Any]] | None = None,
        first_line: int = 1, seqs: list[int] | None = None, torn_tail: bool = False,
    ):  # fmt: skip
        self.name, self._raw, self._records, self.first_line, self._seqs = name, raw, records, first_line, seqs
        self.torn_tail = torn_tail  # the trace ends in an unfinished line, left out
        self._norm: dict[int, dict[str, Any]] = {}

    @classmethod
    def load(cls, source: Source | Loaded) -> Loaded:
        if isinstance(source, Loaded):
            return source
        if isinstance(source, Outcome):
            source = source.trace
        if isinstance(source, Replay):
            return cls.trace(source.path)
        if isinstance(source, str | os.PathLike):
            path = os.fspath(source)
            if is_golden_file(path):
                with open(path, "rb") as f:
                    return cls.golden(f.read(), path)
            return cls.trace(path)
        if isinstance(source, Sequence):
            records: Sequence[Mapping[str, Any]] = source  # type: ignore[assignment]  # str was handled above
            bad = next((i for i, r in enumerate(records) if not isinstance(r, Mapping)), None)
            if bad is not None:
                what = type(records[bad]).__name__
                raise HarnessError(f"record {bad} is a {what}, not a dict; pass a path or a list of records")
            seqs = [r["seq"] if type(r.get("seq")) is int else i + 1 for i, r in enumerate(records)]
            return cls("<records>", records=records, seqs=seqs)
        what = type(source).__name__
        raise HarnessError(f"cannot read a trace from a {what}; pass a path, a Replay, an Outcome or a list of records")

    @classmethod
    def trace(cls, path: str) -> Loaded:
        rep = replay(path)  # raises on a corrupt or foreign file, naming line and reason
        with open(path, "rb") as f:
            data = f.read(rep.end)  # complete lines only: a torn tail is not part of the run
        raw = data.split(b"\n")
        raw.pop()
        return cls(path, raw=raw, torn_tail=rep.torn_tail)

    @classmethod
    def golden(cls, text: str | bytes, name: str) -> Loaded:
        return cls(name, records=parse_golden(text, name), first_line=2)

    def __len__(self) -> int:
        return len(self._raw) if self._raw is not None else len(self._records or ())

    def seq(self, i: int) -> int:
        """The record's seq in its trace (in a valid trace, its line number; in a golden, its position)."""
        return self._seqs[i] if self._seqs is not None else i + 1

    def line(self, i: int) -> int:
        return i + self.first_line

    def record(self, i: int) -> dict[str, Any]:
        rec = self._norm.get(i)
        if rec is None:
            raw = orjson.loads(self._raw[i]) if self._raw is not None else self._records[i]  # type: ignore[index]
            rec = self._norm[i] = normalize_record(raw, nested=False)
        return rec

    def key(self, i: int) -> bytes:
        """Canonical bytes of the normalized record: equal keys, equal records."""
        return orjson.dumps(self.record(i), option=orjson.OPT_SORT_KEYS)

    def quick(self, i: int) -> bytes | None:
        """The raw line without seq, ts and crc, when this is a trace file; None otherwise."""
        if self._raw is None:
            return None
        line = self._raw[i]
        start, end = line.find(b","), line.rfind(b',"ts":')
        return line[start:end] if start > 0 and end > start else None
