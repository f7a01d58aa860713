"""Budgets: what a run's live model calls may spend (USD, tokens, model calls), kept before each call is made.

`Budget(usd=, tokens=, model_calls=, prices=)` is the caller's, given to
a run or a resume. The run's header records the budget it started with
(its limits and prices): a resume given none keeps to that one (`harness
recover`, a plain `harness resume`), a resume given one keeps to the one
given. A Session given one holds a `Gate`, its ledger:

- what the run spent: every live model call the trace already records,
  each attempt that a process made and wrote, whatever crashed after it
  (served calls, a rerun's or a fork's before its branch, cost nothing),
  plus each live model call this process makes;
- a model call is a crossing that trace/usage.py reads as one (`bound()`):
  `llm`, an `http` call of a model API (a chat, responses, messages,
  completions or embeddings path with a JSON body naming a model),
  `pydantic_ai.model`, `openai_agents.model` and `openai_agents.stream`.
  A model call made inside a tool's call (an Executor's tool, a workflow's
  `harness.call`) belongs to that call: it is neither recorded nor gated;
- before a live model call, `admit()` adds what it may cost to what was
  spent: one model call; in tokens its request's `max_tokens` (each API's
  spelling), or its prompt's size when it sets none (its JSON, 4 bytes a
  token); in USD those tokens at the model's price (output price for
  max_tokens, input price for a prompt). When that would pass a limit the
  call is not made: `BudgetExceeded`, which the executor and the workflow
  turn into PAUSED (reason `budget`). Calls in flight together are each
  reserved at that estimate until answered;
- once answered (or failed), a call costs its usage as recorded (tokens:
  the provider's total, else input + output; USD at the price of the model
  that answered); a call whose record holds no usage (it failed, or its door
  reports none) costs its estimate, so the ledger never counts less than
  the gate admitted.

A call in flight when its process died is not in the trace, so it is not
counted (the provider may have billed it). A model the price list does not
name is priced at the list's highest prices: the budget never under-counts.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import BudgetExceeded
from ..storage import blobs as _blobs
from ..storage import is_url, local_copy
from ..trace import state as S
from ..trace.reader import replay
from ..trace.usage import MODEL_KINDS, Bound, Price, bound, load_prices, model_call, prices_of, role

LIMITS = ("usd", "tokens", "model_calls")  # in the order a pause names the first one a call would pass


@dataclass(frozen=True, slots=True)
class Budget:
    """What a run's live model calls may spend, across every resume: USD, tokens, model calls (None: no limit).

    A live model call that would pass a limit pauses the run before it is made (PAUSED, reason `budget`); a resume
    with a larger budget goes on. `usd` needs `prices`: a TOML price list's path (the file `harness cost --prices`
    reads) or a mapping of model -> {"input", "output", "cached_input"} in USD per million tokens.
    """

    usd: float | None = None
    tokens: int | None = None
    model_calls: int | None = None
    prices: Mapping[str, Price] | str | os.PathLike[str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.usd is None and self.tokens is None and self.model_calls is None:
            raise ValueError("Budget() needs a limit: usd=, tokens= or model_calls=")
        if self.usd is not None and (
            isinstance(self.usd, bool) or not isinstance(self.usd, int | float) or not 0 <= self.usd < math.inf
        ):
            raise ValueError(f"Budget(usd=...) must be a number of US dollars >= 0, not {self.usd!r}")
        for name in ("tokens", "model_calls"):
            v = getattr(self, name)
            if v is not None and (type(v) is not int or v < 0):
                raise ValueError(f"Budget({name}=...) must be an int >= 0, not {v!r}")
        prices = self.prices
        if isinstance(prices, str | os.PathLike):
            prices = load_prices(prices)  # a bad file is refused here, before anything is written
        elif prices is not None:
            prices = prices_of(prices, "Budget(prices=...)")
        if self.usd is not None and not prices:
            raise ValueError(
                "Budget(usd=...) needs prices=: a TOML price list's path (as `harness cost --prices` reads) or a "
                'mapping like {"gpt-4o-mini": {"input": 0.15, "output": 0.60}} (USD per million tokens)'
            )
        object.__setattr__(self, "prices", prices)

    def limits(self) -> dict[str, Any]:
        """The limits set, by name."""
        return {k: getattr(self, k) for k in LIMITS if getattr(self, k) is not None}

    def to_json(self) -> dict[str, Any]:
        """The budget as a run's header records it: its limits, and the prices its USD limit is counted at."""
        out = self.limits()
        prices: Mapping[str, Price] = self.prices or {}  # type: ignore[assignment]  # (a mapping once made)
        if prices:
            out["prices"] = {m: {k: getattr(p, k) for k in Price.__slots__} for m, p in sorted(prices.items())}
        return out

    @classmethod
    def recorded(cls, header: Mapping[str, Any]) -> Budget | None:
        """The budget a run was started with, as its header records it (None when it was given none)."""
        given = header.get("budget")
        if not isinstance(given, Mapping):
            return None
        return cls(**{k: given[k] for k in (*LIMITS, "prices") if k in given})


@dataclass(frozen=True, slots=True)
class Ticket:
    """A live model call admitted: what it was reserved at until it is answered."""

    tokens: int
    usd: float


class Gate:
    """A run's ledger against its Budget: what was spent (the trace's live model calls, then this process's), and
    the check before each live model call (see the module docstring). Thread-safe: agents and parallel steps share
    it."""

    def __init__(self, budget: Budget, path: str):
        self.budget = budget
        prices: Mapping[str, Price] = budget.prices or {}  # type: ignore[assignment]
        self.prices = prices
        # the price of a model the list does not name: its highest prices (never an under-count)
        self.dearest = Price(*(max((getattr(p, k) for p in prices.values()), default=0.0) for k in Price.__slots__))
        self.calls, self.tokens, self.usd = 0, 0, 0.0  # spent, reserved calls included
        self.lock = threading.Lock()
        self.paused: dict[str, Any] | None = None  # the pause on its budget the trace ends in, if it does
        self._read(path)

    def _read(self, path: str) -> None:
        """Count every live model call the trace records (replay(): every line checked)."""
        local = local_copy(path) if is_url(path) else path
        header: dict[str, Any] = {}

        def visit(line: bytes, rec: dict[str, Any]) -> None:
            nonlocal header
            if rec["kind"] == "header":
                header = rec
            elif rec["kind"] == "crossing" and rec["boundary"] in MODEL_KINDS and role(rec, header) == "live":
                self._count(_blobs.inline(local, rec) if "blobs" in rec else rec)

        rep = replay(local, on_record=visit)
        if rep.state == S.PAUSED:
            self.paused = rep.tail.over_budget

    def _count(self, rec: dict[str, Any]) -> None:
        found = bound(rec["boundary"], rec.get("request"))
        if found is not None:
            tokens, usd = self._estimate(found)
            self.calls += 1
            self._spend(rec, tokens, usd)

    def price(self, model: str | None) -> Price:
        return self.prices.get(model or "") or self.dearest

    def _estimate(self, found: Bound) -> tuple[int, float]:
        """What a call may cost before it is made: tokens, USD."""
        if found.max_tokens is not None:
            return found.max_tokens, found.max_tokens * self.price(found.model).output / 1e6
        return found.prompt, found.prompt * self.price(found.model).input / 1e6

    def _spend(self, rec: dict[str, Any], tokens: int, usd: float) -> None:
        """Add a call's cost: its usage as recorded, else its estimate (tokens, usd)."""
        call = model_call(rec)
        if call is not None and call.usage is not None:
            tokens, usd = call.usage.tokens, self.price(call.model).usd(call.usage)
        self.tokens += tokens
        self.usd += usd

    def spent(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model_calls": self.calls, "tokens": self.tokens}
        if self.prices:
            out["usd"] = round(self.usd, 9)
        return out

    def admit(self, kind: str, request: Any) -> Ticket | None:
        """Before a live crossing: None when it is no model call; else its ticket, reserved, or BudgetExceeded when
        it would pass a limit (nothing reserved, the call not made)."""
        found = bound(kind, request)
        if found is None:
            return None
        tokens, usd = self._estimate(found)
        asked = {"model_calls": 1, "tokens": tokens, "usd": usd}
        with self.lock:
            now = {"model_calls": self.calls, "tokens": self.tokens, "usd": self.usd}
            limits = self.budget.limits()
            over = next((k for k in LIMITS if k in limits and now[k] + asked[k] > limits[k]), None)
            if over is not None:
                call: dict[str, Any] = {"boundary": kind, "model": found.model, "tokens": tokens, "model_calls": 1}
                if self.prices:
                    call["usd"] = round(usd, 9)
                raise BudgetExceeded({"exceeded": over, "limit": limits, "spent": self.spent(), "call": call})
            self.calls += 1
            self.tokens += tokens
            self.usd += usd
        return Ticket(tokens, usd)

    def answered(self, ticket: Ticket, rec: dict[str, Any]) -> None:
        """A call admitted was answered (or failed): its reservation becomes its cost as recorded (`rec`: its
        crossing's fields, boundary, request and response or error)."""
        with self.lock:
            self.tokens -= ticket.tokens
            self.usd -= ticket.usd
            self._spend(rec, ticket.tokens, ticket.usd)
