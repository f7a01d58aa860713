"""Every error the library raises on purpose.

One root, `HarnessError`. Subclasses carry the data a caller needs to act
(`path`, `line`, `seq`, `reason`) and their message says what to do next.
"""

from __future__ import annotations

from typing import Any


class HarnessError(Exception):
    """Root of every error raised by harness."""


def internal(what: str, path: str | None = None, seq: int | None = None) -> HarnessError:
    """The error for a state harness believes impossible: a bug of harness, never the user's (no assert decides).

    It names the trace and the seq when they are known, and asks for a report.
    """
    where = f"{path}: " if path else ""
    where += f"seq {seq}: " if seq is not None else ""
    return HarnessError(f"internal error, please report: {where}{what}")


class TraceCorruption(HarnessError):
    """A trace that cannot support its own story.

    `reason` is a short stable code (see docs/FORMAT.md), `line` is 1-based,
    `seq` is the record's sequence number when it could be read.
    """

    def __init__(self, path: str, line: int, reason: str, detail: str, seq: int | None = None):
        self.path, self.line, self.reason, self.detail, self.seq = path, line, reason, detail, seq
        where = f" (seq {seq})" if seq is not None else ""
        super().__init__(f"{path}:{line}: {reason}{where}: {detail}")


class NotSerializable(HarnessError, TypeError):
    """A value that would not come back equal from the trace file.

    `field` is what holds it (`result`, `args`, `goal`, `request`, ...),
    `where` the path inside it (`.hits[3].when`, "" for the value itself),
    `problem` what it is (`a datetime, not a JSON value`); `tool` and `step`
    name the step when the value belongs to one. Raised before anything is
    written: the trace stays valid.
    """

    def __init__(self, field: str, where: str, problem: str, *, tool: str | None = None, step: int | None = None):
        self.field, self.where, self.problem, self.tool, self.step = field, where, problem, tool, step
        owner = f" of tool {tool!r}" if tool is not None else ""
        owner += f" at step {step}" if step is not None else ""
        said = f"{field}{owner}: {where} is {problem}" if where else f"{field}{owner} is {problem}"
        super().__init__(
            f"{said}; a trace cannot store it. "
            "Return plain JSON values (dict with str keys, list, str, int, finite float, bool, None)."
        )


class TraceExists(HarnessError, FileExistsError):
    """A new run was asked for on a trace that already holds one."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"{path} already holds a run; pass resume=True to continue it, or choose another path")


class TraceLocked(HarnessError):
    """Another writer, in this process or another, holds the trace."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"{path} is being written by another live run; wait for it to end (readers need no lock)")


class JournalError(HarnessError):
    """A write or sync to the trace failed; the run stopped at that record."""

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(
            f"{path}: {problem}. The run stopped; nothing after the last complete line was "
            "acknowledged. Fix the cause and resume with resume=True."
        )


class TraceUnreadable(HarnessError):
    """A trace, or a folder of runs, that cannot be opened at all: missing, a directory, no permission.

    `path` is the file or folder, `problem` what is wrong with it. Nothing
    was read from it, and nothing was written.
    """

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}")


class TraceMissing(TraceUnreadable):
    """resume=True on a trace path where there is no file: nothing to resume.

    Starting a new run there would repeat every side effect of the run the
    caller meant (a typo after a crash), so it is refused; `resume="auto"`
    asks for "resume if it exists, else start".
    """

    def __init__(self, path: str):
        super().__init__(
            path,
            "no such trace, so there is no run to resume; nothing was written. Check the path "
            '(runs are listed by `harness runs`), or pass resume="auto" to start a new run when there is none',
        )


class ResumeMismatch(HarnessError):
    """resume=True with a goal or tools other than the ones the trace pins. Nothing was written.

    For a workflow: another workflow, other arguments, or a recorded call's tool with another contract.
    """

    def __init__(self, path: str, what: str, recorded: Any, given: Any):
        self.path, self.what, self.recorded, self.given = path, what, recorded, given
        super().__init__(
            f"{path}: cannot resume with another {what}: the trace has {recorded!r}, "
            f"this run was given {given!r}. Resume with the same {what}, or start a new trace."
        )


class RedactedArgs(HarnessError):
    """A resume would call a tool again, but the trace holds its args redacted and they could not be recovered.

    `path` is the trace, `step` and `tool` name the call, `where` is the place
    in its args that holds the marker (`.api_key`), `problem` why the planner,
    asked again, did not give the live args back. The tool was not called.
    """

    def __init__(self, path: str, step: int, tool: str, where: str, problem: str):
        self.path, self.step, self.tool, self.where, self.problem = path, step, tool, where, problem
        super().__init__(
            f"{path}: a resume calls tool {tool!r} of step {step} again, but the trace holds args{where} redacted, "
            f"and {problem}. The tool was not called with the marker. Make the planner plan the same step again "
            "from the same goal and progress (a resume asks it for the live args), or keep the secret out of the "
            "args (let the tool read it from its environment); then resume again."
        )


class NotATool(HarnessError, TypeError):
    """harness.call() of something it cannot call. `tool` is what it was given."""

    def __init__(self, tool: Any, problem: str):
        self.tool = tool
        super().__init__(
            f"harness.call() needs a function, a harness.Tool or an object with a __harness_tool__ ToolSpec; "
            f"{problem}. Nothing was written."
        )


class HttpRecordingError(HarnessError, ValueError):
    """A harness.http option, or an http exchange, that cannot be recorded or served.

    `field` names what is wrong (`match_on`, `response`, `chunk`), `value` is
    what was given or found (shortened), `problem` says what is wrong with it
    and how to fix it.
    """

    def __init__(self, field: str, value: Any, problem: str):
        self.field, self.value, self.problem = field, value, problem
        super().__init__(f"{field} {value!r:.120}: {problem}")


class BadResult(HarnessError, ValueError):
    """A reconcile's result that the paused call's door could not record: not what the tool returns.

    `path` is the trace, `tool` the paused call's, `takes` what a result of
    it is, `command` a reconcile command line with an example of it,
    `problem` what is wrong with the value given. Nothing was written.
    """

    def __init__(self, path: str, tool: str, takes: str, command: str, problem: str):
        self.path, self.tool, self.takes, self.command, self.problem = path, tool, takes, command, problem
        super().__init__(
            f"{path}: the result given for {tool!r} does not fit: {problem}. A result of it is {takes}, "
            f"for example: {command}. Nothing was written"
        )


class OtlpUndelivered(HarnessError):
    """Spans an OTLP endpoint did not take (`harness export --otlp-endpoint`).

    `url` is the endpoint, `sent` the runs delivered before this batch, `reason` why it was given up.
    """

    def __init__(self, url: str, sent: int, reason: str):
        self.url, self.sent, self.reason = url, sent, reason
        super().__init__(
            f"{url}: spans not delivered ({reason}); {sent} run(s) were sent before this batch. Check that the "
            "endpoint is up and reachable (an OTLP/HTTP receiver, port 4318 by default), then export again: "
            "the span ids are the same, so the backend keeps one copy"
        )


class ToolError(HarnessError):
    """Raised by a tool to say: I failed in a way you understand, and my effect did not happen.

    The executor records it and retries the step under the RetryPolicy.
    """


class ToolTimeout(ToolError):
    """A tool call that did not return within RetryPolicy(timeout=...) seconds.

    It counts as a failed attempt (a plain or idempotent tool is retried; an
    idempotent one with the same idempotency key), except for an unsafe tool:
    a timeout does not prove its effect did not happen, so the run PAUSES.
    `tool` names it, `timeout` is the limit in seconds.
    """

    def __init__(self, tool: str, timeout: float):
        self.tool, self.timeout = tool, timeout
        super().__init__(f"tool {tool!r} did not return within {timeout:g} s (RetryPolicy(timeout=...))")


class VerificationFailed(HarnessError):
    """Raised by a verifier to reject a result with a reason (same as returning False)."""


class ReplayViolation(HarnessError):
    """A re-execution crossed a boundary that the recording does not have."""

    def __init__(self, message: str, *, seq: int | None = None, line: int | None = None, agent: str = "main"):
        self.seq, self.line, self.agent = seq, line, agent
        super().__init__(message)


class ReplayDrift(HarnessError):
    """A re-execution made a crossing whose request differs from the recorded one."""

    def __init__(self, message: str, *, seq: int, line: int, fields: dict[str, tuple[Any, Any]], agent: str = "main"):
        self.seq, self.line, self.fields, self.agent = seq, line, fields, agent
        super().__init__(message)


class AmbiguousCall(ReplayDrift):
    """A re-execution cannot tell which recorded call a call of a concurrent task is. Nothing is served.

    Recorded calls not served yet match it only as redacted, and the trace names no task (written before
    harness named them); `seqs` are the recorded calls it matched.
    """

    def __init__(self, message: str, *, seqs: list[int], agent: str = "main"):
        self.seqs = seqs
        super().__init__(message, seq=seqs[0], line=seqs[0], fields={"task": (None, None)}, agent=agent)


def error_of(e: BaseException) -> dict[str, str]:
    """Any exception as a record holds it (the `error` of a crossing, a crash, an exit): its class and message.

    runtime/boundary.py's rebuild() turns it back into an exception.
    """
    cls = type(e)
    return {"type": f"{cls.__module__}.{cls.__qualname__}", "message": str(e)}


class ExpectationFailed(HarnessError, AssertionError):
    """A rule of `harness.expect()` that the run broke: an AssertionError, so a test reports it as a failure.

    `seq` is the record that broke it (None when a call is missing), `path` the field path (`args.to`, `name`,
    `state`), `calls` the tool calls made; the message lists every call made.
    """

    def __init__(self, message: str, *, seq: int | None = None, path: str = "", calls: tuple[Any, ...] = ()):
        self.seq, self.path, self.calls = seq, path, calls
        super().__init__(message)


class MissingExtra(HarnessError, ImportError):
    """A feature needs an optional dependency that is not installed; `extra` names it, `install` is the command."""

    def __init__(self, what: str, extra: str, install: str):
        self.what, self.extra, self.install = what, extra, install
        super().__init__(f"{what} needs the {extra!r} extra, which is not installed: {install}")


class SecretUnavailable(HarnessError):
    """A resume (rerun, fork) would serve a recorded value that holds a secret, and the secret cannot be read back.

    `path` is the trace, `seq` and `field` name the value (`result`, `response`), `where` the place in it
    holding the redaction marker, `problem` what is missing (the key, the sidecar, its entry) and how to fix it.
    Raised before any live call: nothing was written.
    """

    def __init__(self, path: str, seq: int, field: str, where: str, problem: str):
        self.path, self.seq, self.field, self.where, self.problem = path, seq, field, where, problem
        super().__init__(
            f"{path}: seq {seq}: its {field}{where} holds a secret kept encrypted beside the trace, and {problem}. "
            "A recorded value is never served with the redaction marker in place of its secret; nothing was written."
        )


class TooLarge(TraceUnreadable):
    """A file beside a trace that holds more bytes (`size`) than harness reads of such a file (`limit`)."""

    def __init__(self, path: str, size: int, limit: int):
        self.size, self.limit = size, limit
        super().__init__(path, f"holds {size} bytes, more than the {limit} harness reads of such a file")


class Control(BaseException):  # not an Exception: agent code catching Exception keeps out
    """A control-flow signal of harness: a pause, a question, a rerun's seam (runtime/control.py decides them)."""


class Interrupted(Control):  # a control-flow signal (like KeyboardInterrupt), not an Exception
    """Raised by interrupt() to pause the run; the executor turns it into PAUSED. `question` is what was asked."""

    def __init__(self, question: Any):
        self.question = question
        super().__init__(f"waiting for an answer to {question!r:.200}")


class BudgetExceeded(Control):  # a control-flow signal, as Interrupted: the run pauses on it
    """A live model call would pass the run's `harness.Budget`: raised before the call, the run pauses on it.

    The executor and the workflow turn it into PAUSED with reason `budget`; `budget` says why (the limit passed,
    what was spent, the call not made). Agent code does not catch it (not an Exception)."""

    def __init__(self, budget: dict[str, Any]):
        self.budget = budget
        spent, limit = budget["spent"], budget["limit"]
        what = budget["exceeded"]
        super().__init__(
            f"a live {budget['call']['boundary']} call would pass the budget's {what} ({spent[what]} spent, "
            f"{budget['call'].get(what, 1)} more asked, limit {limit[what]}): resume with a larger budget"
        )


class RedactionRuleError(HarnessError, ValueError):
    """A redaction rule that cannot be used; `rule` is the rule, the message says what is wrong."""

    def __init__(self, rule: Any, problem: str):
        self.rule, self.problem = rule, problem
        super().__init__(
            f"redaction rule {rule!r}: {problem}. A rule is a key name ('x-api-key'), a JSON path "
            "('$.body.user.token', '$.items[*].secret') or a compiled regular expression (re.compile(...))."
        )


class FieldPathError(HarnessError, ValueError):
    """A field path that cannot be read, or that names no field of the value; `path` and `problem` say which."""

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"field path {path!r}: {problem}")


class FenceLost(HarnessError):
    """Another writer created the segment this writer was about to create: it advanced the run meanwhile.

    `url` is the trace, `segment` the number both wanted. This writer stopped
    and ships nothing more; the bucket holds the other writer's story.
    """

    def __init__(self, url: str, segment: int):
        self.url, self.segment = url, segment
        super().__init__(
            f"{url}: segment {segment:06d}.seg already exists: another writer advanced this run since "
            "this one read it (two writers on one run). This writer stopped; nothing more of it was shipped. "
            "Resume the run (resume=True) from the bucket once its other writer is gone."
        )


class BundleError(HarnessError):
    """A bundle that cannot be exported or imported; `path` is the bundle, `problem` says why."""

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}; nothing was written")


class FleetError(HarnessError):
    """Some tasks of harness.ray's run_many() ended in an error rather than an outcome.

    `outcomes` holds every goal's Outcome in goal order (None where it
    failed), `errors` the failed goals' index -> (trace, what went wrong).
    The traces of failed tasks stay where they are: run the batch again
    (same `batch`) to resume them.
    """

    def __init__(self, outcomes: list[Any], errors: dict[int, tuple[str, str]]):
        self.outcomes, self.errors = outcomes, errors
        first = min(errors)
        trace, why = errors[first]
        super().__init__(
            f"{len(errors)} of {len(outcomes)} runs ended in an error; the first, goal {first} ({trace}): {why}. "
            "Fix the cause and run the batch again with the same batch= to resume them."
        )


class TaskFailed(HarnessError):
    """A task of harness.ray's run_many() raised; the message names the exception and says what it said."""


class RemoteForkRefused(HarnessError):
    """`harness serve --agent` on an address other machines can reach, without `--allow-remote-fork`."""

    def __init__(self, host: str, port: int):
        super().__init__(
            f"--agent with --host {host}: anyone who can reach {host}:{port} could fork runs from the page, "
            "running the agent live after the branch (real tool calls, paid model calls), with no login. "
            "Serve on 127.0.0.1, or add --allow-remote-fork if every machine that can reach it is trusted"
        )
        self.host, self.port = host, port


class RunNotFound(HarnessError):
    """No run has this address in the viewer's runs folder (or the address tries to leave it)."""

    def __init__(self, run: str, why: str):
        super().__init__(f"no run {run!r} in the runs folder: {why}")
        self.run, self.why = run, why


class IndexChanged(HarnessError):
    """The trace changed under the viewer's index (rewritten, or edited in place) while a line was read back."""

    def __init__(self, path: str):
        self.path = path
        super().__init__(f"{path}: the trace was rewritten or edited since it was read; load the run again")


class EntryPointError(HarnessError):
    """A `module:attr` (an agent's factory, a workflow) that cannot be loaded.

    `flag` is what named it (`--agent`, `--workflow`), `spec` what was given, `module` its module part,
    `problem` what failed: not `module:attr`, no such module, importing it raised, no such attribute,
    not what the flag takes, or the factory raised. Nothing was written.
    """

    def __init__(self, flag: str, spec: str, module: str, problem: str):
        self.flag, self.spec, self.module, self.problem = flag, spec, module, problem
        super().__init__(f"{flag} {spec!r}: {problem}")
