"""Workflows whose steps run inside a task group, importable by name for children (`group_agent:pay`).

$GROUP chooses the group the call runs in: "anyio" (anyio.create_task_group, as the MCP client runs one),
"asyncio" (asyncio.TaskGroup), "body" (the call made in an anyio group's own body, not in a task it started),
"mixed" (the call and a task that raises ValueError, gathered, what they raised put in one BaseExceptionGroup,
as a task group does when two of its tasks fail).
`pay()` charges with an unsafe tool; with $GROUP_KILL set, the tool notes the charge in $GROUP_LEDGER, tells the
test ($GROUP_MARK) and waits to be killed. `child` runs or resumes it and writes its outcome as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

import harness


async def grouped(kind: str, work: Callable[[], Awaitable[Any]]) -> Any:
    """work() run inside a task group of kind; its value."""
    box: dict[str, Any] = {}

    async def task() -> None:
        box["value"] = await work()

    if kind == "anyio":
        async with anyio.create_task_group() as tg:
            tg.start_soon(task)
    elif kind == "asyncio":
        async with asyncio.TaskGroup() as group:
            group.create_task(task())
    elif kind == "body":
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep, 0)
            await task()
    elif kind == "mixed":
        raised = await asyncio.gather(task(), _boom(), return_exceptions=True)
        raise BaseExceptionGroup("two tasks failed", [e for e in raised if isinstance(e, BaseException)])
    else:
        raise ValueError(f"no such group: {kind!r}")
    return box["value"]


async def _boom() -> None:
    raise ValueError("a sibling task failed")


async def charge(cents: int) -> str:
    with open(os.environ["GROUP_LEDGER"], "a") as f:
        f.write(f"{cents}\n")
        f.flush()
        os.fsync(f.fileno())
    if os.environ.get("GROUP_KILL"):
        mark = Path(os.environ["GROUP_MARK"])
        mark.with_suffix(".tmp").write_text(str(os.getpid()))
        os.replace(mark.with_suffix(".tmp"), mark)
        time.sleep(600)
    return f"charged {cents}"


CHARGE = harness.Tool(charge, idempotent=False)


@harness.workflow
async def pay(cents: int) -> str:
    return str(await grouped(os.environ["GROUP"], lambda: harness.acall(CHARGE, cents=cents)))


def child(trace: str, out: str) -> None:
    try:
        o = pay.run(500, trace=trace, resume="auto")
        Path(out).write_text(json.dumps({"state": o.state, "result": o.result, "pending": o.pending}))
    except BaseException:
        Path(out).write_text(traceback.format_exc())
        raise


if __name__ == "__main__":
    child(*sys.argv[1:])
