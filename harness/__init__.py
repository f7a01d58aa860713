"""harness: agent runs you can trust after the fact.

An Executor drives PLAN -> ACT -> VERIFY -> CHECKPOINT ... DONE/FAILED and
streams every transition to one append-only JSONL trace; `replay()` rebuilds
the run from that file and refuses a trace that cannot support its story.
"""

from importlib.metadata import PackageNotFoundError, version

from ._boundary import boundary, llm, now, random, uuid4
from ._errors import (
    HarnessError,
    JournalError,
    NotSerializable,
    ReplayDrift,
    ReplayViolation,
    ResumeMismatch,
    ToolError,
    TraceCorruption,
    TraceExists,
    TraceLocked,
    VerificationFailed,
)
from ._executor import Executor, Outcome, RetryPolicy, Step, Tool
from ._reconcile import reconcile
from ._replay import Checkpoint, Crossing, Replay, replay

try:
    __version__ = version("harness")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Checkpoint",
    "Crossing",
    "Executor",
    "HarnessError",
    "JournalError",
    "NotSerializable",
    "Outcome",
    "Replay",
    "ReplayDrift",
    "ReplayViolation",
    "ResumeMismatch",
    "RetryPolicy",
    "Step",
    "Tool",
    "ToolError",
    "TraceCorruption",
    "TraceExists",
    "TraceLocked",
    "VerificationFailed",
    "__version__",
    "boundary",
    "llm",
    "now",
    "random",
    "reconcile",
    "replay",
    "uuid4",
]
