"""Money moved by gathered calls whose args are equal once redacted (issue 34), importable by name for children.

Alice and Bob each have their own API key; the default redaction writes both as the same marker, so two of
their calls with equal other args have equal intents. Each workflow gathers one task per person (alice
first); alice's task first asks for a quote (`harness.allm`), which takes a while when recording, so bob's
calls are recorded first, and which a resume serves at once, so alice's calls are made first there.

- `pay()`: each task charges its person 500 cents (`charge`, at-least-once): the money program of the issue.
- `settle()`: each task fetches its person's account with its key (`fetch_account`, a read), then pays 500
  cents into the account it fetched (`deposit`, at-least-once): served another's account, it pays the wrong one.

Every effect is noted in $WF_LEDGER/<tool> (one line per effect: the account); `$WF_KILL` names a point where
the process waits to be killed (workflow_agent.point): `in-<tool>-<who>` (intent written, no effect yet),
`<tool>ed-<who>` (the effect made, its result not written), `after-<tool>-<who>` (its result written), and
`in-quote-<who>` (a crossing in flight).
"""

from __future__ import annotations

import asyncio
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


async def charge(api_key: str, cents: int) -> dict[str, Any]:
    who = OWNER[api_key]
    point(f"in-charge-{who}")
    note("charge", who)
    point(f"charged-{who}")
    return {"charged": who, "cents": cents}


async def fetch_account(api_key: str) -> dict[str, Any]:
    who = OWNER[api_key]
    point(f"in-fetch-{who}")
    point(f"fetched-{who}")
    return {"account": f"acct-{who}"}


async def deposit(account: str, cents: int) -> dict[str, Any]:
    who = account.removeprefix("acct-")
    point(f"in-deposit-{who}")
    note("deposit", account)
    point(f"deposited-{who}")
    return {"paid": account, "cents": cents}


async def _quoted(who: str) -> int:
    if who != "alice":  # (bob's price is known)
        return 500
    return int((await harness.allm({"who": who}, quote))["cents"])


async def charge_one(who: str) -> dict[str, Any]:
    cents = await _quoted(who)
    out = await harness.acall(charge, api_key=KEYS[who], cents=cents)
    point(f"after-charge-{who}")
    return dict(out)


async def settle_one(who: str) -> dict[str, Any]:
    cents = await _quoted(who)
    account = (await harness.acall(fetch_account, api_key=KEYS[who]))["account"]
    point(f"after-fetch-{who}")
    out = await harness.acall(deposit, account=account, cents=cents)
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
    "pay": ["in-quote-alice", *(f"{p}-{who}" for who in PEOPLE for p in ("in-charge", "charged", "after-charge"))],
    "settle": [
        "in-quote-alice",
        *(
            f"{p}-{who}"
            for who in PEOPLE
            for p in ("in-fetch", "fetched", "after-fetch", "in-deposit", "deposited", "after-deposit")
        ),
    ],
}
