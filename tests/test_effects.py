"""Tool contracts: idempotency keys, PAUSED on uncertainty, reconcile, pinned identity.

A crash is stood in for by an exception the executor does not catch
(`Crash`): run() lets it through and leaves the file exactly as a killed
process would, which is what these in-process tests need. Real SIGKILLs are
in test_crash_matrix.py and test_soak.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import harness
from harness import Executor, HarnessError, NotSerializable, ResumeMismatch, Step, Tool, ToolError, TraceCorruption
from harness.cli import main
from harness.trace.line import encode


class Crash(Exception):
    """The process died here (the executor does not catch it)."""


def plan(*steps: Step) -> Any:
    def planner(goal: Any, done: list[Any]) -> Step | None:
        return steps[len(done)] if len(done) < len(steps) else None

    return planner


def records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def intents(path: Path) -> list[dict[str, Any]]:
    return [r for r in records(path) if r["kind"] == "transition" and r["to"] == "ACT"]


class Ledger:
    """An external system: one list of effects, and the calls that reached it."""

    def __init__(self, *, crash_on: tuple[int, ...] = (), crash_after_effect: bool = False):
        self.calls: list[dict[str, Any]] = []
        self.effects: dict[str, Any] = {}  # key (or call number) -> receipt
        self.crash_on, self.crash_after_effect = crash_on, crash_after_effect

    def __call__(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        n = len(self.calls)
        if n in self.crash_on and not self.crash_after_effect:
            raise Crash(f"before the effect of call {n}")
        key = kwargs.get("idempotency_key") or f"call-{n}"
        receipt = self.effects.setdefault(key, {"receipt": f"r{len(self.effects) + 1}", "amount": kwargs["amount"]})
        if n in self.crash_on:
            raise Crash(f"after the effect of call {n}")
        return dict(receipt)


PAY = Step("pay", "pay", {"amount": 5})
LOOK = Step("look", "look", {"q": "balance"})


def executor(path: Path, tools: dict[str, Any], *steps: Step, resume: bool = False, **options: Any) -> Executor:
    return Executor(planner=plan(*steps), tools=tools, trace=path, resume=resume, **options)


# --- idempotency keys -------------------------------------------------------------------


def test_key_is_stable_across_resumes_of_one_attempt(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger = Ledger(crash_on=(1, 2))
    tools = {"pay": Tool(ledger, idempotent=True)}
    for _ in range(2):
        with pytest.raises(Crash):
            executor(path, tools, PAY, resume="auto").run("g")
    out = executor(path, tools, PAY, resume=True).run("g")
    assert out.state == "DONE"
    keys = [c["idempotency_key"] for c in ledger.calls]
    run_id = harness.replay(path).run_id
    assert keys == [f"{run_id}-0-1"] * 3
    assert [i["key"] for i in intents(path)] == [f"{run_id}-0-1"]  # one intent, resumed twice
    assert out.checkpoints[0].result == {"receipt": "r1", "amount": 5}


def test_an_interrupted_idempotent_call_is_made_again_with_its_key(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger = Ledger(crash_on=(1,), crash_after_effect=True)  # effect landed, result lost
    tools = {"pay": Tool(ledger, idempotent=True)}
    with pytest.raises(Crash):
        executor(path, tools, PAY).run("g")
    rep = harness.replay(path)
    assert rep.state == "ACT" and rep.tail.intent is not None
    out = executor(path, tools, PAY, resume=True).run("g")
    assert out.state == "DONE"
    assert [c["idempotency_key"] for c in ledger.calls] == [rep.tail.intent["key"]] * 2
    assert len(ledger.effects) == 1  # the tool deduped on the key it was given again
    assert out.checkpoints[0].result == {"receipt": "r1", "amount": 5}


def test_a_new_attempt_gets_a_new_key(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    seen: list[str] = []

    def pay(*, amount: int, idempotency_key: str) -> dict[str, Any]:
        seen.append(idempotency_key)
        if len(seen) == 1:
            raise ToolError("declined: the effect did not happen")
        return {"amount": amount, "n": len(seen)}

    def verifier(step: Step, result: Any) -> bool:
        return bool(result["n"] >= 3)  # the second attempt's result is rejected too

    out = executor(path, {"pay": Tool(pay, idempotent=True)}, PAY, verifier=verifier).run("g")
    assert out.state == "DONE"
    run_id = harness.replay(path).run_id
    assert seen == [f"{run_id}-0-1", f"{run_id}-0-2", f"{run_id}-0-3"]
    assert [(i.get("attempt", 1), i["key"]) for i in intents(path)] == [(n, f"{run_id}-0-{n}") for n in (1, 2, 3)]


def test_a_resume_after_a_tool_error_gets_the_next_attempts_key(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    seen: list[str] = []

    def pay(*, amount: int, idempotency_key: str) -> int:
        seen.append(idempotency_key)
        if len(seen) == 1:
            raise ToolError("declined")
        if len(seen) == 2:
            raise Crash("died during attempt 2")
        return amount

    tools = {"pay": Tool(pay, idempotent=True)}
    with pytest.raises(Crash):
        executor(path, tools, PAY).run("g")
    assert executor(path, tools, PAY, resume=True).run("g").state == "DONE"
    run_id = harness.replay(path).run_id
    assert seen == [f"{run_id}-0-1", f"{run_id}-0-2", f"{run_id}-0-2"]


def test_a_plain_callable_is_called_again_without_a_key_and_never_paused(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger = Ledger(crash_on=(1,), crash_after_effect=True)
    with pytest.raises(Crash):
        executor(path, {"pay": ledger}, PAY).run("g")
    out = executor(path, {"pay": ledger}, PAY, resume=True).run("g")
    assert out.state == "DONE" and out.pending is None
    assert ledger.calls == [{"amount": 5}, {"amount": 5}]  # at least once: twice here
    assert len(ledger.effects) == 2
    assert "key" not in intents(path)[0]
    assert harness.replay(path).header["tools"] == {"pay": {"effect": "at-least-once", "version": None}}


def test_contracts_are_pinned_in_the_header(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    tools = {
        "pay": Tool(Ledger(), idempotent=True, version="2"),
        "charge": Tool(Ledger(), idempotent=False),
        "look": dict,
    }
    executor(path, tools, LOOK).run("g")
    assert harness.replay(path).header["tools"] == {
        "charge": {"effect": "unsafe", "version": None},
        "look": {"effect": "at-least-once", "version": None},
        "pay": {"effect": "idempotent", "version": "2"},
    }


# --- pause on uncertainty ---------------------------------------------------------------


def paused_run(path: Path, *, after_effect: bool = False) -> tuple[Ledger, dict[str, Any]]:
    """A run whose unsafe `pay` (step 1) was interrupted, resumed once: PAUSED."""
    ledger = Ledger(crash_on=(1,), crash_after_effect=after_effect)
    tools = {"pay": Tool(ledger, idempotent=False), "look": dict}
    with pytest.raises(Crash):
        executor(path, tools, LOOK, PAY).run("g")
    return ledger, tools


def test_an_unsafe_call_in_flight_pauses_the_run(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger, tools = paused_run(path)
    intent = intents(path)[-1]
    out = executor(path, tools, LOOK, PAY, resume=True).run("g")
    assert out.state == "PAUSED"
    assert out.pending == {"seq": intent["seq"], "step": 1, "tool": "pay", "args": {"amount": 5}}
    assert [c.name for c in out.checkpoints] == ["look"]
    assert len(ledger.calls) == 1  # not called again
    rep = harness.replay(path)
    assert rep.state == "PAUSED" and not rep.complete
    assert rep.pending == out.pending
    assert records(path)[-1] | {"ts": 0, "crc": ""} == {
        "seq": intent["seq"] + 3, "kind": "transition", "from": "ACT", "to": "PAUSED", "step": 1,
        "ts": 0, "crc": "",
    }  # fmt: skip


def test_resuming_an_unreconciled_pause_calls_nothing_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger, tools = paused_run(path)
    executor(path, tools, LOOK, PAY, resume=True).run("g")
    before = path.read_bytes()

    def planner(goal: Any, done: list[Any]) -> Step | None:
        raise AssertionError("the planner must not run on a paused run")

    for _ in range(2):
        out = Executor(planner=planner, tools=tools, trace=path, resume=True).run("g")
        assert out.state == "PAUSED" and out.pending is not None
    assert len(ledger.calls) == 1
    assert path.read_bytes() == before


def test_reconciled_as_happened_uses_the_asserted_result(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger, tools = paused_run(path, after_effect=True)
    pending = executor(path, tools, LOOK, PAY, resume=True).run("g").pending
    assert pending is not None
    seq = harness.reconcile(path, happened=True, result={"receipt": "r1", "amount": 5}, evidence="ledger row 1")
    rec = records(path)[-1]
    got = (rec["seq"], rec["kind"], rec["op"], rec["happened"], rec["evidence"])
    assert got == (seq, "reconcile", pending["seq"], True, "ledger row 1")
    verified: list[Any] = []
    out = executor(path, tools, LOOK, PAY, resume=True, verifier=lambda s, r: verified.append(r) or True).run("g")
    assert out.state == "DONE"
    assert len(ledger.calls) == 1 and len(ledger.effects) == 1  # not called again
    assert verified == [{"receipt": "r1", "amount": 5}]
    assert out.checkpoints[-1].result == {"receipt": "r1", "amount": 5}
    rep = harness.replay(path)
    assert rep.complete and rep.crossings[-1].response == {"receipt": "r1", "amount": 5}


def test_reconciled_as_not_happened_calls_the_tool_once(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger, tools = paused_run(path)
    executor(path, tools, LOOK, PAY, resume=True).run("g")
    harness.reconcile(path, happened=False, evidence="no row in the ledger, writer dead")
    out = executor(path, tools, LOOK, PAY, resume=True).run("g")
    assert out.state == "DONE"
    assert len(ledger.calls) == 2 and len(ledger.effects) == 1
    assert out.checkpoints[-1].result == {"receipt": "r1", "amount": 5}
    again = path.read_bytes()
    assert executor(path, tools, LOOK, PAY, resume=True).run("g").state == "DONE"
    assert len(ledger.calls) == 2 and path.read_bytes() == again


def test_a_crash_after_reconcile_pauses_again(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger, tools = paused_run(path)
    executor(path, tools, LOOK, PAY, resume=True).run("g")
    harness.reconcile(path, happened=False)
    ledger.crash_on = (2,)
    with pytest.raises(Crash):
        executor(path, tools, LOOK, PAY, resume=True).run("g")
    out = executor(path, tools, LOOK, PAY, resume=True).run("g")
    assert out.state == "PAUSED" and len(ledger.calls) == 2
    assert out.pending is not None and out.pending["seq"] == intents(path)[-1]["seq"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    result=st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=8,
    ),
)
@example(result={"CREDENTIAL": False})  # a default secret key: revealed for the run, redacted in the trace
def test_any_asserted_result_is_the_checkpoint(tmp_path_factory: pytest.TempPathFactory, result: Any) -> None:
    path = tmp_path_factory.mktemp("r") / "run.jsonl"
    ledger, tools = paused_run(path)
    executor(path, tools, LOOK, PAY, resume=True).run("g")
    harness.reconcile(path, happened=True, result=result, evidence="operator")
    out = executor(path, tools, LOOK, PAY, resume=True).run("g")
    assert out.state == "DONE" and len(ledger.calls) == 1
    # the run's checkpoint holds it as the operator gave it (a secret in it kept beside the trace, docs: Secrets);
    # the trace holds it redacted (a generated {"CREDENTIAL": ...} is a default secret key)
    assert orjson.dumps(out.checkpoints[-1].result) == orjson.dumps(result)
    assert orjson.dumps(harness.replay(path).checkpoints[-1].result) == orjson.dumps(harness.Redaction()(result))


def uncertain_free_traces(tmp_path: Path) -> dict[str, Path]:
    """Traces with no uncertain operation to reconcile, one per reason."""
    out = {}
    out["done"] = tmp_path / "done.jsonl"
    executor(out["done"], {"look": dict}, LOOK).run("g")
    out["failed"] = tmp_path / "failed.jsonl"

    def no(**_: Any) -> None:
        raise ToolError("no")

    executor(out["failed"], {"look": no}, LOOK, retry=harness.RetryPolicy(max_attempts=1)).run("g")
    out["in-flight, not resumed yet"] = tmp_path / "act.jsonl"
    paused_run(out["in-flight, not resumed yet"])
    out["already reconciled"] = tmp_path / "twice.jsonl"
    _, tools = paused_run(out["already reconciled"])
    executor(out["already reconciled"], tools, LOOK, PAY, resume=True).run("g")
    harness.reconcile(out["already reconciled"], happened=False)
    return out


def test_reconcile_without_an_uncertain_operation_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    for why, path in uncertain_free_traces(tmp_path).items():
        before = path.read_bytes()
        with pytest.raises(HarnessError, match="no uncertain operation") as e:
            harness.reconcile(path, happened=True, result=1)
        assert str(path) in str(e.value), why
        assert path.read_bytes() == before, why


def test_reconcile_refuses_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(HarnessError, match="no such"):
        harness.reconcile(missing, happened=False)
    assert not missing.exists()
    path = tmp_path / "run.jsonl"
    _, tools = paused_run(path)
    executor(path, tools, LOOK, PAY, resume=True).run("g")
    before = path.read_bytes()
    with pytest.raises(NotSerializable):
        harness.reconcile(path, happened=True, result={"when": object()})
    assert path.read_bytes() == before
    damaged = before.replace(b'"amount":5', b'"amount":6', 1)
    path.write_bytes(damaged)
    with pytest.raises(TraceCorruption):
        harness.reconcile(path, happened=False)
    assert path.read_bytes() == damaged


# --- replay refuses forged reconcile records ----------------------------------------------

UNSAFE = {"pay": {"effect": "unsafe", "version": None}}
HEAD = {"kind": "header", "schema": 2, "run_id": "r", "goal": "g", "tools": UNSAFE, "env": {}}
T = "transition"
BEFORE_PAUSE = [
    HEAD,
    {"kind": T, "from": "INIT", "to": "PLAN", "step": 0},
    {"kind": T, "from": "PLAN", "to": "ACT", "step": 0, "name": "pay", "tool": "pay", "args": {}},
    {"kind": "resume", "set_aside": None, "env": {}},  # only a resuming process pauses a run
]
PAUSE = {"kind": T, "from": "ACT", "to": "PAUSED", "step": 0}
YES = {"kind": "reconcile", "op": 3, "happened": True, "result": 7, "evidence": ""}
NO = {"kind": "reconcile", "op": 3, "happened": False, "result": None, "evidence": ""}
ON = {"kind": T, "from": "PAUSED", "to": "VERIFY", "step": 0, "result": 7}
AGAIN = {"kind": T, "from": "PAUSED", "to": "ACT", "step": 0, "name": "pay", "tool": "pay", "args": {}}
FINISH = [
    {"kind": "checkpoint", "step": 0},  # vouches for ON, just above it
    {"kind": T, "from": "PLAN", "to": "DONE", "step": 1},
]


def write(path: Path, recs: list[dict[str, Any]]) -> Path:
    crc, out = 0, b""
    for seq, rec in enumerate(recs, 1):
        line, crc = encode({"seq": seq, **rec, "ts": 0.0}, crc)
        out += line
    path.write_bytes(out)
    return path


def test_replay_accepts_reconciled_traces(tmp_path: Path) -> None:
    rep = harness.replay(write(tmp_path / "a.jsonl", [*BEFORE_PAUSE, PAUSE, YES]))
    assert rep.state == "PAUSED" and rep.tail.reconcile is not None and rep.pending is not None
    rep = harness.replay(write(tmp_path / "b.jsonl", [*BEFORE_PAUSE, PAUSE, YES, ON, *FINISH]))
    assert rep.complete and [c.result for c in rep.checkpoints] == [7]
    rep = harness.replay(write(tmp_path / "c.jsonl", [*BEFORE_PAUSE, PAUSE, NO, AGAIN]))
    assert rep.state == "ACT"


@pytest.mark.parametrize(
    ("recs", "line", "reason"),
    [
        ([*BEFORE_PAUSE, YES], 5, "bad-reconcile"),  # in flight, never paused
        ([*BEFORE_PAUSE[:2], YES], 3, "bad-reconcile"),  # nothing in flight at all
        ([*BEFORE_PAUSE, PAUSE, YES, YES], 7, "bad-reconcile"),  # reconciled twice
        ([*BEFORE_PAUSE, PAUSE, YES, ON, *FINISH, YES], 10, "after-terminal"),
        ([*BEFORE_PAUSE, PAUSE, {**YES, "op": 2}], 6, "bad-reconcile"),  # names another record
        ([*BEFORE_PAUSE, PAUSE, NO, ON], 7, "bad-reconcile"),  # did not happen, yet a result
        ([*BEFORE_PAUSE, PAUSE, YES, AGAIN], 7, "bad-reconcile"),  # happened, yet called again
        ([*BEFORE_PAUSE, PAUSE, ON], 6, "bad-transition"),  # moved on with nobody's word
    ],
)
def test_replay_refuses_forged_reconcile_records(
    tmp_path: Path, recs: list[dict[str, Any]], line: int, reason: str
) -> None:
    with pytest.raises(TraceCorruption) as e:
        harness.replay(write(tmp_path / "forged.jsonl", recs))
    assert (e.value.line, e.value.reason) == (line, reason)


# --- pinned identity --------------------------------------------------------------------


def crashed(path: Path) -> dict[str, Any]:
    tools = {"pay": Tool(Ledger(crash_on=(1,)), idempotent=True, version="1"), "look": dict}
    with pytest.raises(Crash):
        executor(path, tools, LOOK, PAY).run("g")
    return tools


@pytest.mark.parametrize(
    "change",
    [
        {"pay": Tool(Ledger(), idempotent=True, version="1")},  # a tool removed
        {"pay": Tool(Ledger(), idempotent=True, version="1"), "look": dict, "extra": dict},  # one added
        {"pay2": Tool(Ledger(), idempotent=True, version="1"), "look": dict},  # renamed
        {"pay": Tool(Ledger(), idempotent=False, version="1"), "look": dict},  # other effect
        {"pay": Tool(Ledger(), idempotent=True, version="2"), "look": dict},  # other version
        {"pay": Tool(Ledger(), idempotent=True), "look": dict},  # version dropped
        {"pay": Ledger(), "look": dict},  # declaration dropped
        {"pay": Tool(Ledger(), idempotent=True, version="1"), "look": Tool(dict, idempotent=True)},
    ],
)
def test_resume_with_other_tools_is_refused_and_writes_nothing(tmp_path: Path, change: dict[str, Any]) -> None:
    path = tmp_path / "run.jsonl"
    crashed(path)
    before = path.read_bytes()
    with pytest.raises(ResumeMismatch) as e:
        executor(path, change, LOOK, PAY, resume=True).run("g")
    assert e.value.what == "tools" and str(path) in str(e.value)
    assert path.read_bytes() == before


def test_resume_with_another_goal_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    tools = crashed(path)
    before = path.read_bytes()
    with pytest.raises(ResumeMismatch) as e:
        executor(path, tools, LOOK, PAY, resume=True).run("another goal")
    assert e.value.what == "goal"
    assert path.read_bytes() == before


def test_a_fixed_function_behind_the_same_declaration_is_deployed(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    crashed(path)
    fixed = Ledger()
    tools = {"pay": Tool(fixed, idempotent=True, version="1"), "look": lambda q: {"q2": q}}
    out = executor(path, tools, LOOK, PAY, resume=True).run("g")
    assert out.state == "DONE" and len(fixed.calls) == 1
    assert fixed.calls[0]["idempotency_key"] == intents(path)[-1]["key"]


# --- the `harness reconcile` command ------------------------------------------------------


def paused(path: Path) -> tuple[Ledger, dict[str, Any]]:
    ledger, tools = paused_run(path, after_effect=True)
    executor(path, tools, LOOK, PAY, resume=True).run("g")
    return ledger, tools


def test_cli_reconcile_happened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.jsonl"
    ledger, tools = paused(path)
    result = '{"receipt": "r1", "amount": 5}'
    assert main(["reconcile", str(path), "--happened", "--result", result, "--evidence", "row 1"]) == 0
    assert "happened" in capsys.readouterr().out
    rec = records(path)[-1]
    got = (rec["kind"], rec["happened"], rec["result"], rec["evidence"])
    assert got == ("reconcile", True, {"receipt": "r1", "amount": 5}, "row 1")
    out = executor(path, tools, LOOK, PAY, resume=True).run("g")
    assert out.checkpoints[-1].result == {"receipt": "r1", "amount": 5}
    assert len(ledger.calls) == 1


def test_cli_reconcile_not_happened(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ledger, tools = paused(path)
    assert main(["reconcile", str(path), "--not-happened"]) == 0
    assert records(path)[-1]["happened"] is False
    assert executor(path, tools, LOOK, PAY, resume=True).run("g").state == "DONE"
    assert len(ledger.calls) == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--happened", "--result", "{bad"], "not valid JSON"),
        (["--happened", "--result", "NaN"], "not valid JSON"),
        (["--happened"], "needs --result"),
        (["--not-happened", "--result", "1"], "goes with --happened"),
    ],
)
def test_cli_reconcile_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], says: str) -> None:
    path = tmp_path / "run.jsonl"
    paused(path)
    before = path.read_bytes()
    cmd = [sys.executable, "-m", "harness.cli", "reconcile", str(path), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and says in proc.stderr and proc.stderr.startswith("harness reconcile: ")
    assert path.read_bytes() == before


def test_cli_reconcile_of_a_finished_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.jsonl"
    executor(path, {"look": dict}, LOOK).run("g")
    before = path.read_bytes()
    assert main(["reconcile", str(path), "--not-happened"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no uncertain operation" in err and str(path) in err
    assert path.read_bytes() == before
