"""The line format: one record, one line, chained by its checksum.

A record is one line: the record's orjson bytes with the closing brace
replaced by `,"crc":"<8 hex digits>"}` and a newline. The crc is
zlib.crc32 of the bytes before `,"crc":`, seeded with the previous line's
crc, so the lines form a chain: an edited, deleted, swapped or re-appended
line breaks it at that very line, and the reader checks it straight from
the bytes on disk, with no re-serialization.

Here: the limits of a line, the encoder the journal writes with, the check
the reader and the index read with (`line_ok`), and `check_value`, which
says before anything is written whether a value would come back equal.
Pure functions: no file, no state.
"""

from __future__ import annotations

import math
import time
import zlib
from typing import Any

import orjson

from .._errors import NotSerializable

SCHEMA = 2
MAX_LINE = 16 * 1024 * 1024  # bytes; larger records are refused on write and on read
SUFFIX = len(b',"crc":"00000000"}')  # bytes after the checksummed part, newline excluded
MARK = b',"crc":"'  # where that suffix starts
MAX_DEPTH = 254  # nesting levels of a line, the record included: orjson writes no deeper
HEADER_START = b'{"seq":1,"kind":"header"'  # how every trace begins

DUMPS_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


def refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def canonical(value: Any) -> bytes:
    """Canonical JSON bytes (sorted keys): what goals and requests are compared and hashed by."""
    return orjson.dumps(value, default=refuse, option=DUMPS_OPTIONS | orjson.OPT_SORT_KEYS)


def problem(value: Any, where: str = "", depth: int = 2) -> tuple[str, str] | None:
    """(where, what) of the first part of value that a JSON round trip would change.

    `what` reads after "is": `a datetime, not a JSON value`. `depth` is the
    nesting level value sits at in its line: 2 for a record's field (the
    record is level 1). Iterative, so no value is too deep to explain.
    """
    stack: list[tuple[Any, str, int]] = [(value, where, depth)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, bool) or value is None:
            continue
        t = type(value)
        if t is str:
            if not _utf8(value):
                return (where, "a str with a lone surrogate, not valid UTF-8")
        elif t is int:
            if not -(2**63) <= value < 2**64:
                return (where, f"the integer {value}, out of the 64-bit range")
        elif t is float:
            if not math.isfinite(value):
                return (where, f"{value}, not a finite number")
        elif t is dict or t is list:
            if depth > MAX_DEPTH:
                return (where, f"nested more than {MAX_DEPTH} levels deep, counting the record itself")
            children: list[tuple[Any, str, int]] = []
            if t is dict:
                for k, v in value.items():
                    if type(k) is not str:
                        return (where, f"a dict with the key {k!r}, which is {a(type(k).__name__)}, not a str")
                    if not _utf8(k):
                        return (where, f"a dict with the key {k!r}, which has a lone surrogate, not valid UTF-8")
                    children.append((v, f"{where}.{k}", depth + 1))
            else:
                children = [(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
            stack.extend(reversed(children))  # depth first, in order: the first problem is reported
        else:
            return (where, f"{a(t.__name__)}, not a JSON value")
    return None


def a(noun: str) -> str:
    """noun with its indefinite article: `a datetime`, `an object`."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _utf8(s: str) -> bool:
    try:
        s.encode()
    except UnicodeEncodeError:  # a lone surrogate: orjson refuses it
        return False
    return True


def check_value(field: str, value: Any, *, tool: str | None = None, step: int | None = None) -> Any:
    """value as it reads back from a trace: a fresh copy nobody else holds.

    NotSerializable unless it survives a JSON round trip unchanged; `tool`
    and `step` name the step it belongs to in the message.
    """
    t = type(value)
    if t is bool or value is None:  # a str may hold a lone surrogate: it goes through the check
        return value
    try:  # the whole check runs in C; the Python walk below only explains a failure
        # inside a list, as inside its record: a value nested one level too deep for a line is refused here
        back = orjson.loads(orjson.dumps([value], default=refuse, option=DUMPS_OPTIONS))[0]
        if back == value:
            return back
    except TypeError:  # not JSON: the walk below finds where, and says what
        pass
    where, what = problem(value) or ("", "a value that does not come back equal from JSON")
    raise NotSerializable(field, where, what, tool=tool, step=step)


def encode(record: dict[str, Any], crc: int) -> tuple[bytes, int]:
    """The line for record, chained on crc; returns (line, its crc).

    NotSerializable, naming the field, when a value is not JSON or the line is too long.
    """
    try:
        body = orjson.dumps(record, default=refuse, option=DUMPS_OPTIONS)[:-1]  # a hot path
    except TypeError as e:  # a non-JSON value in a field nobody asked to check
        raise unstorable(record, e) from None
    crc = zlib.crc32(body, crc)
    line = body + b',"crc":"%08x"}\n' % crc  # one copy of body: faster than formatting it in
    if len(line) > MAX_LINE:
        raise NotSerializable(
            f"the {record['kind']} record", "", f"{len(line)} bytes long; a trace line holds at most {MAX_LINE}"
        )
    return line, crc


def since(start: float) -> float:
    """A record's `ts`: seconds since `start` (the header's `ts`), cut to the millisecond.

    Finer digits, or the epoch's ten, would cost bytes on every line. A whole
    number of milliseconds over 1000 is the double nearest that decimal, so it
    prints with at most three decimals (and costs less than round()).
    Journal._encode, the hot path, has this expression inline.
    """
    return int((time.time() - start) * 1000) / 1000


def encode_tail(record: dict[str, Any]) -> memoryview:
    """A record without its seq, as the bytes that follow `{"seq":N,` (and precede the crc); not copied."""
    try:
        body = orjson.dumps(record, default=refuse, option=DUMPS_OPTIONS)
    except TypeError as e:
        raise unstorable(record, e) from None
    if len(body) + 40 > MAX_LINE:
        raise NotSerializable(
            f"the {record['kind']} record", "", f"{len(body)} bytes long; a trace line holds at most {MAX_LINE}"
        )
    return memoryview(body)[1:-1]


def line_ok(line: bytes | memoryview, prev: int) -> bool:
    """Whether line (without its newline) ends with the crc of its bytes, chained on prev."""
    return line[-SUFFIX:] == b',"crc":"%08x"}' % zlib.crc32(line[:-SUFFIX], prev)


def unstorable(record: dict[str, Any], e: TypeError) -> NotSerializable:
    """Say which field of a record orjson refused, and where inside it."""
    for name, value in record.items():
        found = problem(value)
        if found:
            return NotSerializable(name, *found)
    return NotSerializable(f"the {record.get('kind')} record", "", f"refused by the JSON encoder ({e})")
