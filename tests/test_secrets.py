"""Secrets a served value holds: redacted in the trace, kept encrypted beside it, served for real on resume.

A workflow logs in (the result holds an access token) and fetches with the token; it is SIGKILLed inside
fetch, in a real process, and resumed in another. fetch gets the real token, and the token is nowhere in
clear in the runs folder. The same for an Executor whose planner copies the token out of its progress into
fetch's args. Without the key, with another key, without the sidecar or with a damaged one, or
without the cipher's extra, the resume refuses before any live call and writes nothing.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from children import ZYGOTE, kill_at

import harness
from harness import MissingExtra, SecretUnavailable
from harness.trace.vault import ENV, key_file, sidecar

TESTS = Path(__file__).resolve().parent
CHILD = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
if "--no-extra" in sys.argv:
    sys.modules["cryptography"] = None  # as if the extra were not installed
import secret_agent
try:
    if "--pair" in sys.argv:  # two gathered tasks, each its own token
        out = secret_agent.pair.run(trace=sys.argv[1], resume="auto")
        result = out.result
    elif "--executor" in sys.argv:  # the Executor's run: what its last step (fetch) returned
        out = secret_agent.executor(sys.argv[1]).run("alice")
        result = out.checkpoints[-1].result if out.checkpoints else None
    else:
        out = secret_agent.session.run("alice", trace=sys.argv[1], resume="auto")
        result = out.result
except Exception as e:
    print(json.dumps({{"error": type(e).__name__, "message": str(e)}}))
else:
    print(json.dumps({{"state": out.state, "result": result}}))
"""


def env(tmp_path: Path, token: str, **more: str) -> dict[str, str]:
    return {**os.environ, "SECRET_TOKEN": token, "WF_LEDGER": str(tmp_path / "ledger"), **more}


def run_child(trace: Path, environ: dict[str, str], *flags: str) -> dict[str, Any]:
    done = ZYGOTE.run(
        [sys.executable, "-c", CHILD, str(trace), *flags],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def crash_in_fetch(tmp_path: Path, token: str, *flags: str, at: str = "in-fetch") -> Path:
    """Run the workflow in a child process, SIGKILL it inside fetch; the trace."""
    runs, mark = tmp_path / "runs", tmp_path / "mark"
    runs.mkdir(exist_ok=True)
    (tmp_path / "ledger").mkdir(exist_ok=True)
    trace = runs / "run.jsonl"
    child = ZYGOTE.Popen(
        [sys.executable, "-c", CHILD, str(trace), *flags],
        env=env(tmp_path, token, WF_KILL=at, WF_MARK=str(mark)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    kill_at(mark, child, at)
    assert child.returncode == -9
    return trace


def ledger(tmp_path: Path, kind: str) -> list[str]:
    path = tmp_path / "ledger" / kind
    return path.read_text().splitlines() if path.exists() else []


def in_clear(folder: Path, token: str) -> list[str]:
    """Every file under folder whose bytes hold token, as it is or in base64."""
    forms = [token.encode(), base64.b64encode(token.encode()), base64.urlsafe_b64encode(token.encode())]
    return [str(p) for p in folder.rglob("*") if p.is_file() and any(f in p.read_bytes() for f in forms)]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_token_a_login_returned_reaches_fetch_after_a_sigkill_and_is_never_in_clear(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    assert ledger(tmp_path, "fetch") == [token]
    held = [json.loads(x) for x in trace.read_text().splitlines()]
    login = next(r for r in held if r.get("to") == "VERIFY" and r["result"].get("user") == "alice")
    assert login["result"]["access_token"] == harness.MARKER  # the trace keeps the marker
    assert Path(sidecar(str(trace))).exists()

    out = run_child(trace, env(tmp_path, token))
    assert out == {"state": "DONE", "result": {"items": 3, "ok": True}}
    assert ledger(tmp_path, "login") == ["alice"]  # served, not called again
    assert ledger(tmp_path, "fetch") == [token, token]  # called again with the real token, never the marker
    assert in_clear(tmp_path / "runs", token) == []
    assert in_clear(Path(os.environ["XDG_CONFIG_HOME"]), token) == []

    # a rerun serves it too (zero live calls), and keeps it in its own sidecar, never in clear
    import secret_agent

    again = harness.rerun(trace, workflow=secret_agent.session, out=tmp_path / "runs" / "rerun.jsonl")
    assert again.equal
    assert Path(sidecar(str(tmp_path / "runs" / "rerun.jsonl"))).exists()
    assert in_clear(tmp_path / "runs", token) == []
    assert ledger(tmp_path, "fetch") == [token, token]


def test_the_key_file_is_made_on_first_use_with_mode_0600(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    config = tmp_path / "config"
    environ = env(tmp_path, token, XDG_CONFIG_HOME=str(config))
    (tmp_path / "ledger").mkdir()
    (tmp_path / "runs").mkdir()
    out = run_child(tmp_path / "runs" / "run.jsonl", environ)
    assert out["state"] == "DONE"
    made = config / "harness" / "secret.key"
    assert made.stat().st_mode & 0o777 == 0o600
    assert len(base64.urlsafe_b64decode(made.read_text().strip())) == 32


def refused(tmp_path: Path, trace: Path, environ: dict[str, str], *flags: str) -> dict[str, Any]:
    """Resume in a child that is expected to refuse: nothing written anywhere, fetch not called again."""
    before, fetched = snapshot(tmp_path / "runs"), ledger(tmp_path, "fetch")
    out = run_child(trace, environ, *flags)
    assert "error" in out, out
    assert snapshot(tmp_path / "runs") == before
    assert ledger(tmp_path, "fetch") == fetched and ledger(tmp_path, "login") == ["alice"]
    return out


def test_without_the_key_a_resume_refuses_before_any_live_call(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    out = refused(tmp_path, trace, env(tmp_path, token, XDG_CONFIG_HOME=str(tmp_path / "elsewhere")))
    assert out["error"] == "SecretUnavailable"
    assert ENV in out["message"] and "nothing was written" in out["message"]
    assert str(tmp_path / "elsewhere" / "harness" / "secret.key") in out["message"]
    assert not (tmp_path / "elsewhere").exists()  # a resume never makes a key: it could not read a thing with it


def test_with_another_key_a_resume_refuses_and_names_both_keys(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    other = base64.urlsafe_b64encode(os.urandom(32)).decode()
    out = refused(tmp_path, trace, env(tmp_path, token, **{ENV: other}))
    assert out["error"] == "SecretUnavailable" and "encrypted with key" in out["message"]


def test_with_the_key_in_the_environment_a_resume_serves_the_secret(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    key = Path(key_file()).read_text().strip()  # the same key, given as the variable in a config-less place
    environ = env(tmp_path, token, XDG_CONFIG_HOME=str(tmp_path / "elsewhere"), **{ENV: key})
    assert run_child(trace, environ) == {"state": "DONE", "result": {"items": 3, "ok": True}}
    assert ledger(tmp_path, "fetch") == [token, token]


def test_a_bad_key_in_the_environment_is_refused_naming_the_variable(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    out = refused(tmp_path, trace, env(tmp_path, token, **{ENV: "not a key"}))
    assert out["error"] == "HarnessError" and f"${ENV}" in out["message"] and "urandom(32)" in out["message"]


@pytest.mark.parametrize("damage", ["missing", "altered", "emptied"])
def test_a_missing_or_damaged_sidecar_is_refused_before_any_live_call(tmp_path: Path, damage: str) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    kept = Path(sidecar(str(trace)))
    if damage == "missing":
        kept.unlink()
    elif damage == "altered":
        entry = json.loads(kept.read_text().splitlines()[0])
        box = bytearray(base64.b64decode(entry["box"]))
        box[-1] ^= 1
        kept.write_text(json.dumps({**entry, "box": base64.b64encode(bytes(box)).decode()}) + "\n")
    else:
        kept.write_text("")
    out = refused(tmp_path, trace, env(tmp_path, token))
    assert out["error"] == "SecretUnavailable"
    assert str(kept) in out["message"]
    said = {"missing": "does not exist", "altered": "fails authentication", "emptied": "holds no entry"}
    assert said[damage] in out["message"]


def test_without_the_extra_the_secret_is_redacted_only_and_a_resume_refuses_naming_the_pip_command(
    tmp_path: Path,
) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token, "--no-extra")
    assert not Path(sidecar(str(trace))).exists()
    assert in_clear(tmp_path / "runs", token) == []
    out = refused(tmp_path, trace, env(tmp_path, token), "--no-extra")
    assert out["error"] == "MissingExtra"
    assert "pip install 'harness-trace[secrets]'" in out["message"]
    # with the extra installed now, the refusal says the secret was never kept
    out = refused(tmp_path, trace, env(tmp_path, token))
    assert out["error"] == "SecretUnavailable" and "does not exist" in out["message"]


def test_the_errors_are_harness_errors() -> None:
    assert issubclass(SecretUnavailable, harness.HarnessError) and issubclass(MissingExtra, harness.HarnessError)


def test_a_bundle_never_carries_the_sidecar_and_an_imported_run_says_what_is_missing(tmp_path: Path) -> None:
    import zipfile

    from harness import bundle

    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    out = tmp_path / "runs.zip"
    bundle.export([trace], out)
    names = zipfile.ZipFile(out).namelist()
    assert not [n for n in names if n.endswith(".secrets")] and token.encode() not in out.read_bytes()
    assert [r.path for r in harness.list_runs(tmp_path / "runs")] == [str(trace)]  # the sidecar is no run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bundle.import_bundle(out, elsewhere)
    (moved,) = elsewhere.glob("*.jsonl")
    environ = env(tmp_path, token)
    before, fetched = snapshot(elsewhere), ledger(tmp_path, "fetch")
    said = run_child(moved, environ)
    assert said["error"] == "SecretUnavailable" and "does not exist" in said["message"]
    assert snapshot(elsewhere) == before and ledger(tmp_path, "fetch") == fetched
    (elsewhere / (moved.name + ".secrets")).write_bytes(Path(sidecar(str(trace))).read_bytes())  # copied by hand
    assert run_child(moved, environ) == {"state": "DONE", "result": {"items": 3, "ok": True}}


class Crash(BaseException):
    """Stands for the process dying inside a call (the trace stays open in ACT)."""


def blob_tools(token: str) -> tuple[Any, Any, list[str]]:
    """login, whose result (with token) is stored as a blob; use, which crashes the first time; what use got."""
    from harness.storage.blobs import THRESHOLD

    seen: list[str] = []

    def big_login() -> dict[str, Any]:
        return {"access_token": token, "pad": "x" * THRESHOLD}

    def use(access_token: str) -> str:
        seen.append(access_token)
        if len(seen) == 1:
            raise Crash
        return "ok"

    return big_login, use, seen


def test_a_secret_in_a_result_stored_as_a_blob_is_kept_and_served(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    big_login, use, seen = blob_tools(token)

    @harness.workflow
    def flow() -> str:
        return harness.call(use, access_token=harness.call(big_login)["access_token"])

    (tmp_path / "runs").mkdir()
    trace = tmp_path / "runs" / "run.jsonl"
    with pytest.raises(Crash):
        flow.run(trace=trace)
    assert list((tmp_path / "runs" / "blobs").iterdir())  # the result went to a blob, redacted
    assert flow.run(trace=trace, resume=True).result == "ok"
    assert seen == [token, token] and in_clear(tmp_path / "runs", token) == []


def test_a_journal_shared_by_agents_keeps_each_secret_under_the_seq_it_writes(tmp_path: Path) -> None:
    from harness.trace.journal import Journal
    from harness.trace.redact import DEFAULT
    from harness.trace.vault import Vault

    path, tokens, clock = tmp_path / "j.jsonl", ["tok-" + secrets.token_hex(8) for _ in range(3)], {"main": 0}

    def stamp(before: Any) -> tuple[str, dict[str, int]]:
        clock["main"] += 1
        return "main", dict(clock)

    with Journal.open(path, redact=DEFAULT) as journal:
        journal.t0 = 0.0
        journal.append("event", {"data": "before the agents"})
        journal.share(stamp, lambda vc: None)
        crossed = [{"boundary": "llm", "request": {}, "hash": "h", "response": {"token": t}} for t in tokens]
        journal.append_many([("crossing", crossed[0], ("response",)), ("crossing", crossed[1], ("response",))])
        journal.append("crossing", crossed[2], check=("response",))  # (seqs are taken under the lock, after)
    held = [json.loads(x) for x in path.read_text().splitlines()]
    vault = Vault(str(path), harness.MARKER)
    crossings = [r for r in held if r["kind"] == "crossing"]
    assert [r["response"] for r in crossings] == [{"token": harness.MARKER}] * 3
    assert [vault.reveal(r["seq"], "response", r["response"]) for r in crossings] == [{"token": t} for t in tokens]
    assert in_clear(tmp_path, tokens[0]) == []


def test_a_sidecar_line_torn_by_a_kill_is_left_out_and_the_next_entry_starts_its_own_line(tmp_path: Path) -> None:
    from harness.trace.vault import Keeper, Vault

    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    kept = Path(sidecar(str(trace)))
    with kept.open("ab") as f:
        f.write(b'{"seq":99,"field":"resu')  # a write cut off by a kill
    assert run_child(trace, env(tmp_path, token)) == {"state": "DONE", "result": {"items": 3, "ok": True}}
    keeper = Keeper(str(trace))
    keeper.keep(50, "result", {"token": token}, {"token": harness.MARKER})
    keeper.close()
    lines = kept.read_bytes().split(b"\n")
    assert lines[-2].startswith(b'{"seq":50,') and lines[-1] == b""  # on a line of its own
    vault = Vault(str(trace), harness.MARKER)
    assert vault.reveal(50, "result", {"token": harness.MARKER}) == {"token": token}
    with pytest.raises(SecretUnavailable, match=r"lines \[\d+\] of it are damaged"):
        vault.reveal(51, "result", {"token": harness.MARKER})  # (the torn line is not the last one any more)


def test_an_executors_planner_copies_a_token_from_its_progress_to_fetch_live_and_after_a_sigkill(
    tmp_path: Path,
) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token, "--executor")
    assert ledger(tmp_path, "fetch") == [token]  # live: the planner's progress held the token login returned
    held = [json.loads(x) for x in trace.read_text().splitlines()]
    login = next(r for r in held if r.get("to") == "VERIFY")
    assert login["result"]["access_token"] == harness.MARKER  # the trace keeps the marker, in the result
    fetch = next(r for r in held if r.get("to") == "ACT" and r.get("tool") == "fetch")
    assert fetch["args"]["access_token"] == harness.MARKER  # and in the args

    out = run_child(trace, env(tmp_path, token), "--executor")
    assert out == {"state": "DONE", "result": {"items": 3, "ok": True}}
    assert ledger(tmp_path, "login") == ["alice"]  # checkpointed, not called again
    assert ledger(tmp_path, "fetch") == [token, token]  # the planner, asked again, gave the real token back
    assert in_clear(tmp_path / "runs", token) == []
    # what is read, shown and compared keeps the marker
    assert harness.replay(trace).checkpoints[0].result["access_token"] == harness.MARKER
    from harness.review.show import show_trace

    shown: list[str] = []
    show_trace(trace, shown.append, view="json")
    assert token not in "".join(shown) and harness.MARKER in "".join(shown)


@pytest.mark.parametrize("missing", ["key", "sidecar", "extra"])
def test_an_executor_resume_that_cannot_reveal_its_progress_refuses_before_any_live_call(
    tmp_path: Path, missing: str
) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token, "--executor", *(["--no-extra"] if missing == "extra" else []))
    environ = env(tmp_path, token)
    if missing == "key":
        environ["XDG_CONFIG_HOME"] = str(tmp_path / "elsewhere")
    elif missing == "sidecar":
        Path(sidecar(str(trace))).unlink()
    out = refused(tmp_path, trace, environ, "--executor", *(["--no-extra"] if missing == "extra" else []))
    assert out["error"] == ("MissingExtra" if missing == "extra" else "SecretUnavailable"), out
    said = {"key": ENV, "sidecar": "does not exist", "extra": "pip install 'harness-trace[secrets]'"}
    assert said[missing] in out["message"]


def test_a_parallel_call_checkpointed_before_a_crash_hands_the_planner_its_token_on_resume(tmp_path: Path) -> None:
    tokens = {u: "tok-" + secrets.token_hex(16) for u in "ab"}
    logins: list[str] = []
    used: list[Any] = []
    crash = True

    def login(user: str) -> dict[str, Any]:
        logins.append(user)
        if len(logins) == 2 and crash:  # the second call, once the first has checkpointed (max_parallel=1)
            raise Crash
        return {"user": user, "access_token": tokens[user]}

    def use(access_token: list[str]) -> dict[str, Any]:
        used.append(access_token)
        return {"ok": True}

    def planner(goal: str, progress: list[harness.Checkpoint]) -> Any:
        if not progress:
            return [harness.Step(u, "login", {"user": u}) for u in "ab"]
        if len(progress) == 2:
            return harness.Step("use", "use", {"access_token": [ck.result["access_token"] for ck in progress]})
        return None

    trace = tmp_path / "runs" / "run.jsonl"
    trace.parent.mkdir()

    def executor(resume: bool) -> harness.Executor:
        tools = {"login": login, "use": use}
        return harness.Executor(planner=planner, tools=tools, trace=trace, max_parallel=1, resume=resume)

    with pytest.raises(Crash):
        executor(False).run("g")
    assert [json.loads(x)["kind"] for x in trace.read_text().splitlines()].count("checkpoint") == 1
    crash = False
    out = executor(True).run("g")
    assert out.state == "DONE" and len(logins) == 3  # the checkpointed call is not made again
    assert used == [[tokens["a"], tokens["b"]]]  # in planner order, each as login returned it
    assert all(in_clear(tmp_path / "runs", t) == [] for t in tokens.values())


def test_an_executors_result_stored_as_a_blob_reaches_the_planner_with_its_secret_on_resume(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    big_login, use, seen = blob_tools(token)

    def planner(goal: str, progress: list[harness.Checkpoint]) -> Any:
        if not progress:
            return harness.Step("login", "login", {})
        if len(progress) == 1:
            return harness.Step("use", "use", {"access_token": progress[0].result["access_token"]})
        return None

    (tmp_path / "runs").mkdir()
    trace = tmp_path / "runs" / "run.jsonl"
    tools = {"login": big_login, "use": use}
    with pytest.raises(Crash):
        harness.Executor(planner=planner, tools=tools, trace=trace).run("g")
    assert list((tmp_path / "runs" / "blobs").iterdir())  # the result went to a blob (redacted): not searched
    out = harness.Executor(planner=planner, tools=tools, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and seen == [token, token]
    assert in_clear(tmp_path / "runs", token) == []


def test_an_executor_resume_whose_results_hold_no_marker_needs_no_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, calls = "tok-" + secrets.token_hex(16), []

    def work(i: int) -> dict[str, int]:
        calls.append(i)
        if calls == [0, 1]:
            raise Crash
        return {"i": i}

    def planner(goal: Any, progress: list[harness.Checkpoint]) -> Any:
        n = len(progress)
        return None if n == 2 else harness.Step(f"s{n}", "work", {"i": n})

    trace, goal = tmp_path / "run.jsonl", {"access_token": token}  # the marker in the goal, none in a result
    with pytest.raises(Crash):
        harness.Executor(planner=planner, tools={"work": work}, trace=trace).run(goal)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.delenv(ENV, raising=False)
    out = harness.Executor(planner=planner, tools={"work": work}, trace=trace, resume=True).run(goal)
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == [{"i": 0}, {"i": 1}]
    assert not Path(sidecar(str(trace))).exists() and not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("at", ["in-fetch-alice", "in-fetch-bob"])
def test_two_gathered_tasks_whose_results_differ_only_by_their_secret_each_get_their_own_after_a_sigkill(
    tmp_path: Path, at: str
) -> None:
    # the seam of task names and kept secrets: the two login results (and the two fetch calls) are equal once
    # redacted, so only the task names tell them apart, and only the sidecar holds what each must be given
    token = "tok-" + secrets.token_hex(16)
    alice, bob = f"{token}-alice", f"{token}-bob"
    trace = crash_in_fetch(tmp_path, token, "--pair", at=at)
    killed = [alice] if at == "in-fetch-alice" else [alice, bob]
    assert ledger(tmp_path, "fetch") == killed
    held = [json.loads(x) for x in trace.read_text().splitlines()]
    assert {r["task"] for r in held if r.get("name") == "afetch"} <= {"1", "2"}

    out = run_child(trace, env(tmp_path, token), "--pair")
    assert out == {"state": "DONE", "result": [{"ok": True}, {"ok": True}]}
    assert ledger(tmp_path, "login") == ["alice", "bob"]  # each login served, never made again
    fetched = ledger(tmp_path, "fetch")
    assert fetched[: len(killed)] == killed and sorted(fetched[len(killed) :]) == sorted(
        [alice, bob][len(killed) - 1 :]
    )  # the call in flight made again with its own task's token; alice's done one served (when it was done)
    assert in_clear(tmp_path / "runs", token) == []

    # a rerun of the resumed run: zero live calls, each token served where it was, kept in the rerun's own sidecar
    import secret_agent

    again = harness.rerun(trace, workflow=secret_agent.pair, out=tmp_path / "runs" / "rerun.jsonl")
    assert again.equal
    assert ledger(tmp_path, "fetch") == fetched
    assert Path(sidecar(str(tmp_path / "runs" / "rerun.jsonl"))).exists()
    assert in_clear(tmp_path / "runs", token) == []


def test_check_serves_a_runs_kept_secrets_and_without_the_key_says_so_writing_no_key_and_no_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # check re-executes into a scratch folder through the journal, which keeps secrets: the kept ones are read
    # with the key the run was recorded with, and a machine without it (CI) gets a clear error, never a new key
    token = "tok-" + secrets.token_hex(16)
    trace = crash_in_fetch(tmp_path, token)
    assert run_child(trace, env(tmp_path, token))["state"] == "DONE"
    scratch, bare = tmp_path / "scratch", tmp_path / "ci-config"
    scratch.mkdir()
    bare.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setenv("SECRET_TOKEN", token)
    monkeypatch.setenv("WF_LEDGER", str(tmp_path / "ledger"))
    import secret_agent

    runs, config = tmp_path / "runs", Path(os.environ["XDG_CONFIG_HOME"])
    before, keys = snapshot(runs), snapshot(config)
    [done] = harness.check([runs], workflow=secret_agent.session)
    assert (done.status, done.finished) == ("ok", True), done.line()
    assert ledger(tmp_path, "fetch") == [token, token]  # nothing called
    assert snapshot(runs) == before and snapshot(config) == keys and list(scratch.iterdir()) == []

    monkeypatch.setenv("XDG_CONFIG_HOME", str(bare))  # a machine that never had the key
    [done] = harness.check([runs], workflow=secret_agent.session)
    assert done.status == "error" and ENV in done.detail and "nothing was written" in done.detail, done.line()
    assert list(bare.rglob("*")) == [] and not Path(key_file()).exists()  # no key made for it
    assert snapshot(runs) == before and list(scratch.iterdir()) == []
    assert ledger(tmp_path, "fetch") == [token, token]


def crash_in_planner(trace: Path, token: str) -> dict[str, Any]:
    """An Executor run whose step 0 (login) returns token and whose planner dies planning step 2 (the trace stays
    in PLAN, nothing of the crash written); the tools, whose calls are counted in "calls"."""
    calls: list[str] = []

    def login() -> dict[str, Any]:
        calls.append("login")
        return {"access_token": token}

    def work(i: int) -> dict[str, int]:
        calls.append("work")
        return {"i": i}

    def planner(goal: str, progress: list[harness.Checkpoint]) -> Any:
        if not progress:
            return harness.Step("login", "login", {})
        if len(progress) == 2:
            raise Crash
        return harness.Step("s1", "work", {"i": 1})

    tools = {"login": login, "work": work}
    with pytest.raises(Crash):
        harness.Executor(planner=planner, tools=tools, trace=trace).run("g")
    assert harness.replay(trace).state == "PLAN" and calls == ["login", "work"]
    assert harness.replay(trace).checkpoints[0].result["access_token"] == harness.MARKER
    calls.clear()
    return {"tools": tools, "calls": calls}


def without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the `secrets` extra were not installed (in this process, its modules already imported)."""
    for name in ("cryptography", "cryptography.hazmat.primitives.ciphers.aead"):
        monkeypatch.setitem(sys.modules, name, None)


def test_an_executor_resume_reveals_only_the_checkpoints_its_planner_reads(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = tmp_path / "run.jsonl"
    run = crash_in_planner(trace, token)
    Path(sidecar(str(trace))).unlink()  # step 0's secret is gone: only a planner that reads step 0 needs it
    seen: list[Any] = []

    def planner(goal: str, progress: Any) -> Any:  # reads the last checkpoint only
        seen.append(progress[-1].result)
        return None if len(progress) == 3 else harness.Step("s2", "work", {"i": 2})

    out = harness.Executor(planner=planner, tools=run["tools"], trace=trace, resume=True).run("g")
    assert out.state == "DONE" and run["calls"] == ["work"] and seen == [{"i": 1}, {"i": 2}]
    with pytest.raises(SecretUnavailable, match="does not exist"):  # read, it is refused: never the marker
        out.checkpoints[0].result  # noqa: B018


@pytest.mark.parametrize("missing", ["sidecar", "extra"])
def test_an_executor_planner_that_reads_a_checkpoint_it_cannot_reveal_stops_the_resume_writing_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = tmp_path / "run.jsonl"
    if missing == "extra":  # recorded and resumed without it: the trace holds the marker, nothing is kept
        without_the_extra(monkeypatch)
    run = crash_in_planner(trace, token)
    if missing == "sidecar":
        Path(sidecar(str(trace))).unlink()
    assert not Path(sidecar(str(trace))).exists()  # so nothing up front can tell: the planner's read refuses
    before, asked = snapshot(tmp_path), []

    def planner(goal: str, progress: Any) -> Any:
        asked.append(len(progress))
        return harness.Step("use", "work", {"i": progress[0].result["access_token"]})

    error = MissingExtra if missing == "extra" else SecretUnavailable
    with pytest.raises(error):
        harness.Executor(planner=planner, tools=run["tools"], trace=trace, resume=True).run("g")
    assert asked == [2] and run["calls"] == []  # refused as the planner read it, no tool called
    assert snapshot(tmp_path) == before  # no resume record, no crash record: nothing written


def test_a_missing_extra_an_executors_planner_raises_itself_is_recorded_as_a_crash(tmp_path: Path) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = tmp_path / "run.jsonl"
    run = crash_in_planner(trace, token)

    def planner(goal: str, progress: Any) -> Any:  # its own reason, not the vault's
        raise MissingExtra("the planner's model client", "llm", "pip install llm")

    with pytest.raises(MissingExtra, match="pip install llm"):
        harness.Executor(planner=planner, tools=run["tools"], trace=trace, resume=True).run("g")
    kinds = [json.loads(x)["kind"] for x in trace.read_text().splitlines()]
    assert kinds[-2:] == ["resume", "crash"]


@pytest.mark.parametrize("missing", ["key", "another key", "extra"])
def test_an_executor_resume_without_the_key_refuses_before_its_planner_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    token = "tok-" + secrets.token_hex(16)
    trace = tmp_path / "run.jsonl"
    run = crash_in_planner(trace, token)
    if missing == "key":
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "elsewhere"))
    elif missing == "another key":
        monkeypatch.setenv(ENV, base64.urlsafe_b64encode(os.urandom(32)).decode())
    else:
        without_the_extra(monkeypatch)
    before, asked = snapshot(tmp_path), []

    def planner(goal: str, progress: Any) -> Any:  # would read none of step 0: the sidecar's entries tell
        asked.append(len(progress))
        return None

    error = MissingExtra if missing == "extra" else SecretUnavailable
    with pytest.raises(error):
        harness.Executor(planner=planner, tools=run["tools"], trace=trace, resume=True).run("g")
    assert asked == [] and snapshot(tmp_path) == before


def test_a_secret_inside_json_text_is_redacted_and_a_resume_is_served_it_back(tmp_path: Path) -> None:
    """An MCP tool's text content (or a model's arguments) holding JSON: its keys are redacted as an object's are,
    and the text a resume serves is the tool's own, byte for byte (kept in the sidecar)."""
    token = "tok-" + "7" * 24
    text = json.dumps({"access_token": token, "expires_in": 3600})  # (spaced: not the way orjson writes it)
    calls = []

    def login() -> dict[str, Any]:
        calls.append(1)
        return {"content": [{"type": "text", "text": text}], "isError": False}

    @harness.workflow
    def flow() -> str:
        got = harness.call(login)
        harness.interrupt("go on?")
        return str(got["content"][0]["text"])

    trace = tmp_path / "run.jsonl"
    assert flow.run(trace=trace).state == "PAUSED"
    written = trace.read_text()
    assert token not in written and '{\\"access_token\\":\\"[REDACTED]\\",\\"expires_in\\":3600}' in written
    out = flow.run(trace=trace, resume=True, answer="yes")
    assert out.state == "DONE" and out.result == text and calls == [1]  # served, as the tool returned it
    assert token not in trace.read_text()


@pytest.mark.parametrize("spelling", ["nested", "spaced"])
def test_a_secret_in_json_text_is_redacted_however_the_text_spells_its_keys(tmp_path: Path, spelling: str) -> None:
    """JSON text inside JSON text (a tool's body wrapped in its text content), or spaced before its colons, is
    redacted too: the journal's search that lets a clean record skip the walk finds those keys as the walk does."""
    token = "tok-" + "7" * 24
    inner = json.dumps({"access_token": token})
    text = json.dumps({"status": 200, "body": inner}) if spelling == "nested" else inner.replace('":', '" :')

    def login() -> dict[str, Any]:
        return {"content": [{"type": "text", "text": text}], "isError": False}

    @harness.workflow
    def flow() -> str:
        return str(harness.call(login)["content"][0]["text"])

    trace = tmp_path / "run.jsonl"
    out = flow.run(trace=trace)
    assert out.state == "DONE" and out.result == text  # the caller's value as the tool returned it
    assert token not in trace.read_text()
