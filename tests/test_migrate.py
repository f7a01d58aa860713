"""harness migrate against the real schema-1 bytes committed in tests/fixtures/schema1."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import in_process
import pytest

import harness
from harness import HarnessError, TraceCorruption, replay
from harness.testing import read_records, write_trace

FIXTURES = Path(__file__).parent / "fixtures" / "schema1"
TRACES = sorted(p.name for p in FIXTURES.glob("*.jsonl"))


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of the schema-1 fixtures (and the torn tail set aside beside one of them)."""
    for p in FIXTURES.iterdir():
        if p.suffix != ".py" and p.suffix != ".md":
            shutil.copy(p, tmp_path / p.name)
    return tmp_path


harness_cli = in_process.harness  # `harness ARGS`, the console script's main() called in this process


@pytest.mark.parametrize("name", TRACES)
def test_replay_of_a_schema_1_trace_names_the_migrate_command(old: Path, name: str) -> None:
    with pytest.raises(TraceCorruption) as e:
        replay(old / name)
    assert (e.value.reason, e.value.line) == ("schema", 1)
    assert f"harness migrate {old / name}" in str(e.value)


@pytest.mark.parametrize("name", TRACES)
def test_every_fixture_migrates_and_tells_the_same_story(old: Path, name: str) -> None:
    trace = old / name
    before = trace.read_bytes()
    v1 = read_records(trace)
    done = harness.migrate(trace)
    assert done.backup is not None and Path(done.backup).read_bytes() == before
    assert Path(done.backup).name.startswith(f"{name}.v1-backup-")
    rep = replay(trace)
    assert rep.header["schema"] == 2 and rep.run_id == v1[0]["run_id"] and rep.goal == v1[0]["goal"]
    assert rep.state == done.state
    # results and payloads are copied, never rewritten: the checkpoints hold the results v1's checkpoints held
    assert [(c.step, c.name, c.result) for c in rep.checkpoints] == [
        (r["step"], r["name"], r["result"]) for r in v1 if r["kind"] == "checkpoint"
    ]
    v1_crossings = [(r["boundary"], r["request"], r.get("response"), r["hash"]) for r in v1 if r["kind"] == "crossing"]
    v2 = read_records(trace)
    assert v1_crossings == [
        (r["boundary"], r["request"], r.get("response"), r["hash"]) for r in v2 if r["kind"] == "crossing"
    ]
    assert len(v2) == len(v1) - 2 * sum(r["kind"] == "checkpoint" for r in v1)  # three records of a step become one
    assert rep.resumes == sum(r["kind"] == "resume" for r in v1)
    assert not rep.sealed  # migration does not seal: `harness seal` does
    again = harness.migrate(trace)
    assert again.backup is None and trace.read_bytes() == (old / name).read_bytes()


def test_a_migrated_fork_child_still_names_the_branch_its_parent_has(old: Path) -> None:
    harness.migrate(old / "fork_parent.jsonl")
    harness.migrate(old / "fork_child.jsonl")
    child = replay(old / "fork_child.jsonl")
    branch = child.header["branch"]
    parent = {c.seq: c for c in replay(old / "fork_parent.jsonl").crossings}
    assert parent[branch].kind == "llm"  # the parent's crossing at the renumbered seq is the one forked
    forked = next(c for c in child.crossings if c.seq == branch)
    assert (forked.request, forked.response) == (parent[branch].request, "another query")


def test_a_migrated_paused_run_keeps_its_reconcile_pointing_at_the_intent(old: Path) -> None:
    harness.migrate(old / "paused.jsonl")
    records = read_records(old / "paused.jsonl")
    (rec,) = [r for r in records if r["kind"] == "reconcile"]
    intent = records[rec["op"] - 1]
    assert (intent["kind"], intent["to"], intent["tool"]) == ("transition", "ACT", "work")


def test_a_migrated_run_can_be_sealed_and_verified(old: Path) -> None:
    trace = old / "happy.jsonl"
    harness.migrate(trace)
    assert harness_cli("verify", trace).returncode == 1  # intact, not sealed
    sealed = harness_cli("seal", trace)
    assert sealed.returncode == 0, sealed.stderr
    out = harness_cli("verify", trace)
    assert out.returncode == 0 and "sealed and intact" in out.stdout


def test_migrate_and_seal_keep_a_private_trace_private(old: Path) -> None:
    """Both replace the file: the new one keeps the old one's permissions (traces hold what redaction missed)."""
    trace = old / "happy.jsonl"
    trace.chmod(0o600)
    harness.migrate(trace)
    assert stat.S_IMODE(trace.stat().st_mode) == 0o600
    harness.seal(trace)
    assert stat.S_IMODE(trace.stat().st_mode) == 0o600


def test_the_cli_migrates_and_says_where_the_backup_is(old: Path) -> None:
    trace = old / "failed.jsonl"
    out = harness_cli("migrate", trace)
    assert out.returncode == 0, out.stderr
    assert "from schema 1 to 2" in out.stdout and ".v1-backup-" in out.stdout and "harness seal" in out.stdout
    assert harness_cli("migrate", trace).stdout.strip().endswith("already schema 2; nothing to do")


def test_a_failed_migration_leaves_the_original_byte_identical(old: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.trace.migrate as m

    trace = old / "crash_resume.jsonl"
    before = trace.read_bytes()

    def broken(tmp: str) -> None:
        raise HarnessError("injected: the check failed")

    monkeypatch.setattr(m, "_check", broken)
    with pytest.raises(HarnessError, match="original is unchanged"):
        harness.migrate(trace)
    assert trace.read_bytes() == before
    assert not list(old.glob(".*.tmp")) and not list(old.glob("*.v1-backup-*"))  # the temporary file is gone too


def test_a_migration_refused_by_replay_leaves_no_backup(old: Path) -> None:
    """A header whose tools replay() refuses: the migration is refused, and it left a `.v1-backup-*` beside, before."""
    trace = old / "happy.jsonl"
    rewritten(trace, 1, lambda r: {**r, "tools": {"search": {"effect": "bogus", "version": None}}})
    before = trace.read_bytes()
    cli = harness_cli("migrate", trace)
    assert cli.returncode != 0 and "Traceback" not in cli.stderr and "does not replay" in cli.stderr
    assert "no backup was kept" in cli.stderr
    assert trace.read_bytes() == before
    assert sorted(p.name for p in old.iterdir() if p.name.startswith("happy")) == ["happy.jsonl"]


def test_a_ctrl_c_as_the_migrated_trace_is_renamed_keeps_the_backup(old: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a KeyboardInterrupt landing right after the rename (the migrated trace in place) ran the clean-up of a
    refused migration, which removed the backup: the only copy of the original was gone."""
    import os
    import signal

    import harness.trace.migrate as m

    trace = old / "paused.jsonl"
    before = trace.read_bytes()
    rename = os.replace

    def renamed_then_interrupted(src: str, dst: str) -> None:
        rename(src, dst)
        if os.fspath(dst) == str(trace):
            signal.raise_signal(signal.SIGINT)  # a real Ctrl-C, at the first instruction after the rename

    monkeypatch.setattr(m.os, "replace", renamed_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        harness.migrate(trace)
    (backup,) = old.glob("paused.jsonl.v1-backup-*")
    assert backup.read_bytes() == before and replay(trace).state  # the original kept; the trace is migrated


KILL = """
import os, signal, sys
import harness.trace.migrate as m
def die(tmp):
    os.kill(os.getpid(), signal.SIGKILL)  # after the migrated file is written, before it is renamed
m._check = die
m.migrate(sys.argv[1])
"""


def test_a_migration_killed_before_its_rename_leaves_the_original_byte_identical(old: Path) -> None:
    trace = old / "paused.jsonl"
    before = trace.read_bytes()
    done = subprocess.run([sys.executable, "-c", KILL, str(trace)], timeout=60)
    assert done.returncode == -9
    assert trace.read_bytes() == before and not list(old.glob("*.v1-backup-*"))  # killed before a backup was due
    assert harness.migrate(trace).backup is not None  # and it can be migrated afterwards


def test_a_damaged_schema_1_trace_is_refused_untouched(old: Path) -> None:
    trace = old / "happy.jsonl"
    data = bytearray(trace.read_bytes())
    data[300] ^= 1
    trace.write_bytes(bytes(data))
    with pytest.raises(TraceCorruption) as e:
        harness.migrate(trace)
    assert e.value.reason == "checksum" and trace.read_bytes() == bytes(data)
    assert not list(old.glob("happy.jsonl.v1-backup-*"))


def test_a_torn_tail_is_left_in_the_backup(old: Path) -> None:
    trace = old / "happy.jsonl"
    lines = trace.read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:10]) + lines[10][:30])
    done = harness.migrate(trace)
    assert done.torn_bytes == 30 and done.backup is not None
    assert Path(done.backup).read_bytes().endswith(lines[10][:30])
    assert not replay(trace).torn_tail


def test_migrate_out_carries_the_torn_files_the_trace_names(old: Path, tmp_path: Path) -> None:
    """Before: `migrate --out` of a trace whose resume set a torn tail aside always failed (the copy's
    check found no .torn-N beside it). Now the .torn-N goes with it, beside the new trace, never over a file."""
    trace, torn = old / "crash_resume.jsonl", old / "crash_resume.jsonl.torn-1"
    for out in (tmp_path / "elsewhere" / "new.jsonl", old / "new.jsonl"):  # another folder, and the same one
        out.parent.mkdir(exist_ok=True)
        done = harness_cli("migrate", trace, "--out", out)
        assert done.returncode == 0, done.stderr
        assert replay(out).state == "DONE" and (out.parent / torn.name).read_bytes() == torn.read_bytes()
    clash = tmp_path / "clash"
    clash.mkdir()
    (clash / torn.name).write_bytes(b"someone else's bytes")
    refused = harness_cli("migrate", trace, "--out", clash / "new.jsonl")
    assert refused.returncode == 2 and "exists with other bytes" in refused.stderr, refused.stderr
    assert sorted(p.name for p in clash.iterdir()) == [torn.name]  # no trace, no temporary file left
    assert (clash / torn.name).read_bytes() == b"someone else's bytes"
    with pytest.raises(HarnessError, match="a run on object storage cannot keep"):
        harness.migrate(trace, out="memory://bucket/runs/new.jsonl")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"  # (tmp_path is the fixtures' folder)
    outside.mkdir()
    (outside / "x").write_bytes(torn.read_bytes())
    torn.unlink()
    torn.symlink_to(outside / "x")  # a torn file is read as every file beside a trace
    with pytest.raises(HarnessError, match="outside"):
        harness.migrate(trace, out=tmp_path / "third.jsonl")


# --- what migrate refuses (issue 25) -------------------------------------------------------------


def rewritten(trace: Path, line: int, change: Any) -> bytes:
    """trace with record `line` changed by change(record) (a dict, or None to keep it), its chain recomputed."""
    records = read_records(trace)
    records[line - 1] = change(dict(records[line - 1]))
    write_trace(trace, records)
    return trace.read_bytes()


def refused_untouched(old: Path, trace: Path, line: int, reason: str) -> None:
    """migrate() raises TraceCorruption naming the line; the file is as it was, no backup or temporary file left."""
    before = trace.read_bytes()
    with pytest.raises(TraceCorruption) as e:
        harness.migrate(trace)
    assert (e.value.line, e.value.reason) == (line, reason), e.value
    assert trace.read_bytes() == before
    assert not list(old.glob("*.v1-backup-*")) and not list(old.glob(".*.tmp"))
    cli = harness_cli("migrate", trace)
    assert cli.returncode != 0 and "Traceback" not in cli.stderr and f":{line}: {reason}" in cli.stderr
    assert trace.read_bytes() == before and not list(old.glob("*.v1-backup-*"))


@pytest.mark.parametrize("forged", [{"paid": True}, {"paid": 1.0}, {"paid": "1"}, {"paid": 1, "to": "x"}])
def test_a_checkpoint_that_does_not_vouch_exactly_is_not_migrated(old: Path, forged: Any) -> None:
    """{"paid": true} == {"paid": 1} in Python: it was migrated, and the checkpoint's own value was lost."""
    trace = old / "paused.jsonl"
    line = next(
        n for n, r in enumerate(read_records(trace), 1) if r["kind"] == "checkpoint" and r["result"] == {"paid": 1}
    )
    rewritten(trace, line, lambda r: {**r, "result": forged})
    refused_untouched(old, trace, line, "unvouched-checkpoint")


@pytest.mark.parametrize(
    ("name", "kind", "change", "reason"),
    [
        ("happy.jsonl", "transition", lambda r: {k: v for k, v in r.items() if k != "kind"}, "malformed"),
        ("happy.jsonl", "transition", lambda r: {k: v for k, v in r.items() if k != "to"}, "malformed"),
        ("happy.jsonl", "transition", lambda r: {**r, "to": 7}, "malformed"),
        ("happy.jsonl", "checkpoint", lambda r: {k: v for k, v in r.items() if k != "result"}, "unvouched-checkpoint"),
        ("paused.jsonl", "reconcile", lambda r: {**r, "op": 999}, "bad-reconcile"),  # points nowhere
        ("paused.jsonl", "reconcile", lambda r: {**r, "op": "8"}, "bad-reconcile"),
        ("paused.jsonl", "reconcile", lambda r: {**r, "op": -1}, "bad-reconcile"),
    ],
)
def test_a_malformed_schema_1_record_is_named_with_its_line(
    old: Path, name: str, kind: str, change: Any, reason: str
) -> None:
    """A raw KeyError with a traceback, and a backup left behind, before."""
    trace = old / name
    line = next(n for n, r in enumerate(read_records(trace), 1) if r["kind"] == kind and n > 2)
    rewritten(trace, line, change)
    refused_untouched(old, trace, line, reason)
