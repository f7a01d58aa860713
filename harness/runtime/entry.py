"""Entry points: the code a command names as `module:attr`, loaded in one place.

`harness resume`, `rerun`, `fork`, `check`, `fleet` (and its Ray workers)
and the viewer's fork all take `--agent module:factory` (a factory returning
an Executor's planner, tools and verifier) or `--workflow module:attr` (an
`@harness.workflow`, or a plain function made one). `load_agent` and
`load_workflow` load them; `attr` is what both stand on.

The module is imported with the current directory on sys.path (the
`uvicorn module:app` convention); `attr` may be dotted (`agents:Team.make`).
Whatever goes wrong is one EntryPointError naming the spec, the module and
what failed: a spec that is not `module:attr`, no such module, importing it
raised (a missing dependency of the module is that, not a missing module),
no such attribute, not what the flag takes, or the factory raised. The CLI
prints it on one line and exits 2, never with a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import EntryPointError
from .workflow import Workflow

AGENT = "--agent"
WORKFLOW = "--workflow"
_SHAPES = {AGENT: "module:factory, e.g. my_agent:make_agent", WORKFLOW: "module:attr, e.g. my_agent:research"}
_MISSING = object()


def attr(spec: str, flag: str) -> Any:
    """What `module:attr` names; EntryPointError (see the module docstring) when it cannot be had."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise EntryPointError(flag, spec, module, f"expected {_SHAPES.get(flag, 'module:attr')}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            raise EntryPointError(flag, spec, module, f"cannot import {module}: no such module") from None
        raise EntryPointError(flag, spec, module, f"importing {module} raised {_said(e)}") from None
    except Exception as e:  # the module's own code failed (a syntax error, a missing setting): its cause, one line
        raise EntryPointError(flag, spec, module, f"importing {module} raised {_said(e)}") from None
    for part in name.split("."):
        found = getattr(found, part, _MISSING)
        if found is _MISSING:
            what = "callable" if flag == AGENT else "workflow or function"
            raise EntryPointError(flag, spec, module, f"{module} has no {what} {name}")
    return found


def load_agent(spec: str) -> tuple[Callable[..., Any], Mapping[str, Any], Callable[..., Any] | None]:
    """Call the factory named by `module:factory` and return its (planner, tools, verifier)."""
    factory = attr(spec, AGENT)
    module, _, name = spec.partition(":")
    if not callable(factory):
        raise EntryPointError(AGENT, spec, module, f"{module} has no callable {name} ({factory!r:.80} is not one)")
    try:
        made = factory()
    except Exception as e:  # the factory's own failure: its cause, one line
        raise EntryPointError(AGENT, spec, module, f"{name}() raised {_said(e)}") from None
    if not (isinstance(made, tuple | list) and len(made) == 3 and callable(made[0]) and isinstance(made[1], Mapping)):
        raise EntryPointError(
            AGENT, spec, module, f"{name}() must return (planner, tools, verifier), not {made!r:.200}"
        )
    return made[0], made[1], made[2]


def load_workflow(spec: str) -> Workflow[Any, Any]:
    """The workflow named by `module:attr`; EntryPointError when it is none, or cannot be imported by the name
    its traces record (a lambda, a closure or a nested function: define it at module level)."""
    found = attr(spec, WORKFLOW)
    module = spec.partition(":")[0]
    if not callable(found):
        raise EntryPointError(WORKFLOW, spec, module, f"{found!r:.80} is not a workflow or a function")
    w = found if isinstance(found, Workflow) else Workflow(found)
    if w.importable is not None:
        raise EntryPointError(
            WORKFLOW, spec, module, f"workflow {w.name} cannot be imported by that name: {w.importable}. Define it "
            "at the top level of a module (its traces name it module:qualname)",
        )  # fmt: skip
    return w


def _said(e: BaseException) -> str:
    """An exception as one line: its class and its message, spaces collapsed."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
