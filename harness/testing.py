"""Deterministic pieces for testing agent runs, shipped with the library.

In the spirit of `structlog.testing`: the tools, planner and fake model that
harness's own tests use, public so that you can test your runs the same way.
Nothing here reads the clock or randomness: a tool's result depends only on
its arguments, and it fails exactly on the calls you chose.

- `ScriptedTool` (and `counter()`, `flaky()`, `power_cut()`): a tool that
  remembers its calls and raises on the call numbers you list;
- `steps()` and `fixed_plan()`: a planner that runs a fixed list of steps;
- `FakeLLM`: a model that answers from a script, for `harness.llm()`;
- `read_records()` and `write_trace()`: a trace's records as dicts, and a
  trace written from dicts with a valid checksum chain (for fixtures, or for
  forged traces that only replay()'s state rules can catch).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from ._errors import ToolError
from .runtime.step import Step
from .trace.line import encode

__all__ = [
    "FakeLLM",
    "ScriptedTool",
    "counter",
    "fixed_plan",
    "flaky",
    "power_cut",
    "read_records",
    "steps",
    "write_trace",
]


class ScriptedTool:
    """A tool that returns its arguments, and raises on the calls listed in `failures`.

    `failures` maps a 1-based call number to the exception raised on that
    call. `calls` holds the keyword arguments of every call, failed ones too.
    """

    def __init__(self, failures: Mapping[int, BaseException] | None = None):
        self.failures = dict(failures or {})
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **args: Any) -> dict[str, Any]:
        self.calls.append(args)
        error = self.failures.get(len(self.calls))
        if error is not None:
            raise error
        return dict(args)


def counter() -> ScriptedTool:
    """A tool that never fails; `len(tool.calls)` counts its calls."""
    return ScriptedTool()


def flaky(fails: int) -> ScriptedTool:
    """A tool whose first `fails` calls raise ToolError (which the executor retries)."""
    return ScriptedTool({n: ToolError(f"flaky: failure {n} of {fails}") for n in range(1, fails + 1)})


def power_cut(at: int) -> ScriptedTool:
    """A tool whose call number `at` raises RuntimeError("power cut"): to run() it is a crash."""
    return ScriptedTool({at: RuntimeError("power cut")})


def steps(n: int, *, tool: str = "work") -> list[Step]:
    """n steps named step-0 .. step-(n-1), each calling `tool` with args {"i": index}."""
    return [Step(name=f"step-{i}", tool=tool, args={"i": i}) for i in range(n)]


def fixed_plan(plan: Sequence[Step]) -> Callable[[Any, list[Any]], Step | None]:
    """A planner that ignores the goal and runs `plan` in order, then says the goal is met."""
    plan = list(plan)

    def planner(goal: Any, progress: list[Any]) -> Step | None:
        return plan[len(progress)] if len(progress) < len(plan) else None

    return planner


class FakeLLM:
    """A model that answers from a script: call i gets `responses[i]`.

    Pass a function instead of a list to compute each answer from the
    request. `requests` records what it was asked. Use it as the `call` of
    `harness.llm(request, fake)`, so the exchange is recorded in the trace.
    """

    def __init__(self, responses: Iterable[Any] | Callable[[Any], Any]):
        self.answer = responses if callable(responses) else None
        self.responses = [] if callable(responses) else list(responses)
        self.requests: list[Any] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        if self.answer is not None:
            return self.answer(request)
        if len(self.requests) > len(self.responses):
            raise LookupError(f"FakeLLM was asked {request!r} but its script has only {len(self.responses)} answers")
        return self.responses[len(self.requests) - 1]


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete line of a trace, parsed, checking nothing (use replay() to check)."""
    with open(path, "rb") as f:
        return [orjson.loads(line) for line in f if line.endswith(b"\n")]


def write_trace(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any] | bytes]) -> None:
    """Write records as a trace whose checksum chain is valid, whatever they say.

    Each record is written as given (its `seq` too) except for its `crc`,
    which is recomputed; replay() then judges the records by their content
    (so a record meant to be valid needs every field replay() requires, a
    float `ts` included: see docs/FORMAT.md).
    A record given as bytes is the line's body, everything before its
    `,"crc":"`, written exactly as is: for what a dict cannot say (a key
    twice, spaces, an integer or a nesting orjson would not write).
    """
    crc = 0
    with open(path, "wb") as f:
        for record in records:
            if isinstance(record, bytes):
                crc = zlib.crc32(record, crc)
                line = record + b',"crc":"%08x"}\n' % crc
            else:
                line, crc = encode({k: v for k, v in record.items() if k != "crc"}, crc)
            f.write(line)
