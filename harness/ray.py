"""Many runs on Ray (the `ray` extra): one task per goal, each resumable from its trace.

`run_many(goals, agent="module:factory", runs="s3://bucket/runs")` submits
one Ray task per goal and returns their outcomes in the order of the goals.
Each task's trace is `<runs>/<batch>-<index>.jsonl`: named by the batch and
the goal's index, never by chance, so when a worker dies mid-run and Ray
retries the task (up to `max_retries` times) on another worker, the retry
opens the same trace and resumes it (`resume="auto"`: resume if the trace
exists, else start) instead of starting again: finished steps are not
re-run, an idempotent tool in flight is called again with the same
idempotency key, and an unsafe call in flight pauses the run (its outcome
is PAUSED, for an operator to reconcile).

`run_many(goals, workflow="module:attr", runs=...)` does the same for a
workflow (`@harness.workflow`): each goal is its one argument, and a retry
resumes its run by re-execution (`W.run(goal, resume="auto")`).

`batch` defaults to a digest of the agent and the goals, so running the same
batch again (a driver that died and was restarted) resumes it too; give
another `batch` to run the same goals afresh. The runs location should be
one every worker reaches (object storage; a local folder only on one machine).
Ray is imported only when `run_many` is called.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import FleetError, HarnessError, MissingExtra, TaskFailed
from .runtime.step import Outcome
from .storage import is_url, join
from .trace.line import canonical, check_value


@dataclass(frozen=True, slots=True)
class Task:
    """What one Ray task runs: goal number `index` of a batch, traced at `trace`."""

    index: int
    goal: Any
    agent: str  # module:factory, or a workflow's module:attr
    trace: str
    options: dict[str, Any]
    workflow: bool = False  # agent names a workflow


def batch_id(agent: str, goals: Sequence[Any]) -> str:
    """The default batch: a digest of the agent and the goals (same batch, same traces)."""
    return hashlib.sha256(canonical([agent, list(goals)])).hexdigest()[:12]


def tasks(
    goals: Iterable[Any],
    *,
    agent: str | None = None,
    runs: str | os.PathLike[str],
    batch: str | None = None,
    workflow: str | None = None,
    **options: Any,
) -> list[Task]:
    """The tasks run_many() submits: one per goal, its trace named by batch and index."""
    if (agent is None) == (workflow is None):
        raise HarnessError("give agent='module:factory' (an Executor's agent) or workflow='module:attr', one of them")
    if workflow is not None:
        from .runtime.entry import load_workflow

        load_workflow(workflow)  # here, not on every worker: a closure or a lambda cannot be imported there
    spec = agent or workflow or ""
    goals = list(goals)
    for i, goal in enumerate(goals):
        check_value(f"goal {i}", goal)
    batch = batch or batch_id(spec, goals)
    if not batch or "/" in batch:
        raise HarnessError(f"batch {batch!r}: a batch names traces, so it must be a non-empty name without /")
    width = max(5, len(str(len(goals) - 1)))
    return [
        Task(i, g, spec, join(runs, f"{batch}-{i:0{width}d}.jsonl"), options, workflow is not None)
        for i, g in enumerate(goals)
    ]


def read_goals(path: str | os.PathLike[str]) -> list[Any]:
    """The goals of a JSON-lines file, one JSON value a line (blank lines skipped)."""
    import orjson

    from ._errors import TraceUnreadable

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except OSError as e:
        raise TraceUnreadable(path, f"cannot read the goals: {e.strerror}") from None
    goals = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                goals.append(orjson.loads(line))
            except orjson.JSONDecodeError as e:
                raise HarnessError(f"{path}:{n}: not a JSON value ({e}); give one goal as JSON a line") from None
    if not goals:
        raise HarnessError(f"{path}: no goals (one JSON value a line)")
    return goals


def run_one(task: Task) -> Outcome:
    """Run (or resume) one task's goal in this process: what each Ray task does."""
    from .runtime.bridge import bridging
    from .runtime.entry import load_agent, load_workflow
    from .runtime.executor import Executor

    try:
        if task.workflow:
            return load_workflow(task.agent).run(task.goal, trace=task.trace, resume="auto", **task.options)
        agent = load_agent(task.agent)
        with bridging(*agent) as (planner, tools, verifier):  # an async agent: on a private event loop
            ex = Executor(planner=planner, tools=tools, verifier=verifier, trace=task.trace, resume="auto",
                          **task.options)  # fmt: skip
            return ex.run(task.goal)
    except Exception as e:  # what went wrong, as one line that survives pickling (HarnessError's fields may not)
        raise TaskFailed(f"{type(e).__name__}: {' '.join(str(e).split())}") from None


def run_many(
    goals: Iterable[Any],
    *,
    agent: str | None = None,
    runs: str | os.PathLike[str],
    workflow: str | None = None,
    max_retries: int = 3,
    batch: str | None = None,
    num_cpus: float = 1,
    address: str | None = None,
    **options: Any,
) -> list[Outcome]:
    """Run every goal as one Ray task; the outcomes in goal order.

    `agent` is `module:factory` returning (planner, tools, verifier),
    imported on the worker (or `workflow`, a workflow's `module:attr`, each
    goal its one argument); `runs` the runs location (a URL every worker
    reaches); `max_retries` how often Ray retries a task whose worker died;
    `options` go to each Executor (durability, max_steps, storage_options,
    ...). Uses the Ray cluster this process is connected to, else the one
    at `address` ("auto": the local cluster started by `ray start`), else
    starts a local one. Raises FleetError when some task raised.
    """
    try:
        import ray
    except ImportError:
        raise MissingExtra("harness.ray.run_many", "ray", "pip install 'harness-trace[ray]'") from None
    todo = tasks(goals, agent=agent, workflow=workflow, runs=runs, batch=batch, **options)
    if not is_url(runs):  # a local folder (one machine, or a shared file system): made once, here
        os.makedirs(runs, exist_ok=True)
    if not ray.is_initialized():
        ray.init(address=address)
    remote = ray.remote(run_one).options(max_retries=max_retries, retry_exceptions=False, num_cpus=num_cpus)
    refs = [remote.remote(t) for t in todo]
    outcomes: list[Outcome | None] = []
    errors: dict[int, tuple[str, str]] = {}
    for t, ref in zip(todo, refs, strict=True):
        try:
            outcomes.append(ray.get(ref))
        except Exception as e:  # the task's own exception (RayTaskError) or a worker that died too often
            cause = getattr(e, "cause", None) or e
            why = str(cause) if isinstance(cause, TaskFailed) else f"{type(cause).__name__}: {cause}"
            errors[t.index] = (t.trace, " ".join(why.split())[:1000])
            outcomes.append(None)
    if errors:
        raise FleetError(outcomes, errors)
    return [o for o in outcomes if o is not None]
