"""Sealed records: blobs, the seal and verify, artifacts, annotations, export and import bundles."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

import harness
from harness import BundleError, Executor, HarnessError, Step, TraceCorruption, replay
from harness.testing import FakeLLM, fixed_plan, read_records, steps
from harness.trace.journal import encode

BIG = "x" * 100_000


def cli(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *map(str, args)], capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def big_planner(model: FakeLLM) -> Callable[[Any, list[Any]], Step | None]:
    """A planner that asks model for 100 kB at each of two steps, then leaves a report."""

    def plan(goal: Any, done: list[Any]) -> Step | None:
        if len(done) == 2:
            harness.artifact("report.md", f"# {len(done)} steps\n")
            return None
        harness.llm(len(done), model)
        return Step(f"s{len(done)}", "work", {"i": len(done)})

    return plan


def big_run(folder: Path, *, name: str = "run.jsonl", threshold: int = 64 * 1024, **options: Any) -> Path:
    """A run whose tool returns 100 kB, whose planner asks a model for 100 kB, and which leaves a report."""
    plan = big_planner(FakeLLM(lambda request: {"answer": BIG, "n": request}))
    trace = folder / name
    tools = {"work": lambda i: {"i": i, "page": BIG}}
    Executor(planner=plan, tools=tools, trace=trace, blob_threshold=threshold, **options).run("g")
    return trace


# --- blobs ----------------------------------------------------------------------------------


def test_large_payloads_go_to_blobs_and_read_back_as_if_inline(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    assert trace.stat().st_size < 10_000  # 4 payloads of 100 kB are not in the trace
    blobs = sorted((tmp_path / "blobs").iterdir())
    rep = replay(trace)
    assert len(blobs) == len(rep.blobs) == 5  # 2 model answers, 2 tool results, 1 artifact
    assert [c.result for c in rep.checkpoints] == [{"i": 0, "page": BIG}, {"i": 1, "page": BIG}]
    assert [c.response for c in rep.crossings if c.kind == "llm"] == [{"answer": BIG, "n": 0}, {"answer": BIG, "n": 1}]
    (tmp_path / "inline").mkdir()
    inline = big_run(tmp_path / "inline", threshold=10**7)
    assert len(list((tmp_path / "inline" / "blobs").iterdir())) == 1  # the artifact only: payloads are inline
    # blobs or not, normalize, diff and goldens see the same run
    assert harness.normalize(trace) == harness.normalize(inline)
    assert harness.diff(trace, inline).equal


def test_identical_payloads_are_stored_once(tmp_path: Path) -> None:
    big_run(tmp_path, name="a.jsonl")
    big_run(tmp_path, name="b.jsonl")  # the same payloads, another run of the folder
    assert len(list((tmp_path / "blobs").iterdir())) == 5


@pytest.mark.parametrize("damage", ["missing", "altered", "resized"])
def test_a_missing_or_altered_blob_names_the_line_and_the_digest(tmp_path: Path, damage: str) -> None:
    trace = big_run(tmp_path)
    records = read_records(trace)
    line = next(r["seq"] for r in records if "blobs" in r and r["kind"] == "transition")
    digest = records[line - 1]["blobs"]["result"]["sha256"]
    blob = tmp_path / "blobs" / digest
    if damage == "missing":
        blob.unlink()
    elif damage == "altered":
        data = bytearray(blob.read_bytes())
        data[10] ^= 1
        blob.write_bytes(bytes(data))
    else:
        blob.write_bytes(blob.read_bytes() + b" ")
    with pytest.raises(TraceCorruption) as e:
        rep = replay(trace)  # the scan checks presence and size; the bytes are checked when read
        [c.result for c in rep.checkpoints]
    assert e.value.reason == "blob" and e.value.line == line and digest in str(e.value)
    out = cli("verify", trace)
    assert out.returncode == 1 and digest in out.stdout


def test_a_resumed_run_keeps_reading_and_sealing_its_blobs(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    calls: list[int] = []

    def work(i: int) -> dict[str, Any]:
        calls.append(i)
        if len(calls) == 2:
            raise RuntimeError("power cut")
        return {"i": i, "page": BIG}

    ex = Executor(planner=fixed_plan(steps(3)), tools={"work": work}, trace=trace)
    with pytest.raises(RuntimeError):
        ex.run("g")
    out = Executor(planner=fixed_plan(steps(3)), tools={"work": work}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and [c.result["i"] for c in out.checkpoints] == [0, 1, 2]
    rep = replay(trace)
    assert rep.sealed and rep.seal is not None and sorted(rep.seal["digests"]) == sorted(rep.blobs)
    assert len(rep.blobs) == 3


# --- the seal -------------------------------------------------------------------------------


def test_every_ended_run_is_sealed_and_verify_says_what_it_checked(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    last = read_records(trace)[-1]
    assert last["kind"] == "seal" and last["state"] == "DONE" and "hmac" not in last
    out = cli("verify", trace)
    assert out.returncode == 0, out.stdout
    assert "checksum chain" in out.stdout and "5 blobs" in out.stdout and "sealed and intact" in out.stdout


def test_a_keyed_seal_catches_a_rewrite_without_the_key(tmp_path: Path) -> None:
    trace = big_run(tmp_path, seal_key="secret")
    assert cli("verify", trace, "--key", "secret").returncode == 0
    assert cli("verify", trace, env={"HARNESS_SEAL_KEY": "secret"}).returncode == 0
    wrong = cli("verify", trace, "--key", "other")
    assert wrong.returncode == 1 and "does not match" in wrong.stdout
    assert cli("verify", trace).returncode == 1  # keyed, and no key to check it with
    # a forger changes an intent's args, recomputes every crc and the seal's content hash, but has no key
    records = read_records(trace)
    intent = next(r for r in records if r["kind"] == "transition" and r["to"] == "ACT")
    intent["args"] = {"i": 99}
    data, crc = b"", 0
    for r in records[:-1]:
        line, crc = encode({k: v for k, v in r.items() if k != "crc"}, crc)
        data += line
    blocks = [hashlib.sha256(data[i : i + 4 * 1024 * 1024]).digest() for i in range(0, len(data), 4 * 1024 * 1024)]
    seal = {**records[-1], "content_hash": hashlib.sha256(b"".join(blocks)).hexdigest()}  # docs/FORMAT.md, by hand
    line, _ = encode({k: v for k, v in seal.items() if k != "crc"}, crc)
    trace.write_bytes(data + line)
    assert replay(trace).sealed  # the checks without a key pass: a rewrite is no accident
    out = cli("verify", trace, "--key", "secret")
    assert out.returncode == 1 and "does not match" in out.stdout


def test_a_changed_byte_before_the_seal_is_caught_by_replay(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    records = read_records(trace)
    harness.testing.write_trace(trace, [*records[:-2], {**records[-2], "ts": 1.0}, records[-1]])  # crc recomputed
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert (e.value.reason, e.value.line) == ("seal", len(records))


def test_a_sealed_trace_is_immutable(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    before = trace.read_bytes()
    out = Executor(planner=fixed_plan([]), tools={"work": print}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and trace.read_bytes() == before  # resume is a no-op
    with pytest.raises(HarnessError, match="no uncertain operation"):
        harness.reconcile(trace, happened=False)
    trace.write_bytes(before + b'{"seq":99,"kind":"event"')
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert e.value.reason == "after-terminal" and "after the seal" in str(e.value)


def test_harness_seal_seals_an_ended_unsealed_run(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    lines = trace.read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:-1]))  # as a run written before seals existed ends
    assert not replay(trace).sealed
    assert cli("verify", trace).returncode == 1 and "NOT sealed" in cli("verify", trace).stdout
    out = cli("seal", trace, "--key", "k")
    assert out.returncode == 0 and "keyed" in out.stdout
    assert replay(trace).sealed and cli("verify", trace, "--key", "k").returncode == 0
    assert "already sealed" in cli("seal", trace).stdout


def test_an_unfinished_run_cannot_be_sealed(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    lines = trace.read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:5]))
    out = cli("seal", trace)
    assert out.returncode == 2 and "has not ended" in out.stderr and "Traceback" not in out.stderr


def test_verify_exit_codes(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    assert cli("verify", tmp_path / "notes.txt").returncode == 2
    assert cli("verify", tmp_path / "missing.jsonl").returncode == 2


# --- artifacts and annotations --------------------------------------------------------------


def test_an_artifact_is_a_blob_named_by_the_trace(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    (art,) = replay(trace).artifacts
    assert (art.name, art.read()) == ("report.md", b"# 2 steps\n")
    with pytest.raises(HarnessError, match="outside a run"):
        harness.artifact("x", b"data")


def test_an_artifact_from_a_path_or_inside_a_tool(tmp_path: Path) -> None:
    report = tmp_path / "report.bin"
    report.write_bytes(bytes(range(256)))

    def plan(goal: Any, done: list[Any]) -> Step | None:
        if done:
            harness.artifact("report.bin", report)
            return None
        return Step("s", "work", {})

    def work() -> int:
        harness.artifact("inside", b"no")
        return 1

    with pytest.raises(HarnessError, match="inside a tool"):
        Executor(planner=plan, tools={"work": work}, trace=tmp_path / "a.jsonl").run("g")
    Executor(planner=plan, tools={"work": lambda: 1}, trace=tmp_path / "b.jsonl").run("g")
    assert replay(tmp_path / "b.jsonl").artifacts[0].read() == bytes(range(256))


def test_annotations_live_beside_the_trace_and_leave_the_seal_intact(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    before = trace.read_bytes()
    harness.annotate(trace, "issue", {"number": 123})
    out = cli("annotate", trace, "--note", "reconciled by ops")
    assert out.returncode == 0, out.stderr
    assert [(n["key"], n["value"]) for n in harness.annotations(trace)] == [
        ("issue", {"number": 123}), ("note", "reconciled by ops"),
    ]  # fmt: skip
    assert trace.read_bytes() == before and cli("verify", trace).returncode == 0
    assert "reconciled by ops" in cli("show", trace).stdout
    with pytest.raises(HarnessError, match="no such trace"):
        harness.annotate(tmp_path / "nope.jsonl", "k", 1)


# --- export and import ----------------------------------------------------------------------


def test_export_import_export_gives_the_same_files(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    big_run(runs, name="a.jsonl")
    big_run(runs, name="b.jsonl")
    harness.annotate(runs / "a.jsonl", "note", "keep")
    out = cli("export", runs, "--all", "-o", tmp_path / "runs.zip")
    assert out.returncode == 0, out.stderr
    done = cli("import", tmp_path / "runs.zip", "--into", tmp_path / "other")
    assert done.returncode == 0, done.stderr
    assert cli("verify", tmp_path / "other" / "a.jsonl").returncode == 0
    assert harness.annotations(tmp_path / "other" / "a.jsonl")[0]["value"] == "keep"
    harness.export([tmp_path / "other" / "a.jsonl", tmp_path / "other" / "b.jsonl"], tmp_path / "again.zip")
    first, second = zipfile.ZipFile(tmp_path / "runs.zip"), zipfile.ZipFile(tmp_path / "again.zip")
    assert sorted(first.namelist()) == sorted(second.namelist())
    assert all(first.read(n) == second.read(n) for n in first.namelist())
    again = harness.import_bundle(tmp_path / "runs.zip", tmp_path / "other")  # the same files: nothing to do
    assert set(again.skipped) == set(again.files)


def test_export_refuses_an_unsealed_run_and_says_how_to_seal_it(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    trace.write_bytes(b"".join(trace.read_bytes().splitlines(keepends=True)[:-1]))
    out = cli("export", trace, "-o", tmp_path / "x.zip")
    assert out.returncode == 2 and f"harness seal {trace}" in out.stderr and not (tmp_path / "x.zip").exists()


def test_import_refuses_to_overwrite_a_differing_run(tmp_path: Path) -> None:
    big_run(tmp_path, name="a.jsonl")
    harness.export([tmp_path / "a.jsonl"], tmp_path / "a.zip")
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.jsonl").write_bytes(b"something else\n")
    with pytest.raises(BundleError, match="exists with other bytes"):
        harness.import_bundle(tmp_path / "a.zip", other)
    assert (other / "a.jsonl").read_bytes() == b"something else\n" and not (other / "blobs").exists()


def hostile(path: Path, entries: list[tuple[str, bytes]], *, manifest: list[dict[str, Any]] | None = None,
            symlink: str | None = None) -> Path:  # fmt: skip
    """A zip with these entries and a manifest that lists them truthfully (unless given one)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
        files = manifest if manifest is not None else [
            {"path": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for n, d in entries
        ]  # fmt: skip
        zf.writestr("manifest.json", orjson.dumps({"format": "harness-bundle", "version": 1, "files": files}))
    return path


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([("../evil.jsonl", b"x")], "unsafe path"),
        ([("/etc/evil.jsonl", b"x")], "unsafe path"),
        ([("runs/../../evil", b"x")], "unsafe path"),
        ([("C:/evil", b"x")], "unsafe path"),
    ],
)
def test_import_refuses_paths_outside_the_target(tmp_path: Path, entries: list[tuple[str, bytes]], why: str) -> None:
    with pytest.raises(BundleError, match=why):
        harness.import_bundle(hostile(tmp_path / "h.zip", entries), tmp_path / "into")
    assert not (tmp_path / "evil.jsonl").exists() and not any((tmp_path / "into").glob("*"))


@pytest.mark.parametrize(
    "name", ["sub/evil.jsonl", "notes.txt", "blobs/abc", "blobs/" + "0" * 64 + "/x", "other.jsonl.annotations.json"]
)
def test_import_refuses_anything_export_does_not_write(tmp_path: Path, name: str) -> None:
    """Only traces are replayed: a file of another shape (or a note for a run the bundle does not bring,
    which would show beside a local run) would land in the runs folder unchecked."""
    (tmp_path / "into").mkdir()
    Executor(planner=lambda g, p: None, tools={}, trace=tmp_path / "into" / "other.jsonl").run("g")
    before = sorted(p.name for p in (tmp_path / "into").iterdir())
    with pytest.raises(BundleError, match="not a file export writes"):
        harness.import_bundle(hostile(tmp_path / "h.zip", [(name, b'{"notes": []}')]), tmp_path / "into")
    assert sorted(p.name for p in (tmp_path / "into").iterdir()) == before


def test_import_refuses_a_symlink_entry(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not a regular file"):
        harness.import_bundle(hostile(tmp_path / "h.zip", [], symlink="link.jsonl"), tmp_path / "into")


def test_import_refuses_a_zip_bomb(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="zip bomb"):
        harness.import_bundle(hostile(tmp_path / "h.zip", [("blobs/" + "0" * 64, bytes(50 << 20))]), tmp_path / "i")
    with pytest.raises(BundleError, match="more than 1000 bytes"):
        harness.import_bundle(hostile(tmp_path / "s.zip", [("a.jsonl", b"y" * 2000)]), tmp_path / "i", max_bytes=1000)


def test_import_refuses_a_lying_manifest(tmp_path: Path) -> None:
    big_run(tmp_path, name="a.jsonl")
    good = tmp_path / "a.zip"
    harness.export([tmp_path / "a.jsonl"], good)
    with zipfile.ZipFile(good) as zf:
        entries = [(n, zf.read(n)) for n in zf.namelist() if n != "manifest.json"]
        listed = orjson.loads(zf.read("manifest.json"))["files"]
    trace = next(i for i, (n, _) in enumerate(entries) if n.endswith(".jsonl"))
    forged = [*entries]
    forged[trace] = (entries[trace][0], entries[trace][1].replace(b'"i":1', b'"i":7'))
    lying = [dict(f, size=len(forged[trace][1])) if f["path"] == entries[trace][0] else f for f in listed]
    with pytest.raises(BundleError, match="do not match the manifest"):
        harness.import_bundle(hostile(tmp_path / "l.zip", forged, manifest=lying), tmp_path / "into")
    with pytest.raises(BundleError, match="not in the manifest"):
        harness.import_bundle(
            hostile(tmp_path / "x.zip", [*entries, ("extra.txt", b"hi")], manifest=listed), tmp_path / "i"
        )
    with pytest.raises(BundleError, match="but not in the archive"):
        harness.import_bundle(hostile(tmp_path / "m.zip", entries[1:], manifest=listed), tmp_path / "i")
    dup = io.BytesIO()
    with zipfile.ZipFile(dup, "w") as zf, pytest.warns(UserWarning):
        zf.writestr("a.jsonl", b"1")
        zf.writestr("a.jsonl", b"2")
        zf.writestr("manifest.json", b"{}")
    (tmp_path / "d.zip").write_bytes(dup.getvalue())
    with pytest.raises(BundleError, match="twice"):
        harness.import_bundle(tmp_path / "d.zip", tmp_path / "i")
    assert not (tmp_path / "into" / "a.jsonl").exists() and not (tmp_path / "i" / "a.jsonl").exists()


def test_import_refuses_a_truncated_archive(tmp_path: Path) -> None:
    big_run(tmp_path, name="a.jsonl")
    harness.export([tmp_path / "a.jsonl"], tmp_path / "a.zip")
    data = (tmp_path / "a.zip").read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 100):
        (tmp_path / "t.zip").write_bytes(data[:cut])
        with pytest.raises(BundleError):
            harness.import_bundle(tmp_path / "t.zip", tmp_path / "into")
        assert not (tmp_path / "into" / "a.jsonl").exists()
    out = cli("import", tmp_path / "t.zip", "--into", tmp_path / "into")
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_a_torn_seal_is_a_torn_tail_that_resume_completes(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    ex = Executor(planner=fixed_plan(steps(2)), tools={"work": lambda i: i}, trace=trace)
    ex.run("g")
    lines = trace.read_bytes().splitlines(keepends=True)
    torn = lines[-1][:40]  # the writer died in the middle of the end's write: the end whole, its seal not
    trace.write_bytes(b"".join(lines[:-1]) + torn)
    rep = replay(trace)
    assert rep.torn_tail and rep.state == "DONE" and not rep.sealed
    out = Executor(planner=fixed_plan(steps(2)), tools={"work": lambda i: i}, trace=trace, resume=True).run("g")
    assert out.state == "DONE" and replay(trace).sealed and not replay(trace).torn_tail
    assert (tmp_path / "run.jsonl.torn-1").read_bytes() == torn
    assert read_records(trace)[-1]["set_aside"] == "run.jsonl.torn-1"  # the seal names where the torn one went
    assert cli("verify", trace).returncode == 0
    (tmp_path / "run.jsonl.torn-1").unlink()  # a seal naming a set-aside that is gone: as for a resume record
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert e.value.reason == "seal" and "run.jsonl.torn-1" in str(e.value)


@pytest.mark.parametrize("tail", [b'{"seq":99,"kind":"event"', b"garbage", b'{"seq":7,"kind":"transition"'])
def test_other_bytes_after_the_end_are_corruption_not_a_torn_tail(tmp_path: Path, tail: bytes) -> None:
    trace = tmp_path / "run.jsonl"
    Executor(planner=fixed_plan(steps(1)), tools={"work": lambda i: i}, trace=trace).run("g")
    lines = trace.read_bytes().splitlines(keepends=True)
    trace.write_bytes(b"".join(lines[:-1]) + tail)  # after PLAN -> DONE (seq 6), without its seal
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert (e.value.reason, e.value.line) == ("after-terminal", len(lines))


def test_an_import_that_fails_midway_lands_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big_run(tmp_path, name="a.jsonl")
    harness.export([tmp_path / "a.jsonl"], tmp_path / "a.zip")
    import harness.bundle as bundle

    moved: list[str] = []
    real = os.replace

    def failing(src: Any, dst: Any) -> None:
        if moved:  # the second rename fails, as a full disk or a kill would stop it
            raise OSError(28, "No space left on device")
        moved.append(os.fspath(dst))
        real(src, dst)

    monkeypatch.setattr(bundle.os, "replace", failing)
    into = tmp_path / "into"
    with pytest.raises(HarnessError, match="No space left on device; no run was imported"):
        harness.import_bundle(tmp_path / "a.zip", into)
    assert moved and "/blobs/" in moved[0]  # blobs go first: content-addressed, harmless alone
    assert not (into / "a.jsonl").exists() and not list(into.glob(".import-*"))  # no trace, no staging left
    monkeypatch.setattr(bundle.os, "replace", real)
    done = harness.import_bundle(tmp_path / "a.zip", into)  # and the import can simply be run again
    assert done.runs == ("a.jsonl",) and replay(into / "a.jsonl").sealed


KILLED_IN_A_BLOB = """
import os, signal, sys
import harness.storage.blobs as blobs
from harness import Executor
from harness.testing import fixed_plan, steps

trace, when = sys.argv[1], sys.argv[2]
real = os.replace
calls = []

def replace(src, dst):
    calls.append(dst)
    if len(calls) == 2 and when == "before-rename":
        os.kill(os.getpid(), signal.SIGKILL)  # the second blob is written to its temporary file, not renamed
    real(src, dst)
    if len(calls) == 2 and when == "after-rename":
        os.kill(os.getpid(), signal.SIGKILL)  # the blob is in place, the line naming it is not written

blobs.os.replace = replace
Executor(planner=fixed_plan(steps(3)), tools={"work": lambda i: {"i": i, "page": "p" * 100_000}}, trace=trace).run("g")
"""


@pytest.mark.parametrize("when", ["before-rename", "after-rename"])
def test_a_writer_killed_while_storing_a_blob_leaves_a_trace_that_resumes(tmp_path: Path, when: str) -> None:
    trace = tmp_path / "run.jsonl"
    child = subprocess.run([sys.executable, "-c", KILLED_IN_A_BLOB, str(trace), when], timeout=60)
    assert child.returncode == -9
    rep = replay(trace)  # every blob a line names is there: the line is written only after its blob
    assert rep.state == "ACT" and len(rep.checkpoints) == 1 and len(rep.blobs) == 1
    out = Executor(
        planner=fixed_plan(steps(3)), tools={"work": lambda i: {"i": i, "page": "p" * 100_000}}, trace=trace,
        resume=True,
    ).run("g")  # fmt: skip
    assert out.state == "DONE" and [c.result["i"] for c in out.checkpoints] == [0, 1, 2]
    assert cli("verify", trace).returncode == 0


def test_rerun_and_fork_see_blob_stored_payloads_as_inline(tmp_path: Path) -> None:
    trace = big_run(tmp_path)
    model = FakeLLM(lambda request: {"answer": BIG, "n": request})
    plan = big_planner(model)

    def refuse(**args: Any) -> Any:
        raise AssertionError("a rerun calls no tool")

    again = harness.rerun(trace, planner=plan, tools={"work": refuse}, out=tmp_path / "again.jsonl")
    assert again.equal and again.live_calls == 0 and model.requests == []
    answer = next(c for c in replay(trace).crossings if c.kind == "llm")
    child = harness.fork(
        trace, at=answer.seq, value={"answer": "short", "n": 0}, planner=plan,
        tools={"work": lambda i: {"i": i, "page": BIG}}, out=tmp_path / "child.jsonl",
    )  # fmt: skip
    first = harness.diff(trace, tmp_path / "child.jsonl").first
    assert child.state == "DONE" and first is not None and first.seq_b == answer.seq
    assert [c.field for c in first.changes] == ["response.answer"]


def test_a_recorder_stores_large_event_data_in_blobs_and_seals_with_a_key(tmp_path: Path) -> None:
    trace = tmp_path / "rec.jsonl"
    with harness.Recorder(trace, entrypoint="loop.py", blob_threshold=1000, seal_key="k") as rec:
        rec.log("page", {"html": BIG})
        rec.log("small", {"ok": True})
    records = read_records(trace)
    assert "blobs" in records[1] and "data" not in records[1] and records[2]["data"] == {"ok": True}
    assert records[-1]["kind"] == "seal" and "hmac" in records[-1]
    assert harness.normalize(trace)[1]["data"] == {"html": BIG}
    assert harness.verify(trace, seal_key="k").ok and not harness.verify(trace, seal_key="other").ok
