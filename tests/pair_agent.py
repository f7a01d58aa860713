"""Two agents gathered in one async workflow, importable by name (`pair_agent:pair`) for children and reruns.

`pair()` runs agents "a" and "b" at once (`asyncio.gather`). Each asks the model (`harness.allm`), acts on
the answer with an idempotent async tool (`harness.acall`), twice, then asks once more: three model
crossings and two tool steps each, the model's crossings of one agent in flight while the other's tool step
runs. The model and the tool answer after a random latency (seeded by $WF_SEED when set), so the two agents'
records interleave differently from run to run. Every live model call and every tool effect (its idempotency
key, once per key, as a tool that dedupes does) is noted in $WF_LEDGER; $WF_KILL names a point where the
process waits to be killed (workflow_agent.point): `in-model-<who>-<turn>`, `in-act-<who>-<turn>` (before
the effect) or `acted-<who>-<turn>` (after it).
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

from workflow_agent import note, point

import harness

_rng = random.Random(os.environ.get("WF_SEED"))


def seed(n: int) -> None:
    """Make the latencies of the next run those of seed n (in-process tests)."""
    _rng.seed(n)


async def model(request: dict[str, Any]) -> dict[str, Any]:
    who, turn = request["who"], request["turn"]
    point(f"in-model-{who}-{turn}")
    await asyncio.sleep(_rng.uniform(0, 0.01))
    note("model", f"{who}-{turn}")
    return {"text": f"{who} says {turn} after [{request['heard']}]"}


async def act(who: str, turn: int, said: str, idempotency_key: str) -> dict[str, Any]:
    point(f"in-act-{who}-{turn}")
    await asyncio.sleep(_rng.uniform(0, 0.01))
    ledger = Path(os.environ["WF_LEDGER"]) / "act"
    if idempotency_key not in (ledger.read_text().split() if ledger.exists() else []):
        note("act", idempotency_key)
    point(f"acted-{who}-{turn}")
    return {"did": f"{who} did {turn}"}


ACT = harness.Tool(act, idempotent=True)


async def agent(who: str) -> list[str]:
    heard, out = "", []
    for turn in range(3):
        said = (await harness.allm({"who": who, "turn": turn, "heard": heard}, model))["text"]
        out.append(said)
        if turn < 2:
            heard = (await harness.acall(ACT, who=who, turn=turn, said=said))["did"]
            out.append(heard)
    return out


@harness.workflow
async def pair() -> list[list[str]]:
    return list(await asyncio.gather(agent("a"), agent("b")))


def expected(**said: str) -> list[list[str]]:
    """What pair() returns, with the model's answer to `<who>-<turn>` replaced by said[who_turn] (a fork's)."""
    out = []
    for who in "ab":
        heard, mine = "", []
        for turn in range(3):
            text = said.get(f"{who}_{turn}", f"{who} says {turn} after [{heard}]")
            mine.append(text)
            if turn < 2:
                heard = f"{who} did {turn}"
                mine.append(heard)
        out.append(mine)
    return out
