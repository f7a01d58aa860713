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
- the Session redacts a request before hashing it, so a rerun that sends
  another key still matches the recording.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from ._errors import HarnessError

MARKER = "[REDACTED]"

DEFAULT_KEYS = (
    "authorization", "proxy-authorization", "api-key", "x-api-key", "x-goog-api-key", "api_key", "apikey",
    "cookie", "set-cookie",
)  # fmt: skip
DEFAULT_PATTERNS = (
    re.compile(r"\bBearer\s+([^\s\"',;]+)", re.IGNORECASE),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic (sk-ant-...), and look-alikes
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),  # Slack
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),  # Google API keys
    re.compile(r"[?&](?:api[_-]?key|access_token|token|key|secret)=([^&#\s\"']+)", re.IGNORECASE),
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
        if value is None or isinstance(value, bool | int | float):
            return value
        out = self._walk(value)
        for path in self._paths:
            out = self._at(out, path)
        return out

    def fields(self, fields: dict[str, Any]) -> dict[str, Any]:
        """A record's fields with each value redacted on its own (JSON paths start at each value)."""
        out = None
        for k, v in fields.items():
            r = self(v)
            if r is not v:
                if out is None:
                    out = dict(fields)
                out[k] = r
        return fields if out is None else out

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


DEFAULT = Redaction()
