"""The seal's content hash over traces of several 4 MiB blocks, and the block digests the index keeps for it.

A run's index records the sha256 of each whole 4 MiB block of its trace with
each mark; the seal at the end of a resumed run takes the digests of the
blocks before the mark the resume trusted and hashes only the rest. replay()
and `harness verify` recompute every block from the bytes, so a prefix
changed behind the resume's back, or a wrong digest in the index, makes the
seal fail there. The traces here are real multi-block files at the
production block size (results of 60 kB: about 9 MB in 150 steps).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from children import kill_in_call

import harness
from harness import Executor, Step, TraceCorruption, cli, replay
from harness.trace.index import ENTRY, load, path_of, resume_point
from harness.trace.line import SUFFIX
from harness.trace.seal import BLOCK, ContentHash, content_hash

ROOT = Path(__file__).resolve().parent.parent
# Below the blob threshold (64 KiB): every result is inline, so the trace itself grows, ~60 KB a step (150 steps
# pass two 4 MiB blocks: half the steps, and syncs, of 30 KB results). Zeros, not a letter: a run of a letter that
# starts a default redaction pattern (the x of xox-, a, e, s) is the slowest text for the journal's secret search
# (trace/redact.py, _HEADS), which these tests are not about.
PAD = "0" * 60_000


def by_hand(data: bytes) -> str:
    """docs/FORMAT.md's recipe: the sha256 of each 4 MiB block, then the sha256 of their raw digests, in order."""
    digests = [hashlib.sha256(data[i : i + 4 * 1024 * 1024]).digest() for i in range(0, len(data), 4 * 1024 * 1024)]
    return hashlib.sha256(b"".join(digests)).hexdigest()


def blocks_of(data: bytes, end: int) -> list[bytes]:
    """The raw sha256 of each whole block before byte end."""
    return [hashlib.sha256(data[i * BLOCK : (i + 1) * BLOCK]).digest() for i in range(end // BLOCK)]


def the_seal(trace: Path) -> tuple[bytes, dict[str, Any]]:
    """The bytes before the seal's line, and the seal record."""
    data = trace.read_bytes()
    cut = data.rstrip(b"\n").rfind(b"\n") + 1
    seal = orjson.loads(data[cut:])
    assert seal["kind"] == "seal"
    return data[:cut], seal


class Crash(Exception):
    pass


def plan(n: int) -> Any:
    def planner(goal: Any, progress: Any) -> Step | None:
        return None if len(progress) >= n else Step(f"s{len(progress)}", "work", {"i": len(progress)})

    return planner


def work_until(stop: int | None) -> Any:
    def work(i: int) -> dict[str, Any]:
        if i == stop:
            raise Crash
        return {"i": i, "pad": PAD}

    return work


def crashed(trace: Path, n: int, stop: int, **options: Any) -> None:
    with pytest.raises(Crash):
        Executor(planner=plan(n), tools={"work": work_until(stop)}, trace=trace, **options).run("g")


def finish(trace: Path, n: int, **options: Any) -> harness.Outcome:
    return Executor(planner=plan(n), tools={"work": work_until(None)}, trace=trace, resume=True, **options).run("g")


def intact(trace: Path) -> None:
    """Sealed, verified, and the seal's content_hash is the recipe's over the bytes before it."""
    before, seal = the_seal(trace)
    assert seal["content_hash"] == by_hand(before) and "sha256" not in seal
    found = harness.verify(trace)
    assert found.ok, found.report()


def rechain(data: bytes) -> bytes:
    """data with every line's crc recomputed (what a forger does after an edit): the other bytes stay."""
    out, crc = [], 0
    for line in data.splitlines(keepends=True):
        body = line[: -SUFFIX - 1]
        crc = zlib.crc32(body, crc)
        out.append(body + b',"crc":"%08x"}\n' % crc)
    return b"".join(out)


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 7])
def test_the_content_hash_is_the_block_recipe_however_it_is_fed(tmp_path: Path, size: int) -> None:
    rng = random.Random(size)
    data = rng.randbytes(size)
    h, at = ContentHash(), 0
    while at < size:  # pieces of any size, some across a block's end
        n = rng.choice([1, 7, 4096, BLOCK - 3, BLOCK, 3 * BLOCK])
        h.update(data[at : at + n])
        at += n
    assert h.hexdigest() == by_hand(data) and h.blocks == blocks_of(data, size)
    if size >= BLOCK:  # given the first block's digest, only the rest is fed
        rest = ContentHash(h.blocks[:1])
        rest.update(data[BLOCK:])
        assert rest.hexdigest() == by_hand(data)
    path = tmp_path / "f"
    path.write_bytes(data + b"after")
    assert content_hash(str(path), size) == by_hand(data)


def test_a_run_over_several_blocks_records_their_digests_and_seals_them(trace: Path) -> None:
    Executor(planner=plan(150), tools={"work": work_until(None)}, trace=trace).run("g")
    data = trace.read_bytes()
    mark = load(str(trace))
    assert mark is not None and mark.end // BLOCK >= 2
    assert mark.block_digests() == blocks_of(data, mark.end)  # read back from the file as the run went
    intact(trace)


def test_a_run_resumed_from_its_mark_seals_with_the_recorded_digests_and_verifies(trace: Path) -> None:
    crashed(trace, 200, 150)
    mark = load(str(trace))
    assert mark is not None and mark.end // BLOCK >= 2
    assert mark.block_digests() == blocks_of(trace.read_bytes(), mark.end)
    assert resume_point(str(trace)).tail.since == mark.end  # the resume trusts the mark, and so its digests
    assert finish(trace, 200).state == "DONE"
    intact(trace)
    again = load(str(trace))
    assert again is not None and again.block_digests() == blocks_of(trace.read_bytes(), again.end)


def test_a_run_resumed_without_its_index_hashes_every_block_and_leaves_them_in_a_fresh_one(trace: Path) -> None:
    crashed(trace, 200, 150)
    os.unlink(path_of(str(trace)))
    assert resume_point(str(trace)).tail.since == 0
    assert finish(trace, 200).state == "DONE"
    intact(trace)
    mark = load(str(trace))
    assert mark is not None and mark.end // BLOCK >= 2
    assert mark.block_digests() == blocks_of(trace.read_bytes(), mark.end)


def forge_mark(trace: Path, **changes: Any) -> None:
    """Rewrite the index's mark to fit the trace as it is now (its crcs), with changes; the entries stay."""
    data, mark = trace.read_bytes(), load(str(trace))
    assert mark is not None

    def fit(pos: tuple[int, int, int]) -> tuple[int, int, int]:
        return (pos[0], pos[1], int(data[pos[0] - 11 : pos[0] - 3], 16) if pos[0] else 0)

    crc = int(data[mark.end - 11 : mark.end - 3], 16)
    forged = replace(mark, crc=crc, header=fit(mark.header), intent=fit(mark.intent), result=fit(mark.result),
                     last=fit(mark.last), **changes)  # fmt: skip
    idx = Path(path_of(str(trace)))
    idx.write_bytes(idx.read_bytes()[: mark.checkpoints * ENTRY] + forged.encode())


def test_a_prefix_changed_behind_the_resume_is_caught_by_the_seal(trace: Path) -> None:
    """An edit in the first block, the crc chain and the index's mark made to fit: the resume cannot see it
    (it reads nothing before the mark), but its seal attests the digests the original writer recorded."""
    crashed(trace, 200, 150)
    original, mark = trace.read_bytes(), load(str(trace))
    assert mark is not None and mark.end // BLOCK >= 2
    at = original.index(b'"pad":"', original.index(b'"to":"VERIFY","step":5,')) + 100
    trace.write_bytes(rechain(original[:at] + b"y" + original[at + 1 :]))
    forge_mark(trace)
    assert resume_point(str(trace)).tail.since == mark.end  # trusted: the mark fits the edited file
    assert finish(trace, 200).state == "DONE"
    before, seal = the_seal(trace)
    recorded = blocks_of(original, mark.end)  # the original bytes' digests, then the rest as it is now
    expected = ContentHash(recorded)
    expected.update(before[len(recorded) * BLOCK :])
    assert seal["content_hash"] == expected.hexdigest() != by_hand(before)
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert e.value.reason == "seal" and "content_hash differs" in str(e.value)
    found = harness.verify(trace)
    assert not found.ok and any("content_hash differs" in p for p in found.problems)


def test_a_wrong_block_digest_in_the_index_is_refused_or_caught_by_verify(trace: Path) -> None:
    """A digest damaged by accident fails the index's crc: the mark is ignored and the seal hashes every block.
    One changed with the crc made to fit is trusted (the resume cannot check it without reading the block),
    and the seal it makes fails replay() and `harness verify`: never a seal that passes over other bytes."""
    crashed(trace, 200, 150)
    saved = {p: p.read_bytes() for p in (trace, Path(path_of(str(trace))))}
    mark = load(str(trace))
    assert mark is not None and len(mark.blocks) >= 2 * 32
    idx = Path(path_of(str(trace)))
    damaged = bytearray(idx.read_bytes())
    damaged[mark.checkpoints * ENTRY + 40] ^= 1  # inside the second digest
    idx.write_bytes(bytes(damaged))
    assert load(str(trace)) is None and resume_point(str(trace)).tail.since == 0
    assert finish(trace, 200).state == "DONE"
    intact(trace)

    for p, data in saved.items():  # the same crash again, the digest now changed with the crc recomputed
        p.write_bytes(data)
    wrong = mark.blocks[:32] + hashlib.sha256(b"other bytes").digest() + mark.blocks[64:]
    forge_mark(trace, blocks=wrong)
    assert resume_point(str(trace)).tail.since == mark.end
    assert finish(trace, 200).state == "DONE"
    with pytest.raises(TraceCorruption) as e:
        replay(trace)
    assert e.value.reason == "seal"
    found = harness.verify(trace)
    assert not found.ok and any("content_hash differs" in p for p in found.problems)

    for p, data in saved.items():  # a digest missing (the crc made to fit): not a mark of that end
        p.write_bytes(data)
    forge_mark(trace, blocks=mark.blocks[:-32])
    assert load(str(trace)) is None and resume_point(str(trace)).tail.since == 0


def test_the_recipe_in_format_md_checks_a_seal_by_hand(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "FORMAT.md").read_text()
    found = re.search(r"```python\n(.*?)```", text[text.index("**The content hash**") :], re.S)
    assert found is not None
    trace = tmp_path / "run.jsonl"
    with pytest.raises(Crash):
        Executor(planner=plan(200), tools={"work": work_until(150)}, trace=trace, seal_key="k").run("g")
    ex = Executor(planner=plan(200), tools={"work": work_until(None)}, trace=trace, resume=True, seal_key="k")
    assert ex.run("g").state == "DONE" and trace.stat().st_size > 2 * BLOCK

    def by_recipe(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", found[1]], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env={**os.environ, **env})  # fmt: skip

    out = by_recipe(HARNESS_SEAL_KEY="k")
    assert out.returncode == 0 and "the seal matches the" in out.stdout, out.stderr
    assert "AssertionError" in by_recipe(HARNESS_SEAL_KEY="other").stderr
    data = bytearray(trace.read_bytes())
    data[BLOCK + 10] ^= 1  # one bit in the second block
    trace.write_bytes(bytes(data))
    assert "AssertionError" in by_recipe().stderr


@pytest.mark.parametrize("seed", range(4))
def test_after_a_power_loss_any_index_left_gives_a_seal_that_verifies(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync mode: the trace cut back to one of its synced lengths past two blocks; the index (never synced)
    as it was at any sync of the run, earlier or later than that length, torn, or gone."""
    import harness.trace.journal as journal_module

    rng, trace = random.Random(seed), tmp_path / "run.jsonl"
    idx = Path(path_of(str(trace)))
    synced: list[tuple[int, bytes]] = []  # the trace's length at each sync, and the index then
    real = journal_module._fsync

    def spy(fd: int) -> None:
        real(fd)
        synced.append((os.fstat(fd).st_size, idx.read_bytes() if idx.exists() else b""))

    monkeypatch.setattr(journal_module, "_fsync", spy)
    crashed(trace, 200, 150, durability="fsync")
    monkeypatch.setattr(journal_module, "_fsync", real)
    size, then = rng.choice([(n, data) for n, data in synced if n > 2 * BLOCK])
    os.truncate(trace, size)
    left = rng.choice([data for _, data in synced if data])  # the index as some sync left it, before or after
    if seed % 4 == 0:
        left = then  # the index as it was when the trace was that long
    elif seed % 4 == 1:
        left = left[: rng.randrange(len(left))]  # torn
    idx.write_bytes(left)
    if seed % 4 == 0:  # its mark is trusted, and its digests with it
        assert resume_point(str(trace)).tail.since > BLOCK
    elif seed % 4 == 2:
        idx.unlink()
    out = finish(trace, 200, durability="fsync")
    assert out.state == "DONE" and [c.result["i"] for c in out.checkpoints] == list(range(200))
    intact(trace)


def test_harness_seal_seals_an_unsealed_multi_block_trace(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Executor(planner=plan(150), tools={"work": work_until(None)}, trace=trace).run("g")
    before, _ = the_seal(trace)
    assert len(before) > 2 * BLOCK
    trace.write_bytes(before)  # as a run written before seals existed ends
    assert cli.main(["verify", str(trace)]) == 1  # the CLI in this process: `harness` calls this main()
    capsys.readouterr()
    assert cli.main(["seal", str(trace)]) == 0
    out = capsys.readouterr()
    assert "unkeyed" in out.out, out.err
    intact(trace)
    assert cli.main(["verify", str(trace)]) == 0


def test_a_torn_seal_is_completed_by_a_resume_with_the_recorded_digests(trace: Path) -> None:
    Executor(planner=plan(150), tools={"work": work_until(None)}, trace=trace).run("g")
    before, _ = the_seal(trace)
    size = trace.stat().st_size
    os.truncate(trace, len(before) + (size - len(before)) // 2)  # the writer died writing its seal
    mark = load(str(trace))
    assert mark is not None and mark.end // BLOCK >= 2 and resume_point(str(trace)).tail.since == mark.end
    assert finish(trace, 150).state == "DONE"
    intact(trace)


def test_a_sigkilled_multi_block_run_resumes_and_its_seal_verifies(tmp_path: Path, trace: Path) -> None:
    marker = tmp_path / "inside"
    assert kill_in_call(trace, marker, steps=200, at=150, pad=60_000) == -signal.SIGKILL
    mark = load(str(trace))  # written as the run went, its digests read back from the page cache
    assert mark is not None and mark.end // BLOCK >= 2
    assert mark.block_digests() == blocks_of(trace.read_bytes(), mark.end)
    assert resume_point(str(trace)).tail.since == mark.end
    assert finish(trace, 200).state == "DONE"
    intact(trace)
