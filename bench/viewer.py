"""How fast the web viewer opens big folders and big traces (the figures in docs/guides/viewer.md).

    python bench/viewer.py            # 10,000 traces in a folder, a 100,000-record trace
    python bench/viewer.py --quick    # 1,000 traces, a 10,000-record trace

Measured server-side through Starlette's TestClient (the HTTP request and
JSON encoding included, the browser's rendering not): the runs table
(`GET /api/runs`) cold (first listing) and warm (the page's refresh), a
big run's first paint (`GET /api/runs/{id}`: index and replay() verdict,
then the first window of 300 records), one record, and a window in the
middle. Each figure is the median of a few runs. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Executor
from harness.testing import fixed_plan, steps
from harness.viewer import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def local(app, **options):  # type: ignore[no-untyped-def]
    return TestClient(app, base_url="http://127.0.0.1", **options)


def timed(fn, rounds: int = 5) -> str:  # type: ignore[no-untyped-def]
    """`wall ms (cpu ms)`, medians: the CPU time of this process says less about a busy machine's other jobs."""
    walls, cpus = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return f"{statistics.median(walls) * 1000:.0f} ms (cpu {statistics.median(cpus) * 1000:.0f} ms)"


def in_browser(many: Path, big: Path) -> None:
    """Both pages in headless Chromium: from navigation to drawn (body[data-loaded]), a new server each time."""
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        chromium = None
    if chromium is None:
        print("in the browser: skipped (needs the playwright package and a chromium on PATH)")
        return
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for label, folder, path in (("runs page", many, "/"), ("run page, 100k records", big, "/runs/long")):
            times = []
            for _ in range(3):
                proc = subprocess.Popen(
                    [sys.executable, "-m", "harness.cli", "serve", str(folder), "--port", "0"],
                    stdout=subprocess.PIPE, text=True,
                )  # fmt: skip
                assert proc.stdout is not None
                url = proc.stdout.readline().split()[2].rstrip("/")
                page = browser.new_page()
                t0 = time.perf_counter()
                page.goto(url + path)
                page.wait_for_selector("body[data-loaded]", timeout=60_000)
                times.append(time.perf_counter() - t0)
                page.close()
                proc.terminate()
                proc.wait()
            print(f"in the browser, {label}: drawn {statistics.median(times) * 1000:.0f} ms after navigation")
        browser.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n_runs, n_records = (1_000, 10_000) if args.quick else (10_000, 100_000)
    root = Path(tempfile.mkdtemp(prefix="viewer-bench-"))
    try:
        many = root / "many"
        many.mkdir()
        Executor(planner=fixed_plan(steps(4)), tools={"work": dict}, trace=many / "seed.jsonl").run("four steps")
        seed = (many / "seed.jsonl").read_bytes()
        for i in range(n_runs - 1):
            (many / f"run-{i:05d}.jsonl").write_bytes(seed)
        big = root / "big"
        big.mkdir()
        Executor(
            planner=fixed_plan(steps(n_records // 3)), tools={"work": dict}, trace=big / "long.jsonl", max_steps=None
        ).run("long")
        size = (big / "long.jsonl").stat().st_size

        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")

        def cold_list() -> None:
            with local(create_app(many)) as c2:  # a new server: nothing read yet
                c2.get("/api/runs").raise_for_status()

        cold = timed(cold_list, 3)
        with local(create_app(many)) as c:
            rows = len(c.get("/api/runs").json()["runs"])
            warm = timed(lambda: c.get("/api/runs"))
            body = len(c.get("/api/runs").content)
        print(f"runs table, {rows} traces: first {cold}, refresh {warm}, {body / 1e6:.1f} MB")

        def first_paint() -> None:
            with local(create_app(big)) as c2:  # a new server: nothing indexed yet
                c2.get("/api/runs/long").raise_for_status()
                c2.get("/api/runs/long/records?start=0&count=300").raise_for_status()

        with local(create_app(big)) as c:
            summary = c.get("/api/runs/long")
            records = summary.json()["records"]
            one = timed(lambda: c.get(f"/api/runs/long/record?line={records // 2}"), 20)
            middle = timed(lambda: c.get(f"/api/runs/long/records?start={records // 2}&count=300"), 20)
            again = timed(lambda: c.get("/api/runs/long"), 3)
        paint = timed(first_paint, 3)
        print(
            f"run page, {records} records ({size / 1e6:.0f} MB): first open {paint} "
            f"(summary {len(summary.content) / 1e3:.0f} KB), summary again {again}, "
            f"a window of 300 {middle}, one record {one}"
        )
        in_browser(many, big)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
