"""The state table: every edge is legal, every other pair is refused, the docs show the table."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from harness.trace import state as S

STATES = list(S.EDGES)
EDGES = [(a, b) for a in STATES for b in S.EDGES[a]]
NON_EDGES = [(a, b) for a, b in itertools.product(STATES, STATES) if b not in S.EDGES[a]]


def test_the_table_names_every_state_and_only_them() -> None:
    targets = {b for a in STATES for b in S.EDGES[a]}
    assert targets <= set(STATES)
    assert set(STATES) == {S.INIT, S.PLAN, S.ACT, S.VERIFY, S.CHECKPOINT, S.DONE, S.FAILED, S.PAUSED}
    assert {s for s in STATES if not S.EDGES[s]} == S.TERMINAL == {S.DONE, S.FAILED}


@pytest.mark.parametrize(("src", "dst"), EDGES)
def test_every_edge_is_legal(src: str, dst: str) -> None:
    assert S.check(src, dst) is None


@pytest.mark.parametrize(("src", "dst"), NON_EDGES)
def test_every_other_pair_is_refused_with_a_reason(src: str, dst: str) -> None:
    why = S.check(src, dst)
    assert why is not None
    assert f"{src} -> {dst}" in why


def test_an_unknown_state_is_refused() -> None:
    assert S.check("SLEEPING", S.PLAN) == "unknown state 'SLEEPING'"


def test_every_state_is_reachable_from_init_and_every_run_can_end() -> None:
    seen, todo = {S.INIT}, [S.INIT]
    while todo:
        for nxt in S.EDGES[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(STATES)
    for state in STATES:  # from anywhere, some path reaches a terminal state
        reach, todo = {state}, [state]
        while todo:
            for nxt in S.EDGES[todo.pop()]:
                if nxt not in reach:
                    reach.add(nxt)
                    todo.append(nxt)
        assert reach & S.TERMINAL, state


def test_mermaid_has_one_line_per_edge() -> None:
    lines = S.mermaid().splitlines()
    assert lines[0] == "stateDiagram-v2"
    for src, dst in EDGES:
        assert sum(line.strip().startswith(f"{src} --> {dst}:") for line in lines) == 1


def test_the_docs_diagram_is_generated_from_the_table() -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "concepts" / "executor.md"
    blocks = re.findall(r"```mermaid\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert blocks, f"{page} has no ```mermaid block; paste the output of harness.trace.state.mermaid() there"
    assert S.mermaid().strip() in [b.strip() for b in blocks], (
        f"the diagram of {page} differs from the state table; paste harness.trace.state.mermaid() there"
    )
