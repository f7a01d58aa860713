"""Who is running here: the context variables a run's code is read against.

`_current` is the Session recording or serving the crossings of this context
(None outside a run), `_agent` the agent whose code runs (None: the run's
own thread, "main"), `_in_call` whether this is a call's own context (a tool,
a crossing), whose crossings belong to the call and are not recorded, and
`_key` the key of the idempotent tool call running here (what
`harness.idempotency_key()` returns; None outside one). They
are context variables, so a thread or task started with a copy of the
context carries them; the modules that set them (boundary.py, agents.py,
executor.py, bridge.py) all read them from here.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .agents import AgentState
    from .boundary import Session

_current: ContextVar[Session | None] = ContextVar("harness_session", default=None)
_agent: ContextVar[AgentState | None] = ContextVar("harness_agent", default=None)
_in_call: ContextVar[bool] = ContextVar("harness_in_call", default=False)  # a call's own context: not recorded
_key: ContextVar[str | None] = ContextVar("harness_idempotency_key", default=None)  # the idempotent call's key
