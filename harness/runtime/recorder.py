"""A recorder for agent loops that do not use the Executor.

`Recorder` writes the same trace format as the executor, through the same
Journal (chained crc, one write per record, exclusive lock for its life):
a header, then `event` records `{"type": ..., "data": ...}` in state INIT,
then one `end` record whose status is success, failure or error. replay()
reads such a trace like any other and reports it DONE (success) or FAILED.
While the recorder is open it is also the active boundary session, so
`harness.now()`, `harness.llm()` and friends are recorded in the same trace.

Rules kept here:
- an event's data must survive a JSON round trip, else NotSerializable and
  nothing is written;
- the header and the end record are synced to disk (fsync), whatever the
  durability; with durability="fsync" every event is too; the end record and
  the run's seal go out in one write;
- nothing is written after the end: log() and end() then raise;
- secrets are redacted (`redact=`, default rules by default) in the goal,
  every event's data, every crossing and the end's error before they are written.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from .._errors import HarnessError, error_of
from ..storage.blobs import THRESHOLD
from ..trace.journal import Journal
from ..trace.line import check_value
from ..trace.redact import Redaction, Rule
from ..trace.seal import key_of
from ..trace.state import DONE, FAILED
from .boundary import Session, deactivate
from .opener import Opened, check
from .resume import NO_ANSWER
from .step import write_header

STATUSES = ("success", "failure", "error")


class Recorder:
    """Record one run of your own agent loop. Use as a context manager.

    A clean exit ends the run with status "success", an exception with
    "error" (and the exception's type and message); `end()` sets it earlier.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        entrypoint: str,
        goal: Any = None,
        durability: str = "flush",
        redact: Redaction | Iterable[Rule] | None = None,
        blob_threshold: int = THRESHOLD,
        seal_key: str | bytes | None = None,
    ):
        check_value("goal", goal)
        check(durability=durability, resume=False, trace=path)
        self.path = os.fspath(path)
        self.entrypoint = str(entrypoint)
        self.goal = goal
        self.durability = durability
        self.redact = Redaction.of(redact)
        self.blob_threshold = blob_threshold
        self.seal_key = seal_key
        key_of(seal_key)  # a bad key fails here, at once
        self.run_id = uuid.uuid4().hex
        self.status: str | None = None
        self._journal: Journal | None = None
        self._token: Any = None

    def __enter__(self) -> Recorder:
        if self._journal is not None or self.status is not None:
            raise HarnessError(f"{self.path}: this Recorder was already used; make a new one for another run")
        opened = Opened(  # (a URL: a trace on object storage)
            self.path, None, resume=False, answer=NO_ANSWER, durability=self.durability, redact=self.redact,
            seal_key=self.seal_key, storage_options=None, blob_threshold=self.blob_threshold,
        ).__enter__()  # fmt: skip
        journal = opened.journal
        try:
            write_header(journal, self.run_id, self.goal, {}, self.redact, self.entrypoint, {})
        except BaseException:
            journal.close()
            raise
        self._journal = journal
        self._token = Session(journal, redact=self.redact).activate()
        return self

    def log(self, type: str, data: Any = None) -> int:
        """Append an event of `type` (input, output, tool_call, artifact_ref, or your own); returns its seq."""
        journal = self._open("log")
        if not isinstance(type, str) or not type:
            raise HarnessError(f"{self.path}: an event type must be a non-empty str, not {type!r}")
        check_value("data", data)
        return journal.append("event", {"type": type, "data": data}, sync=journal.fsync, user=("data",))

    def end(self, status: str = "success", *, error: BaseException | None = None) -> int:
        """Write the end record (synced); returns its seq. Nothing can be logged after it."""
        journal = self._open("end")
        if status not in STATUSES:
            raise HarnessError(f"{self.path}: status must be one of {', '.join(STATUSES)}, not {status!r}")
        fields: dict[str, Any] = {"status": status}
        if error is not None:
            fields["error"] = error_of(error)
        if self._token is not None:  # the agents it spawned end (and are joined) before the run does
            self._token[0].agents.settle()
        seq = journal.finish(
            "end", fields, state=DONE if status == "success" else FAILED, key=journal.seal_key, user=("error",)
        )
        self.status = status
        self._stop_recording()  # a crossing after the end would break the trace
        return seq

    def _stop_recording(self) -> None:
        if self._token is not None:
            token, self._token = self._token, None
            deactivate(token)

    def _open(self, what: str) -> Journal:
        if self._journal is None:
            raise HarnessError(f"{self.path}: {what}() outside the Recorder's `with` block")
        if self.status is not None:
            raise HarnessError(f"{self.path}: the run already ended ({self.status}); nothing can follow the end")
        return self._journal

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        journal = self._journal
        if journal is None:
            return
        try:
            try:
                if self._token is not None and self.status is None:  # its agents end before the run does
                    self._token[0].agents.settle()
            finally:  # (settle may refuse: an unjoined task on this loop) the run is no longer in progress
                self._stop_recording()
            if self.status is None:
                self.end("success" if exc is None else "error", error=exc)
        finally:
            self._journal = None
            journal.close()
