"""Quick start: a four-step run loses power at step three, is resumed, and is replayed.

    python examples/quickstart.py [TRACE]

Offline, no keys. The run makes a pot of tea in four steps. It starts in a
child process whose kitchen tool kills that process with SIGKILL in the
middle of step three: a real power cut, nothing gets to clean up. This
process then reads what the trace says, resumes the run in the same file
with a second executor (resume=True), and replays the finished trace,
which runs no tool. The trace goes to TRACE, or to a new temporary folder.
Exits 1 if anything turns out other than described here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from typing import Any

from harness import Executor, Step, replay

GOAL = {"make": "tea", "steps": ["boil the water", "warm the pot", "steep the leaves", "pour"]}
POWER_CUT = "steep the leaves"


def plan(goal: Any, progress: list[Any]) -> Step | None:
    """The next step of the recipe, or None when every step is verified."""
    if len(progress) == len(goal["steps"]):
        return None
    action = goal["steps"][len(progress)]
    return Step(name=action, tool="kitchen", args={"action": action})


def kitchen(action: str, *, cut_power: bool = False) -> dict[str, Any]:
    print(f"   step {GOAL['steps'].index(action) + 1}: {action} ...", end=" ", flush=True)
    if cut_power and action == POWER_CUT:
        print("power cut (SIGKILL)", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    print("done")
    return {"action": action, "ok": True}


def verify(step: Step, result: Any) -> bool:
    return bool(result["ok"]) and result["action"] == step.args["action"]


def executor(trace: str, *, resume: bool, cut_power: bool) -> Executor:
    def tool(action: str) -> dict[str, Any]:
        return kitchen(action, cut_power=cut_power)

    return Executor(planner=plan, tools={"kitchen": tool}, verifier=verify, trace=trace, resume=resume)


def check(ok: bool, what: str) -> None:
    if not ok:
        print(f"UNEXPECTED: {what}", file=sys.stderr)
        raise SystemExit(1)


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # the first process: it never comes back from step three
        executor(sys.argv[2], resume=False, cut_power=True).run(GOAL)
        return
    trace = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.mkdtemp(prefix="harness-"), "tea.jsonl")
    if os.path.exists(trace):
        raise SystemExit(f"{trace} already exists; give the path of a new file")
    print(f"harness quick start: trace {trace}")

    print("1. a child process starts the run:")
    child = subprocess.run([sys.executable, __file__, "--child", trace])
    check(child.returncode == -signal.SIGKILL, f"the child should die of SIGKILL, it exited with {child.returncode}")

    intents: list[dict[str, Any]] = []  # every step's intent (its transition into ACT), as replay() checks it
    r = replay(trace, on_record=lambda _line, rec: intents.append(rec) if rec.get("to") == "ACT" else None)
    started = intents[-1]["name"] if intents else None
    print(f"2. the trace it left: state {r.state}, {len(r.checkpoints)} verified checkpoints, "
          f"step 3 ({started!r}) started but never returned")  # fmt: skip
    check((r.state, len(r.checkpoints), started) == ("ACT", 2, POWER_CUT), "the crash should leave 2 checkpoints")

    print(f"3. this process (pid {os.getpid()}) resumes the run in the same file:")
    out = executor(trace, resume=True, cut_power=False).run(GOAL)
    print(f"   -> {out.state}")
    check(out.state == "DONE", "the resumed run should finish")

    r = replay(trace)
    print(f"4. replay(), running no tool: {r.state}, {len(r.checkpoints)} checkpoints, {r.resumes} resume, "
          f"seq 1..{r.last_seq} contiguous, torn tail: {r.torn_tail}")  # fmt: skip
    for c in r.checkpoints:
        print(f"   seq {c.seq}: checkpoint of step {c.step + 1} ({c.name}) -> {c.result}")
    check((r.state, len(r.checkpoints), r.resumes) == ("DONE", 4, 1), "replay should show 4 checkpoints, 1 resume")
    print(f"see every record: harness show {trace}")


if __name__ == "__main__":
    main()
