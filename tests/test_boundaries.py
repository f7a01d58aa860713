"""Boundaries: what crosses them is recorded, served back on rerun, and nothing else is."""

from __future__ import annotations

import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness
from harness import Executor, NotSerializable, Step, ToolError
from harness.testing import FakeLLM, read_records


class RateLimited(Exception):
    """A model client's own exception type: rebuilt by its module and name on rerun."""


class Quota(ToolError):
    """A tool's own ToolError subclass."""


def refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("called live during a rerun")


def one_step(tool: str = "work", **args: Any) -> Any:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        return None if done else Step("only", tool, args)

    return planner


# --- outside a run: plain behaviour -----------------------------------------------------


def test_outside_a_run_they_behave_like_their_plain_counterparts() -> None:
    t = harness.now()
    assert isinstance(t, datetime) and t.tzinfo is not None and t.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert abs((datetime.now(UTC) - t).total_seconds()) < 3600  # a real reading, not a fixed value
    draws = [harness.random() for _ in range(200)]
    assert all(type(x) is float and 0.0 <= x < 1.0 for x in draws)
    assert len(set(draws)) > 190
    ids = [harness.uuid4() for _ in range(50)]
    assert all(isinstance(u, uuid.UUID) and u.version == 4 for u in ids) and len(set(ids)) == 50
    calls: list[int] = []
    assert harness.boundary("db", {"q": 1}, lambda: calls.append(1) or "row") == "row"
    assert harness.llm({"p": "hi"}, lambda req: f"echo {req['p']}") == "echo hi"
    assert calls == [1]


# --- inside a run: recorded, in order ----------------------------------------------------


def test_each_crossing_is_recorded_with_request_hash_and_response(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        seen["now"], seen["random"], seen["uuid"] = harness.now(), harness.random(), harness.uuid4()
        seen["llm"] = harness.llm({"prompt": "q?"}, FakeLLM(["a!"]))
        seen["db"] = harness.boundary("db", {"sql": "select 1"}, lambda: [[1]])
        return Step("only", "work", {"x": 1})

    trace = tmp_path / "run.jsonl"
    Executor(planner=planner, tools={"work": lambda x: {"y": x + 1}}, trace=trace).run("g")
    crossings = list(harness.replay(trace).crossings)
    assert [c.kind for c in crossings] == ["now", "random", "uuid4", "llm", "db", "tool"]
    records = read_records(trace)
    for c in crossings:  # seq is the record carrying the response
        assert records[c.seq - 1]["seq"] == c.seq
    now, rnd, uid, llm, db, tool = crossings
    assert seen["now"] == datetime.fromtimestamp(now.response, UTC)
    assert seen["random"] == rnd.response and type(rnd.response) is float
    assert seen["uuid"] == uuid.UUID(uid.response)
    assert (llm.request, llm.response, db.request, db.response) == ({"prompt": "q?"}, "a!", {"sql": "select 1"}, [[1]])
    assert records[llm.seq - 1]["hash"] == llm.hash and records[db.seq - 1]["hash"] != llm.hash
    assert tool.request == {"tool": "work", "args": {"x": 1}} and tool.response == {"y": 2}
    assert records[tool.seq - 1]["from"] == "ACT" and records[tool.seq - 1]["to"] == "VERIFY"


def test_a_rejected_result_is_still_recorded_before_verify(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    ex = Executor(
        planner=one_step(),
        tools={"work": lambda: "bad"},
        verifier=lambda s, r: False,
        trace=trace,
        retry=harness.RetryPolicy(1),
    )
    assert ex.run("g").state == "FAILED"
    (c,) = harness.replay(trace).crossings
    assert c.response == "bad" and read_records(trace)[c.seq]["to"] == "FAILED"


def test_a_nested_crossing_belongs_to_the_outer_one(tmp_path: Path) -> None:
    inner: list[Any] = []

    def client(request: Any) -> str:  # an LLM client that makes its own request id and reads the clock
        inner.append((harness.uuid4(), harness.now()))
        return "answer"

    def tool() -> dict[str, Any]:  # a tool that reads the clock and calls a model
        inner.append(harness.now())
        return {"said": harness.llm({"p": "inner"}, client)}

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        harness.llm({"p": "outer"}, client)
        return Step("only", "work", {})

    trace = tmp_path / "run.jsonl"
    Executor(planner=planner, tools={"work": tool}, trace=trace).run("g")
    assert len(inner) == 3  # the nested calls did run
    crossings = list(harness.replay(trace).crossings)
    assert [(c.kind, c.request) for c in crossings] == [("llm", {"p": "outer"}), ("tool", {"tool": "work", "args": {}})]
    assert [r["kind"] for r in read_records(trace)].count("crossing") == 1
    # and on rerun nothing nested is expected: all of it is served by the two outer crossings
    r = harness.rerun(trace, planner=planner, tools={"work": refuse})
    assert r.equal and r.live_calls == 0 and len(inner) == 3


def test_an_exception_across_a_boundary_is_recorded_and_raised_again_at_the_same_point(tmp_path: Path) -> None:
    caught: list[str] = []
    script = iter([RateLimited("slow down"), TimeoutError("model timed out"), "fine"])

    def client(request: Any) -> str:
        answer = next(script)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        while True:
            try:
                said = harness.llm({"p": "hello"}, client)
                break
            except (RateLimited, TimeoutError) as e:
                caught.append(f"{type(e).__name__}: {e}")
        return Step("only", "work", {"said": said})

    trace = tmp_path / "run.jsonl"
    Executor(planner=planner, tools={"work": lambda said: said}, trace=trace).run("g")
    crossings = list(harness.replay(trace).crossings)
    assert [c.error for c in crossings[:3]] == [
        {"type": f"{__name__}.RateLimited", "message": "slow down"},
        {"type": "builtins.TimeoutError", "message": "model timed out"},
        None,
    ]
    assert caught == ["RateLimited: slow down", "TimeoutError: model timed out"]
    r = harness.rerun(trace, planner=planner, tools={"work": refuse})
    assert caught[2:] == caught[:2]  # raised again, same types, same messages, same order
    assert r.equal and r.live_calls == 0


def test_a_tool_error_subclass_comes_back_the_same_on_rerun(tmp_path: Path) -> None:
    calls: list[int] = []

    def tool() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Quota("quota exceeded")
        return "ok"

    trace = tmp_path / "run.jsonl"
    assert Executor(planner=one_step(), tools={"work": tool}, trace=trace).run("g").state == "DONE"
    failed = harness.replay(trace).crossings[0]
    assert failed.error == {"type": "Quota", "message": "quota exceeded"}
    r = harness.rerun(trace, planner=one_step(), tools={"work": refuse})
    assert r.equal and r.live_calls == 0 and len(calls) == 2


def test_a_request_that_is_not_json_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    calls: list[int] = []

    def planner(goal: Any, done: list[Any]) -> Step | None:
        harness.boundary("db", {"big": 2**70}, lambda: calls.append(1))
        return None

    trace = tmp_path / "run.jsonl"
    with pytest.raises(NotSerializable, match=r"^request: \.big is the integer \d+, out of the 64-bit range"):
        Executor(planner=planner, tools={}, trace=trace).run("g")
    records = read_records(trace)
    assert calls == [] and [r["kind"] for r in records] == ["header", "transition", "crash"]
    assert records[-1]["error"]["type"] == "harness._errors.NotSerializable"  # why it stopped; not the value


# --- many shapes of boundary use: recorded, then served back exactly ---------------------

OPS = st.lists(
    st.one_of(
        st.just(("now",)), st.just(("random",)), st.just(("uuid4",)),
        st.tuples(st.just("llm"), st.text(max_size=8), st.booleans()),
        st.tuples(st.just("db"), st.dictionaries(st.text(max_size=3), st.integers(-(2**63), 2**63 - 1), max_size=2)),
    ),
    max_size=5,
)  # fmt: skip


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(OPS, min_size=1, max_size=4))
def test_any_mix_of_boundaries_reruns_with_zero_live_calls(plan: list[list[tuple[Any, ...]]]) -> None:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        if len(done) == len(plan):
            return None
        seen: list[Any] = []
        for op in plan[len(done)]:
            if op[0] == "now":
                seen.append(harness.now().timestamp())
            elif op[0] == "random":
                seen.append(harness.random())
            elif op[0] == "uuid4":
                seen.append(str(harness.uuid4()))
            elif op[0] == "llm":
                try:
                    seen.append(harness.llm({"p": op[1]}, lambda req, fail=op[2]: live_llm(req, fail)))
                except RateLimited as e:
                    seen.append(f"error {e}")
            else:
                seen.append(harness.boundary("db", op[1], lambda: harness.random()))
        return Step(f"s{len(done)}", "work", {"seen": seen})

    def live_llm(request: Any, fail: bool) -> str:
        if fail:
            raise RateLimited(f"no {request['p']}")
        return f"{request['p']}:{harness.random()}"  # nested: part of the llm crossing

    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "run.jsonl"
        Executor(planner=planner, tools={"work": lambda seen: seen}, trace=trace).run("g")
        r = harness.rerun(trace, planner=planner, tools={"work": refuse})
        assert r.equal and r.live_calls == 0 and r.unused == 0
        kinds = [c["boundary"] for c in r.records if c["kind"] == "crossing"]
        assert kinds == [op[0] for ops in plan for op in ops]  # nested draws inside llm and db: not recorded
