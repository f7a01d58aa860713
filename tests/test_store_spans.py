"""Planted objects never change what a trace on object storage reads (issue 25, defect 6).

Against the real S3-compatible server of tests/s3server.py. Someone who can
add objects under a run's prefix, but never touches the originals, plants a
span (`000001-000004.seg`, holding a forged run with every checksum and the
seal recomputed) or an alias of a segment's name (`0000001.seg`,
`0000001-0000004.seg`). Before: replay, show and verify read the forged run
and called it sealed and intact. Now a segment's own object is always read
when it is there, only canonical names count, and a span is read only where
its segments are gone and only if it equals what is left of them.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from s3server import need_s3, new_bucket

need_s3()

import harness  # noqa: E402
from harness import Executor  # noqa: E402
from harness.cli import main  # noqa: E402
from harness.storage.location import span_name  # noqa: E402
from harness.store import segment_name  # noqa: E402
from harness.testing import fixed_plan, read_records, steps, write_trace  # noqa: E402


def sealed_url(runs: str, tmp_path: Path, *, to: str = "bob") -> tuple[str, list[bytes]]:
    """A sealed run written to the bucket a segment a write; its URL and the segments' bytes, in order."""
    url = f"{runs}/pay.jsonl"
    Executor(planner=fixed_plan(steps(3)), tools={"work": lambda i: {"paid": to, "i": i}}, trace=url,
             durability="fsync").run("pay")  # fmt: skip
    loc = harness.store.open(url)
    return url, [loc.read(p) for _, p in loc.segments()]


def forged(tmp_path: Path, original: bytes) -> bytes:
    """The same run paying mallory: every crc and the seal recomputed (a forger's copy, whole)."""
    recs = [{k: v for k, v in r.items() if k != "crc"} for r in read_records_of(tmp_path, original)]
    for r in recs:
        if isinstance(r.get("result"), dict):
            r["result"] = {**r["result"], "paid": "mallory"}
    write_trace(tmp_path / "forged.jsonl", [r for r in recs if r["kind"] != "seal"])
    harness.seal(tmp_path / "forged.jsonl")  # an unkeyed seal anyone can recompute
    assert harness.verify(tmp_path / "forged.jsonl").ok  # a story replay() accepts, sealed and "intact"
    return (tmp_path / "forged.jsonl").read_bytes()


def read_records_of(tmp_path: Path, data: bytes) -> list[dict[str, Any]]:
    (tmp_path / "original.jsonl").write_bytes(data)
    return read_records(tmp_path / "original.jsonl")


def reads(url: str, capsys: pytest.CaptureFixture[str]) -> tuple[bytes, Any, str, bool]:
    """What every reader of url reads: the bytes, replay()'s story, `harness show`'s text, verify()'s verdict."""
    buffer = io.BytesIO()
    harness.store.open(url).download(buffer)
    rep = harness.replay(url)
    capsys.readouterr()
    assert main(["show", url]) == 0
    return buffer.getvalue(), [c.result for c in rep.checkpoints], capsys.readouterr().out, harness.verify(url).ok


def objects(url: str) -> dict[str, bytes]:
    loc = harness.store.open(url)
    return {p.rsplit("/", 1)[1]: loc.read(p) for p in loc.listing() if p.endswith(".seg")}


@pytest.mark.parametrize("name", ["span", "alias-span", "alias-segment", "whole-span"])
def test_a_planted_object_never_changes_what_is_read(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    url, parts = sealed_url(runs, tmp_path)
    before = reads(url, capsys)
    assert before[0] == b"".join(parts) and before[3] and "mallory" not in before[2]
    fake = forged(tmp_path, b"".join(parts))
    n = len(parts)
    planted = {
        "span": (span_name(1, 4), fake[: len(b"".join(parts[:4])) + 40]),  # the first four segments, forged
        "alias-span": ("0000001-0000004.seg", fake),
        "alias-segment": ("0000001.seg", fake),
        "whole-span": (span_name(1, n), fake),  # a forged sealed run standing for every segment
    }[name]
    originals = objects(url)
    loc = harness.store.open(url)
    assert loc.create(*planted)
    assert reads(url, capsys) == before  # the originals, read as before: bytes, story, show, seal intact
    listed = [(r.status, r.records) for r in harness.list_runs(runs)]
    assert listed == [("done", len(read_records_of(tmp_path, before[0])))]
    with harness.store.open_journal(url) as journal:  # a writer goes on after the originals, not the plant
        assert journal.next_segment == n + 1
    after = objects(url)
    assert {k: after[k] for k in originals} == originals  # nothing original was touched either


def test_a_compacted_run_reads_its_span_and_refuses_a_planted_one_that_disagrees(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, parts = sealed_url(runs, tmp_path)
    before = reads(url, capsys)
    harness.store.compact(url)
    n = len(parts)
    assert list(objects(url)) == [span_name(1, n)] and reads(url, capsys) == before
    loc = harness.store.open(url)
    fake = forged(tmp_path, before[0])
    loc.create(span_name(1, 3), fake[: fake.index(b"mallory") + 100])  # shorter, where the genuine one starts
    with pytest.raises(harness.TraceCorruption) as e:
        harness.replay(url)
    assert e.value.reason == "segment-span" and span_name(1, n) in e.value.detail  # refused, never the forgery
    loc.fs.rm(f"{loc.root}/{span_name(1, 3)}")
    loc.create(span_name(1, n + 3), fake)  # a longer one: it must start with the genuine span's bytes
    with pytest.raises(harness.TraceCorruption, match="segment-span"):
        harness.replay(url)
    assert main(["verify", url]) != 0 and "mallory" not in capsys.readouterr().out


def test_a_compaction_killed_between_its_deletes_reads_the_span_checked_against_what_is_left(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, parts = sealed_url(runs, tmp_path)
    before = reads(url, capsys)
    n = len(parts)
    loc = harness.store.open(url)
    for name, data in ((span_name(1, n), b"".join(parts)),):
        loc.create(name, data)
    for i in range(1, 4):  # a compaction killed after its first three deletes (it deletes first to last)
        loc.fs.rm(f"{loc.root}/{segment_name(i)}")
    assert reads(url, capsys) == before  # read from the span, checked against segments 4..n
    harness.store.compact(url)  # and compact finishes the deletes
    assert list(objects(url)) == [span_name(1, n)] and reads(url, capsys) == before

    other = f"s3://{new_bucket()}/runs/pay.jsonl"  # the same state, but the span planted: a forgery
    there = harness.store.open(other)
    for i, data in enumerate(parts, 1):
        if i > 3:
            there.create(segment_name(i), data)
    fake = forged(tmp_path, b"".join(parts))
    there.create(span_name(1, n), fake)
    with pytest.raises(harness.TraceCorruption) as e:
        harness.replay(other)
    assert e.value.reason == "segment-span" and "does not end with" in e.value.detail


def test_the_viewer_mirror_never_appends_a_span_that_disagrees(runs: str, tmp_path: Path) -> None:
    from harness.storage.mirror import Mirror

    _url, parts = sealed_url(runs, tmp_path)
    n = len(parts)
    other = f"s3://{new_bucket()}/runs"
    copy = harness.store.open(f"{other}/r.jsonl")
    for i, data in enumerate(parts[:3], 1):  # what a viewer saw mid-way
        copy.create(segment_name(i), data)
    mirror = Mirror(harness.store.open(other), str(tmp_path / "view"))
    (tmp_path / "view").mkdir()
    mirror.sync()
    assert (tmp_path / "view" / "r.jsonl").read_bytes() == b"".join(parts[:3])
    copy.create(span_name(1, n), b"".join(parts))  # the run ended and was compacted...
    for i in range(1, 4):
        copy.fs.rm(f"{copy.root}/{segment_name(i)}")
    copy.create(span_name(1, n + 2), forged(tmp_path, b"".join(parts)))  # ...and a longer span was planted
    mirror.sync()
    assert (tmp_path / "view" / "r.jsonl").read_bytes() == b"".join(parts[:3])  # what it holds, and nothing else
    copy.fs.rm(f"{copy.root}/{span_name(1, n + 2)}")
    mirror.sync()
    assert (tmp_path / "view" / "r.jsonl").read_bytes() == b"".join(parts)  # the genuine span's rest, once
