"""Files that are not traces or cannot be read, odd names, and the `.torn-N` siblings (issue 15).

Readers open a trace with O_NONBLOCK and check it is a regular file before
reading, so a FIFO never blocks them; a read error after the open is a
HarnessError naming the file. Set-aside copies appear whole under a
`.torn-N` name that nothing held, and are named in the trace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from children import ZYGOTE, Forked

import harness
from harness import Executor, HarnessError, Tool, TraceCorruption, TraceUnreadable
from harness.review.runs import run_info
from harness.testing import counter, fixed_plan, power_cut, read_records, steps

HARNESS = shutil.which("harness") or str(Path(sys.executable).parent / "harness")


def cli(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARNESS, *map(str, args)], capture_output=True, text=True, timeout=60)


def run(trace: Path, tool: Any = None, *, resume: bool = False, n: int = 3) -> harness.Outcome:
    return Executor(planner=fixed_plan(steps(n)), tools={"work": tool or counter()}, trace=trace, resume=resume).run(
        "g"
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    os.mkfifo(path)
    return path


def test_a_fifo_is_refused_before_any_read(fifo: Path) -> None:
    """Before: replay(), `harness replay` and a resume blocked forever on the open or the first read."""
    with pytest.raises(HarnessError, match=r"run\.jsonl: is a FIFO \(named pipe\), not a trace file"):
        harness.replay(fifo)
    out = cli("replay", fifo)
    assert out.returncode == 2 and "FIFO" in out.stderr and "Traceback" not in out.stderr
    out = cli("replay", "--json", fifo)
    assert out.returncode == 2 and orjson.loads(out.stdout)["error"]["reason"] == "unreadable"
    with pytest.raises(TraceUnreadable, match="FIFO"):
        run(fifo, resume=True)
    for command in (["show"], ["show", "--golden"], ["diff", fifo]):  # each reads the trace through replay()
        out = cli(*command, fifo)
        assert out.returncode == 2 and "FIFO" in out.stderr and "Traceback" not in out.stderr, (command, out)
    with pytest.raises(HarnessError, match="not a regular file"):
        harness.reconcile(fifo, happened=False)
    assert run_info(str(fifo)).status == "unreadable"


def test_a_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="/dev/null: is a character device, not a trace file"):
        harness.replay("/dev/null")
    assert cli("replay", "/dev/null").returncode == 2


@pytest.mark.skipif(
    not os.path.exists("/proc/self/mem"), reason="needs Linux /proc: reading /proc/self/mem at 0 is EIO"
)
def test_a_read_error_is_a_harness_error_naming_the_file() -> None:
    with pytest.raises(HarnessError, match=r"/proc/self/mem: read failed: Input/output error"):
        harness.replay("/proc/self/mem")
    out = cli("replay", "/proc/self/mem")
    assert out.returncode == 2 and "read failed" in out.stderr and "Traceback" not in out.stderr


def test_records_read_after_replay_report_a_swapped_file(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    run(trace)
    rep = harness.replay(trace)
    trace.unlink()
    os.mkfifo(trace)
    with pytest.raises(HarnessError, match="FIFO"):
        list(rep.checkpoints)


def test_runs_json_shows_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    name = os.fsdecode(b"caf\xe9-\xff.jsonl")  # Latin-1 bytes, not UTF-8
    run(folder / name)
    out = cli("runs", "--json", folder)
    assert out.returncode == 0, out.stderr
    [shown] = orjson.loads(out.stdout)
    assert shown["path"].endswith("caf\\xe9-\\xff.jsonl") and shown["status"] == "done"
    assert cli("runs", folder).returncode == 0  # the table form, as before


def test_a_fifo_in_the_runs_folder_is_listed_unreadable(tmp_path: Path) -> None:
    run(tmp_path / "good.jsonl")
    os.mkfifo(tmp_path / "pipe.jsonl")
    assert run_info(str(tmp_path / "pipe.jsonl")).status == "unreadable"
    out = cli("runs", "--json", tmp_path)
    assert out.returncode == 0 and [r["status"] for r in orjson.loads(out.stdout)] == ["done"]


# --- set-aside siblings -----------------------------------------------------------------------------


def crashed_with_tail(trace: Path, tail: bytes) -> bytes:
    with pytest.raises(RuntimeError):
        run(trace, power_cut(at=2))
    trace.write_bytes(trace.read_bytes() + tail)
    return tail


def test_a_dangling_symlink_at_torn_1_is_skipped_not_deleted(tmp_path: Path) -> None:
    """Before: resume deleted the symlink and failed with `File exists`."""
    trace = tmp_path / "run.jsonl"
    tail = crashed_with_tail(trace, b'{"seq":7,"kind":"tra')
    link = tmp_path / "run.jsonl.torn-1"
    link.symlink_to(tmp_path / "nowhere")
    assert run(trace, resume=True).state == "DONE"
    assert link.is_symlink() and os.readlink(link) == str(tmp_path / "nowhere")
    assert (tmp_path / "run.jsonl.torn-2").read_bytes() == tail
    assert [r["set_aside"] for r in read_records(trace) if r["kind"] == "resume"] == ["run.jsonl.torn-2"]


def test_a_symlink_to_a_file_at_torn_1_is_left_alone(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    tail = crashed_with_tail(trace, b'{"seq":7')
    target = tmp_path / "precious.txt"
    target.write_bytes(b'{"seq":7')  # even holding the very bytes: harness did not make it
    (tmp_path / "run.jsonl.torn-1").symlink_to(target)
    assert run(trace, resume=True).state == "DONE"
    assert target.read_bytes() == tail and (tmp_path / "run.jsonl.torn-2").read_bytes() == tail


def test_set_aside_leaves_only_named_siblings(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crashed_with_tail(trace, b'{"seq":7,"kind"')
    assert run(trace, resume=True).state == "DONE"
    named = {r["set_aside"] for r in read_records(trace) if r["kind"] == "resume"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl", "run.jsonl.torn-1"]  # no temporary file
    assert named == {"run.jsonl.torn-1"}


def test_a_copy_placed_by_a_killed_resume_is_named_not_copied_again(tmp_path: Path) -> None:
    """A resume killed after placing `.torn-1` but before truncating: the next one names that copy."""
    trace = tmp_path / "run.jsonl"
    tail = crashed_with_tail(trace, b'{"seq":7,"kind":"transition"')
    (tmp_path / "run.jsonl.torn-1").write_bytes(tail)  # what the killed resume left
    (tmp_path / ".run.jsonl.torn-0123456789ab.tmp").write_bytes(tail[:5])  # and a killed copy, never a .torn-N
    assert run(trace, resume=True).state == "DONE"
    assert not (tmp_path / "run.jsonl.torn-2").exists()
    assert [r["set_aside"] for r in read_records(trace) if r["kind"] == "resume"] == ["run.jsonl.torn-1"]
    assert (tmp_path / ".run.jsonl.torn-0123456789ab.tmp").exists()  # not ours to delete: another writer's


def test_a_reconcile_names_the_torn_tail_it_sets_aside(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    pay = Tool(power_cut(at=1), idempotent=False)
    with pytest.raises(RuntimeError):
        Executor(planner=fixed_plan(steps(1, tool="pay")), tools={"pay": pay}, trace=trace).run("g")
    calm = {"pay": Tool(counter(), idempotent=False)}
    assert (
        Executor(planner=fixed_plan(steps(1, tool="pay")), tools=calm, trace=trace, resume=True).run("g").state
        == "PAUSED"
    )
    torn = b'{"seq":7,"kind":"reconc'  # a reconcile killed mid-write
    trace.write_bytes(trace.read_bytes() + torn)
    harness.reconcile(trace, happened=True, result={"i": 0}, evidence="receipt")
    said = read_records(trace)[-1]
    assert (said["kind"], said["set_aside"]) == ("reconcile", "run.jsonl.torn-1")
    assert (tmp_path / "run.jsonl.torn-1").read_bytes() == torn
    assert harness.replay(trace).tail.reconcile is not None
    out = Executor(planner=fixed_plan(steps(1, tool="pay")), tools=calm, trace=trace, resume=True).run("g")
    assert out.state == "DONE"


def test_a_trace_whose_sibling_was_deleted_says_how_to_recover(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    crashed_with_tail(trace, b'{"seq":7')
    run(trace, resume=True)
    (tmp_path / "run.jsonl.torn-1").unlink()
    with pytest.raises(TraceCorruption, match=r"bad-resume.*Put the file back"):
        harness.replay(trace)
    (tmp_path / "run.jsonl.torn-1").write_bytes(b"")
    assert harness.replay(trace).state == "DONE"


def test_a_resume_killed_after_its_record_before_the_cut_leaves_a_torn_tail(tmp_path: Path) -> None:
    """The resume record is written over the torn tail, then the file cut after it: killed in between,
    the rest of the old tail follows the record as a new torn tail, which the next resume names too."""
    trace = tmp_path / "run.jsonl"
    tail = crashed_with_tail(trace, b'{"seq":7,"kind":"transition","from":"ACT","to":"VERIFY",' + b'"x"' * 200)
    rep = harness.replay(trace)
    aside = harness.trace.torn.set_aside(str(trace), rep.tail.end)
    assert aside is not None
    seam, _ = harness.trace.line.encode(
        {"seq": rep.last_seq + 1, "kind": "resume", "set_aside": "run.jsonl.torn-1", "env": {}, "ts": 1.5},
        rep.tail.crc,
    )
    trace.write_bytes(trace.read_bytes()[: rep.tail.end] + seam + tail[len(seam) :])  # the pwrite done, the cut not
    rest = harness.replay(trace)
    assert rest.torn_tail and rest.resumes == 1
    assert run(trace, resume=True).state == "DONE"
    names = [r["set_aside"] for r in read_records(trace) if r["kind"] == "resume"]
    assert names == ["run.jsonl.torn-1", "run.jsonl.torn-2"]
    assert (tmp_path / "run.jsonl.torn-1").read_bytes() == tail
    assert (tmp_path / "run.jsonl.torn-2").read_bytes() == tail[len(seam) :]


CHILD = """
import sys, time
from harness import Executor
from harness.testing import counter, fixed_plan, steps
trace, ready, done = sys.argv[1:]
open(ready, "w").close()
Executor(planner=fixed_plan(steps(3)), tools={"work": counter()}, trace=trace, resume=True).run("g")
open(done, "w").close()
time.sleep(600)  # wait to be killed, so that the pid is never reused
"""


def test_kills_during_set_aside_leave_every_torn_file_named(tmp_path: Path) -> None:
    """SIGKILL at random moments of resumes that set a 4 MB torn tail aside (issue 15: before, killed
    copies were left as `.torn-N` files that no record named). Then a clean resume: every `.torn-N`
    on disk is named by a record, and the tail is whole in the first one. The resumes run in processes
    forked from the zygote (tests/children.py), harness imported: the kills fall after that anyway."""
    import random
    import signal
    import time

    master = tmp_path / "master.jsonl"
    tail = crashed_with_tail(master, b'{"seq":7,"kind":"transition","x":"' + b"y" * (4 << 20))
    rng = random.Random(15)

    def until(marker: Path, proc: Forked) -> float:
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.001)
        return time.monotonic()

    def child(folder: Path) -> tuple[Forked, float]:
        shutil.copy(master, folder / "run.jsonl")
        args = [str(folder / name) for name in ("run.jsonl", "ready", "done")]
        proc = ZYGOTE.Popen([sys.executable, "-c", CHILD, *args], stderr=subprocess.PIPE)
        return proc, until(folder / "ready", proc)

    calibrate = tmp_path / "calibrate"
    calibrate.mkdir()
    proc, started = child(calibrate)
    span = until(calibrate / "done", proc) - started
    proc.kill()
    proc.wait()
    for k in range(12):
        folder = tmp_path / f"kill-{k}"
        folder.mkdir()
        proc, started = child(folder)
        time.sleep(rng.uniform(0, span))
        os.kill(proc.pid, signal.SIGKILL)  # alive until killed: its pid is its own
        proc.communicate()
        trace = folder / "run.jsonl"
        harness.replay(trace)  # whatever the moment: a valid trace, a torn tail at most
        assert run(trace, resume=True).state == "DONE"
        named = {r.get("set_aside") for r in read_records(trace) if r["kind"] in ("resume", "reconcile")}
        on_disk = {p.name for p in folder.iterdir() if ".torn-" in p.name and not p.name.endswith(".tmp")}
        assert on_disk <= named, f"kill {k} after {span:.3f} s: unnamed {sorted(on_disk - named)}"
        assert (folder / "run.jsonl.torn-1").read_bytes() == tail
