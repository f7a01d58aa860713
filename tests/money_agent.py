"""Money moved by gathered calls whose args are equal once redacted (issue 34), importable by name for children.

Alice and Bob each have their own API key; the default redaction writes both as the same marker, so two of
their calls with equal other args have equal intents. Each workflow gathers one task per person (alice
first); alice's task first asks for a quote (`harness.allm`), which takes a while when recording, so bob's
calls are recorded first, and which a resume serves at once, so alice's calls are made first there.

- `pay()`: each task charges its person 500 cents (`charge`): the money program of the issue.
- `settle()`: each task fetches its person's account with its key (`fetch_account`, a read), then pays 500
  cents into the account it fetched (`deposit`): served another's account, it pays the wrong one.

`charge` and `deposit` are idempotent tools that dedupe by their key, as a payment API does: made again with
the same key, no second effect. Every effect is noted in $WF_LEDGER/<tool> (one line per effect: the
account, then the key), so a test sees who was charged how often; `$WF_KILL` names a point where
the process waits to be killed (workflow_agent.point): `in-<tool>-<who>` (intent written, no effect yet),
`<tool>ed-<who>` (the effect made, its result not written), `after-<tool>-<who>` (its result written),
`in-quote-<who>` (a crossing in flight) and `after-quote-<who>` (written): every gap between two records.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from workflow_agent import note, point

import harness

KEYS = {"alice": "sk-alice-4e1f0c7a9b2d4c6e8f10", "bob": "sk-bob-7d3a5b9c1e2f4a6b8c0d"}
OWNER = {key: who for who, key in KEYS.items()}
PEOPLE = ("alice", "bob")


async def quote(request: dict[str, Any]) -> dict[str, Any]:
    who = request["who"]
    point(f"in-quote-{who}")
    await asyncio.sleep(0.2)  # bob's calls go first while recording
    return {"cents": 500}


def _effect(tool: str, account: str, key: str) -> None:
    """The tool's effect, once per idempotency key."""
    ledger = Path(os.environ["WF_LEDGER"]) / tool
    if key not in (line.split()[1] for line in (ledger.read_text().splitlines() if ledger.exists() else [])):
        note(tool, f"{account} {key}")


async def charge(api_key: str, cents: int, idempotency_key: str) -> dict[str, Any]:
    who = OWNER[api_key]
    point(f"in-charge-{who}")
    _effect("charge", who, idempotency_key)
    point(f"charged-{who}")
    return {"charged": who, "cents": cents}


async def fetch_account(api_key: str) -> dict[str, Any]:
    who = OWNER[api_key]
    point(f"in-fetch-{who}")
    point(f"fetched-{who}")
    return {"account": f"acct-{who}"}


async def deposit(account: str, cents: int, idempotency_key: str) -> dict[str, Any]:
    who = account.removeprefix("acct-")
    point(f"in-deposit-{who}")
    _effect("deposit", account, idempotency_key)
    point(f"deposited-{who}")
    return {"paid": account, "cents": cents}


CHARGE = harness.Tool(charge, idempotent=True)
DEPOSIT = harness.Tool(deposit, idempotent=True)


async def _quoted(who: str) -> int:
    if who != "alice":  # (bob's price is known)
        return 500
    cents = int((await harness.allm({"who": who}, quote))["cents"])
    point(f"after-quote-{who}")
    return cents


async def charge_one(who: str) -> dict[str, Any]:
    cents = await _quoted(who)
    out = await harness.acall(CHARGE, api_key=KEYS[who], cents=cents)
    point(f"after-charge-{who}")
    return dict(out)


async def settle_one(who: str) -> dict[str, Any]:
    cents = await _quoted(who)
    account = (await harness.acall(fetch_account, api_key=KEYS[who]))["account"]
    point(f"after-fetch-{who}")
    out = await harness.acall(DEPOSIT, account=account, cents=cents)
    point(f"after-deposit-{who}")
    return dict(out)


@harness.workflow
async def pay() -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(charge_one(who) for who in PEOPLE)))


@harness.workflow
async def settle() -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(settle_one(who) for who in PEOPLE)))


EXPECTED = {
    "pay": [{"charged": who, "cents": 500} for who in PEOPLE],
    "settle": [{"paid": f"acct-{who}", "cents": 500} for who in PEOPLE],
}
POINTS = {
    "pay": [
        "in-quote-alice",
        "after-quote-alice",
        *(f"{p}-{who}" for who in PEOPLE for p in ("in-charge", "charged", "after-charge")),
    ],
    "settle": [
        "in-quote-alice",
        "after-quote-alice",
        *(
            f"{p}-{who}"
            for who in PEOPLE
            for p in ("in-fetch", "fetched", "after-fetch", "in-deposit", "deposited", "after-deposit")
        ),
    ],
}
