"""Running agents: the executor, boundaries and sessions, agents, the asyncio bridge, interrupts, timers and
the recorder.

Private: import the public names from `harness`. Imports only the layers below it: `harness.trace`,
`harness.storage`, `harness._errors` (docs/ARCHITECTURE.md).
"""
