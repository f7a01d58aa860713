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

Importing the package is cheap: the exceptions are defined at once, every
other name (and the public modules) is imported on first use (PEP 562), so
`harness --help` or a script that needs one function loads no more than
that function needs. `harness.X` and `from harness import X` work as ever.
"""

from importlib import import_module as _import  # (no `from __future__ import annotations`: it would shadow ours)
from typing import TYPE_CHECKING, Any

from ._errors import (
    AmbiguousCall,
    BadResult,
    BudgetExceeded,
    BundleError,
    EntryPointError,
    ExpectationFailed,
    FenceLost,
    FieldPathError,
    HarnessError,
    HttpRecordingError,
    Interrupted,
    JournalError,
    MissingExtra,
    NotATool,
    NotSerializable,
    OtlpUndelivered,
    RedactedArgs,
    RedactionRuleError,
    ReplayDrift,
    ReplayViolation,
    ResumeMismatch,
    SecretUnavailable,
    ToolError,
    ToolTimeout,
    TraceCorruption,
    TraceExists,
    TraceLocked,
    TraceMissing,
    TraceUnreadable,
    VerificationFailed,
)  # eager: small, and what `except harness.X` needs
from ._version import VERSION as __version__

if TYPE_CHECKING:  # the same names, as type checkers and editors see them; at run time, _LAZY below
    from .bundle import Bundled, export, import_bundle
    from .ops.check import Checked, check
    from .ops.otlp import export as export_otlp
    from .ops.otlp_http import send as send_otlp
    from .ops.reconcile import reconcile
    from .ops.recover import Recovered, recover, resume
    from .review.cost import Ledger, ledger
    from .review.diff import Diff, diff
    from .review.expect import ANY, Expectation, ModelCall, ToolCall, expect
    from .review.normalize import normalize
    from .review.rerun import Rerun, fork, rerun
    from .review.runs import RunInfo, list_runs
    from .runtime.agents import Handle, Message, current_agent, join, receive, send, spawn
    from .runtime.boundary import aboundary, allm, artifact, boundary, llm, now, random, uuid4
    from .runtime.bridge import AsyncHandle, aspawn
    from .runtime.budget import Budget
    from .runtime.calls import acall, call
    from .runtime.decorator import idempotency_key, tool
    from .runtime.executor import Executor
    from .runtime.history import patched
    from .runtime.interrupt import interrupt
    from .runtime.recorder import Recorder
    from .runtime.step import Outcome, RetryPolicy, Step
    from .runtime.timers import sleep
    from .runtime.tool import Tool
    from .runtime.workflow import Workflow, workflow
    from .trace.annotations import annotate, annotations
    from .trace.migrate import Migrated, migrate
    from .trace.reader import Artifact, Checkpoint, Crossing, Replay, Tail, replay
    from .trace.redact import MARKER, Redaction
    from .trace.verify import Sealed, Verification, seal, verify

# what the imports above name, imported on first use (module -> names); tests/test_cli.py checks they match
_LAZY = {
    ".bundle": "Bundled, export, import_bundle",
    ".ops.check": "Checked, check",
    ".ops.otlp": "export as export_otlp",
    ".ops.otlp_http": "send as send_otlp",
    ".ops.reconcile": "reconcile",
    ".ops.recover": "Recovered, recover, resume",
    ".review.cost": "Ledger, ledger",
    ".review.diff": "Diff, diff",
    ".review.expect": "ANY, Expectation, ModelCall, ToolCall, expect",
    ".review.normalize": "normalize",
    ".review.rerun": "Rerun, fork, rerun",
    ".review.runs": "RunInfo, list_runs",
    ".runtime.agents": "Handle, Message, current_agent, join, receive, send, spawn",
    ".runtime.boundary": "aboundary, allm, artifact, boundary, llm, now, random, uuid4",
    ".runtime.bridge": "AsyncHandle, aspawn",
    ".runtime.budget": "Budget",
    ".runtime.calls": "acall, call",
    ".runtime.decorator": "idempotency_key, tool",
    ".runtime.executor": "Executor",
    ".runtime.step": "Outcome, RetryPolicy, Step",
    ".runtime.history": "patched",
    ".runtime.interrupt": "interrupt",
    ".runtime.recorder": "Recorder",
    ".runtime.timers": "sleep",
    ".runtime.tool": "Tool",
    ".runtime.workflow": "Workflow, workflow",
    ".trace.annotations": "annotate, annotations",
    ".trace.migrate": "Migrated, migrate",
    ".trace.reader": "Artifact, Checkpoint, Crossing, Replay, Tail, replay",
    ".trace.redact": "MARKER, Redaction",
    ".trace.verify": "Sealed, Verification, seal, verify",
}
_WHERE = {
    name.split(" as ")[-1]: (module, name.split(" as ")[0])
    for module, names in _LAZY.items()
    for name in names.split(", ")
}
# the public modules besides the package: `harness.store.open(...)` works after `import harness` alone
_MODULES = frozenset({
    "bundle", "http", "mcp", "openai_agents", "otel", "pydantic_ai", "pytest_plugin", "ray", "store", "testing",
    "viewer",
})  # fmt: skip


def __getattr__(name: str) -> Any:
    """A public name, imported on first use and kept (so it is looked up here once)."""
    if name in _WHERE:
        module, attr = _WHERE[name]
        value = getattr(_import(module, __name__), attr)
    elif name in _MODULES:  # harness.http needs httpx, harness.mcp the mcp SDK: extras
        value = _import(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE, *_MODULES})


__all__ = [
    "ANY",
    "MARKER",
    "AmbiguousCall",
    "Artifact",
    "AsyncHandle",
    "BadResult",
    "Budget",
    "BudgetExceeded",
    "BundleError",
    "Bundled",
    "Checked",
    "Checkpoint",
    "Crossing",
    "Diff",
    "EntryPointError",
    "Executor",
    "Expectation",
    "ExpectationFailed",
    "FenceLost",
    "FieldPathError",
    "Handle",
    "HarnessError",
    "HttpRecordingError",
    "Interrupted",
    "JournalError",
    "Ledger",
    "Message",
    "Migrated",
    "MissingExtra",
    "ModelCall",
    "NotATool",
    "NotSerializable",
    "OtlpUndelivered",
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
    "SecretUnavailable",
    "Step",
    "Tail",
    "Tool",
    "ToolCall",
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
    "check",
    "current_agent",
    "diff",
    "expect",
    "export",
    "export_otlp",
    "fork",
    "idempotency_key",
    "import_bundle",
    "interrupt",
    "join",
    "ledger",
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
    "send_otlp",
    "sleep",
    "spawn",
    "tool",
    "uuid4",
    "verify",
    "workflow",
]
