"""Opening a run's trace, the same for every way of running: the Executor, workflows, and through them every door.

`Opened(...)` checks the options, finds the path (the trace named, or `<run_id>.jsonl` in the runs folder),
opens and locks the journal, and says which run it holds: a new one (`run_id` set: the trace is empty, the
caller writes its header, `step.write_header()`) or one to resume (`run_id` None: the caller reads the trace
and lets `resume.py` decide before it writes anything). Every refusal comes before anything is written: a
trace missing for `resume=True` or an answer (TraceMissing: opening it would create it, and a typo would
repeat every side effect), one there without `resume` (TraceExists), a bad seal key, an answer with no run
that asked.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from .._errors import HarnessError, TraceExists, TraceMissing, TraceUnreadable
from ..storage import exists, is_url, join, runs_dir
from ..storage.blobs import THRESHOLD
from ..trace.journal import Journal
from ..trace.redact import Redaction
from ..trace.remote import open_journal
from .resume import NO_ANSWER


def check(*, durability: str, resume: bool | str, trace: object) -> None:
    """ValueError for options no run can take, before anything is opened."""
    if durability not in ("flush", "fsync"):
        raise ValueError(f"durability must be 'flush' or 'fsync', not {durability!r}")
    if resume not in (True, False, "auto"):
        raise ValueError(
            f'resume must be True, False or "auto" (resume if the trace exists, else start), not {resume!r}'
        )
    if resume and trace is None:
        raise ValueError("resume=True needs the trace= of the run to resume")


class Opened:
    """The trace of one run, open and locked for the length of a `with`: `journal`, and `run_id` for a new run
    (None when the trace holds a run to resume)."""

    journal: Journal

    def __init__(
        self,
        trace: str | os.PathLike[str] | None,
        folder: str | os.PathLike[str] | None,
        *,
        resume: bool | str,
        answer: Any,
        durability: str,
        redact: Redaction,
        seal_key: str | bytes | None,
        storage_options: dict[str, Any] | None,
        blob_threshold: int = THRESHOLD,
    ):
        check(durability=durability, resume=resume, trace=trace)
        self.trace, self.folder, self.resume, self.answer = trace, folder, resume, answer
        self.durability, self.redact, self.seal_key = durability, redact, seal_key
        self.storage_options, self.blob_threshold = storage_options, blob_threshold
        self.run_id: str | None = None

    def __enter__(self) -> Opened:
        from ..trace.seal import key_of

        run_id = uuid.uuid4().hex
        path = os.fspath(self.trace) if self.trace is not None else None
        if path is None:
            folder = runs_dir(self.folder)
            try:
                if not is_url(folder):  # a runs URL on object storage has no folder to make
                    os.makedirs(folder, exist_ok=True)
            except OSError as e:
                raise TraceUnreadable(folder, f"cannot hold runs: {e.strerror}") from None
            path = join(folder, f"{run_id}.jsonl")
        answered = self.answer is not NO_ANSWER
        if (self.resume is True or answered) and not exists(path, storage_options=self.storage_options):
            raise TraceMissing(path)  # Journal.open would create it: a typo would repeat every side effect
        key = key_of(self.seal_key)  # a bad key fails before anything is written
        journal = self.journal = open_journal(
            path, durability=self.durability, redact=self.redact, blob_threshold=self.blob_threshold,
            storage_options=self.storage_options,
        )  # fmt: skip
        try:
            journal.seal_key = key
            if journal.size():
                if not self.resume:
                    raise TraceExists(path)
            elif answered:
                raise HarnessError(f"{path}: an answer was given, but the trace holds no run that asked a question")
            else:
                self.run_id = run_id
        except BaseException:
            journal.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: Any) -> None:
        self.journal.__exit__(kind, *exc)
