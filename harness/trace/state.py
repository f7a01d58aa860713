"""The run's state machine, as one table.

Everything that decides which state may follow which lives here. The
executor asks `check()` before it writes a transition, `replay()` asks the
same function for every transition it reads, and the diagram of the docs
(docs/concepts/executor.md) is generated from `EDGES` (see `mermaid()`), so
the three cannot drift apart.
A run starts in INIT; DONE and FAILED are terminal; PAUSED is not: a run
waits there for an operator to reconcile an operation of uncertain outcome,
or for a human to answer the question agent code asked with `interrupt()`
(then it goes back to the state it asked from: PLAN, ACT or VERIFY), or for
a larger budget (a live model call of its planner, verifier or workflow
would have passed it: a resume goes back to PLAN or VERIFY).

Most records make one move (a `transition` record: from -> to). A
`checkpoint` record makes the moves in `CHECKPOINT_MOVES`, in one line: the
verifier vouched (VERIFY -> CHECKPOINT) and the next step begins
(CHECKPOINT -> PLAN). Both are checked against the table like any other, so
a run never rests in CHECKPOINT: the line is either whole or torn.

A parallel step (the planner returns several steps) runs each call as its
own sub-run on this same table, keyed by its step number: the call's lane
starts in PLAN and walks PLAN -> ACT -> VERIFY -> (its checkpoint record)
with retries, ending with its checkpoint back in PLAN, done, or in FAILED
or PAUSED. The run itself stays in PLAN meanwhile and leaves it by
PLAN -> FAILED when a call failed for good.

A workflow (`@harness.workflow`) walks the same table with its function in
the planner's role: it stays in PLAN while it runs, each `harness.call` is
one step (PLAN -> ACT -> VERIFY -> its checkpoint), and its return (DONE),
exception (FAILED) or question (PAUSED) leaves PLAN.
"""

from __future__ import annotations

INIT, PLAN, ACT, VERIFY, CHECKPOINT = "INIT", "PLAN", "ACT", "VERIFY", "CHECKPOINT"
DONE, FAILED, PAUSED = "DONE", "FAILED", "PAUSED"

# state -> {next state: what the edge means}
EDGES: dict[str, dict[str, str]] = {
    INIT: {PLAN: "run starts"},
    PLAN: {
        ACT: "step planned (intent: tool and args)",
        DONE: "planner says the goal is met, or the workflow returned",
        FAILED: "step limit reached (max_steps), a call of a parallel step failed for good, or the workflow raised",
        PAUSED: "interrupt(): the planner or the workflow waits for an answer; or a model call past its budget",
    },
    ACT: {
        VERIFY: "tool returned (result recorded)",
        PLAN: "ToolError with attempts left, re-plan",
        FAILED: "ToolError, no attempt left",
        PAUSED: "unsafe call uncertain (in flight at resume, or timed out), or interrupt() in the tool",
    },
    VERIFY: {
        CHECKPOINT: "verifier vouched (checkpoint record)",
        PLAN: "rejected with attempts left, re-plan",
        FAILED: "rejected, no attempt left, or an unsafe tool's result (never re-invoked)",
        PAUSED: "interrupt(): the verifier waits for an answer; or a model call past its budget",
    },
    CHECKPOINT: {PLAN: "next step (the same checkpoint record)"},
    PAUSED: {
        VERIFY: "reconciled as happened, or answered (verifier), or resumed (budget)",
        ACT: "reconciled as not happened, or answered (tool)",
        PLAN: "answered (planner), or resumed (budget)",
    },
    DONE: {},
    FAILED: {},
}

TERMINAL = frozenset({DONE, FAILED})
# the moves one checkpoint record makes, from VERIFY
CHECKPOINT_MOVES = (CHECKPOINT, PLAN)


def check(current: str, new: str) -> str | None:
    """None when current -> new is legal, else why not."""
    edges = EDGES.get(current)
    if edges is None:
        return f"unknown state {current!r}"
    if new not in edges:
        allowed = ", ".join(edges) or "nothing (terminal)"
        return f"{current} -> {new} is not an edge of the state machine (from {current}: {allowed})"
    return None


def mermaid() -> str:
    """The state diagram, in Mermaid syntax, generated from EDGES."""
    lines = ["stateDiagram-v2", f"    [*] --> {INIT}"]
    for src, edges in EDGES.items():
        for dst, label in edges.items():
            lines.append(f"    {src} --> {dst}: {label}")
    lines += [f"    {t} --> [*]" for t in sorted(TERMINAL)]
    return "\n".join(lines)


def key_of(run_id: str, step: int, attempt: int) -> str:
    """The idempotency key an idempotent tool's intent carries (FORMAT.md): `<run_id>-<step>-<attempt>`, the same in
    every process that makes the call again; the reader checks it, runtime/step.py writes it."""
    return f"{run_id}-{step}-{attempt}"
