"""The executor: drives the state machine and streams it to the trace.

One loop, one state at a time (PLAN -> ACT -> VERIFY -> CHECKPOINT ...).
Each transition is written before the executor acts on it: the transition
into ACT (the intent: tool, args, idempotency key) is on the file before the
tool runs, the result is on the file before it is verified, and a checkpoint
is written only right after the VERIFY -> CHECKPOINT transition that vouches
for it. Resuming is the same loop started from the state `replay()` rebuilds.

Failures: ToolError and a rejected verification are retried under the
RetryPolicy and end in FAILED when attempts run out, all recorded. Any other
exception propagates out of run() and leaves the file as a crash would.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import _state as S
from ._boundary import Session, deactivate
from ._errors import HarnessError, ResumeMismatch, ToolError, TraceCorruption, TraceExists, VerificationFailed
from ._journal import SCHEMA, Journal, canonical, check_value, set_aside
from ._replay import Checkpoint, Replay, replay


def _version() -> str:
    from . import __version__

    return __version__


@dataclass(frozen=True, slots=True)
class Step:
    """What the planner wants done next: call `tool` with `args`."""

    name: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many attempts a step gets before the run ends in FAILED."""

    max_attempts: int = 3

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool with a declared effect contract.

    idempotent=True: on resume after an interrupted call it is called again
    with the same `idempotency_key` keyword argument, so it can dedupe.
    idempotent=False: never re-invoked blindly; the run PAUSES until reconciled.
    Intent and result of a declared tool are fsynced whatever the durability.
    """

    fn: Callable[..., Any]
    idempotent: bool
    version: str | None = None

    @property
    def contract(self) -> dict[str, Any]:
        return {"effect": "idempotent" if self.idempotent else "unsafe", "version": self.version}


PLAIN = {"effect": "at-least-once", "version": None}


class _Served(ToolError):
    """A tool's ToolError served from a recording, recorded again exactly as it was."""

    def __init__(self, error: dict[str, Any]):
        super().__init__(error["message"])
        self.error = error


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended (or paused). `pending` names the uncertain operation of a PAUSED run."""

    state: str
    checkpoints: tuple[Checkpoint, ...]
    run_id: str
    trace: str
    pending: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


@functools.cache
def _platform() -> str:
    """platform.platform(), as it reads on Linux, without the `uname -p` child it spawns on first use.

    environment() runs while the trace is locked, and a child forked then
    shares the locked descriptor until it execs: a writer killed at that
    moment would leave its lock held by the child for a while.
    """
    libc = "".join(platform.libc_ver())
    parts = [platform.system(), platform.release(), platform.machine(), *(["with", libc] if libc else [])]
    return "-".join(p for p in parts if p)


def environment(entrypoint: str) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": _platform(),
        "cwd": os.getcwd(),
        "entrypoint": entrypoint,
        "harness": _version(),
    }


class Executor:
    """Runs a goal to DONE or FAILED, streaming every step to one trace file."""

    def __init__(
        self,
        *,
        planner: Callable[[Any, list[Checkpoint]], Step | None],
        tools: Mapping[str, Callable[..., Any] | Tool],
        verifier: Callable[[Step, Any], bool] | None = None,
        trace: str | os.PathLike[str] | None = None,
        runs_dir: str | os.PathLike[str] | None = None,
        resume: bool = False,
        retry: RetryPolicy = RetryPolicy(),
        durability: str = "flush",
        entrypoint: str | None = None,
    ):
        if durability not in ("flush", "fsync"):
            raise ValueError(f"durability must be 'flush' or 'fsync', not {durability!r}")
        if resume and trace is None:
            raise ValueError("resume=True needs the trace= of the run to resume")
        self.planner = planner
        self.tools = dict(tools)
        self.verifier = verifier or (lambda step, result: True)
        self.trace = os.fspath(trace) if trace is not None else None
        self.runs_dir = runs_dir
        self.resume = resume
        self.retry = retry
        self.durability = durability
        self.entrypoint = entrypoint or (sys.argv[0] if sys.argv and sys.argv[0] else "<python>")
        self.contracts = {n: t.contract if isinstance(t, Tool) else PLAIN for n, t in sorted(self.tools.items())}
        self.live_calls = 0

    def run(self, goal: Any) -> Outcome:
        """Run (or, with resume=True, finish) the goal. Returns DONE, FAILED or PAUSED."""
        check_value("goal", goal)
        run_id = uuid.uuid4().hex
        path = self.trace
        if path is None:
            folder = os.fspath(self.runs_dir or os.environ.get("HARNESS_RUNS_DIR") or "runs")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"{run_id}.jsonl")
        with Journal.open(path, durability=self.durability) as journal:
            if journal.size():
                if not self.resume:
                    raise TraceExists(path)
                return self._resume(journal, goal)
            return self._start(journal, goal, run_id)

    def _start(
        self, journal: Journal, goal: Any, run_id: str, *, session: Session | None = None, **lineage: Any
    ) -> Outcome:
        header = {"schema": SCHEMA, "run_id": run_id, "goal": goal, "tools": self.contracts}
        header.update(lineage)
        header["env"] = environment(self.entrypoint)
        journal.append("header", header, sync=True)
        journal.append("transition", {"from": S.INIT, "to": S.PLAN, "step": 0, "attempt": 1})
        return self._drive(journal, session or Session(journal), goal, run_id, S.PLAN, [], 0, 1, None, None)

    def _resume(self, journal: Journal, goal: Any) -> Outcome:
        path = journal.path
        try:
            rep = replay(path)
        except TraceCorruption as e:
            if e.reason != "torn-header":
                raise
            set_aside(path, 0)
            journal.continue_after(0, 0, 0)
            return self._start(journal, goal, uuid.uuid4().hex)
        if canonical(rep.goal) != canonical(goal):
            raise ResumeMismatch(path, "goal", rep.goal, goal)
        if rep.header.get("tools") != self.contracts:
            raise ResumeMismatch(path, "tools", rep.header.get("tools"), self.contracts)
        if rep.complete or (rep.state == S.PAUSED and rep.reconcile is None):
            return finished(rep)
        aside = set_aside(path, rep.end) if rep.torn_tail else None
        journal.continue_after(rep.last_seq, rep.crc, rep.end)
        journal.append(
            "resume", {"set_aside": os.path.basename(aside) if aside else None, "env": environment(self.entrypoint)}
        )
        # crossings recorded after the last transition are served again, up to the first failed one
        served = []
        for c in rep.crossings[len(rep.crossings) - len(rep.pending_crossings) :]:
            if c.error is not None:
                break
            served.append(c)
        session = Session(journal, served)
        return self._continue(journal, session, rep)

    def _continue(self, journal: Journal, session: Session, rep: Replay) -> Outcome:
        """Drive a run on from the state a replay rebuilt."""
        progress = list(rep.checkpoints)
        state, intent, result, last = rep.state, rep.intent, rep.result, rep.last or {}
        if state in (S.INIT, S.PLAN):
            if state == S.INIT:
                journal.append("transition", {"from": S.INIT, "to": S.PLAN, "step": 0, "attempt": 1})
            retrying = last.get("from") in (S.ACT, S.VERIFY)
            step = last["step"] if retrying else len(progress)
            attempt = last["attempt"] + 1 if retrying else 1
            return self._drive(journal, session, rep.goal, rep.run_id, S.PLAN, progress, step, attempt, None, None)
        assert intent is not None
        step, attempt = intent["step"], intent["attempt"]
        if state == S.PAUSED:
            rec = rep.reconcile
            assert rec is not None
            if rec["happened"]:
                result = rec.get("result")
                journal.append(
                    "transition",
                    {"from": S.PAUSED, "to": S.VERIFY, "step": step, "attempt": attempt, "result": result},
                    sync=True,
                )
                state = S.VERIFY
            else:
                intent = {k: intent[k] for k in ("step", "attempt", "name", "tool", "args", "key") if k in intent}
                journal.append("transition", {"from": S.PAUSED, "to": S.ACT, **intent}, sync=True)
                state = S.ACT
        elif state == S.ACT and self.contracts.get(intent["tool"], PLAIN)["effect"] == "unsafe":
            journal.append("transition", {"from": S.ACT, "to": S.PAUSED, "step": step, "attempt": attempt}, sync=True)
            return finished(replay(journal.path))
        elif state == S.CHECKPOINT and len(progress) > step:
            journal.append("transition", {"from": S.CHECKPOINT, "to": S.PLAN, "step": step, "attempt": attempt})
            return self._drive(journal, session, rep.goal, rep.run_id, S.PLAN, progress, step + 1, 1, None, None)
        return self._drive(journal, session, rep.goal, rep.run_id, state, progress, step, attempt, intent, result)

    def _drive(
        self, journal: Journal, session: Session, goal: Any, run_id: str, state: str,
        progress: list[Checkpoint], step: int, attempt: int, intent: dict[str, Any] | None, result: Any,
    ) -> Outcome:  # fmt: skip
        append, tools, contracts = journal.append, self.tools, self.contracts
        max_attempts = self.retry.max_attempts
        token = session.activate()
        try:
            while True:
                if state == S.PLAN:
                    planned = self.planner(goal, progress)
                    if planned is None:
                        append("transition", {"from": S.PLAN, "to": S.DONE, "step": step, "attempt": attempt})
                        return Outcome(S.DONE, tuple(progress), run_id, journal.path)
                    if not isinstance(planned, Step):
                        raise HarnessError(f"the planner returned {planned!r}; it must return a Step or None")
                    if planned.tool not in tools:
                        raise HarnessError(
                            f"the planner chose tool {planned.tool!r}, which this executor does not have "
                            f"(it has: {', '.join(tools) or 'none'})"
                        )
                    intent = {
                        "step": step,
                        "attempt": attempt,
                        "name": planned.name,
                        "tool": planned.tool,
                        "args": planned.args,
                    }
                    if contracts[planned.tool]["effect"] == "idempotent":
                        intent["key"] = f"{run_id}-{step}-{attempt}"
                    append(
                        "transition",
                        {"from": S.PLAN, "to": S.ACT, **intent},
                        sync=isinstance(tools[planned.tool], Tool),
                        check=("args",),
                    )
                    state = S.ACT
                elif state == S.ACT:
                    assert intent is not None
                    tool = tools[intent["tool"]]
                    try:
                        result = self._call(session, tool, intent)
                    except ToolError as e:
                        error = e.error if isinstance(e, _Served) else {"type": type(e).__name__, "message": str(e)}
                        to = S.FAILED if attempt >= max_attempts else S.PLAN
                        append(
                            "transition", {"from": S.ACT, "to": to, "step": step, "attempt": attempt, "error": error}
                        )
                        if to == S.FAILED:
                            return Outcome(S.FAILED, tuple(progress), run_id, journal.path, error=error)
                        state, attempt = S.PLAN, attempt + 1
                        continue
                    append(
                        "transition",
                        {"from": S.ACT, "to": S.VERIFY, "step": step, "attempt": attempt, "result": result},
                        sync=isinstance(tool, Tool),
                        check=("result",),
                    )
                    state = S.VERIFY
                elif state == S.VERIFY:
                    assert intent is not None
                    why = self._verify(Step(intent["name"], intent["tool"], intent["args"]), result)
                    if why is not None:
                        error = {"type": "VerificationFailed", "message": why}
                        to = S.FAILED if attempt >= max_attempts else S.PLAN
                        append(
                            "transition", {"from": S.VERIFY, "to": to, "step": step, "attempt": attempt, "error": error}
                        )
                        if to == S.FAILED:
                            return Outcome(S.FAILED, tuple(progress), run_id, journal.path, error=error)
                        state, attempt = S.PLAN, attempt + 1
                        continue
                    append("transition", {"from": S.VERIFY, "to": S.CHECKPOINT, "step": step, "attempt": attempt})
                    state = S.CHECKPOINT
                else:  # CHECKPOINT
                    assert intent is not None
                    seq = append("checkpoint", {"step": step, "name": intent["name"], "result": result})
                    progress.append(Checkpoint(step, intent["name"], result, seq))
                    append("transition", {"from": S.CHECKPOINT, "to": S.PLAN, "step": step, "attempt": attempt})
                    state, step, attempt, intent, result = S.PLAN, step + 1, 1, None, None
        finally:
            deactivate(token)
            self.live_calls = session.live_calls

    def _call(self, session: Session, tool: Callable[..., Any] | Tool, intent: dict[str, Any]) -> Any:
        recorded = session.serve("tool", {"tool": intent["tool"], "args": intent["args"]})
        if recorded is not None:
            if recorded.error is not None:
                raise _Served(recorded.error)
            return recorded.response
        fn = tool.fn if isinstance(tool, Tool) else tool
        kwargs = dict(intent["args"])
        if "key" in intent:
            kwargs["idempotency_key"] = intent["key"]
        session.live_calls += 1
        session.nested = True
        try:
            return fn(**kwargs)
        finally:
            session.nested = False

    def _verify(self, step: Step, result: Any) -> str | None:
        """None when the verifier vouches for result, else why not."""
        try:
            ok = self.verifier(step, result)
        except VerificationFailed as e:
            return str(e) or "rejected by the verifier"
        return None if ok else "rejected by the verifier"


def finished(rep: Replay) -> Outcome:
    """The outcome a trace records, for a run that needs nothing more done."""
    error = (rep.last or {}).get("error") if rep.state == S.FAILED else None
    return Outcome(rep.state, tuple(rep.checkpoints), rep.run_id, rep.path, pending=rep.pending, error=error)
