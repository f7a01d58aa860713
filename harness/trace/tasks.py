"""Task identity: which task of an agent made a call, as a record's `task` field names it.

An agent's code may run concurrent tasks (asyncio.gather, create_task, a
TaskGroup). Each task is named by the order tasks were created in, a dotted
path relative to its agent's root task: the root task's first child is
"1", that task's second child "1.2". The same code creates its tasks in the
same order on every run, so the name survives a crash and a resume, while
what a call carries (its args after redaction) need not tell two calls
apart. The root task's records carry no `task` field: a run without
concurrent tasks keeps its shape.

This module is the format's side: the field's name, its one spelling, and
reading it back. The runtime numbers tasks (runtime/tasks.py).
"""

from __future__ import annotations

import re
from typing import Any

TASK = "task"  # the field: on crossings and on intents (transitions into ACT) made by a task other than the root
_SPELLING = re.compile(r"[1-9][0-9]{0,8}(?:\.[1-9][0-9]{0,8}){0,63}")  # "1", "2.1": no zero, no leading zero


def well_formed(value: Any) -> bool:
    """Whether value is a `task` field harness writes: a str of dot-separated positive ints (no leading 0)."""
    return type(value) is str and _SPELLING.fullmatch(value) is not None


def task_of(record: dict[str, Any]) -> tuple[int, ...]:
    """The task that wrote record, as ints: () for its agent's root task (no field), (2, 1) for "2.1".

    Tuples sort in creation order (a task before the tasks it created, and
    those before its next sibling), which is how a view orders concurrent
    calls of one agent.
    """
    name = record.get(TASK)
    if name is None:
        return ()
    return tuple(int(part) for part in name.split("."))
