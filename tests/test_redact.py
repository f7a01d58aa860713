"""Redaction: secrets are replaced by a marker before anything is written, and before hashing."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import in_process
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness
from harness import MARKER, Executor, Recorder, Redaction, RedactionRuleError, Step, ToolError, replay, rerun
from harness.trace.journal import Journal
from harness.trace.redact import _HEADS, _SHORT, DEFAULT, USERINFO, _has_head, at, parse_path

KEY = "sk-proj-LIVEKEY0123456789abcdefghij"
OTHER = "sk-proj-NEWKEY9876543210zyxwvutsrq"


@pytest.mark.parametrize(
    "header", ["Authorization", "proxy-authorization", "API-Key", "x-api-key", "Cookie", "set-cookie", "X-Goog-Api-Key"]
)
def test_default_header_names_are_redacted_whatever_their_case(header: str) -> None:
    assert DEFAULT({"headers": {header: "anything", "accept": "*/*"}}) == {"headers": {header: MARKER, "accept": "*/*"}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"key {KEY} in prose", f"key {MARKER} in prose"),
        ("sk-ant-api03-abcdefghijklmnopqrstu", MARKER),
        ("Authorization: Bearer abc.def-ghi", f"Authorization: Bearer {MARKER}"),
        ("aws AKIAIOSFODNN7EXAMPLE here", f"aws {MARKER} here"),
        ("ghp_" + "a1" * 18, MARKER),
        ("xoxb-123456789012-abcdef", MARKER),
        ("AIza" + "B" * 35, MARKER),
        ("https://h/x?page=2&api_key=abc123&q=1", f"https://h/x?page=2&api_key={MARKER}&q=1"),
        ("an sk-short word and a skill", "an sk-short word and a skill"),  # not token shaped: kept
        # a form body that starts with a secret, and the other parameter names
        ("api_key=SECRET&x=1", f"api_key={MARKER}&x=1"),
        ("grant=1&client_secret=s3cr3t&password=hunter2", f"grant=1&client_secret={MARKER}&password={MARKER}"),
        (
            "https://h/cb?code=1&access_token=ya29.a0&refresh_token=1//0g",
            f"https://h/cb?code=1&access_token={MARKER}&refresh_token={MARKER}",
        ),
        ("sorted(xs, key=len) and mykey=1", "sorted(xs, key=len) and mykey=1"),  # code, not a parameter: kept
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", f"Authorization: Basic {MARKER}"),
        ("Basic information", "Basic information"),  # a word, not base64 credentials: kept
        ("glpat-" + "x1Y2z3" * 4, MARKER),  # GitLab
    ],
)
def test_default_patterns_replace_tokens_in_any_string(text: str, expected: str) -> None:
    assert DEFAULT(text) == expected
    assert DEFAULT({"deep": [{"in": text}]}) == {"deep": [{"in": expected}]}


@pytest.mark.parametrize(
    "key", ["access_token", "refresh_token", "id_token", "client_secret", "Password", "passwd", "private_key"]
)
def test_default_key_names_cover_oauth_tokens_and_passwords(key: str) -> None:
    token = {"token_type": "bearer", key: "ya29.live", "expires_in": 3600}
    assert DEFAULT(token) == {"token_type": "bearer", key: MARKER, "expires_in": 3600}
    assert DEFAULT.fields({"response": {"body": token}}) == {"response": {"body": DEFAULT(token)}}


@pytest.mark.parametrize("pad", [0, 400])  # a short text is searched mark by mark, a long one cut at each key
def test_a_key_anywhere_in_a_short_or_long_value_is_found(pad: int) -> None:
    value = {"note": "x" * pad, "nested": [{"Client_Secret": "s", "ok": 1}]}
    assert DEFAULT(value) == {"note": "x" * pad, "nested": [{"Client_Secret": MARKER, "ok": 1}]}
    assert not DEFAULT.clean_json(orjson.dumps(value)) and DEFAULT.clean_json(orjson.dumps({"note": "x" * pad}))


def test_one_json_path_walker_replaces_or_drops() -> None:
    value = {"a": [{"b": 1, "c": 2}, {"b": 3}], "d": {"e": None}}
    assert at(value, parse_path("$.a[*].b"), MARKER) == {"a": [{"b": MARKER, "c": 2}, {"b": MARKER}], "d": {"e": None}}
    assert at(value, parse_path("$.a[*].b")) == {"a": [{"c": 2}, {}], "d": {"e": None}}
    assert at(value, parse_path("$.a[1]")) == {"a": [{"b": 1, "c": 2}], "d": {"e": None}}
    assert at(value, parse_path("$.d.e"), MARKER) == {"a": value["a"], "d": {"e": MARKER}}
    assert at(value, parse_path("$.x.y")) is value  # reaches nothing: the value itself


def test_json_paths_key_names_and_patterns_from_the_user() -> None:
    r = Redaction(
        ("$.user.ssn", "$.items[*].secret", "$.list[0]", "$['odd key']", "session_token", re.compile(r"pin=(\d+)"))
    )
    value = {
        "user": {"ssn": "123-45-6789", "name": "Ada"},
        "items": [{"secret": 1, "keep": 2}, {"secret": {"x": 1}}],
        "list": ["a", "b"],
        "odd key": "v",
        "nested": {"Session_Token": "t0k", "note": "pin=4242 ok"},
        "absent": {"ssn": "not at the path: kept"},
    }
    before = copy.deepcopy(value)
    out = r(value)
    assert out == {
        "user": {"ssn": MARKER, "name": "Ada"},
        "items": [{"secret": MARKER, "keep": 2}, {"secret": MARKER}],
        "list": [MARKER, "b"],
        "odd key": MARKER,
        "nested": {"Session_Token": MARKER, "note": f"pin={MARKER} ok"},
        "absent": {"ssn": "not at the path: kept"},
    }
    assert value == before  # the input is never touched
    assert r(out) == out  # idempotent: a value read back from a trace redacts to itself
    untouched = {"a": [1, 2.5, None, True], "b": "plain"}
    assert r(untouched) is untouched  # nothing to hide: no copy


def test_user_rules_add_to_the_defaults_unless_asked_not_to() -> None:
    assert Redaction.of(None) is DEFAULT
    added = Redaction.of(["x-team"])
    assert added({"x-team": "a", "authorization": "b"}) == {"x-team": MARKER, "authorization": MARKER}
    only = Redaction(("x-team",), defaults=False)
    assert only({"x-team": "a", "authorization": "b"}) == {"x-team": MARKER, "authorization": "b"}
    assert Redaction.of(only) is only
    assert Redaction(marker="***")({"cookie": "c"}) == {"cookie": "***"}


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        (42, "not a non-empty str"),
        ("", "not a non-empty str"),
        (re.compile(rb"x"), "str pattern"),
        (re.compile(r"\[REDACTED\]"), "matches the marker"),
        ("$", "names no field"),
        ("$.a[", "cannot read the path"),
    ],
)
def test_a_bad_rule_is_a_clear_error(rule: Any, says: str) -> None:
    with pytest.raises(RedactionRuleError, match=re.escape(says)) as e:
        Redaction((rule,))
    assert e.value.rule == rule and isinstance(e.value, harness.HarnessError)
    with pytest.raises(RedactionRuleError):
        Executor(planner=lambda g, p: None, tools={}, redact=[rule])


def agent(key: str, seen: list[Any]) -> tuple[Any, dict[str, Any]]:
    """A planner that calls a "model" through harness.llm with the key in its request."""

    def model(request: dict[str, Any]) -> dict[str, Any]:
        return {"text": f"step {request['n']}", "set-cookie": "sid=abc", "echo": request["headers"]["authorization"]}

    def planner(goal: dict[str, Any], progress: list[Any]) -> Step | None:
        seen.append([c.result for c in progress])
        if len(progress) == 2:
            return None
        reply = harness.llm({"n": len(progress), "headers": {"authorization": f"Bearer {key}"}, "ssn": "1-2-3"}, model)
        return Step(name=reply["text"], tool="use", args={"token": key, "text": reply["text"], "ssn": "1-2-3"})

    def use(token: str, text: str, ssn: str) -> dict[str, Any]:
        return {"done": text, "api_key": token, "said": f"used {token}"}

    return planner, {"use": use}


def all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_an_executor_writes_no_secret_and_a_rerun_with_another_key_still_matches(tmp_path: Path) -> None:
    seen: list[Any] = []
    planner, tools = agent(KEY, seen)
    trace = tmp_path / "run.jsonl"
    goal = {"task": "two steps", "config": {"api_key": KEY}}
    out = Executor(planner=planner, tools=tools, trace=trace, redact=["$.ssn", "$.args.ssn"]).run(goal)
    assert out.state == "DONE"
    data = all_bytes(tmp_path)
    assert KEY.encode() not in data and KEY[8:].encode() not in data and b"1-2-3" not in data
    assert b"sid=abc" not in data
    rep = replay(trace)
    assert rep.goal == {"task": "two steps", "config": {"api_key": MARKER}}
    assert rep.checkpoints[0].result == {"done": "step 0", "api_key": MARKER, "said": f"used {MARKER}"}
    (first, _) = [c for c in rep.crossings if c.kind == "llm"]
    assert first.request["headers"]["authorization"] == MARKER and first.request["ssn"] == MARKER
    assert first.response["set-cookie"] == MARKER and first.response["echo"] == f"Bearer {MARKER}"
    # the planner is handed each result as the tool returned it (the trace holds the marker, the sidecar the rest)
    assert seen[1] == [{"done": "step 0", "api_key": KEY, "said": f"used {KEY}"}]

    seen2: list[Any] = []
    planner2, tools2 = agent(OTHER, seen2)
    again = rerun(trace, planner=planner2, tools=tools2, redact=["$.ssn", "$.args.ssn"], out=tmp_path / "again.jsonl")
    assert again.equal and again.live_calls == 0
    assert seen2[1] == seen[1]  # a rerun serves the recorded result, its secrets read back from the sidecar
    assert OTHER.encode() not in all_bytes(tmp_path)


def test_a_resume_with_a_secret_in_the_goal_is_not_a_mismatch(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    goal = {"credentials": f"Bearer {KEY}", "n": 2}
    calls: list[int] = []
    goals: list[Any] = []

    def planner(goal: dict[str, Any], progress: list[Any]) -> Step | None:
        goals.append(goal["credentials"])
        return None if len(progress) == goal["n"] else Step(name=f"s{len(progress)}", tool="work", args={})

    def crashing() -> int:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the process dies here")
        return len(calls)

    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools={"work": crashing}, trace=trace).run(goal)
    out = Executor(planner=planner, tools={"work": lambda: 7}, trace=trace, resume=True).run(goal)
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [1, 7]
    assert set(goals) == {f"Bearer {KEY}"}  # a resumed planner gets the caller's goal, not the marker
    assert KEY.encode() not in trace.read_bytes()


def test_a_tool_error_message_is_redacted(tmp_path: Path) -> None:
    def failing() -> None:
        raise ToolError(f"401 for key {KEY}")

    out = Executor(
        planner=lambda g, p: Step(name="x", tool="t", args={}), tools={"t": failing}, trace=tmp_path / "r.jsonl"
    ).run("g")
    assert out.state == "FAILED" and out.error == {"type": "ToolError", "message": f"401 for key {KEY}"}  # live
    assert replay(tmp_path / "r.jsonl").tail.last["error"] == {"type": "ToolError", "message": f"401 for key {MARKER}"}
    assert KEY.encode() not in (tmp_path / "r.jsonl").read_bytes()


def test_a_recorder_redacts_events_crossings_and_the_error(tmp_path: Path) -> None:
    trace = tmp_path / "rec.jsonl"
    with pytest.raises(ValueError), Recorder(trace, entrypoint="t", goal={"x-api-key": KEY}, redact=["$.card"]) as rec:
        rec.log("input", {"card": "4111 1111", "prompt": f"use {KEY}"})
        harness.boundary("db", {"dsn": "postgres://u@h", "authorization": KEY}, lambda: {"cookie": "c=1"})
        raise ValueError(f"bad key {KEY}")
    data = trace.read_bytes()
    assert KEY.encode() not in data and b"4111" not in data and b"c=1" not in data
    assert data.count(MARKER.encode()) == 6


def test_redaction_does_not_change_what_the_live_caller_gets(tmp_path: Path) -> None:
    got: list[Any] = []

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        if progress:
            return None
        got.append(harness.boundary("vault", {"name": "db"}, lambda: {"password": "p", "token": KEY}))
        return Step(name="s", tool="t", args={})

    Executor(planner=planner, tools={"t": lambda: 1}, trace=tmp_path / "r.jsonl", redact=["password"]).run("g")
    assert got == [{"password": "p", "token": KEY}]
    (c,) = replay(tmp_path / "r.jsonl").crossings[:1]
    assert c.response == {"password": MARKER, "token": MARKER}


AGENT = """
import harness
from harness import Step

def make_agent():
    def planner(goal, progress):
        if progress:
            return None
        reply = harness.llm({"prompt": "hi", "ssn": "123-45-6789"}, lambda r: {"text": "hello"})
        return Step(name="say", tool="say", args=reply)
    return planner, {"say": lambda text: text}, None
"""


def test_cli_rerun_and_fork_read_the_rules_the_run_was_recorded_with_from_its_header(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "redacting_agent.py").write_text(AGENT)
    sys.path.insert(0, str(tmp_path))
    try:
        import redacting_agent  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
    planner, tools, verifier = redacting_agent.make_agent()
    Executor(planner=planner, tools=tools, verifier=verifier, trace=tmp_path / "run.jsonl", redact=["$.ssn"]).run("g")
    assert b"123-45-6789" not in (tmp_path / "run.jsonl").read_bytes()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        """`harness ARGS` in tmp_path: the console script's main() called in this process."""
        return in_process.harness(*args, cwd=tmp_path)  # type: ignore[no-any-return]

    agent = ["--agent", "redacting_agent:make_agent"]
    assert replay(tmp_path / "run.jsonl").header["redact"] == {"rules": ["$.ssn"], "patterns": [], "defaults": True}
    ok = cli("rerun", "run.jsonl", *agent)  # the header's rules: no --redact needed
    assert ok.returncode == 0 and ok.stdout.startswith("equal:"), ok.stderr
    ok = cli("rerun", "run.jsonl", *agent, "--redact", "$.ssn")  # the same rule again changes nothing
    assert ok.returncode == 0 and ok.stdout.startswith("equal:"), ok.stderr
    drift = cli("rerun", "run.jsonl", *agent, "--redact", "text")  # one more rule: the recording did not hide it
    assert drift.returncode == 1 and "ReplayDrift" in drift.stderr, drift.stderr
    at = str(replay(tmp_path / "run.jsonl").crossings[0].seq)
    forked = cli("fork", "run.jsonl", *agent, "--redact", "$.ssn", "--redact", "re:\\d{3}-\\d{2}", "--at", at,
                 "--set", '{"text": "bye"}', "--out", "child.jsonl")  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    assert replay(tmp_path / "child.jsonl").checkpoints[0].result == "bye"
    bad = cli("rerun", "run.jsonl", *agent, "--redact", "re:(")
    assert bad.returncode == 2 and "not a regular expression" in bad.stderr


def test_an_operators_reconcile_is_redacted_too(tmp_path: Path) -> None:
    class Crash(BaseException):
        pass

    def pay() -> None:
        raise Crash

    trace = tmp_path / "run.jsonl"
    plan = lambda goal, progress: None if progress else Step(name="pay", tool="pay", args={})  # noqa: E731
    tools = {"pay": harness.Tool(pay, idempotent=False)}
    with pytest.raises(Crash):
        Executor(planner=plan, tools=tools, trace=trace).run("g")
    assert Executor(planner=plan, tools=tools, trace=trace, resume=True).run("g").state == "PAUSED"
    harness.reconcile(trace, happened=True, result={"receipt": 1, "token": KEY}, evidence=f"checked with {KEY}")
    out = Executor(planner=plan, tools=tools, trace=trace, resume=True).run("g")
    # the planner's progress holds the result as the operator gave it (read back from the sidecar); the trace, the
    # marker
    assert out.state == "DONE" and out.checkpoints[0].result == {"receipt": 1, "token": KEY}
    assert replay(trace).checkpoints[0].result == {"receipt": 1, "token": MARKER}
    assert KEY.encode() not in trace.read_bytes()


def test_the_journal_redacts_the_user_fields_it_is_told_of_in_every_kind_of_write(tmp_path: Path) -> None:
    trace = tmp_path / "j.jsonl"
    with Journal.open(trace, redact=Redaction(("$.ssn",))) as journal:
        journal.t0 = 0.0  # (no header: the records' clock starts at the epoch)
        one = {"data": {"header": f"Bearer {KEY}", "ssn": "1-2-3"}, "note": f"not a user field {KEY}"}
        journal.append("event", one, user=("data",))
        assert one["data"] == {"header": f"Bearer {MARKER}", "ssn": MARKER}  # the caller gets what was written
        journal.append("event", {"data": {"api_key": KEY}}, check=("data",))  # a checked field is a user field
        journal.append_many([("event", {"data": KEY}, ("data",)), ("event", {"data": "plain"})])
        journal.continue_after(
            journal.seq, journal.crc, journal.size(), ("event", {"data": KEY}), start=0.0, user=("data",)
        )
    lines = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    assert [r["data"] for r in lines] == [one["data"], {"api_key": MARKER}, MARKER, "plain", MARKER]
    assert lines[0]["note"] == f"not a user field {KEY}"  # only what the caller names is a user field


def test_a_journal_without_rules_writes_values_as_they_are(tmp_path: Path) -> None:
    with Journal.open(tmp_path / "j.jsonl") as journal:
        journal.t0 = 0.0  # (no header: the records' clock starts at the epoch)
        journal.append("event", {"data": KEY}, user=("data",))
    assert KEY.encode() in (tmp_path / "j.jsonl").read_bytes()


class Crash(BaseException):
    """Not an Exception: nothing in the executor catches it, as with a process killed mid-call."""


def paying_agent(key: str, calls: list[Any], *, planned: list[Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """A planner that asks a model (a recorded crossing) and plans one payment with the key in its args."""
    asked: list[int] = [] if planned is None else planned

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        if progress:
            return None
        reply = harness.llm({"q": "amount?"}, lambda req: (asked.append(1), {"amount": 5})[1])
        return Step(name="pay", tool="pay", args={"api_key": key, "amount": reply["amount"]})

    def pay(api_key: str, amount: int, idempotency_key: str | None = None) -> dict[str, Any]:
        calls.append(api_key)
        if len(calls) == 1:
            raise RuntimeError("connection reset")  # not a ToolError: the process dies as in a crash
        return {"paid": amount}

    return planner, {"pay": pay}


def test_a_resume_calls_the_tool_with_the_live_args_not_the_marker(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    calls: list[Any] = []
    asked: list[int] = []
    planner, tools = paying_agent(KEY, calls, planned=asked)
    tools = {"pay": harness.Tool(tools["pay"], idempotent=True)}
    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools=tools, trace=trace).run("g")
    assert replay(trace).tail.intent["args"]["api_key"] == MARKER
    out = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and calls == [KEY, KEY]  # never the marker
    assert asked == [1]  # asked again, the planner's model call was served from the trace
    assert KEY.encode() not in trace.read_bytes()


def test_a_plain_tool_after_a_sigkill_is_called_again_with_the_live_args(tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    trace = tmp_path / "run.jsonl"
    script = tmp_path / "agent.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, signal, sys, harness
        KEY = {KEY!r}
        def planner(goal, progress):
            return None if progress else harness.Step(name="pay", tool="pay", args={{"api_key": KEY}})
        def pay(api_key):
            if sys.argv[2] == "first":
                os.kill(os.getpid(), signal.SIGKILL)
            print("called with", api_key)
            return "ok"
        resume = sys.argv[2] != "first"
        print(harness.Executor(planner=planner, tools={{"pay": pay}}, trace=sys.argv[1], resume=resume).run("g").state)
    """)
    )
    first = subprocess.run([sys.executable, str(script), str(trace), "first"], capture_output=True, text=True)
    assert first.returncode == -9
    again = subprocess.run([sys.executable, str(script), str(trace), "again"], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split("\n")[:2] == [f"called with {KEY}", "DONE"]


def test_a_resume_after_reconcile_not_happened_calls_the_unsafe_tool_with_the_live_args(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    calls: list[Any] = []
    planner, tools = paying_agent(KEY, calls)
    tools = {"pay": harness.Tool(tools["pay"], idempotent=False)}
    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools=tools, trace=trace).run("g")
    assert Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g").state == "PAUSED"
    harness.reconcile(trace, happened=False, evidence="no payment in the ledger")
    out = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and calls == [KEY, KEY]
    assert KEY.encode() not in trace.read_bytes()


def test_a_resume_whose_planner_gives_other_args_is_a_mismatch_and_calls_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    calls: list[Any] = []
    planner, tools = paying_agent(KEY, calls)
    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools=tools, trace=trace).run("g")
    with pytest.raises(harness.ResumeMismatch, match="args of step 0"):  # another key redacts alike; 6 is not 5
        Executor(planner=lambda g, p: Step("pay", "pay", {"api_key": OTHER, "amount": 6}), tools=tools, trace=trace,
                 resume=True).run("g")  # fmt: skip
    assert calls == [KEY]


def test_a_resume_whose_planner_cannot_plan_the_call_again_says_which_tool_and_field(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    calls: list[Any] = []
    planner, tools = paying_agent(KEY, calls)
    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools=tools, trace=trace).run("g")
    with pytest.raises(harness.RedactedArgs) as e:
        Executor(planner=lambda g, p: None, tools=tools, trace=trace, resume=True).run("g")
    assert (e.value.tool, e.value.step, e.value.where) == ("pay", 0, ".api_key")
    assert "keep the secret out of the args" in str(e.value) and KEY not in str(e.value)
    assert calls == [KEY]


def test_rerun_and_fork_read_the_recorded_rules_from_the_header(tmp_path: Path) -> None:
    rules = ["x-session", "$.ssn", "$.args.ssn", re.compile(r"pin=(\d+)", re.IGNORECASE)]

    def make() -> tuple[Any, dict[str, Any]]:
        def planner(goal: Any, progress: list[Any]) -> Step | None:
            if progress:
                return None
            said = harness.llm({"x-session": "s1", "q": "PIN=1234"}, lambda r: {"text": "hello"})
            return Step(name="say", tool="say", args={"ssn": "1-2-3", "text": said["text"]})

        return planner, {"say": lambda ssn, text: text}

    planner, tools = make()
    trace = tmp_path / "run.jsonl"
    Executor(planner=planner, tools=tools, trace=trace, redact=rules).run("g")
    header = replay(trace).header
    assert header["redact"] == {"rules": ["x-session", "$.ssn", "$.args.ssn"], "patterns": [["pin=(\\d+)", 34]],
                                "defaults": True}  # fmt: skip
    assert Redaction.from_header(header["redact"], str(trace)) == Redaction(tuple(rules))
    again = rerun(trace, planner=planner, tools=tools)  # no rules given: the header's
    assert again.equal and again.live_calls == 0
    at = replay(trace).crossings[0].seq
    child = harness.fork(trace, at=at, value={"text": "bye"}, planner=planner, tools=tools, out=tmp_path / "c.jsonl")
    assert child.state == "DONE" and replay(tmp_path / "c.jsonl").header["redact"] == header["redact"]
    data = all_bytes(tmp_path)
    assert b"1-2-3" not in data and b"1234" not in data and b'"s1"' not in data


def test_a_run_with_the_default_rules_writes_no_redact_field(tmp_path: Path) -> None:
    Executor(planner=lambda g, p: None, tools={}, trace=tmp_path / "r.jsonl").run("g")
    assert "redact" not in replay(tmp_path / "r.jsonl").header
    with Recorder(tmp_path / "rec.jsonl", entrypoint="t"):
        pass
    assert "redact" not in replay(tmp_path / "rec.jsonl").header
    with Recorder(tmp_path / "own.jsonl", entrypoint="t", redact=["pin"]):
        pass
    assert replay(tmp_path / "own.jsonl").header["redact"] == {"rules": ["pin"], "patterns": [], "defaults": True}


_PIECES = [
    *("Bearer ", "Basic dXNlcjpw", "sk-", "AKIA", "ghp_", "github_pat_", "glpat-", "xoxb-", "AIza", "=", "pin=4"),
    *("api_key", "token", "Cookie", "pass", "word", '"', ":", " ", "x", "7", "Z", "-", "_", "\u00e9", "\n", "\\"),
    *("api_\u212aey", "\u0130", '":'),  # a Kelvin sign lowers to k; a dotted I to two characters
    *("auth", "AUTH", "o", "sig"),  # a four-letter key (looked up with its opening quote), and what surrounds it
    *("eyJ", "eyJhbGci.", ".", "-----BEGIN ", "PRIVATE KEY-----", "-----END", "://", "@", "u:", "pw@"),  # JWT, PEM, URL
    *("extra_headers", "extraQuery"),  # every value of these goes
]
_USER = Redaction((re.compile(r"pin=\d"), "x-token", "ssn4"))


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES) | st.text(max_size=4), max_size=12).map("".join),
    st.lists(st.sampled_from(_PIECES), max_size=3).map("".join),
)
def test_the_search_on_json_text_never_clears_a_value_redaction_changes(text: str, key: str) -> None:
    """clean_json is a shortcut: whatever it clears, the walk would have left as it was. A long text (past
    _SHORT, with the - and _ that gate some heads) is searched by substring, not by the regex: the same answer."""
    long = {"pad": "-_." * (_SHORT // 3), "v": text}
    inner = orjson.dumps({key or "k": text, "n": [text]}).decode()  # JSON text in a string: walked as JSON
    for value in ({"v": text}, {key or "k": "v" * 20, "n": [text]}, [text + "A" * 40], long, {"text": inner}):
        for redaction in (DEFAULT, _USER):
            if redaction._apply(value, walk=True) != value:  # the walk itself, not the shortcut
                assert not redaction.clean_json(orjson.dumps(value)), (redaction, value)
    data = orjson.dumps(long)
    heads = _HEADS.search(data) is not None or USERINFO.search(data.decode()) is not None
    assert len(data) >= _SHORT and _has_head(data) == heads


def test_the_spawn_of_a_parallel_call_and_an_agents_exit_error_are_redacted(tmp_path: Path) -> None:
    """Every record goes through redaction: a parallel call's args in its spawn record, an agent's error in its exit."""
    bearer = "Bearer abcdefghijklmnop1234"

    def worker() -> None:
        raise ValueError(f"401 Unauthorized for Authorization: {bearer} {KEY}")

    def planner(goal: Any, done: list[Any]) -> Any:
        if not done:
            with pytest.raises(ValueError):
                harness.spawn("w", worker).join()
            return [Step("a", "t", {"api_key": "live-secret-1"}), Step("b", "t", {"x": bearer})]
        return None

    trace = tmp_path / "r.jsonl"
    assert Executor(planner=planner, tools={"t": lambda **k: 1}, trace=trace).run("g").state == "DONE"
    text = trace.read_text()
    for secret in ("live-secret-1", "abcdefghijklmnop1234", KEY):
        assert secret not in text
    records = [orjson.loads(line) for line in text.splitlines()]
    spawns = [r for r in records if r["kind"] == "spawn" and "step" in r]
    assert [r["args"] for r in spawns] == [{"api_key": MARKER}, {"x": f"Bearer {MARKER}"}]
    exit_ = next(r for r in records if r["kind"] == "exit" and r["agent"] == "w")
    assert exit_["error"]["type"] == "builtins.ValueError" and MARKER in exit_["error"]["message"]
    assert replay(trace).state == "DONE"


def paying_in_parallel(calls: list[Any], asked: list[int]) -> tuple[Any, dict[str, Any]]:
    """A planner that asks a model (a recorded crossing), then plans two payments at once, a key in each."""

    def planner(goal: Any, progress: list[Any]) -> Any:
        if progress:
            return None
        reply = harness.llm({"q": "amount?"}, lambda req: (asked.append(1), {"amount": 5})[1])
        return [Step("a", "pay", {"api_key": KEY, "amount": reply["amount"]}),
                Step("b", "pay", {"api_key": OTHER, "amount": 2})]  # fmt: skip

    def pay(api_key: str, amount: int, idempotency_key: str) -> dict[str, Any]:
        calls.append(api_key)
        if len(calls) <= 2:
            raise RuntimeError("connection reset")  # not a ToolError: the process dies as in a crash
        return {"paid": amount}

    return planner, {"pay": harness.Tool(pay, idempotent=True)}


def test_a_resumed_parallel_call_is_called_with_the_live_args_not_the_marker(tmp_path: Path) -> None:
    """Each call of an open parallel step is called again as a run's own step is: with the args the planner,
    asked again (its model call served from the trace), gives back; never with the marker."""
    trace = tmp_path / "run.jsonl"
    calls: list[Any] = []
    asked: list[int] = []
    planner, tools = paying_in_parallel(calls, asked)
    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools=tools, trace=trace).run("g")
    assert [c.state for c in replay(trace).tail.group] == ["ACT", "ACT"] and sorted(calls) == sorted([KEY, OTHER])
    out = Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [{"paid": 5}, {"paid": 2}]
    assert sorted(calls[2:]) == sorted([KEY, OTHER]) and MARKER not in calls
    assert asked == [1]  # the model call that planned the list was served, not made again
    assert KEY.encode() not in trace.read_bytes() and OTHER.encode() not in trace.read_bytes()


def test_a_resumed_parallel_step_whose_planner_plans_otherwise_calls_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    calls: list[Any] = []
    planner, tools = paying_in_parallel(calls, [])
    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools=tools, trace=trace).run("g")
    with pytest.raises(harness.RedactedArgs) as e:
        Executor(planner=lambda g, p: Step("a", "pay", {}), tools=tools, trace=trace, resume=True).run("g")
    assert (e.value.tool, e.value.where) == ("pay", ".api_key") and "instead of the calls" in str(e.value)
    other = [Step("a", "pay", {"api_key": KEY, "amount": 6}), Step("b", "pay", {"api_key": OTHER, "amount": 2})]
    with pytest.raises(harness.ResumeMismatch, match="args of step 0"):
        Executor(planner=lambda g, p: other, tools=tools, trace=trace, resume=True).run("g")
    assert len(calls) == 2  # nothing was called again, with the marker or otherwise


def test_default_patterns_given_as_rules_without_the_defaults_are_searched_too(tmp_path: Path) -> None:
    """Redaction(DEFAULT_PATTERNS, defaults=False): the token patterns without the key names."""
    from harness.trace.redact import DEFAULT_PATTERNS

    tokens = Redaction(DEFAULT_PATTERNS, defaults=False)
    secret = "sk-" + "A" * 30
    assert tokens({"msg": secret}) == {"msg": MARKER} and tokens({"password": "p"}) == {"password": "p"}
    trace = tmp_path / "r.jsonl"
    plan = [Step("s", "t", {"msg": secret})]
    Executor(planner=lambda g, d: plan[len(d)] if not d else None, tools={"t": lambda msg: 1}, trace=trace,
             redact=tokens).run("g")  # fmt: skip
    assert secret.encode() not in trace.read_bytes()


# --- the defaults come from lists the ecosystem maintains (issue 25, defect 14) --------------------------------


@pytest.mark.parametrize(
    "header",
    ["Ocp-Apim-Subscription-Key", "X-Auth-Key", "X-API-Token", "PRIVATE-TOKEN", "Job-Token", "X-Amz-Security-Token",
     "subscription-key", "x-ms-encryption-key", "aeg-sas-key", "X-CSRFToken", "X-XSRF-TOKEN"],
)  # fmt: skip
def test_the_headers_vendors_and_recorders_name_are_redacted(header: str) -> None:
    """Not redacted before: Azure API Management's, Cloudflare's, GitLab's keys, and what the Azure SDK test proxy
    and Sentry scrub."""
    request = {"headers": {header.lower(): "live-value-1234", "accept": "application/json"}}
    assert DEFAULT(request) == {"headers": {header.lower(): MARKER, "accept": "application/json"}}


@pytest.mark.parametrize(
    "key",
    ["token", "secret", "accessToken", "clientSecret", "client-secret", "connectionString", "credentials", "AUTH",
     "privateKey", "authenticity_token", "code_verifier", "clientAssertion", "db_pass", "app_key"],
)  # fmt: skip
def test_the_json_keys_scanners_and_recorders_name_are_redacted_in_every_spelling(key: str) -> None:
    """Before, `token`, `secret`, `accessToken` and `clientSecret` were written in clear. A key is compared in
    any case, and each default name in its snake_case, kebab-case and joined (camelCase) spellings."""
    value = {"outer": [{key: "live-value-1234", "keep": 1}]}
    assert DEFAULT(value) == {"outer": [{key: MARKER, "keep": 1}]}
    assert not DEFAULT.clean_json(orjson.dumps(value))  # the fast search sees it, as the walk does


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&se=2030&sig=Zm9v%2Bbar%3D", "sv=2022-11-02&se=2030"),
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20240101"
            "&X-Amz-Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
            "X-Amz-Algorithm=AWS4",
        ),
        ("https://storage.googleapis.com/b/o?X-Goog-Signature=abcdef0123&X-Goog-Date=20240101", "X-Goog-Date=2024"),
        ("https://s3.amazonaws.com/b/k?AWSAccessKeyId=AKIAEXAMPLE&Signature=abc%2Fdef&Expires=1", "Expires=1"),
        ("https://login.example.com/token?client_assertion=eyJ.x.y&code_verifier=v3rifier", "https://login"),
    ],
)
def test_the_query_parameters_opentelemetry_and_recorders_name_are_redacted(url: str, kept: str) -> None:
    """Not redacted before: an Azure SAS `sig`, AWS's `X-Amz-Signature`, and OpenTelemetry's other defaults."""
    out = DEFAULT({"url": url})["url"]
    assert kept in out and MARKER in out
    for secret in ("Zm9v", "5d672d79", "abcdef0123", "AKIAEXAMPLE", "abc%2Fdef", "eyJ.x.y", "v3rifier"):
        assert secret not in out, out


def test_a_default_name_can_be_left_out() -> None:
    """When a default key names something that is no secret for you (OpenAI's logprobs name each token `token`)."""
    logprobs = {"logprobs": {"content": [{"token": "Hello", "logprob": -0.1}]}, "api_key": "live-value-1234"}
    keep = Redaction().without("Token")
    assert keep(logprobs) == {**logprobs, "api_key": MARKER}
    assert DEFAULT(logprobs)["logprobs"]["content"][0]["token"] == MARKER
    mine = Redaction(("x-team-secret",)).without("token")  # a user's rules stay, the defaults less the one given
    assert mine({"x-team-secret": "s", "token": "t", "password": "p"}) == {"x-team-secret": MARKER, "token": "t",
                                                                          "password": MARKER}  # fmt: skip
    again = Redaction.from_header(mine.header(), "t.jsonl")  # what a rerun reads back from the header
    got = again({"token": "t", "api_key": "k", "q": "https://h/x?sig=1"})
    assert got == {"token": "t", "api_key": MARKER, "q": f"https://h/x?sig={MARKER}"}


@pytest.mark.parametrize(
    "text",
    [
        '{"access_token" : "tok-7777"}',  # JSON text spaced before its colons (Jackson's pretty printer)
        orjson.dumps({"body": orjson.dumps({"access_token": "tok-7777"}).decode()}).decode(),  # JSON in JSON text
        '{"extra_headers": {"X-Gateway": "tok-7777"}}',  # a container's values, whatever their keys
        '{"access_token": "tok-7777", "score": NaN}',  # as Python's json.dumps writes a float nan
    ],
)
def test_json_text_in_a_string_is_redacted_however_it_is_spelled(text: str) -> None:
    """The JSON text a string holds is walked as JSON (its keys redacted), as Python's json module writes it too;
    the search that clears a value without walking it finds those keys, however the text spells their ends."""
    value = {"content": [{"type": "text", "text": text}]}
    assert DEFAULT._apply(value, walk=True) != value  # the walk redacts it ...
    assert not DEFAULT.clean_json(orjson.dumps(value))  # ... so the search may not clear it
    assert "tok-7777" not in orjson.dumps(DEFAULT(value)).decode()


def test_a_trace_of_0_3_or_before_is_redacted_as_then() -> None:
    """Redaction.as_of: JSON text inside strings is read only for traces of 0.4.0 and after (a resume, rerun or
    check compares and continues a 0.3.x trace with the redaction that wrote it; tests/test_compat_030.py)."""
    text = {"content": '{"query": "x", "api_key": "k-0"}'}
    for written, reads in [("0.3.0", False), ("0.2.1", False), ("0.4.0", True), ("1.0.0", True), (None, True)]:
        redaction = Redaction().as_of({"env": {"harness": written}} if written else {})
        assert redaction.json_text is reads, written
        assert (redaction(text) != text) is reads, written
