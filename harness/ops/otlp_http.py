"""Send runs' spans to an OTLP/HTTP endpoint (Collector, Phoenix, Langfuse, Logfire): `export --otlp-endpoint`.

`send(paths, url)` builds each run's spans (`otlp.spans`), gathers them into
requests of at most `batch` spans (a run is never split), and POSTs each to
`url` (a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: `/v1/traces` is added
unless it already ends the path, so `http://localhost:4318`,
`https://cloud.langfuse.com/api/public/otel` and a full traces URL all work):
`http/protobuf` (the default: the binary `ExportTraceServiceRequest`, which
every OTLP receiver takes; it needs `opentelemetry-proto`, the `otel`
extra) or `http/json` (OTLP/JSON, no extra needed). `headers` go with each
request (an API key), merged over `$OTEL_EXPORTER_OTLP_HEADERS`.

Retries follow the OTLP specification: a refused connection, a timeout,
429, 502, 503 or 504 are tried again after 0.5 s, 1 s, 2 s, ... (or the
server's Retry-After), up to `attempts` tries; any other answer but 2xx is
final. When a request cannot be delivered, `OtlpUndelivered` (a
HarnessError: the CLI prints it and exits 2) says which endpoint, why, and
how many runs were sent before it; the requests already accepted stay sent
(a backend de-duplicates a second export of them: the ids are derived).
"""

from __future__ import annotations

import base64
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from .._errors import HarnessError, MissingExtra, OtlpUndelivered
from ..trace.redact import Rule
from .otlp import count, requests

PROTOCOLS = ("http/protobuf", "http/json")
RETRY = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Sent:
    """What `send()` delivered: the endpoint, runs, spans and requests."""

    url: str
    runs: int
    spans: int
    requests: int


def endpoint(url: str) -> str:
    """The URL to POST traces to: the base URL given, with the signal's path `/v1/traces` unless it ends so."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise HarnessError(f"--otlp-endpoint {url!r}: not an http(s) URL; give one like http://localhost:4318")
    return url if parts.path.rstrip("/").endswith("/v1/traces") else url.rstrip("/") + "/v1/traces"


def env_headers() -> dict[str, str]:
    """The headers $OTEL_EXPORTER_OTLP_HEADERS (then ..._TRACES_HEADERS) names: `k1=v1,k2=v2`, values URL-encoded."""
    out: dict[str, str] = {}
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        for pair in os.environ.get(name, "").split(","):
            key, eq, value = pair.partition("=")
            if eq and key.strip():
                out[key.strip().lower()] = unquote(value.strip())
    return out


def batches(items: Iterable[dict[str, Any]], batch: int) -> Iterator[tuple[dict[str, Any], int]]:
    """Requests of whole runs, each with at most `batch` spans (one run alone may hold more): (request, runs)."""
    spans: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    runs = 0
    for request in items:
        n = count(request)
        if first is not None and spans and len(spans) + n > batch:
            yield _merged(first, spans), runs
            spans, runs = [], 0
        first = request
        spans.extend(s for r in request["resourceSpans"] for ss in r["scopeSpans"] for s in ss["spans"])
        runs += 1
    if first is not None and runs:
        yield _merged(first, spans), runs


def _merged(template: dict[str, Any], spans: list[dict[str, Any]]) -> dict[str, Any]:
    """One request holding `spans`, under the resource and scope every run shares."""
    rs = template["resourceSpans"][0]
    return {"resourceSpans": [{"resource": rs["resource"], "scopeSpans": [{**rs["scopeSpans"][0], "spans": spans}]}]}


def encode(request: dict[str, Any], protocol: str) -> tuple[bytes, str]:
    """The request's body and content type in `protocol`."""
    if protocol == "http/json":
        return orjson.dumps(request), "application/json"
    try:
        from google.protobuf import json_format  # type: ignore[import-untyped]  # no stubs: the optional extra
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except ImportError:
        raise MissingExtra(
            "sending http/protobuf (opentelemetry-proto)",
            "otel",
            "pip install 'harness-trace[otel]' "
            "(or send OTLP/JSON with --otlp-protocol http/json, which needs nothing more)",
        ) from None
    message = json_format.ParseDict(to_proto_json(request), ExportTraceServiceRequest())
    return message.SerializeToString(), "application/x-protobuf"


def to_proto_json(request: dict[str, Any]) -> dict[str, Any]:
    """OTLP/JSON as the plain protobuf JSON mapping reads it: the ids in base64, not hex (OTLP's one deviation)."""

    def b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    out = []
    for rs in request["resourceSpans"]:
        scopes = []
        for ss in rs["scopeSpans"]:
            spans = []
            for s in ss["spans"]:
                s = {**s, "traceId": b64(s["traceId"]), "spanId": b64(s["spanId"])}
                if "parentSpanId" in s:
                    s["parentSpanId"] = b64(s["parentSpanId"])
                if "links" in s:
                    s["links"] = [{**k, "traceId": b64(k["traceId"]), "spanId": b64(k["spanId"])} for k in s["links"]]
                spans.append(s)
            scopes.append({**ss, "spans": spans})
        out.append({**rs, "scopeSpans": scopes})
    return {"resourceSpans": out}


def post(
    url: str, body: bytes, headers: Mapping[str, str], *, attempts: int, backoff: float, timeout: float
) -> str | None:
    """POST body, retrying as OTLP says; None once a 2xx came back, else why it was given up."""
    why = "no attempt"
    for attempt in range(1, attempts + 1):
        wait = backoff * 2 ** (attempt - 1)
        try:
            req = urllib.request.Request(url, body, dict(headers), method="POST")
            with urllib.request.urlopen(req, timeout=timeout) as r:
                r.read()
            return None
        except urllib.error.HTTPError as e:
            text = e.read(500).decode("utf-8", "replace").strip()
            why = f"HTTP {e.code}{': ' + text if text else ''}"
            if e.code not in RETRY:
                return why
            after = e.headers.get("retry-after")
            if after and after.strip().isdigit():
                wait = min(float(after), 30.0)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            why = f"cannot connect: {getattr(reason, 'strerror', None) or reason}"
        if attempt < attempts:
            time.sleep(wait)
    return f"{why}, after {attempts} attempt(s)"


def send(
    paths: Iterable[str | os.PathLike[str]],
    url: str,
    *,
    protocol: str = "http/protobuf",
    headers: Mapping[str, str] | None = None,
    batch: int = 512,
    attempts: int = 5,
    backoff: float = 0.5,
    timeout: float = 10.0,
    content: bool = False,
    redact: Iterable[Rule] | None = None,
    service: str = "harness",
    full: bool = False,
) -> Sent:
    """Send the spans of every run of `paths` to the OTLP/HTTP endpoint `url` (see the module docstring)."""
    if protocol not in PROTOCOLS:
        raise HarnessError(f"--otlp-protocol {protocol!r}: choose {' or '.join(PROTOCOLS)}")
    if batch < 1 or attempts < 1:
        raise HarnessError("the batch size and the attempts must be at least 1")
    target = endpoint(url)
    sent = spans = n = 0
    made = requests(paths, content=content, redact=redact, service=service, full=full)
    for request, runs in batches(made, batch):
        body, kind = encode(request, protocol)
        why = post(
            target, body, {**env_headers(), **(headers or {}), "content-type": kind},
            attempts=attempts, backoff=backoff, timeout=timeout,
        )  # fmt: skip
        if why is not None:
            raise OtlpUndelivered(target, sent, why)
        sent, spans, n = sent + runs, spans + count(request), n + 1
    return Sent(target, sent, spans, n)
