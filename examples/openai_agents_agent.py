"""An OpenAI Agents SDK agent made durable with one change: `harness.openai_agents.Runner` for `agents.Runner`.

    python examples/openai_agents_agent.py [FOLDER]

Offline, no key: the model is the SDK's `OpenAIChatCompletionsModel` talking
to a local chat-completions server (examples/local_model.py), and the SDK's
trace export is off. The agent runs inside a `@harness.workflow`: its model
calls and its tool call are recorded to FOLDER/weather.jsonl. Then the
model server is stopped and the run is rerun from the trace with zero live
calls. Exits 1 if anything turns out otherwise.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, OpenAIChatCompletionsModel, function_tool
from local_model import serve
from openai import AsyncOpenAI

import harness
from harness.openai_agents import Runner

URL = ["http://127.0.0.1:1/v1"]  # the local server's, once it runs
CALLS = []


@function_tool
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    CALLS.append(city)
    return f"sunny in {city}"


@harness.workflow
async def weather(question: str) -> str:
    client = AsyncOpenAI(base_url=URL[0], api_key="sk-example-not-a-real-key")
    model = OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
    agent = Agent(name="weather", instructions="Answer with the forecast.", model=model, tools=[forecast])
    return str((await Runner.run(agent, question)).final_output)


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
