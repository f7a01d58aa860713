"""An agent that asks a model its questions over a streamed OpenAI API, with the real openai client.

`make_agent(url, api="chat" | "responses", asynchronous=False)` returns
(planner, tools, None): each step asks the next of goal["questions"] with
streaming on, through `harness.http`, and notes the streamed text (or the
tool the model called). The chat API is read chunk by chunk
(`chat.completions.create(stream=True)`); the responses API through the
client's own stream helper (`responses.stream(...)`), which checks every
event. `--agent stream_agent:make_agent` takes the URL from $MODEL_URL and
the API from $MODEL_API.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import openai

from harness import Checkpoint, Step
from harness import http as hhttp

KEY = "sk-test-STREAMKEY0123456789abcdef"
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]


def make_agent(url: str | None = None, api: str | None = None, asynchronous: bool = False) -> tuple[Any, Any, None]:
    base = (url or os.environ["MODEL_URL"]) + "/v1"
    api = api or os.environ.get("MODEL_API", "chat")
    client = openai.OpenAI(
        base_url=base, api_key=KEY, max_retries=0, http_client=httpx.Client(transport=hhttp.transport())
    )

    def ask(question: str) -> str:
        if asynchronous:
            return asyncio.run(ask_async(question))
        if api == "responses":
            with client.responses.stream(model="test-model", input=question, tools=TOOLS) as stream:
                for _ in stream:
                    pass
                final = stream.get_final_response()
            calls = [f"{o.name}{o.arguments}" for o in final.output if o.type == "function_call"]
            return final.output_text or "; ".join(calls)
        chunks = client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": question}], stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    async def ask_async(question: str) -> str:
        transport = hhttp.async_transport()
        async with openai.AsyncOpenAI(
            base_url=base, api_key=KEY, max_retries=0, http_client=httpx.AsyncClient(transport=transport)
        ) as aclient:
            chunks = await aclient.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": question}], stream=True
            )
            return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])

    def planner(goal: dict[str, Any], progress: list[Checkpoint]) -> Step | None:
        if len(progress) == len(goal["questions"]):
            return None
        question = goal["questions"][len(progress)]
        return Step(name=f"ask {len(progress)}", tool="note", args={"question": question, "answer": ask(question)})

    return planner, {"note": lambda question, answer: {"noted": answer}}, None


QUESTIONS = [
    "what is a journal",
    "why should a trace be append only, when a database could hold the same records with less care",
    "what does a fork change",
]
# the second reply with a few words changed: what a reviewer sees on the diff page
FORKED = "echo: why should a trace be append only, when a spreadsheet could hold the same records with no care at all"


def record_runs(folder: Any) -> dict[str, str]:
    """Record into folder a run of this agent against a local model server (chat API, streamed), and a fork
    of it whose second reply says FORKED instead; return their run addresses: {"model": ..., "model_fork": ...}."""
    from pathlib import Path

    from chat_server import ChatServer

    import harness
    from harness import Executor

    folder = Path(folder)
    server = ChatServer()
    try:
        planner, tools, _ = make_agent(server.url)
        Executor(planner=planner, tools=tools, trace=folder / "model.jsonl").run({"questions": QUESTIONS})
        at = [c.seq for c in harness.replay(folder / "model.jsonl").crossings if c.kind == "http"][1]
        harness.fork(folder / "model.jsonl", at=at, set={"stream.message.content": FORKED}, planner=planner,
                     tools=tools, out=folder / "model-fork.jsonl")  # fmt: skip
    finally:
        server.stop()
    return {"model": "model", "model_fork": "model-fork"}
