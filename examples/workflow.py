"""Durable functions: a research agent written as a plain function, made durable by @harness.workflow.

    python examples/workflow.py [FOLDER]

Offline, no keys. The agent is an ordinary loop: it asks a model for an
outline, looks each point up, reserves a slot at the printer (an idempotent
tool) and emails the report (an unsafe one: it must never go out twice). It
runs in a child process that is killed with SIGKILL right after the slot is
reserved. This process then resumes the run from its trace: the function
runs again from its first line, everything the trace holds is served to it
(no model call and no tool call is made again), and the email goes out once.
Last, the finished run is rerun with zero live calls, as a golden test in CI
does. The files go to FOLDER, or to a new temporary folder. Exits 1 if
anything turns out other than described here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import harness

LEDGER = Path(os.environ.get("WORKFLOW_LEDGER", "."))  # where the model and the tools note what they did


def noted(what: str) -> None:
    with open(LEDGER / "calls.log", "a") as f:
        f.write(what + "\n")


def local_model(request: dict[str, Any]) -> str:
    """Stands in for your model client (OpenAI, Anthropic, a local model): same request, same answer."""
    noted(f"model: {request['prompt']}")
    if request["prompt"].startswith("outline"):
        return "tides; rock pools; anemones"
    return f"notes on {request['prompt']}"


def look_up(point: str) -> dict[str, Any]:
    noted(f"look_up: {point}")
    return {"point": point, "sources": 2}


def reserve_printer(pages: int, idempotency_key: str) -> dict[str, Any]:
    noted(f"reserve_printer: {idempotency_key}")
    if os.environ.get("WORKFLOW_POWER_CUT"):  # the demo's crash: the slot is reserved, then the power goes
        os.kill(os.getpid(), signal.SIGKILL)
    return {"slot": "printer-3", "pages": pages}


def send_email(to: str, body: str) -> dict[str, Any]:
    noted(f"send_email: {to}")
    return {"sent": to}


@harness.workflow
def research(topic: str, *, to: str) -> dict[str, Any]:
    """The agent: a plain function. Only its calls to the world go through harness."""
    outline = harness.llm({"prompt": f"outline {topic}"}, local_model)
    notes = []
    for point in outline.split("; "):
        found = harness.call(look_up, point=point)
        notes.append(harness.llm({"prompt": f"{point} ({found['sources']} sources)"}, local_model))
    slot = harness.call(harness.Tool(reserve_printer, idempotent=True), pages=len(notes))
    sent = harness.call(harness.Tool(send_email, idempotent=False), to=to, body="\n".join(notes))
    return {"topic": topic, "notes": notes, "slot": slot["slot"], "sent": sent["sent"]}


def check(ok: bool, what: str) -> None:
    if not ok:
        print(f"UNEXPECTED: {what}", file=sys.stderr)
        raise SystemExit(1)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="harness-workflow-"))
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / "research.jsonl"
    env = {**os.environ, "WORKFLOW_LEDGER": str(folder), "WORKFLOW_POWER_CUT": "1"}
    here = Path(__file__).resolve().parent
    child = (
        f"import sys; sys.path.insert(0, {str(here)!r}); import workflow; "
        f"workflow.research.run('tide pools', to='team@example.com', trace={str(trace)!r})"
    )
    print("1. the agent runs in a child process, which loses power after reserving the printer")
    done = subprocess.run([sys.executable, "-c", child], env=env, check=False)
    check(done.returncode == -signal.SIGKILL, f"the child should have been killed, exit {done.returncode}")
    before = (folder / "calls.log").read_text().splitlines()
    print(f"   made before the crash: {len(before)} calls; the trace ends in {harness.replay(trace).state}")

    print("2. this process resumes it: the function runs again, what the trace holds is served")
    global LEDGER
    LEDGER = folder
    out = research.run("tide pools", to="team@example.com", trace=trace, resume=True)
    after = (folder / "calls.log").read_text().splitlines()[len(before) :]
    print(f"   {out.state}: {out.result}")
    print(f"   calls made by the resume: {after}")
    check(out.state == "DONE" and out.result["sent"] == "team@example.com", "the run should end DONE, email sent")
    check(after == ["reserve_printer: " + before[-1].split(": ")[1], "send_email: team@example.com"],
          "the resume should make only the interrupted reservation (same key) and the email")  # fmt: skip

    print("3. a rerun, as a golden test in CI does: every call served, none made")
    r = harness.rerun(trace, workflow=research)
    print(f"   equal: {r.equal}, live calls: {r.live_calls}")
    check(r.equal and r.live_calls == 0, "the rerun should be equal with zero live calls")
    print(f"trace: {trace}")


if __name__ == "__main__":
    main()
