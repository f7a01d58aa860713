"""Live spans (`harness.otel`): sent while a run is written, the very spans `harness export --otlp` gives later.

The run is tests/billed_agent.py's, in real processes sending to a real OTLP/HTTP receiver on 127.0.0.1
(tests/otlp_receiver.py, which decodes every request with opentelemetry-proto): SIGKILLed after its first model
call, resumed and SIGKILLed inside its last tool, resumed to its end, then forked in this process. Every span
received is compared, field by field, with the export of the final traces.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import billed_agent
import pytest
from billed_agent import BilledServer, run_child
from google.protobuf import json_format
from otlp_receiver import Receiver, parsed

import harness
import harness.otel
from harness.ops.otlp import span_id, spans, trace_id
from harness.testing import read_records
from harness.trace.journal import Journal


@pytest.fixture
def server() -> Iterator[BilledServer]:
    yield from billed_agent.serving()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def live(receiver: Receiver) -> Iterator[Receiver]:
    """Live spans on in this process, to `receiver`, for the test's length."""
    harness.otel.enable(receiver.url, protocol="http/json")
    try:
        yield receiver
    finally:
        harness.otel.disable()


def received(r: Receiver) -> list[dict[str, Any]]:
    """The spans the receiver got, in the protobuf JSON mapping (ids in base64)."""
    return [json_format.MessageToDict(s) for s in r.spans()]


def exported(trace: Path, content: bool = False) -> dict[str, dict[str, Any]]:
    """The spans `harness export --otlp` gives for trace, by span id, as received() has them."""
    found = parsed(spans(trace, content=content)).resource_spans[0].scope_spans[0].spans
    return {s["spanId"]: s for s in (json_format.MessageToDict(x) for x in found)}


def attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}


def test_a_crashed_resumed_forked_run_sends_the_spans_the_export_gives(
    tmp_path: Path, server: BilledServer, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "run.jsonl"
    firsts: list[int] = []  # the spans received after each process
    for kill in ("after-chat-1", "in-ship", None):
        run_child(trace, server, kill, live=receiver.url)
        firsts.append(len(receiver.spans()))
    assert server.billed == 2  # the resumes served the model calls made before the kills

    want = exported(trace)
    got = received(receiver)
    assert sorted(s["spanId"] for s in got) == sorted(want)  # every span once: a resume sends none again
    for span in got:
        assert span == want[span["spanId"]]  # the same trace id, span id, parent, times, attributes, events
    names = [[s["name"] for s in got[a:b]] for a, b in zip([0, *firsts[:-1]], firsts, strict=True)]
    assert names == [
        ["chat gpt-4o-mini"],  # before the first kill: no root (a SIGKILLed process sends none)
        ["execute_tool reserve", "chat gpt-4o-mini"],  # the ship tool was in flight at the second kill
        ["execute_tool ship", "invoke_workflow shop"],  # its result, then the root as the run ended
    ]
    run_id = harness.replay(trace).run_id
    assert {s.trace_id for s in receiver.spans()} == {bytes.fromhex(trace_id(run_id))}
    assert receiver.spans()[-1].span_id == bytes.fromhex(span_id(run_id, 1))  # the root: the header's

    # a fork, in this process: the served calls marked
    monkeypatch.setenv("BILLED_MODEL", server.url)
    harness.otel.enable(receiver.url, protocol="http/json")
    try:
        second = [c for c in harness.replay(trace).crossings if c.kind == "http"][1]
        fork = tmp_path / "fork.jsonl"
        harness.fork(trace, at=second.seq, set={"body.choices[0].message.content": "ship nothing"},
                     workflow=billed_agent.shop, out=fork)  # fmt: skip
        delivery = harness.otel.flush()
    finally:
        harness.otel.disable()
    assert delivery is not None and delivery.dropped == 0 and delivery.flushed
    forked = received(receiver)[len(got) :]
    want = exported(fork)
    assert sorted(s["spanId"] for s in forked) == sorted(want)
    for span in forked:
        assert span == want[span["spanId"]]
    chats = [attrs(s) for s in forked if s["name"].startswith("chat")]
    assert [c["harness.served"] for c in chats] == [True, False]  # the first served from the recording
    assert server.billed == 2


def test_an_endpoint_that_is_down_changes_nothing_but_one_message(
    tmp_path: Path, server: BilledServer, receiver: Receiver
) -> None:
    url = receiver.url
    receiver.stop()  # its port closed: connections are refused
    down, plain = tmp_path / "down.jsonl", tmp_path / "plain.jsonl"
    out = run_child(down, server, live=url)
    assert out is not None and out["state"] == "DONE"
    said = [line for line in out["stderr"].splitlines() if line.strip()]
    assert len(said) == 1 and said[0].startswith(f"harness.otel: spans not delivered to {url}/v1/traces"), said
    assert "cannot connect" in said[0] and "harness export TRACE --otlp-endpoint" in said[0]
    assert "Traceback" not in out["stderr"]
    out = run_child(plain, server)
    assert out is not None and out["state"] == "DONE" and out["stderr"] == ""

    def shape(path: Path) -> list[tuple[Any, ...]]:
        return [(r["seq"], r["kind"], r.get("to"), r.get("boundary"), r.get("tool")) for r in read_records(path)]

    assert shape(down) == shape(plain)  # the same trace, live spans or not
    harness.verify(down)


def test_writes_a_full_queue_left_in_the_file_are_read_back(
    tmp_path: Path, live: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(harness.otel, "QUEUED", -1)  # no write waits in the queue: every record is read back
    trace = billed_agent.one_run(tmp_path / "r.jsonl", steps=3)
    delivery = harness.otel.flush()
    assert delivery is not None and delivery.flushed and (delivery.sent, delivery.dropped) == (4, 0)
    want = exported(trace)
    got = received(live)
    assert [s["name"] for s in got] == ["execute_tool work"] * 3 + [got[-1]["name"]] and len(want) == 4
    for span in got:
        assert span == want[span["spanId"]]


def test_content_is_sent_as_the_export_gives_it(tmp_path: Path, receiver: Receiver) -> None:
    harness.otel.enable(receiver.url, protocol="http/json", content=True)
    try:
        trace = billed_agent.one_run(tmp_path / "r.jsonl", steps=2)
    finally:
        harness.otel.disable()
    got, want = received(receiver), exported(trace, content=True)
    assert len(got) == len(want) == 3
    for span in got:
        assert span == want[span["spanId"]]
    assert "gen_ai.tool.call.arguments" in attrs(got[0]) and "gen_ai.tool.call.result" in attrs(got[0])


def test_a_resume_that_writes_nothing_sends_nothing(tmp_path: Path, live: Receiver) -> None:
    trace = billed_agent.one_run(tmp_path / "r.jsonl")
    harness.otel.flush()
    before = len(live.spans())
    done = trace.read_bytes()
    again = harness.Executor(planner=harness.testing.fixed_plan(harness.testing.steps(1)),
                             tools={"work": harness.testing.counter()}, trace=trace, resume=True)  # fmt: skip
    assert again.run(0).state == "DONE"
    delivery = harness.otel.flush()
    assert trace.read_bytes() == done and delivery is not None and delivery.flushed
    assert len(live.spans()) == before == 2


def test_no_endpoint_and_bad_options_are_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(harness.HarnessError, match="no endpoint; give one"):
        harness.otel.enable()
    with pytest.raises(harness.HarnessError, match="not an http"):
        harness.otel.enable("localhost:4318")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x")
    with pytest.raises(harness.HarnessError, match=r"\$OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://x' is not an http"):
        harness.otel.enable()
    with pytest.raises(harness.HarnessError, match="choose http/protobuf or http/json"):
        harness.otel.enable("http://localhost:4318", protocol="grpc")
    assert not harness.otel.enabled()


def test_the_endpoint_comes_from_the_environment_when_enabled(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=k1")
    harness.otel.enable()
    try:
        trace = billed_agent.one_run(tmp_path / "r.jsonl")
        delivery = harness.otel.disable()
    finally:
        harness.otel.disable()
    assert delivery is not None and delivery.url == receiver.url + "/v1/traces" and delivery.sent == 2
    assert set(receiver.kinds) == {"application/x-protobuf"} and receiver.headers[0]["x-api-key"] == "k1"
    assert {s.span_id for s in receiver.spans()} == {bytes.fromhex(h) for h in _ids(trace)}


def _ids(trace: Path) -> list[str]:
    request = spans(trace)
    return [s["spanId"] for s in request["resourceSpans"][0]["scopeSpans"][0]["spans"]]


def test_nothing_is_watched_unless_enabled(tmp_path: Path, receiver: Receiver) -> None:
    assert not harness.otel.enabled()
    with Journal.open(tmp_path / "t.jsonl") as journal:
        assert journal.watcher is None
    harness.otel.enable(receiver.url, protocol="http/json")
    try:
        with Journal.open(tmp_path / "u.jsonl") as journal:
            assert journal.watcher is not None
    finally:
        harness.otel.disable()
    with Journal.open(tmp_path / "v.jsonl") as journal:
        assert journal.watcher is None
