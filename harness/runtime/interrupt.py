"""Human in the loop: `interrupt(question)` pauses the run until someone answers.

Agent code (the planner, a tool or the verifier) calls `interrupt(question)`.
With no answer waiting, it raises `Interrupted` (a BaseException, so that
agent code catching Exception cannot swallow it); the executor records the
transition into PAUSED carrying the question and `run()` returns with
`outcome.pending["question"]`. A resume given an answer (`run(goal,
answer=...)`, `harness resume --answer JSON`) writes an `answer` record,
moves PAUSED back to the state the question was asked from, and runs that
code again: this time `interrupt()` returns the answer.

In the planner and the verifier the answer comes back through a recorded
crossing (kind `interrupt`, request the question, response the answer), so
a rerun or a later resume serves it and a fork can change it. In a tool it
is not a crossing (nothing a tool does is): the tool's result is what is
recorded, and a tool called again after a crash gets the answers of its
step again, in order, from the trace's `answer` records.

Guarantee: an answer is delivered once, in the order the questions were
asked; code that runs before `interrupt()` runs again on resume (as in
LangGraph), so it should be the first thing a tool does, or be idempotent.
"""

from __future__ import annotations

from typing import Any

from .._errors import HarnessError, Interrupted
from ..trace.line import check_value
from .boundary import Session
from .context import current_run


def interrupt(question: Any) -> Any:
    """Pause the run until a human answers `question` (any JSON value); return the answer.

    Outside a run it raises HarnessError: there is nobody to record the question for.
    """
    session: Session | None = current_run()
    if session is None:
        raise HarnessError(
            "harness.interrupt() was called outside a run; it pauses an Executor run until someone answers, "
            "so call it from a planner, tool or verifier that Executor.run() drives"
        )
    check_value("question", question)
    return session.cross("interrupt", question, lambda: _answer(session, question))


def _answer(session: Session, question: Any) -> Any:
    if session.answers:
        return session.answers.popleft()
    raise Interrupted(question)
