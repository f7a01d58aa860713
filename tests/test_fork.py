"""fork(): recorded up to one crossing, another value there, live after it; lineage and diff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import in_process
import orjson
import pytest

import harness
from harness import Executor, HarnessError, NotSerializable, ReplayDrift, Step, ToolError
from harness.testing import counter, power_cut, read_records

AGENT = """
import harness
from harness import Step

def make_agent(rename=False):
    def planner(goal, done):
        n = len(done)
        if n == 0:
            return Step("search", "search", {"q": harness.llm({"ask": "query", "seed": harness.random()}, model)})
        if n == 1:
            return Step("rename" if rename else "read", "fetch", {"url": done[0].result["hits"][0]})
        if n == 2:
            return Step("answer", "write", {"text": done[1].result})
        return None

    def model(request):
        return f"query-{request['seed']:.4f}"

    tools = {"search": lambda q: {"hits": [f"https://x.example/{q}"]}, "fetch": lambda url: f"page at {url}",
             "write": lambda text: text.upper()}
    return planner, tools, None

def make_renamed():
    return make_agent(rename=True)

if __name__ == "__main__":
    import sys
    planner, tools, verifier = make_agent()
    harness.Executor(planner=planner, tools=tools, trace=sys.argv[1]).run({"question": "q"})
"""


class Agent:
    """The research-like agent above, in-process, counting its live tool and model calls."""

    def __init__(self, *, rename: bool = False):
        self.calls: list[str] = []
        self.rename = rename

    def model(self, request: Any) -> str:
        self.calls.append("llm")
        return f"query-{request['seed']:.4f}"

    def planner(self, goal: Any, done: list[Any]) -> Step | None:
        n = len(done)
        if n == 0:
            return Step("search", "search", {"q": harness.llm({"ask": "query", "seed": harness.random()}, self.model)})
        if n == 1:
            return Step("rename" if self.rename else "read", "fetch", {"url": done[0].result["hits"][0]})
        if n == 2:
            return Step("answer", "write", {"text": done[1].result})
        return None

    def tool(self, name: str, fn: Any) -> Any:
        def call(**args: Any) -> Any:
            self.calls.append(name)
            return fn(**args)

        return call

    def parts(self) -> dict[str, Any]:
        tools = {
            "search": self.tool("search", lambda q: {"hits": [f"https://x.example/{q}"]}),
            "fetch": self.tool("fetch", lambda url: f"page at {url}"),
            "write": self.tool("write", lambda text: text.upper()),
        }
        return {"planner": self.planner, "tools": tools, "verifier": None}


@pytest.fixture
def parent(tmp_path: Path) -> Path:
    path = tmp_path / "parent.jsonl"
    assert Executor(**Agent().parts(), trace=path).run({"question": "q"}).state == "DONE"
    return path


def tool_crossing(trace: Path, name: str) -> harness.Crossing:
    return next(c for c in harness.replay(trace).crossings if c.kind == "tool" and c.request["tool"] == name)


def check_lineage(parent: Path, child: Path, at: int) -> None:
    """The child names its parent and branch, repeats the parent before the branch, and marks that part reused."""
    p, c = read_records(parent), read_records(child)
    assert c[0]["parent"] == p[0]["run_id"] and c[0]["branch"] == at and c[0]["run_id"] != p[0]["run_id"]
    assert harness.normalize(c)[: at - 1] == harness.normalize(p)[: at - 1]
    assert [r["seq"] for r in c[: at - 1]] == [r["seq"] for r in p[: at - 1]]
    assert all(r.get("reused") is True for r in c[1 : at - 1]) and "reused" not in c[0]
    assert not any("reused" in r for r in c[at - 1 :])
    d = harness.diff(parent, child)
    assert d.first is not None and d.first.seq_a == d.first.seq_b == at


def test_fork_at_a_tool_result(parent: Path, tmp_path: Path) -> None:
    fetch = tool_crossing(parent, "fetch")
    agent = Agent()
    child = harness.fork(parent, at=fetch.seq, value="a different page", out=tmp_path / "child.jsonl", **agent.parts())
    assert (child.parent, child.branch, child.state) == (harness.replay(parent).run_id, fetch.seq, "DONE")
    check_lineage(parent, tmp_path / "child.jsonl", fetch.seq)
    records = read_records(tmp_path / "child.jsonl")
    assert records[fetch.seq - 1]["result"] == "a different page"  # the branch record carries the value
    assert agent.calls == ["write"] and child.live_calls == 1  # recorded before the branch, live after
    assert harness.replay(tmp_path / "child.jsonl").checkpoints[-1].result == "A DIFFERENT PAGE"
    assert not child.equal


def test_fork_at_a_model_answer_runs_everything_after_it_live(parent: Path, tmp_path: Path) -> None:
    llm = next(c for c in harness.replay(parent).crossings if c.kind == "llm")
    agent = Agent()
    child = harness.fork(parent, at=llm.seq, value="sqlite", out=tmp_path / "child.jsonl", **agent.parts())
    check_lineage(parent, tmp_path / "child.jsonl", llm.seq)
    assert agent.calls == ["search", "fetch", "write"] and child.live_calls == 3
    assert harness.replay(tmp_path / "child.jsonl").checkpoints[0].result == {"hits": ["https://x.example/sqlite"]}


def test_fork_at_a_failed_tool_call_replaces_the_error_with_the_value(tmp_path: Path) -> None:
    plan = [Step("a", "work", {"i": 0}), Step("b", "work", {"i": 1})]
    parts: dict[str, Any] = {"planner": lambda g, d: plan[len(d)] if len(d) < 2 else None}
    parent = tmp_path / "parent.jsonl"
    failing = harness.testing.ScriptedTool({1: ToolError("busy")})
    Executor(**parts, tools={"work": failing}, trace=parent).run("g")
    failed = harness.replay(parent).crossings[0]
    assert failed.error == {"type": "ToolError", "message": "busy"}
    live = counter()
    child = harness.fork(parent, at=failed.seq, value={"i": 0}, tools={"work": live}, out=tmp_path / "c.jsonl", **parts)
    branch = read_records(tmp_path / "c.jsonl")[failed.seq - 1]
    assert (branch["from"], branch["to"], branch["result"]) == ("ACT", "VERIFY", {"i": 0})
    assert child.state == "DONE" and live.calls == [{"i": 1}]


def test_a_fork_of_a_fork(parent: Path, tmp_path: Path) -> None:
    search, fetch = tool_crossing(parent, "search"), tool_crossing(parent, "fetch")
    value = {"hits": ["https://y.example/"]}
    one = harness.fork(parent, at=search.seq, value=value, out=tmp_path / "one.jsonl", **Agent().parts())
    assert read_records(tmp_path / "one.jsonl")[fetch.seq - 1]["result"] == "page at https://y.example/"
    agent = Agent()
    two = harness.fork(tmp_path / "one.jsonl", at=fetch.seq, value="again", out=tmp_path / "two.jsonl", **agent.parts())
    assert two.parent == one.run_id and two.branch == fetch.seq and agent.calls == ["write"]
    check_lineage(tmp_path / "one.jsonl", tmp_path / "two.jsonl", fetch.seq)
    # records that were live in the first fork are reused in the second
    assert read_records(tmp_path / "two.jsonl")[search.seq]["reused"] is True
    assert harness.list_runs(tmp_path)[-1].parent == one.run_id


def test_fork_by_default_writes_beside_the_parent(parent: Path) -> None:
    child = harness.fork(parent, at=tool_crossing(parent, "write").seq, value="X", **Agent().parts())
    assert child.trace == str(parent.parent / f"{child.run_id}.jsonl") and Path(child.trace).exists()


def test_fork_takes_the_childs_run_id_and_names_its_file_by_it(parent: Path) -> None:
    at = tool_crossing(parent, "write").seq
    child = harness.fork(parent, at=at, value="X", run_id="chosen-1", **Agent().parts())
    assert child.run_id == "chosen-1" and child.trace == str(parent.parent / "chosen-1.jsonl")
    assert harness.replay(child.trace).run_id == "chosen-1"
    before = sorted(p.name for p in parent.parent.iterdir())
    for bad in ("../up", "", "a b", 7):
        with pytest.raises(harness.HarnessError, match=r"run_id=.*letters, digits"):
            harness.fork(parent, at=at, value="X", run_id=bad, **Agent().parts())  # type: ignore[arg-type]
    assert sorted(p.name for p in parent.parent.iterdir()) == before


def test_a_fork_whose_agent_no_longer_repeats_the_parent_is_refused(parent: Path) -> None:
    before = sorted(p.name for p in parent.parent.iterdir())
    write = tool_crossing(parent, "write")
    with pytest.raises(ReplayDrift) as e:  # a renamed step changes a record before the branch, not a crossing
        harness.fork(parent, at=write.seq, value="X", **Agent(rename=True).parts())
    fetch_intent = tool_crossing(parent, "fetch").seq - 1
    assert e.value.seq == fetch_intent and e.value.fields == {"name": ("read", "rename")}
    assert f"seq {fetch_intent}" in str(e.value)
    assert sorted(p.name for p in parent.parent.iterdir()) == before  # no half child left behind


def test_fork_refuses_a_seq_without_a_crossing_and_a_value_that_is_not_json(parent: Path) -> None:
    with pytest.raises(HarnessError, match=r"seq 2 does not carry a crossing .*crossings: \d+, \d+"):
        harness.fork(parent, at=2, value=1, **Agent().parts())
    with pytest.raises(NotSerializable):
        harness.fork(parent, at=tool_crossing(parent, "write").seq, value={1, 2}, **Agent().parts())


def test_fork_after_a_resume_seam_keeps_the_parent_seqs(tmp_path: Path) -> None:
    plan = [Step(f"s{i}", "work", {"i": i}) for i in range(4)]
    parts: dict[str, Any] = {"planner": lambda g, d: plan[len(d)] if len(d) < 4 else None}
    parent = tmp_path / "parent.jsonl"
    with pytest.raises(RuntimeError):
        Executor(**parts, tools={"work": power_cut(2)}, trace=parent).run("g")
    Executor(**parts, tools={"work": counter()}, trace=parent, resume=True).run("g")
    last = [c for c in harness.replay(parent).crossings][-1]
    out = tmp_path / "c.jsonl"
    child = harness.fork(parent, at=last.seq, value={"i": 9}, tools={"work": counter()}, out=out, **parts)
    check_lineage(parent, tmp_path / "c.jsonl", last.seq)
    resume = next(r for r in read_records(tmp_path / "c.jsonl") if r["kind"] == "resume")
    assert resume["reused"] is True and child.live_calls == 0


# --- the command line ----------------------------------------------------------------------------


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` in cwd: the console script's main() called in this process (its --agent module imported
    from cwd, as the script does, and forgotten after)."""
    return in_process.harness(*args, cwd=cwd)  # type: ignore[no-any-return]


def test_cli_fork_then_diff_reports_the_branch_point(tmp_path: Path) -> None:
    (tmp_path / "fork_agent.py").write_text(AGENT)
    subprocess.run([sys.executable, "fork_agent.py", "parent.jsonl"], cwd=tmp_path, check=True, timeout=60)
    fetch = tool_crossing(tmp_path / "parent.jsonl", "fetch")
    value = orjson.dumps("changed page").decode()
    r = cli("fork", "parent.jsonl", "--at", str(fetch.seq), "--set", value, "--agent", "fork_agent:make_agent",
            "--out", "child.jsonl", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"at seq {fetch.seq}" in r.stdout and "1 live calls" in r.stdout
    check_lineage(tmp_path / "parent.jsonl", tmp_path / "child.jsonl", fetch.seq)
    d = cli("diff", "parent.jsonl", "child.jsonl", "--format", "json", cwd=tmp_path)
    assert d.returncode == 1, d.stderr
    first = orjson.loads(d.stdout)["first"]
    assert first["seq_a"] == first["seq_b"] == fetch.seq and first["changes"][0]["new"] == "changed page"
    text = cli("diff", "parent.jsonl", "child.jsonl", cwd=tmp_path)
    assert f"seq {fetch.seq}" in text.stdout.splitlines()[0]
    write = tool_crossing(tmp_path / "parent.jsonl", "write")
    drift = cli("fork", "parent.jsonl", "--at", str(write.seq), "--set", "1", "--agent", "fork_agent:make_renamed",
                "--out", "bad.jsonl", cwd=tmp_path)  # fmt: skip
    assert drift.returncode == 1 and "ReplayDrift" in drift.stderr
    assert "name: parent 'read', fork 'rename'" in drift.stderr
    assert not (tmp_path / "bad.jsonl").exists()
    bad_input = [
        (["--set", "{nope"], "--set '{nope' is neither valid JSON"),
        (["--set", "1", "--at", "2"], "does not carry a crossing"),
    ]
    for args, why in bad_input:
        base = ["fork", "parent.jsonl", "--at", str(fetch.seq), "--agent", "fork_agent:make_agent", "--out", "x.jsonl"]
        bad = cli(*base, *args, cwd=tmp_path)
        assert bad.returncode == 2 and why in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "x.jsonl").exists()


# --- labels: what a fork served from its parent is marked, whatever order its tasks took (issue 34) ---------------

GATHERED: dict[str, Any] = {}  # the live model calls of gathered() below, and the gate b waits at


async def _noted(request: dict[str, Any]) -> dict[str, Any]:
    GATHERED.setdefault("calls", []).append(request)
    GATHERED["gate"].set()  # a's call has started: b may start its own, recorded after a's
    return {"text": f"{request['who']} answered"}


def _step(i: int) -> dict[str, Any]:
    return {"i": i}


async def _a() -> str:
    import asyncio

    await asyncio.sleep(0)  # b runs meanwhile: in a fork, to its crossing, served at once, before a's branch
    await harness.acall(_step, i=1)
    return (await harness.allm({"who": "a"}, _noted))["text"]


async def _b() -> str:
    await GATHERED["gate"].wait()  # in the recording, after a's call started; in the fork, at once
    return (await harness.allm({"who": "b"}, _noted))["text"]


@harness.workflow
async def gathered() -> list[str]:
    import asyncio

    GATHERED["gate"] = asyncio.Event()
    if GATHERED.get("forking"):
        GATHERED["gate"].set()
    return list(await asyncio.gather(_a(), _b()))


@pytest.mark.parametrize("branch", ["a's model answer", "a's tool result"])
def test_a_crossing_served_after_the_branch_is_marked_reused_not_left_to_read_as_live(
    tmp_path: Path, branch: str
) -> None:
    """Before: b's crossing, served from the parent (taken while a was still before the branch) but written after
    a's answered branch, carried no mark: `harness show` and every reader called it live, and no call was made."""
    parent = tmp_path / "parent.jsonl"
    GATHERED.clear()
    assert gathered.run(trace=parent).result == ["a answered", "b answered"]
    records = read_records(parent)
    answer = next(r["seq"] for r in records if r["kind"] == "crossing" and r["request"] == {"who": "a"})
    assert records[answer]["request"] == {"who": "b"}  # b's answer recorded right after a's
    at, value, returned = answer, {"text": "a told otherwise"}, ["a told otherwise", "b answered"]
    if branch == "a's tool result":
        at, value, returned = next(r["seq"] for r in records if "result" in r), {"i": 2}, ["a answered", "b answered"]
    GATHERED.clear()
    GATHERED["forking"] = True
    child = harness.fork(parent, at=at, value=value, workflow=gathered, out=tmp_path / "c.jsonl")
    assert child.state == "DONE" and harness.replay(tmp_path / "c.jsonl").returned == returned
    forked = read_records(tmp_path / "c.jsonl")
    b = next(r for r in forked if r.get("request") == {"who": "b"})
    assert forked[at - 1]["mutated"] is True and b["seq"] > at  # written after the branch (taken before it)
    assert b.get("reused") is True  # served from the parent: marked, wherever it lands
    live = [r for r in forked[at:] if r["kind"] == "crossing" and "reused" not in r]
    assert len(GATHERED.get("calls", [])) == len(live) == child.live_calls  # unmarked: exactly what ran live
    shown = in_process.harness("show", "--width", 1000, tmp_path / "c.jsonl")
    assert shown.returncode == 0, shown.stderr
    labels = {int(line.split()[0]): line for line in shown.stdout.splitlines()}
    assert "served" in labels[b["seq"]] and "answered" in labels[at] and "live" not in labels[b["seq"]]
