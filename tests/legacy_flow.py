"""A workflow whose model request holds JSON text with a secret key, for tests/test_compat_030.py.

`tests/fixtures/v030/json_text.jsonl` is its run as harness 0.3.0 recorded it (paused on its question), before
0.4.0 read JSON text inside strings: its request holds the key in clear inside the text, as 0.3.0 wrote it.
"""

from __future__ import annotations

import json
from typing import Any

import harness


def model(request: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "choices": [{"message": {"content": "found"}}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 1},
    }


@harness.workflow
def flow() -> str:
    query = json.dumps({"query": "ducks", "api_key": "sk-legacy-0000000000000000"})
    answer = harness.llm({"model": "m", "messages": [{"role": "user", "content": query}]}, model)
    go = harness.interrupt("go on?")
    return f"{answer['choices'][0]['message']['content']} {go}"
