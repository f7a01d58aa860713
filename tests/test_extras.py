"""Every door that needs an optional extra says so with MissingExtra, naming the pip command.

Each door runs in a child Python that sees only harness and orjson (its one
core dependency: conftest.py's `core_only`), an install without the extras
as a user has it: the import of the framework fails for real.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# door -> (the extra, code that walks through the door; `tmp` is a scratch folder)
DOORS = {
    "http": ("http", "import harness.http"),
    "mcp": (
        "mcp",
        """
        import asyncio
        import harness.mcp

        async def go():
            async with harness.mcp.stdio(None):
                pass

        asyncio.run(go())
        """,
    ),
    "pydantic_ai": ("pydantic-ai", "import harness.pydantic_ai"),
    "openai_agents": ("openai-agents", "import harness.openai_agents"),
    "ray": ("ray", "import harness.ray; harness.ray.run_many([1], agent='x:y', runs=tmp)"),
    "viewer": ("web", "import harness.viewer; harness.viewer.create_app(tmp)"),
    "s3": ("s3", "import harness.store; harness.store.replay('s3://bucket/run.jsonl')"),
    "otlp": ("otel", "from harness.ops.otlp_http import encode; encode({}, 'http/protobuf')"),
}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_door_without_its_extra_raises_missing_extra_naming_the_command(
    door: str, core_only: dict[str, str], tmp_path: Path
) -> None:
    extra, walk = DOORS[door]
    code = "\n".join(
        [
            "import sys",
            f"tmp = {str(tmp_path)!r}",
            "import harness",
            "try:",
            textwrap.indent(textwrap.dedent(walk).strip(), "    "),
            "except harness.MissingExtra as e:",
            "    print('extra:', e.extra)",
            "    print('said:', e)",
            "    sys.exit(0)",
            "sys.exit('the door opened without its extra')",
        ]
    )
    env = core_only
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"extra: {extra}\n" in r.stdout
    assert f"pip install 'harness-trace[{extra}]'" in r.stdout, r.stdout


def test_the_core_only_child_cannot_import_an_extra(core_only: dict[str, str]) -> None:
    """The simulation is honest: the child really lacks the extras (and still imports harness)."""
    code = (
        "import harness, importlib.util as u; print([m for m in ('httpx', 'mcp', 'ray', 'fsspec') if u.find_spec(m)])"
    )
    env = core_only
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)
