"""The picture in docs/guides/observability.md: a crashed, resumed and forked run in Arize Phoenix.

    python -m venv /tmp/phoenix && /tmp/phoenix/bin/pip install arize-phoenix    # a venv of its own
    .venv/bin/python docs/shots/phoenix.py --phoenix /tmp/phoenix/bin/phoenix    # [--out PNG]

Phoenix is not a dependency of harness: it lives in a venv of its own, and this script is no test. It
starts `phoenix serve` on 127.0.0.1 with a fresh working folder, and the local chat-completions server of
examples/local_model.py (no network, no key). A Pydantic AI agent (examples/pydantic_ai_agent.py's weather
agent, its tool idempotent) runs in a child process that SIGKILLs itself inside the tool; this process
resumes the run to its end, then forks it at its last model call with another answer. `harness export
--otlp-endpoint` sends the two runs to Phoenix, and Playwright drives the system's chromium to Phoenix's
trace view of the resumed run, its tool span open, and saves the screenshot. Needs `.[test]` (pydantic-ai,
openai, playwright, opentelemetry-proto) and /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "examples"))

from local_model import serve  # noqa: E402  (examples/ is not a package)
from openai import AsyncOpenAI  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

import harness  # noqa: E402
from harness.pydantic_ai import HarnessDurability  # noqa: E402

PORT = 6006
QUESTION = "Will it rain in Paris tomorrow?"
CHROMIUM = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


@harness.tool(idempotent=True)  # a crash inside it: the resume makes it again, with the same key
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    if os.environ.get("SHOT_KILL") == "in-forecast":
        os.kill(os.getpid(), signal.SIGKILL)  # the first process dies here, the tool call in flight
    return f"sunny in {city}"


@harness.workflow
async def weather(question: str) -> str:
    client = AsyncOpenAI(base_url=os.environ["SHOT_MODEL"], api_key="sk-example-not-a-real-key")
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="weather", capabilities=[HarnessDurability()])
    agent.tool_plain(forecast)
    return (await agent.run(question)).output


def make_runs(folder: Path) -> list[Path]:
    """The run SIGKILLed in its tool and resumed, and its fork: their traces."""
    url, stop = serve()
    os.environ["SHOT_MODEL"] = url
    trace = folder / "weather.jsonl"
    child = [sys.executable, __file__, "--child", str(trace)]
    died = subprocess.run(child, env={**os.environ, "SHOT_KILL": "in-forecast"}, check=False)
    if died.returncode != -signal.SIGKILL:
        raise SystemExit(f"the first process was to die of SIGKILL in its tool; it exited with {died.returncode}")
    resumed = weather.run(QUESTION, trace=trace, resume=True)
    if resumed.state != "DONE":
        raise SystemExit(f"the resume ended {resumed.state}, not DONE: {trace}")
    last = [c for c in harness.replay(trace).crossings if c.kind == "pydantic_ai.model"][-1]
    fork = folder / "weather-fork.jsonl"
    harness.fork(trace, at=last.seq, set={"parts[0].content": "Rain is likely: take an umbrella."},
                 workflow=weather, out=fork)  # fmt: skip
    stop()
    return [trace, fork]


def start_phoenix(phoenix: str, work: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(work), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_PORT": str(PORT), "PHOENIX_TELEMETRY_ENABLED": "false"}  # fmt: skip
    server = subprocess.Popen([phoenix, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=1)
            return server
        except OSError:
            time.sleep(0.5)
    server.kill()
    raise SystemExit("phoenix did not answer on 127.0.0.1:6006 within 2 minutes")


def shoot(run_id: str, out: Path) -> None:
    """Phoenix's view of the run's trace, its tool span's resume event open, cropped to the trace."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    trace_id = hashlib.sha256(run_id.encode()).digest()[:16].hex()  # as harness derives it (observability.md)
    project = base64.b64encode(b"Project:1").decode()  # a fresh Phoenix's default project
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        tool = page.get_by_text("execute_tool forecast").first
        for _ in range(20):  # Phoenix writes what it received in the background: wait until the trace is there
            page.goto(f"http://127.0.0.1:{PORT}/projects/{project}/traces/{trace_id}")
            try:
                tool.wait_for(timeout=3000)
                break
            except PlaywrightTimeout:  # not there yet: load again
                continue
        tool.click()
        page.get_by_role("tab", name="Events").click()
        page.get_by_text("harness.resume").first.click()
        page.get_by_text("harness.served").first.wait_for()
        page.wait_for_timeout(500)  # the expanding animation
        page.screenshot(path=str(out), clip={"x": 350, "y": 46, "width": 1050, "height": 505})
        browser.close()


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--phoenix", help="Phoenix's phoenix command (else: one already on port 6006)")
    args.add_argument("--out", type=Path, default=HERE.parent / "img" / "phoenix-resumed-run.png")
    args.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    opts = args.parse_args()
    if opts.child:  # the first process: runs until the tool kills it
        weather.run(QUESTION, trace=opts.child)
        return 1
    folder = Path(tempfile.mkdtemp(prefix="phoenix-shot-"))
    traces = make_runs(folder)
    server = start_phoenix(opts.phoenix, folder / "phoenix") if opts.phoenix else None
    try:
        endpoint = f"http://127.0.0.1:{PORT}"
        subprocess.run([sys.executable, "-m", "harness", "export", *map(str, traces), "--otlp-endpoint", endpoint],
                       check=True)  # fmt: skip
        shoot(harness.replay(traces[0]).run_id, opts.out)
    finally:
        if server:
            server.terminate()
            server.wait(30)
    print(f"{opts.out}: {opts.out.stat().st_size} bytes; traces in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
