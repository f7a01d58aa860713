"""harness.http against a real OpenAI-compatible server on 127.0.0.1, driven by the real openai client.

Each test records a run while the server answers, stops the server (its
port then refuses connections), and re-executes: any live call would fail.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

import harness
from harness import Executor, Recorder, ReplayDrift, Step, fork, replay, rerun

httpx = pytest.importorskip("httpx", reason="harness.http needs httpx: pip install -e '.[test]'")

import stream_agent  # noqa: E402  # after the skip: it needs httpx
from chat_server import ChatServer  # noqa: E402

from harness import cli  # noqa: E402
from harness import http as hhttp  # noqa: E402  # after the skip: it needs httpx
from harness.trace.stream import assemble, http_view  # noqa: E402

KEY = "sk-test-REALKEY0123456789abcdefXYZ"
OTHER_KEY = "sk-test-OTHERKEY9876543210zyxwvuABC"


@pytest.fixture
def server() -> Iterator[ChatServer]:
    s = ChatServer()
    try:
        yield s
    finally:
        if s.thread.is_alive():
            s.stop()


def chat_agent(url: str, key: str = KEY, *, stream: bool = False, asynchronous: bool = False, **options: Any) -> Any:
    """(planner, tools, verifier): one model question per step, each answer noted by a tool."""
    openai = pytest.importorskip("openai", reason="the end-to-end tests drive the real openai client")
    client = openai.OpenAI(
        base_url=url + "/v1", api_key=key, max_retries=0, http_client=httpx.Client(transport=hhttp.transport(**options))
    )

    def ask(question: str) -> str:
        messages = [{"role": "user", "content": question}]
        if asynchronous:
            return asyncio.run(ask_async(messages))
        if stream:
            chunks = client.chat.completions.create(model="test-model", messages=messages, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks)
        reply = client.chat.completions.create(model="test-model", messages=messages)
        return reply.choices[0].message.content or ""

    async def ask_async(messages: list[dict[str, str]]) -> str:
        transport = hhttp.async_transport(**options)
        async with openai.AsyncOpenAI(
            base_url=url + "/v1", api_key=key, max_retries=0, http_client=httpx.AsyncClient(transport=transport)
        ) as aclient:
            if stream:
                chunks = await aclient.chat.completions.create(model="test-model", messages=messages, stream=True)
                return "".join([c.choices[0].delta.content or "" async for c in chunks])
            reply = await aclient.chat.completions.create(model="test-model", messages=messages)
            return reply.choices[0].message.content or ""

    def planner(goal: dict[str, Any], progress: list[Any]) -> Step | None:
        if len(progress) == len(goal["questions"]):
            return None
        question = goal["questions"][len(progress)]
        return Step(name=f"ask {len(progress)}", tool="note", args={"question": question, "answer": ask(question)})

    return planner, {"note": lambda question, answer: {"noted": answer}}, None


GOAL = {"questions": ["what is a journal", "why append only"]}


def record(url: str, trace: Path, **options: Any) -> harness.Outcome:
    planner, tools, verifier = chat_agent(url, **options)
    return Executor(planner=planner, tools=tools, verifier=verifier, trace=trace).run(GOAL)


def http_crossings(trace: Path) -> list[harness.Crossing]:
    return [c for c in replay(trace).crossings if c.kind == "http"]


def all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_openai_run_is_recorded_and_reruns_with_the_server_stopped(server: ChatServer, trace: Path) -> None:
    out = record(server.url, trace)
    assert out.state == "DONE"
    assert [c.result["noted"] for c in out.checkpoints] == ["echo: what is a journal", "echo: why append only"]
    assert [s["authorization"] for s in server.seen] == [f"Bearer {KEY}"] * 2  # the live calls had the key

    calls = http_crossings(trace)
    assert len(calls) == 2
    req, resp = calls[0].request, calls[0].response
    assert req["method"] == "POST" and req["url"] == f"{server.url}/v1/chat/completions"
    assert req["body"]["messages"] == [{"role": "user", "content": "what is a journal"}]
    assert req["headers"]["authorization"] == "[REDACTED]"
    assert "user-agent" not in req["headers"] and not any(h.startswith("x-stainless") for h in req["headers"])
    assert resp["status"] == 200 and resp["headers"]["content-type"] == "application/json"
    assert resp["body"]["choices"][0]["message"]["content"] == "echo: what is a journal"

    server.stop()
    with pytest.raises(ConnectionRefusedError):  # nobody answers any more (the port, not httpx's mapping of it)
        socket.create_connection((urlsplit(server.url).hostname, urlsplit(server.url).port), timeout=5).close()
    planner, tools, verifier = chat_agent(server.url, OTHER_KEY)  # another key: redacted before hashing
    again = rerun(trace, planner=planner, tools=tools, verifier=verifier, out=trace.parent / "again.jsonl")
    assert again.equal and again.live_calls == 0 and again.state == "DONE"
    assert len(server.seen) == 2


def test_a_fork_changes_one_model_answer(server: ChatServer, trace: Path) -> None:
    record(server.url, trace)
    server.stop()
    last = http_crossings(trace)[-1]
    answer = orjson.loads(orjson.dumps(last.response))
    answer["body"]["choices"][0]["message"]["content"] = "because a crash cannot tear what is already written"
    planner, tools, verifier = chat_agent(server.url)
    child = fork(trace, at=last.seq, value=answer, planner=planner, tools=tools, verifier=verifier,
                 out=trace.parent / "child.jsonl")  # fmt: skip
    assert child.state == "DONE" and child.branch == last.seq
    notes = [c.result["noted"] for c in replay(trace.parent / "child.jsonl").checkpoints]
    assert notes == ["echo: what is a journal", "because a crash cannot tear what is already written"]
    assert harness.diff(trace, trace.parent / "child.jsonl").first is not None
    assert len(server.seen) == 2  # served up to the branch, and nothing after it needed the model


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_streamed_answer_is_recorded_whole_and_replayed_chunk_for_chunk(
    server: ChatServer, trace: Path, asynchronous: bool
) -> None:
    out = record(server.url, trace, stream=True, asynchronous=asynchronous)
    assert [c.result["noted"] for c in out.checkpoints] == ["echo: what is a journal", "echo: why append only"]
    resp = http_crossings(trace)[0].response
    assert resp["headers"]["content-type"] == "text/event-stream" and "body" not in resp
    chunks = resp["chunks"]  # one per event as sent (the server writes each in one send), then [DONE]
    assert len(chunks) >= 6 and chunks[-1].endswith("data: [DONE]\n\n")
    events = [e for e in "".join(chunks).split("\n\n") if e]
    assert [orjson.loads(e.removeprefix("data: "))["choices"][0]["delta"]["content"] for e in events[:-1]] == [
        "echo:",
        " what",
        " is",
        " a",
        " journal",
    ]

    server.stop()
    planner, tools, verifier = chat_agent(server.url, stream=True, asynchronous=asynchronous)
    again = rerun(trace, planner=planner, tools=tools, verifier=verifier)
    assert again.equal and again.live_calls == 0


def test_a_raw_stream_is_replayed_chunk_for_chunk(server: ChatServer, trace: Path) -> None:
    seen: list[bytes] = []

    def reader(goal: Any, progress: list[Any]) -> Step | None:
        if progress:
            return None
        with httpx.Client(transport=hhttp.transport()) as client:
            body = {"model": "test-model", "messages": [{"role": "user", "content": "a b c"}], "stream": True}
            with client.stream("POST", server.url + "/v1/chat/completions", json=body) as r:
                seen.extend(r.iter_bytes())
        return Step(name="read", tool="note", args={"chunks": len(seen)})

    tools = {"note": lambda chunks: chunks}
    Executor(planner=reader, tools=tools, trace=trace).run("raw")
    live = list(seen)
    assert len(live) >= 5  # "echo:", "a", "b", "c", [DONE]: a chunk each (more if the network split one)
    server.stop()
    seen.clear()
    assert rerun(trace, planner=reader, tools=tools).equal
    assert seen == live


def test_a_refused_connection_is_recorded_and_raised_again_as_the_same_type(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1/ping"
    raised: list[BaseException] = []

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        if progress:
            return None
        with httpx.Client(transport=hhttp.transport()) as client:
            try:
                client.get(url)
            except httpx.HTTPError as e:
                raised.append(e)
                return Step(name="offline", tool="note", args={"error": type(e).__name__, "url": str(e.request.url)})
        return Step(name="online", tool="note", args={})

    tools = {"note": lambda **kw: kw}
    trace = tmp_path / "run.jsonl"
    Executor(planner=planner, tools=tools, trace=trace).run("ping")
    (cross,) = http_crossings(trace)
    assert cross.error is not None and cross.error["type"] == "httpx.ConnectError" and cross.response is None
    again = rerun(trace, planner=planner, tools=tools)
    assert again.equal and again.live_calls == 0
    assert [type(e) for e in raised] == [httpx.ConnectError, httpx.ConnectError]
    assert str(raised[1]) == str(raised[0]) and raised[1].request.url == url


def test_matching_can_ignore_a_query_parameter_and_a_body_field(server: ChatServer, tmp_path: Path) -> None:
    clock = iter(range(100))
    lenient = {"ignore_query": ["ts"], "ignore_body": ["$.sent_at", "$.items[*].nonce"]}

    def make(options: dict[str, Any]) -> Callable[..., Step | None]:
        def planner(goal: Any, progress: list[Any]) -> Step | None:
            if progress:
                return None
            t = next(clock)  # read straight from "the world": differs on rerun
            with httpx.Client(transport=hhttp.transport(**options)) as client:
                body = {"q": "x", "sent_at": t, "items": [{"id": 1, "nonce": t}]}
                got = client.post(server.url + f"/echo?page=2&ts={t}", json=body).json()
            return Step(name="echo", tool="note", args={"q": got["body"]["q"], "page": got["query"]["page"]})

        return planner

    tools = {"note": lambda **kw: kw}
    trace = tmp_path / "run.jsonl"
    Executor(planner=make(lenient), tools=tools, trace=trace).run("echo")
    server.stop()
    again = rerun(trace, planner=make(lenient), tools=tools, out=tmp_path / "again.jsonl")
    assert again.equal and again.live_calls == 0
    (was,), (now,) = http_crossings(trace), http_crossings(tmp_path / "again.jsonl")
    assert now.request == was.request  # written as recorded: the ignored fields keep their recorded values
    assert was.request["body"]["sent_at"] == 0 and "ts=0" in was.request["url"]

    with pytest.raises(ReplayDrift) as e:  # by default every body field counts
        rerun(trace, planner=make({}), tools=tools)
    assert e.value.seq == was.seq
    assert set(e.value.fields) == {"url.query.ts", "body.sent_at", "body.items[0].nonce"}


def test_match_on_chooses_the_fields_that_count(server: ChatServer, tmp_path: Path) -> None:
    paths = iter(["/echo?a=1", "/echo?a=2"])

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        if progress:
            return None
        with httpx.Client(transport=hhttp.transport(match_on=["method", "path"])) as client:
            status = client.post(server.url + next(paths), json={"n": len(server.seen)}).status_code
        return Step(name="echo", tool="note", args={"status": status})

    tools = {"note": lambda **kw: kw}
    Executor(planner=planner, tools=tools, trace=tmp_path / "run.jsonl").run("echo")
    server.stop()
    assert rerun(tmp_path / "run.jsonl", planner=planner, tools=tools).equal  # query and body differ: not matched

    with pytest.raises(harness.HarnessError, match="unknown field 'uri'"):
        hhttp.transport(match_on=["uri"])


def test_outside_a_run_the_transport_just_calls_through(server: ChatServer) -> None:
    with httpx.Client(transport=hhttp.transport()) as client:
        r = client.post(server.url + "/echo?x=1", json={"a": 1})
    assert r.status_code == 200 and r.json() == {"body": {"a": 1}, "query": {"x": "1"}}
    assert r.headers["content-length"] == str(len(r.content))  # untouched: not rebuilt


def test_a_recorder_records_plain_httpx_and_the_live_client_gets_the_real_response(
    server: ChatServer, tmp_path: Path
) -> None:
    trace = tmp_path / "rec.jsonl"
    with (
        Recorder(trace, entrypoint="test") as rec,
        httpx.Client(transport=hhttp.transport(redact=["x-team-secret"])) as client,
    ):
        r = client.post(server.url + "/echo", json={"a": 1}, headers={"x-team-secret": "hunter2", "x-kind": "plain"})
        rec.log("status", r.status_code)
    assert r.headers["set-cookie"].startswith("session=s3cr3t-cookie")  # the live caller sees everything
    (c,) = http_crossings(trace)
    assert c.request["headers"]["x-team-secret"] == "[REDACTED]" and c.request["headers"]["x-kind"] == "plain"
    assert c.response["headers"]["set-cookie"] == "[REDACTED]"
    assert c.response["body"] == {"body": {"a": 1}, "query": {}}
    data = trace.read_bytes()
    assert b"hunter2" not in data and b"s3cr3t" not in data


def test_async_transport_outside_a_run_and_bodies_that_are_not_json(server: ChatServer, tmp_path: Path) -> None:
    async def call() -> Any:
        async with httpx.AsyncClient(transport=hhttp.async_transport()) as client:
            return await client.post(server.url + "/nowhere", content=b"\xff\x00binary")

    assert asyncio.run(call()).status_code == 404
    trace = tmp_path / "rec.jsonl"
    with Recorder(trace, entrypoint="test"):
        assert asyncio.run(call()).json() == {"error": {"message": "no route /nowhere"}}
    (c,) = http_crossings(trace)
    assert c.request["base64"] == "/wBiaW5hcnk=" and "body" not in c.request
    assert c.response["status"] == 404


def test_a_secret_key_never_reaches_the_trace_or_its_siblings(server: ChatServer, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    for stream in (False, True):
        record(server.url, runs / f"stream-{stream}.jsonl", stream=stream)
    planner, tools, verifier = chat_agent(server.url, asynchronous=True)
    Executor(planner=planner, tools=tools, verifier=verifier, trace=runs / "async.jsonl").run(GOAL)
    assert all(s["authorization"] == f"Bearer {KEY}" for s in server.seen)
    data = all_bytes(runs)
    assert data.count(b"[REDACTED]") >= 6
    for form in (KEY, KEY[3:], KEY.encode().hex()):
        assert form.encode() not in data


def test_matcher_cuts_a_request_down_to_what_counts() -> None:
    request = {
        "method": "post",
        "url": "https://api.example.com:8443/v1/x?b=2&ts=9&a=1",
        "headers": {"accept": "*/*"},
        "body": {"q": 1, "sent_at": 9, "items": [{"id": 1, "nonce": 5}], "meta": {"rid": "r"}},
    }
    m = hhttp.Matcher(ignore_query=frozenset({"ts"}), ignore_body=("$.sent_at", "$.items[*].nonce", "$.meta.rid"))
    assert m(request) == {
        "method": "POST",
        "url": {
            "scheme": "https",
            "host": "api.example.com",
            "port": 8443,
            "path": "/v1/x",
            "query": {"a": "1", "b": "2"},
        },
        "body": {"q": 1, "items": [{"id": 1}], "meta": {}},
    }
    repeated = hhttp.Matcher(on=("query",))({"url": "http://h/?x=2&tag=b&tag=a&x=1&tag=c"})
    assert repeated == {"query": {"tag": ["b", "a", "c"], "x": ["2", "1"]}}  # names sorted, values in order
    assert hhttp.Matcher(on=("host", "headers"))(request) == {"host": "api.example.com", "headers": {"accept": "*/*"}}
    assert hhttp.Matcher(on=("method", "body"))({"method": "GET", "url": "http://h/"}) == {
        "method": "GET",
        "body": None,
    }
    assert hhttp.Matcher()({"method": "PUT", "url": "http://h/", "text": "hi"})["text"] == "hi"
    with pytest.raises(harness.HarnessError, match="names no field"):
        hhttp.Matcher(on=())
    with pytest.raises(harness.RedactionRuleError, match="cannot read the path"):
        hhttp.transport(ignore_body=["$.a["])
    single = hhttp.transport(match_on="url", ignore_query="ts", ignore_body="$.t", skip_headers="x-trace")
    assert single.recording.match == hhttp.Matcher(("url",), frozenset({"ts"}), ("$.t",))  # one name, not letters
    assert single.recording.skip("x-trace") and not single.recording.skip("x")


def test_a_forked_value_that_is_no_http_response_is_a_clear_error(server: ChatServer, trace: Path) -> None:
    record(server.url, trace)
    server.stop()
    planner, tools, verifier = chat_agent(server.url)
    at = http_crossings(trace)[0].seq
    with pytest.raises(harness.HarnessError, match=r"not one harness\.http wrote"):
        fork(trace, at=at, value="just text", planner=planner, tools=tools, verifier=verifier)
    assert sorted(p.name for p in trace.parent.iterdir()) == ["run.jsonl"]  # a failed fork leaves no file


def test_aboundary_records_serves_and_reruns_strictly(tmp_path: Path) -> None:
    async def model(n: int) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"answer": n * 10}

    def make(extra: bool = False, shift: int = 0) -> Callable[..., Step | None]:
        def planner(goal: Any, progress: list[Any]) -> Step | None:
            if len(progress) == 2:
                if extra:
                    asyncio.run(harness.aboundary("model", {"n": 99}, lambda: model(99)))
                return None
            n = len(progress) + shift
            reply = asyncio.run(harness.aboundary("model", {"n": n}, lambda: model(n)))
            return Step(name=f"s{n}", tool="note", args=reply)

        return planner

    tools = {"note": lambda answer: answer}
    trace = tmp_path / "run.jsonl"
    assert Executor(planner=make(), tools=tools, trace=trace).run("g").state == "DONE"
    assert [(c.kind, c.request, c.response) for c in replay(trace).crossings if c.kind == "model"] == [
        ("model", {"n": 0}, {"answer": 0}),
        ("model", {"n": 1}, {"answer": 10}),
    ]
    again = rerun(trace, planner=make(), tools=tools)
    assert again.equal and again.live_calls == 0
    with pytest.raises(ReplayDrift) as drift:  # {"n": 1} is served (by what it is), {"n": 0} never made
        rerun(trace, planner=make(shift=1), tools=tools)
    first = next(c for c in replay(trace).crossings if c.kind == "model")
    assert (drift.value.seq, drift.value.fields) == (first.seq, {"request": ({"n": 0}, None)})
    with pytest.raises(harness.ReplayViolation):
        rerun(trace, planner=make(extra=True), tools=tools)
    assert asyncio.run(harness.aboundary("model", {"n": 3}, lambda: model(3))) == {"answer": 30}  # outside a run


def test_a_response_larger_than_max_body_while_recording_is_a_clear_error(server: ChatServer, trace: Path) -> None:
    failed: list[BaseException] = []

    def reader(goal: Any, progress: list[Any]) -> Step | None:
        if progress:
            return None
        with httpx.Client(transport=hhttp.transport(max_body=64)) as client:
            body = {"model": "test-model", "messages": [{"role": "user", "content": "a b c d e f"}], "stream": True}
            try:
                with client.stream("POST", server.url + "/v1/chat/completions", json=body) as r:
                    list(r.iter_bytes())
            except harness.HttpRecordingError as e:
                failed.append(e)
        return Step(name="read", tool="note", args={"failed": len(failed)})

    Executor(planner=reader, tools={"note": lambda failed: failed}, trace=trace).run("raw")
    (e,) = failed
    assert isinstance(e, harness.HttpRecordingError) and e.field == "response"
    assert "more than 64 bytes" in e.problem and "max_body" in e.problem and "/v1/chat/completions" in str(e.value)
    (cross,) = http_crossings(trace)
    assert cross.error is not None and cross.error["type"].endswith("HttpRecordingError")  # recorded as its error
    with pytest.raises(harness.HttpRecordingError, match="positive int") as bad:
        hhttp.transport(max_body=0)
    assert bad.value.field == "max_body" and bad.value.value == 0


def test_http_errors_carry_fields(server: ChatServer, trace: Path) -> None:
    with pytest.raises(harness.HttpRecordingError) as e:
        hhttp.transport(match_on=["uri"])
    assert (e.value.field, e.value.value) == ("match_on", ("uri",)) and "unknown field 'uri'" in e.value.problem
    record(server.url, trace)
    server.stop()
    planner, tools, verifier = chat_agent(server.url)
    with pytest.raises(harness.HttpRecordingError) as e:
        fork(trace, at=http_crossings(trace)[0].seq, value={"no": "status"}, planner=planner, tools=tools,
             verifier=verifier)  # fmt: skip
    assert e.value.field == "response" and e.value.value == {"no": "status"}


class Unreachable(httpx.BaseTransport):
    """The live side of a transport whose connection fails with a signed URL in the message."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url}", request=request)


def test_the_transports_own_rules_apply_to_a_recorded_error(tmp_path: Path) -> None:
    import re

    signed = "http://127.0.0.1:9/v1/file?sig=S3CRETSIGNATURE"
    rules = [re.compile(r"sig=(\w+)")]
    client = httpx.Client(transport=hhttp.transport(wrap=Unreachable(), redact=rules))
    with Recorder(tmp_path / "run.jsonl", entrypoint="t"), client, pytest.raises(httpx.ConnectError) as e:
        client.get(signed)
    assert "S3CRETSIGNATURE" not in str(e.value) and "sig=[REDACTED]" in str(e.value)
    assert b"S3CRETSIGNATURE" not in (tmp_path / "run.jsonl").read_bytes()
    (cross,) = http_crossings(tmp_path / "run.jsonl")
    assert cross.error is not None and "sig=[REDACTED]" in cross.error["message"]


# --- model streams read as their message, and forked by one field -----------------------------------------------

QUESTIONS = {"questions": ["what is a journal", "why append only"]}


def streamed(url: str, trace: Path, api: str = "chat", asynchronous: bool = False) -> harness.Outcome:
    planner, tools, _ = stream_agent.make_agent(url, api, asynchronous)
    return Executor(planner=planner, tools=tools, trace=trace).run(QUESTIONS)


def noted(trace: Path) -> list[Any]:
    return [c.result["noted"] for c in replay(trace).checkpoints]


def test_a_streamed_reply_reads_as_its_text_in_show_and_in_the_golden(
    server: ChatServer, trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    streamed(server.url, trace)
    raw = [orjson.dumps(c.response) for c in http_crossings(trace)]
    assert all(b"chat.completion.chunk" in r for r in raw)  # the trace keeps the chunks, to serve them again
    assert cli.main(["show", str(trace), "--width", "200"]) == 0
    shown = capsys.readouterr().out
    assert "said=echo: what is a journal" in shown and "chat.completion.chunk" not in shown
    assert len(shown.splitlines()) < 40  # two model calls, 12 records: not the chunks, one a line
    golden = [r for r in harness.normalize(trace) if r["kind"] == "model_call"]
    assert [r["reply"]["text"] for r in golden] == ["echo: what is a journal", "echo: why append only"]
    assert golden[0]["via"] == "http" and "response" not in golden[0]  # what was said, not the exchange
    raw_view = [r for r in harness.normalize(trace, view="raw") if r.get("boundary") == "http"]
    assert [r["response"]["stream"]["message"]["content"] for r in raw_view] == [
        "echo: what is a journal",
        "echo: why append only",
    ]
    assert raw_view[0]["response"]["stream"]["id"] == "<ignored>" and "chunks" not in raw_view[0]["response"]
    assert raw_view[0]["request"]["url"] == "http://127.0.0.1:<port>/v1/chat/completions"
    assert len(orjson.dumps(golden[0])) < len(raw[0])


@pytest.mark.parametrize(
    ("api", "asynchronous"), [("chat", False), ("chat", True), ("responses", False)], ids=["chat", "async", "responses"]
)
def test_fork_set_changes_the_text_of_a_streamed_reply(
    server: ChatServer, trace: Path, api: str, asynchronous: bool
) -> None:
    streamed(server.url, trace, api, asynchronous)
    assert noted(trace) == ["echo: what is a journal", "echo: why append only"]
    last = http_crossings(trace)[-1]
    server.stop()  # the fork calls no model: up to the branch it is served, the branch is the new reply
    text = 'because a crash cannot tear what is written: ünïcode ✓, "quotes"\nand lines'
    planner, tools, _ = stream_agent.make_agent(server.url, api, asynchronous)
    child = trace.parent / "child.jsonl"
    r = fork(trace, at=last.seq, set={"stream.message.content": text}, planner=planner, tools=tools, out=child)
    assert r.state == "DONE" and len(server.seen) == 2  # live after the branch: the note tool, not the model
    assert noted(child) == ["echo: what is a journal", text]  # the real client read the re-chunked stream
    forked = http_crossings(child)[-1].response
    assert "chunks" in forked and harness.diff(trace, child).first.changes[0].field == "reply.text"
    assert harness.diff(trace, child, view="raw").first.changes[0].field == "response.stream.message.content"
    assert rerun(child, planner=planner, tools=tools).equal  # the new stream serves again, chunk for chunk


def test_fork_set_of_a_field_that_is_not_there_names_it_and_what_is(server: ChatServer, trace: Path) -> None:
    streamed(server.url, trace)
    at = http_crossings(trace)[-1].seq
    planner, tools, _ = stream_agent.make_agent(server.url)
    child = trace.parent / "child.jsonl"
    with pytest.raises(harness.HarnessError) as e:
        fork(trace, at=at, set={"message.content": "x"}, planner=planner, tools=tools, out=child)
    assert str(e.value) == (
        f"field path 'message.content': the recorded http response at seq {at} of {trace} has no key 'message': "
        "it is an object with keys status, headers, stream"
    )
    with pytest.raises(
        harness.HarnessError,
        match=r"stream\.message in the recorded .* has no key 'text': it is an object with keys content",
    ):
        fork(trace, at=at, set={"stream.message.text": "x"}, planner=planner, tools=tools, out=child)
    with pytest.raises(harness.HarnessError, match="cannot carry that message"):
        fork(trace, at=at, set={"stream.message.content": 42}, planner=planner, tools=tools, out=child)
    with pytest.raises(harness.HarnessError, match=r"exactly one of value= .* and set="):
        fork(trace, at=at, value={}, set={"status": 500}, planner=planner, tools=tools, out=child)
    with pytest.raises(harness.HarnessError, match="exactly one of value="):
        fork(trace, at=at, planner=planner, tools=tools, out=child)
    with pytest.raises(harness.HarnessError, match="names one field"):
        fork(trace, at=at, set={"stream.*": 1}, planner=planner, tools=tools, out=child)
    assert not child.exists() and len(server.seen) == 2
    shown = http_view(http_crossings(trace)[-1].response)  # a whole value in the shown form is re-chunked too
    shown["stream"]["message"]["content"] = "whole"
    fork(trace, at=at, value=shown, planner=planner, tools=tools, out=child)
    assert noted(child)[-1] == "whole"


def test_harness_fork_set_path_value_from_the_command_line(
    server: ChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = tmp_path / "parent.jsonl"
    streamed(server.url, parent)
    at = http_crossings(parent)[-1].seq
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MODEL_URL", server.url)

    def fork_cli(*args: str) -> tuple[int, str, str]:
        """`harness fork` in this process (the console script calls cli.main); its agent is the module this file
        imported (importing it from the working directory is tests/test_cli.py's)."""
        try:
            code = cli.main(["fork", "parent.jsonl", "--agent", "stream_agent:make_agent", *args])
        except SystemExit as e:  # argparse's usage errors
            code = int(e.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    code, _, err = fork_cli("--at", str(at), "--set", "stream.message.content=no, and here is why", "--set",
                            'stream.finish_reason="stop"', "--out", "child.jsonl")  # fmt: skip
    assert code == 0, err
    assert noted(tmp_path / "child.jsonl")[-1] == "no, and here is why"  # a bare string: VALUE is not JSON
    assert assemble(http_crossings(tmp_path / "child.jsonl")[-1].response["chunks"])["finish_reason"] == "stop"
    code, out, err = fork_cli("--at", str(at), "--set", "stream.message.words=x", "--out", "other.jsonl")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "'stream.message.words'" in err and "has no key 'words': it is an object with keys content" in err
    code, _, err = fork_cli("--at", str(at), "--set", '{"status": 200}', "--set", "status=500", "--out", "other.jsonl")
    assert code == 2 and "either one whole JSON value, or PATH=VALUE settings" in err
    assert not (tmp_path / "other.jsonl").exists() and len(server.seen) == 2


def test_harness_diff_leaves_out_a_moved_port_and_ignores_what_it_is_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    servers = [ChatServer(), ChatServer()]  # both up at once: two ports for sure
    try:  # the same agent twice, its model server on another port each time
        for server, trace in zip(servers, traces, strict=True):
            streamed(server.url, Path(trace))
    finally:
        for server in servers:
            server.stop()
    monkeypatch.chdir(tmp_path)
    assert harness.diff(*traces).equal
    assert cli.main(["diff", *traces]) == 0
    assert capsys.readouterr().out == "equal after normalization (12 records)\n"

    assert harness.diff(*traces, defaults=False).equal  # the behavior view: what was asked and said, no URL
    assert cli.main(["diff", *traces, "--no-defaults"]) == 0
    capsys.readouterr()

    exact = harness.diff(*traces, defaults=False, view="raw")  # the raw view: each exchange as recorded
    assert "request.url" in {c.field for m in exact.moved for c in m.changes}
    assert cli.main(["diff", *traces, "--no-defaults", "--raw"]) == 1
    assert "request.url:" in capsys.readouterr().out

    volatile = ["--ignore", "request.url", "--ignore", "response.stream.created", "--ignore", "response.stream.id"]
    assert cli.main(["diff", *traces, "--raw", "--no-defaults", *volatile]) == 0
    ignored = ["request.url", "**.created", "response.stream.id"]
    assert harness.diff(*traces, defaults=False, ignore=ignored, view="raw").equal
    capsys.readouterr()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.harness]\ngolden_defaults = false\ngolden_ignore = ["**.created", "response.stream.id"]\n'
    )
    assert cli.main(["diff", *traces, "--raw", "--format", "json"]) == 1  # the project's rules: the time ignored
    changed = orjson.loads(capsys.readouterr().out)["changed"]
    assert [c["field"] for m in changed for c in m["changes"]] == ["request.url"] * 2
    assert cli.main(["diff", *traces, "--raw", "--ignore", "request.url"]) == 0
    assert cli.main(["diff", *traces]) == 0  # the behavior view: no URL in it
    (tmp_path / "pyproject.toml").write_text('[tool.harness]\ngolden_defaults = false\ngolden_view = "raw"\n')
    assert cli.main(["diff", *traces]) == 1  # the project's view is the raw one: its URLs differ
    assert cli.main(["diff", *traces, "--ignore", "request[url"]) == 2
    assert "field path 'request[url': cannot read it at character 8" in capsys.readouterr().err


def test_a_rerun_matches_a_local_model_server_on_another_port_unless_told_the_port_counts(
    server: ChatServer, trace: Path
) -> None:
    streamed(server.url, trace)
    server.stop()
    elsewhere = f"http://127.0.0.1:{closed_port()}"  # the next test server binds another free port
    planner, tools, _ = stream_agent.make_agent(elsewhere)
    assert rerun(trace, planner=planner, tools=tools).equal
    strict = hhttp.transport(any_local_port=False)
    assert strict.recording.match.any_local_port is False

    def strict_planner(goal: Any, progress: list[Any]) -> Step | None:
        with httpx.Client(transport=strict) as client:
            if progress:
                return None
            body = {
                "model": "test-model",
                "messages": [{"role": "user", "content": "what is a journal"}],
                "stream": True,
            }
            client.post(elsewhere + "/v1/chat/completions", json=body)
        return Step(name="ask 0", tool="note", args={"question": "q", "answer": "a"})

    with pytest.raises(ReplayDrift) as drift:
        rerun(trace, planner=strict_planner, tools=tools)
    assert "url.port" in str(drift.value)
    remote = hhttp.Matcher()({"url": "https://api.example.com:8443/v1"})["url"]
    assert remote["port"] == 8443 and hhttp.Matcher()({"url": "http://localhost:5/v1"})["url"]["port"] == "any"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
