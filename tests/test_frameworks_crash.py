"""Framework agents SIGKILLed before, during and after a model call and inside an unsafe tool, resumed in new processes.

Each run and each resume is a new process forked from a zygote that has
imported the frameworks once (tests/children.py: they cost seconds of CPU
per import); the SIGKILL is real. The model is a real chat-completions
server in this process (tests/agent_server.py), which counts the requests
it is sent: a resume sends no request the trace holds an answer to, and the
unsafe tool's effects (a line per call in a log file) happen once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_server import AgentServer
from children import AGENTS, Forked, finished, kill_when

import harness

# One xdist worker runs test_frameworks, test_frameworks_crash and test_mcp: it alone imports the frameworks and
# the MCP SDK (seconds of CPU), and starts their zygote (children.AGENTS), once.
pytestmark = pytest.mark.xdist_group("frameworks")

FLOWS = {"pai": ("pai", ("openai",)), "pai-function": ("pai", ("function",)), "oa": ("oa", ())}
CHILD = "import json, sys, framework_agent; framework_agent.child(*json.loads(sys.argv[1]))"


def start(name: str, server: AgentServer, trace: Path, tmp: Path, kill: str = "") -> Forked:
    flow, args = FLOWS[name]
    env = {"FRAMEWORK_LOG": str(tmp / "tools.log"), "FRAMEWORK_MARKER": str(tmp / "marker"), "FRAMEWORK_KILL": kill}
    out = tmp / "outcome"
    out.unlink(missing_ok=True)
    request = [flow, [server.url, *args], str(trace), env, str(out)]
    return AGENTS.Popen([sys.executable, "-c", CHILD, json.dumps(request)])


def finish(child: Any, tmp: Path) -> str:
    finished(child)
    return (tmp / "outcome").read_text()


def effects(tmp: Path) -> list[str]:
    log = tmp / "tools.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("name", ["pai", "oa"])
@pytest.mark.parametrize("point", ["before:2", "during:2", "after:2"])
def test_a_kill_around_a_model_call_resumes_without_sending_a_recorded_request_again(
    name: str, point: str, tmp_path: Path
) -> None:
    where, _, k = point.partition(":")
    server = AgentServer(hold_at=int(k) if where == "during" else None)
    try:
        trace = tmp_path / "run.jsonl"
        child = start(name, server, trace, tmp_path, kill="" if where == "during" else point)
        if where == "during":
            kill_when(server.held.is_set, child)
            server.release()
        else:
            kill_when((tmp_path / "marker").exists, child)
        sent = server.chats  # the requests the killed process sent: one per model call it began
        recorded = sum(1 for c in harness.replay(trace).crossings if c.kind.endswith(".model"))
        assert recorded == int(k) - 1  # the answer to request k never reached the trace
        assert sent == (int(k) - 1 if where == "before" else int(k))
        assert finish(start(name, server, trace, tmp_path), tmp_path) == "DONE done after 2 tools"
        bodies = [s["body"] for s in server.seen]
        assert server.chats == sent + 3 - recorded  # the resume sent only what the trace had no answer to
        assert len({orjson_key(b) for b in bodies}) == 3  # three distinct requests; a repeat was only of request k
        assert effects(tmp_path) == ["charge 0 1", "charge 1 1"]
        assert harness.replay(trace).complete
    finally:
        server.release()
        server.stop()


def orjson_key(body: Any) -> str:
    import json

    return json.dumps(body, sort_keys=True)


def test_a_kill_inside_a_function_model_call_resumes(tmp_path: Path) -> None:
    server = AgentServer()
    try:
        trace = tmp_path / "run.jsonl"
        kill_when((tmp_path / "marker").exists, start("pai-function", server, trace, tmp_path, kill="model:3"))
        assert finish(start("pai-function", server, trace, tmp_path), tmp_path) == "DONE done after 2 tools"
        assert effects(tmp_path) == ["charge 0 1", "charge 1 1"]
        models = [c for c in harness.replay(trace).crossings if c.kind == "pydantic_ai.model"]
        assert len(models) == 3
    finally:
        server.stop()


@pytest.mark.parametrize(("name", "happened"), [("pai", True), ("oa", True), ("oa", False)])
def test_a_kill_inside_an_unsafe_tool_pauses_for_reconcile(
    name: str, happened: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    server = AgentServer()
    try:
        trace = tmp_path / "run.jsonl"
        kill_when((tmp_path / "marker").exists, start(name, server, trace, tmp_path, kill="tool:2"))
        assert effects(tmp_path) == ["charge 0 1"]
        assert finish(start(name, server, trace, tmp_path), tmp_path).startswith("PAUSED")
        assert server.chats == 2  # the pause sent nothing
        assert main(["replay", str(trace)]) == 0  # the paused run names what --result takes, with a command line
        said = capsys.readouterr().out
        assert f"reconcile it: harness reconcile {trace} --happened --result " in said
        assert ("as Pydantic AI's" if name == "pai" else "the tool's return value, as JSON") in said
        if happened:  # the operator found the charge made (and does it by hand here, as the world would have it)
            (tmp_path / "tools.log").write_text("charge 0 1\ncharge 1 1\n")
            harness.reconcile(trace, happened=True, result=2, evidence="the ledger")  # what charge(1, 1) returned
        else:
            harness.reconcile(trace, happened=False, evidence="no such charge")
        assert main(["replay", str(trace)]) == 0  # reconciled: what is left to do is the resume
        said = capsys.readouterr().out
        assert "reconciled: resume it" in said and "None" not in said, said
        assert finish(start(name, server, trace, tmp_path), tmp_path) == "DONE done after 2 tools"
        assert effects(tmp_path) == ["charge 0 1", "charge 1 1"]  # once, whichever way it was reconciled
        assert server.chats == 3
        replies = [m["content"] for m in server.seen[-1]["body"]["messages"] if m["role"] == "tool"]
        assert replies == ["1", "2"]  # the model got the tool's own value as its reply, the reconciled one too
    finally:
        server.stop()


def test_a_served_model_answer_calls_its_tool_with_the_real_api_key_never_the_marker(tmp_path: Path) -> None:
    """The model's tool call holds an api_key: the trace holds the marker, the sidecar the key (encrypted); killed
    inside the tool and resumed, the served answer calls the tool again with the real key."""
    secret = "key-" + "0123456789abcdef" * 2
    trace = tmp_path / "runs" / "run.jsonl"
    env = {"FRAMEWORK_LOG": str(tmp_path / "tools.log"), "FRAMEWORK_MARKER": str(tmp_path / "marker")}
    env["FRAMEWORK_SECRET"] = secret
    trace.parent.mkdir()

    def child(kill: str) -> Forked:
        (tmp_path / "outcome").unlink(missing_ok=True)
        request = ["pai-secret", [""], str(trace), {**env, "FRAMEWORK_KILL": kill}, str(tmp_path / "outcome")]
        return AGENTS.Popen([sys.executable, "-c", CHILD, json.dumps(request)])

    kill_when((tmp_path / "marker").exists, child("use_key:1"))
    assert effects(tmp_path) == [f"use_key {secret} x"]
    answer = next(c for c in harness.replay(trace).crossings if c.kind == "pydantic_ai.model")
    assert answer.response["parts"][0]["args"]["api_key"] == harness.MARKER
    assert finish(child(""), tmp_path) == "DONE lookup found"
    assert effects(tmp_path) == [f"use_key {secret} x"] * 2  # called again with the key, never the marker
    assert [p.name for p in trace.parent.iterdir() if secret.encode() in p.read_bytes()] == []
