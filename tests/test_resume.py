"""resume=True: finish a run from whatever a crash left on the file, in the same file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import harness
from harness import Executor, HarnessError, ResumeMismatch, Step, ToolError, TraceCorruption, replay
from harness.testing import FakeLLM, ScriptedTool, counter, fixed_plan, power_cut, read_records, steps

Run = Callable[..., harness.Outcome]  # the `run` fixture of conftest.py
FOUR = [{"i": i} for i in range(4)]


def results(trace: Path) -> list[Any]:
    return [c.result for c in replay(trace).checkpoints]


def test_the_blog_post_crash(trace: Path, run: Run) -> None:
    with pytest.raises(RuntimeError, match="power cut"):
        run(power_cut(at=3))
    kinds = [r["kind"] for r in read_records(trace)]
    assert kinds.count("checkpoint") == 2
    assert (replay(trace).state, results(trace)) == ("ACT", FOUR[:2])

    out = run(counter(), resume=True)
    assert out.state == "DONE" and [c.result for c in out.checkpoints] == FOUR
    r = replay(trace)
    assert (len(r.checkpoints), r.resumes, r.state, r.complete) == (4, 1, "DONE", True)
    seqs = [rec["seq"] for rec in read_records(trace)]
    assert seqs == list(range(1, len(seqs) + 1))


def test_the_seam_is_visible_and_the_story_before_it_is_kept(trace: Path, run: Run) -> None:
    with pytest.raises(RuntimeError):
        run(power_cut(at=3))
    before = trace.read_bytes()
    tool = counter()
    run(tool, resume=True)
    assert trace.read_bytes().startswith(before)
    seam = read_records(trace)[len(before.splitlines())]
    assert seam["kind"] == "resume" and seam["set_aside"] is None
    assert set(seam["env"]) == {"python", "platform", "cwd", "entrypoint", "harness"}
    assert tool.calls == [{"i": 2}, {"i": 3}]  # the interrupted call again (at-least-once), then the rest


def test_a_result_already_on_the_file_is_not_fetched_again(trace: Path, run: Run) -> None:
    def crash(step: Step, result: Any) -> bool:
        raise RuntimeError("power cut during verification")

    with pytest.raises(RuntimeError):
        run(counter(), n=1, verifier=crash)
    assert replay(trace).state == "VERIFY"
    tool = counter()
    assert run(tool, n=1, resume=True).state == "DONE"
    assert tool.calls == []


@pytest.mark.parametrize("ending", ["DONE", "FAILED"])
def test_resuming_a_finished_run_writes_nothing_and_calls_no_tool(trace: Path, run: Run, ending: str) -> None:
    first = run(counter() if ending == "DONE" else ScriptedTool({n: ToolError("no") for n in range(1, 4)}))
    assert first.state == ending
    before = trace.read_bytes()
    tool = counter()
    again = run(tool, resume=True)
    assert trace.read_bytes() == before and tool.calls == []
    assert (again.state, again.checkpoints, again.run_id, again.error) == (
        first.state, first.checkpoints, first.run_id, first.error,
    )  # fmt: skip


def test_resuming_with_another_goal_is_refused_and_writes_nothing(trace: Path, run: Run) -> None:
    with pytest.raises(RuntimeError):
        run(power_cut(at=2), goal={"city": "Lyon", "days": 3})
    before = trace.read_bytes()
    tool = counter()
    with pytest.raises(ResumeMismatch, match="goal") as info:
        run(tool, goal={"city": "Paris", "days": 3}, resume=True)
    assert isinstance(info.value, HarnessError)
    assert trace.read_bytes() == before and tool.calls == []
    # the same goal with its keys in another order is the same goal (canonical JSON)
    assert run(counter(), goal={"days": 3, "city": "Lyon"}, resume=True).state == "DONE"


def test_resuming_with_other_tool_contracts_is_refused(trace: Path, run: Run) -> None:
    with pytest.raises(RuntimeError):
        run(power_cut(at=2))
    before = trace.read_bytes()
    with pytest.raises(ResumeMismatch, match="tools"):
        run(harness.Tool(counter(), idempotent=True), resume=True)
    assert trace.read_bytes() == before


@pytest.mark.parametrize(("start", "resume"), [("missing", "auto"), ("empty", True), ("empty", "auto")])
def test_resume_on_an_empty_file_or_auto_on_a_missing_one_starts_a_new_run(
    trace: Path, run: Run, start: str, resume: Any
) -> None:
    if start == "empty":
        trace.write_bytes(b"")
    out = run(counter(), resume=resume)
    r = replay(trace)
    assert (out.state, r.state, r.resumes, len(r.checkpoints)) == ("DONE", "DONE", 0, 4)


def test_resume_true_on_a_missing_trace_is_refused_and_creates_nothing(trace: Path, run: Run) -> None:
    """A typo in the path after a crash must not start the run again and repeat its side effects."""
    tool = counter()
    typo = trace.with_name("rnu.jsonl")
    with pytest.raises(harness.TraceMissing, match=r'no such trace.*resume="auto"') as info:
        Executor(planner=fixed_plan(steps(2)), tools={"work": tool}, trace=typo, resume=True).run("g")
    assert isinstance(info.value, harness.TraceUnreadable) and info.value.path == str(typo)
    assert tool.calls == [] and not typo.exists() and list(trace.parent.iterdir()) == []


def test_resume_must_be_true_false_or_auto(trace: Path) -> None:
    with pytest.raises(ValueError, match='"auto"'):
        Executor(planner=fixed_plan([]), tools={}, trace=trace, resume="yes")


def test_a_torn_tail_is_reported_not_an_error(trace: Path, run: Run) -> None:
    run(counter())
    lines = trace.read_bytes().splitlines(keepends=True)
    cut = [i for i, line in enumerate(lines) if b'"checkpoint"' in line][2]  # the third checkpoint line
    trace.write_bytes(b"".join(lines[:cut]) + lines[cut][:40])
    r = replay(trace)
    assert r.torn_tail and (r.state, r.records, results(trace)) == ("VERIFY", cut, FOUR[:2])


def test_resume_sets_the_torn_bytes_aside_and_finishes(trace: Path, run: Run) -> None:
    with pytest.raises(RuntimeError):
        run(power_cut(at=3))
    torn = b'{"seq":10,"kind":"transition","from":"ACT","to":"VER'
    complete = trace.read_bytes()
    trace.write_bytes(complete + torn)

    assert run(counter(), resume=True).state == "DONE"
    aside = trace.with_name("run.jsonl.torn-1")
    assert aside.read_bytes() == torn
    assert trace.read_bytes().startswith(complete) and torn not in trace.read_bytes()
    seam = read_records(trace)[len(complete.splitlines())]
    assert (seam["kind"], seam["set_aside"]) == ("resume", "run.jsonl.torn-1")
    r = replay(trace)
    assert (r.state, r.resumes, r.torn_tail, len(r.checkpoints)) == ("DONE", 1, False, 4)


def test_a_second_torn_tail_gets_its_own_sibling(trace: Path, run: Run) -> None:
    with pytest.raises(RuntimeError):
        run(power_cut(at=2))
    with trace.open("ab") as f:
        f.write(b'{"seq":9')
    with pytest.raises(RuntimeError):
        run(power_cut(at=2), resume=True)
    with trace.open("ab") as f:
        f.write(b'{"seq":')
    assert run(counter(), resume=True).state == "DONE"
    assert trace.with_name("run.jsonl.torn-1").read_bytes() == b'{"seq":9'
    assert trace.with_name("run.jsonl.torn-2").read_bytes() == b'{"seq":'
    assert replay(trace).resumes == 2


def test_a_torn_header_is_not_a_trace_and_resume_starts_over(trace: Path, run: Run) -> None:
    run(counter())
    torn = trace.read_bytes()[:60]
    trace.write_bytes(torn)
    with pytest.raises(HarnessError, match=f"{trace}.*torn-header") as info:
        replay(trace)
    assert isinstance(info.value, TraceCorruption) and info.value.line == 1
    assert trace.read_bytes() == torn

    out = run(counter(), resume=True)
    assert trace.with_name("run.jsonl.torn-1").read_bytes() == torn
    r = replay(trace)
    assert (out.state, r.state, r.resumes, len(r.checkpoints), r.run_id) == ("DONE", "DONE", 0, 4, out.run_id)


def test_crossings_made_before_the_crash_are_served_not_made_again(trace: Path) -> None:
    def planner(fake: FakeLLM, crash: bool) -> Callable[[Any, list[Any]], Step | None]:
        def plan(goal: Any, progress: list[Any]) -> Step | None:
            advice = harness.llm({"goal": goal, "done": len(progress)}, fake)
            if crash and len(progress) == 1:
                raise RuntimeError("power cut")
            return Step(name=advice, tool="work", args={"i": len(progress)}) if len(progress) < 2 else None

        return plan

    first = FakeLLM(["first", "second"])
    with pytest.raises(RuntimeError):
        Executor(planner=planner(first, crash=True), tools={"work": counter()}, trace=trace).run("g")
    assert replay(trace).state == "PLAN" and len(first.requests) == 2

    second = FakeLLM(["third"])  # only one new answer: "second" must come from the file
    out = Executor(planner=planner(second, crash=False), tools={"work": counter()}, trace=trace, resume=True).run("g")
    assert [c.name for c in out.checkpoints] == ["first", "second"]
    assert second.requests == [{"goal": "g", "done": 2}]


def rich_run(trace: Path) -> harness.Outcome:
    """Four steps whose story has every kind of record: crossings, a ToolError, a rejection."""
    fake = FakeLLM(lambda request: f"advice for step {request}")
    failed: set[int] = set()
    rejected: set[int] = set()

    def tool(i: int) -> dict[str, int]:  # fails once per process on step 1: within the 3 attempts
        if i == 1 and i not in failed:
            failed.add(i)
            raise ToolError("the network blinked")
        return {"i": i}

    def plan(goal: Any, progress: list[Any]) -> Step | None:
        harness.llm(len(progress), fake)
        return fixed_plan(steps(4))(goal, progress)

    def verify(step: Step, result: Any) -> bool:
        if result["i"] == 2 and 2 not in rejected:
            rejected.add(2)
            return False
        return True

    ex = Executor(planner=plan, tools={"work": tool}, verifier=verify, trace=trace, resume="auto")
    return ex.run("rich")


def test_a_crash_after_any_line_or_inside_any_line_is_resumed_to_the_same_end(tmp_path: Path) -> None:
    full = tmp_path / "full.jsonl"
    assert rich_run(full).state == "DONE"
    lines = full.read_bytes().splitlines(keepends=True)
    kinds = {r["kind"] for r in read_records(full)}
    assert {"crossing", "checkpoint", "transition"} <= kinds
    ended = len(lines) - 1  # the line after the end is its seal, written with it: only a seal can be missing
    for k in range(len(lines)):
        for torn in (b"", lines[k][: len(lines[k]) // 2]):
            case = tmp_path / f"cut-{k}-{len(torn)}"
            case.mkdir()
            trace = case / "run.jsonl"
            kept = b"".join(lines[:k])
            trace.write_bytes(kept + torn)
            out = rich_run(trace)
            where = f"crash after line {k}" + (f" and {len(torn)} bytes of the next" if torn else "")
            r = replay(trace)
            assert (out.state, r.state, results(trace)) == ("DONE", "DONE", FOUR), where
            assert r.resumes == (1 if 0 < k < ended else 0), where
            assert r.sealed, where
            assert trace.read_bytes().startswith(kept), where
            if torn:
                assert (case / "run.jsonl.torn-1").read_bytes() == torn, where


# --- a resume that cannot go on writes nothing; crossings are served by what they are -------------------


def folder_state(folder: Path) -> dict[str, bytes]:
    """Every file of the folder and its bytes (the trace, its index, any `.torn-N`)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def drafting(prompts: list[str], model: FakeLLM, crash: list[bool]) -> Any:
    """A planner that asks the model for each prompt, then (once, if `crash` holds True) dies before planning."""

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        drafts = [harness.llm({"prompt": p}, model)["text"] for p in prompts]
        if crash:
            crash.pop()
            raise RuntimeError("power cut while planning")
        return Step("save", "save", {"drafts": drafts})

    return planner


def crashed_while_planning(trace: Path, *, torn: bytes = b"") -> FakeLLM:
    model = FakeLLM(lambda request: {"text": request["prompt"].upper()})
    with pytest.raises(RuntimeError, match="power cut"):
        Executor(planner=drafting(["a", "b"], model, [True]), tools={"save": counter()}, trace=trace).run("g")
    if torn:
        with open(trace, "ab") as f:
            f.write(torn)  # what a kill inside a write leaves
    return model


@pytest.mark.parametrize("torn", [b"", b'{"seq":99,"kind":"cross'])
def test_a_resume_that_drifts_names_the_crossing_and_writes_nothing(tmp_path: Path, torn: bytes) -> None:
    trace = tmp_path / "run.jsonl"
    crashed_while_planning(trace, torn=torn)
    second = [c for c in replay(trace).crossings if c.kind == "llm"][1]
    before = folder_state(tmp_path)
    live = FakeLLM(lambda request: {"text": "live"})
    for _ in range(3):  # however often: never a live call, never a byte, never a `.torn-N`
        with pytest.raises(harness.ReplayDrift) as e:
            Executor(planner=drafting(["a", "B!"], live, []), tools={"save": counter()}, trace=trace,
                     resume=True).run("g")  # fmt: skip
        assert (e.value.seq, e.value.fields) == (second.seq, {"prompt": ("b", "B!")})
        assert f"seq {second.seq}" in str(e.value) and "nothing was written" in str(e.value)
        assert live.requests == [] and folder_state(tmp_path) == before
    # the code that recorded it resumes it, serving both answers again
    out = Executor(planner=drafting(["a", "b"], live, []), tools={"save": counter()}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and out.checkpoints[0].result == {"drafts": ["A", "B"]} and live.requests == []
    aside = [r["set_aside"] for r in read_records(trace) if r["kind"] == "resume"]
    assert aside == (["run.jsonl.torn-1"] if torn else [None])
    aside_file = tmp_path / "run.jsonl.torn-1"
    assert aside_file.read_bytes() == torn if torn else not aside_file.exists()


def test_a_resume_that_skips_a_recorded_crossing_drifts_before_it_moves_on(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crashed_while_planning(trace)
    second = [c for c in replay(trace).crossings if c.kind == "llm"][1]
    before = folder_state(tmp_path)
    with pytest.raises(harness.ReplayDrift) as e:
        Executor(planner=drafting(["a"], FakeLLM(["live"]), []), tools={"save": counter()}, trace=trace,
                 resume=True).run("g")  # fmt: skip
    assert e.value.seq == second.seq and e.value.fields == {"request": ({"prompt": "b"}, None)}
    assert "moved on without making the llm crossing" in str(e.value)
    assert folder_state(tmp_path) == before


def test_a_resume_serves_crossings_by_what_they_are_whatever_their_order(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crashed_while_planning(trace)
    live = FakeLLM(lambda request: pytest.fail("a recorded crossing was made again"))
    save = counter()
    out = Executor(planner=drafting(["b", "a"], live, []), tools={"save": save}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and save.calls == [{"drafts": ["B", "A"]}]
    # one recorded crossing is served once: a third draft for "a" is beyond the recording, made live
    trace2 = tmp_path / "run2.jsonl"
    crashed_while_planning(trace2)
    more = FakeLLM(lambda request: {"text": "fresh"})
    out = Executor(planner=drafting(["a", "b", "a"], more, []), tools={"save": counter()}, trace=trace2,
                   resume=True).run("g")  # fmt: skip
    assert out.checkpoints[0].result == {"drafts": ["A", "B", "fresh"]} and more.requests == [{"prompt": "a"}]


def test_a_refused_resume_over_a_torn_tail_writes_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crashed_while_planning(trace, torn=b'{"seq":9,"ki')
    before = folder_state(tmp_path)
    with pytest.raises(ResumeMismatch):
        Executor(planner=drafting(["a", "b"], FakeLLM(["x"]), []), tools={"save": counter()}, trace=trace,
                 resume=True).run("another goal")  # fmt: skip
    with pytest.raises(ResumeMismatch):
        Executor(planner=drafting(["a", "b"], FakeLLM(["x"]), []), tools={"save": harness.Tool(counter(),
                 idempotent=True)}, trace=trace, resume=True).run("g")  # fmt: skip
    assert folder_state(tmp_path) == before


def test_a_resume_whose_planner_cannot_give_the_redacted_args_back_writes_nothing(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    key = "sk-proj-LIVEKEY0123456789abcdefghij"
    calls: list[str] = []

    def pay(api_key: str, idempotency_key: str) -> dict[str, Any]:
        calls.append(api_key)
        raise RuntimeError("connection reset")  # the process dies in the call

    tools = {"pay": harness.Tool(pay, idempotent=True)}
    with pytest.raises(RuntimeError):
        Executor(planner=fixed_plan([Step("pay", "pay", {"api_key": key})]), tools=tools, trace=trace).run("g")
    with open(trace, "ab") as f:
        f.write(b'{"seq":')
    before = folder_state(tmp_path)
    for _ in range(2):
        with pytest.raises(harness.RedactedArgs):
            Executor(planner=lambda g, p: None, tools=tools, trace=trace, resume=True).run("g")
        assert folder_state(tmp_path) == before and calls == [key]


def test_a_resume_that_drifts_after_a_long_run_leaves_its_index_as_it_was(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crash = [True]
    model = FakeLLM(lambda request: {"text": "t"})

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if len(done) < 300:
            return Step(f"s{len(done)}", "work", {"i": len(done), "pad": "x" * 300})
        harness.llm({"prompt": goal["last"]}, model)
        if crash:
            crash.pop()
            raise RuntimeError("power cut")
        return None

    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools={"work": lambda i, pad: {"i": i}}, trace=trace).run({"last": "a"})
    assert (tmp_path / "run.jsonl.idx").exists()  # the index marks a quiet point a resume starts from
    before = folder_state(tmp_path)
    goal_was = {"last": "a"}

    def changed(goal: Any, done: list[Any]) -> Step | None:
        return planner({"last": "b"}, done) if len(done) == 300 else planner(goal, done)

    with pytest.raises(harness.ReplayDrift):
        Executor(planner=changed, tools={"work": lambda i, pad: {"i": i}}, trace=trace, resume=True).run(goal_was)
    assert folder_state(tmp_path) == before
    out = Executor(planner=planner, tools={"work": lambda i, pad: {"i": i}}, trace=trace, resume=True).run(goal_was)
    assert out.state == "DONE" and len(model.requests) == 1


def test_a_declared_tool_called_again_finds_the_resume_record_on_file_first(tmp_path: Path) -> None:
    """Before a declared tool is called, its intent and everything before it are durable: a resume that calls
    it again writes its (owed) resume record first. A plain tool's resume record goes with its result."""
    seen: list[str] = []

    def tool(name: str) -> Any:
        def call(i: int, idempotency_key: str | None = None) -> dict[str, Any]:
            seen.append(read_records(tmp_path / f"{name}.jsonl")[-1]["kind"])
            if len(seen) % 2:
                raise RuntimeError("power cut in the call")
            return {"i": i}

        return harness.Tool(call, idempotent=True) if name == "declared" else call

    for name, last in (("declared", "resume"), ("plain", "crash")):
        trace = tmp_path / f"{name}.jsonl"
        with pytest.raises(RuntimeError):
            Executor(planner=fixed_plan(steps(1)), tools={"work": tool(name)}, trace=trace).run("g")
        out = Executor(planner=fixed_plan(steps(1)), tools={"work": tool(name)}, trace=trace, resume=True).run("g")
        assert out.state == "DONE" and seen[-1] == last, name


def test_a_drift_that_agent_code_swallows_still_stops_the_resume_before_it_writes(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crashed_while_planning(trace)
    before = folder_state(tmp_path)

    def careless(goal: Any, done: list[Any]) -> Step | None:
        if done:
            return None
        try:
            said = harness.llm({"prompt": "changed"}, FakeLLM(["live"]))
        except Exception:  # a catch-all in agent code must not turn a drift into a live run
            said = {"text": "fallback"}
        return Step("save", "save", {"drafts": [said["text"]]})

    with pytest.raises(harness.ReplayDrift):
        Executor(planner=careless, tools={"save": counter()}, trace=trace, resume=True).run("g")
    assert folder_state(tmp_path) == before


def test_a_resume_whose_first_record_ends_the_run_seals_over_its_seam(tmp_path: Path) -> None:
    """The resume record, written with the run's last record and its seal in one write, is covered by the seal."""
    trace = tmp_path / "run.jsonl"
    crash = [True]

    def planner(goal: Any, done: list[Any]) -> Step | None:
        if len(done) == 2:
            if crash:
                crash.pop()
                raise RuntimeError("power cut after the last step")
            return None
        return Step(f"s{len(done)}", "work", {"i": len(done)})

    with pytest.raises(RuntimeError):
        Executor(planner=planner, tools={"work": counter()}, trace=trace).run("g")
    with open(trace, "ab") as f:
        f.write(b'{"seq":12,"kind":"tran')
    out = Executor(planner=planner, tools={"work": counter()}, trace=trace, resume=True, seal_key="k").run("g")
    assert out.state == "DONE"
    kinds = [r["kind"] for r in read_records(trace)]
    assert kinds[-3:] == ["resume", "transition", "seal"]
    found = harness.verify(trace, seal_key="k")
    assert found.ok and found.keyed, found.report()
    assert (tmp_path / "run.jsonl.torn-1").read_bytes() == b'{"seq":12,"kind":"tran'


def test_a_drift_after_the_resumed_code_wrote_says_so_and_the_trace_still_resumes(tmp_path: Path) -> None:
    """Records a resumed planner writes before it drifts (an agent's spawn, exit and join) stay: they are true."""
    trace = tmp_path / "run.jsonl"
    crash = [True]
    model = FakeLLM(lambda request: {"text": str(request)})

    def make(prompt: str) -> Any:
        def planner(goal: Any, done: list[Any]) -> Step | None:
            if done:
                return None
            helper = harness.spawn("helper", lambda: harness.llm({"helper": 1}, model))
            harness.join(helper)
            said = harness.llm({"prompt": prompt}, model)
            if crash:
                crash.pop()
                raise RuntimeError("power cut")
            return Step("save", "save", {"drafts": [said["text"]]})

        return planner

    with pytest.raises(RuntimeError):
        Executor(planner=make("a"), tools={"save": counter()}, trace=trace).run("g")
    with pytest.raises(harness.ReplayDrift, match="had gone live before it: the trace keeps what that wrote"):
        Executor(planner=make("b"), tools={"save": counter()}, trace=trace, resume=True).run("g")
    assert [r["kind"] for r in read_records(trace)][-4:] == ["resume", "spawn", "exit", "join"]
    assert replay(trace).state == "PLAN"
    out = Executor(planner=make("a"), tools={"save": counter()}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and len(model.requests) == 2  # each asked once, in the first process
