"""Sealed records: blobs, the seal and verify, artifacts, annotations, export and import bundles."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import in_process
import orjson
import pytest
from children import ZYGOTE, Forked, wait_for

import harness
from harness import BundleError, Executor, HarnessError, Step, TraceCorruption, replay
from harness.testing import FakeLLM, fixed_plan, read_records, steps
from harness.trace.line import encode

BIG = "x" * 100_000


def cli(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`harness ARGS` with env added to the environment, run in this process (tests/in_process.py)."""
    return in_process.harness(*args, env={**os.environ, **(env or {})})  # type: ignore[no-any-return]


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
    checked = cli("verify", trace)  # verify and seal agree: no advice to run the seal that refuses
    assert checked.returncode == 1 and "harness seal" not in checked.stdout
    state = replay(trace).state
    assert f"NOT sealed: the run has not ended (state {state})" in checked.stdout and "resume it" in checked.stdout
    assert not harness.verify(trace).ended and harness.verify(trace).run_state == state


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


def test_unfinished_and_crashed_runs_export_and_import_unsealed(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    big_run(runs, name="done.jsonl")
    lines = big_run(runs, name="cut.jsonl").read_bytes().splitlines(keepends=True)
    (runs / "cut.jsonl").write_bytes(b"".join(lines[:5]) + lines[5][:9])  # a crash mid-line: a torn tail
    (runs / "ended.jsonl").write_bytes(b"".join((runs / "done.jsonl").read_bytes().splitlines(keepends=True)[:-1]))
    out = cli("export", runs, "--all", "-o", tmp_path / "all.zip")  # one unsealed run no longer refuses the folder
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith("unsealed (kept so): cut.jsonl, ended.jsonl")
    manifest = orjson.loads(zipfile.ZipFile(tmp_path / "all.zip").read("manifest.json"))
    assert manifest["unsealed"] == ["cut.jsonl", "ended.jsonl"]
    done = cli("import", tmp_path / "all.zip", "--into", tmp_path / "other")
    assert done.returncode == 0 and "unsealed (kept so): cut.jsonl, ended.jsonl" in done.stdout, done.stderr
    for name in ("cut.jsonl", "ended.jsonl", "done.jsonl"):  # byte for byte, torn tail and all
        assert (tmp_path / "other" / name).read_bytes() == (runs / name).read_bytes()
    assert (
        f"has not ended (state {replay(runs / 'cut.jsonl').state})"
        in cli("verify", tmp_path / "other" / "cut.jsonl").stdout
    )
    assert "seal it with `harness seal" in cli("verify", tmp_path / "other" / "ended.jsonl").stdout
    assert cli("verify", tmp_path / "other" / "done.jsonl").returncode == 0
    one = harness.export([runs / "cut.jsonl"], tmp_path / "one.zip")
    assert one.unsealed == ("cut.jsonl",) and harness.import_bundle(one.path, tmp_path / "x").unsealed == one.unsealed
    lines = (runs / "done.jsonl").read_bytes().split(b"\n")
    at = next(i for i, line in enumerate(lines) if i and b'"step":' in line)
    lines[at] = lines[at].replace(b'"step":', b'"step":1', 1)  # damaged (its checksum no longer matches): refused
    (runs / "bad.jsonl").write_bytes(b"\n".join(lines))
    bad = cli("export", runs / "bad.jsonl", "-o", tmp_path / "bad.zip")
    assert bad.returncode == 2 and "damaged" in bad.stderr and not (tmp_path / "bad.zip").exists()


def test_import_refuses_a_manifest_that_passes_an_unsealed_run_off_as_sealed(tmp_path: Path) -> None:
    trace = big_run(tmp_path, name="a.jsonl")
    trace.write_bytes(b"".join(trace.read_bytes().splitlines(keepends=True)[:5]))
    harness.export([trace], tmp_path / "a.zip")
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        entries = [(n, zf.read(n)) for n in zf.namelist() if n != "manifest.json"]
    with pytest.raises(BundleError, match=r"unsealed runs are \[\], but they are \['a.jsonl'\]"):
        harness.import_bundle(hostile(tmp_path / "l.zip", entries), tmp_path / "into")  # its manifest: no "unsealed"
    assert not (tmp_path / "into" / "a.jsonl").exists()


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
    real = os.link

    def failing(src: Any, dst: Any) -> None:
        if moved:  # the second link fails, as a full disk or a kill would stop it
            raise OSError(28, "No space left on device")
        moved.append(os.fspath(dst))
        real(src, dst)

    monkeypatch.setattr(bundle.os, "link", failing)
    into = tmp_path / "into"
    with pytest.raises(HarnessError, match="No space left on device; no run was imported"):
        harness.import_bundle(tmp_path / "a.zip", into)
    assert moved and "/blobs/" in moved[0]  # blobs go first: content-addressed, harmless alone
    assert not (into / "a.jsonl").exists() and not list(into.glob(".import-*"))  # no trace, no staging left
    monkeypatch.setattr(bundle.os, "link", real)
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
    child = ZYGOTE.run([sys.executable, "-c", KILLED_IN_A_BLOB, str(trace), when], timeout=60)
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


# --- imports that race, entries zipfile cannot read, notes that are not notes (issue 25) ------------------------


IMPORT = """
import sys
import harness

try:
    harness.import_bundle(sys.argv[1], sys.argv[2])
except harness.HarnessError as e:
    sys.exit(str(e))
"""


def one_run_bundle(folder: Path, goal: str, out: Path) -> bytes:
    """A bundle holding one run named run.jsonl whose goal is goal, with 150 small artifacts (blobs, placed
    before the trace); the run's bytes."""
    folder.mkdir()
    trace = folder / "run.jsonl"

    def plan(g: Any, done: list[Any]) -> Step | None:
        for i in range(150):
            harness.artifact(f"part-{i}", f"{goal} {i}".encode())
        return None

    Executor(planner=plan, tools={}, trace=trace).run(goal)
    harness.annotate(trace, "by", goal)
    harness.export([trace], out)
    return trace.read_bytes()


def importing(bundle: Path, into: Path) -> Forked:
    argv = [sys.executable, "-c", IMPORT, str(bundle), str(into)]
    return ZYGOTE.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def first_blob(into: Path, child: Forked) -> bool:
    """Spin until the child's first blob lands in into/blobs (True: it has checked the folder), or it ends."""
    while child.poll() is None:
        with contextlib.suppress(FileNotFoundError), os.scandir(into / "blobs") as found:
            if next(found, None) is not None:
                return True
    return False


def staged(into: Path, child: Forked, files: int) -> None:
    """Return once the child has unpacked all its files into its staging folder (or has ended)."""

    def unpacked() -> int:
        return sum(len(names) for staging in into.glob(".import-*") for _, _, names in os.walk(staging))

    while child.poll() is None and unpacked() < files:
        time.sleep(0.01)


def test_two_imports_racing_into_one_folder_never_lose_a_run(tmp_path: Path) -> None:
    """Before: two imports of different bundles that both hold run.jsonl, at the same time, could both exit 0,
    the second run silently replacing the first. The race, made to happen every time: import A is stopped
    (SIGSTOP) once it has checked the folder and placed its first blob, before its trace; import B runs
    meanwhile; then A goes on. Now B waits for A's hold on the folder, then fails naming the file; A's run
    lands whole, notes and all. Before, B placed its run and A replaced it: both exited 0."""
    mine = {name: one_run_bundle(tmp_path / name, name, tmp_path / f"{name}.zip") for name in ("a", "b")}
    raced = 0
    for attempt in range(6):
        into = tmp_path / f"into-{attempt}"
        into.mkdir()
        a = importing(tmp_path / "a.zip", into)
        if not first_blob(into, a):
            continue  # A ended before its first blob was seen: not this time
        try:
            os.kill(a.pid, signal.SIGSTOP)  # A has checked the folder and placed a blob; its trace comes last
        except ProcessLookupError:  # A ended (and its zygote reaped it) before it could be stopped: not this time
            a.wait(timeout=60)
            continue
        try:
            if (into / "run.jsonl").exists():
                continue  # A got through before it could be stopped there: not this time
            raced += 1
            b = importing(tmp_path / "b.zip", into)
            staged(into, b, len(zipfile.ZipFile(tmp_path / "b.zip").namelist()) - 1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                b.wait(timeout=2)  # before: B placed its run meanwhile and ended; now it waits for A
        finally:
            with contextlib.suppress(ProcessLookupError):  # (it cannot end while stopped; this is only a guard)
                os.kill(a.pid, signal.SIGCONT)
        done = {"a": (a.wait(timeout=60), a.communicate()[1]), "b": (b.wait(timeout=60), b.communicate()[1])}
        assert done["a"][0] == 0, done
        assert done["b"][0] != 0 and "run.jsonl" in done["b"][1] and "other bytes" in done["b"][1], done
        assert (into / "run.jsonl").read_bytes() == mine["a"]  # whole, and A's
        assert [n["value"] for n in harness.annotations(into / "run.jsonl")] == ["a"]  # its notes too
        assert harness.verify(into / "run.jsonl").ok and not list(into.glob(".import-*"))
        if raced == 2:
            break
    assert raced, "import A was never caught between its check and its trace"


def test_imports_started_together_one_wins_whole(tmp_path: Path) -> None:
    """The same race left to the scheduler: both imports start at once, a few times."""
    mine = {name: one_run_bundle(tmp_path / name, name, tmp_path / f"{name}.zip") for name in ("a", "b")}
    for attempt in range(3):
        into = tmp_path / f"into-{attempt}"
        into.mkdir()
        children = {name: importing(tmp_path / f"{name}.zip", into) for name in mine}
        done = {name: (c.wait(timeout=60), c.communicate()[1]) for name, c in children.items()}
        winners = [name for name, (rc, _) in done.items() if rc == 0]
        assert len(winners) == 1, (attempt, done)
        (loser,) = set(mine) - set(winners)
        assert "run.jsonl" in done[loser][1] and "other bytes" in done[loser][1], done[loser][1]
        assert (into / "run.jsonl").read_bytes() == mine[winners[0]]
        assert harness.verify(into / "run.jsonl").ok and not list(into.glob(".import-*"))


def patched(bundle: Path, entry: str, *, flags: int | None = None, method: int | None = None) -> Path:
    """The bundle with one entry's flag bits or compression method changed in both its headers (its bytes as
    they were): how a zip made elsewhere says "encrypted" or "compressed with PPMd"."""
    data = bytearray(bundle.read_bytes())
    name = entry.encode()
    for signature, flag_at, method_at, name_at in ((b"PK\x03\x04", 6, 8, 30), (b"PK\x01\x02", 8, 10, 46)):
        at = data.find(signature)
        while at >= 0:
            if data[at + name_at : at + name_at + len(name)] == name:
                if flags is not None:
                    data[at + flag_at : at + flag_at + 2] = flags.to_bytes(2, "little")
                if method is not None:
                    data[at + method_at : at + method_at + 2] = method.to_bytes(2, "little")
            at = data.find(signature, at + 4)
    out = bundle.with_name(f"{bundle.stem}-{flags}-{method}.zip")
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"flags": 0x1}, "is encrypted"),  # before: RuntimeError, a traceback
        ({"method": 98}, "is compressed with method 98"),  # PPMd. Before: NotImplementedError
        ({"method": 14}, "is compressed with method 14"),  # LZMA: Python reads it, export never writes it
    ],
)
def test_an_entry_zipfile_cannot_read_is_a_bundle_error_naming_it(
    tmp_path: Path, change: dict[str, int], why: str
) -> None:
    trace = big_run(tmp_path, name="a.jsonl")
    harness.export([trace], tmp_path / "a.zip")
    bad = patched(tmp_path / "a.zip", "a.jsonl", **change)
    with pytest.raises(BundleError, match=f"'a.jsonl' {why}"):
        harness.import_bundle(bad, tmp_path / "into")
    assert not (tmp_path / "into" / "a.jsonl").exists() and not list((tmp_path / "into").glob(".import-*"))
    out = cli("import", bad, "--into", tmp_path / "into")
    assert out.returncode == 2 and "a.jsonl" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "notes",
    [b"{not json", b'[{"key": "a list, not the format"}]', b'{"format": "harness-annotations", "notes": [1]}'],
)
def test_an_annotations_entry_that_is_not_annotations_is_refused(tmp_path: Path, notes: bytes) -> None:
    """Before: imported unchecked, to break `harness show` and `annotate` on the run afterwards."""
    big_run(tmp_path, name="a.jsonl")
    harness.export([tmp_path / "a.jsonl"], tmp_path / "a.zip")
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        entries = [(n, zf.read(n)) for n in zf.namelist() if n != "manifest.json"]
    bad = hostile(tmp_path / "bad.zip", [*entries, ("a.jsonl.annotations.json", notes)])
    with pytest.raises(BundleError, match=r"a\.jsonl\.annotations\.json: not a"):
        harness.import_bundle(bad, tmp_path / "into")
    assert not (tmp_path / "into" / "a.jsonl").exists()


def test_a_torn_file_no_run_names_is_refused(tmp_path: Path) -> None:
    big_run(tmp_path, name="a.jsonl")
    harness.export([tmp_path / "a.jsonl"], tmp_path / "a.zip")
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        entries = [(n, zf.read(n)) for n in zf.namelist() if n != "manifest.json"]
    bad = hostile(tmp_path / "bad.zip", [*entries, ("b.jsonl.torn-1", b"stray")])
    with pytest.raises(BundleError, match=r"b\.jsonl\.torn-1: a \.torn-N file that no run of the bundle names"):
        harness.import_bundle(bad, tmp_path / "into")


def test_a_trace_given_through_a_symlink_still_exports(tmp_path: Path) -> None:
    """The trace itself is opened as traces are: a symlink the user gives is theirs to give (files beside it are
    read from where it stands, as replay() reads them)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "links").mkdir()
    trace = big_run(tmp_path / "data", name="a.jsonl")
    (tmp_path / "links" / "a.jsonl").symlink_to(trace)
    (tmp_path / "links" / "blobs").symlink_to(tmp_path / "data" / "blobs", target_is_directory=True)
    with pytest.raises(BundleError, match="outside"):  # its blobs, through a folder symlinked out: no
        harness.export([tmp_path / "links" / "a.jsonl"], tmp_path / "no.zip")
    done = harness.export([trace], tmp_path / "a.zip")
    (tmp_path / "links" / "blobs").unlink()
    small = tmp_path / "small"
    small.mkdir()
    Executor(planner=fixed_plan(steps(2)), tools={"work": lambda i: i}, trace=small / "s.jsonl").run("g")
    (tmp_path / "links" / "s.jsonl").symlink_to(small / "s.jsonl")
    assert harness.export([tmp_path / "links" / "s.jsonl"], tmp_path / "s.zip").files == ("s.jsonl",)
    assert done.runs == ("a.jsonl",)


# --- what a killed export or import leaves behind (issue 34) ------------------------------------------------------


STOPPED_WITH_SCRATCH = """
import os, signal, sys, time
import harness, harness.bundle as bundle
what, source, target, marker = sys.argv[1:5]

def stop(*args, **kwargs):  # its scratch is there, locked: the bundle beside its path, or the staging folder
    if not os.path.exists(marker):  # the first time only
        open(marker, "x").close()
        if what.startswith("kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        while not os.path.exists(marker + ".go"):  # "hold": until the test says go
            time.sleep(0.01)
    return real(*args, **kwargs)

if what.endswith("export"):
    real, bundle._copy = bundle._copy, stop  # the bundle's first entry is being written to its temporary file
    harness.export([source], target)
else:
    real, bundle._check_run = bundle._check_run, stop  # every file unpacked in the staging folder, none placed
    harness.import_bundle(source, target)
"""


def stopped(what: str, source: Path, target: Path, marker: Path) -> Forked:
    argv = [sys.executable, "-c", STOPPED_WITH_SCRATCH, what, str(source), str(target), str(marker)]
    return ZYGOTE.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("then", ["export", "import", "recover"])
@pytest.mark.parametrize("killed", ["kill-export", "kill-import"])
def test_what_a_killed_export_or_import_left_the_next_one_removes(tmp_path: Path, killed: str, then: str) -> None:
    """Before: a SIGKILL during export left `.out.zip.<hex>` beside the bundle, and during import an
    `.import-<hex>` folder in the runs folder, for good. Now the next export, import or recover removes them."""
    runs = tmp_path / "runs"
    runs.mkdir()
    big_run(runs, name="a.jsonl")
    harness.export([runs / "a.jsonl"], tmp_path / "a.zip")
    source, target = (runs / "a.jsonl", runs / "out.zip") if killed == "kill-export" else (tmp_path / "a.zip", runs)
    child = stopped(killed, source, target, tmp_path / "killed")
    assert child.wait(timeout=60) == -9 and (tmp_path / "killed").exists(), child.communicate()
    (left,) = hidden(runs)
    assert left.startswith(".out.zip." if killed == "kill-export" else ".import-"), left
    if killed == "kill-import":
        assert any(files for _, _, files in os.walk(runs / left))  # killed with its staging folder full
    if then == "export":
        harness.export([runs / "a.jsonl"], runs / "again.zip")
    elif then == "import":
        harness.import_bundle(tmp_path / "a.zip", runs)
    else:
        assert harness.recover(runs, planner=big_planner(FakeLLM(lambda r: r)), tools={}) == []  # nothing to resume
    assert hidden(runs) == []
    assert replay(runs / "a.jsonl").sealed


def test_an_export_leaves_another_programs_file_of_a_scratch_like_name_alone(tmp_path: Path) -> None:
    """Before: an export swept its folder (anyone's: the cwd, a downloads folder) of every unlocked `.<name>.<32 hex>`
    file, so another program's file so named was deleted. Only what an export begins with (a zip's header) goes."""
    big_run(tmp_path, name="a.jsonl")
    theirs = tmp_path / f".settings.{'0f' * 16}"
    theirs.write_text("another program's state\n")
    left = tmp_path / f".out.zip.{'ab' * 16}"  # what a killed export left: its first entry's header, no more
    left.write_bytes(b"PK\x03\x04" + bytes(26))
    harness.export([tmp_path / "a.jsonl"], tmp_path / "out.zip")
    assert theirs.read_text() == "another program's state\n" and not left.exists()


@pytest.mark.parametrize("what", ["hold-export", "hold-import"])
def test_the_scratch_of_a_running_export_or_import_is_kept(tmp_path: Path, what: str) -> None:
    """A sweep while another export or import runs leaves its scratch alone (it is locked), and that one ends well."""
    runs = tmp_path / "runs"
    runs.mkdir()
    big_run(runs, name="a.jsonl")
    harness.export([runs / "a.jsonl"], tmp_path / "a.zip")
    into = tmp_path / "into"
    source, target = (runs / "a.jsonl", into / "out.zip") if what == "hold-export" else (tmp_path / "a.zip", into)
    into.mkdir()
    marker = tmp_path / "held"
    child = stopped(what, source, target, marker)
    try:
        wait_for(marker, child, "its scratch")
        held = hidden(into)
        assert len(held) == 1, held
        harness.import_bundle(tmp_path / "a.zip", into)  # sweeps into, as recover and export do
        assert held[0] in hidden(into)
    finally:
        (tmp_path / "held.go").touch()
    assert child.wait(timeout=60) == 0, child.communicate()
    assert hidden(into) == []
    if what == "hold-export":
        assert harness.import_bundle(into / "out.zip", tmp_path / "again").runs == ("a.jsonl",)
