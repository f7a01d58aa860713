"""Each kind of secret redaction covers, in every place a value is recorded, and the string rules as properties.

The kinds: a URL's password (`http://admin:pw@host/`), a DSN (`postgres://u:pw@host/db`), a PEM private key,
a JWT, the values of `extra_query` and `extra_headers`, and the header names a project lists in
`[tool.harness] secret_headers`. The places: a tool call's args and its result (a workflow's), a request
recorded by harness.http (to a real server on 127.0.0.1), and a Pydantic AI model request (its settings).
For each, no file of the runs folder holds the secret, and the live code got the real value.
"""

from __future__ import annotations

import base64
import json
import secrets
import string
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from chat_server import ChatServer
from hypothesis import given, settings
from hypothesis import strategies as st

import harness
from harness import MARKER, Recorder
from harness import http as hhttp
from harness.trace.redact import DEFAULT, Redaction, project_rules

SECRET = "zq" + secrets.token_hex(12)  # in no other text of a test: a search for it finds only a leak
PEM_BODY = base64.b64encode(SECRET.encode() * 3).decode()
JWT = (
    base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    + "."
    + base64.urlsafe_b64encode(f'{{"sub":"{SECRET}"}}'.encode()).decode().rstrip("=")
    + "."
    + SECRET
)
KINDS: dict[str, Any] = {
    "userinfo": f"see http://admin:{SECRET}@intranet.local:8080/status",
    "dsn": f"postgres://app:{SECRET}@db.internal/prod",
    "pem": f"-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}\n-----END EC PRIVATE KEY-----\n",
    "jwt": f"token {JWT} here",
    "extra_query": {"extra_query": {"code": SECRET, "api-version": "2024-01"}},
    "extra_headers": {"extra_headers": {"X-Gateway-Route": SECRET}},
    "secret_headers": {"headers": {"X-Internal-Auth": SECRET, "accept": "json"}},
}
WHERE = ["tool args", "tool result", "http request", "model request"]


def leaks(folder: Path) -> list[str]:
    """The files under folder whose bytes hold SECRET (or the base64 the PEM body and the JWT carry)."""
    forms = [SECRET.encode(), PEM_BODY.encode(), base64.urlsafe_b64encode(SECRET.encode()).rstrip(b"=")]
    return [str(p) for p in folder.rglob("*") if p.is_file() and any(f in p.read_bytes() for f in forms)]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose pyproject.toml lists X-Internal-Auth as a secret header; the runs folder in it."""
    (tmp_path / "pyproject.toml").write_text('[tool.harness]\nsecret_headers = ["X-Internal-Auth"]\n')
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    return tmp_path / "runs"


def echo(value: Any) -> Any:
    return value


@harness.workflow
def passes(value: Any) -> Any:
    return {"got": harness.call(echo, value=value)}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_is_redacted_in_each_place(kind: str, where: str, project: Path) -> None:
    value = KINDS[kind]
    trace = project / "run.jsonl"
    if where == "tool args":  # the args of a call (the goal too: it is the workflow's args)
        out = passes.run(value, trace=trace)
        assert out.state == "DONE" and out.result == {"got": value}  # the live code got the real value
        (intent,) = [r for r in map(json.loads, trace.read_text().splitlines()) if r.get("to") == "ACT"]
        assert MARKER in json.dumps(intent["args"])
    elif where == "tool result":

        @harness.workflow
        def returns() -> Any:
            return {"got": harness.call(lambda: value)}

        out = returns.run(trace=trace)
        assert out.state == "DONE" and out.result == {"got": value}
    elif where == "http request":
        body = value if isinstance(value, dict) else {"note": value}
        headers = {"X-Internal-Auth": SECRET} if kind == "secret_headers" else {}
        server = ChatServer()
        try:
            with Recorder(trace, entrypoint="t"), httpx.Client(transport=hhttp.transport()) as client:
                r = client.post(server.url + "/echo", json=body, headers=headers)
        finally:
            server.stop()
        assert r.json()["body"] == body  # the server got the real request
        assert server.seen[-1].get("x-internal-auth", SECRET) == SECRET
    else:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        from harness.pydantic_ai import HarnessDurability

        got: list[Any] = []

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            got.append(info.model_settings)
            return ModelResponse(parts=[TextPart("ok")])

        agent = Agent(FunctionModel(model), capabilities=[HarnessDurability()])
        extra = value if isinstance(value, dict) else {"note": value}

        @harness.workflow
        async def asks() -> str:
            return (await agent.run("hi", model_settings={"extra_body": extra})).output

        assert asks.run(trace=trace).state == "DONE"
        assert got[0]["extra_body"] == extra  # the model got the real settings
        (request,) = [c.request for c in harness.replay(trace).crossings if c.kind == "pydantic_ai.model"]
        assert MARKER in json.dumps(request["settings"])
    assert leaks(project) == []


def test_without_the_project_setting_its_header_is_written_as_it_is(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert Redaction.of(None)(KINDS["secret_headers"]) == KINDS["secret_headers"]  # a name no list knows
    (tmp_path / "pyproject.toml").write_text('[tool.harness]\nsecret_headers = ["X-Internal-Auth"]\n')
    assert project_rules() == ("X-Internal-Auth",)
    assert Redaction.of(None)(KINDS["secret_headers"])["headers"] == {"X-Internal-Auth": MARKER, "accept": "json"}
    assert Redaction.of(["ssn"]).rules == ("ssn", "X-Internal-Auth")  # added to a run's own rules too


def test_a_bad_secret_headers_setting_names_the_file(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.harness]\nsecret_headers = "X-Internal-Auth"\n')
    with pytest.raises(harness.HarnessError, match=r"pyproject.toml: \[tool.harness\] secret_headers must be a list"):
        Redaction.of(None)


def test_a_rerun_reads_the_project_headers_back_from_the_header(project: Path) -> None:
    out = passes.run(KINDS["secret_headers"], trace=project / "run.jsonl")
    assert out.state == "DONE"
    assert harness.replay(project / "run.jsonl").header["redact"]["rules"] == ["X-Internal-Auth"]
    assert harness.rerun(project / "run.jsonl", workflow=passes, out=project / "again.jsonl").equal
    assert leaks(project) == []


# --- the string rules, as properties -------------------------------------------------------------------------------

_UNSPACED = st.characters(blacklist_characters="/?#@:\"'<>\\[]", blacklist_categories=["Cs", "Z", "Cc"])
_PASSWORD = st.text(alphabet=_UNSPACED, min_size=1, max_size=20)
_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-", min_size=2, max_size=24)
_FILLER = st.text(max_size=40)


def _check(text: str, secret: str) -> None:
    """text is redacted, the secret is gone, redacting again changes nothing, and the fast search that lets
    most values through unwalked (clean_json) says there is something to redact."""
    out = DEFAULT(text)
    assert secret not in out and MARKER in out
    assert DEFAULT(out) == out
    assert DEFAULT.clean_json(orjson.dumps({"v": text})) is False
    assert DEFAULT.clean_json(orjson.dumps({"v": text, "pad": "x" * 300})) is False  # the long-text search too


@settings(max_examples=200, deadline=None)
@given(_FILLER, st.sampled_from(["http", "https", "postgres", "postgresql+psycopg", "redis", "amqp", "mongodb+srv"]),
       _WORD, _PASSWORD, _FILLER)  # fmt: skip
def test_a_url_password_is_redacted_whatever_it_holds(before: str, scheme: str, user: str, pw: str, after: str) -> None:
    secret = "Q" + pw + "Z"  # (not a substring of the scheme, the user or the host)
    text = f"{before} {scheme}://{user}:{secret}@host.example:5432/db?x=1 {after}"
    _check(text, secret)
    assert f"{scheme}://{user}:{MARKER}@host.example" in DEFAULT(text)  # the user and the host stay


@settings(max_examples=200, deadline=None)
@given(_FILLER, st.lists(_WORD, min_size=3, max_size=3), _FILLER)
def test_a_jwt_is_redacted_whole(before: str, parts: list[str], after: str) -> None:
    token = f"eyJ{parts[0]}.eyJ{parts[1]}.Z{parts[2]}"
    _check(f"{before} {token} {after}", token)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", "DSA "]),
       st.text(alphabet=string.ascii_letters + string.digits + "+/=\n", min_size=8, max_size=200), _FILLER)  # fmt: skip
def test_a_pem_private_key_loses_its_body(kind: str, body: str, before: str) -> None:
    secret = "QZ" + body.strip() + "QZ"
    text = f"{before}-----BEGIN {kind}PRIVATE KEY-----\n{secret}\n-----END {kind}PRIVATE KEY-----\n"
    _check(text, secret)
    assert f"-----BEGIN {kind}PRIVATE KEY-----" in DEFAULT(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_the_fast_search_never_lets_through_what_the_walk_would_redact(text: str) -> None:
    if DEFAULT._walk(text) != text:
        assert DEFAULT.clean_json(orjson.dumps([text])) is False


def test_a_public_key_a_certificate_and_plain_urls_stay() -> None:
    kept = [
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
        "https://example.com/a/b?c=d",
        "mail bob@example.com about http://example.com",
        "ssh://git@github.com/org/repo.git",  # a user and no password
        "eyJust a word",
    ]
    for text in kept:
        assert DEFAULT(text) == text


def test_extra_query_and_extra_headers_in_any_spelling() -> None:
    for key in ("extra_headers", "extraHeaders", "extra-query", "extra_query"):
        assert DEFAULT({"settings": {key: {"a": "1", "b": None}}}) == {"settings": {key: {"a": MARKER, "b": None}}}
        assert DEFAULT.clean_json(orjson.dumps({key: {"a": "1"}})) is False
    assert DEFAULT({"extra_headers": "not an object"}) == {"extra_headers": "not an object"}
    assert Redaction(defaults=False)({"extra_query": {"a": "1"}}) == {"extra_query": {"a": "1"}}  # defaults only
