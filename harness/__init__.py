"""harness: agent runs you can trust after the fact.

An Executor drives PLAN -> ACT -> VERIFY -> CHECKPOINT ... DONE/FAILED and
streams every transition to one append-only JSONL trace; `@workflow` runs a
plain function on the same state machine; `replay()` rebuilds the run from
that file and refuses a trace that cannot support its story.

The public API is this package's names, and the modules `harness.store`,
`harness.bundle`, `harness.http`, `harness.ray`, `harness.pytest_plugin`,
`harness.testing` and `harness.viewer`. The subpackages (`storage`, `trace`,
`runtime`, `review`, `ops`) are private layers, each importing only the ones
below it; nothing inside harness imports this package (docs/ARCHITECTURE.md).
"""

from typing import Any

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
from .bundle import Bundled, BundleError, export, import_bundle
from .ops.reconcile import reconcile
from .ops.recover import Recovered, recover, resume
from .review.diff import Diff, diff
from .review.normalize import normalize
from .review.rerun import Rerun, fork, rerun
from .review.runs import RunInfo, list_runs
from .runtime.agents import Handle, Message, current_agent, join, receive, send, spawn
from .runtime.boundary import aboundary, allm, artifact, boundary, llm, now, random, uuid4
from .runtime.bridge import AsyncHandle, aspawn
from .runtime.calls import acall, call
from .runtime.decorator import idempotency_key, tool
from .runtime.environment import VERSION as __version__
from .runtime.executor import Executor, Outcome, RetryPolicy, Step
from .runtime.history import patched
from .runtime.interrupt import Interrupted, interrupt
from .runtime.recorder import Recorder
from .runtime.timers import sleep
from .runtime.tool import Tool
from .runtime.workflow import Workflow, workflow
from .store import FenceLost
from .trace.annotations import annotate, annotations
from .trace.migrate import Migrated, migrate
from .trace.reader import Artifact, Checkpoint, Crossing, Replay, replay
from .trace.redact import MARKER, Redaction, RedactionRuleError
from .trace.verify import Sealed, Verification, seal, verify


def __getattr__(name: str) -> Any:
    """`harness.http` and `harness.mcp` are imported on first use: they need httpx (`harness-trace[http]`) and the
    mcp SDK (`harness-trace[mcp]`)."""
    if name in ("http", "mcp"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
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
    "idempotency_key",
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
    "tool",
    "uuid4",
    "verify",
    "workflow",
]
