"""The architecture is declared and checked: the layers of pyproject.toml hold, and no import cycle anywhere.

docs/ARCHITECTURE.md says what each layer owns and where a new piece goes.
`lint-imports` checks the contracts in pyproject.toml (CI runs only the test
suite, so this test runs it). The cycle check builds the import graph of
`harness` with grimp (which import-linter uses), counting the imports inside
functions, and fails naming the modules of every cycle.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
# the `lint-imports` command, run by this interpreter (import-linter is in the test extra)
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--no-logo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(cwd)},  # the package of this tree, not another one installed
    )


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        other = stack.pop()
                        on_stack.discard(other)
                        component.append(other)
                        if other == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_lint_imports_keeps_every_contract_of_pyproject() -> None:
    run = lint_imports(ROOT)
    assert run.returncode == 0, f"lint-imports found a broken contract:\n{run.stdout}{run.stderr}"
    assert " 0 broken." in run.stdout and " kept" in run.stdout, run.stdout


def test_lint_imports_fails_on_an_import_up_a_layer(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "high.py").write_text("")
    (tmp_path / "pkg" / "low.py").write_text("def f():\n    from . import high\n")  # inside a function
    (tmp_path / "pyproject.toml").write_text(
        '[tool.importlinter]\nroot_package = "pkg"\n\n[[tool.importlinter.contracts]]\nname = "layers"\n'
        'type = "layers"\ncontainers = ["pkg"]\nlayers = ["high", "low"]\n'
    )
    run = lint_imports(tmp_path)
    assert run.returncode != 0 and "pkg.low -> pkg.high" in run.stdout, run.stdout + run.stderr


def test_no_import_cycle_anywhere_in_harness() -> None:
    """No module of harness reaches itself through its imports, those inside functions and those under
    `if TYPE_CHECKING:` included.

    A type-only import orders no loading, but a circle of them is still two
    modules that cannot be read apart: a type one needs from a module above
    it goes down as a Protocol (agents.Run, what Agents use of a Session).
    """
    graph = grimp.build_graph("harness", cache_dir=None, exclude_type_checking_imports=False)
    # an import inside a function counts (Executor.arun imports the bridge only when it runs)
    assert graph.direct_import_exists(importer="harness.runtime.executor", imported="harness.runtime.bridge")
    found = cycles(graph)
    assert not found, "import cycles in harness (break each: docs/ARCHITECTURE.md):\n" + "\n".join(
        " <-> ".join(component) for component in found
    )


def test_the_cycle_check_names_the_modules_of_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p.e")]:
        graph.add_import(importer=importer, imported=imported)
    graph.add_import(importer="p.x", imported="p.y")
    graph.add_import(importer="p.y", imported="p.x")
    assert sorted(cycles(graph)) == [["p.a", "p.b", "p.c"], ["p.x", "p.y"]]


def test_no_module_but_context_touches_a_context_variable() -> None:
    """runtime/context.py's variables are read and set through its functions only (current_run(), in_call(), ...).

    Any name starting with an underscore imported from it, or read off it as
    an attribute, outside it is a reach into its private state.
    """
    reaches = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path == ROOT / "harness" / "runtime" / "context.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "context":
                reaches += [f"{path.relative_to(ROOT)}:{node.lineno} {a.name}" for a in node.names if a.name[0] == "_"]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "context":
                private = node.attr[0] == "_" and not node.attr.startswith("__")
                reaches += [f"{path.relative_to(ROOT)}:{node.lineno} context.{node.attr}"] if private else []
    assert not reaches, "context variables used outside runtime/context.py:\n" + "\n".join(reaches)


def test_no_module_above_the_trace_reads_a_private_field_of_a_replay() -> None:
    """A resuming writer reads where a run stands through `Replay.tail` (a `Tail`, its named fields and questions):
    no module outside trace/ reads an underscore field of a Replay or a Tail."""
    from harness.trace.reader import Replay, Tail

    private = {f.name for cls in (Replay, Tail) for f in dataclasses.fields(cls) if f.name.startswith("_")} | {"_tail"}
    reaches = [
        f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
        for path in sorted((ROOT / "harness").rglob("*.py"))
        if "trace" not in path.relative_to(ROOT / "harness").parts[:1]
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute) and node.attr in private
    ]
    assert not reaches, "private fields of Replay read outside harness/trace:\n" + "\n".join(reaches)


def test_one_step_implementation_writes_every_tool_call() -> None:
    """Every door's tool call is a step of runtime/step.py: no other module writes a transition into ACT (an intent)
    or a tool's result (into VERIFY with `result`), nor makes an idempotency key (trace/state.py defines its format,
    step.py makes it)."""
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path in (ROOT / "harness" / "runtime" / "step.py", ROOT / "harness" / "trace" / "state.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "move":
                into = ast.unparse(node.args[0]) if node.args else ""
                if into == "S.ACT" or (into == "S.VERIFY" and any(k.arg == "result" for k in node.keywords)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} move({into}, ...)")
            elif isinstance(node, ast.JoinedStr) and ast.unparse(node).count("}-{") == 2:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)} (a key made here)")
    assert not found, "tool steps written outside runtime/step.py:\n" + "\n".join(found)


def test_every_exception_class_of_harness_is_defined_in_errors() -> None:
    """Errors in one place: a class of harness deriving from an exception lives in harness/_errors.py, unless it is
    a private signal of one module (an underscore name, or `Paused`, runtime/control.py's own)."""
    import ast

    import harness
    import harness._errors as errors

    known = {n for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, BaseException)}
    known |= {"Exception", "BaseException", "ValueError", "TypeError"}
    root = Path(harness.__file__).parent
    found = [
        f"{path.relative_to(root.parent)}:{node.lineno} {node.name}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "_errors.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(b).rsplit(".", 1)[-1] in known for b in node.bases)
        and not node.name.startswith("_")
        and node.name != "Paused"
    ]
    assert found == []
