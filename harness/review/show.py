"""`harness show`: a trace as people read it, streamed record by record.

How it works: replay() validates the file and hands each record to a
callback once it has passed every check (`replay(on_record=...)`); the
callback formats that one record and writes it out at once. So a trace of any
length is shown in constant memory (one record at a time, nothing kept that
grows with the file), and a corrupt trace is shown up to its damage before
replay() raises the TraceCorruption that names it.

What a timeline line holds: the seq, what the record is (`PLAN -> ACT  step
0, attempt 1`), then its fields as compact JSON, whole: a value is wrapped
at the width, never cut, so a model prompt reads in full. Fields that only
make sense to a machine (seq, ts, crc, hash) are left out; a model or tool
call a door recorded shows as its behavior view (`behavior.Behavior`, fed the
trace's calls in order: a model call's new messages and what it said, not
the whole history again); another http crossing's streamed model reply shows
as the message its chunks add up to (`response.stream`); a `now()` reading
is shown as a UTC time, so is a `sleep`'s wake-up time; a crash record
shows its error and innermost frame, not its whole traceback; a fork's header names its `parent` and `branch`, and
its records say whether they were `served` from the parent (its `reused`
marks; every record of a rerun), `answered` (the branch) or ran `live`.

Other views: `json` writes each line exactly as read; `record` one record in
full, indented; `golden` the normalized view (the git textconv), which
refuses a corrupt trace before writing anything and holds the trace's view
in memory (its calls' views depend on the calls before them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from .._errors import HarnessError, TraceUnreadable
from ..storage import blobs as _blobs
from ..trace.reader import Replay, replay
from ..trace.stream import FRAMEWORK_MODELS, http_view, reply, said
from .behavior import Behavior
from .fieldpath import mark
from .normalize import (
    RULES,
    Rules,
    behave,
    describe_record,
    golden_head,
    is_golden_file,
    mapped,
    normalize_record,
    normalize_with,
    parse_golden,
    raw_golden,
)  # fmt: skip
from .results import hint

INDENT = 10  # where a wrapped field starts: past the seq column
MIN_WIDTH = 40
_HIDDEN = frozenset(
    {"seq", "ts", "crc", "hash", "kind", "from", "to", "step", "attempt", "boundary", "reused", "mutated"}
    | {"agent", "vc"}  # shown before the record, as `[agent]` (or with --vector, agent and clock)
    | {"via", "model"}  # a model or tool call's: in what it is
)
_MAPPED = frozenset({"kind", "boundary", "request", "response", "error", "hash"})  # a crossing's, as the view has them
Write = Callable[[str], Any]
View = Literal["timeline", "json", "record", "golden"]


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _time(value: Any) -> str:
    if type(value) in (int, float):
        try:
            return datetime.fromtimestamp(value, UTC).isoformat()
        except (OverflowError, OSError, ValueError):  # not a time the platform can show: the number as it is
            pass
    return _json(value)


def wrap(text: str, room: int, indent: str) -> list[str]:
    """text in lines of at most `room` characters after `indent` (continuations 2 more).

    A line breaks at its last space (which is dropped) or after its last comma in its second half, else
    inside a word: nothing is left out but the space a line broke at.
    """
    out = []
    while len(text) > room:
        space = text.rfind(" ", room // 2, room + 1)
        comma = text.rfind(",", room // 2, room)
        if space > 0 and space >= comma:
            out.append(indent + text[:space])
            text = text[space + 1 :]
        else:
            cut = comma + 1 if comma > 0 else room
            out.append(indent + text[:cut])
            text = text[cut:]
        if len(out) == 1:
            indent, room = indent + "  ", room - 2
    out.append(indent + text)
    return out


def _said(message: Mapping[str, Any]) -> str:
    """A behavior view's reply in one line: its text, else the tools it called (`→ search {"q": "x"}`)."""
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    shown = {
        "content": message.get("text"), "refusal": message.get("refusal"),
        "tool_calls": [{"name": c.get("name"), "arguments": _json(c.get("args"))} for c in calls],
    }  # fmt: skip
    return said({"message": shown})


def role(seq: int, rec: Mapping[str, Any], branch: int | None, rerun: bool) -> str | None:
    """How a record of a rerun or fork came to be: `served` (from the recording: a fork's `reused` record, every
    record of a rerun), `answered` (a fork's branch, `mutated`) or `live` (after the branch; in a causal fork, what
    it did not mark). None for a header and for a run that is neither. `branch`/`rerun`: from the run's header."""
    if rec.get("kind") == "header":
        return None
    if rec.get("reused") is True or rerun:
        return "served"
    if branch is None:
        return None
    if rec.get("mutated") is True or (seq == branch and "vc" not in rec):
        return "answered"
    if "vc" in rec:  # a causal fork marks what it reused and the branch: the rest ran live
        return "live"
    return "answered" if seq == branch else "live" if seq > branch else "served"


class Timeline:
    """Formats records as timeline lines; knows the trace's fork lineage from its header."""

    def __init__(self, width: int, *, vector: bool = False):
        self.width = max(width, MIN_WIDTH)
        self.branch: int | None = None
        self.rerun = False  # a rerun's header (a parent, no branch): each of its records was served
        self.vector = vector  # each record's agent and vector clock in a column of their own

    def lines(self, seq: int, rec: Mapping[str, Any]) -> list[str]:
        kind = rec.get("kind")
        if kind == "header" and type(rec.get("branch")) is int:
            self.branch = rec["branch"]
        elif kind == "header":
            self.rerun = "parent" in rec
        what = describe_record(rec)
        if kind == "transition":
            what = f"{rec.get('from')} -> {rec.get('to')}"
            what = f"{what:<22}step {rec.get('step')}, attempt {rec.get('attempt', 1)}"
        agent = rec.get("agent", "main")
        if self.vector:  # a record written before the run spawned has the clock {"main": seq}
            vc = rec.get("vc")
            clock = vc if isinstance(vc, dict) else {"main": seq}
            what = f"{agent:<12} {{{','.join(f'{a}:{n}' for a, n in clock.items())}}}  {what}"
        elif agent != "main":
            what = f"[{agent}] {what}"
        notes = self.notes(seq, rec)
        head = f"{seq:>6}  {what}"
        one = f"{seq:>6}  {what:<40}  {'  '.join(notes)}".rstrip()
        if len(one) <= self.width:
            return [one]
        out = [head]
        for note in notes:
            out.extend(wrap(note, self.width - INDENT, " " * INDENT))
        return out

    def notes(self, seq: int, rec: Mapping[str, Any]) -> list[str]:
        kind = rec.get("kind")
        notes = []
        how = role(seq, rec, self.branch, self.rerun)
        if how is not None:
            notes.append(how)
        fields = {k: v for k, v in rec.items() if k not in _HIDDEN}
        if kind == "checkpoint":
            fields.pop("name", None)  # already in `what`
        if kind == "header" and "ts" in rec:
            fields["started"] = rec["ts"]
        if kind == "crossing" and rec.get("boundary") == "now" and "response" in fields:
            fields.pop("request", None)  # always null
            notes.append(f"now={_time(fields.pop('response'))}")
        if kind == "crossing" and rec.get("boundary") == "sleep" and "response" in fields:
            notes.append(f"wakes={_time(fields.pop('response'))}")  # a durable timer's wake-up time
        if kind == "crossing" and rec.get("boundary") == "http" and "response" in fields:
            fields["response"] = http_view(fields["response"])  # a model stream: the message, not its chunks
        if kind == "crossing" and rec.get("boundary") in FRAMEWORK_MODELS and "response" in fields:
            answer = reply(fields["response"])  # a framework's model response: what the model said, first
            if answer is not None:
                notes.append(f"said={said(answer)}")
        if kind == "model_call" and isinstance(rec.get("reply"), dict):  # what the model said, first
            notes.append(f"said={_said(rec['reply'])}")
            fields.pop("reply", None)
        if kind == "crash" and isinstance(fields.get("traceback"), str):  # the innermost frame, not the whole text
            frames = [f.strip() for f in fields.pop("traceback").splitlines() if f.strip().startswith("File ")]
            fields["at"] = frames[-1] if frames else None
        if "tool" in fields:
            fields = {"call": f"{fields.pop('tool')} {_json(fields.pop('args', {}))}", **fields}
        for k, v in fields.items():
            shown = v if k == "call" else _time(v) if k == "started" else _json(v)
            notes.append(f"{k}={shown}")
        return notes


def show_trace(
    trace: str | os.PathLike[str],
    write: Write,
    *,
    view: View = "timeline",
    width: int = 100,
    seq: int | None = None,
    vector: bool = False,
    rules: Rules = RULES,
) -> Replay | None:
    """Write the trace at `trace` through `write`, one record at a time.

    view: "timeline" (wrapped at `width`; each model and tool call a door
    made as its behavior view: a model call's new messages and its reply, not
    the whole history again), "json" (each line as read), "record" (the
    record at `seq`, whole and indented) or "golden" (the normalized view
    under `rules`, as a golden file holds it). Returns the Replay of a trace
    file (None for a golden file); raises TraceCorruption after writing the
    records before the damage ("golden" writes nothing then), HarnessError
    for an unreadable file or, with view="record", a seq the trace does not
    hold. `vector`: the timeline shows each record's agent and vector clock.
    `rules` (the project's, normalize.rules_for): the golden view is theirs,
    and the timeline hides what they ignore (`<ignored>`), as a golden file
    does.

    The golden view is written once the whole trace is read (a run with
    agents comes in the canonical causal order, and a call's view depends on
    the calls before it).
    """
    path = os.fspath(trace)
    timeline = Timeline(width, vector=vector)
    behavior = Behavior()  # the timeline's model and tool calls: ids and conversations so far
    found: list[bool] = []
    held = 0

    def emit(n: int, raw: bytes | None, rec: Mapping[str, Any]) -> None:
        if view == "timeline":
            if mapped(rec):
                inline = _blobs.inline(path, rec) if "blobs" in rec else rec
                shown = behavior.view(inline)
                if shown is not None:
                    rec = {**shown, **{k: v for k, v in rec.items() if k not in _MAPPED and k not in shown}}
            for ignored in rules.paths:
                rec = mark(rec, ignored)
            write("\n".join(timeline.lines(n, rec)) + "\n")
        elif view == "json":
            write((raw.decode() if raw is not None else _json(rec)) + "\n")
        elif n == seq:
            write(orjson.dumps(rec, option=orjson.OPT_INDENT_2).decode() + "\n")
            found.append(True)

    if is_golden_file(path):
        try:
            with open(path, "rb") as f:
                records = parse_golden(f.read(), path)
        except OSError as e:
            raise TraceUnreadable(path, f"cannot read: {e.strerror}") from None
        if view == "golden":  # (the textconv of a golden: in the view it was written in)
            rules = Rules.of(rules.ignore, rules.defaults, "raw") if raw_golden(path) else rules
            write(golden_head(rules) + "\n")
            for rec in behave(records) if rules.behavior else records:
                write(_json(normalize_record(rec, rules=rules)) + "\n")
            return None
        for n, rec in enumerate(records, 1):
            emit(n, None, rec)
        rep, held = None, len(records)
    elif view == "golden":  # the textconv: refuse a corrupt trace before writing a byte
        normalized = normalize_with(path, rules)
        write(golden_head(rules) + "\n")
        for rec in normalized:
            write(_json(rec) + "\n")
        return replay(path)
    else:
        rep = replay(path, on_record=lambda line, rec: emit(rec["seq"], line, rec))
        if rep.torn_tail and view == "timeline":
            write(f"{'':>6}  (torn tail: an unfinished last line, not part of the run)\n")
        paused = hint(path, rep) if view == "timeline" else None
        if paused is not None:  # the paused call: how to reconcile it, in its door's shape
            write(f"{'':>6}  PAUSED on an uncertain call: {paused}\n")
    if view == "record" and not found:
        count = rep.records if rep is not None else held
        raise HarnessError(f"{path}: no record with seq {seq} (it holds seq 1 to {count})")
    return rep
