"""`Tool`: a tool with a declared effect contract, as the executor runs it (see `Executor`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool with a declared effect contract.

    idempotent=True: on resume after an interrupted call it is called again
    with the same `idempotency_key` keyword argument, so it can dedupe.
    idempotent=False: never re-invoked blindly; the run PAUSES until reconciled.
    A declared tool's intent, and everything before it, is fsynced before the
    tool is called, whatever the durability; its result is synced with the
    next sync point (see docs/FORMAT.md "Durability").
    A result of it that the verifier rejects ends the run FAILED (the effect
    happened: calling it again would repeat it) unless retry_rejected=True.
    """

    fn: Callable[..., Any]
    _: KW_ONLY
    idempotent: bool
    version: str | None = None
    retry_rejected: bool = False

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"Tool needs a callable, not {self.fn!r}")
        if type(self.idempotent) is not bool or not (self.version is None or type(self.version) is str):
            raise TypeError("Tool(fn, idempotent=True|False, version=None|str)")
        if type(self.retry_rejected) is not bool:
            raise TypeError("Tool(..., retry_rejected=True|False)")

    @property
    def contract(self) -> dict[str, Any]:
        contract: dict[str, Any] = {"effect": "idempotent" if self.idempotent else "unsafe", "version": self.version}
        if self.retry_rejected:
            contract["retry_rejected"] = True
        return contract
