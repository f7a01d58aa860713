"""Kept secrets: what redaction takes out of a value a resume may serve, encrypted in a sidecar beside the trace.

A secret in an arg or a request is redacted and that is all: live code
computes it again on resume. A secret in a value a resume serves (a tool
call's `result`, a crossing's `response`, a reconcile's `result`: SERVED)
would reach live code as the marker, so the journal also keeps it, encrypted,
in `<trace>.secrets`: one JSON line per value, appended before the record's
own line is written,

    {"seq": 7, "field": "result", "digest": "<sha256 of the value as written>", "key": "<key id>", "box": "<base64>"}

where box is AES-256-GCM (nonce, then ciphertext and tag) of the JSON list
of `[path, secret]` pairs redaction replaced, with the seq, the field and
the digest as associated data. The trace keeps the marker: goldens, diffs,
show, bundles and the viewer never see the secret, and never the sidecar.
A resume, rerun or fork reads it (`Vault.reveal`) and serves the real value.

The key lives outside the runs folder: `$HARNESS_SECRET_KEY` (urlsafe
base64 of 32 bytes), else `$XDG_CONFIG_HOME/harness/secret.key` (or
`~/.config/harness/secret.key`), made with mode 0600 the first time a
secret is kept. The cipher is `cryptography`'s AESGCM, the optional extra
`secrets`: without it a secret is redacted only (as before), and a resume
that needs one refuses with MissingExtra.

Guarantees: the sidecar holds no secret in clear; an entry is bound to its
record (seq, field and the digest of the redacted value: a line left by a
process killed before its record was written, or a seq written again by a
resume, matches no record or is followed by the right one, the last entry
wins); a value holding the marker that cannot be revealed (no extra, no key,
another key, no sidecar, no entry, an entry that fails authentication) is
SecretUnavailable or MissingExtra naming what is missing, never the marker,
and `refused()` tells it from a MissingExtra code raised for its own reasons.
A resume reads values as it serves them: `Vault.check` refuses up front,
reading the sidecar only, what would refuse any kept value (no extra, no
key, another key), so the rest (no sidecar, no entry) is refused on access.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable
from typing import Any

import orjson

from .._errors import HarnessError, MissingExtra, SecretUnavailable, internal
from ..storage.files import open_beside, read_error, why
from .line import canonical

SUFFIX = ".secrets"
SERVED = {"transition": "result", "crossing": "response", "reconcile": "result"}  # the value a resume serves, by kind
ENV = "HARNESS_SECRET_KEY"
EXTRA, INSTALL = "secrets", "pip install 'harness-trace[secrets]'"
_AAD = b"harness-secrets-1|%d|%s|%s"
_BY = "_harness_vault"  # set on the errors a Vault raises: the trace whose value it refused to reveal


def refused(error: BaseException, trace: str) -> bool:
    """Whether error is a Vault's refusal to reveal a value of `trace` (not one code raised for its own reasons)."""
    return getattr(error, _BY, None) == trace


def sidecar(trace: str) -> str:
    """Where the secrets of the trace at `trace` are kept."""
    return trace + SUFFIX


def key_file() -> str:
    """The key file: in `$XDG_CONFIG_HOME/harness/` or `~/.config/harness/`, never in a runs folder."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "harness", "secret.key")


def _aesgcm() -> Any:
    """cryptography's AESGCM class, or None when the extra is not installed."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        return None
    return AESGCM


class Key:
    """A 32-byte key, where it came from, and its id (a hash: it says which key, never what it is)."""

    __slots__ = ("id", "raw", "where")

    def __init__(self, raw: bytes, where: str):
        self.raw, self.where = raw, where
        self.id = hashlib.sha256(b"harness key id|" + raw).hexdigest()[:16]


def _decode(text: str, where: str) -> Key:
    try:
        raw = base64.urlsafe_b64decode(text.strip().encode())
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise HarnessError(
            f"{where}: not a harness secret key (urlsafe base64 of 32 bytes). Make one with "
            'python -c "import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"'
        )
    return Key(raw, where)


def load_key(*, create: bool) -> Key | None:
    """The key: $HARNESS_SECRET_KEY, else the key file, made (mode 0600) when `create` and absent; None if none."""
    text = os.environ.get(ENV)
    if text:
        return _decode(text, f"${ENV}")
    path = key_file()
    try:
        with open(path, encoding="ascii") as f:
            return _decode(f.read(), path)
    except FileNotFoundError:
        if not create:
            return None
    except (OSError, UnicodeDecodeError) as e:
        raise HarnessError(f"{path}: cannot read the harness secret key: {e}") from None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # another process made it meanwhile: its key is the key
        return load_key(create=False)
    except OSError as e:
        raise HarnessError(f"{path}: cannot create the harness secret key: {why(e)}; set ${ENV} instead") from None
    try:
        os.write(fd, base64.urlsafe_b64encode(os.urandom(32)) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return load_key(create=False)


def changes(before: Any, after: Any, path: tuple[str | int, ...] = ()) -> list[list[Any]]:
    """The `[path, value]` pairs where after (a redacted copy) differs from before: what redaction took out."""
    if before is after:
        return []
    if type(before) is dict and type(after) is dict and before.keys() == after.keys():
        return [c for k in before for c in changes(before[k], after[k], (*path, k))]
    if type(before) is list and type(after) is list and len(before) == len(after):
        return [c for i, (b, a) in enumerate(zip(before, after, strict=True)) for c in changes(b, a, (*path, i))]
    return [] if before == after else [[list(path), before]]


def put(value: Any, path: Iterable[str | int], leaf: Any) -> Any:
    """value with leaf at path, copied along the way (never in place)."""
    steps = list(path)
    if not steps:
        return leaf
    step, rest = steps[0], steps[1:]
    if type(value) is dict and type(step) is str and step in value:
        return {**value, step: put(value[step], rest, leaf)}
    if type(value) is list and type(step) is int and 0 <= step < len(value):
        out = list(value)
        out[step] = put(value[step], rest, leaf)
        return out
    raise ValueError(f"no {step!r} there")


def marked(value: Any, marker: str, where: str = "") -> str | None:
    """Where in value (`.api_key`, `.items[0]`) a str holds the marker, or None."""
    if isinstance(value, str):
        return where if marker in value else None
    if isinstance(value, dict):
        items: Iterable[tuple[str, Any]] = ((f".{k}", v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for step, v in items:
        found = marked(v, marker, where + step)
        if found is not None:
            return found
    return None


class Keeper:
    """The journal's side: appends the secrets of a record's served field to the sidecar, before the record."""

    __slots__ = ("_cipher", "_fd", "key", "path")

    def __init__(self, trace: str):
        self.path = sidecar(trace)
        self._fd = -1
        self._cipher: Any = None
        self.key: Key | None = None

    def keep(self, seq: int, field: str, before: Any, after: Any) -> None:
        """Keep what redaction took out of before (the value as given) to make after (as the trace holds it).

        Without the extra nothing is kept: the trace holds the marker, and a
        resume that would serve the value refuses (MissingExtra).
        """
        pairs = changes(before, after)
        if not pairs:
            return
        if self._cipher is None:
            aesgcm = _aesgcm()
            if aesgcm is None:
                return
            self.key = load_key(create=True)
            if self.key is None:
                raise HarnessError(f"{key_file()}: cannot make the harness secret key; set ${ENV}")
            self._cipher = aesgcm(self.key.raw)
        if self.key is None:
            raise internal("a cipher without its key", self.path, seq)
        digest = hashlib.sha256(canonical(after)).hexdigest()
        nonce = os.urandom(12)
        box = self._cipher.encrypt(nonce, orjson.dumps(pairs), _AAD % (seq, field.encode(), digest.encode()))
        entry = {"seq": seq, "field": field, "digest": digest, "key": self.key.id}
        line = orjson.dumps({**entry, "box": base64.b64encode(nonce + box).decode()}) + b"\n"
        try:
            self._write(line)
        except OSError as e:
            raise HarnessError(f"{self.path}: cannot keep the secrets of seq {seq}: {why(e)}") from None

    def _write(self, line: bytes) -> None:
        if self._fd < 0:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._fd = fd
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a line torn by a kill: ours starts on a line of its own
                line = b"\n" + line
            if not size:  # (maybe new: its name must survive a power loss as its first entry does)
                folder = os.open(os.path.dirname(os.path.abspath(self.path)), os.O_RDONLY)
                try:
                    os.fsync(folder)
                finally:
                    os.close(folder)
        view = memoryview(line)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)  # before the record naming it: a durable record never lacks its secret

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Vault:
    """The reader's side: reveals the secrets of a trace's served values (see `reveal`). One per trace read."""

    def __init__(self, trace: str, marker: str):
        self.trace, self.marker, self.path = trace, marker, sidecar(trace)
        self.needle = orjson.dumps(marker)[1:-1]  # the marker as a JSON text holds it (escaped as any str is)
        self._entries: dict[tuple[int, str], list[dict[str, Any]]] | None = None
        self._damaged: list[int] = []
        self._cipher: Any = None
        self._key: Key | None = None

    def reveal(self, seq: int, field: str, value: Any) -> Any:
        """value (record seq's field, as the trace holds it) with its kept secrets back in place.

        value itself when it holds no marker; MissingExtra or
        SecretUnavailable when it does and they cannot be read back (`refused`).
        """
        if value is None or type(value) in (bool, int, float):
            return value
        try:
            return self._reveal(seq, field, value)
        except (MissingExtra, SecretUnavailable) as e:
            setattr(e, _BY, self.trace)
            raise

    def check(self, last: int) -> None:
        """Refuse now, before anything is written, what would refuse every kept `result` up to seq `last`
        (MissingExtra: no extra; SecretUnavailable: no key, another key): a read of the sidecar, none of the trace.

        What only the trace can tell (a value holding the marker with no sidecar or no entry) is refused when
        that value is revealed.
        """
        for (seq, field), entries in self._read().items():
            if field == "result" and seq <= last:
                for entry in entries:
                    try:
                        self._open(seq, field, "", entry)
                    except (MissingExtra, SecretUnavailable) as e:
                        setattr(e, _BY, self.trace)
                        raise

    def _reveal(self, seq: int, field: str, value: Any) -> Any:
        try:  # one search of the value's JSON text (in C) clears most values: no walk in Python
            if self.needle not in orjson.dumps(value):
                return value
        except TypeError:  # not JSON text (a value to be refused elsewhere): the walk below looks anyway
            pass
        where = marked(value, self.marker)
        if where is None:
            return value
        digest = hashlib.sha256(canonical(value)).hexdigest()
        entry = next((e for e in reversed(self._read().get((seq, field), [])) if e.get("digest") == digest), None)
        if entry is None:
            if _aesgcm() is None:
                raise self._missing_extra(seq, field)
            raise SecretUnavailable(self.trace, seq, field, where, self._no_entry())
        cipher = self._open(seq, field, where, entry)
        try:
            box = base64.b64decode(entry["box"], validate=True)
            aad = _AAD % (seq, field.encode(), digest.encode())
            pairs = orjson.loads(cipher.decrypt(box[:12], box[12:], aad))
            for path, leaf in pairs:
                value = put(value, path, leaf)
        except Exception:  # (InvalidTag, a bad base64 or JSON, a path the value lacks: each an altered entry)
            problem = f"its entry in {self.path} fails authentication (the file was altered or damaged)"
            raise SecretUnavailable(self.trace, seq, field, where, problem) from None
        return value

    def _missing_extra(self, seq: int, field: str) -> MissingExtra:
        return MissingExtra(f"{self.trace}: seq {seq}: serving its {field}, which holds a secret,", EXTRA, INSTALL)

    def _no_entry(self) -> str:
        if not os.path.exists(self.path):
            return (
                f"{self.path} does not exist (a bundle or a copy does not carry it: the secrets stay on the machine "
                "that recorded them, or the run was recorded by a harness that kept none). Copy the sidecar beside "
                "the trace, or run again from the start"
            )
        damaged = f"; lines {self._damaged[:5]} of it are damaged" if self._damaged else ""
        return f"{self.path} holds no entry for it{damaged}. Restore the sidecar, or run again from the start"

    def _open(self, seq: int, field: str, where: str, entry: dict[str, Any]) -> Any:
        """The cipher of the key entry was kept with: SecretUnavailable when there is no key or another one."""
        if self._cipher is None:
            aesgcm = _aesgcm()
            if aesgcm is None:
                raise self._missing_extra(seq, field)
            self._key = load_key(create=False)
            if self._key is None:
                problem = (
                    f"there is no key to read it: ${ENV} is not set and {key_file()} does not exist. Set ${ENV} "
                    "to the key the run was recorded with, or copy that key file there"
                )
                raise SecretUnavailable(self.trace, seq, field, where, problem)
            self._cipher = aesgcm(self._key.raw)
        if self._key is None:
            raise internal("a cipher without its key", self.path, seq)
        if entry.get("key") != self._key.id:
            problem = (
                f"it was encrypted with key {entry.get('key')!r}, and the key here ({self._key.where}) is "
                f"{self._key.id!r}. Set ${ENV} to the key the run was recorded with"
            )
            raise SecretUnavailable(self.trace, seq, field, where, problem)
        return self._cipher

    def _read(self) -> dict[tuple[int, str], list[dict[str, Any]]]:
        """The sidecar's entries by (seq, field), in order; a line torn by a kill at its end is left out."""
        if self._entries is None:
            self._entries = {}
            folder = os.path.dirname(os.path.abspath(self.path))
            try:
                fd = open_beside(self.path, folder)
            except HarnessError:
                fd = None
            if fd is None:
                return self._entries
            try:
                with os.fdopen(fd, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise read_error(self.path, e) from None
            lines = data.split(b"\n")
            for n, line in enumerate(lines, 1):
                if not line:
                    continue
                try:
                    entry = orjson.loads(line)
                    key = (entry["seq"], entry["field"])
                    if type(key[0]) is not int or type(key[1]) is not str:
                        raise TypeError
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    if n < len(lines):  # (the last, with no newline after it, is a torn line: not damage)
                        self._damaged.append(n)
                    continue
                self._entries.setdefault(key, []).append(entry)
        return self._entries

    def revealed(self, record: dict[str, Any]) -> dict[str, Any]:
        """record with its served field (SERVED) revealed: record itself when it holds no secret."""
        name = SERVED.get(record["kind"])
        if name is None or name not in record:
            return record
        value = self.reveal(record["seq"], name, record[name])
        return record if value is record[name] else {**record, name: value}
