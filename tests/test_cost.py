"""`harness cost`: each run's model calls and tokens by model, live apart from served, across crashes and resumes.

The billed run (tests/billed_agent.py) calls a real HTTP model server that counts the requests it answered,
what a provider bills; it is SIGKILLed twice and resumed twice. Its ledger must count each billed call once;
a rerun and a fork of it count what they took from the recording as served. Each door's usage is read from the
records the door writes (the framework doors' from tests/test_frameworks.py's runs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import billed_agent
import pytest
from billed_agent import ANSWERED_BY, BilledServer, crash_twice, one_run

import harness
from harness.cli import main
from harness.review.calls import Usage, model_call
from harness.review.cost import ledger


@pytest.fixture
def server() -> Iterator[BilledServer]:
    yield from billed_agent.serving()


@pytest.fixture
def crashed(tmp_path: Path, server: BilledServer) -> Path:
    trace = tmp_path / "runs" / "run.jsonl"
    trace.parent.mkdir()
    crash_twice(trace, server)
    return trace


def models(run: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(m["model"], m["how"]): m for m in run["models"]}


def test_a_run_that_crashed_twice_counts_each_billed_call_once(
    crashed: Path, server: BilledServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert server.billed == 2  # what the provider billed: two calls, whatever the crashes
    assert main(["cost", str(crashed), "--json"]) == 0
    book = json.loads(capsys.readouterr().out)
    (run,) = book["runs"]
    assert models(run) == {
        (ANSWERED_BY, "live"): {"model": ANSWERED_BY, "how": "live", "calls": 2, "input": 101 + 102, "cached": 80,
                                "output": 14, "unmetered": 0, "usd": None},
    }  # fmt: skip
    assert book["total"]["models"] == run["models"]


def test_a_rerun_and_a_fork_count_what_they_served(
    crashed: Path, server: BilledServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("BILLED_MODEL", server.url)
    second = [c for c in harness.replay(crashed).crossings if c.kind == "http"][1]
    harness.rerun(crashed, workflow=billed_agent.shop, out=crashed.parent / "rerun.jsonl")
    harness.fork(crashed, at=second.seq, set={"body.choices[0].message.content": "ship nothing"},
                 workflow=billed_agent.shop, out=crashed.parent / "fork.jsonl")  # fmt: skip
    assert server.billed == 2  # neither called the model again
    price_list = tmp_path / "prices.toml"
    price_list.write_text(f'[models."{ANSWERED_BY}"]\ninput = 0.15\noutput = 0.60\ncached_input = 0.075\n')
    assert main(["cost", str(crashed.parent), "--json", "--prices", str(price_list)]) == 0
    book = json.loads(capsys.readouterr().out)
    by_trace = {Path(r["trace"]).name: r for r in book["runs"]}
    assert set(by_trace) == {"run.jsonl", "rerun.jsonl", "fork.jsonl"}
    # the recording: 203 input tokens, 80 of them cached, 14 output
    spent = (123 * 0.15 + 80 * 0.075 + 14 * 0.60) / 1e6
    assert by_trace["run.jsonl"]["usd"] == {"live": pytest.approx(spent), "served": 0.0}
    rerun = models(by_trace["rerun.jsonl"])
    assert set(rerun) == {(ANSWERED_BY, "served")} and rerun[(ANSWERED_BY, "served")]["calls"] == 2
    assert by_trace["rerun.jsonl"]["usd"] == {"live": 0.0, "served": pytest.approx(spent)}
    fork = models(by_trace["fork.jsonl"])
    assert [(k, v["calls"]) for k, v in sorted(fork.items())] == [((ANSWERED_BY, "served"), 2)]  # one served, one set
    total = models(book["total"])
    assert total[(ANSWERED_BY, "live")]["calls"] == 2 and total[(ANSWERED_BY, "served")]["calls"] == 4
    assert book["total"]["usd"]["live"] == pytest.approx(spent) and book["unpriced"] == []

    assert main(["cost", str(crashed.parent), "--prices", str(price_list)]) == 0
    text = capsys.readouterr().out
    assert "MODEL" in text and "total" in text and f"spent {spent:.6f} USD live" in text


def test_a_model_without_a_price_has_no_figure(crashed: Path, tmp_path: Path) -> None:
    price_list = tmp_path / "prices.toml"
    price_list.write_text('[models."gpt-4o"]\ninput = 2.5\noutput = 10\n')
    book = ledger([crashed], prices=price_list)
    assert book.unpriced == [ANSWERED_BY]
    assert book.to_json()["runs"][0]["usd"]["live"] is None
    assert f"no price for {ANSWERED_BY}" in book.text()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[models", "not valid TOML"),
        ("[other]\nx = 1\n", 'no [models."<name>"] table'),
        ('[models."m"]\ninput = "cheap"\noutput = 1\n', "models.'m'.input must be a number"),
        ('[models."m"]\ninput = 1\n', "models.'m'.output must be a number"),
        ('[models."m"]\ninput = 1\noutput = 1\ncache = 1\n', "models.'m' has cache"),
        ('[models."m"]\ninput = -1\noutput = 1\n', "0 or more"),
    ],
)
def test_a_bad_price_list_is_a_clear_error(
    tmp_path: Path, text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    price_list = tmp_path / "prices.toml"
    price_list.write_text(text)
    trace = one_run(tmp_path / "r.jsonl")
    assert main(["cost", str(trace), "--prices", str(price_list)]) == 2
    err = capsys.readouterr().err
    assert str(price_list) in err and problem in err and "Traceback" not in err


def test_a_missing_trace_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err


def crossing(boundary: str, request: Any, response: Any) -> dict[str, Any]:
    return {"seq": 3, "kind": "crossing", "boundary": boundary, "request": request, "hash": "0", "response": response}


CHAT = {"method": "POST", "url": "https://api.openai.com/v1/chat/completions", "body": {"model": "gpt-4o-mini"}}


@pytest.mark.parametrize(
    ("rec", "provider", "model", "usage"),
    [
        (crossing("http", CHAT, {"status": 200, "body": {"model": "gpt-4o-mini-1", "usage": {
            "prompt_tokens": 50, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 20}}}}),
         "openai", "gpt-4o-mini-1", Usage(50, 9, 20)),
        (crossing("http", {**CHAT, "url": "https://api.openai.com/v1/responses"}, {"status": 200, "body": {
            "model": "o4",
            "usage": {"input_tokens": 30, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 10}}}}),
         "openai", "o4", Usage(30, 4, 10)),
        (crossing("http", {"method": "POST", "url": "https://api.anthropic.com/v1/messages",
                           "body": {"model": "claude"}},
                  {"status": 200, "body": {"type": "message", "model": "claude-x", "usage": {
                      "input_tokens": 5, "output_tokens": 3, "cache_read_input_tokens": 100,
                      "cache_creation_input_tokens": 7}}}),
         "anthropic", "claude-x", Usage(112, 3, 100)),
        (crossing("pydantic_ai.model", {"op": "a__model.request", "new": []}, {
            "kind": "response", "parts": [], "model_name": "gpt-4o", "provider_name": "openai",
            "usage": {"input_tokens": 12, "output_tokens": 2, "cache_read_tokens": 4}}),
         "openai", "gpt-4o", Usage(12, 2, 4)),
        (crossing("openai_agents.model", {"model": "gpt-4.1"}, {"output": [], "usage": {
            "requests": 1, "input_tokens": 8, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 3}}}),
         "openai", "gpt-4.1", Usage(8, 1, 3)),
        (crossing("openai_agents.stream", {"model": "gpt-4.1"}, [{"type": "response.created"}, {
            "type": "response.completed", "response": {"model": "gpt-4.1-2", "output": [], "usage": {
                "input_tokens": 6, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 0}}}}]),
         "openai", "gpt-4.1-2", Usage(6, 2, 0)),
        (crossing("llm", {"model": "local", "provider": "ollama"}, "an answer"), "ollama", "local", None),
    ],
)  # fmt: skip
def test_each_doors_usage_is_read(rec: dict[str, Any], provider: str, model: str, usage: Usage | None) -> None:
    call = model_call(rec)
    assert call is not None
    assert (call.provider, call.model, call.usage) == (provider, model, usage)


def test_an_http_call_that_is_no_model_call_is_not_counted() -> None:
    page = {"method": "GET", "url": "https://example.com/v1/things"}
    assert model_call(crossing("http", page, {"status": 200})) is None
    assert model_call(crossing("now", None, 1.0)) is None
