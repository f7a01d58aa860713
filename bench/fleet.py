"""Fleet benchmarks (python bench/run.py --fleet [--smoke]): Ray and object storage, measured.

Lines (the keys of the JSON):
Variants run interleaved, in rounds (A B C, B C A, ...), and each figure
is the median round, so that the load of a shared machine falls on all
alike.

- ray_runs_per_s: runs of `steps` steps finished per second by
  `harness.ray.run_many` on a local Ray cluster (2 CPUs), traces on a local
  S3 server; one_process_runs_per_s: the same runs one after another in one
  process, traces on the same server; ray_speedup is their ratio. Ray's
  start-up is measured apart (ray_init_s), not counted in the rate.
- s3_durable_step_ms: one step of a declared (idempotent) tool, traced on
  the local S3 server: its intent, its result and its checkpoint are each a
  segment created with If-None-Match; fsync_durable_step_ms: the same step
  on a local file with durability="fsync"; s3_vs_fsync their ratio, and
  s3_conditional_put_ms the bare conditional PUT, for scale.
- in "detail" also: the same runs with traces in a local folder, on Ray and
  in one process, which takes the S3 server out of the comparison.

The S3 server is moto in server mode, started here as its own process on
127.0.0.1 (unless $AWS_ENDPOINT_URL already names one). A local moto is no
measure of AWS's latency (tens of ms per PUT): the figures compare the
harness's work on the two paths, and say what a step costs in requests.
"""

from __future__ import annotations

import os
import socket
import statistics
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
SIZES = {
    "smoke": {"runs": 2, "steps": 1, "durable": 2, "rounds": 1},  # proves it runs and reports; measures nothing
    "full": {"runs": 200, "steps": 20, "durable": 200, "rounds": 5},
}  # each variant runs runs/rounds runs (durable/rounds steps) per round; the median round is reported
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
    import fsspec
    import ray

    from harness.ray import run_many

    sizes = SIZES[mode]
    runs, steps, n, rounds = sizes["runs"], sizes["steps"], sizes["durable"], sizes["rounds"]
    detail: dict[str, Any] = {"sizes": sizes, "load_average": os.getloadavg()}
    with s3(), tempfile.TemporaryDirectory() as scratch:
        from s3fs import S3FileSystem

        S3FileSystem.clear_instance_cache()
        where = bucket()
        fs = fsspec.filesystem("s3")
        durable, _, _ = make_durable_agent()
        plain, _, _ = make_agent()
        count = iter(range(10**9))

        def put() -> None:  # the baseline: the bare conditional create a segment costs
            for _ in range(n // rounds):
                with fs.open(f"{where[5:]}/put/{next(count):08d}.seg", "xb") as f:
                    f.write(b"x" * 600)

        def durable_steps(trace: str, durability: str) -> None:
            tools = make_durable_agent()[1]
            Executor(planner=durable, tools=tools, trace=trace, durability=durability).run({"steps": n // rounds})

        log(f"a durable step: {n} steps of a declared tool on S3 and on a local file with fsync, in {rounds} rounds")
        per_step = interleaved(
            {
                "s3_conditional_put_ms": put,
                "s3_durable_step_ms": lambda: durable_steps(f"{where}/durable-{next(count)}.jsonl", "flush"),
                "fsync_durable_step_ms": lambda: durable_steps(f"{scratch}/durable-{next(count)}.jsonl", "fsync"),
            },
            rounds,
        )
        ms = {k: v / (n // rounds) * 1e3 for k, v in per_step.items()}

        started = not ray.is_initialized()
        if started:
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
            t0 = time.perf_counter()
            ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, log_to_driver=False)
            detail["ray_init_s"] = time.perf_counter() - t0
        try:
            run_many([{"steps": 1}] * 2, agent="bench.fleet:make_agent", runs=f"{where}/warm", batch="w")  # workers up
            each = runs // rounds
            goals = [{"steps": steps, "n": i} for i in range(each)]
            tools = make_agent()[1]

            def one(folder: str) -> None:
                for g in goals:
                    Executor(planner=plain, tools=tools, trace=f"{folder}/{next(count)}.jsonl").run(g)

            def many(folder: str) -> None:
                done = run_many(goals, agent="bench.fleet:make_agent", runs=folder, batch=f"b{next(count)}")
                assert all(o.state == "DONE" for o in done)

            os.makedirs(f"{scratch}/local", exist_ok=True)
            log(f"{runs} runs of {steps} steps, on Ray and in one process, S3 and a local folder, in {rounds} rounds")
            seconds = interleaved(
                {
                    "one_s3": lambda: one(f"{where}/one"),
                    "ray_s3": lambda: many(f"{where}/ray"),
                    "one_local": lambda: one(f"{scratch}/local"),
                    "ray_local": lambda: many(f"{scratch}/local"),
                },
                rounds,
            )
        finally:
            if started:
                ray.shutdown()
    out = {
        "ray_runs_per_s": each / seconds["ray_s3"],
        "one_process_runs_per_s": each / seconds["one_s3"],
        "ray_speedup": seconds["one_s3"] / seconds["ray_s3"],
        "s3_durable_step_ms": ms["s3_durable_step_ms"],
        "fsync_durable_step_ms": ms["fsync_durable_step_ms"],
    }
    detail.update(
        s3_conditional_put_ms=ms["s3_conditional_put_ms"],
        s3_vs_fsync=ms["s3_durable_step_ms"] / ms["fsync_durable_step_ms"],
        one_process_local_runs_per_s=each / seconds["one_local"],
        ray_local_runs_per_s=each / seconds["ray_local"],
        ray_local_speedup=seconds["one_local"] / seconds["ray_local"],
    )
    return {"mode": mode, "detail": detail, **out}


def interleaved(variants: dict[str, Any], rounds: int) -> dict[str, float]:
    """Median seconds of each variant over `rounds` rounds, the order rotated each round (A B C, B C A, ...)."""
    names = list(variants)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            variants[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def table(result: dict[str, Any]) -> str:
    s = result["detail"]["sizes"]
    what = {
        "ray_runs_per_s": f"runs/s, {s['runs']} runs of {s['steps']} steps, run_many on Ray (2 CPUs), traces on S3",
        "one_process_runs_per_s": "runs/s, the same runs one after another in one process, traces on S3",
        "ray_speedup": "Ray / one process",
        "s3_durable_step_ms": "ms per step of a declared tool, trace on the local S3 server (3 segments a step)",
        "fsync_durable_step_ms": "ms per step of a declared tool, local file, durability='fsync'",
    }
    more = {
        "s3_conditional_put_ms": "ms per bare conditional PUT (If-None-Match) of 600 bytes on the same server",
        "one_process_local_runs_per_s": "runs/s in one process, traces in a local folder",
        "ray_local_runs_per_s": "runs/s on Ray, traces in a local folder (the S3 server out of the loop)",
        "ray_local_speedup": "Ray / one process, local folder",
        "ray_init_s": "seconds to start the local Ray cluster (not counted above)",
    }
    d = result["detail"]
    rows = ["| key | what | measured |", "|---|---|---|"]
    rows += [f"| `{k}` | {what[k]} | {result[k]:.3g} |" for k in KEYS]
    rows += [f"| `{k}` | {what} | {d[k]:.3g} |" for k, what in more.items() if k in d]
    load = ", ".join(f"{x:.1f}" for x in d["load_average"])
    return "\n".join([*rows, "", f"load average when it started: {load} (2 cores)"])


def main(mode: str, json_path: str | None, log: Any) -> int:
    import json

    result = run(mode, log)
    print(table(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0
