"""`@harness.tool` and `harness.idempotency_key()`: the signature kept, the same decorated function used by an
Executor, by a workflow and outside any run (sync and async), the key stable across a SIGKILL, bad input refused."""

from __future__ import annotations

import asyncio
import inspect
import json
import subprocess
import sys
import typing
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from children import kill_at
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import harness
from harness import Executor, HarnessError, Step, replay

TESTS = Path(__file__).resolve().parent
CALLS: list[tuple[str, Any]] = []


@harness.tool
def search(query: str, limit: int = 3) -> list[str]:
    """Search the catalogue."""
    CALLS.append(("search", query))
    return [f"{query}-{i}" for i in range(limit)]


@harness.tool(idempotent=True, version="2")
def charge(amount: int, *, currency: str = "EUR") -> dict[str, Any]:
    """Charge a card once per key."""
    key = harness.idempotency_key()
    CALLS.append(("charge", key))
    return {"charged": amount, "currency": currency, "key": key}


@harness.tool(idempotent=False, name="mail")
def send(to: str, /, *lines: str, **headers: str) -> str:
    CALLS.append(("send", to))
    return f"{to}: {' '.join(lines)} {sorted(headers.items())}"


@harness.tool(idempotent=True)
async def acharge(amount: int) -> dict[str, Any]:
    await asyncio.sleep(0)
    key = harness.idempotency_key()
    CALLS.append(("acharge", key))
    return {"charged": amount, "key": key}


@harness.workflow
def shop(item: str) -> dict[str, Any]:
    found = search(item, limit=2)
    paid = charge(7)
    sent = send("ann", "your", item, subject="order")
    return {"found": found, "paid": paid, "sent": sent}


@harness.workflow
async def ashop(item: str) -> dict[str, Any]:
    return {"paid": await acharge(3), "found": search(item, 1)}


def intents(path: Path) -> list[dict[str, Any]]:
    """The trace's transitions into ACT: each tool call's intent."""
    return [r for r in map(orjson.loads, path.read_bytes().splitlines()) if r.get("to") == "ACT"]


@pytest.fixture(autouse=True)
def _clean() -> None:
    CALLS.clear()


def test_the_signature_name_docstring_and_hints_are_the_originals() -> None:
    def original(query: str, limit: int = 3) -> list[str]:
        """Search the catalogue."""
        return []

    assert inspect.signature(search) == inspect.signature(original)
    assert search.__name__ == "search" and search.__doc__ == "Search the catalogue."
    assert typing.get_type_hints(search) == typing.get_type_hints(original)
    assert inspect.iscoroutinefunction(acharge) and not inspect.iscoroutinefunction(search)
    spec = search.__harness_tool__
    assert spec.name == "search" and spec.contract == {"effect": "at-least-once", "version": None}
    assert charge.__harness_tool__.contract == {"effect": "idempotent", "version": "2"}
    assert send.__harness_tool__.name == "mail" and send.__harness_tool__.contract["effect"] == "unsafe"


def test_outside_a_run_it_just_calls_the_function() -> None:
    assert search("a", 1) == ["a-0"]
    one, two = charge(5), charge(5)
    assert one["key"] != two["key"]  # a fresh key each: nothing will make these calls again
    assert send("bo", "hi", x="1") == "bo: hi [('x', '1')]"
    assert asyncio.run(acharge(2))["charged"] == 2
    assert [c[0] for c in CALLS] == ["search", "charge", "charge", "send", "acharge"]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'query'"):
        search()  # type: ignore[call-arg]  # the function's own error


def test_in_a_workflow_each_call_is_a_step_with_its_contract(tmp_path: Path) -> None:
    out = shop.run("tea", trace=tmp_path / "run.jsonl")
    assert out.state == "DONE", out.error
    rep = replay(tmp_path / "run.jsonl")
    made = intents(tmp_path / "run.jsonl")
    assert [(i["tool"], i["args"], i["contract"]["effect"]) for i in made] == [
        ("search", {"query": "tea", "limit": 2}, "at-least-once"),
        ("charge", {"amount": 7}, "idempotent"),
        ("mail", {"to": "ann", "lines": ["your", "tea"], "headers": {"subject": "order"}}, "unsafe"),
    ]
    assert out.result["paid"]["key"] == made[1]["key"] == f"{rep.run_id}-1-1"
    assert out.result["sent"] == "ann: your tea [('subject', 'order')]"
    assert made[1]["contract"] == {"effect": "idempotent", "version": "2"}
    # resumed, the finished run calls nothing; rerun serves every call
    CALLS.clear()
    assert shop.run("tea", trace=tmp_path / "run.jsonl", resume=True).result == out.result
    assert harness.rerun(tmp_path / "run.jsonl", workflow=shop).equal
    assert CALLS == []


def test_an_async_tool_in_an_async_workflow(tmp_path: Path) -> None:
    out = ashop.run("tea", trace=tmp_path / "run.jsonl")
    assert out.state == "DONE", out.error
    rep = replay(tmp_path / "run.jsonl")
    assert out.result == {"paid": {"charged": 3, "key": f"{rep.run_id}-0-1"}, "found": ["tea-0"]}
    assert [i["tool"] for i in intents(tmp_path / "run.jsonl")] == ["acharge", "search"]


@pytest.mark.parametrize("run", ["run", "arun"])
def test_an_executor_uses_the_decorated_contract(tmp_path: Path, run: str) -> None:
    plan = [
        Step("s", "search", {"query": "q"}),
        Step("c", "charge", {"amount": 1}),
        Step("a", "acharge", {"amount": 2}),
    ]

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        return plan[len(progress)] if len(progress) < len(plan) else None

    tools: dict[str, Any] = {"search": search, "charge": charge, "acharge": acharge}
    if run == "run":
        del tools["acharge"]
        plan.pop()
    ex = Executor(planner=planner, tools=tools, trace=tmp_path / "run.jsonl")
    out = ex.run("g") if run == "run" else asyncio.run(ex.arun("g"))
    assert out.state == "DONE"
    rep = replay(tmp_path / "run.jsonl")
    assert rep.header["tools"]["charge"] == {"effect": "idempotent", "version": "2"}
    assert rep.header["tools"]["search"] == {"effect": "at-least-once", "version": None}
    keys = [i["key"] for i in intents(tmp_path / "run.jsonl") if "key" in i]
    assert [k for kind, k in CALLS if kind in ("charge", "acharge")] == keys and len(keys) == len(plan) - 1


def test_a_harness_tool_reads_the_key_either_way(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []

    def pay(amount: int, idempotency_key: str) -> int:
        seen.append((idempotency_key, harness.idempotency_key()))
        return amount

    ex = Executor(
        planner=lambda goal, progress: None if progress else Step("p", "pay", {"amount": 1}),
        tools={"pay": harness.Tool(pay, idempotent=True)},
        trace=tmp_path / "run.jsonl",
    )
    assert ex.run("g").state == "DONE"
    ((kwarg, read),) = seen
    assert kwarg == read == f"{replay(tmp_path / 'run.jsonl').run_id}-0-1"


def test_idempotency_key_is_refused_outside_an_idempotent_call(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match=r"outside an idempotent tool call.*@harness.tool\(idempotent=True\)"):
        harness.idempotency_key()

    @harness.tool
    def plain() -> str:
        return harness.idempotency_key()

    with pytest.raises(HarnessError, match="outside an idempotent tool call"):
        plain()

    @harness.workflow
    def flow() -> str:
        return str(plain())

    with pytest.raises(HarnessError, match="outside an idempotent tool call"):  # harness's own verdict: raised
        flow.run(trace=tmp_path / "run.jsonl")


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((42,), {}, "needs a function"),
        (("yes",), {}, "needs a function"),
        ((), {"idempotent": "yes"}, "idempotent=.... is True"),
        ((), {"idempotent": 1}, "idempotent=.... is True"),
        ((), {"name": ""}, "name=.... is a non-empty str"),
        ((), {"version": 2}, "version=.... is a str"),
    ],
)
def test_bad_decorations_are_a_type_error_at_decoration_time(args: tuple[Any, ...], kwargs: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        harness.tool(*args, **kwargs)


def test_more_bad_decorations() -> None:
    with pytest.raises(TypeError, match="already a harness tool"):
        harness.tool(search)
    with pytest.raises(TypeError, match="has a parameter named 'idempotency_key'"):

        @harness.tool(idempotent=True)
        def pay(amount: int, idempotency_key: str) -> None: ...

    @harness.tool(idempotent=False)  # an unsafe tool may name a parameter so: no key is passed to it
    def note(idempotency_key: str) -> str:
        return idempotency_key

    assert note("mine") == "mine"


CHILD = f"""
import json, os, sys, time
sys.path.insert(0, {str(TESTS)!r})
from pathlib import Path
import harness

@harness.tool(idempotent=True)
def pay(amount: int) -> str:
    key = harness.idempotency_key()
    with open(os.environ["LEDGER"], "a") as f:
        f.write(key + "\\n")
    if not os.path.exists(os.environ["MARK"]):
        Path(os.environ["MARK"]).write_text("in")
        time.sleep(600)  # killed here, the first time
    return key

@harness.workflow
def checkout() -> str:
    return pay(3)

out = checkout.run(trace=sys.argv[1], resume="auto")
print(json.dumps({{"state": out.state, "result": out.result}}))
"""


def test_the_key_is_the_same_in_the_process_that_makes_the_call_again_after_a_sigkill(tmp_path: Path) -> None:
    trace, ledger, mark = tmp_path / "run.jsonl", tmp_path / "ledger", tmp_path / "mark"
    environ = {"LEDGER": str(ledger), "MARK": str(mark), "PATH": "/usr/bin:/bin"}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(trace)], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    kill_at(mark, child, "the idempotent call")
    assert child.returncode == -9
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(trace)], env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    first, again = ledger.read_text().split()
    rep = replay(trace)
    assert first == again == out["result"] == f"{rep.run_id}-0-1"
    assert out["state"] == "DONE" and rep.resumes == 1


@harness.tool
def shapes(a: int, /, b: int = 2, *rest: int, c: int = 3, **more: int) -> list[Any]:
    return [a, b, list(rest), c, [[k, v] for k, v in sorted(more.items())]]


@harness.workflow
def called(args: list[int], kwargs: dict[str, int]) -> Any:
    return shapes(*args, **kwargs)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    args=st.lists(st.integers(-5, 5), min_size=1, max_size=4),
    kwargs=st.dictionaries(st.sampled_from(["b", "c", "x", "y"]), st.integers(-5, 5), max_size=3),
)
def test_any_call_shape_reaches_the_function_as_it_was_made(tmp_path: Path, args: list[int], kwargs: Any) -> None:
    try:
        direct = shapes.__wrapped__(*args, **kwargs)
    except TypeError as e:  # (b given twice): the same error in a run, raised at the call (the run FAILED by it)
        out = called.run(args, kwargs, trace=tmp_path / f"bad-{uuid.uuid4().hex}.jsonl")
        assert out.state == "FAILED" and out.error["type"] == "builtins.TypeError"
        assert str(e).split("() ")[1].replace("got ", "") == out.error["message"].split("(): ")[1]
        return
    out = called.run(args, kwargs, trace=tmp_path / f"{uuid.uuid4().hex}.jsonl")
    assert out.state == "DONE" and out.result == direct
