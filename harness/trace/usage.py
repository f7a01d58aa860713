"""What a model call asks for and what it cost, read from its crossing: every door's records, one reader.

Each door records a model call its own way: `llm` (whatever request and
response the caller gave), `http` (an OpenAI, Anthropic or compatible API's
request and response, streamed or not), `pydantic_ai.model` (Pydantic AI's
`ModelResponse`), `openai_agents.model` and `.stream` (the Agents SDK's
`ModelResponse`, or its stream's events). `model_call(rec)` reads any of
them into one `ModelCall`: the operation, the provider, the models asked
for and answered by, the `Usage` (input tokens with the cached ones among
them, output tokens) and the finish reason. `review/calls.py` (the behavior
view, `expect()`, the OTLP export, the cost ledger) and the runtime's budget
gate (runtime/budget.py) both read calls through it.

`role(rec, header)` says whether a record was served from a parent's
recording (`served`: every record of a rerun, a fork's records before its
branch), is a fork's branch answered by hand (`answered`), or ran `live`:
only a live call was billed. `bound(kind, request)` reads a request before it is sent: whether it is a
model call at all (an `http` crossing is one only when it calls a model
API), the model asked for, its `max_tokens` (each API's spelling) and the
size of its prompt in tokens, estimated from its JSON (`PROMPT_BYTES` bytes
a token). `load_prices(path)` reads a TOML price list (USD per million
tokens, per model) into `Price`s.

Rules kept here: pure functions of the records (no I/O but the price
list's file), and a record this module does not read is None, never an
exception. Usage is counted as the provider billed it: input tokens include
the cached ones (OpenAI's and Pydantic AI's spelling; Anthropic's three
counters are added up), and a stream that reported no usage has none.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from .._errors import HarnessError
from .stream import FRAMEWORK_MODELS, assemble

MODEL_KINDS = frozenset({"llm", "http", *FRAMEWORK_MODELS})  # the boundaries a model call may be recorded as

UNKNOWN = "unknown"  # the provider or model a record does not name

# the path an API call ends with -> the GenAI operation it is
_PATHS = (
    ("/chat/completions", "chat"),
    ("/responses", "chat"),
    ("/messages", "chat"),  # Anthropic's
    ("/completions", "text_completion"),
    ("/embeddings", "embeddings"),
)
# hosts whose provider the GenAI conventions name; any other host speaking these APIs is taken at its API's word
_HOSTS = (
    ("api.openai.com", "openai"),
    (".openai.azure.com", "azure.ai.openai"),
    ("api.anthropic.com", "anthropic"),
    ("api.mistral.ai", "mistral_ai"),
    ("api.groq.com", "groq"),
    ("api.deepseek.com", "deepseek"),
    ("api.x.ai", "x_ai"),
    ("api.perplexity.ai", "perplexity"),
    ("generativelanguage.googleapis.com", "gcp.gemini"),
)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens of one model call as billed: `input` counts every input token, `cached` those of them read from
    the provider's cache (billed at the cached price)."""

    input: int = 0
    output: int = 0
    cached: int = 0
    total: int = 0  # the provider's own total, when it gives one (0: it gives none)

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input + other.input, self.output + other.output, self.cached + other.cached,
                     self.total + other.total)  # fmt: skip

    @property
    def tokens(self) -> int:
        """Every token of the call: the provider's total, else input plus output."""
        return self.total or self.input + self.output


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call as a record says it was made."""

    operation: str  # the GenAI operation: chat, text_completion, embeddings
    provider: str  # as the GenAI conventions name it (openai, anthropic, ...), else what the door says, else unknown
    request_model: str | None
    response_model: str | None
    usage: Usage | None  # None when the record holds no usage (a plain llm() answer, a stream without it)
    finish_reason: str | None = None
    error: str | None = None  # why it failed: the crossing's error type, or the HTTP status

    @property
    def model(self) -> str:
        """The model to bill: the one that answered, else the one asked for."""
        return self.response_model or self.request_model or UNKNOWN


def model_call(rec: Mapping[str, Any]) -> ModelCall | None:
    """The model call a crossing record holds (its payloads read back from blobs already); None for any other."""
    kind = rec.get("boundary")
    if rec.get("kind") != "crossing" or kind not in MODEL_KINDS:
        return None
    request, response = rec.get("request"), rec.get("response")
    error = rec.get("error")
    failed = str(error.get("type")) if isinstance(error, dict) else None
    if kind == "http":
        return _http(request, response, failed)
    if kind == "pydantic_ai.model":
        if not isinstance(response, dict):
            return ModelCall("chat", UNKNOWN, None, None, None, error=failed)
        model = _str(response.get("model_name"))
        provider = _str(response.get("provider_name")) or _str(response.get("canonical_system")) or UNKNOWN
        return ModelCall(
            "chat", provider, model, model, _usage(response.get("usage")), _str(response.get("finish_reason")), failed
        )
    if kind in ("openai_agents.model", "openai_agents.stream"):
        asked = _str(request.get("model")) if isinstance(request, dict) else None
        done = _agents_response(response)
        answered = _agents_model(done) or asked
        usage = _usage(done.get("usage")) if done is not None else None
        return ModelCall("chat", "openai", asked, answered, usage, None, failed)
    # llm: what the caller gave; an OpenAI-like request and response are read as such
    wanted = _str(request.get("model")) if isinstance(request, dict) else None
    named = _str(request.get("provider")) if isinstance(request, dict) else None
    body = response if isinstance(response, dict) else {}
    got = _str(body.get("model")) or wanted
    return ModelCall("chat", named or UNKNOWN, wanted, got, _usage(body.get("usage")), _finish(body), failed)


def _http(request: Any, response: Any, failed: str | None) -> ModelCall | None:
    """An http crossing that called a model API (by its path, with a JSON body naming a model); else None."""
    if not isinstance(request, dict) or not isinstance(request.get("body"), dict):
        return None
    url = request.get("url")
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    operation = next((op for end, op in _PATHS if path.endswith(end)), None)
    asked = _str(request["body"].get("model"))
    if operation is None or asked is None:
        return None
    host = (parts.hostname or "").lower()
    provider = next((p for h, p in _HOSTS if host == h or (h.startswith(".") and host.endswith(h))), None)
    if provider is None:
        provider = "anthropic" if path.endswith("/messages") else "openai"  # the API it speaks
    if not isinstance(response, dict):
        return ModelCall(operation, provider, asked, None, None, error=failed)
    status = response.get("status")
    if type(status) is int and status >= 400:
        failed = failed or str(status)
    body = response.get("body")
    if "chunks" in response:
        body = assemble(response["chunks"])
    if not isinstance(body, dict):
        return ModelCall(operation, provider, asked, None, None, error=failed)
    answered = _str(body.get("model")) or asked
    return ModelCall(operation, provider, asked, answered, _usage(body.get("usage")), _finish(body), failed)


def _agents_response(response: Any) -> dict[str, Any] | None:
    """The Agents SDK's response: as recorded, or the one a stream's `response.completed` event carries."""
    if isinstance(response, list):
        done = [e for e in response if isinstance(e, dict) and e.get("type") == "response.completed"]
        found = done[-1].get("response") if done else None
        return found if isinstance(found, dict) else None
    return response if isinstance(response, dict) else None


def _agents_model(response: dict[str, Any] | None) -> str | None:
    if response is None:
        return None
    model = _str(response.get("model"))
    for item in response.get("output") or ():
        data = item.get("provider_data") if isinstance(item, dict) else None
        if model is None and isinstance(data, dict):
            model = _str(data.get("model"))
    return model


def _usage(usage: Any) -> Usage | None:
    """Any door's usage: OpenAI chat (prompt_tokens), responses and Agents SDK (input_tokens + details),
    Anthropic (input_tokens plus its cache counters), Pydantic AI (input_tokens, cache_read_tokens)."""
    if not isinstance(usage, dict):
        return None
    total = _int(usage.get("total_tokens"))
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        details = usage.get("prompt_tokens_details")
        cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        return Usage(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), cached, total)
    if "input_tokens" not in usage and "output_tokens" not in usage:
        return Usage(0, 0, 0, total) if total else None  # (a total alone, as a fake or a thin client gives)
    inp, out = _int(usage.get("input_tokens")), _int(usage.get("output_tokens"))
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:  # Anthropic: apart from input
        cached = _int(usage.get("cache_read_input_tokens"))
        return Usage(inp + cached + _int(usage.get("cache_creation_input_tokens")), out, cached, total)
    details = usage.get("input_tokens_details")
    if isinstance(details, dict):
        return Usage(inp, out, _int(details.get("cached_tokens")), total)
    return Usage(inp, out, _int(usage.get("cache_read_tokens")), total)


def _finish(body: Mapping[str, Any]) -> str | None:
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return _str(choices[0].get("finish_reason"))
    return _str(body.get("finish_reason")) or _str(body.get("stop_reason")) or _str(body.get("status"))


def _int(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- which records are served --------------------------------------------------------------------------------


def role(rec: Mapping[str, Any], header: Mapping[str, Any]) -> str:
    """`served` (taken from the parent's recording: a rerun's records, a fork's before its branch), `answered`
    (a fork's branch: the value the fork set) or `live` (made when it was recorded): `harness show`'s words."""
    if "parent" not in header or rec.get("kind") == "header":
        return "live"
    branch = header.get("branch")
    if type(branch) is not int:  # a rerun: every record was served from the recording
        return "served"
    if rec.get("reused") is True:
        return "served"
    if rec.get("mutated") is True:
        return "answered"
    if "vc" in rec:  # a causal fork marks what it reused and its branch: the rest ran live
        return "live"
    seq = rec.get("seq")
    if type(seq) is not int:
        return "live"
    return "answered" if seq == branch else "live" if seq > branch else "served"


# --- a request, before it is sent ------------------------------------------------------------------------------

PROMPT_BYTES = 4  # bytes of a prompt's JSON per token: the usual rough measure for English text and JSON
# each API's name for the most tokens a call may answer with: chat completions (both), responses, Anthropic's
_MAX_TOKENS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


@dataclass(frozen=True, slots=True)
class Bound:
    """What a model call asks for, read from its request before it is sent."""

    model: str | None  # the model asked for (None: the request does not name it, as Pydantic AI's)
    max_tokens: int | None  # the most tokens it may answer with, when the request sets it
    prompt: int  # its prompt's size in tokens, estimated from its JSON (PROMPT_BYTES a token); 0 with max_tokens


def bound(kind: str, request: Any) -> Bound | None:
    """The model call `request` (of boundary `kind`) makes, or None when it is not a model call."""
    if kind not in MODEL_KINDS:
        return None
    body: Any = request
    settings: Any = request
    model = _str(request.get("model")) if isinstance(request, dict) else None
    if kind == "http":
        if _http(request, None, None) is None:  # not a call of a model API
            return None
        body = settings = request["body"]
        model = _str(body.get("model"))
    elif kind in FRAMEWORK_MODELS and isinstance(request, dict):
        settings = request.get("settings")
    limit = None
    if isinstance(settings, dict):
        limit = next((v for k in _MAX_TOKENS if type(v := settings.get(k)) is int and v > 0), None)
    if limit is not None:
        return Bound(model, limit, 0)  # (its prompt is not measured: max_tokens is what a budget counts)
    return Bound(model, None, math.ceil(len(orjson.dumps(body, default=str)) / PROMPT_BYTES))


# --- prices -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float

    def usd(self, usage: Usage) -> float:
        """What usage costs: (input - cached) x input + cached x cached_input + output x output, per million."""
        fresh = max(usage.input - usage.cached, 0)
        return (fresh * self.input + usage.cached * self.cached_input + usage.output * self.output) / 1e6


def load_prices(path: str | os.PathLike[str]) -> dict[str, Price]:
    """The price list of a TOML file: `[models."<model>"]` with `input`, `output`, `cached_input` (USD per
    million tokens; `cached_input` defaults to `input`). A bad file is a HarnessError naming it and the problem."""
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise HarnessError(f"{where}: cannot read the price list: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise HarnessError(f"{where}: not valid TOML: {e}") from None
    return prices_of(data.get("models"), where)


def prices_of(models: Any, where: str) -> dict[str, Price]:
    """A price list from its `models` table (a mapping of model -> {input, output, cached_input}); `where` names
    it in a HarnessError."""
    if not isinstance(models, Mapping) or not models:
        raise HarnessError(f'{where}: no [models."<name>"] table; write one per model, e.g. [models."gpt-4o-mini"] '
                           "with input = 0.15 and output = 0.60 (USD per million tokens)")  # fmt: skip
    out = {}
    for name, entry in models.items():
        if isinstance(entry, Price):
            out[name] = entry
            continue
        if not isinstance(entry, Mapping):
            raise HarnessError(f"{where}: models.{name!r} is not a table of prices")
        unknown = set(entry) - {"input", "output", "cached_input"}
        if unknown:
            raise HarnessError(f"{where}: models.{name!r} has {', '.join(sorted(unknown))}; "
                               "the keys are input, output and cached_input")  # fmt: skip
        values = {}
        for key in ("input", "output", "cached_input"):
            v = entry.get(key, entry.get("input") if key == "cached_input" else None)
            if not isinstance(v, int | float) or isinstance(v, bool) or v < 0:
                raise HarnessError(f"{where}: models.{name!r}.{key} must be a number of USD per million tokens "
                                   f"(0 or more), not {v!r}")  # fmt: skip
            values[key] = float(v)
        out[name] = Price(values["input"], values["output"], values["cached_input"])
    return out
