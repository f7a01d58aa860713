"""How fast runs become OpenTelemetry spans (`harness export --otlp`) and a ledger (`harness cost`).

    python bench/otlp.py              # 10,000 runs of 20 crossings each (10 model calls, 10 tool calls)
    python bench/otlp.py --quick      # 1,000 runs
    python bench/otlp.py --smoke      # 100 runs, for the test suite
    python bench/otlp.py --json PATH  # also write the figures

The runs: one workflow run recorded for real (10 `harness.llm` calls with an
OpenAI-shaped request and response, usage included, each followed by a tool
step), its records written again under 10,000 run ids (each trace valid: its
checksum chain written anew; unsealed, since a seal covers the run id), in
one folder. Measured in this process, pinned to one CPU: `export()` of the
folder to an OTLP/JSON file (every line checked against the checksum
chain, 21 spans a run), the same with `full=True` (every trace through
replay()), and `ledger()` of it; and, as the baseline the figures of
bench/run.py are, `replay()` of every trace in the same rounds:
`otlp_export_vs_replay` is the median over rounds of the export's time over
replay()'s, a ratio that the machine's load moves far less than the
absolute figures. Each figure is on CPU time (what one core does; the
disk's cache is warm after the first round), the median of the rounds and
their best (the least disturbed by other processes on a shared machine).
`reference_loop_us`, the CPU time of `sum(range(1000))` in the same
process (best of the rounds), says how fast the core was while it ran:
every absolute figure above slows with it (a shared machine under load
takes several times what the same core takes alone), so compare spans/s
only between runs whose reference is close, and read the ratio otherwise.
Nothing is asserted: the target is 50,000 spans/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import harness
from harness.ops.otlp import export
from harness.review.cost import ledger
from harness.testing import read_records, write_trace

CALLS = 10  # model calls a run, each followed by a tool call: 20 crossings


def look_up(point: str) -> dict[str, Any]:
    return {"point": point, "sources": 2}


def model(request: dict[str, Any]) -> dict[str, Any]:
    n = len(request["messages"])
    return {
        "id": f"chatcmpl-{n}", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": f"note {n}"}}],
        "usage": {"prompt_tokens": 120 + n, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 64}},
    }  # fmt: skip


@harness.workflow
def research(topic: str) -> list[str]:
    notes = []
    for i in range(CALLS):
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{topic} {i}"}]
        answer = harness.llm({"model": "gpt-4o-mini", "messages": messages}, model)
        notes.append(harness.call(look_up, point=answer["choices"][0]["message"]["content"])["point"])
    return notes


def make_runs(folder: Path, runs: int) -> None:
    """`runs` traces of the same records under fresh run ids, each with its checksum chain."""
    one = folder / "one.jsonl"
    research.run("tide pools", trace=one)
    records = [r for r in read_records(one) if r["kind"] != "seal"]
    one.unlink()
    for i in range(runs):
        records[0] = {**records[0], "run_id": uuid.UUID(int=i + 1).hex}
        write_trace(folder / f"run-{i:05d}.jsonl", records)


def cpu() -> float:
    return time.process_time()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--smoke", action="store_true")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--dir", help="where the scratch files go")
    args = p.parse_args()
    runs = 100 if args.smoke else 1_000 if args.quick else 10_000
    rounds = 1 if args.smoke else 5
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    scratch = Path(tempfile.mkdtemp(prefix="bench-otlp-", dir=args.dir))
    try:
        folder = scratch / "runs"
        folder.mkdir()
        make_runs(folder, runs)
        exports, checked, costs, replays, spans = [], [], [], [], 0
        names = sorted(str(p) for p in folder.iterdir())
        for _ in range(rounds):
            t0 = cpu()
            for name in names:
                harness.replay(name)
            replays.append(cpu() - t0)
            t0 = cpu()
            done = export([folder], scratch / "spans.jsonl")
            exports.append(cpu() - t0)
            spans = done.spans
            t0 = cpu()
            export([folder], scratch / "checked.jsonl", full=True)
            checked.append(cpu() - t0)
            t0 = cpu()
            book = ledger([folder])
            costs.append(cpu() - t0)
            assert len(book.runs) == runs and done.runs == runs
        reference = min(timeit.repeat("sum(range(1000))", number=2000, repeat=rounds * 3, timer=cpu)) / 2000 * 1e6
        figures = {
            "mode": "smoke" if args.smoke else "quick" if args.quick else "full",
            "runs": runs, "spans": spans, "spans_per_run": spans / runs,
            "otlp_export_spans_per_s": spans / statistics.median(exports),
            "otlp_export_spans_per_s_best": spans / min(exports),
            "otlp_export_checked_spans_per_s": spans / statistics.median(checked),
            "otlp_export_vs_replay": statistics.median(e / r for e, r in zip(exports, replays, strict=True)),
            "cost_runs_per_s": runs / statistics.median(costs),
            "bytes_per_span": (scratch / "spans.jsonl").stat().st_size / spans,
            "load_average": os.getloadavg()[0],
            "reference_loop_us": reference,
        }  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"| line | {figures['mode']} |\n|---|---|")
    for key in ("otlp_export_spans_per_s", "otlp_export_spans_per_s_best", "otlp_export_checked_spans_per_s",
                "cost_runs_per_s", "bytes_per_span", "otlp_export_vs_replay", "reference_loop_us"):  # fmt: skip
        value = figures[key]
        print(f"| {key} | {value:,.2f} |" if value < 100 else f"| {key} | {value:,.0f} |")
    print(f"({runs:,} runs, {spans:,} spans, one core, CPU time, median of {rounds} rounds; "
          f"load average {figures['load_average']:.1f})")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
