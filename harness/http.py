"""Record every request an httpx client makes, with no change to the code that uses the client.

`transport()` and `async_transport()` return httpx transports that wrap
`httpx.HTTPTransport` / `httpx.AsyncHTTPTransport`. Give one to a client
(`httpx.Client(transport=harness.http.transport())`), or give that client to
an SDK that takes an `http_client` (openai, anthropic): inside a run
(an Executor or a Recorder) every request is a boundary of kind `http`,
recorded, and served from the recording on resume, rerun and fork. Outside a
run the transport just calls through.

What a crossing holds (all JSON):
- request: `method`, `url`, `headers` (lower-case names; all but the
  volatile ones in `VOLATILE_HEADERS`), and the body as `body` (parsed JSON,
  when the content type is JSON), `text` (UTF-8 text) or `base64`; no body
  key when the body is empty;
- response: `status`, `headers`, and the body the same way, or, for a
  streamed response (`text/event-stream`, or chunked transfer encoding),
  `chunks`: the list of chunks as received (each a str, or `{"base64": ...}`),
  served again chunk for chunk;
- an error (connection refused, a timeout) is the crossing's error and is
  raised again, as the same httpx exception class, on rerun.

Rules kept here:
- matching (`match_on`, `ignore_query`, `ignore_body`, `any_local_port`)
  decides which part of a request must equal the recorded one; the request is
  stored whole (redacted), and both sides are cut down the same way before
  they are compared; by default the port of a loopback host (127.0.0.1,
  localhost, ::1) does not count: a test's model server binds a free port;
- the response body reaches the client decoded (no content-encoding), and a
  JSON body is served as the same JSON value, not necessarily the same bytes;
- while recording, a response (streamed ones too) is read whole before the
  client sees its first chunk: chunk boundaries are kept, the pacing is not;
  at most `max_body` bytes (16 MiB, what a trace line can hold), beyond
  which the call fails with HttpRecordingError (recorded as its error), so a
  stream that never ends cannot hold the run forever or fill the memory;
- secrets go through the transport's `redact=` rules, then the run's, before
  the request is hashed and before anything is written; the live client
  still receives the real response. An error's message goes through the
  transport's rules as it is raised (the client sees that message too).

httpx is an optional extra: `pip install 'harness-trace[http]'`.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from ._errors import HttpRecordingError, MissingExtra
from .runtime.boundary import aboundary, active, boundary
from .trace.line import problem
from .trace.redact import Redaction, Rule, at, parse_path, project_rules

try:
    import httpx
except ImportError:  # tests/test_extras.py imports it where httpx is absent
    raise MissingExtra("harness.http", "http", "pip install 'harness-trace[http]' (or pip install httpx)") from None

__all__ = ["MATCH_ON", "MAX_BODY", "VOLATILE_HEADERS", "AsyncRecordingTransport", "HttpRecordingError", "Matcher",
           "RecordingTransport", "async_transport", "transport"]  # fmt: skip

KIND = "http"
MAX_BODY = 16 * 1024 * 1024  # bytes of a response read while recording: a trace line holds no more anyway
MATCH_ON = ("method", "url", "body")
FIELDS = ("method", "scheme", "host", "port", "path", "query", "url", "headers", "body")
# names (or prefixes, ending in *) of headers that change between two runs of the same program
VOLATILE_HEADERS = (
    "user-agent", "content-length", "host", "connection", "keep-alive", "accept-encoding", "content-encoding",
    "transfer-encoding", "date", "server", "x-stainless-*", "traceparent", "tracestate", "idempotency-key",
)  # fmt: skip
_BODY_KEYS = ("body", "text", "base64")
_NOT_SERVED = frozenset({"content-length", "content-encoding", "transfer-encoding"})  # the body is served decoded


@dataclass(frozen=True, slots=True)
class Matcher:
    """Which part of a request a recorded request must equal (vcrpy's `match_on`).

    `on`: any of method, scheme, host, port, path, query, url (all five),
    headers, body. `ignore_query`: query parameter names left out of the
    url/query. `ignore_body`: JSON paths left out of a JSON body
    (`$.timestamp`, `$.metadata.request_id`, `$.messages[*].id`).
    `any_local_port`: a request to a loopback host (127.0.0.1, localhost,
    ::1) matches whatever its port (False: the port counts, as any other's).
    Calling it on a recorded request gives what is compared (and hashed).
    """

    on: tuple[str, ...] = MATCH_ON
    ignore_query: frozenset[str] = frozenset()
    ignore_body: tuple[str, ...] = ()
    any_local_port: bool = True
    _paths: tuple[tuple[str | int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        on = (self.on,) if isinstance(self.on, str) else tuple(self.on)
        bad = [f for f in on if f not in FIELDS]
        if bad or not on:
            what = f"unknown field {bad[0]!r}" if bad else "names no field"
            raise HttpRecordingError("match_on", self.on, f"{what}; choose among {', '.join(FIELDS)}")
        object.__setattr__(self, "on", on)
        object.__setattr__(self, "ignore_query", frozenset(self.ignore_query))
        paths = (self.ignore_body,) if isinstance(self.ignore_body, str) else tuple(self.ignore_body)
        object.__setattr__(self, "ignore_body", paths)
        object.__setattr__(self, "_paths", tuple(parse_path(p) for p in paths))

    def __call__(self, request: Any) -> Any:
        if not isinstance(request, dict):
            return request
        out: dict[str, Any] = {}
        url = _url_parts(request.get("url"), self.ignore_query, self.any_local_port)
        for f in self.on:
            if f == "method":
                out[f] = str(request.get("method", "")).upper()
            elif f == "url":
                out[f] = url
            elif f in ("scheme", "host", "port", "path", "query"):
                out[f] = url.get(f)
            elif f == "headers":
                out[f] = request.get("headers")
            else:  # the body under the key it is stored under: body (JSON), text or base64
                key = next((k for k in _BODY_KEYS if k in request), "body")
                value = request.get(key)
                if key == "body":
                    for path in self._paths:
                        value = at(value, path)
                out[key] = value
        return out


def _url_parts(url: Any, ignore: frozenset[str], any_local_port: bool) -> dict[str, Any]:
    if not isinstance(url, str):
        return {"url": url}
    u = httpx.URL(url)
    local = any_local_port and (u.host in ("localhost", "::1", "0.0.0.0") or u.host.startswith("127."))
    query: dict[str, Any] = {}  # name -> value, or its values in order when repeated; names in any order
    for k, v in u.params.multi_items():
        if k not in ignore:
            query[k] = [*query[k], v] if isinstance(query.get(k), list) else [query[k], v] if k in query else v
    port = "any" if local else u.port  # a loopback host's: a test server's free port
    return {"scheme": u.scheme, "host": u.host, "port": port, "path": u.path, "query": dict(sorted(query.items()))}


def _names(names: Iterable[str]) -> tuple[str, ...]:
    """A list of names from an option: "ts" is one name, not two letters."""
    return (names,) if isinstance(names, str) else tuple(names)


def _skip(skip_headers: Iterable[str]) -> Callable[[str], bool]:
    names = {h.lower() for h in skip_headers if not h.endswith("*")}
    prefixes = tuple(h[:-1].lower() for h in skip_headers if h.endswith("*"))
    return lambda name: name in names or name.startswith(prefixes)


def _headers(pairs: Iterable[tuple[str, str]], skip: Callable[[str], bool]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        name = name.lower()
        if skip(name):
            continue
        if name in out:  # a repeated header (set-cookie): its values in order
            had = out[name]
            out[name] = [*had, value] if isinstance(had, list) else [had, value]
        else:
            out[name] = value
    return out


def _body(content: bytes, content_type: str) -> dict[str, Any]:
    """The canonical form of a body: parsed JSON, UTF-8 text, or base64; {} when empty."""
    if not content:
        return {}
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        try:
            parsed = orjson.loads(content)
        except orjson.JSONDecodeError:
            parsed = None
        else:
            if problem(parsed) is None:
                return {"body": parsed}
    try:
        return {"text": content.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(content).decode("ascii")}


def _chunk(data: bytes) -> Any:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:  # binary, or a multi-byte character cut between two chunks
        return {"base64": base64.b64encode(data).decode("ascii")}


def _unchunk(chunk: Any) -> bytes:
    if isinstance(chunk, str):
        return chunk.encode("utf-8")
    if isinstance(chunk, dict) and isinstance(chunk.get("base64"), str):
        return base64.b64decode(chunk["base64"])
    raise HttpRecordingError("chunk", chunk, "a recorded http chunk is a str or {'base64': ...}, not this")


def _content(recorded: dict[str, Any]) -> bytes:
    if "body" in recorded:
        return orjson.dumps(recorded["body"])
    if "text" in recorded:
        return str(recorded["text"]).encode("utf-8")
    if "base64" in recorded:
        return base64.b64decode(recorded["base64"])
    return b""


def _streamed(response: httpx.Response) -> bool:
    media = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "text/event-stream" or "chunked" in response.headers.get("transfer-encoding", "").lower()


class _Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body served chunk for chunk, to sync and async clients alike."""

    def __init__(self, chunks: list[bytes]):
        self.chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for c in self.chunks:
            yield c

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _Recording:
    """What the sync and async transports share: describing, matching, redacting, rebuilding."""

    def __init__(
        self,
        match_on: Iterable[str],
        ignore_query: Iterable[str],
        ignore_body: Iterable[str],
        skip_headers: Iterable[str],
        redact: Redaction | Iterable[Rule] | None,
        max_body: int = MAX_BODY,
        any_local_port: bool = True,
    ):
        self.match = Matcher(_names(match_on), frozenset(_names(ignore_query)), _names(ignore_body), any_local_port)
        self.skip = _skip(_names(skip_headers))
        self.redact = Redaction.of(redact)
        # a response goes to the run's journal as the server sent it, less what the transport's own rules (not
        # the defaults: the journal applies those) take out: the journal keeps what its redaction takes out of a
        # response, encrypted beside the trace, and a rerun serves it (trace/vault.py); the transport's own rules
        # redact only
        own = () if redact is None else redact.rules if isinstance(redact, Redaction) else self.redact.rules
        own = tuple(r for r in own if r not in project_rules())  # (the run's journal applies the project's too)
        self.own = Redaction(own, defaults=False, marker=self.redact.marker) if own else None
        if type(max_body) is not int or max_body < 1:
            raise HttpRecordingError("max_body", max_body, "a positive int: the most bytes of a response to record")
        self.max_body = max_body

    def add(self, chunks: list[bytes], chunk: bytes, seen: int, request: httpx.Request) -> int:
        """Keep one more chunk of a response being recorded; HttpRecordingError past max_body."""
        seen += len(chunk)
        if seen > self.max_body:
            why = (
                f"more than {self.max_body} bytes arrived while recording (a stream that does not end?); "
                "a response is read whole before the client sees it: raise transport(max_body=...), "
                "or make this request outside the run"
            )
            raise HttpRecordingError("response", self.redact(str(request.url)), why)
        chunks.append(chunk)
        return seen

    def error(self, e: httpx.HTTPError) -> None:
        """Redact a live error's message with the transport's rules (the run's apply when it is recorded)."""
        e.args = tuple(self.redact(a) if isinstance(a, str) else a for a in e.args)

    def request(self, request: httpx.Request, content: bytes) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": request.method,
            "url": str(request.url),
            "headers": _headers(request.headers.multi_items(), self.skip),
        }
        out.update(_body(content, request.headers.get("content-type", "")))
        return out

    def response(self, response: httpx.Response, chunks: list[bytes]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": response.status_code,
            "headers": _headers(response.headers.multi_items(), self.skip),
        }
        if _streamed(response):
            out["chunks"] = [_chunk(c) for c in chunks if c]
        else:
            out.update(_body(b"".join(chunks), response.headers.get("content-type", "")))
        return out

    def rebuild(self, recorded: Any, request: httpx.Request) -> httpx.Response:
        if not isinstance(recorded, dict) or type(recorded.get("status")) is not int:
            why = "not one harness.http wrote: a response is an object with an int status (fork --set it so)"
            raise HttpRecordingError("response", recorded, why)
        headers: list[tuple[str, str]] = []
        for name, value in (recorded.get("headers") or {}).items():
            if name.lower() not in _NOT_SERVED:
                headers.extend((name, v) for v in (value if isinstance(value, list) else [value]))
        if "chunks" in recorded:
            stream: Any = _Chunks([_unchunk(c) for c in recorded["chunks"]])
        else:
            stream = httpx.ByteStream(_content(recorded))
        return httpx.Response(recorded["status"], headers=headers, stream=stream, request=request)


def _with_request(e: httpx.HTTPError, request: httpx.Request) -> None:
    """A served httpx error carries the request, as a live one does."""
    try:
        e.request  # noqa: B018  # raises RuntimeError when unset
    except RuntimeError:
        e.request = request


class RecordingTransport(httpx.BaseTransport):
    """An httpx transport whose requests are recorded boundaries of kind `http` inside a run."""

    def __init__(self, wrapped: httpx.BaseTransport, recording: _Recording):
        self.wrapped, self.recording = wrapped, recording

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not active():
            return self.wrapped.handle_request(request)
        rec = self.recording
        shown = rec.redact(rec.request(request, request.read()))
        real: list[dict[str, Any]] = []  # the live response, unredacted: what the client gets

        def live() -> dict[str, Any]:
            try:
                response = self.wrapped.handle_request(request)
                chunks: list[bytes] = []
                try:
                    seen = 0
                    for chunk in response.iter_bytes():
                        seen = rec.add(chunks, chunk, seen, request)
                finally:
                    response.close()
            except httpx.HTTPError as e:
                rec.error(e)
                raise
            real.append(rec.response(response, chunks))
            return real[0] if rec.own is None else rec.own(real[0])

        try:
            recorded = boundary(KIND, shown, live, match=rec.match)
        except httpx.HTTPError as e:
            _with_request(e, request)
            raise
        return rec.rebuild(real[0] if real else recorded, request)

    def close(self) -> None:
        self.wrapped.close()


class AsyncRecordingTransport(httpx.AsyncBaseTransport):
    """The async twin of RecordingTransport."""

    def __init__(self, wrapped: httpx.AsyncBaseTransport, recording: _Recording):
        self.wrapped, self.recording = wrapped, recording

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not active():
            return await self.wrapped.handle_async_request(request)
        rec = self.recording
        shown = rec.redact(rec.request(request, await request.aread()))
        real: list[dict[str, Any]] = []

        async def live() -> dict[str, Any]:
            try:
                response = await self.wrapped.handle_async_request(request)
                chunks: list[bytes] = []
                try:
                    seen = 0
                    async for chunk in response.aiter_bytes():
                        seen = rec.add(chunks, chunk, seen, request)
                finally:
                    await response.aclose()
            except httpx.HTTPError as e:
                rec.error(e)
                raise
            real.append(rec.response(response, chunks))
            return real[0] if rec.own is None else rec.own(real[0])

        try:
            recorded = await aboundary(KIND, shown, live, match=rec.match)
        except httpx.HTTPError as e:
            _with_request(e, request)
            raise
        return rec.rebuild(real[0] if real else recorded, request)

    async def aclose(self) -> None:
        await self.wrapped.aclose()


def transport(
    *,
    match_on: Iterable[str] = MATCH_ON,
    ignore_query: Iterable[str] = (),
    ignore_body: Iterable[str] = (),
    skip_headers: Iterable[str] = VOLATILE_HEADERS,
    redact: Redaction | Iterable[Rule] | None = None,
    wrap: httpx.BaseTransport | None = None,
    max_body: int = MAX_BODY,
    any_local_port: bool = True,
    **options: Any,
) -> RecordingTransport:
    """An httpx transport that records each request as an `http` crossing inside a run.

    `wrap`: the transport that makes the live calls (default
    `httpx.HTTPTransport(**options)`, e.g. `retries=2`, `verify=False`).
    `skip_headers`: header names (or prefixes ending in `*`) not recorded.
    `redact`: rules added to the defaults (see `harness.Redaction`), for
    requests, responses and the messages of errors.
    `max_body`: the most bytes of one response read while recording
    (HttpRecordingError beyond; default MAX_BODY, 16 MiB).
    `any_local_port=False`: the port of 127.0.0.1 / localhost / ::1 counts
    when a request is matched with its recording (by default it does not).
    See the module docstring for matching.
    """
    inner = wrap if wrap is not None else httpx.HTTPTransport(**options)
    recording = _Recording(match_on, ignore_query, ignore_body, skip_headers, redact, max_body, any_local_port)
    return RecordingTransport(inner, recording)


def async_transport(
    *,
    match_on: Iterable[str] = MATCH_ON,
    ignore_query: Iterable[str] = (),
    ignore_body: Iterable[str] = (),
    skip_headers: Iterable[str] = VOLATILE_HEADERS,
    redact: Redaction | Iterable[Rule] | None = None,
    wrap: httpx.AsyncBaseTransport | None = None,
    max_body: int = MAX_BODY,
    any_local_port: bool = True,
    **options: Any,
) -> AsyncRecordingTransport:
    """transport() for `httpx.AsyncClient` (and `openai.AsyncOpenAI(http_client=...)`)."""
    inner = wrap if wrap is not None else httpx.AsyncHTTPTransport(**options)
    recording = _Recording(match_on, ignore_query, ignore_body, skip_headers, redact, max_body, any_local_port)
    return AsyncRecordingTransport(inner, recording)
