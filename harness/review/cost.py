"""What runs cost: model calls and tokens by model, live apart from served, whatever crashed and resumed.

`ledger(paths)` reads each run (replay(), every line checked) and counts
its model calls (`calls.model_call`: every door's records) by model: the
calls, input tokens (the cached ones among them), cached and output tokens.
A call is counted where its record is:

- live: made when it was recorded. The provider billed it, once. A call
  recorded before a crash is in the trace once, and a resume serves it
  without writing it again, so it is counted once however often the run
  crashed and resumed; an attempt that failed is a call too (with the
  tokens its record holds). A call in flight when the process died is not
  in the trace, and not counted: its answer never came back to harness;
- served: a rerun or fork took it from its parent's recording (and a fork's
  branch, answered by hand). Nobody billed it again; it is shown apart, as
  what the recording saved.

`load_prices(path)` reads a TOML price list (USD per million tokens, per model:
`[models."gpt-4o-mini"]` with `input`, `output` and optionally
`cached_input`, which defaults to `input`); `Ledger.usd()` prices a tally.
A model the list does not price has no figure (None), never a made-up one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..trace.usage import UNKNOWN, Price, Usage, load_prices, model_call
from .calls import read, role, traces

__all__ = ["Price", "load_prices"]  # (the price list is read in trace/usage.py: the budget gate reads it too)

LIVE, SERVED = "live", "served"


@dataclass(slots=True)
class Tally:
    """Model calls of one model: how many, and their tokens (`unmetered`: calls whose record holds no usage)."""

    calls: int = 0
    input: int = 0
    cached: int = 0
    output: int = 0
    unmetered: int = 0

    def add(self, usage: Usage | None) -> None:
        self.calls += 1
        if usage is None:
            self.unmetered += 1
            return
        self.input += usage.input
        self.cached += usage.cached
        self.output += usage.output

    def merge(self, other: Tally) -> None:
        self.calls += other.calls
        self.input += other.input
        self.cached += other.cached
        self.output += other.output
        self.unmetered += other.unmetered

    def usd(self, price: Price | None) -> float | None:
        if price is None:
            return None
        return round(price.usd(Usage(self.input, self.output, self.cached)), 9)

    def to_json(self) -> dict[str, int]:
        return {"calls": self.calls, "input": self.input, "cached": self.cached, "output": self.output,
                "unmetered": self.unmetered}  # fmt: skip


@dataclass(slots=True)
class RunCost:
    """One run's model calls: tallies by (live or served, model)."""

    run_id: str
    trace: str
    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)

    def tally(self, how: str, model: str) -> Tally:
        return self.tallies.setdefault((how, model), Tally())

    def merge(self, other: RunCost) -> None:
        for (how, model), t in other.tallies.items():
            self.tally(how, model).merge(t)

    def usd(self, how: str, prices: Mapping[str, Price] | None) -> float | None:
        """What the `how` (live or served) calls cost at `prices`; None without prices or with a model unpriced."""
        if prices is None:
            return None
        total = 0.0
        for (h, model), t in self.tallies.items():
            if h != how:
                continue
            cost = t.usd(prices.get(model))
            if cost is None:
                return None
            total += cost
        return round(total, 9)

    def to_json(self, prices: Mapping[str, Price] | None) -> dict[str, Any]:
        models = []
        for (how, model), t in sorted(self.tallies.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            price = prices.get(model) if prices is not None else None
            models.append({"model": model, "how": how, **t.to_json(), "usd": t.usd(price)})
        return {
            "run_id": self.run_id, "trace": self.trace, "models": models,
            "usd": {LIVE: self.usd(LIVE, prices), SERVED: self.usd(SERVED, prices)},
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Ledger:
    """The cost of some runs, one by one and in total. `prices` is None when none were given."""

    runs: tuple[RunCost, ...]
    prices: Mapping[str, Price] | None = None

    @property
    def total(self) -> RunCost:
        out = RunCost("total", "")
        for r in self.runs:
            out.merge(r)
        return out

    @property
    def unpriced(self) -> list[str]:
        """The models called that the price list does not name."""
        if self.prices is None:
            return []
        return sorted({m for r in self.runs for (_, m) in r.tallies if m not in self.prices})

    def to_json(self) -> dict[str, Any]:
        total = self.total.to_json(self.prices)
        del total["run_id"], total["trace"]
        return {"runs": [r.to_json(self.prices) for r in self.runs], "total": total, "unpriced": self.unpriced}

    def text(self) -> str:
        """A table per run and one for the total."""
        out: list[str] = []
        for r in (*self.runs, self.total) if len(self.runs) != 1 else self.runs:
            out.append(f"run {r.run_id} ({r.trace})" if r.trace else "total")
            priced = self.prices is not None
            rows = [("MODEL", "HOW", "CALLS", "INPUT", "CACHED", "OUTPUT", *(("USD",) if priced else ()))]
            for (how, model), t in sorted(r.tallies.items(), key=lambda kv: (kv[0][1], kv[0][0])):
                usd = (_money(t.usd(self.prices.get(model))),) if self.prices is not None else ()
                rows.append((model, how, str(t.calls), str(t.input), str(t.cached), str(t.output), *usd))
            if len(rows) == 1:
                out.append("  no model calls")
            else:
                widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
                for row in rows:
                    out.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            if self.prices is not None:
                out.append(f"  spent {_money(r.usd(LIVE, self.prices))} USD live; "
                           f"served calls saved {_money(r.usd(SERVED, self.prices))} USD")  # fmt: skip
        if self.unpriced:
            out.append(f"no price for {', '.join(self.unpriced)}: add them to the price list")
        return "\n".join(out) + "\n"


def _money(usd: float | None) -> str:
    return "-" if usd is None else f"{usd:.6f}"


def run_cost(trace: str | os.PathLike[str], *, full: bool = False) -> RunCost:
    """The model calls of one run, tallied by live or served and by model (`full`: read through replay())."""
    path = os.fspath(trace)
    cost = RunCost("", path)
    header: dict[str, Any] = {}

    def visit(rec: dict[str, Any]) -> None:
        nonlocal header
        if rec["kind"] == "header":
            header = rec
            cost.run_id = str(rec["run_id"])
            return
        call = model_call(rec) if rec["kind"] == "crossing" else None
        if call is not None:
            how = LIVE if role(rec, header) == "live" else SERVED
            cost.tally(how, call.model or UNKNOWN).add(call.usage)

    read(path, visit, full=full)
    return cost


def ledger(
    paths: Iterable[str | os.PathLike[str]],
    *,
    prices: Mapping[str, Price] | str | os.PathLike[str] | None = None,
    full: bool = False,
) -> Ledger:
    """The model calls and tokens of every run of `paths` (traces, runs folders, runs URLs), live apart from served.

    `prices`: a price list (a TOML file's path, see `load_prices()`) to show USD too; `full`: read each trace through
    replay(), every rule of its story checked (by default each line is checked against the checksum chain).
    """
    if isinstance(prices, str | os.PathLike):
        prices = load_prices(prices)
    return Ledger(tuple(run_cost(p, full=full) for p in traces(paths)), prices)
