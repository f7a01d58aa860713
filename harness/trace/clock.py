"""The clock rules: what `replay()` checks of the vector clocks of a run's agents.

Each agent of a run (runtime/agents.py) stamps its records with a vector
clock: its own component counts its events, a spawned agent starts from its
spawn's clock, a join merges the child's exit, a receive merges its send's.
These rules are the trace's, so the reader checks them here, with no part
of the runtime: `ClockRules` recomputes every clock from the records before it.
"""

from __future__ import annotations

from typing import Any

MAIN = "main"  # the run's own thread: the agent whose records name no agent


def merged(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        if out.get(k, 0) < v:
            out[k] = v
    return out


class ClockRules:
    """What replay() checks of the clocks: each record's `vc` must be the one the rules give.

    It recomputes every clock from the records before it (own component +1 per
    event; a spawned agent starts from its spawn's clock; a join merges the
    child's exit; a receive merges its send's) and refuses any other value, so
    a forged, reordered or missing clock is caught at its line, as a forged seq is.
    Its keys are sorted, as the writer writes them. An agent's life: spawned
    while no agent of its name runs or waits to be joined, it exits once and is
    joined once; main never exits or is joined. Which send a receive took (its
    `sent` clock among them) is replay()'s check of messages (trace/reader.py _message).

    A `resume` ends the agents of an Executor's run (its process died with
    them; it spawns its calls again). A workflow's resume re-executes its
    function, agents included, over the history (`reexecuted`): an agent
    running, or exited and not joined, at the crash goes on after the resume
    as the same agent, so its life is not cut there.
    """

    __slots__ = ("exits", "last", "live", "reexecuted", "spawns")

    def __init__(self, seq: int, *, reexecuted: bool = False):
        self.reexecuted = reexecuted
        self.last: dict[str, dict[str, int]] = {MAIN: {MAIN: seq - 1}}  # before the first spawn, main's count is seq
        self.live: set[str] = set()
        self.spawns: dict[str, dict[str, int]] = {}  # child -> the clock of its spawn, until its first event
        self.exits: dict[str, dict[str, int]] = {}  # agent -> the clock of its exit, until joined

    def unjoined(self) -> list[str]:
        """The agents running, or exited and not joined: none may be left when the run ends."""
        return sorted(self.live | self.exits.keys())

    def see(self, rec: dict[str, Any], kind: str) -> str | None:
        """None when rec's agent and clock are the ones the rules give, else why not."""
        if kind == "seal" and "vc" not in rec and "agent" not in rec:  # no agent's event: it closes the file
            return None
        agent = rec.get("agent", MAIN)
        vc = rec.get("vc")
        if type(agent) is not str or (agent == MAIN and "agent" in rec):
            return f"agent {agent!r} is not an agent name (main's records name no agent)"
        if type(vc) is not dict or not all(type(v) is int and type(k) is str for k, v in vc.items()):
            return "a record without its vector clock (vc) after the run spawned an agent"
        if agent != MAIN and agent not in self.live:
            return f"a record of agent {agent!r}, which is not running (no spawn before it, or after its exit)"
        expected = dict(self.last.get(agent, ()))
        if agent in self.spawns:
            expected = merged(expected, self.spawns.pop(agent))
        if kind == "join":
            child = rec.get("child")
            if child not in self.exits:
                return f"a join of agent {child!r}, which has not exited (or was joined already)"
            expected = merged(expected, self.exits.pop(child))
        elif kind == "crossing" and rec.get("boundary") == "agent_msg":
            request, response = rec.get("request"), rec.get("response")
            if isinstance(request, dict) and "receive" in request and isinstance(response, dict):
                clock = response.get("sent")  # null: sent before the run spawned, which this clock follows
                if clock is not None:
                    if type(clock) is not dict or not all(type(v) is int for v in clock.values()):
                        return "a received message whose sent clock is not a clock"
                    expected = merged(expected, clock)
        expected[agent] = expected.get(agent, 0) + 1
        if vc != expected:
            return f"vc {vc} where the clock rules give {dict(sorted(expected.items()))}"
        if list(vc) != sorted(vc):
            return f"vc {vc} with its keys out of order (harness writes them sorted)"
        self.last[agent] = vc
        if kind == "spawn":
            child = rec.get("child")
            if type(child) is not str or child == MAIN or child in self.live or child in self.exits:
                why = "running" if child in self.live else "exited and not joined yet"
                return f"a spawn of {child!r}: not an agent's name, or an agent of that name is {why}"
            self.live.add(child)
            self.spawns[child] = vc
        elif kind == "exit":
            if agent == MAIN:
                return "an exit of main: the run's own agent ends with the run, it neither exits nor is joined"
            self.live.discard(agent)
            self.exits[agent] = vc
        elif kind == "resume" and not self.reexecuted:  # the process died: its agents with it
            self.live.clear()
            self.spawns.clear()
            self.exits.clear()
        return None
