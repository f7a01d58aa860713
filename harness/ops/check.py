"""Check, before a deploy, that the current code still replays the recorded runs: `harness check`.

Each run is re-executed offline against the code given (`rerun()`: every
recorded crossing and tool result served, no tool and no model called):

- a finished run must come out equal (after normalization) with every
  recorded crossing used: `ok`, else `drift at seq N: recorded X, now Y`;
- an unfinished run (crashed, killed, paused, in flight) is replayed up to
  its last record, which is what a resume serves it; what the code does
  next, the first thing a resume would make live, stops the check:
  `ok, would go live at seq N (tool X)` (`ok` alone when it ends there);
- a golden file is made into a trace of the run it pins (in the scratch
  folder) and checked as a finished run.

Nothing is written beside the runs: the re-execution's own trace goes to a
scratch folder outside every folder checked (`$TMPDIR` when set, else
`/dev/shm` when there is one, else the system's temporary folder): one
folder per check, one per run inside it, each removed as soon as its run is
checked, the whole when the check ends or is interrupted; the recordings
are only read. (A folder, not a journal in memory: the re-execution writes
through the journal itself, its blobs and fsyncs included, so it runs what
a resume runs; /dev/shm is memory already.) The recorded `env.code`
fingerprint is compared with that of the code given (`code changed` in the
line): information, never a failure.

Runs are checked in a process pool (`jobs`, forked: each worker inherits
the agent already imported) in input order; `on_result` is called with each
result as it comes, for a progress bar. Ctrl-C reaches the parent alone
(the workers ignore SIGINT): it stops the workers at once and raises
KeyboardInterrupt. A run that cannot be read is an
`error`; a run of another shape (a Recorder's, another workflow's, an
Executor's when a workflow was given) is `skipped`. A worker process that
dies (agent code that exits the process) makes the runs not yet checked
`error`: never a hang.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._errors import HarnessError, NotSerializable, ReplayDrift, ReplayViolation, ResumeMismatch
from ..review.normalize import IGNORED, describe_record, is_golden_file, normalize
from ..review.rerun import Rerun, rerun
from ..review.runs import _traces
from ..runtime.boundary import differences
from ..runtime.fingerprint import code_of, code_of_modules
from ..runtime.workflow import Workflow, same_workflow
from ..storage import is_url
from ..trace import state as S
from ..trace.reader import Replay, replay, request_hash

STATUSES = ("ok", "drift", "skipped", "error")


@dataclass(frozen=True, slots=True)
class Checked:
    """One run's verdict.

    `status`: ok, drift, skipped (a run this agent did not make) or error
    (unreadable). `seq`: where it drifts, or where an unfinished run would
    go live (`ahead` says what it would do there). `recorded`/`now`: what
    differs, for a drift. `code`: `same`, `changed` (the run's code
    fingerprint differs from the code checking it), or None (none recorded).
    """

    path: str
    status: str
    detail: str = ""
    seq: int | None = None
    ahead: str | None = None
    field: str | None = None
    recorded: Any = None
    now: Any = None
    code: str | None = None
    finished: bool = True

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "skipped")

    def line(self) -> str:
        """The line `harness check` prints for this run."""
        if self.status == "ok":
            said = f"ok, {self.detail}" if self.detail else "ok"
            if self.ahead is not None:
                said = f"ok, would {'end' if self.ahead.startswith('end ') else 'go live'} at seq {self.seq} "
                said += f"({self.ahead.removeprefix('end ')})"
        elif self.status == "drift":
            said = f"drift at seq {self.seq}: {self.detail}" if self.seq is not None else f"drift: {self.detail}"
        else:
            said = f"{self.status}: {self.detail}"
        if self.code == "changed":
            said += " [code changed since it was recorded]"
        return f"{self.path}: {said}"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "status": self.status, "finished": self.finished, "seq": self.seq,
            "ahead": self.ahead, "field": self.field, "recorded": self.recorded, "now": self.now,
            "detail": self.detail, "code": self.code, "line": self.line(),
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Agent:
    """What the runs are checked against: a workflow, or an Executor's planner, tools and verifier."""

    workflow: Workflow[Any, Any] | None = None
    planner: Any = None
    tools: Mapping[str, Any] | None = None
    verifier: Any = None

    def keywords(self) -> dict[str, Any]:
        if self.workflow is not None:
            return {"workflow": self.workflow}
        return {"planner": self.planner, "tools": self.tools, "verifier": self.verifier}


def runs_of(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Each trace given, and the `*.jsonl` traces of each folder given (sorted); HarnessError for a path that is
    neither."""
    out: list[str] = []
    for given in (os.fspath(p) for p in paths):
        if is_url(given):
            raise HarnessError(f"{given}: check reads local traces and runs folders; copy the runs here first")
        if os.path.isdir(given):
            out.extend(sorted(_traces(given, recursive=False)))
        elif os.path.isfile(given):
            out.append(given)
        elif os.path.exists(given):  # (never opened: a FIFO's open would wait for a writer)
            raise HarnessError(f"{given}: neither a trace file nor a runs folder (a FIFO, a socket or a device)")
        else:
            raise HarnessError(f"{given}: no such trace or runs folder")
    return out


def check(
    paths: Iterable[str | os.PathLike[str]],
    *,
    workflow: Callable[..., Any] | None = None,
    planner: Any = None,
    tools: Mapping[str, Any] | None = None,
    verifier: Any = None,
    jobs: int = 1,
    on_result: Callable[[Checked], None] | None = None,
) -> list[Checked]:
    """Check each run of `paths` (traces or runs folders) against the agent; see the module docstring."""
    if type(jobs) is not int or jobs < 1:
        raise HarnessError(f"jobs must be an int of at least 1, not {jobs!r}")
    if (workflow is None) == (planner is None or tools is None) or (workflow is not None and planner is not None):
        raise HarnessError("give the agent: workflow=, or planner= and tools= (an Executor's agent); one of the two")
    w = None if workflow is None else workflow if isinstance(workflow, Workflow) else Workflow(workflow)
    agent = Agent(w, planner, tools, verifier)
    given = [os.fspath(p) for p in paths]
    runs = runs_of(given)
    scratch = tempfile.mkdtemp(prefix="harness-check-", dir=_scratch_root(given))
    results = []
    try:
        for result in _each(runs, agent, scratch, jobs):
            results.append(result)
            if on_result is not None:
                on_result(result)
    finally:  # (after an interrupt too: a worker stopped mid-run leaves its re-execution here)
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _each(runs: list[str], agent: Agent, scratch: str, jobs: int) -> Iterator[Checked]:
    if jobs == 1 or len(runs) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        for path in runs:
            yield check_one(path, agent, scratch)
        return
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("fork")  # the workers inherit the agent, imported once, and nothing pickled
    size = max(1, min(64, len(runs) // (jobs * 8)))
    chunks = [runs[i : i + size] for i in range(0, len(runs), size)]
    done = 0
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_adopt, initargs=(agent, scratch)) as pool:
        # submitted, not pool.map(): its iterator cancels what is pending when left, and a pool broken after that
        # (the workers stopped below) fails them again from its own thread, a traceback (CPython 3.11)
        futures = [pool.submit(_worker, chunk) for chunk in chunks]
        try:
            for future in futures:
                for result in future.result():
                    done += 1
                    yield result
        except BrokenProcessPool:  # a worker died (agent code that called os._exit, a kill): said, never a hang
            for path in runs[done:]:
                yield Checked(
                    path,
                    "error",
                    "a check worker process died while checking this run or one beside "
                    "it (did the agent's code exit the process?); check it alone: harness check PATH",
                )
        except BaseException:  # Ctrl-C (the workers ignore it), a consumer that stopped: the workers stop now
            workers = list((pool._processes or {}).values())  # (public only from Python 3.14: terminate_workers)
            for process in workers:
                process.terminate()
            for process in workers:  # gone before the scratch folder is removed: none writes there after
                process.join()
            raise


_worker_agent: tuple[Agent, str] | None = None


def _adopt(agent: Agent, scratch: str) -> None:
    global _worker_agent
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent alone answers it
    _worker_agent = (agent, scratch)


def _worker(paths: list[str]) -> list[Checked]:
    if _worker_agent is None:  # (the pool's initializer runs first)
        raise HarnessError("internal error, please report: a check worker started without its agent")
    return [check_one(path, *_worker_agent) for path in paths]


def _scratch_root(given: list[str]) -> str:
    """Where re-executions write: $TMPDIR when set (the user's choice), else /dev/shm (memory) when usable, else
    the temporary folder; never under a folder being checked."""
    inside = [os.path.realpath(g) for g in given]
    chosen = [os.environ["TMPDIR"]] if os.environ.get("TMPDIR") else []
    for root in (*chosen, "/dev/shm", tempfile.gettempdir()):
        real = os.path.realpath(root)
        if os.path.isdir(root) and os.access(root, os.W_OK) and not any(_under(real, g) for g in inside):
            return root
    raise HarnessError(
        f"no scratch folder outside {', '.join(given)}: set TMPDIR to a writable folder that is not a runs folder"
    )


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_one(path: str, agent: Agent, scratch: str) -> Checked:
    """One run's verdict (see the module docstring); never raises for a problem of the run."""
    folder = tempfile.mkdtemp(prefix="harness-check-", dir=scratch)
    try:
        source = path
        if is_golden_file(path):  # its records made into a trace in the scratch folder, then checked as one
            try:
                source = _golden_trace(path, folder)
            except HarnessError as e:
                return Checked(path, "error", str(e))
        try:
            rep = replay(source)
        except HarnessError as e:
            return Checked(path, "error", str(e))
        skip = _other_shape(rep, agent)
        if skip is not None:
            return Checked(path, "skipped", skip, finished=rep.complete)
        code = _code(rep, agent) if source == path else None
        verdict = _verdict(source, rep, agent, os.path.join(folder, "rerun.jsonl"), code)
        return verdict if source == path else replace(verdict, path=path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# the order of a record's fields in a trace (docs/FORMAT.md), for a golden's records made into one
_ORDER = (
    "seq", "kind", "agent", "schema", "run_id", "goal", "tools", "workflow", "redact", "env", "from", "to", "step",
    "attempt", "name", "tool", "args", "key", "contract", "result", "error", "question", "boundary", "request",
    "hash", "response", "child", "status", "op", "happened", "answer", "evidence", "set_aside", "state", "traceback",
    "type", "data", "sha256", "size",
)  # fmt: skip
_RANK = {k: i for i, k in enumerate(_ORDER)}
_CLOCK = {"now", "sleep", "backoff"}  # crossings whose response a golden leaves out (a clock reading)
_SERVABLE = frozenset({"header", "transition", "checkpoint", "crossing", "artifact", "resume", "crash", "seal"})


def _pai_response(response: dict[str, Any], start: float) -> dict[str, Any]:
    """A Pydantic AI reply as a golden holds it made servable: what the golden left out made up, as the framework
    would (a timestamp ModelResponse requires; a tool call id of its own for each call, which the door renames to
    `<tool-call-N>` in the next request as it did when recording)."""
    import datetime
    import uuid

    import orjson

    if response.get("timestamp") == IGNORED:
        response = {**response, "timestamp": datetime.datetime.fromtimestamp(start, datetime.UTC).isoformat()}
    data = orjson.dumps(response)
    if b"pyd_ai_<id>" not in data:
        return response
    fresh = b"".join(part + (b"pyd_ai_" + uuid.uuid4().hex.encode()) for part in data.split(b"pyd_ai_<id>")[:-1])
    out: dict[str, Any] = orjson.loads(fresh + data.split(b"pyd_ai_<id>")[-1])
    return out


def _golden_trace(path: str, folder: str) -> str:
    """A golden file's records as a trace in folder, served as the run it pins: a run id, timestamps, request
    hashes and idempotency keys made up, a clock reading the golden left out read as its start, a streamed model
    reply it holds as its message written back as a stream. HarnessError for a golden that cannot be (a run with
    agents, answers or reconciles: the golden holds neither the clocks nor the seqs they point to)."""
    import time
    import uuid

    from ..review.normalize import parse_golden
    from ..trace.line import encode
    from ..trace.stream import rechunk

    with open(path, "rb") as f:
        records = parse_golden(f.read(), path)
    if not records or records[0].get("kind") != "header":
        raise HarnessError(f"{path}: a golden file whose first record is not a header")
    other = next((r["kind"] for r in records if r["kind"] not in _SERVABLE), None)
    if other is not None:  # (a golden of the behavior view holds a call as it reads, not as it was served)
        raise HarnessError(
            f"{path}: a golden of the behavior view ({other!r} records) cannot be rerun: it holds each call as it "
            "reads (messages and reply), not the exchange a rerun serves, and no run id to find its trace by. "
            "Check the trace it was written from (harness check TRACE), or rerun its test; to check goldens "
            'themselves, write them with golden_view = "raw" in [tool.harness] (pytest --snapshot-update)'
        )
    if any("vc" in r or r["kind"] in ("answer", "reconcile", "spawn") for r in records):
        raise HarnessError(
            f"{path}: a golden of a run with agents, answers or reconciles cannot be checked as a run (it holds "
            "neither the clocks nor the seqs they point to); rerun its test instead"
        )
    run_id, start = uuid.uuid4().hex, round(time.time(), 3)
    out: list[dict[str, Any]] = []
    for seq, rec in enumerate(records, 1):
        r = {k: v for k, v in rec.items() if k != "seal"}
        r["seq"] = seq
        if r["kind"] in ("header", "resume"):
            r["env"] = {"entrypoint": "<golden>"}
        if r["kind"] == "resume" and r.get("set_aside") is not None:
            raise HarnessError(f"{path}: record {seq}: a resume that set a torn tail aside: rerun its test instead")
        if r["kind"] == "header":
            r.update(run_id=run_id, ts=start)
        else:
            r["ts"] = 0.0
        if r["kind"] == "seal":
            continue  # a golden's seal holds its state only: the trace ends unsealed, as a migrated one does
        if (
            r["kind"] == "transition"
            and isinstance(r.get("contract"), dict)
            and r["contract"].get("effect") == ("idempotent")
        ):
            r["key"] = S.key_of(run_id, r["step"], r.get("attempt", 1))
        if r["kind"] == "crossing":
            kind = r.get("boundary")
            if kind in _CLOCK and "response" not in r and "error" not in r:
                r["response"] = {"delay": 0.0, "wake": start} if kind == "backoff" else start
            response = r.get("response")
            if kind == "http" and isinstance(response, dict) and "stream" in response:
                chunks = rechunk(response["stream"], [])
                if chunks is None:
                    raise HarnessError(f"{path}: record {seq}: a streamed reply that cannot be written as a stream")
                r["response"] = {**{k: v for k, v in response.items() if k != "stream"}, "chunks": chunks}
            if kind == "pydantic_ai.model" and isinstance(response, dict):
                r["response"] = _pai_response(response, start)
            r["hash"] = request_hash(str(kind), r.get("request"))
        out.append(dict(sorted(r.items(), key=lambda kv: _RANK.get(kv[0], len(_RANK)))))
    trace, crc = os.path.join(folder, "golden.jsonl"), 0
    with open(trace, "wb") as f:
        for r in out:  # ts last (before crc): the journal's spelling
            line, crc = encode({**{k: v for k, v in r.items() if k != "ts"}, "ts": r["ts"]}, crc)
            f.write(line)
    return trace


def _other_shape(rep: Replay, agent: Agent) -> str | None:
    """Why this run is not one the agent made, or None."""
    if rep.transitions == 0 and rep.records > 1:
        return "a Recorder's trace: there is no agent loop to replay"
    if rep.transitions == 0:
        return "the run has not started"
    w = agent.workflow
    if w is not None and rep.workflow is None:
        return "an Executor's run: check it with --agent"
    if w is not None and rep.workflow is not None and not same_workflow(rep.workflow, w.name):
        return f"a run of workflow {rep.workflow}, not {w.name}"
    if w is None and rep.workflow is not None:
        return f"a run of workflow {rep.workflow}: check it with --workflow"
    return None


def _verdict(path: str, rep: Replay, agent: Agent, out: str, code: str | None) -> Checked:
    finished = rep.complete
    try:
        done = rerun(path, out=out, **agent.keywords())
    except ReplayDrift as e:
        field, (was, now) = next(iter(e.fields.items()), ("?", (None, None)))
        said = f"{field}: recorded {_short(was)}, now {_short(now)}"
        return Checked(path, "drift", said, e.seq, None, field, was, now, code, finished)
    except ReplayViolation as e:
        said = f"recorded {_recorded_at(path, e.seq)}, now {_violation(str(e))}"
        return Checked(path, "drift", said, e.seq, code=code, finished=finished)
    except ResumeMismatch as e:
        return Checked(path, "skipped", str(e), code=code, finished=finished)
    except NotSerializable as e:  # the code now hands over what no trace can hold: a resume would fail as well
        return Checked(path, "drift", f"now raises NotSerializable: {_cut(str(e))}", code=code, finished=finished)
    except HarnessError as e:
        return Checked(path, "error", str(e), code=code, finished=finished)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # the agent's own code raised (or exited) where the recording shows none
        return Checked(path, "drift", f"now raises {type(e).__name__}: {_cut(str(e))}", code=code, finished=finished)
    if done.equal:
        seq = rep.last_seq + 1 if done.ahead is not None else None
        paused = "paused: waits for an answer or a reconcile" if done.state == "PAUSED" and seq is None else ""
        return Checked(path, "ok", paused, seq=seq, ahead=done.ahead, code=code, finished=finished)
    return _difference(path, done, code, finished)


def _difference(path: str, done: Rerun, code: str | None, finished: bool) -> Checked:
    """The first record where the re-execution differs from the recording (the new trace is done.trace)."""
    was, now = normalize(path), normalize(list(done.records))
    if not finished:
        now = now[: len(was)]
    for i, (a, b) in enumerate(zip(was, now, strict=False)):
        if a != b:
            field, (x, y) = next(iter(differences(a, b).items()), ("record", (a, b)))
            said = f"{field}: recorded {_short(x)}, now {_short(y)}"
            error = b.get("error")
            if isinstance(error, dict) and error != a.get("error"):  # what the code raised now, where it did not
                said += f" ({error.get('type')}: {_cut(str(error.get('message')), 120)})"
            return Checked(path, "drift", said, i + 1, None, field, x, y, code, finished)
    if len(now) < len(was):
        seq = len(now) + 1
        said = f"recorded {describe_record(was[len(now)])}, now the run ends before it"
        return Checked(path, "drift", said, seq, code=code, finished=finished)
    if len(now) > len(was):
        said = f"recorded the end of the run, now {describe_record(now[len(was)])}"
        return Checked(path, "drift", said, len(was) + 1, code=code, finished=finished)
    said = f"{done.unused} recorded crossing(s) were not made again"
    return Checked(path, "drift", said, code=code, finished=finished)


def _recorded_at(path: str, seq: int | None) -> str:
    if seq is None:
        return "?"
    with contextlib.suppress(HarnessError, IndexError):
        records = normalize(path)
        return describe_record(records[seq - 1]) if seq <= len(records) else "the end of the run"
    return "?"


def _violation(message: str) -> str:
    """What a ReplayViolation says the code did: `a live llm call with request ...`."""
    said = message.partition(": ")[2] or message
    return _cut(said.partition(" during a re-execution")[0])


def _code(rep: Replay, agent: Agent) -> str | None:
    """`same` or `changed`: the run's recorded code fingerprint against that of the code checking it (the agent's
    module, or what `[tool.harness] fingerprint` names); None when the run records none."""
    env = rep.header.get("env")
    code = env.get("code") if isinstance(env, dict) else None
    if not isinstance(code, dict):
        return None
    w = agent.workflow
    now = code_of_modules((w.name.partition(":")[0],)) if w is not None else code_of((agent.planner,))
    return None if now is None else "same" if now.get("sha256") == code.get("sha256") else "changed"


def _short(value: Any, width: int = 80) -> str:
    """A value as the line shows it: its repr, cut to width."""
    return _cut(repr(value), width)


def _cut(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def summary(results: list[Checked]) -> str:
    """`1000 runs: 990 ok (12 would go live), 8 drift, 2 skipped; 40 recorded with other code`."""
    count = {s: sum(1 for r in results if r.status == s) for s in STATUSES}
    live = sum(1 for r in results if r.status == "ok" and r.ahead is not None)
    parts = [f"{count['ok']} ok" + (f" ({live} unfinished, would go on)" if live else "")]
    parts += [f"{count[s]} {s}" for s in STATUSES[1:] if count[s]]
    changed = sum(1 for r in results if r.code == "changed")
    tail = f"; {changed} recorded with code other than today's" if changed else ""
    return f"{len(results)} run{'s' if len(results) != 1 else ''}: {', '.join(parts)}{tail}"


def exit_code(results: list[Checked]) -> int:
    """2 on bad input (a run unreadable, or no run checked at all), else 1 on any drift, else 0."""
    if any(r.status == "error" for r in results) or not any(r.status in ("ok", "drift") for r in results):
        return 2
    return 1 if any(r.status == "drift" for r in results) else 0
