"""A workflow whose tool's result holds a secret, for the tests of kept secrets (tests/test_secrets.py).

`session(user)` logs in (`login` returns an `access_token`: $SECRET_TOKEN) and fetches with that token
(`fetch` notes the token it was given in $WF_LEDGER/fetch, outside the runs folder, then returns). With
$WF_KILL=in-fetch the process tells the test ($WF_MARK) inside fetch and waits to be killed there; with
$WF_KILL=in-login, inside login. The tools note each call in the ledger, so a test sees what went live.

`executor(trace)` is the same two steps as an Executor's: its planner copies the token out of login's result
(its progress) into fetch's args.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from workflow_agent import note, point

import harness


def login(user: str) -> dict[str, Any]:
    note("login", user)
    point("in-login")
    return {"user": user, "access_token": os.environ["SECRET_TOKEN"], "note": "welcome"}


def fetch(access_token: str) -> dict[str, Any]:
    note("fetch", access_token)
    point("in-fetch")
    return {"items": 3, "ok": access_token == os.environ["SECRET_TOKEN"]}


LOGIN, FETCH = login, fetch  # at-least-once: an open call is made again on resume


@harness.workflow
def session(user: str) -> dict[str, Any]:
    got = harness.call(LOGIN, user=user)
    return harness.call(FETCH, access_token=got["access_token"])


def planner(user: str, progress: list[harness.Checkpoint]) -> harness.Step | None:
    if not progress:
        return harness.Step("login", "login", {"user": user})
    if len(progress) == 1:
        return harness.Step("fetch", "fetch", {"access_token": progress[0].result["access_token"]})
    return None


def executor(trace: str) -> harness.Executor:
    return harness.Executor(planner=planner, tools={"login": LOGIN, "fetch": FETCH}, trace=trace, resume="auto")


def ledger(kind: str) -> list[str]:
    path = Path(os.environ["WF_LEDGER"]) / kind
    return path.read_text().splitlines() if path.exists() else []


# Two tasks gathered, each logging in as its own user: the two login results and the two fetch calls are equal
# once redacted (only the secret tells them apart), so a resume must serve each task its own token.


def token_of(user: str) -> str:
    return f"{os.environ['SECRET_TOKEN']}-{user}"


async def alogin(user: str) -> dict[str, Any]:
    note("login", user)
    return {"access_token": token_of(user)}


async def afetch(access_token: str) -> dict[str, Any]:
    note("fetch", access_token)
    point("in-fetch-" + access_token.rpartition("-")[2])
    return {"ok": access_token in (token_of("alice"), token_of("bob"))}


ALOGIN, AFETCH = alogin, afetch


async def _one(user: str) -> dict[str, Any]:
    got = await harness.acall(ALOGIN, user=user)
    return await harness.acall(AFETCH, access_token=got["access_token"])


@harness.workflow
async def pair() -> list[dict[str, Any]]:
    return list(await asyncio.gather(_one("alice"), _one("bob")))
