"""Field paths (`request.url`, `*.id`, `choices[*].message`) and the rules goldens and diffs compare under.

The defaults must leave out what varies between two runs of the same agent
on one machine and nothing else: each is checked on what it marks and on a
look-alike it must leave alone.
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness
from harness.review.fieldpath import MARKER, FieldPathError, Glob, describe, mark, parse, put
from harness.review.normalize import Rules, normalize_record

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-99, 99) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["id", "a", "b", "x-1"]), inner, max_size=3)
    ),
    max_leaves=12,
)
PATHS = st.sampled_from(["id", "*.id", "**.id", "a.b", "a[0]", "a[*].id", "a[-1]", "x-*", '["x-1"]', "*", "**.a[*]"])


def test_the_grammar() -> None:
    assert parse("request.url") == (("key", "request"), ("key", "url"))
    assert parse("*.id") == (("any", None), ("key", "id"))
    assert parse("**.created")[0] == ("deep", None)
    assert parse("body.messages[0].content")[2] == ("index", 0) and parse("a[-1]")[1] == ("index", -1)
    assert parse("choices[*].message")[1] == ("items", None)
    assert parse('headers["x.y"]')[1] == ("key", "x.y") and parse("h['a[b]']")[1] == ("key", "a[b]")
    assert parse('h["say \\"hi\\""]')[1] == ("key", 'say "hi"')
    glob = parse("headers.x-ratelimit-*")[1]
    assert glob[0] == "glob" and glob[1].fullmatch("x-ratelimit-remaining") and not glob[1].fullmatch("x-request-id")
    for bad, where in [("", "non-empty"), (".a", "character 1"), ("a.", "character 2"), ("a..b", "character 2"),
                       ("a[x]", "character 2"), ("a b[", "character 4"), ("**", "needs a step after it")]:  # fmt: skip
        with pytest.raises(FieldPathError, match=where) as e:
            parse(bad)
        assert isinstance(e.value, harness.HarnessError) and e.value.path == bad


# the characters a glob key may hold, `*` twice as likely; none is special to fnmatch but `*`
GLOB_CHARS = st.sampled_from("ab-*_*")


@settings(max_examples=500, deadline=None)
@given(st.text(GLOB_CHARS, min_size=1, max_size=12), st.text(st.sampled_from("ab-_"), max_size=14))
def test_a_glob_matches_exactly_what_fnmatch_matches(pattern: str, key: str) -> None:
    assert Glob.of(pattern).fullmatch(key) == fnmatch.fnmatchcase(key, pattern)


def test_a_glob_with_thirty_stars_matches_at_once(tmp_path: Path) -> None:
    # The old matcher (a regex of `.*` joined parts) backtracked: ten stars took
    # 18.6 s on one field, thirty would never end. It runs in a child, so a
    # regression fails at the timeout instead of hanging the suite; no timing
    # is asserted, the timeout is only a bound.
    program = (
        "from harness.review.normalize import Rules, normalize_record\n"
        "rules = Rules.of(['request.headers.' + '*a' * 30 + 'b'])\n"
        "record = {'seq': 1, 'type': 'http', 'request': {'headers': {'a' * 60 + 'c': 1, 'a' * 40 + 'b': 2}}}\n"
        "print(normalize_record(record, rules=rules)['request']['headers'])\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "{'" + "a" * 60 + "c': 1, '" + "a" * 40 + "b': '" + MARKER + "'}"


def test_mark_replaces_what_a_path_reaches_and_copies_only_along_it() -> None:
    value = {"id": 0, "a": {"id": 1, "b": [{"id": 2}, {"id": 3}]}, "c": {"d": 4}}
    assert mark(value, parse("*.id")) == {**value, "a": {**value["a"], "id": MARKER}}
    assert orjson.dumps(mark(value, parse("**.id"))).count(MARKER.encode()) == 4
    assert mark(value, parse("a.b[-1]"))["a"]["b"] == [{"id": 2}, MARKER]  # an item keeps its place
    assert mark(value, parse("nowhere.at.all")) is value  # a path that reaches nothing changes nothing
    out = mark(value, parse("a.b[0].id"))
    assert out["c"] is value["c"] and value["a"]["b"][0] == {"id": 2}  # shared where unchanged; the input untouched


@settings(max_examples=300, deadline=None)
@given(JSON, PATHS)
def test_marking_twice_is_marking_once(value: Any, path: str) -> None:
    once = mark(value, parse(path))
    assert mark(once, parse(path)) == once


def test_put_sets_one_field_that_must_be_there() -> None:
    value = {"status": 200, "body": {"choices": [{"message": {"content": "yes"}}]}}
    assert put(value, "body.choices[0].message.content", "no")["body"]["choices"][0]["message"] == {"content": "no"}
    assert value["body"]["choices"][0]["message"]["content"] == "yes"
    assert put(value, "body.choices[-1].message", None)["body"]["choices"][0]["message"] is None
    with pytest.raises(FieldPathError) as e:
        put(value, "body.choice[0]", 1, what="the response")
    assert e.value.problem == "body in the response has no key 'choice': it is an object with keys choices"
    with pytest.raises(FieldPathError, match=r"body\.choices in the value has no item \[3\]: it is a list of 1 item"):
        put(value, "body.choices[3]", 1)
    with pytest.raises(FieldPathError, match=r"status in the value has no key 'x': it is 200"):
        put(value, "status.x", 1)
    with pytest.raises(FieldPathError, match="names one field"):
        put(value, "body.*", 1)
    assert describe({f"k{i}": i for i in range(10)}).endswith("k7, ...") and describe("abc") == "a str ('abc')"


def http(request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    return {"seq": 3, "ts": 1.5, "kind": "crossing", "boundary": "http", "request": request, "response": response}


def test_the_defaults_mark_what_varies_between_runs_and_leave_its_look_alikes() -> None:
    record = http(
        {"method": "POST", "url": "http://127.0.0.1:41234/v1/chat/completions",
         "body": {"callback": "http://localhost:9000/done", "elsewhere": "https://api.example.com:8443/v1"}},
        {"status": 200, "headers": {"x-request-id": "req-7", "x-ratelimit-remaining-tokens": "99", "etag": "W/1"},
         "body": {"object": "chat.completion", "id": "chatcmpl-9", "created": 1717000000, "system_fingerprint": "fp",
                  "model": "m", "choices": [{"index": 0, "message": {"content": "hi"}}], "usage": {"total_tokens": 9}}},
    )  # fmt: skip
    view = normalize_record(record)
    assert view["request"]["url"] == "http://127.0.0.1:<port>/v1/chat/completions"
    assert view["request"]["body"] == {
        "callback": "http://localhost:<port>/done",
        "elsewhere": "https://api.example.com:8443/v1",
    }
    assert view["response"]["headers"] == {
        "etag": "W/1",
        "x-ratelimit-remaining-tokens": MARKER,
        "x-request-id": MARKER,
    }
    body = view["response"]["body"]
    assert (body["id"], body["created"], body["system_fingerprint"]) == (MARKER,) * 3
    assert body["usage"] == {"total_tokens": 9} and body["model"] == "m"  # usage is what the call cost: kept
    assert normalize_record(view) == view  # normalizing a normalized record changes nothing

    exact = normalize_record(record, rules=Rules(defaults=False))
    assert (
        exact["request"]["url"].endswith(":41234/v1/chat/completions")
        and exact["response"]["body"]["id"] == "chatcmpl-9"
    )

    # look-alikes: an order's id in an API that is no model, a port of another host, a tool's own `created`
    order = http({"method": "POST", "url": "https://shop.example:8443/orders"},
                 {"status": 201, "headers": {}, "body": {"object": "order", "id": 42, "created": 5}})  # fmt: skip
    assert normalize_record(order)["response"]["body"] == {"created": 5, "id": 42, "object": "order"}
    assert normalize_record(order)["request"]["url"] == "https://shop.example:8443/orders"
    tool = {"kind": "transition", "from": "ACT", "to": "VERIFY", "step": 0, "result": {"id": 7, "created": 8}}
    assert normalize_record(tool)["result"] == {"created": 8, "id": 7}
    text = {"kind": "transition", "from": "PLAN", "to": "ACT", "step": 0, "args": {"note": "port 127.0.0.1:80 is up"}}
    assert normalize_record(text)["args"]["note"] == "port 127.0.0.1:80 is up"  # not a URL: kept


def test_ignored_paths_apply_to_every_record_after_the_defaults() -> None:
    record = http(
        {"method": "GET", "url": "http://127.0.0.1:5/x"}, {"status": 200, "headers": {}, "body": {"usage": 3}}
    )
    rules = Rules.of(["response.body.usage", "*.method"])
    view = normalize_record(record, rules=rules)
    assert view["response"]["body"] == {"usage": MARKER} and view["request"]["method"] == MARKER
    assert view["request"]["url"] == "http://127.0.0.1:<port>/x"
    assert Rules.of("a.b").ignore == ("a.b",) and Rules.of(["a"]).plus("b", False) == Rules(("a", "b"), False)
    with pytest.raises(FieldPathError):
        Rules.of(["ok", "not..ok"])
    with pytest.raises(harness.HarnessError, match="defaults must be True or False"):
        Rules((), "yes")  # type: ignore[arg-type]
    assert harness.normalize([record], ignore="response.body")[0]["response"]["body"] == MARKER


def test_a_loopback_port_outside_an_http_exchange_counts(tmp_path: Path) -> None:
    def planner(port: int) -> Any:
        return lambda goal, done: (
            None if done else harness.Step("connect", "work", {"url": f"redis://localhost:{port}/0"})
        )

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    harness.Executor(planner=planner(6379), tools={"work": lambda url: {"url": url}}, trace=a).run("g")
    harness.Executor(planner=planner(6380), tools={"work": lambda url: {"url": url}}, trace=b).run("g")
    d = harness.diff(a, b)  # the tool was connected to another server: a real difference in what the agent did
    assert not d.equal and any(c.field == "args.url" for m in d.moved for c in m.changes)
    tool = {"kind": "transition", "from": "PLAN", "to": "ACT", "step": 0, "args": {"url": "http://127.0.0.1:8000/x"}}
    assert normalize_record(tool)["args"]["url"] == "http://127.0.0.1:8000/x"  # only an http crossing's is marked
