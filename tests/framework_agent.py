"""Agents built with Pydantic AI and the OpenAI Agents SDK, as harness workflows, for the framework tests.

`pai_flow(url, model)` runs a Pydantic AI agent (`model` "function": its
FunctionModel; "openai": its OpenAI chat model over the server at `url`;
"openai-stream": the same, streamed) under HarnessDurability; `oa_flow(url)`
an Agents SDK agent (`OpenAIChatCompletionsModel` over `url`) with
harness.openai_agents.Runner. Both call `charge`, an unsafe tool that notes
each call in the file `$FRAMEWORK_LOG`. `$FRAMEWORK_KILL` stops the process
at a point (its marker file `$FRAMEWORK_MARKER` says it got there, then it
sleeps for the SIGKILL): `before:k` / `after:k` around the k-th HTTP request,
`model:k` inside the k-th FunctionModel call, `tool:k` inside the k-th call
of charge. `child()` is what a crash test's fresh process runs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # read once, when agents is imported

import httpx
from agents import Agent as OAAgent
from agents import OpenAIChatCompletionsModel, function_tool
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import harness
from harness.openai_agents import Runner
from harness.pydantic_ai import HarnessDurability

KEY = "sk-test-SECRET-framework-key-0123456789"
TOOLS = 2  # tool calls per run, then the final answer
_counts = {"http": 0, "model": 0, "tool": 0}


def _stop(point: str) -> None:
    """Stop here if $FRAMEWORK_KILL names this point: tell the parent (atomically), then wait for the SIGKILL."""
    if os.environ.get("FRAMEWORK_KILL") != point:
        return
    marker = os.environ["FRAMEWORK_MARKER"]
    Path(f"{marker}.tmp").write_text(str(os.getpid()))
    os.replace(f"{marker}.tmp", marker)
    time.sleep(600)


class _Hook(httpx.AsyncBaseTransport):
    """The client's transport, with the `before:k` and `after:k` stopping points."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        _counts["http"] += 1
        n = _counts["http"]
        _stop(f"before:{n}")
        response = await self.inner.handle_async_request(request)
        await response.aread()
        _stop(f"after:{n}")
        return response


def client(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, http_client=httpx.AsyncClient(transport=_Hook()))


@harness.tool(idempotent=False)
def charge(a: int, b: int) -> int:
    """Charge a card a + b cents (unsafe: never made twice)."""
    _counts["tool"] += 1
    _stop(f"tool:{_counts['tool']}")
    with open(os.environ.get("FRAMEWORK_LOG", os.devnull), "a") as f:
        f.write(f"charge {a} {b}\n")
    return a + b


@harness.tool(idempotent=True)
async def reserve(a: int, b: int) -> str:
    """Reserve a slot (idempotent: the booking service dedupes on the key)."""
    key = harness.idempotency_key()
    with open(os.environ.get("FRAMEWORK_LOG", os.devnull), "a") as f:
        f.write(f"reserve {a} {b} {key}\n")
    return key


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The FunctionModel: a call of charge until TOOLS results are in, then the text."""
    _counts["model"] += 1
    _stop(f"model:{_counts['model']}")
    n = sum(1 for m in messages for p in m.parts if p.part_kind == "tool-return")
    if n < TOOLS:
        return ModelResponse(parts=[ToolCallPart("charge", {"a": n, "b": 1})])
    return ModelResponse(parts=[TextPart(f"done after {n} tools")])


def pai_agent(url: str, model: str) -> Agent[None, str]:
    if model == "function":
        chosen: Any = FunctionModel(scripted)
    else:
        chosen = OpenAIChatModel("stub-model", provider=OpenAIProvider(openai_client=client(url)))
    agent = Agent(chosen, name="shop", capabilities=[HarnessDurability()])
    agent.tool_plain(charge)
    return agent


@harness.workflow
async def pai_flow(url: str, model: str) -> str:
    agent = pai_agent(url, model)
    if model.endswith("-stream"):
        async with agent.run_stream("charge twice") as run:
            return await run.get_output()
    return (await agent.run("charge twice")).output


def use_key(api_key: str, item: str) -> str:
    """Look an item up with an API key the model passed in its tool call (at-least-once: made again on resume)."""
    _counts["tool"] += 1
    with open(os.environ.get("FRAMEWORK_LOG", os.devnull), "a") as f:
        f.write(f"use_key {api_key} {item}\n")
    _stop(f"use_key:{_counts['tool']}")
    return "found" if api_key == os.environ.get("FRAMEWORK_SECRET") else "refused"


def keyed(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The FunctionModel of pai_secret_flow: a call of use_key with the API key in its args, then the text."""
    returned = [p.content for m in messages for p in m.parts if p.part_kind == "tool-return"]
    if not returned:
        return ModelResponse(parts=[ToolCallPart("use_key", {"api_key": os.environ["FRAMEWORK_SECRET"], "item": "x"})])
    return ModelResponse(parts=[TextPart(f"lookup {returned[0]}")])


@harness.workflow
async def pai_secret_flow(url: str) -> str:
    """A Pydantic AI agent whose model answers with a tool call holding an `api_key` (tests/test_secrets.py)."""
    agent = Agent(FunctionModel(keyed), name="keyed", capabilities=[HarnessDurability()])
    agent.tool_plain(use_key)
    return (await agent.run("look x up")).output


def oa_agent(url: str) -> OAAgent[Any]:
    model = OpenAIChatCompletionsModel(model="stub-model", openai_client=client(url))
    return OAAgent(name="shop", instructions="Charge twice.", model=model, tools=[function_tool(charge)])


@harness.workflow
async def oa_flow(url: str) -> str:
    result = await Runner.run(oa_agent(url), "charge twice")
    return str(result.final_output)


def child(flow: str, args: tuple[Any, ...], trace: str, env: dict[str, str], out: str) -> None:
    """A crash test's process: run (or resume) the workflow, note its outcome's state and result in `out`."""
    os.environ.update(env)
    workflow = {"pai": pai_flow, "oa": oa_flow, "pai-secret": pai_secret_flow}[flow]
    outcome = workflow.run(*args, trace=trace, resume="auto")
    Path(out).write_text(f"{outcome.state} {outcome.result}")
    os._exit(0)  # not the interpreter's exit: it would wait for the frameworks' idle worker threads (seconds)
