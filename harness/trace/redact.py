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

The defaults (`DEFAULT_RULES`) are the header names and JSON keys of
DEFAULT_KEYS (taken from the lists secret scanners, error trackers and HTTP
recording libraries maintain, each source named beside it), the URL and
form parameters of FORM_NAMES, and common token shapes (OpenAI/Anthropic
`sk-...`, `Bearer ...`, AWS access key ids `AKIA...`, GitHub `ghp_...` and
friends, Slack `xox?-...`, Google `AIza...`). Rules given by a user are
added to the defaults unless `defaults=False`.

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

import functools
import itertools
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Union

import orjson

from .._errors import HarnessError, RedactionRuleError

MARKER = "[REDACTED]"
"""What a secret is replaced with in the trace (`Redaction(marker=...)` sets another)."""


def _spellings(*names: str) -> tuple[str, ...]:
    """Each name (words joined by `_`) as snake_case, kebab-case and joined (camelCase lowered): a key
    rule is compared case-insensitively, so `client_secret` also stands for `client-secret`, `clientSecret`."""
    out: dict[str, None] = {}
    for name in names:
        words = name.split("_")
        for spelling in ("_".join(words), "-".join(words), "".join(words)):
            out[spelling] = None
    return tuple(out)


# The header names and JSON keys whose value is replaced, whole. Taken from lists others maintain rather than grown
# one report at a time; each comes with where it is from (docs: "Secrets never reach the trace"):
# - HTTP's own credentials headers (RFC 9110, RFC 6265), which every recorder filters;
# - Sentry's SDK denylist, taken from Relay, its PII scrubber (sentry_sdk/scrubber.py DEFAULT_DENYLIST), except
#   the names that are not secrets (ip_address, session, remote_addr, x_forwarded_for);
# - detect-secrets' keyword list (Yelp, detect_secrets/plugins/keyword.py DENYLIST), except `pass` and `pwd`,
#   which JSON and environment dumps use for other things (a test's "pass": true, a shell's PWD);
# - the Azure SDK test proxy's default sanitizers, the recording library of the Azure SDKs (Azure/azure-sdk-tools,
#   test-proxy SanitizerDictionary.cs: its header sanitizers AZSDK2xxx and body keys AZSDK34xx), the secrets only
#   (it also scrubs ids and names for stable recordings), and not primaryKey/secondaryKey (a database's too);
# - the HAR sanitizers of Cloudflare and Google (har-sanitizer's default word lists), the secrets only;
# - the vendors' own header names: Azure API Management (Ocp-Apim-Subscription-Key), Cloudflare (X-Auth-Key),
#   GitLab (PRIVATE-TOKEN, JOB-TOKEN), AWS (X-Amz-Security-Token), Google (X-Goog-Api-Key).
DEFAULT_KEYS = _spellings(
    # HTTP
    "authorization", "proxy_authorization", "cookie", "set_cookie",
    # Sentry / Relay
    "password", "passwd", "secret", "api_key", "auth", "credentials", "mysql_pwd", "private_key", "token",
    "csrftoken", "sessionid", "x_csrftoken", "x_api_key", "csrf_token", "xsrf_token", "x_xsrf_token",
    # detect-secrets
    "app_key", "auth_key", "service_key", "application_key", "account_key", "db_key", "database_key", "client_key",
    "aws_secret_access_key", "db_pass", "priv_key", "privkey", "key_pass",
    # Azure SDK test proxy
    "api_key", "subscription_key", "x_ms_encryption_key", "supplementary_authorization",
    "x_ms_copy_source_authorization", "x_ms_file_rename_source_authorization", "aeg_sas_token", "aeg_sas_key",
    "access_token", "refresh_token", "application_secret", "connection_string", "admin_password",
    "administrator_login_password", "run_as_password", "access_sas", "decryption_key", "client_secret",
    "certificate_password", "account_key", "auth_header", "encrypted_credential", "credential", "function_key",
    "ssh_password", "acr_token", "client_assertion", "primary_master_key", "secondary_master_key",
    # the HAR sanitizers
    "id_token", "authenticity_token", "code_verifier",
    # vendors
    "ocp_apim_subscription_key", "x_auth_key", "x_auth_token", "x_access_token", "x_api_token", "private_token",
    "job_token", "x_amz_security_token", "x_goog_api_key",
    # harness's own since 0.1
    "auth_token", "session_token", "api_secret", "secret_key",
)  # fmt: skip
# a query or form parameter that holds a secret: in a URL (?name=, &name=) or starting a string (a form body).
# Compared as written (a URL's names are case-sensitive): OpenTelemetry's semantic conventions list the query keys
# `url.full` and `url.query` redact by default (AWSAccessKeyId, Signature, sig, X-Goog-Signature, X-Amz-Signature,
# X-Amz-Credential, X-Amz-Security-Token); the Azure SDK test proxy scrubs `sig` (a SAS signature, AZSDK1007),
# client_secret, client_assertion and token (AZSDK3001-3003); the HAR sanitizers code_verifier and
# authenticity_token; the rest are OAuth's (RFC 6749) and the usual names of an API key.
FORM_NAMES = (
    "api_key", "api-key", "apikey", "access_token", "refresh_token", "id_token", "client_secret", "password",
    "passwd", "token", "key", "secret", "client_assertion", "code_verifier", "authenticity_token", "sig",
    "AWSAccessKeyId", "Signature", "X-Goog-Signature", "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
    "awsaccesskeyid", "signature", "x-goog-signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token",
)  # fmt: skip


def _form_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """`name=value` where name is one of names and starts the string, or follows ?, & or a quote.

    It starts with the literal `=` (a search skips through text in C) and
    looks behind it, one fixed-width lookbehind per name length; `[a-z]=`
    first turns most other `=` away at once.
    """
    by_len: dict[int, list[str]] = {}
    for n in names:
        by_len.setdefault(len(n), []).append(re.escape(n))
    behind = "|".join(f'(?<=(?<![^?&"])(?:{"|".join(g)})=)' for g in by_len.values())
    return re.compile(f"=(?<=[a-z]=)(?:{behind})([\\w.~+/%\\-]+)")


# A URL's password (`scheme://user:password@host`: a DSN, `http://admin:pw@host/`): only the password goes. It
# starts with `://`, which every URL has, so its head is not searched for with the others: a text is searched
# for it only when it holds an `@` (_has_head).
USERINFO = re.compile(r"://[^\s/?#@:\"'<>\\]*:([^\s/?#@\"'<>\\]+)@")
_USERINFO = re.compile(USERINFO.pattern.encode())
# Each starts with a literal, so that a search skips through text in C; a lookbehind right after the
# literal stands for \b (a string's ends read the same in the value and in its JSON text: see _clean).
_HEADED = (
    re.compile(r"earer(?<=[Bb]earer)\s+([\w.~+/=\-]+)"),  # Bearer <token>: keeps the word
    # Basic <base64 of user:password>, not a word after it (one with a capital or a digit past its first letter)
    re.compile(r"asic(?<=\bBasic)\s+(?=.[a-z0-9+/]*[A-Z0-9+/])([A-Za-z0-9+/]{6,}={0,2})"),
    re.compile(r"sk-(?<!\wsk-)[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic (sk-ant-...), and look-alikes
    re.compile(r"A[KS]IA(?<!\wA[KS]IA)[0-9A-Z]{16}(?![0-9A-Za-z])"),  # AWS access key ids
    re.compile(r"gh[pousr]_(?<!\wgh._)[A-Za-z0-9]{30,}"),  # GitHub tokens
    re.compile(r"github_pat_(?<!\wgithub_pat_)[A-Za-z0-9_]{40,}"),
    re.compile(r"glpat-(?<!\wglpat-)[A-Za-z0-9_\-]{20,}"),  # GitLab personal access tokens
    re.compile(r"xox[abposr]-(?<!\wxox.-)[A-Za-z0-9\-]{10,}"),  # Slack
    re.compile(r"AIza(?<!\wAIza)[0-9A-Za-z_\-]{35}"),  # Google API keys
    _form_pattern(FORM_NAMES),  # api_key=..., ?token=..., &password=...
    # a JSON Web Token: header and payload are base64url JSON objects (`{"` is `eyJ`); the whole token goes
    re.compile(r"eyJ(?<![\w\-]eyJ)[A-Za-z0-9_\-]{2,}\.eyJ[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]*"),
    # a PEM private key (PKCS#1, PKCS#8, EC, OpenSSH, PGP): its body goes, its BEGIN and END lines stay
    re.compile(r"-----BEGIN(?:[A-Z0-9 ]{0,40})PRIVATE KEY(?: BLOCK)?-----([\s\S]+?)(?=-----END|\Z)"),
)
DEFAULT_PATTERNS = (*_HEADED, USERINFO)
DEFAULT_RULES: tuple[str | re.Pattern[str], ...] = (*DEFAULT_KEYS, *DEFAULT_PATTERNS)
# Keys whose object's every value is redacted, whatever its name: the extra headers and query parameters an SDK
# call adds (OpenAI's and Anthropic's `extra_headers=`, `extra_query=`; Pydantic AI's and the Agents SDK's model
# settings of those names), where a gateway's or a proxy's credentials go under names no list knows.
CONTAINERS = frozenset(_spellings("extra_headers", "extra_query"))
_CONTAINER_KEY = re.compile(rb'"extra[_\-]?(?:headers|query)":')
# Each default pattern's head (its text before the first group): letters, digits, `-`, `_` and `=` that any
# match starts with. A JSON text where none is found holds no match of any default pattern: one search instead
# of ten. JSON escapes none of those characters, so a head in a string stands verbatim in the text, escapes
# elsewhere or not (a newline in a file's content no longer sends the value to the walk).
_HEADS = re.compile("|".join(p.pattern.split("(", 1)[0] for p in _HEADED).encode())


def _spelled(head: str) -> list[bytes]:
    """Each text a head matches: `A[KS]IA` -> AKIA, ASIA (a head is literals and character classes)."""
    parts = re.findall(r"\[([^\]]+)\]|([^\[]+)", head)
    return ["".join(p).encode() for p in itertools.product(*(list(cls) if cls else [text] for cls, text in parts))]


# The same search over a long text, as substring searches (in C, each at memory speed): the regex tries its
# alternatives at every a, e, s, x... of a text (~15-50 MB/s on prose, slowest on a run of one of those letters),
# while `in` skips through it. Below _SHORT bytes the one regex call costs less than the many. Each text is
# looked for only when the text holds its rarer character (- or _) at all, and the texts of one head (xoxa-,
# xoxb-, ... of `xox[abposr]-`) only when the text holds what they start with (`xox`): one search, not six.
_SHORT = 256
_GATES = (b"-", b"_", b"")  # (b"" is in every text: no gate)
_BYTE = {b"-": ord("-"), b"_": ord("_")}  # a gate as an int: `45 in data` is a memchr, `b"-" in data` is not


def _family(texts: list[bytes]) -> tuple[bytes, tuple[bytes, ...]]:
    """The texts of one head as (what they all start with, the texts); (text, ()) for a head of one text."""
    if len(texts) == 1:
        return texts[0], ()
    n = 0
    while all(len(t) > n and t[n] == texts[0][n] for t in texts):
        n += 1
    return (texts[0][:n] if n >= 2 else b"", tuple(texts))


_FAMILIES = [_family(_spelled(p.pattern.split("(", 1)[0])) for p in _HEADED]
_GATED = tuple(
    (_BYTE.get(g), tuple(f for f in _FAMILIES if next(x for x in _GATES if x in (f[1][0] if f[1] else f[0])) == g))
    for g in _GATES
)


def _has_head(data: bytes) -> bool:
    """Whether data holds the head of a default pattern (_HEADS), searched as the length makes cheapest, or a
    URL's password (only where an `@` is)."""
    if 64 in data and _USERINFO.search(data) is not None:  # 64 is `@` (an int: memchr, ten times a b"@" search)
        return True
    if len(data) < _SHORT:
        return _HEADS.search(data) is not None
    for gate, families in _GATED:
        if gate is None or gate in data:
            for start, texts in families:
                if start in data:
                    if not texts:
                        return True
                    for t in texts:
                        if t in data:
                            return True
    return False


Rule = Union[str, "re.Pattern[str]"]


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
    # JSON text inside a string is read as JSON (0.4.0); off for a trace written before, whose records a resume,
    # rerun or check must redact as they were written (as_of)
    json_text: bool = field(default=True, repr=False)
    _keys: frozenset[str] = field(init=False, repr=False, compare=False)
    _paths: tuple[tuple[str | int, ...], ...] = field(init=False, repr=False, compare=False)
    _patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _tails: tuple[tuple[int, frozenset[bytes]], ...] = field(init=False, repr=False, compare=False)
    _extra: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
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
        # the last five characters of each key, by length: a key ends right before `":` in a JSON text; a hit
        # may be a false alarm (the walk then changes nothing), a miss is certain. A four-letter key is looked
        # up with the quote that opens it (`"auth`), so that the defaults need one pass over the keys, not two
        tails: dict[int, set[bytes]] = {}
        for k in keys:
            tail = (k if len(k) != 4 else f'"{k}')[-5:]
            tails.setdefault(len(tail), set()).add(tail.encode())
        object.__setattr__(self, "_tails", tuple((n, frozenset(t)) for n, t in sorted(tails.items())))
        # the default patterns are searched for with one search of their heads (TRIGGER); others one by one
        # (a default pattern given as a rule with defaults=False is searched on its own)
        object.__setattr__(self, "_extra", tuple(p for p in patterns if p not in DEFAULT_PATTERNS or not self.defaults))
        object.__setattr__(self, "_fast", _fast(keys, patterns))

    def as_of(self, header: Any) -> Redaction:
        """These rules as the harness that wrote a trace (its header's `env.harness`) applied them: without the
        reading of JSON text inside strings for a trace of 0.3.x or before (its requests were matched so)."""
        written = ((header or {}).get("env") or {}).get("harness")
        found = re.match(r"(\d+)\.(\d+)\.", written) if isinstance(written, str) else None
        if found is None or (int(found[1]), int(found[2])) >= (0, 4) or not self.json_text:
            return self
        return replace(self, json_text=False)

    @property
    def paths(self) -> bool:
        """Whether there are JSON path rules (applied whatever a search of the text finds)."""
        return bool(self._paths)

    @classmethod
    def of(cls, redact: Redaction | Iterable[Rule] | None) -> Redaction:
        """The Redaction an option `redact=` stands for: None is the defaults, a list adds to them; the
        project's `[tool.harness] secret_headers` (project_rules()) are added to both. A Redaction is taken as
        it is (full control)."""
        if isinstance(redact, Redaction):
            return redact
        project = project_rules()
        if redact is None:
            return cls(project) if project else DEFAULT
        if isinstance(redact, str | re.Pattern):
            return cls((redact, *project))
        try:
            return cls((*tuple(redact), *project))
        except TypeError:
            raise RedactionRuleError(redact, "redact= takes a list of rules or a harness.Redaction") from None

    def header(self) -> dict[str, Any] | None:
        """The rules as a trace header records them (its `redact` field); None for the defaults alone.

        Key names, JSON paths and pattern sources (with their flags) are not
        secrets: a rerun or fork reads them back (`from_header`).
        """
        if not self.rules and self.defaults and self.marker == MARKER:
            return None
        out: dict[str, Any] = {
            "rules": [r for r in self.rules if isinstance(r, str)],
            "patterns": [[p.pattern, p.flags] for p in self.rules if isinstance(p, re.Pattern)],
            "defaults": self.defaults,
        }
        if self.marker != MARKER:
            out["marker"] = self.marker
        return out

    @classmethod
    def from_header(cls, recorded: Any, path: str) -> Redaction:
        """The Redaction a trace header's `redact` field records (the defaults when there is none)."""
        if recorded is None:
            return DEFAULT
        try:
            patterns = tuple(re.compile(source, flags) for source, flags in recorded["patterns"])
            return cls(
                (*recorded["rules"], *patterns), defaults=recorded["defaults"], marker=recorded.get("marker", MARKER)
            )
        except (KeyError, TypeError, ValueError, re.error, HarnessError) as e:
            raise HarnessError(
                f"{path}: the header's redact field {recorded!r:.200} cannot be read back ({e}); "
                "it holds the redaction rules the run was recorded with: pass them again with redact="
            ) from None

    def plus(self, more: Redaction | Iterable[Rule] | None) -> Redaction:
        """These rules with more added (a Redaction given whole replaces them); `redact=` of rerun and fork."""
        if more is None:
            return self
        if isinstance(more, Redaction):
            return more
        extra = Redaction.of(more).rules
        if not extra:
            return self
        return Redaction((*self.rules, *extra), defaults=self.defaults, marker=self.marker, json_text=self.json_text)

    def without(self, *rules: Rule) -> Redaction:
        """These rules, the defaults among them, less `rules`: `Redaction().without("token")` keeps OpenAI's
        logprobs, whose tokens are named `token`. A name is compared as a key rule is (in any case)."""
        gone = {r.lower() if isinstance(r, str) else r for r in rules}
        every = (*DEFAULT_RULES, *self.rules) if self.defaults else self.rules
        kept = tuple(r for r in every if (r.lower() if isinstance(r, str) else r) not in gone)
        return Redaction(kept, defaults=False, marker=self.marker, json_text=self.json_text)

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
            out = at(out, path, self.marker)
        return out

    def _clean(self, value: Any) -> bool:
        """True when no key rule and no pattern can apply anywhere in value: a few searches, in C."""
        if value is None or isinstance(value, bool | int | float) or not (self._keys or self._patterns):
            return True
        if not self._fast:
            return False
        try:
            data = orjson.dumps(value)
        except TypeError:  # not JSON (the caller's check will say so): walk it
            return False
        return self.clean_json(data)

    def clean_json(self, data: bytes) -> bool:
        """True when no key rule and no pattern can apply to any key or string of the JSON text data.

        A key ends right before `":`: its last five characters are looked up.
        The default patterns are cleared by one search for their heads
        (_HEADS). A user's pattern is searched in the text when the text has
        no backslash: then every string stands verbatim between quotes, and a
        quote reads like a string's end to a pattern that does not look at the
        ends (see _fast), so a match in a string is a match in the text. JSON
        paths are not searched for: they are applied whatever this says.
        """
        if not self._fast:
            return not (self._keys or self._patterns)
        if self.defaults and _has_head(data):
            return False
        if self._tails:
            # (a non-ASCII key may lower to a rule's: the Kelvin sign in api_\u212aey lowers to k)
            low = data.lower() if data.isascii() else data.decode().lower().encode()
            if 92 in low and self.json_text:  # a backslash (memchr; a two-byte search costs more): JSON text?
                # its keys end in \": there (\\\": in JSON text inside that: pairs of backslashes go first), or
                # \" : (a pretty printer's); replaces, not a regex, which costs several times more
                low = low.replace(b"\\\\", b"").replace(b'\\"', b'"').replace(b'" :', b'":')
            if self.defaults and b'"extra' in low and _CONTAINER_KEY.search(low) is not None:
                return False
            befores = low.split(b'":')
            del befores[-1]  # (what follows the last key)
            for n, tails in self._tails:
                for before in befores:
                    if before[-n:] in tails:
                        return False
        if self._extra:
            if b"\\" in data:  # an escape: the text no longer reads as the value does, for any pattern
                return False
            text = data.decode()
            for p in self._extra:  # a loop: all() over a generator costs more here
                if p.search(text) is not None:
                    return False
        return True

    def record(self, text: bytes, record: dict[str, Any], names: Iterable[str]) -> dict[str, Any] | None:
        """record with its fields `names` redacted, or None when none changed.

        text is the part of record's JSON text that holds those fields
        (`user_text`): the search for anything to redact runs on it, and the
        fields are walked only on a hit. JSON paths start at each field's value.
        """
        if not (self._keys or self._patterns or self._paths):
            return None
        walk = not self.clean_json(text)
        if not walk and not self._paths:
            return None
        out = None
        for name in names:
            if name in record:
                v = record[name]
                r = self._apply(v, walk=walk)
                if r is not v:
                    if out is None:
                        out = dict(record)
                    out[name] = r
        return out

    def name(self, s: Any) -> Any:
        """A name (a step's, an artifact's) with what the patterns match replaced, as in any string.

        Key rules and JSON paths address values inside objects, which a name
        is not. Cheap when no pattern can match: one search for the default
        patterns' heads, then the user's patterns (a name is written on every
        step).
        """
        if type(s) is not str or not self._patterns:
            return s
        if self.defaults and _has_head(s.encode()):
            return self.text(s)
        for p in self._extra:  # (a loop: all() over a generator costs more on every step)
            if p.search(s) is not None:
                return self.text(s)
        return s

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
            if value[:1] in ("{", "[") and self._keys and self.json_text:  # JSON text (an MCP tool's text
                inner = _json_text(value)  # content, a model's arguments): its keys redacted as an object's
                if inner is not None and (walked := self._walk(inner)) is not inner:
                    return orjson.dumps(walked).decode()
            return self.text(value) if self._patterns else value
        if isinstance(value, dict):
            out = None
            for k, v in value.items():
                r: Any
                if isinstance(k, str) and k.lower() in self._keys and v is not None:
                    r = self.marker
                elif self.defaults and type(v) is dict and isinstance(k, str) and k.lower() in CONTAINERS:
                    every = {n: self.marker if x is not None else x for n, x in v.items()}
                    r = v if every == v else every
                else:
                    r = self._walk(v)
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


DROP: Any = object()  # at(): remove what the path reaches instead of replacing it


def _json_text(s: str) -> Any:
    """The object or array a str holds as JSON text, else None."""
    try:
        value = orjson.loads(s)
    except orjson.JSONDecodeError:
        try:  # Python's json.dumps writes NaN and Infinity (a float it holds), which orjson does not read
            value = json.loads(s)
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict | list) else None


def at(value: Any, path: Sequence[str | int], put: Any = DROP) -> Any:
    """value with what path reaches replaced by `put`, or removed with DROP; a copy along the way, never in place.

    A path is what parse_path() returns: keys, list indexes (negative from the
    end) and "*" for every key or item. value itself when the path reaches nothing.
    """
    step, rest = path[0], path[1:]
    if isinstance(value, dict):
        keys = list(value) if step == "*" else [step] if step in value else []
        if not keys:
            return value
        out = dict(value)
        for k in keys:
            if rest:
                out[k] = at(value[k], rest, put)
            elif put is DROP:
                del out[k]
            else:
                out[k] = put
        return out
    if isinstance(value, list):
        if step == "*":
            idx = range(len(value))
        elif isinstance(step, int) and -len(value) <= step < len(value):
            idx = range(step % len(value), step % len(value) + 1)
        else:
            return value
        if not rest and put is DROP:
            return [v for i, v in enumerate(value) if i not in idx]
        lst = list(value)
        for i in idx:
            lst[i] = at(value[i], rest, put) if rest else put
        return lst
    return value


def user_text(data: bytes, names: Sequence[str]) -> bytes:
    """The part of a record's JSON text data that holds the fields names: from the first of them to `ts`.

    A JSON text names a key `"name":` only as a key, so the first such text
    is at or before the field; `ts` is a record's last field (its checksum
    follows).
    """
    if len(names) == 1:  # the common case, without the loop
        start = data.find(_key(names[0]))
        if start < 0:
            return b""
    else:
        start = len(data)
        for name in names:
            at = data.find(_key(name))
            if 0 <= at < start:
                start = at
    end = data.rfind(b',"ts":', start)
    return data[start:end] if end >= 0 else data[start:]


@functools.cache
def _key(name: str) -> bytes:
    """How a record field's name reads in its line: `"name":`."""
    return b'"%s":' % name.encode()


_UNSAFE = re.compile(r"\^|\$|\\[AZz]|\(\?[=!<]|\\\d|\(\?P=")  # could depend on where a string starts or ends


def _fast(keys: Iterable[str], patterns: Iterable[re.Pattern[str]]) -> bool:
    """Whether _clean may clear a value by searching its JSON text (else every value is walked)."""
    if any(not k.isascii() or not k.isprintable() or '"' in k or "\\" in k for k in keys):
        return False
    return all(p in DEFAULT_PATTERNS or not _UNSAFE.search(p.pattern) for p in patterns)


DEFAULT = Redaction()


def project_rules(start: str | None = None) -> tuple[str, ...]:
    """The header names `[tool.harness] secret_headers` of the nearest pyproject.toml at or above `start` (the
    working directory) lists, each a key rule; () when there is none. HarnessError naming the file for a
    setting that is not a list of names."""
    here = os.path.abspath(start or os.getcwd())
    while True:
        candidate = os.path.join(here, "pyproject.toml")
        try:
            changed = os.stat(candidate).st_mtime_ns
        except OSError:
            parent = os.path.dirname(here)
            if parent == here:
                return ()
            here = parent
            continue
        return _secret_headers(candidate, changed)


@functools.lru_cache(maxsize=16)
def _secret_headers(path: str, changed: int) -> tuple[str, ...]:
    """pyproject.toml at path's `[tool.harness] secret_headers` (read again when the file changed)."""
    import tomllib  # only when a project is read

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise HarnessError(f"{path}: cannot read it: {e}") from None
    names = data.get("tool", {}).get("harness", {}).get("secret_headers", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n and not n.startswith("$") for n in names):
        raise HarnessError(
            f"{path}: [tool.harness] secret_headers must be a list of header names "
            f'(secret_headers = ["X-Internal-Auth"]), not {names!r}'
        )
    return tuple(names)
