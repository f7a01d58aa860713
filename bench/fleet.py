"""Fleet benchmarks (python bench/run.py --fleet [--smoke]): Ray and object storage, measured.

Lines (the keys of the JSON):
- ray_runs_per_s: runs of `steps` steps finished per second by
  `harness.ray.run_many` on a local Ray cluster (2 CPUs), traces on a local
  S3 server; one_process_runs_per_s: the same runs one after another in one
  process, traces on the same server; ray_speedup is their ratio. Ray's
  start-up is measured apart (ray_init_s), not counted in the rate.
- s3_durable_step_ms: one step of a declared (idempotent) tool, traced on
  the local S3 server: its intent, its result and its checkpoint are each a
  segment created with If-None-Match; fsync_durable_step_ms: the same step
  on a local file with durability="fsync"; s3_vs_fsync their ratio.

The S3 server is moto in server mode, started here as its own process on
127.0.0.1 (unless $AWS_ENDPOINT_URL already names one). A local moto is no
measure of AWS's latency (tens of ms per PUT): the figures compare the
harness's work on the two paths, and say what a step costs in requests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from harness import Checkpoint, Executor, Step, Tool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = {"smoke": {"runs": 6, "steps": 3, "durable": 5}, "full": {"runs": 200, "steps": 20, "durable": 200}}
KEYS = ("ray_runs_per_s", "one_process_runs_per_s", "ray_speedup", "s3_durable_step_ms", "fsync_durable_step_ms")


def planner(goal: dict[str, Any], done: list[Checkpoint]) -> Step | None:
    return Step(f"s{len(done)}", "work", {"i": len(done)}) if len(done) < goal["steps"] else None


def work(**args: Any) -> dict[str, Any]:
    return {"ok": True, **args}


def make_agent() -> tuple[Any, dict[str, Any], None]:
    """The benchmarked agent: `steps` no-op steps of a plain tool (the workers import it as bench.fleet)."""
    return planner, {"work": work}, None


def make_durable_agent() -> tuple[Any, dict[str, Any], None]:
    return planner, {"work": Tool(lambda idempotency_key, **a: {"key": idempotency_key}, idempotent=True)}, None


@contextmanager
def s3() -> Iterator[str]:
    """A local S3 endpoint: $AWS_ENDPOINT_URL if set, else a moto server process started here."""
    if os.environ.get("AWS_ENDPOINT_URL"):
        yield os.environ["AWS_ENDPOINT_URL"]
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
    os.environ.update(env, AWS_DEFAULT_REGION="us-east-1")
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield endpoint
    finally:
        server.kill()
        server.wait()
        for k in env:
            os.environ.pop(k, None)


def bucket() -> str:
    import fsspec

    name = f"bench{uuid.uuid4().hex[:10]}"
    fsspec.filesystem("s3").mkdir(name)
    return f"s3://{name}"


def run(mode: str, log: Any) -> dict[str, Any]:
    import ray

    from harness.ray import run_many

    sizes = SIZES[mode]
    runs, steps = sizes["runs"], sizes["steps"]
    out: dict[str, Any] = {}
    detail: dict[str, Any] = {"sizes": sizes}
    with s3():
        from s3fs import S3FileSystem

        S3FileSystem.clear_instance_cache()
        goals = [{"steps": steps, "n": i} for i in range(runs)]

        log(f"{runs} runs of {steps} steps in one process, traces on S3")
        where = bucket()
        planner_, tools, _ = make_agent()
        t0 = time.perf_counter()
        for i, g in enumerate(goals):
            Executor(planner=planner_, tools=tools, trace=f"{where}/one/{i}.jsonl").run(g)
        one = time.perf_counter() - t0
        out["one_process_runs_per_s"] = runs / one

        log(f"the same {runs} runs on Ray (2 CPUs)")
        started = not ray.is_initialized()
        if started:
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
            t0 = time.perf_counter()
            ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, log_to_driver=False)
            detail["ray_init_s"] = time.perf_counter() - t0
        try:
            run_many(goals[:2], agent="bench.fleet:make_agent", runs=f"{where}/warm", batch="warm")  # workers up
            t0 = time.perf_counter()
            done = run_many(goals, agent="bench.fleet:make_agent", runs=f"{where}/ray", batch="b")
            on_ray = time.perf_counter() - t0
        finally:
            if started:
                ray.shutdown()
        assert all(o.state == "DONE" for o in done)
        out["ray_runs_per_s"] = runs / on_ray
        out["ray_speedup"] = one / on_ray

        n = sizes["durable"]
        log(f"a durable step: {n} steps of a declared tool, on S3 and on a local file with fsync")
        planner_, tools, _ = make_durable_agent()
        t0 = time.perf_counter()
        Executor(planner=planner_, tools=tools, trace=f"{where}/durable.jsonl").run({"steps": n})
        out["s3_durable_step_ms"] = (time.perf_counter() - t0) / n * 1e3
        with tempfile.TemporaryDirectory() as folder:
            t0 = time.perf_counter()
            trace = os.path.join(folder, "durable.jsonl")
            Executor(planner=planner_, tools=tools, trace=trace, durability="fsync").run({"steps": n})
            out["fsync_durable_step_ms"] = (time.perf_counter() - t0) / n * 1e3
        detail["s3_vs_fsync"] = out["s3_durable_step_ms"] / out["fsync_durable_step_ms"]
    return {"mode": mode, "detail": detail, **out}


def table(result: dict[str, Any]) -> str:
    s = result["detail"]["sizes"]
    what = {
        "ray_runs_per_s": f"runs/s, {s['runs']} runs of {s['steps']} steps, run_many on Ray (2 CPUs), traces on S3",
        "one_process_runs_per_s": "runs/s, the same runs one after another in one process, traces on S3",
        "ray_speedup": "Ray / one process",
        "s3_durable_step_ms": "ms per step of a declared tool, trace on the local S3 server (3 segments a step)",
        "fsync_durable_step_ms": "ms per step of a declared tool, local file, durability='fsync'",
    }
    rows = ["| key | what | measured |", "|---|---|---|"]
    rows += [f"| `{k}` | {what[k]} | {result[k]:.3g} |" for k in KEYS]
    return "\n".join(rows)


def main(mode: str, json_path: str | None, log: Any) -> int:
    import json

    result = run(mode, log)
    print(table(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0
