"""A Pydantic AI agent made durable with one line: `capabilities=[HarnessDurability()]`.

    python examples/pydantic_ai_agent.py [FOLDER]

Offline, no key: the model is Pydantic AI's own OpenAI chat model talking to
a local chat-completions server (examples/local_model.py). The agent runs
inside a `@harness.workflow`: its model requests and its tool call are
recorded to FOLDER/weather.jsonl. Then the model server is stopped and the
run is rerun from the trace with zero live calls, as a golden test in CI
does. Exits 1 if anything turns out otherwise.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from local_model import serve
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import harness
from harness.pydantic_ai import HarnessDurability

URL = ["http://127.0.0.1:1/v1"]  # the local server's, once it runs
CALLS = []


def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    CALLS.append(city)
    return f"sunny in {city}"


@harness.workflow
async def weather(question: str) -> str:
    client = AsyncOpenAI(base_url=URL[0], api_key="sk-example-not-a-real-key")
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="weather", capabilities=[HarnessDurability()])  # the one line
    agent.tool_plain(forecast)
    return (await agent.run(question)).output


def main(folder: Path) -> int:
    URL[0], stop = serve()
    trace = folder / "weather.jsonl"
    outcome = weather.run("Will it rain in Paris tomorrow?", trace=trace)
    print(f"{outcome.state}: {outcome.result}")
    stop()
    again = harness.rerun(trace, workflow=weather)  # the model server is gone: everything is served
    print(f"rerun: equal={again.equal}, live calls={again.live_calls}; the tool ran {len(CALLS)} time(s)")
    ok = outcome.state == "DONE" and again.equal and again.live_calls == 0 and CALLS == ["Paris"]
    return 0 if ok and "sk-example" not in trace.read_text() else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())))
