"""Redaction: secrets are replaced by a fixed marker before anything is written.

A `Redaction` holds three kinds of rules, given as one list:
- a plain string is a key name (a header, or a key of any JSON object, at
  any depth; compared case-insensitively): its value becomes the marker;
- a string starting with `$` is a JSON path from the root of each stored
  value (`$.body.user.token`, `$.messages[0].content`, `$.items[*].secret`,
  `$.headers.*`): the value there becomes the marker;
- a compiled regular expression (`re.compile(...)`) is searched in every
  string: each match is replaced by the marker, or only its first group when
  it has groups (so `Bearer (\\S+)` keeps the word Bearer).

The defaults (`DEFAULT_RULES`) cover the Authorization, Proxy-Authorization,
api-key / x-api-key, cookie / set-cookie headers and common token shapes
(OpenAI/Anthropic `sk-...`, `Bearer ...`, AWS access key ids `AKIA...`,
GitHub `ghp_...` and friends, Slack `xox?-...`, Google `AIza...`, and
`api_key=`/`token=` query parameters). Rules given by a user are added to the
defaults unless `defaults=False`.

Rules kept here:
- redaction is a pure function of the value: it returns a copy where
  something changed and never touches its input;
- it is idempotent (redacting twice gives the same value), so a value read
  back from a trace redacts to itself;
- most values hold no secret: a few searches over the value's JSON text
  (in C) clear them without a walk; a user pattern whose match could depend
  on where a string starts or ends (anchors, lookarounds, backreferences)
  turns that shortcut off, never on;
- the Session redacts a request before hashing it, so a rerun that sends
  another key still matches the recording.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import orjson

from ._errors import HarnessError

MARKER = "[REDACTED]"

DEFAULT_KEYS = (
    "authorization", "proxy-authorization", "api-key", "x-api-key", "x-goog-api-key", "api_key", "apikey",
    "cookie", "set-cookie",
)  # fmt: skip
# Each starts with a literal, so that a search skips through text in C; a lookbehind right after the
# literal stands for \b (a string's ends read the same in the value and in its JSON text: see _clean).
DEFAULT_PATTERNS = (
    re.compile(r"earer(?<=[Bb]earer)\s+([\w.~+/=\-]+)"),  # Bearer <token>: keeps the word
    re.compile(r"sk-(?<!\wsk-)[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic (sk-ant-...), and look-alikes
    re.compile(r"A[KS]IA(?<!\wA[KS]IA)[0-9A-Z]{16}(?![0-9A-Za-z])"),  # AWS access key ids
    re.compile(r"gh[pousr]_(?<!\wgh._)[A-Za-z0-9]{30,}"),  # GitHub tokens
    re.compile(r"github_pat_(?<!\wgithub_pat_)[A-Za-z0-9_]{40,}"),
    re.compile(r"xox[abposr]-(?<!\wxox.-)[A-Za-z0-9\-]{10,}"),  # Slack
    re.compile(r"AIza(?<!\wAIza)[0-9A-Za-z_\-]{35}"),  # Google API keys
    re.compile(r"\?(?:api_key|api-key|apikey|access_token|token|key|secret)=([\w.~+/%\-]+)"),  # in a URL
    re.compile(r"&(?:api_key|api-key|apikey|access_token|token|key|secret)=([\w.~+/%\-]+)"),
)
DEFAULT_RULES: tuple[str | re.Pattern[str], ...] = (*DEFAULT_KEYS, *DEFAULT_PATTERNS)

Rule = Union[str, "re.Pattern[str]"]


class RedactionRuleError(HarnessError, ValueError):
    """A redaction rule that cannot be used; `rule` is the rule, the message says what is wrong."""

    def __init__(self, rule: Any, problem: str):
        self.rule, self.problem = rule, problem
        super().__init__(
            f"redaction rule {rule!r}: {problem}. A rule is a key name ('x-api-key'), a JSON path "
            "('$.body.user.token', '$.items[*].secret') or a compiled regular expression (re.compile(...))."
        )


_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+|\*|'[^']*'|\"[^\"]*\")\]")


def parse_path(path: str) -> tuple[str | int, ...]:
    """`$.a[0].b[*]` -> ("a", 0, "b", "*"); RedactionRuleError when it is not such a path."""
    if not path.startswith("$"):
        raise RedactionRuleError(path, "a JSON path starts with $")
    steps: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            raise RedactionRuleError(path, f"cannot read the path at character {pos + 1} ({path[pos:]!r})")
        name, index = m.group(1), m.group(2)
        if name is not None:
            steps.append(name)
        elif index == "*":
            steps.append("*")
        elif index[0] in "'\"":
            steps.append(index[1:-1])
        else:
            steps.append(int(index))
        pos = m.end()
    if not steps:
        raise RedactionRuleError(path, "the path names no field ($ alone would redact the whole value)")
    return tuple(steps)


@dataclass(frozen=True, slots=True)
class Redaction:
    """What to redact before a value is written. See the module docstring for the rules."""

    rules: tuple[Rule, ...] = ()
    defaults: bool = True
    marker: str = MARKER
    _keys: frozenset[str] = field(init=False, repr=False, compare=False)
    _paths: tuple[tuple[str | int, ...], ...] = field(init=False, repr=False, compare=False)
    _patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _marks: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _fast: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rules, tuple):
            object.__setattr__(self, "rules", tuple(self.rules))
        if not isinstance(self.marker, str) or not self.marker:
            raise RedactionRuleError(self.marker, "the marker must be a non-empty str")
        keys: set[str] = set()
        paths: list[tuple[str | int, ...]] = []
        patterns: list[re.Pattern[str]] = []
        for rule in (*DEFAULT_RULES, *self.rules) if self.defaults else self.rules:
            if isinstance(rule, re.Pattern):
                if not isinstance(rule.pattern, str):
                    raise RedactionRuleError(rule, "the pattern must be a str pattern, not bytes")
                if rule.search(self.marker):
                    raise RedactionRuleError(rule, f"it matches the marker {self.marker!r} itself")
                patterns.append(rule)
            elif isinstance(rule, str) and rule.startswith("$"):
                paths.append(parse_path(rule))
            elif isinstance(rule, str) and rule:
                keys.add(rule.lower())
            else:
                raise RedactionRuleError(rule, "not a non-empty str or a compiled regular expression")
        object.__setattr__(self, "_keys", frozenset(keys))
        object.__setattr__(self, "_paths", tuple(paths))
        object.__setattr__(self, "_patterns", tuple(patterns))
        marks = sorted((f'{k}":' for k in keys), key=len)  # a mark that ends another one finds both
        object.__setattr__(self, "_marks", tuple(m for i, m in enumerate(marks) if not m.endswith(tuple(marks[:i]))))
        object.__setattr__(self, "_fast", _fast(keys, patterns))

    @classmethod
    def of(cls, redact: Redaction | Iterable[Rule] | None) -> Redaction:
        """The Redaction an option `redact=` stands for: None is the defaults, a list adds to them."""
        if redact is None:
            return DEFAULT
        if isinstance(redact, Redaction):
            return redact
        if isinstance(redact, str | re.Pattern):
            return cls((redact,))
        try:
            return cls(tuple(redact))
        except TypeError:
            raise RedactionRuleError(redact, "redact= takes a list of rules or a harness.Redaction") from None

    def __call__(self, value: Any) -> Any:
        """value with every secret replaced by the marker (value itself when nothing changed)."""
        return self._apply(value, walk=not self._clean(value))

    def fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        """A record's fields with each value redacted on its own (JSON paths start at each value)."""
        walk = bool(fields) and not self._clean(fields)
        if not walk and not self._paths:
            return fields
        out = None
        for k, v in fields.items():
            r = self._apply(v, walk=walk)
            if r is not v:
                if out is None:
                    out = dict(fields)
                out[k] = r
        return fields if out is None else out

    def _apply(self, value: Any, *, walk: bool) -> Any:
        if value is None or isinstance(value, bool | int | float):
            return value
        out = self._walk(value) if walk else value
        for path in self._paths:
            out = self._at(out, path)
        return out

    def _clean(self, value: Any) -> bool:
        """True when no key rule and no pattern can apply anywhere in value: a few searches, in C.

        In a JSON text without a backslash every string stands verbatim between
        quotes, and a quote reads like a string's end to a pattern that does not
        look at the ends (see _fast): a match in a string is a match in the text.
        """
        if value is None or isinstance(value, bool | int | float) or not (self._keys or self._patterns):
            return True
        if not self._fast:
            return False
        try:
            text = orjson.dumps(value).decode()
        except TypeError:  # not JSON (the caller's check will say so): walk it
            return False
        if "\\" in text:
            return False
        if self._marks:
            low = text.lower()
            for m in self._marks:  # plain loops: a generator costs more than the searches
                if m in low:
                    return False
        for p in self._patterns:  # noqa: SIM110  # a loop: all() over a generator costs more here
            if p.search(text) is not None:
                return False
        return True

    def text(self, s: str) -> str:
        for p in self._patterns:
            s = p.sub(self._group, s) if p.groups else p.sub(self.marker, s)
        return s

    def _group(self, m: re.Match[str]) -> str:
        """The match with its first group replaced by the marker."""
        if m.group(1) is None:
            return m.group(0)
        start, end = m.start(1) - m.start(), m.end(1) - m.start()
        return m.group(0)[:start] + self.marker + m.group(0)[end:]

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value) if self._patterns else value
        if isinstance(value, dict):
            out = None
            for k, v in value.items():
                r = self.marker if isinstance(k, str) and k.lower() in self._keys and v is not None else self._walk(v)
                if r is not v:
                    if out is None:
                        out = dict(value)
                    out[k] = r
            return value if out is None else out
        if isinstance(value, list):
            changed = None
            for i, v in enumerate(value):
                r = self._walk(v)
                if r is not v:
                    if changed is None:
                        changed = list(value)
                    changed[i] = r
            return value if changed is None else changed
        return value

    def _at(self, value: Any, path: Sequence[str | int]) -> Any:
        """value with what path reaches replaced by the marker (copies along the way, never in place)."""
        if not path:
            return self.marker
        step, rest = path[0], path[1:]
        if isinstance(value, dict):
            keys = list(value) if step == "*" else [step] if step in value else []
            if not keys:
                return value
            out = dict(value)
            for k in keys:
                out[k] = self._at(value[k], rest)
            return out
        if isinstance(value, list):
            if step == "*":
                idx = range(len(value))
            elif isinstance(step, int) and -len(value) <= step < len(value):
                idx = range(step % len(value), step % len(value) + 1)
            else:
                return value
            lst = list(value)
            for i in idx:
                lst[i] = self._at(value[i], rest)
            return lst
        return value


_UNSAFE = re.compile(r"\^|\$|\\[AZz]|\(\?[=!<]|\\\d|\(\?P=")  # could depend on where a string starts or ends


def _fast(keys: Iterable[str], patterns: Iterable[re.Pattern[str]]) -> bool:
    """Whether _clean may clear a value by searching its JSON text (else every value is walked)."""
    if any(not k.isascii() or not k.isprintable() or '"' in k or "\\" in k for k in keys):
        return False
    return all(p in DEFAULT_PATTERNS or not _UNSAFE.search(p.pattern) for p in patterns)


DEFAULT = Redaction()
