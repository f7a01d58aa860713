"""Field paths: how goldens, diffs and forks name fields of a record or of a recorded value.

A path is steps joined by dots, list steps in brackets:

    request.url                      key `url` of the object at key `request`
    response.body.usage              three keys down
    response.headers.x-ratelimit-*   every key that matches the glob (`*` stands for any characters)
    *.id                             key `id` of every value one level down (any key, any list item)
    **.created                       key `created` at any depth (`**`: zero or more levels)
    body.messages[0].content         item 0 of a list (`[-1]`: the last)
    choices[*].message               every item of a list
    headers["x.y"]                   a key with any characters, quoted ("..." or '...')

A key is any characters but `.`, `[`, `]` (quote one that has them); a key
with `*` in it is a glob. Paths that name many fields (`*`, `**`, `[*]`, a
glob) are for ignoring (`mark`); a path that changes a value (`put`) names
one field, which must exist.

Rules kept here:
- pure functions: a value is never changed in place; what changes is copied
  along the path, the rest is shared;
- a path that reaches nothing marks nothing (ignoring is a filter), while
  `put` to a field that is not there raises FieldPathError naming the path
  and what the value holds there instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import FieldPathError

MARKER = "<ignored>"  # what an ignored field reads in a golden and a diff

# a step: `.key`, `key` (the first), `[n]`, `[*]`, `["quoted"]` / `['quoted']`
_STEP = re.compile(r"""(\.|^)([^.\[\]]+)|\[(-?\d+|\*)\]|\[("(?:[^"\\]|\\.)*"|'[^']*')\]""")

Step = tuple[str, Any]  # ("key", name), ("glob", Glob), ("any", None), ("deep", None), ("index", n), ("items", None)
Path = tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class Glob:
    """A key pattern where `*` stands for any characters (none included) and every other character is itself.

    Read once into the literal parts between the stars. `fullmatch` places
    them left to right, each at its first place after the one before (the
    first part at the start, the last at the end): a star never gives back
    what it took, so a match takes time linear in the key for each part, never
    the exponential backtracking of a regex with many `.*`. Leftmost placement
    is enough because a star after a part can absorb anything that a later
    placement of that part would have skipped.
    """

    parts: tuple[str, ...]  # the text between stars: `x-*-id` is ("x-", "-id"); one part: no star

    @classmethod
    def of(cls, pattern: str) -> Glob:
        return cls(tuple(pattern.split("*")))

    def fullmatch(self, key: str) -> bool:
        if len(self.parts) == 1:
            return key == self.parts[0]
        first, *middle, last = self.parts
        if len(key) < len(first) + len(last) or not key.startswith(first) or not key.endswith(last):
            return False
        pos, end = len(first), len(key) - len(last)
        for part in middle:
            found = key.find(part, pos, end)
            if found < 0:
                return False
            pos = found + len(part)
        return True


def parse(path: str) -> Path:
    """The steps of a path (see the module docstring); FieldPathError naming the character it cannot read."""
    if not isinstance(path, str) or not path:
        raise FieldPathError(str(path), "a path is a non-empty string such as 'request.url' or 'response.body.usage'")
    steps: list[Step] = []
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None or (pos == 0 and m.group(1) == "."):
            shown = path[pos:]
            raise FieldPathError(path, f"cannot read it at character {pos + 1} ({shown!r}); steps are joined by dots")
        key, index, quoted = m.group(2), m.group(3), m.group(4)
        if key is not None:
            if key == "**":
                steps.append(("deep", None))
            elif key == "*":
                steps.append(("any", None))
            elif "*" in key:
                steps.append(("glob", Glob.of(key)))
            else:
                steps.append(("key", key))
        elif index is not None:
            steps.append(("items", None) if index == "*" else ("index", int(index)))
        else:
            body = quoted[1:-1]
            steps.append(("key", re.sub(r"\\(.)", r"\1", body) if quoted[0] == '"' else body))
        pos = m.end()
    if steps[-1][0] == "deep":
        raise FieldPathError(path, "`**` needs a step after it (`**.id`): alone it would name every field")
    return tuple(steps)


def mark(value: Any, path: Path, marker: Any = MARKER) -> Any:
    """value with every field the path reaches replaced by marker; value itself when it reaches none."""
    if not path:
        return marker
    kind, arg = path[0]
    rest = path[1:]
    if kind == "deep":  # zero levels here, then one level down with `**` still ahead
        here = mark(value, rest, marker)
        return _each(here, lambda child: mark(child, path, marker), lambda _: True)
    if isinstance(value, dict):
        if kind == "key":
            wanted: Any = lambda k: k == arg  # noqa: E731 - one of several small predicates
        elif kind == "glob":
            wanted = lambda k: bool(arg.fullmatch(k))  # noqa: E731
        elif kind == "any":
            wanted = lambda k: True  # noqa: E731
        else:
            return value
        return _each(value, lambda child: mark(child, rest, marker), wanted)
    if isinstance(value, list):
        if kind in ("any", "items"):
            return _each(value, lambda child: mark(child, rest, marker), lambda _: True)
        if kind == "index" and -len(value) <= arg < len(value):
            n = arg % len(value)
            return _each(value, lambda child: mark(child, rest, marker), lambda i: i == n)
    return value


def _each(value: Any, change: Any, wanted: Any) -> Any:
    """value with change() applied to the children whose key (or index) is wanted; a copy only when one changed."""
    if not isinstance(value, dict | list):
        return value
    out: Any = None
    for k, child in value.items() if isinstance(value, dict) else enumerate(value):
        if wanted(k):
            new = change(child)
            if new is not child:
                out = (dict(value) if isinstance(value, dict) else list(value)) if out is None else out
                out[k] = new
    return value if out is None else out


def put(value: Any, path: str, new: Any, *, what: str = "the value") -> Any:
    """value with the one field at path replaced by new (a copy along the path).

    FieldPathError when the path names many fields (`*`, a glob) or a field
    that is not there, saying what `what` holds where the path stops.
    """
    steps = parse(path)
    many = next((s for s in steps if s[0] not in ("key", "index")), None)
    if many is not None:
        raise FieldPathError(path, "a path that sets a value names one field: no `*`, `**`, `[*]` or glob")
    return _put(value, steps, new, path, what, 0)


def _put(value: Any, steps: Path, new: Any, path: str, what: str, depth: int) -> Any:
    if depth == len(steps):
        return new
    kind, arg = steps[depth]
    where = f"{_shown(steps[:depth])} in {what}" if depth else what
    if kind == "key":
        if not isinstance(value, dict) or arg not in value:
            raise FieldPathError(path, f"{where} has no key {arg!r}: it is {describe(value)}")
        out = dict(value)
        out[arg] = _put(value[arg], steps, new, path, what, depth + 1)
        return out
    if not isinstance(value, list) or not -len(value) <= arg < len(value):
        raise FieldPathError(path, f"{where} has no item [{arg}]: it is {describe(value)}")
    items = list(value)
    items[arg] = _put(value[arg], steps, new, path, what, depth + 1)
    return items


def _shown(steps: Path) -> str:
    out = ""
    for kind, arg in steps:
        out += f"[{arg}]" if kind == "index" else (f".{arg}" if out else str(arg))
    return out


def describe(value: Any) -> str:
    """What a value is, in a few words: `an object with keys status, headers, stream`, `a list of 3 items`."""
    if isinstance(value, Mapping):
        keys = list(value)
        if not keys:
            return "an empty object"
        shown = ", ".join(str(k) for k in keys[:8]) + (", ..." if len(keys) > 8 else "")
        return f"an object with keys {shown}"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'' if len(value) == 1 else 's'}"
    if value is None:
        return "null"
    return f"a {type(value).__name__} ({str(value)[:40]!r})" if isinstance(value, str) else f"{value!r}"
