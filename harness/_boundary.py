"""Boundaries: where a run's non-determinism comes in, recorded on the way.

Agent code calls `boundary(kind, request, call)` (or `now()`, `random()`,
`uuid4()`, `llm()`) instead of reading the world directly. Inside a run the
active Session records each crossing's request and response in the trace;
when the Session holds recorded crossings (a resume, a rerun) it serves them
instead, in order, and checks that each request is the one recorded.
Outside a run these functions just call through.

Rules kept here:
- a crossing made while another crossing's call runs (a tool reading the
  clock) belongs to the outer one: it is neither recorded nor served;
- an exception raised by a call is recorded as the crossing's outcome,
  then raised again;
- a strict session (rerun, fork) never calls live: a missing crossing is a
  ReplayViolation, a different request a ReplayDrift.
"""

from __future__ import annotations

import random as _random
import sys
import time
import uuid as _uuid
from collections import deque
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import ReplayDrift, ReplayViolation, ToolError
from ._journal import check_value
from ._replay import Crossing, request_hash

if TYPE_CHECKING:
    from ._journal import Journal

T = TypeVar("T")
_current: ContextVar[Session | None] = ContextVar("harness_session", default=None)


class Session:
    """The crossings of one run: where new ones are written and recorded ones come from."""

    def __init__(self, journal: Journal | None, recorded: Iterable[Crossing] = (), *, strict: bool = False):
        self.journal = journal
        self.recorded = deque(recorded)
        self.strict = strict
        self.nested = False
        self.live_calls = 0

    @property
    def serving(self) -> bool:
        """Whether a crossing may be served from the recording (or must be, in a strict session)."""
        return self.strict or bool(self.recorded)

    def serve(self, kind: str, request: Any) -> Crossing | None:
        """The recorded crossing to use instead of a live call, or None to call live."""
        if not self.recorded:
            if self.strict:
                raise ReplayViolation(
                    f"a live {kind} call with request {request!r} during a re-execution: the recording "
                    "has no crossing left here. Route it through harness, or record the run again.",
                )
            return None
        rec = self.recorded[0]
        if rec.kind == kind and rec.hash == request_hash(kind, request):
            return self.recorded.popleft()
        if not self.strict:  # resuming changed code: the rest of the old recording no longer applies
            self.recorded.clear()
            return None
        fields = differences(rec.request, request) if rec.kind == kind else {"kind": (rec.kind, kind)}
        shown = "; ".join(f"{k}: recorded {a!r}, now {b!r}" for k, a, b in ((k, *v) for k, v in fields.items()))
        raise ReplayDrift(
            f"seq {rec.seq}: the run drifted from its recording at a {rec.kind} crossing: {shown}",
            seq=rec.seq,
            line=rec.seq,
            fields=fields,
        )

    def cross(self, kind: str, request: Any, call: Callable[[], T]) -> T:
        if self.nested:
            return call()
        check_value("request", request)  # before it is hashed: NotSerializable, not orjson's TypeError
        rec = self.serve(kind, request)
        if rec is not None:
            return outcome(rec)  # type: ignore[no-any-return]
        self.live_calls += 1
        self.nested = True
        try:
            response = call()
        except Exception as e:
            self._record(kind, request, "error", error_of(e))
            raise
        finally:  # also after a KeyboardInterrupt: later crossings must still be recorded
            self.nested = False
        self._record(kind, request, "response", response)
        return response

    def _record(self, kind: str, request: Any, outcome: str, value: Any) -> None:
        assert self.journal is not None
        fields = {"boundary": kind, "request": request, "hash": request_hash(kind, request), outcome: value}
        self.journal.append("crossing", fields, check=(outcome,))

    def activate(self) -> Any:
        return _current.set(self)


def deactivate(token: Any) -> None:
    _current.reset(token)


def error_of(e: BaseException) -> dict[str, str]:
    cls = type(e)
    return {"type": f"{cls.__module__}.{cls.__qualname__}", "message": str(e)}


def outcome(rec: Crossing) -> Any:
    """The recorded response, or the recorded exception raised again."""
    if rec.error is None:
        return rec.response
    raise rebuild(rec.error)


def rebuild(error: dict[str, str]) -> BaseException:
    """The exception a crossing recorded, of the same class when that class is already imported.

    Nothing is imported for it: reading a trace must never run code it names.
    """
    module, _, name = error["type"].rpartition(".")
    cls: Any = sys.modules.get(module)
    for part in name.split("."):
        cls = getattr(cls, part, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(error["message"])
        except Exception:  # a constructor that wants more than a message: build it bare
            e = cls.__new__(cls)
            Exception.__init__(e, error["message"])
            try:
                str(e)
                return e
            except Exception:  # its __str__ needs what __init__ would have set
                pass
    return ToolError(f"{error['type']}: {error['message']}")


def differences(recorded: Any, now: Any, where: str = "") -> dict[str, tuple[Any, Any]]:
    """Paths where two JSON values differ, with both values, as `harness diff` names them.

    Objects are followed key by key (`request.model`), lists of the same
    length item by item (`messages[1].content`); a list whose length changed
    is reported whole, and a key on one side only has None on the other.
    """
    if isinstance(recorded, dict) and isinstance(now, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for k in [*recorded, *(k for k in now if k not in recorded)]:
            out.update(differences(recorded.get(k), now.get(k), f"{where}.{k}" if where else str(k)))
        return out
    if isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now):
        out = {}
        for n, (x, y) in enumerate(zip(recorded, now, strict=True)):
            out.update(differences(x, y, f"{where}[{n}]"))
        return out
    if recorded == now and type(recorded) is type(now):
        return {}
    return {where or "request": (recorded, now)}


def boundary(kind: str, request: Any, call: Callable[[], T]) -> T:
    """Cross a boundary: record (or, on re-execution, serve) what `call()` returns for `request`."""
    session = _current.get()
    if session is None:
        return call()
    return session.cross(kind, request, call)


def now() -> datetime:
    """The current time, as a timezone-aware UTC datetime, recorded."""
    return datetime.fromtimestamp(boundary("now", None, time.time), UTC)


def random() -> float:
    """A float in [0, 1), recorded."""
    return boundary("random", None, _random.random)


def uuid4() -> _uuid.UUID:
    """A random UUID, recorded."""
    return _uuid.UUID(boundary("uuid4", None, lambda: _uuid.uuid4().hex))


def llm(request: Any, call: Callable[[Any], T]) -> T:
    """A model call: `call(request)` returns the response, recorded with the request."""
    return boundary("llm", request, lambda: call(request))
