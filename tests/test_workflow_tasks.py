"""Concurrent calls are told apart by the task that made them (issue 34), not by what they carry.

Alice's and Bob's calls (tests/money_agent.py) carry equal args once their API keys are redacted. Each task a
workflow creates is named by creation order (`task`: "1", "2", "1.1"; FORMAT.md "Tasks"), its calls carry the
name, and a resume serves each recorded call only to the task that made it: a SIGKILL anywhere, then a resume
in a new process, charges each account exactly once. A trace written before tasks were named is matched as
before, except that a concurrent call it could confuse with a sibling's is refused, naming the recorded seqs,
with nothing written.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import money_agent
import pytest
from children import ZYGOTE, kill_at
from hypothesis import given
from hypothesis import strategies as st
from test_workflow import rewrite
from test_workflow_gather import records

import harness
import harness.runtime.workflow as _workflow
from harness import AmbiguousCall, TraceCorruption, replay
from harness.trace.tasks import task_of, well_formed

TESTS = Path(__file__).resolve().parent
CHILD = f"""
import contextlib, json, sys
sys.path.insert(0, {str(TESTS)!r})
import money_agent
if sys.argv[3] == "unnamed":  # a writer from before tasks were named
    import harness.runtime.workflow
    harness.runtime.workflow.numbering = contextlib.nullcontext
out = getattr(money_agent, sys.argv[2]).run(trace=sys.argv[1], resume="auto")
print(json.dumps({{"state": out.state, "result": out.result}}))
"""
LEDGER = {"pay": "charge", "settle": "deposit"}
ACCOUNTS = {"pay": ["alice", "bob"], "settle": ["acct-alice", "acct-bob"]}


def effects(folder: Path, wf: str) -> list[str]:
    """The accounts the workflow's effects went to, one per effect."""
    path = folder / LEDGER[wf]
    return sorted(line.split()[0] for line in path.read_text().splitlines()) if path.exists() else []


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder for the run's trace and its ledger ($WF_LEDGER), killed nowhere unless a child is told."""
    monkeypatch.setenv("WF_LEDGER", str(tmp_path))
    monkeypatch.delenv("WF_KILL", raising=False)
    return tmp_path


def killed(folder: Path, wf: str, point: str, how: str = "named") -> Path:
    """A run of wf SIGKILLed at point (in a child process); its trace."""
    trace, mark = folder / "run.jsonl", folder / "mark"
    env = {**os.environ, "WF_LEDGER": str(folder), "WF_KILL": point, "WF_MARK": str(mark)}
    child = ZYGOTE.Popen([sys.executable, "-c", CHILD, str(trace), wf, how], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    kill_at(mark, child, point)
    assert child.returncode == -9
    return trace


@contextlib.contextmanager
def unnamed() -> Iterator[None]:
    """Record as harness did before it named tasks: no numbering, so no `task` field."""
    numbering = _workflow.numbering
    _workflow.numbering = contextlib.nullcontext  # type: ignore[assignment]
    try:
        yield
    finally:
        _workflow.numbering = numbering


# --- the money program: SIGKILL at every point, resume in a new process ----------------------------------


@pytest.mark.parametrize(("wf", "point"), [(wf, p) for wf, points in money_agent.POINTS.items() for p in points])
def test_a_sigkill_anywhere_then_a_resume_charges_each_account_once(tmp_path: Path, wf: str, point: str) -> None:
    trace = killed(tmp_path, wf, point)
    env = {**os.environ, "WF_LEDGER": str(tmp_path)}
    env.pop("WF_KILL", None)
    done = ZYGOTE.run([sys.executable, "-c", CHILD, str(trace), wf, "named"], env=env, capture_output=True,
                      text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"state": "DONE", "result": money_agent.EXPECTED[wf]}
    assert effects(tmp_path, wf) == ACCOUNTS[wf]  # each account exactly once: nobody's result served to another
    rep = replay(trace)
    assert rep.state == "DONE" and rep.returned == money_agent.EXPECTED[wf]
    intents = [r for r in records(trace) if r["kind"] == "transition" and r["to"] == "ACT"]
    assert {r["task"] for r in intents} == {"1", "2"}  # alice's task is "1", bob's "2", on both sides of the crash
    again = harness.rerun(trace, workflow=getattr(money_agent, wf))
    assert again.equal and again.live_calls == 0


def test_each_task_is_served_its_own_result_when_the_recording_went_the_other_way(folder: Path) -> None:
    """The issue's case, in one process: bob's charge was recorded first, alice's was in flight; on resume alice's
    task comes first and must not take bob's recorded result (equal args as redacted)."""
    trace = killed(folder, "pay", "in-charge-alice")
    assert effects(folder, "pay") == ["bob"]
    order = [(r.get("task"), r["args"]) for r in records(trace) if r["kind"] == "transition" and r["to"] == "ACT"]
    assert order == [("2", {"api_key": "[REDACTED]", "cents": 500}), ("1", {"api_key": "[REDACTED]", "cents": 500})]
    out = money_agent.pay.run(trace=trace, resume=True)
    assert out.state == "DONE" and out.result == money_agent.EXPECTED["pay"]
    assert effects(folder, "pay") == ["alice", "bob"]


# --- a trace written before tasks were named ---------------------------------------------------------------


def test_an_unnamed_trace_refuses_a_call_two_recorded_calls_match_only_as_redacted(folder: Path) -> None:
    trace = killed(folder, "pay", "in-charge-alice", how="unnamed")
    assert b'"task"' not in trace.read_bytes()
    intents = [r["seq"] for r in records(trace) if r["kind"] == "transition" and r["to"] == "ACT"]
    before, made = trace.read_bytes(), effects(folder, "pay")
    with pytest.raises(AmbiguousCall) as e:
        money_agent.pay.run(trace=trace, resume=True)
    assert e.value.seqs == intents  # bob's (done) and alice's (in flight): both named
    said = str(e.value)
    assert f"seq {intents[0]} and seq {intents[1]}" in said
    assert "nothing was called live and nothing was written" in said
    assert trace.read_bytes() == before and effects(folder, "pay") == made  # nothing written, nobody charged


def test_an_unnamed_trace_refuses_a_crossing_of_a_task_that_matches_only_as_redacted(folder: Path) -> None:
    async def echo(request: dict[str, Any]) -> dict[str, Any]:
        return {"for": money_agent.OWNER[request["api_key"]]}

    @harness.workflow
    async def both() -> list[Any]:
        asks = (harness.allm({"api_key": key, "q": "balance"}, echo) for key in money_agent.KEYS.values())
        return list(await asyncio.gather(*asks))

    trace = folder / "run.jsonl"
    with unnamed():
        assert both.run(trace=trace).result == [{"for": "alice"}, {"for": "bob"}]
    crossings = [c.seq for c in replay(trace).crossings]
    with pytest.raises(AmbiguousCall) as e:
        harness.rerun(trace, workflow=both, out=folder / "again.jsonl")
    assert e.value.seqs == crossings and "llm crossing of concurrent task 1" in str(e.value)


def test_an_unnamed_trace_without_secrets_resumes_and_reruns_as_before(folder: Path) -> None:
    calls: list[str] = []

    async def model(request: dict[str, Any]) -> str:
        calls.append(request["q"])
        return request["q"].upper()

    @harness.workflow
    async def plain() -> list[str]:
        return list(await asyncio.gather(*(harness.allm({"q": q}, model) for q in ("a", "b"))))

    trace = folder / "run.jsonl"
    with unnamed():
        assert plain.run(trace=trace).result == ["A", "B"]
    again = harness.rerun(trace, workflow=plain, out=folder / "again.jsonl")
    assert again.equal and again.live_calls == 0 and calls == ["a", "b"]
    assert b'"task"' not in (folder / "again.jsonl").read_bytes()  # it goes on in its recording's way


# --- how tasks are named ---------------------------------------------------------------------------------


async def _echo(request: Any) -> Any:
    return request


def test_tasks_are_named_by_creation_order_at_any_depth(folder: Path) -> None:
    async def leaf(tag: str) -> Any:
        return await harness.allm({"tag": tag}, _echo)

    async def branch(tag: str) -> list[Any]:
        return list(await asyncio.gather(leaf(tag + ".a"), leaf(tag + ".b")))

    @harness.workflow
    async def tree() -> Any:
        await leaf("root")
        async with asyncio.TaskGroup() as group:
            group.create_task(branch("x"))
            group.create_task(leaf("y"))
        return await asyncio.create_task(leaf("z"))

    trace = folder / "run.jsonl"
    assert tree.run(trace=trace).state == "DONE"
    named = {r["request"]["tag"]: r.get("task") for r in records(trace) if r["kind"] == "crossing"}
    assert named == {"root": None, "x.a": "1.1", "x.b": "1.2", "y": "2", "z": "3"}
    assert sorted(named.values(), key=lambda t: task_of({"task": t} if t else {})) == [None, "1.1", "1.2", "2", "3"]
    assert harness.rerun(trace, workflow=tree).equal


def test_tasks_made_inside_a_call_are_not_counted(folder: Path) -> None:
    """A tool's own tasks happen only when it runs live: counting them would rename the tasks after it on resume."""

    async def busy() -> str:
        await asyncio.gather(asyncio.sleep(0), asyncio.sleep(0))  # its own tasks (an HTTP client's, say)
        return "done"

    @harness.workflow
    async def flow() -> Any:
        await harness.acall(busy)
        return await asyncio.gather(harness.allm({"n": 1}, _echo), harness.allm({"n": 2}, _echo))

    trace = folder / "run.jsonl"
    assert flow.run(trace=trace).state == "DONE"
    assert [r.get("task") for r in records(trace) if r["kind"] == "crossing"] == ["1", "2"]
    assert harness.rerun(trace, workflow=flow).equal  # served, the tool makes no task: the same names


async def _paid(request: dict[str, Any]) -> dict[str, Any]:
    return {"paid": money_agent.OWNER[request["api_key"]]}


async def _pay(who: str) -> Any:
    return await harness.allm({"api_key": money_agent.KEYS[who], "cents": 500}, _paid)


async def _slowly(request: Any) -> Any:
    await asyncio.sleep(0.2)  # live, the task created meanwhile comes first; served at once, after
    return request


@pytest.mark.parametrize("how", ["done callback", "another task in its context"])
def test_a_task_created_when_something_else_happens_does_not_renumber_its_creators_tasks(
    folder: Path, how: str
) -> None:
    """A task made from a callback, or by another task running a copy of its creator's context (MCP's and Pydantic
    AI's streams do), comes when a call finishes: live, during the root's slow call; on a rerun (served at once),
    after. Counted, bob's task was "3" when recorded and "2" on the rerun, which served it alice's refund (task
    "2" then, equal args as redacted)."""
    later: list[asyncio.Future[Any]] = []

    @harness.workflow
    async def flow() -> Any:
        alice = asyncio.create_task(_pay("alice"))
        done = asyncio.create_task(asyncio.sleep(0.01))
        if how == "done callback":
            done.add_done_callback(lambda _: later.append(asyncio.ensure_future(_pay("alice"))))
        else:
            mine = contextvars.copy_context()

            async def pump() -> None:  # a stream's writer: it starts a handler in its sender's context
                await done
                later.append(mine.run(asyncio.ensure_future, _pay("alice")))

            later.append(asyncio.ensure_future(pump()))
        await harness.allm({"quote": 1}, _slowly)
        bob = asyncio.create_task(_pay("bob"))
        await done  # (its callback runs first: added first)
        while later:
            await later.pop()
        return [await alice, await bob]

    trace = folder / "run.jsonl"
    assert flow.run(trace=trace).result == [{"paid": "alice"}, {"paid": "bob"}]
    again = harness.rerun(trace, workflow=flow, out=folder / "again.jsonl")
    assert replay(folder / "again.jsonl").returned == [{"paid": "alice"}, {"paid": "bob"}]
    assert again.equal and again.live_calls == 0


class _Client:
    """An HTTP client that closes itself when collected, as openai's async client does (a task from `__del__`);
    its resources point back at it (a cycle: the garbage collector frees it, when it runs)."""

    def __init__(self) -> None:
        self.resources = {"client": self}

    async def aclose(self) -> None:
        pass

    def __del__(self) -> None:
        asyncio.get_running_loop().create_task(self.aclose())


async def _with_client(request: Any) -> Any:
    _Client()  # made by the live call only, freed later
    return request


def test_a_task_created_by_a_finalizer_does_not_renumber_its_creators_tasks(folder: Path) -> None:
    @harness.workflow
    async def flow() -> Any:
        alice = asyncio.create_task(_pay("alice"))
        await harness.allm({"quote": 1}, _with_client)
        gc.collect()  # the collector runs here (in a program: when allocations cross its threshold)
        bob = asyncio.create_task(_pay("bob"))
        return [await alice, await bob]

    trace = folder / "run.jsonl"
    assert flow.run(trace=trace).result == [{"paid": "alice"}, {"paid": "bob"}]
    assert [r.get("task") for r in records(trace) if r["kind"] == "crossing"] == [None, "1", "2"]
    again = harness.rerun(trace, workflow=flow, out=folder / "again.jsonl")
    assert again.equal and again.live_calls == 0


async def _charged(api_key: str, cents: int) -> dict[str, Any]:
    return {"charged": money_agent.OWNER[api_key], "cents": cents}


async def _pay_by(how: str, who: str) -> dict[str, Any]:
    """One payment of who's, as a crossing or as a tool call; what was paid and for whom."""
    if how == "crossing":
        out = await harness.allm({"api_key": money_agent.KEYS[who], "cents": 500}, _paid)
    else:
        out = await harness.acall(_charged, api_key=money_agent.KEYS[who], cents=500)
    return {"for": who, **out}


@pytest.mark.parametrize("how", ["crossing", "tool call"])
def test_calls_of_tasks_as_completed_makes_from_coroutines_are_refused_not_served_by_name(
    folder: Path, how: str
) -> None:
    """asyncio.as_completed() makes a task of each coroutine in a set's order (by address): alice's payment may be
    task 1 on one run and task 2 on the next, and a rerun served alice bob's charge. Its tasks' calls whose args
    hold a secret are refused (AmbiguousCall), naming the seqs; made first, the same tasks are served."""

    @harness.workflow
    async def loose() -> list[Any]:
        paid = [await done for done in asyncio.as_completed([_pay_by(how, who) for who in money_agent.PEOPLE])]
        return sorted(paid, key=lambda p: p["for"])

    @harness.workflow
    async def made_first() -> list[Any]:
        tasks = [asyncio.create_task(_pay_by(how, who)) for who in money_agent.PEOPLE]
        return sorted([await done for done in asyncio.as_completed(tasks)], key=lambda p: p["for"])

    paid = [{"for": who, "paid": who} for who in money_agent.PEOPLE]
    if how == "tool call":
        paid = [{"for": who, "charged": who, "cents": 500} for who in money_agent.PEOPLE]
    for flow, name in ((loose, "loose"), (made_first, "first")):
        trace = folder / f"{name}.jsonl"
        assert flow.run(trace=trace).result == paid
    answers = [r["seq"] for r in records(folder / "loose.jsonl") if r["kind"] == "crossing" or r.get("to") == "VERIFY"]
    with pytest.raises(AmbiguousCall) as e:
        harness.rerun(folder / "loose.jsonl", workflow=loose)
    assert e.value.seqs == answers  # alice's and bob's, both
    assert "asyncio.as_completed()" in str(e.value)
    again = harness.rerun(folder / "first.jsonl", workflow=made_first)
    assert again.equal and again.live_calls == 0


def test_a_run_without_concurrent_tasks_writes_no_task_field(folder: Path) -> None:
    @harness.workflow
    async def one_by_one() -> Any:
        first = await harness.allm({"n": 1}, _echo)
        return [first, await harness.acall(money_agent.CHARGE, api_key=money_agent.KEYS["bob"], cents=1)]

    trace = folder / "run.jsonl"
    assert one_by_one.run(trace=trace).state == "DONE"
    assert b'"task"' not in trace.read_bytes()


def test_the_loops_task_factory_is_kept_under_the_numbering_and_put_back(folder: Path) -> None:
    made: list[str] = []

    def mine(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", "?"))
        return asyncio.Task(coro, loop=loop, **kwargs)

    @harness.workflow
    async def two() -> Any:
        return await asyncio.gather(harness.allm({"n": 1}, _echo), harness.allm({"n": 2}, _echo))

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        loop.set_task_factory(mine)
        out = await two.arun(trace=folder / "run.jsonl")
        return out, loop.get_task_factory()

    out, factory = asyncio.run(main())
    assert out.state == "DONE" and factory is mine and made[:2] == ["allm", "allm"]  # made by the user's factory
    assert [r.get("task") for r in records(folder / "run.jsonl") if r["kind"] == "crossing"] == ["1", "2"]


# --- the reader: the field's one spelling ----------------------------------------------------------------


@pytest.mark.parametrize("bad", ["0", "01", "1.", ".1", "1..2", "a", "", 2, None, ["1"]])
def test_the_reader_refuses_a_task_in_another_spelling(folder: Path, bad: Any) -> None:
    trace = folder / "run.jsonl"
    assert money_agent.pay.run(trace=trace).state == "DONE"
    for kind in ("crossing", "transition"):
        copy = folder / f"{kind}.jsonl"
        copy.write_bytes(trace.read_bytes())
        seq = next(r["seq"] for r in records(copy) if r["kind"] == kind and "task" in r)
        rewrite(copy, seq, lambda r: r.update(task=bad))
        with pytest.raises(TraceCorruption) as e:
            replay(copy)
        assert (e.value.reason, e.value.seq) == ("malformed", seq)


@given(st.lists(st.integers(1, 10**9 - 1), min_size=1, max_size=8))
def test_every_creation_path_has_one_spelling_that_reads_back(path: list[int]) -> None:
    name = ".".join(map(str, path))
    assert well_formed(name) and task_of({"task": name}) == tuple(path)
    assert not well_formed(name + ".0") and not well_formed("0" + name) and not well_formed(name + ".")
    assert task_of({"kind": "crossing"}) == ()  # the root task: no field


def test_an_executors_async_planner_names_the_tasks_of_each_call_from_1(folder: Path) -> None:
    """Each planner call is a root of its own: a resume calls the open step's planner again, and its tasks must
    get the names they had."""

    async def balance(request: dict[str, Any]) -> dict[str, Any]:
        return {"who": money_agent.OWNER[request["api_key"]], "step": request["step"]}

    async def planner(goal: Any, done: list[Any]) -> harness.Step | None:
        if len(done) == 2:
            return None
        asks = (harness.allm({"api_key": key, "step": len(done)}, balance) for key in money_agent.KEYS.values())
        seen = await asyncio.gather(*asks)
        return harness.Step(f"s{len(done)}", "note", {"seen": [s["who"] for s in seen]})

    def note(seen: list[str]) -> list[str]:
        return seen

    async def main() -> Any:
        return await harness.Executor(planner=planner, tools={"note": note}, trace=folder / "run.jsonl").arun("g")

    assert asyncio.run(main()).state == "DONE"
    crossings = [r for r in records(folder / "run.jsonl") if r["kind"] == "crossing"]
    assert [(r["task"], r["request"]["step"]) for r in crossings] == [("1", 0), ("2", 0), ("1", 1), ("2", 1)]
    again = harness.rerun(folder / "run.jsonl", planner=planner, tools={"note": note})
    assert again.equal and again.live_calls == 0


def test_a_fork_keeps_each_tasks_recorded_calls_and_makes_the_branchs_live(folder: Path) -> None:
    trace = folder / "run.jsonl"
    assert money_agent.pay.run(trace=trace).state == "DONE"
    quote = next(c.seq for c in replay(trace).crossings if c.kind == "llm")
    child = folder / "fork.jsonl"
    out = harness.fork(trace, at=quote, value={"cents": 700}, workflow=money_agent.pay, out=child)
    assert out.state == "DONE" and replay(child).returned == [
        {"charged": "alice", "cents": 700},
        {"charged": "bob", "cents": 500},
    ]
    forked = records(child)
    bob = [r for r in forked if r["kind"] == "transition" and r["to"] == "ACT" and r["task"] == "2"]
    assert len(bob) == 1 and bob[0].get("reused") and bob[0]["seq"] < quote  # bob's charge: the parent's
    assert effects(folder, "pay") == ["alice", "alice", "bob"]  # the fork charged alice (live), not bob again
