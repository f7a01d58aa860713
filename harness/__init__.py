"""harness: agent runs you can trust after the fact.

An Executor drives PLAN -> ACT -> VERIFY -> CHECKPOINT ... DONE/FAILED and
streams every transition to one append-only JSONL trace; `@workflow` runs a
plain function on the same state machine; `replay()` rebuilds the run from
that file and refuses a trace that cannot support its story.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ._agents import Handle, Message, current_agent, join, receive, send, spawn
from ._annotations import annotate, annotations
from ._async import AsyncHandle, aspawn
from ._boundary import aboundary, allm, artifact, boundary, llm, now, random, uuid4
from ._calls import acall, call
from ._diff import Diff, diff
from ._errors import (
    HarnessError,
    HttpRecordingError,
    JournalError,
    NotSerializable,
    RedactedArgs,
    ReplayDrift,
    ReplayViolation,
    ResumeMismatch,
    ToolError,
    ToolTimeout,
    TraceCorruption,
    TraceExists,
    TraceLocked,
    TraceMissing,
    TraceUnreadable,
    VerificationFailed,
)
from ._executor import Executor, Outcome, RetryPolicy, Step, Tool
from ._history import patched
from ._interrupt import Interrupted, interrupt
from ._migrate import Migrated, migrate
from ._normalize import normalize
from ._reconcile import reconcile
from ._recorder import Recorder
from ._recover import Recovered, recover, resume
from ._redact import MARKER, Redaction, RedactionRuleError
from ._replay import Artifact, Checkpoint, Crossing, Replay, replay
from ._rerun import Rerun, fork, rerun
from ._runs import RunInfo, list_runs
from ._seal import Sealed, Verification, seal, verify
from ._timers import sleep
from ._workflow import Workflow, workflow
from .bundle import Bundled, BundleError, export, import_bundle
from .store import FenceLost

try:  # the distribution is harness-trace: `harness` on the package index is an unrelated project
    __version__ = version("harness-trace")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """`harness.http` is imported on first use: it needs the optional httpx (`harness-trace[http]`)."""
    if name == "http":
        import importlib

        return importlib.import_module(".http", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MARKER",
    "Artifact",
    "AsyncHandle",
    "BundleError",
    "Bundled",
    "Checkpoint",
    "Crossing",
    "Diff",
    "Executor",
    "FenceLost",
    "Handle",
    "HarnessError",
    "HttpRecordingError",
    "Interrupted",
    "JournalError",
    "Message",
    "Migrated",
    "NotSerializable",
    "Outcome",
    "Recorder",
    "Recovered",
    "RedactedArgs",
    "Redaction",
    "RedactionRuleError",
    "Replay",
    "ReplayDrift",
    "ReplayViolation",
    "Rerun",
    "ResumeMismatch",
    "RetryPolicy",
    "RunInfo",
    "Sealed",
    "Step",
    "Tool",
    "ToolError",
    "ToolTimeout",
    "TraceCorruption",
    "TraceExists",
    "TraceLocked",
    "TraceMissing",
    "TraceUnreadable",
    "Verification",
    "VerificationFailed",
    "Workflow",
    "__version__",
    "aboundary",
    "acall",
    "allm",
    "annotate",
    "annotations",
    "artifact",
    "aspawn",
    "boundary",
    "call",
    "current_agent",
    "diff",
    "export",
    "fork",
    "import_bundle",
    "interrupt",
    "join",
    "list_runs",
    "llm",
    "migrate",
    "normalize",
    "now",
    "patched",
    "random",
    "receive",
    "reconcile",
    "recover",
    "replay",
    "rerun",
    "resume",
    "seal",
    "send",
    "sleep",
    "spawn",
    "uuid4",
    "verify",
    "workflow",
]
