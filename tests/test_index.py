"""The index beside a trace (TRACE.idx): what resume reads instead of the history, and what it still checks.

A resume that finds a usable mark reads only what follows it; it must then
rebuild exactly the state replay() rebuilds from every line, at every cut of
the file. A mark that does not match the trace (damaged, torn, stale, another
trace's) is ignored, and the resume leaves a fresh index behind. What resume
trusts is the prefix before the mark; the checkpoints it reads from that
prefix are checked line by line (and blob by blob) on access, and replay()
still catches an edit anywhere.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
from children import kill_in_call

import harness
from harness import Executor, Step, TraceCorruption, replay
from harness.trace.index import ENTRY, INTERVAL, load, path_of, resume_point

PAD = "x" * 600  # results this size make a trace pass INTERVAL in about a hundred steps


def planner(n: int, *, parallel_at: int | None = None) -> Any:
    def plan(goal: Any, progress: Any) -> Step | list[Step] | None:
        if len(progress) >= n:
            return None
        if len(progress) % 3 == 1:
            harness.llm({"prompt": f"step {len(progress)}"}, lambda req: {"text": "ok"})  # a crossing now and then
        if len(progress) == parallel_at:
            return [Step(f"s{len(progress) + k}", "work", {"i": len(progress) + k}) for k in range(3)]
        return Step(f"s{len(progress)}", "work", {"i": len(progress)})

    return plan


class Crash(Exception):
    pass


def work_until(stop: int | None) -> Any:
    def work(i: int) -> dict[str, Any]:
        if i == stop:
            raise Crash
        return {"i": i, "pad": PAD}

    return work


def crashed(trace: Path, n: int, stop: int, **options: Any) -> None:
    plan = planner(n, parallel_at=options.pop("parallel_at", None))
    with pytest.raises(Crash):
        Executor(planner=plan, tools={"work": work_until(stop)}, trace=trace, **options).run("g")


def finish(trace: Path, n: int, **options: Any) -> harness.Outcome:
    plan = planner(n, parallel_at=options.pop("parallel_at", None))
    return Executor(planner=plan, tools={"work": work_until(None)}, trace=trace, resume=True, **options).run("g")


def state(rep: harness.Replay) -> tuple[Any, ...]:
    """What a resume uses of a Replay (counts of transitions and resumes start at the mark: not compared)."""
    t = rep.tail
    return (
        rep.state, t.last, t.intent, t.result, t.result_seq, rep.last_seq, t.end, t.crc, rep.records,
        rep.torn_tail, t.fresh, t.reconcile, rep.header, list(rep.checkpoints), rep.resumable_crossings(),
        sorted(t.blobs), t.quiet, t.clocks, t.group, rep.pending, t.question, t.answers,
    )  # fmt: skip


def test_a_long_run_leaves_a_mark_and_resume_reads_only_what_follows_it(trace: Path) -> None:
    crashed(trace, 300, 250)
    mark = load(str(trace))
    assert mark is not None and INTERVAL <= mark.end < trace.stat().st_size
    assert mark.checkpoints == 250 and mark.step == 249  # the crash (an exception) wrote the last quiet point
    point = resume_point(str(trace))
    assert point.tail.since == mark.end and state(point) == state(replay(trace))
    seen: list[Any] = []

    def plan(goal: Any, progress: Any) -> Step | list[Step] | None:
        if not seen:
            seen.append([(c.step, c.name, c.result["i"]) for c in progress])
            seen.append((progress[0].step, progress[-1].step, progress[100:102], len(progress)))
        return planner(300)(goal, progress)

    out = Executor(planner=plan, tools={"work": work_until(None)}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and len(out.checkpoints) == 300
    # the interrupted call (a plain tool) ran again first: the planner's first view holds 251 steps
    assert seen[0] == [(i, f"s{i}", i) for i in range(251)]
    assert seen[1][:2] == (0, 250) and [c.step for c in seen[1][2]] == [100, 101] and seen[1][3] == 251
    assert list(out.checkpoints) == list(replay(trace).checkpoints)
    assert out.checkpoints == replay(trace).checkpoints and out.checkpoints[299].result["i"] == 299
    again = load(str(trace))
    assert again is not None and again.checkpoints == 300  # the resumed run marked its own last step
    assert replay(trace).sealed


def test_a_mark_is_used_and_a_missing_one_is_left_behind(trace: Path) -> None:
    crashed(trace, 300, 250)
    os.unlink(path_of(str(trace)))
    point = resume_point(str(trace))
    assert point.tail.since == 0 and state(point) == state(replay(trace))  # no mark: the whole trace is read
    out = finish(trace, 251 + 0)  # finishes with the step that crashed
    assert out.state == "DONE"
    mark = load(str(trace))
    assert mark is not None and mark.checkpoints == 251  # a fresh index, from the full read and the run after it


@pytest.mark.parametrize("stop", [120, 121, 199])
def test_resume_point_equals_replay_at_every_cut(tmp_path: Path, stop: int) -> None:
    """Cut the file (with its index) at many lengths, torn lines included: the same state either way."""
    trace = tmp_path / "run.jsonl"
    crashed(trace, 300, stop)
    data = trace.read_bytes()
    mark = load(str(trace))
    assert mark is not None
    cuts = sorted({mark.end, mark.end + 1, len(data), len(data) - 7, *range(mark.end, len(data), 97)})
    for n, at in enumerate(cuts):
        cut = tmp_path / f"cut{n}.jsonl"
        cut.write_bytes(data[:at])
        shutil.copy(path_of(str(trace)), path_of(str(cut)))
        point = resume_point(str(cut))
        assert point.tail.since == mark.end, at
        assert state(point) == state(replay(cut)), at


def test_resume_finishes_the_run_from_every_cut_after_the_mark(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crashed(trace, 140, 130)
    data, idx = trace.read_bytes(), Path(path_of(str(trace))).read_bytes()
    mark = load(str(trace))
    assert mark is not None
    for n, at in enumerate(range(mark.end, len(data) + 1, 211)):
        cut = tmp_path / f"cut{n}.jsonl"
        cut.write_bytes(data[:at])
        Path(path_of(str(cut))).write_bytes(idx)
        out = finish(cut, 140)
        assert out.state == "DONE" and [c.step for c in out.checkpoints] == list(range(140)), at
        assert replay(cut).state == "DONE"


def damage(trace: Path, at: int) -> None:
    data = bytearray(trace.read_bytes())
    data[at] ^= 0x01
    trace.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "spoil",
    [
        lambda idx: idx[:-1],  # torn
        lambda idx: idx[:-30] + b"!" + idx[-29:],  # a damaged trailer
        lambda idx: idx[:10] + b"\x07" + idx[11:],  # an entry changed: the size still fits, the trailer too
        lambda idx: idx[ENTRY : 2 * ENTRY] + idx[:ENTRY] + idx[2 * ENTRY :],  # two entries swapped: real lines
        lambda idx: idx[ENTRY : 2 * ENTRY] * 2 + idx[2 * ENTRY :],  # an entry leads to another checkpoint's lines
        lambda idx: idx[:ENTRY] + bytes(ENTRY) + idx[2 * ENTRY :],  # a page lost: zeros
        lambda idx: b"",
    ],
)
def test_a_damaged_index_is_ignored_or_routed_around(trace: Path, spoil: Any) -> None:
    crashed(trace, 200, 150)
    idx = Path(path_of(str(trace)))
    idx.write_bytes(spoil(idx.read_bytes()))
    mark = load(str(trace))
    point = resume_point(str(trace))
    if mark is None:  # ignored: resume read the whole trace
        assert point.tail.since == 0 and state(point) == state(replay(trace))
    else:  # an entry points elsewhere: its lines do not check, the positions come from a full read
        assert point.tail.since == mark.end
        assert list(point.checkpoints) == list(replay(trace).checkpoints)
        again = resume_point(str(trace))
        assert [again.checkpoints[i].step for i in (0, 1, 2, -1)] == [0, 1, 2, len(again.checkpoints) - 1]
    out = finish(trace, 200)
    assert out.state == "DONE" and [c.step for c in out.checkpoints] == list(range(200))
    assert [c.result["i"] for c in out.checkpoints] == list(range(200))
    fresh = load(str(trace))
    assert fresh is not None and fresh.checkpoints == 200 and resume_point(str(trace)).checkpoints[1].step == 1


def test_a_mark_that_does_not_match_the_trace_is_ignored(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    crashed(a, 200, 150)
    crashed(b, 200, 160)
    shutil.copy(path_of(str(a)), path_of(str(b)))  # another run's index: its lines are not where it says
    assert resume_point(str(b)).tail.since == 0 and state(resume_point(str(b))) == state(replay(b))
    mark = load(str(a))
    assert mark is not None
    damage(a, mark.end - 30)  # the marked line itself edited: its crc no longer matches, so the whole file is read
    with pytest.raises(TraceCorruption) as e:
        resume_point(str(a))
    assert e.value.reason == "checksum" and e.value.seq == mark.seq
    c = tmp_path / "c.jsonl"
    crashed(c, 200, 150)
    os.truncate(c, load(str(c)).end - 100)  # type: ignore[union-attr]  # stale: the marked line is gone
    assert resume_point(str(c)).tail.since == 0


def test_a_mark_naming_a_rejected_attempts_lines_is_not_trusted(trace: Path) -> None:
    """The result a mark names must be the one its checkpoint vouches for by position, not an earlier attempt's."""
    rejected: set[int] = set()

    def verify(step: Step, result: Any) -> bool:
        if result["i"] == 39 and 39 not in rejected:  # the last step's first attempt is rejected, then retried
            rejected.add(39)
            return False
        return True

    def plan(goal: Any, progress: Any) -> Step | None:
        return None if len(progress) >= 40 else Step(f"s{len(progress)}", "work", {"i": len(progress)})

    Executor(planner=plan, tools={"work": lambda i: {"i": i, "pad": "x" * 3000}}, verifier=verify, trace=trace).run("g")
    mark = load(str(trace))
    assert mark is not None and mark.step == 39
    data = trace.read_bytes()
    starts = [0, *(i + 1 for i, c in enumerate(data) if c == 10)][:-1]
    records = [orjson.loads(data[o : data.index(b"\n", o)]) for o in starts]

    def pos(i: int) -> tuple[int, int, int]:
        o = starts[i]
        return o, data.index(b"\n", o) + 1 - o, int(data[o - 11 : o - 3], 16)

    first = [i for i, r in enumerate(records) if r.get("step") == 39 and r["kind"] == "transition"]
    first = [i for i in first if "attempt" not in records[i]]
    intent, result = (next(i for i in first if records[i]["to"] == to) for to in ("ACT", "VERIFY"))
    forged = dataclasses.replace(mark, intent=pos(intent), result=pos(result))  # attempt 1's: rejected
    idx = Path(path_of(str(trace)))
    idx.write_bytes(idx.read_bytes()[: mark.checkpoints * ENTRY] + forged.encode())  # its trailer's crc is right
    point = resume_point(str(trace))
    assert (
        point.tail.since == 0 and point.tail.intent is not None and point.tail.intent["attempt"] == 2
    )  # read whole, not trusted
    assert point.tail.result_seq == records[result]["seq"] + 3


def test_what_resume_trusts_and_what_catches_an_edit_behind_its_back(trace: Path) -> None:
    """An edit before the mark, same length: resume does not read it; replay() does, and so does progress[i]."""
    crashed(trace, 200, 150)
    mark = load(str(trace))
    assert mark is not None
    data = trace.read_bytes()
    result_5 = data.index(b'"to":"VERIFY","step":5,')
    damage(trace, data.index(b'"pad":"', result_5) + 20)  # inside step 5's result: same length, one bit
    point = resume_point(str(trace))
    assert point.tail.since == mark.end  # trusted: the prefix is not read again
    assert point.checkpoints[6].step == 6
    with pytest.raises(TraceCorruption) as at:
        point.checkpoints[5]  # decoded on access: its result's line does not check, and a full read says why
    assert at.value.reason == "checksum"
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert e.value.reason == "checksum"
    crossing = data.index(b'"kind":"crossing"', data.index(b'"step":40,'))
    damage(trace, crossing + 60)  # a line no checkpoint reads: only a full read sees it
    assert finish(trace, 200).state == "DONE"  # the planner never read checkpoint 5
    with pytest.raises(TraceCorruption):
        replay(trace)


def test_a_blob_result_before_the_mark_is_read_and_checked_on_access(trace: Path) -> None:
    crashed(trace, 200, 150, blob_threshold=500)  # every result (~650 bytes) in a blob
    mark = load(str(trace))
    assert mark is not None and len(mark.blobs) == 150
    point = resume_point(str(trace))
    assert point.tail.since == mark.end and state(point) == state(replay(trace))
    assert point.checkpoints[7].result == {"i": 7, "pad": PAD}
    out = finish(trace, 200, blob_threshold=500)
    assert out.state == "DONE" and replay(trace).sealed  # the seal lists the blobs named before the mark too
    assert len(harness.verify(trace).problems) == 0
    digest = next(name for name, (_, line) in replay(trace).tail.blobs.items() if line < 30)
    blob = trace.parent / "blobs" / digest
    blob.write_bytes(blob.read_bytes().replace(b'"i":', b'"j":'))  # same size, other bytes
    fresh = resume_point(str(trace))
    with pytest.raises(TraceCorruption) as e:
        [c.result for c in fresh.checkpoints[:10]]
    assert e.value.reason == "blob"


def test_a_run_with_agents_is_resumed_from_its_last_mark_before_them(trace: Path) -> None:
    crashed(trace, 300, 250, parallel_at=200)
    mark = load(str(trace))
    assert mark is not None and mark.checkpoints <= 200  # no mark once the run spawned
    point = resume_point(str(trace))
    assert state(point) == state(replay(trace))
    out = finish(trace, 300, parallel_at=200)
    assert out.state == "DONE" and [c.step for c in out.checkpoints] == list(range(300))


def test_a_new_run_at_a_path_drops_the_old_index(trace: Path) -> None:
    crashed(trace, 200, 150)
    assert os.path.exists(path_of(str(trace)))
    trace.unlink()
    Executor(planner=planner(3), tools={"work": work_until(None)}, trace=trace).run("g")
    assert not os.path.exists(path_of(str(trace)))  # a short trace needs none: it is read whole


def test_resumed_progress_reads_like_progress_and_refuses_changes(trace: Path) -> None:
    crashed(trace, 200, 150)
    seen: dict[str, Any] = {}

    def plan(goal: Any, progress: Any) -> Step | list[Step] | None:
        if not seen:
            seen["len"], seen["neg"], seen["slice"] = len(progress), progress[-151].step, progress[-2:]
            seen["copies"] = [copy.copy(progress), copy.deepcopy(progress), pickle.loads(pickle.dumps(progress))]
            seen["eq"] = progress == list(progress) and progress == tuple(progress) and progress != list(progress)[:-1]
            for change in (lambda p: p.append(1), lambda p: p.__setitem__(0, 1), lambda p: p.pop(), lambda p: p.sort()):
                with pytest.raises(TypeError, match="read only"):
                    change(progress)
            with pytest.raises(IndexError):
                progress[len(progress)]  # the read is the test
        return planner(200)(goal, progress)

    out = Executor(planner=plan, tools={"work": work_until(None)}, trace=trace, resume=True).run("g")
    assert out.state == "DONE"
    assert seen["len"] == 151 and seen["neg"] == 0 and [c.step for c in seen["slice"]] == [149, 150]
    assert all(type(c) is list and [x.step for x in c] == list(range(151)) for c in seen["copies"])
    assert seen["eq"] is True


def test_a_sigkilled_run_is_resumed_from_its_index(tmp_path: Path, trace: Path) -> None:
    marker = tmp_path / "inside"
    assert kill_in_call(trace, marker, steps=400, at=300, pad=600) == -signal.SIGKILL
    mark = load(str(trace))  # written as the run went (every INTERVAL bytes), not at its end: there was none
    assert mark is not None and 200 < mark.checkpoints < 300
    assert trace.stat().st_size - mark.end < 3 * INTERVAL
    point = resume_point(str(trace))
    assert point.tail.since == mark.end and point.state == "ACT" and state(point) == state(replay(trace))

    def plan(goal: Any, progress: Any) -> Step | None:
        return None if len(progress) >= 400 else Step(f"s{len(progress)}", "work", {"i": len(progress)})

    out = Executor(planner=plan, tools={"work": work_until(None)}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and [c.result["i"] for c in out.checkpoints] == list(range(400))
    assert replay(trace).state == "DONE" and replay(trace).sealed


@pytest.mark.parametrize("seed", range(6))
def test_power_loss_leaves_any_index_and_resume_still_finishes_exactly(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync mode: cut the trace back to one of its synced lengths, and the unsynced index anywhere."""
    import harness.trace.journal as journal_module

    rng = random.Random(seed)
    trace = tmp_path / "run.jsonl"
    synced: list[int] = []
    real = journal_module._fsync

    def spy(fd: int) -> None:
        real(fd)
        synced.append(os.fstat(fd).st_size)

    monkeypatch.setattr(journal_module, "_fsync", spy)
    crashed(trace, 260, 250, durability="fsync")
    monkeypatch.setattr(journal_module, "_fsync", real)
    idx = Path(path_of(str(trace)))
    data = idx.read_bytes()
    os.truncate(trace, rng.choice([s for s in synced if s > INTERVAL]))
    choice = rng.randrange(4)
    if choice == 0:  # torn anywhere
        idx.write_bytes(data[: rng.randrange(len(data))])
    elif choice == 1:  # an entry's page lost: zeros in the middle, trailer intact
        at = rng.randrange(0, max(1, len(data) - 600))
        idx.write_bytes(data[:at] + bytes(48) + data[at + 48 :])
    elif choice == 2:
        idx.unlink()
    out = finish(trace, 260, durability="fsync")
    assert out.state == "DONE" and [c.step for c in out.checkpoints] == list(range(260))
    assert [c.result["i"] for c in out.checkpoints] == list(range(260))
    assert state(resume_point(str(trace))) == state(replay(trace))


def test_a_run_paused_on_a_question_is_answered_from_its_mark(trace: Path) -> None:
    def plan(goal: Any, progress: Any) -> Step | list[Step] | None:
        if len(progress) == 150:
            harness.interrupt("go on?")  # the answer comes back here on resume
        return planner(200)(goal, progress)

    ex = Executor(planner=plan, tools={"work": work_until(None)}, trace=trace)
    assert ex.run("g").state == "PAUSED"
    mark = load(str(trace))
    assert mark is not None and mark.checkpoints == 150
    assert resume_point(str(trace)).tail.since == mark.end and state(resume_point(str(trace))) == state(replay(trace))
    out = Executor(planner=plan, tools={"work": work_until(None)}, trace=trace, resume=True).run("g", answer="yes")
    assert out.state == "DONE" and [c.result["i"] for c in out.checkpoints] == list(range(200))
    assert replay(trace).sealed


def test_harness_resume_reads_the_trace_from_the_mark_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """harness.resume() takes the goal and the rules from the header line alone: the resume reads from the mark."""
    trace = tmp_path / "r.jsonl"
    n = [0]

    def planner(goal: Any, done: Any) -> Step | None:
        if len(done) == 3000 and n[0] == 0:
            n[0] = 1
            raise KeyboardInterrupt  # the process dies after 3000 steps
        return Step(f"s{len(done)}", "t", {"i": len(done)}) if len(done) < 3001 else None

    with pytest.raises(KeyboardInterrupt):
        Executor(planner=planner, tools={"t": lambda i: {"i": i}}, trace=trace, max_steps=None).run("g")
    assert os.path.exists(f"{trace}.idx")
    scans: list[str] = []
    real = harness.trace.reader._scan

    def counted(path: str, f: Any, on_record: Any = None, origin: Any = None) -> Any:
        scans.append("full" if origin is None else "from-mark")
        return real(path, f, on_record, origin=origin) if origin is not None else real(path, f, on_record)

    monkeypatch.setattr(harness.trace.reader, "_scan", counted)
    monkeypatch.setattr(harness.trace.index, "_scan", counted)
    out = harness.resume(trace, planner=planner, tools={"t": lambda i: {"i": i}}, max_steps=None)
    assert out.state == "DONE" and scans == ["from-mark"]


def test_a_resumed_outcome_whose_trace_now_holds_another_run_says_so(tmp_path: Path) -> None:
    """Older checkpoints are read from the trace on access: a path given to another run since is refused, never read."""
    trace = tmp_path / "run.jsonl"

    def planner_of(tag: str, crash_at: list[int]) -> Any:
        def planner(goal: Any, done: Any) -> Step | None:
            if len(done) == crash_at[0]:
                crash_at[0] = -1
                raise KeyboardInterrupt
            return None if len(done) >= 300 else Step(f"s{len(done)}", "work", {"tag": tag, "pad": "x" * 300})

        return planner

    tools = {"work": lambda tag, pad: tag}
    with pytest.raises(KeyboardInterrupt):
        Executor(planner=planner_of("OLD", [250]), tools=tools, trace=trace).run("g")
    out = Executor(planner=planner_of("OLD", [-1]), tools=tools, trace=trace, resume=True).run("g")
    trace.unlink()
    Executor(planner=planner_of("NEW", [-1]), tools=tools, trace=trace).run("g")
    with pytest.raises(harness.HarnessError, match="no longer holds run"):
        out.checkpoints[0]
    assert out.checkpoints[-1].result == "OLD"  # written after the resume: held, not read from the file


# --- a mark that does not agree with the trace is ignored (issue 25) ---------------------------------


def refit(trace: Path, forged: Any, entries: bytes | None = None) -> None:
    """Write forged (a Mark) as trace's index, entries and trailer fitted so that the file loads (a careful forger)."""
    idx = Path(path_of(str(trace)))
    if entries is None:
        old = idx.read_bytes()
        entries = (old[: forged.checkpoints * ENTRY] + bytes(ENTRY) * forged.checkpoints)[: forged.checkpoints * ENTRY]
    idx.write_bytes(entries + forged.encode())


def calls_on_resume(trace: Path, n: int, **options: Any) -> tuple[list[int], harness.Outcome]:
    made: list[int] = []

    def work(i: int) -> dict[str, Any]:
        made.append(i)
        return {"i": i, "pad": PAD}

    out = Executor(planner=planner(n), tools={"work": work}, trace=trace, resume=True, **options).run("g")
    return made, out


@pytest.mark.parametrize("delta", [-100, -1, 1, 100])
def test_a_mark_whose_checkpoint_count_is_not_its_step_is_ignored(trace: Path, delta: int) -> None:
    """A count below its step made the resume repeat 1,195 calls; above it, skip steps and report too many."""
    crashed(trace, 300, 250)
    mark = load(str(trace))
    assert mark is not None and mark.checkpoints == mark.step + 1
    refit(trace, dataclasses.replace(mark, checkpoints=mark.checkpoints + delta))
    assert load(str(trace)) is None and resume_point(str(trace)).tail.since == 0  # the whole trace is read
    made, out = calls_on_resume(trace, 300)
    assert made == list(range(250, 300))  # the call that crashed, then the steps left: none repeated or skipped
    assert out.state == "DONE" and [c.step for c in out.checkpoints] == list(range(300))


def test_a_mark_listing_a_blob_no_line_names_is_ignored_and_the_seal_holds(trace: Path) -> None:
    """An extra blob in the mark made a genuine resumed run write a seal that replay() refused."""
    crashed(trace, 200, 150, blob_threshold=500)
    mark = load(str(trace))
    assert mark is not None and len(mark.blobs) == len(mark.named) == 150
    extra = harness.storage.blobs.put(
        str(trace.parent / "blobs"), b'"another run blob, in the shared folder"', sync_dir=False
    )
    forged = dataclasses.replace(mark, blobs=(*mark.blobs, extra), named=(*mark.named, mark.named[0]))
    refit(trace, forged, Path(path_of(str(trace))).read_bytes()[: mark.checkpoints * ENTRY])
    assert load(str(trace)) is not None  # it loads: the line it names does not name that blob
    assert resume_point(str(trace)).tail.since == 0
    swapped = dataclasses.replace(mark, named=(mark.named[1], mark.named[0], *mark.named[2:]))  # lines of others
    refit(trace, swapped, Path(path_of(str(trace))).read_bytes()[: mark.checkpoints * ENTRY])
    assert resume_point(str(trace)).tail.since == 0
    made, out = calls_on_resume(trace, 200, blob_threshold=500)
    assert made == list(range(150, 200)) and out.state == "DONE"
    rep = replay(trace)
    assert rep.sealed and extra not in rep.seal["digests"] and harness.verify(trace).ok  # type: ignore[index]


def test_a_mark_from_before_blob_lines_were_named_is_ignored(trace: Path) -> None:
    """A mark listing blobs without where they are named (an older index) is not used."""
    crashed(trace, 200, 150, blob_threshold=500)
    mark = load(str(trace))
    assert mark is not None
    refit(
        trace, dataclasses.replace(mark, named=()), Path(path_of(str(trace))).read_bytes()[: mark.checkpoints * ENTRY]
    )
    assert load(str(trace)) is None and resume_point(str(trace)).tail.since == 0
