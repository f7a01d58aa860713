"""Operations: resume one stopped run, or every stopped run of a runs folder.

`resume(trace, ...)` finishes a run from its trace alone: the goal comes from
the header, the rest is `Executor(resume=True)` (an answer for a run paused
on interrupt() goes with it). `recover(folder, ...)` lists the folder
(`list_runs`, which reads only the two ends of each trace), and for every run
that stopped without ending decides from its replay what to do:

- crashed or killed (`interrupted`), reconciled, or answered: resumed;
- locked by a live writer (on object storage: its lease is fresh): skipped
  (it is not stopped; the lock says so, and a writer that takes it between
  the listing and the resume makes the resume fail with TraceLocked,
  reported as skipped too; on a store the fence decides: of the resume and
  a writer the lease called dead, the one that ships second stops);
- paused on an operation of uncertain outcome, not yet reconciled: left
  alone, with the `harness reconcile` command that unblocks it;
- paused on a question: left alone, with the `harness resume --answer` command;
- paused on its budget: left alone (recover gives no larger budget), with the
  `harness resume --budget-...` command;
- unreadable, corrupt, never started (a torn header), or a Recorder's trace:
  skipped, with the reason.

It also removes the scratch a killed `harness import` or `export` left in
the folder (`storage.scratch`: never one whose import is still running).

Guarantees: a run that ended is never touched; nothing is written to a run
left alone or skipped; running recover again after it did its work finds
nothing more to do (resumed runs end, or pause for a human). One run's
failure (an agent exception, a mismatch) is reported on its row and does not
stop the others. With parallel=N, N runs are resumed at once on threads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson

from .._errors import HarnessError, ResumeMismatch, TraceCorruption, TraceLocked, TraceMissing
from ..review.results import hint
from ..review.runs import _header as _runs_header
from ..review.runs import list_runs
from ..runtime.bridge import bridging
from ..runtime.budget import Budget
from ..runtime.executor import Executor
from ..runtime.resume import NO_ANSWER, on_budget, waits
from ..runtime.step import Outcome, RetryPolicy, Step
from ..runtime.tool import Tool
from ..runtime.workflow import Workflow, same_workflow
from ..storage import exists, is_url, runs_dir, scratch
from ..storage.files import open_regular
from ..trace import state as S
from ..trace.reader import Checkpoint, Replay, replay, replay_url
from ..trace.redact import Redaction, Rule

Planner = Callable[[Any, list[Checkpoint]], Step | None]


def resume(
    trace: str | os.PathLike[str],
    *,
    planner: Planner | None = None,
    tools: Mapping[str, Callable[..., Any] | Tool] | None = None,
    verifier: Callable[[Step, Any], bool] | None = None,
    workflow: Callable[..., Any] | None = None,
    answer: Any = NO_ANSWER,
    retry: RetryPolicy | None = None,
    redact: Redaction | Iterable[Rule] | None = None,
    budget: Budget | None = None,
    **options: Any,
) -> Outcome:
    """Resume the run recorded in `trace` (crashed, reconciled or interrupted); its goal comes from the trace.

    The planner, tools and verifier may be `async def`: they run on a private event loop meanwhile.

    `Executor(trace=trace, resume=True).run(goal)` with the goal and the
    redaction rules the trace's header records. `redact` adds rules to those
    (a `Redaction` replaces them). `options` are the Executor's other
    keywords (`seal_key`, `durability`, `max_steps`, `storage_options`, ...):
    give the ones the run was started with. A goal that held a secret is
    resumed with the marker in its place (the trace never had the secret):
    give such a run its goal yourself, with `Executor(resume=True).run(goal)`.

    `workflow=` (an `@harness.workflow`) instead of planner= and tools=: the
    workflow's `run(*args, resume=True, **kwargs)` with the arguments its
    trace records; `options` are then `seal_key`, `durability` and
    `storage_options`. `budget` (`harness.Budget`): what the run's live model
    calls may spend, those its trace records counted (a run paused on its
    budget goes on only as far as this one allows); without it, the budget
    the run started with, as its header records it.
    """
    path = os.fspath(trace)
    if not exists(path, storage_options=options.get("storage_options")):  # a file, or a trace URL's segments
        raise TraceMissing(path)
    header = None if is_url(path) else _header_of(path)  # the goal and rules: the resume itself checks the rest
    if header is None:  # a URL, or a first line the resume's full read will name the problem of
        rep = replay_url(path, storage_options=options.get("storage_options")) if is_url(path) else replay(path)
        header = rep.header
    rules = Redaction.from_header(header.get("redact"), path).plus(redact)
    if workflow is not None:
        if planner is not None or tools is not None or verifier is not None or retry is not None:
            raise HarnessError("give either workflow= or planner= and tools= (an Executor's agent), not both")
        return _resume_workflow(path, header, workflow, answer, rules, {**options, "budget": budget})
    if planner is None or tools is None:
        raise HarnessError(f"{path}: resume needs planner= and tools= (an Executor's agent), or workflow=")
    with bridging(planner, tools, verifier) as (planner, tools, verifier):  # async agents: on a private loop
        ex = Executor(
            planner=planner, tools=tools, verifier=verifier, trace=path, resume=True, retry=retry or RetryPolicy(),
            redact=rules, **options,
        )  # fmt: skip
        return ex.run(header.get("goal"), answer=answer, budget=budget)


_WORKFLOW_OPTIONS = frozenset({"seal_key", "durability", "storage_options", "budget"})


def _resume_workflow(
    path: str, header: dict[str, Any], workflow: Callable[..., Any], answer: Any, rules: Redaction, options: Any
) -> Outcome:
    """resume(workflow=W): W.run with the arguments the trace records, resume=True."""
    if set(options) - _WORKFLOW_OPTIONS:
        raise TypeError(f"resume(workflow=...) takes {', '.join(sorted(_WORKFLOW_OPTIONS))} as options, not {options}")
    w = workflow if isinstance(workflow, Workflow) else Workflow(workflow)
    goal = header.get("goal")
    if not (isinstance(goal, dict) and isinstance(goal.get("args"), list) and isinstance(goal.get("kwargs"), dict)):
        raise ResumeMismatch(path, "workflow", header.get("workflow"), w.name)  # an Executor's run
    return w.run(*goal["args"], trace=path, resume=True, answer=answer, redact=rules, **options, **goal["kwargs"])


def _header_of(path: str) -> dict[str, Any] | None:
    """The trace's header line, when its crc checks (not the rest of the file: resume reads from the index's mark)."""
    try:
        fd = open_regular(path)
    except HarnessError:  # (not a regular file, unreadable: the full read names it)
        return None
    try:
        return _runs_header(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Recovered:
    """One row of recover()'s report.

    `was`: the run's status before (interrupted, paused, running, unreadable);
    `action`: resumed, left (waits for a human), skipped, error, crashed;
    `state`: its state after (None when unknown); `detail`: why, or what next.
    """

    path: str
    run_id: str
    was: str
    action: str
    state: str | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "run_id": self.run_id, "was": self.was, "action": self.action,
            "state": self.state, "detail": self.detail,
        }  # fmt: skip


def recover(
    folder: str | os.PathLike[str] | None = None,
    *,
    planner: Planner | None = None,
    tools: Mapping[str, Callable[..., Any] | Tool] | None = None,
    verifier: Callable[[Step, Any], bool] | None = None,
    workflow: Callable[..., Any] | None = None,
    parallel: int = 1,
    retry: RetryPolicy | None = None,
    agent: str | None = None,
    redact: Redaction | Iterable[Rule] | None = None,
    **options: Any,
) -> list[Recovered]:
    """Resume every run of `folder` that stopped without ending; see the module docstring. Rows in listing order.

    The agent is planner= and tools= (an Executor's), or `workflow=`: a run of another shape (or another
    workflow) is skipped. `agent` is only used in the commands the report suggests (`--agent AGENT`, or
    `--workflow AGENT`). `redact` and `options` (the Executor's keywords: `seal_key`, `durability`, ...)
    are resume()'s, for every run.
    """
    if type(parallel) is not int or parallel < 1:
        raise ValueError(f"parallel must be an int of at least 1, not {parallel!r}")
    w = None if workflow is None else workflow if isinstance(workflow, Workflow) else Workflow(workflow)
    if (w is None) == (planner is None or tools is None) or (w is not None and planner is not None):
        raise HarnessError("give the agent: planner= and tools= (an Executor's agent), or workflow=; one of the two")
    how = f"--workflow {agent or 'MODULE:ATTR'}" if w is not None else f"--agent {agent or 'MODULE:FACTORY'}"
    runs = [r for r in list_runs(folder) if r.status not in ("done", "failed")]
    if not is_url(runs_dir(folder)):
        scratch.sweep(runs_dir(folder))  # what a killed import or export left: nothing resumes from it

    def one(path: str, run_id: str, was: str) -> Recovered:
        def row(action: str, state: str | None, detail: str) -> Recovered:
            return Recovered(path, run_id, was, action, state, detail)

        if was == "running":
            live = "a live writer renews its lease" if is_url(path) else "locked by a live writer"
            return row("skipped", None, live)
        if was == "unreadable":
            return row("skipped", None, "unreadable: not a trace header on its first line")
        try:
            rep = replay(path)
        except TraceCorruption as e:
            if e.reason == "torn-header":
                return row("skipped", None, "never started (the writer died writing its header): no goal to resume")
            return row("skipped", None, f"corrupt: {e}")
        except HarnessError as e:
            return row("skipped", None, str(e))
        if rep.complete:
            return row("skipped", rep.state, "ended meanwhile")
        if rep.transitions == 0 and rep.records > 1:
            return row("skipped", rep.state, "a Recorder's trace: there is no agent loop to resume")
        if w is not None and (rep.workflow is None or not same_workflow(rep.workflow, w.name)):
            return row("skipped", rep.state, f"not a run of workflow {w.name} ({rep.workflow or 'an Executor'}'s)")
        if w is None and rep.workflow is not None:
            return row("skipped", rep.state, f"a run of workflow {rep.workflow}: recover it with --workflow")
        if on_budget(rep):  # it waits for a larger budget, which only its owner can give (recover takes none)
            return row("left", S.PAUSED, _budget(path, rep.pending, how))
        if waits(rep, NO_ANSWER):  # a human's word is missing: the rule a resume follows (a parallel step's too)
            asked = rep.tail.question is not None
            return row("left", S.PAUSED, _asked(path, rep.pending, how) if asked else _uncertain(path, rep))
        try:
            agent_of: dict[str, Any] = (
                {"workflow": w} if w is not None else {"planner": planner, "tools": tools, "verifier": verifier}
            )
            out = resume(path, **agent_of, retry=retry, redact=redact, **options)
        except TraceLocked:
            return row("skipped", None, "locked by a live writer")
        except HarnessError as e:
            return row("error", None, str(e))
        except Exception as e:  # the agent's own: recorded in the trace's crash record, reported here
            return row("crashed", None, f"{type(e).__name__}: {e} (recorded in a crash record; resume again)")
        if out.state == S.PAUSED and out.pending is not None:
            asked = "question" in out.pending
            why = (
                _asked(path, out.pending, how)
                if asked
                else _budget(path, out.pending, how)
                if "budget" in out.pending
                else _uncertain(path, replay_url(path) if is_url(path) else replay(path))
            )
            return row("resumed", out.state, why)
        if out.state == S.FAILED and out.error is not None:
            return row("resumed", out.state, f"{out.error.get('type')}: {out.error.get('message')}")
        return row("resumed", out.state, f"{len(out.checkpoints)} checkpoints")

    jobs = [(r.path, r.id, r.status) for r in runs]
    if parallel == 1:
        return [one(*job) for job in jobs]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="harness-recover") as pool:
        return list(pool.map(lambda job: one(*job), jobs))


def _asked(path: str, pending: dict[str, Any] | None, how: str) -> str:
    question = orjson.dumps((pending or {}).get("question")).decode()
    return f"waiting for an answer to {question:.120}: harness resume {path} {how} --answer JSON"


def _budget(path: str, pending: dict[str, Any] | None, how: str) -> str:
    said = (pending or {}).get("budget") or {}
    what = said.get("exceeded", "model_calls")
    flag = "--budget-" + what.replace("_", "-") + (" N --prices prices.toml" if what == "usd" else " N")
    spent, limit = (said.get("spent") or {}).get(what), (said.get("limit") or {}).get(what)
    return f"paused on its budget ({what}: {spent} spent of {limit}): harness resume {path} {how} {flag}"


def _uncertain(path: str, rep: Replay) -> str:
    pending = rep.pending or {}
    said = hint(path, rep) or f"harness reconcile {path} --happened --result JSON (or --not-happened)"
    return f"uncertain operation ({pending.get('tool')} at seq {pending.get('seq')}): {said}, then recover again"
