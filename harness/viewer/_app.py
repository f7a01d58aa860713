"""The viewer's web application: pages, a JSON API and a live event stream, on Starlette.

Routes (a run's address is its trace's file name without `.jsonl`,
relative to the runs folder; `_paths` refuses anything that would leave it).
Every API path of a run ends with what is asked of it (`/summary`,
`/records`, ...), so `sub/events.jsonl` is the run `sub/events` at
`/api/runs/sub/events/summary`, never run `sub`'s event stream:

    GET  /                           the runs page
    GET  /runs/{run}                 a run's page
    GET  /diff?a=RUN&b=RUN           the diff page
    GET  /static/...                 the page's own JS and CSS (shipped in the package)
    GET  /api/config                 {folder, fork}: whether forking is on (`--agent`)
    GET  /api/runs                   the runs table, newest first (ETag: 304 while nothing changed)
    GET  /api/runs/{run}/summary     a run's summary: header, status, verdict, lanes, one letter per record
    GET  /api/runs/{run}/records     ?start=&count=: a window of records as the timeline shows them
    GET  /api/runs/{run}/record      ?line=N: one record whole (blob-stored payloads read back), seq, line, lane, role
    GET  /api/runs/{run}/verify      `harness verify`: every line, every blob's bytes, the seal
    GET  /api/runs/{run}/events      server-sent events: complete lines from byte ?from= or Last-Event-ID
    POST /api/runs/{run}/fork        {"at": SEQ, "value": JSON}: fork in the background (403 without --agent)
    GET  /api/jobs/{job}             how a background fork is going
    GET  /api/diff?a=RUN&b=RUN       harness.diff(a, b), as `harness diff --format json` prints it

Guarantees: the server opens traces read-only (a fork writes a new file
through harness.fork); every response carries a Content-Security-Policy
that allows only the package's own scripts and styles; a HarnessError
becomes a JSON error with a 4xx status, never a 500; the event stream sends
only complete lines, each with `id:` = the byte offset after it, so a
client reconnecting with Last-Event-ID gets each record once, and only
lines of the file it began on: a file replaced or rewritten under it ends
the stream with a `reset` event (the page loads the run again). A request
holds its reply and one record at a time (`Index.lines`): a window of
records, an event stream or one record never reads the records around
them, whatever they weigh. Files beside a trace (annotations, blobs) are
read as the library reads them (`storage.files.read_beside`).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import HarnessError, IndexChanged, RunNotFound, TooLarge, TraceCorruption, TraceUnreadable
from ..review.cost import run_cost
from ..review.diff import diff as harness_diff
from ..review.diff import marked_changes
from ..review.normalize import RULES, Rules, behave, mapped, normalize_record
from ..review.rerun import fork as harness_fork
from ..review.runs import run_info
from ..runtime.entry import load_agent, load_workflow
from ..storage.blobs import read as read_blob
from ..storage.files import read_beside
from ..trace.annotations import VERSION as ANNOTATIONS_VERSION
from ..trace.annotations import annotations_path
from ..trace.annotations import parse as parse_annotations
from ..trace.reader import wall_clock
from ..trace.stream import FRAMEWORK_MODELS, http_view, reply
from ..trace.verify import verify
from ._index import CLASSES, READ, Index, Indexes
from ._listing import Listing
from ._paths import address, trace_path, well_formed

T = TypeVar("T")
STATIC = str(resources.files("harness.viewer") / "static")
PAGE = (resources.files("harness.viewer") / "static" / "page.html").read_text()  # one shell; {page} names its script
JOBS_KEPT = 100  # finished fork jobs remembered (the oldest are forgotten first); running ones always are
DIFF_SHOWN = 1000  # differences listed on the diff page (the counts are always whole)
ANNOTATIONS = 1 << 20  # bytes of an annotations file shown at most
BLOB_SHOWN = 8 << 20  # bytes of a blob-stored payload read into a record's panel at most
WINDOW = 2000  # at most this many records per /records request
BATCH = 500  # records read and sent at a time on a live stream
POLL = 0.2  # seconds between looks at a trace that a live stream follows
HEARTBEAT = 10.0  # seconds between keep-alive comments on a quiet stream
_RESET = "the trace was replaced or rewritten since the stream began: load the run again"

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


@dataclass
class Job:
    """A fork running in the background."""

    id: str
    parent: str
    child: str
    at: int
    state: str = "running"  # running, done, failed
    error: str | None = None
    result: dict[str, Any] | None = None


@dataclass
class Viewer:
    """What the application serves: the runs folder, and the agent factory that enables forking."""

    folder: str
    agent: str | None = None
    workflow: str | None = None  # forks from the page re-execute this workflow (module:attr) instead of an agent
    stopping: Callable[[], bool] = lambda: False  # the server is shutting down: live streams end
    rules: Rules = RULES  # what a diff leaves out: the project's [tool.harness], --config, --ignore (rules_for)
    indexes: Indexes = field(default_factory=Indexes)
    jobs: dict[str, Job] = field(default_factory=dict)
    listing: Listing = field(init=False)

    def __post_init__(self) -> None:
        self.listing = Listing(self.folder)

    def add(self, job: Job) -> None:
        """Remember a new job; forget the oldest finished ones beyond JOBS_KEPT, so the dict stays small."""
        finished = [k for k, j in self.jobs.items() if j.state != "running"]
        for k in finished[: max(0, len(finished) - JOBS_KEPT + 1)]:
            del self.jobs[k]
        self.jobs[job.id] = job

    def path(self, run: str, *, exists: bool = True) -> str:
        return trace_path(self.folder, run, exists=exists)


class SecurityHeaders:
    """Adds the Content-Security-Policy (and friends) to every response, streams included."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(
    folder: str,
    *,
    agent: str | None = None,
    hosts: list[str] | None = None,
    workflow: str | None = None,
    rules: Rules = RULES,
) -> Starlette:
    """The viewer for runs folder `folder`; `agent` (`module:factory`) or `workflow` (`module:attr`) turns fork on.

    `hosts`: the Host header values accepted (DNS-rebinding protection);
    by default the loopback names.
    """
    viewer = Viewer(os.path.abspath(folder), agent, workflow, rules=rules)
    routes = [
        Route("/", _page("runs")),
        Route("/diff", _page("diff")),
        Route("/runs/{run:path}", _run_page),
        Route("/api/config", _config),
        Route("/api/runs", _runs),
        Route("/api/runs/{run:path}/events", _events),
        Route("/api/runs/{run:path}/records", _records),
        Route("/api/runs/{run:path}/record", _record),
        Route("/api/runs/{run:path}/verify", _verify_run),
        Route("/api/runs/{run:path}/fork", _fork, methods=["POST"]),
        Route("/api/runs/{run:path}/summary", _summary),
        Route("/api/jobs/{job}", _job),
        Route("/api/diff", _diff),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    allowed = hosts or ["127.0.0.1", "localhost", "[::1]"]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders), Middleware(TrustedHostMiddleware, allowed_hosts=allowed)],
        exception_handlers={HarnessError: _harness_error, HTTPException: _http_error},
    )
    app.state.viewer = viewer
    return app


def _viewer(request: Request) -> Viewer:
    v: Viewer = request.app.state.viewer
    return v


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(data), status, headers=headers, media_type="application/json")


async def _harness_error(request: Request, exc: Exception) -> Response:
    status = 404 if isinstance(exc, RunNotFound) else 409 if isinstance(exc, IndexChanged) else 400
    if request.url.path.startswith("/api/"):
        return _json({"error": type(exc).__name__, "message": str(exc)}, status)
    return Response(f"{status}: {exc}\n", status, media_type="text/plain")


async def _http_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):  # (Starlette calls this handler for HTTPException only)
        raise exc
    if request.url.path.startswith("/api/"):
        return _json({"error": "HTTPException", "message": exc.detail}, exc.status_code)
    return Response(f"{exc.status_code}: {exc.detail}\n", exc.status_code, media_type="text/plain")


def _shell(name: str) -> Response:
    """The page shell, the same for every page but for its script (`static/{name}.js`)."""
    return HTMLResponse(PAGE.replace("{page}", name), headers={"cache-control": "no-cache"})


def _page(name: str) -> Callable[[Request], Any]:
    async def page(request: Request) -> Response:
        return _shell(name)

    return page


async def _run_page(request: Request) -> Response:
    run = request.path_params["run"]
    # a fork's child page may open before the fork has created the file
    _viewer(request).path(run, exists="job" not in request.query_params)
    return _shell("run")


async def _config(request: Request) -> Response:
    v = _viewer(request)
    forks = v.agent is not None or v.workflow is not None
    return _json({"folder": v.folder, "fork": forks, "agent": v.agent or v.workflow, "classes": CLASSES})


async def _runs(request: Request) -> Response:
    v = _viewer(request)
    rows = await run_in_threadpool(v.listing.runs)
    body = orjson.dumps({"folder": v.folder, "runs": rows})
    etag = '"' + hashlib.blake2b(body, digest_size=12).hexdigest() + '"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"etag": etag})
    return Response(body, media_type="application/json", headers={"etag": etag, "cache-control": "no-cache"})


def _index(v: Viewer, run: str) -> Index:
    return v.indexes.get(v.path(run)).extend()


def _read_lines(v: Viewer, run: str, read: Callable[[Index], T]) -> T:
    """read(index of the run); once more on the file indexed afresh if it changed under the index (IndexChanged)."""
    idx = _index(v, run)
    try:
        return read(idx)
    except IndexChanged:
        idx.invalidate()
        return read(idx.extend())  # a second change at once: IndexChanged, a 409 that says to load the run again


def _how(header: dict[str, Any]) -> str:
    """How a resume command names the run's code: a workflow's own name (module:qualname, what `--workflow`
    imports), with a placeholder for the module of one that ran as a script (`__main__` is the CLI's own there);
    an Executor's factory, which is not recorded, as a placeholder."""
    if "workflow" not in header:
        return "--agent MODULE:FACTORY"
    module, _, qualname = str(header["workflow"]).partition(":")
    return f"--workflow {shlex.quote(f'MODULE:{qualname}' if module == '__main__' else f'{module}:{qualname}')}"


def _summary_of(v: Viewer, run: str) -> dict[str, Any]:
    path = v.path(run)
    idx = v.indexes.get(path).extend()
    verdict = idx.verdict()
    idx.extend()  # the file may have grown while replay() read it
    shown = idx.limit()
    broken = idx.broken if verdict.error is None else None
    info = run_info(path)
    header = idx.header or {}
    torn = idx.size - idx.end if shown == len(idx) and idx.broken is None else 0
    last_ts = wall_clock(header, idx.last) if idx.last else None
    pending = verdict.pending
    reconcile = answer = resume = None
    how = _how(header)
    if pending is not None and verdict.settled:  # reconciled or answered already: what is left is to resume it
        resume = f"harness resume {shlex.quote(path)} {how}"
    elif pending is not None and "budget" in pending:  # paused on its budget: a resume with a larger one goes on
        resume = (
            f"harness resume {shlex.quote(path)} {how} --budget-{pending['budget']['exceeded'].replace('_', '-')} N"
        )
    elif pending is not None and "question" in pending:  # interrupt(): a human answers, no reconcile
        answer = f"harness resume {shlex.quote(path)} {how} --answer 'ANSWER_AS_JSON'"
    elif pending is not None:
        trace = shlex.quote(path)
        reconcile = {
            "happened": f"harness reconcile {trace} --happened --result 'RESULT_AS_JSON' --evidence 'HOW_YOU_KNOW'",
            "not_happened": f"harness reconcile {trace} --not-happened --evidence 'HOW_YOU_KNOW'",
        }
    elif info.status == "interrupted":  # killed or stopped (Ctrl-C) before its end: a resume finishes it
        resume = f"harness resume {shlex.quote(path)} {how}"
    parent = header.get("parent")
    return {
        "id": run, "path": path, "status": info.status, "state": verdict.state, "header": header,
        "records": shown, "indexed": len(idx), "end": idx.offsets[shown] if shown < len(idx) else idx.end,
        "error": verdict.error, "broken": broken, "torn": torn, "pending": pending, "reconcile": reconcile,
        "answer": answer, "resume": resume, "detail": info.detail,
        "lanes": idx.lane_names, "codes": idx.codes[:shown].decode("ascii"),
        "lane_codes": bytes(48 + n for n in idx.lanes[:shown]).decode("latin-1") if len(idx.lane_names) > 1 else "",
        "started": header.get("ts"), "last_ts": last_ts,
        "parent": parent, "parent_id": _find_parent(v, path, parent) if isinstance(parent, str) else None,
        "branch": header.get("branch"), "annotations": _annotations(path),
        "seal": verdict.seal, "blobs": verdict.blobs,
        "unsealed": verdict.error is None and verdict.seal is None and verdict.state in ("DONE", "FAILED"),
        "seal_command": f"harness seal {shlex.quote(path)}", "verify_command": f"harness verify {shlex.quote(path)}",
        "cost": _cost(path, idx.end) if verdict.error is None and info.status != "running" else None,
    }  # fmt: skip


_COSTS: dict[tuple[str, int], dict[str, Any]] = {}  # (trace, bytes read): its ledger; a run that grew is read again


def _cost(path: str, end: int) -> dict[str, Any]:
    """The run's model calls and tokens by model, live apart from served (`harness cost`); read once per size."""
    found = _COSTS.get((path, end))
    if found is None:
        if len(_COSTS) > 256:
            _COSTS.clear()
        found = _COSTS[(path, end)] = run_cost(path).to_json(None)
    return found


def _verify(v: Viewer, run: str) -> dict[str, Any]:
    """`harness verify` of the run: every line, every blob's bytes, the seal (keyed with $HARNESS_SEAL_KEY if set)."""
    found = verify(v.path(run))
    return {
        "ok": found.ok, "sealed": found.sealed, "keyed": found.keyed, "state": found.state, "lines": found.lines,
        "blobs": found.blobs, "problems": list(found.problems), "unreadable": found.unreadable,
        "report": found.report(),
    }  # fmt: skip


async def _verify_run(request: Request) -> Response:
    return _json(await run_in_threadpool(_verify, _viewer(request), request.path_params["run"]))


def _annotations(path: str) -> dict[str, Any] | None:
    """The notes of `TRACE.annotations.json` (`harness annotate`, docs/FORMAT.md), oldest first; None without one.

    Read as every file beside a trace is (`storage.files.read_beside`): only a regular file inside the run's
    folder, at most ANNOTATIONS bytes. One that cannot be read so, or is not in that format, is reported
    as such, with what is wrong.
    """
    candidate = annotations_path(path)
    name = os.path.basename(candidate)
    try:
        data = read_beside(candidate, os.path.dirname(path), ANNOTATIONS)
        if data is None:
            return None
        notes = parse_annotations(data, name)
    except TooLarge:
        return {"file": name, "error": f"larger than {ANNOTATIONS} bytes; not shown"}
    except TraceUnreadable as e:
        return {"file": name, "error": e.problem}
    except HarnessError as e:
        return {"file": name, "error": str(e).removeprefix(f"{name}: ")}
    shown = [{k: n.get(k) for k in ("key", "value", "at")} for n in notes]
    return {"file": name, "version": ANNOTATIONS_VERSION, "notes": shown}


def _find_parent(v: Viewer, path: str, parent: str) -> str | None:
    """The address of the run whose run_id is `parent`: most likely a sibling named after it."""
    folder = os.path.dirname(path)
    guess = os.path.join(folder, parent + ".jsonl")
    if os.path.isfile(guess):
        return address(v.folder, guess)
    for row in v.listing.runs():
        if row["run_id"] == parent:
            return str(row["id"])
    return None


async def _summary(request: Request) -> Response:
    v = _viewer(request)
    return _json(await run_in_threadpool(_summary_of, v, request.path_params["run"]))


def _int(request: Request, name: str, default: int | None = None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        if default is None:
            raise HTTPException(400, f"missing query parameter {name}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be an integer, not {raw!r}") from None


def _window(v: Viewer, run: str, start: int, count: int) -> dict[str, Any]:
    return _read_lines(v, run, lambda idx: _window_of(idx, start, count))


def _window_of(idx: Index, start: int, count: int) -> dict[str, Any]:
    limit = idx.limit()  # lines already checked: a window never replays the file
    start = max(0, min(start, limit))
    stop = min(limit, start + max(0, min(count, WINDOW)))
    out = [idx.brief(i, orjson.loads(line)) for i, line in idx.lines(start, stop)]  # one piece held at a time
    return {"start": start, "records": out, "total": limit}


async def _records(request: Request) -> Response:
    v = _viewer(request)
    start, count = _int(request, "start", 0), _int(request, "count", 500)
    return _json(await run_in_threadpool(_window, v, request.path_params["run"], start, count))


def _one(v: Viewer, run: str, line: int) -> dict[str, Any]:
    return _read_lines(v, run, lambda idx: _one_of(idx, run, line))


def _one_of(idx: Index, run: str, line: int) -> dict[str, Any]:
    limit = idx.limit()
    if not 1 <= line <= limit:
        raise RunNotFound(run, f"it has no line {line} to show (lines 1..{limit})")
    raw = idx.raw(line - 1, line)[0]
    rec = orjson.loads(raw)
    whole, stored = _inline(idx.path, line, rec)
    return {
        "line": line, "offset": idx.offsets[line - 1], "bytes": len(raw) + 1,
        "lane": idx.lane_names[idx.lanes[line - 1]], "col": idx.cols[line - 1],
        "brief": idx.brief(line - 1, rec), "record": rec, "inline": whole, "stored": stored,
        "forkable": _forkable(whole), "reply": reply(whole.get("response")) if _answers(whole) else None,
        "view": _behavior(idx, line, whole) if mapped(whole) else None,
    }  # fmt: skip


CONTEXT = 2000  # records before a call read for its behavior view (its conversation, the names of its calls)


def _behavior(idx: Index, line: int, rec: dict[str, Any]) -> dict[str, Any] | None:
    """A model or tool call as goldens and diffs hold it (the behavior view), read on the calls before it.

    The CONTEXT records before it are enough for every conversation it could continue; in a longer trace a
    call that continues an older one shows more of its history, and its calls' names count from there.
    """
    start = max(0, line - 1 - CONTEXT)
    before = []
    for n, raw in enumerate(idx.raw(start, line - 1), start + 1):
        earlier = orjson.loads(raw)
        if earlier.get("kind") == "header" or mapped(earlier):  # the header: the run's id, read as <run>
            before.append(_inline(idx.path, n, earlier)[0])
    shown = behave([*before, rec])[-1]
    if shown.get("kind") not in ("model_call", "tool_call"):
        return None
    return normalize_record(shown)


def _http(rec: dict[str, Any]) -> bool:
    return rec.get("kind") == "crossing" and rec.get("boundary") == "http"


def _answers(rec: dict[str, Any]) -> bool:
    """Whether a record is a model call whose reply the record panel shows (http, or a framework's model)."""
    return _http(rec) or (rec.get("kind") == "crossing" and rec.get("boundary") in FRAMEWORK_MODELS)


def _inline(path: str, line: int, rec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record with its blob-stored payloads read back in place, and what was read from where.

    Each blob is checked (size and sha256) as it is read; one that is missing or altered, or larger than
    BLOB_SHOWN, stays out of the record and `stored` says why.
    """
    named = rec.get("blobs")
    if not isinstance(named, dict) or not named:
        return rec, {}
    whole = {k: v for k, v in rec.items() if k != "blobs"}
    stored: dict[str, Any] = {}
    for name, ref in named.items():
        sha, size = (ref.get("sha256"), ref.get("size")) if isinstance(ref, dict) else (None, None)
        entry: dict[str, Any] = {"sha256": sha, "size": size}
        if type(sha) is not str or type(size) is not int:
            entry["error"] = "not a blob reference"
        elif size > BLOB_SHOWN:
            entry["error"] = f"{size} bytes, more than the {BLOB_SHOWN} shown here; read it with harness show"
        else:
            try:
                whole[name] = orjson.loads(read_blob(path, line, sha, size))
            except TraceCorruption as e:
                entry["error"] = e.detail
        stored[name] = entry
    return whole, stored


def _forkable(rec: dict[str, Any]) -> dict[str, Any] | None:
    """What a fork at this record would change (its seq and recorded value), or None if it carries no crossing."""
    seq = rec.get("seq")
    if rec.get("kind") == "crossing" and "response" in rec:  # a model stream as its message: fork re-chunks it
        value = http_view(rec["response"]) if _http(rec) else rec["response"]
        return {"at": seq, "value": value, "what": f"the {rec.get('boundary')} response"}
    if rec.get("kind") == "transition" and rec.get("from") == "ACT" and rec.get("to") == "VERIFY":
        return {"at": seq, "value": rec.get("result"), "what": "the tool's result"}
    return None


async def _record(request: Request) -> Response:
    v = _viewer(request)
    line = _int(request, "line")
    return _json(await run_in_threadpool(_one, v, request.path_params["run"], line))


async def _events(request: Request) -> Response:
    v = _viewer(request)
    run = request.path_params["run"]
    path = v.path(run)
    idx = await run_in_threadpool(_index, v, run)
    raw = request.headers.get("last-event-id") or request.query_params.get("from") or "0"
    try:
        offset = int(raw)
    except ValueError:
        raise HTTPException(400, f"the offset must be an integer byte position, not {raw!r}") from None
    first = idx.find(offset)
    if first is None:
        raise HTTPException(400, f"no line of {run} starts at byte {offset}; resume from an id the stream sent")
    return StreamingResponse(
        _stream(v, idx, path, first, request),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


def _batch(idx: Index, i: int, n: int) -> tuple[bytes, int]:
    """Lines i.. (0-based, before n) as `record` events, each with `id:` = the byte offset after it, up to about
    READ bytes of lines (one line at least); the events and the index of the first line not sent."""
    batch: list[bytes] = []
    weight = 0
    for j, line in idx.lines(i, n):
        if batch and weight + len(line) > READ:
            return b"".join(batch), j
        brief = orjson.dumps(idx.brief(j, orjson.loads(line)))
        head = b'{"line":%d,"offset":%d,"brief":' % (j + 1, idx.offsets[j])
        batch.append(b"id: %d\nevent: record\ndata: %s%s,\"record\":%s}\n\n" % (
            idx.next_offset(j), head, brief, line))  # fmt: skip
        weight += len(line)
    return b"".join(batch), n


async def _stream(v: Viewer, idx: Index, path: str, i: int, request: Request) -> AsyncIterator[bytes]:
    """Complete lines from line i on, as they land; ends when the writer is gone and all is sent.

    Reading and encoding a batch runs in the thread pool, so a client catching up on a long
    backlog does not hold up the other requests.
    """
    quiet = time.monotonic()
    generation = idx.generation  # the file the stream began on: another one is never streamed as its sequel
    yield b"retry: 1000\n\n"
    while True:
        if idx.generation != generation:
            yield b"event: reset\ndata: %s\n\n" % orjson.dumps({"reason": _RESET})
            return
        n = idx.limit()
        if i < n:
            try:
                data, i = await run_in_threadpool(_batch, idx, i, min(n, i + BATCH))
            except IndexChanged:
                idx.invalidate()
                continue  # (a reset event, above)
            yield data
            quiet = time.monotonic()
            continue
        if idx.broken is not None:
            yield b"event: corrupt\ndata: %s\n\n" % orjson.dumps(idx.broken)
            return
        if v.stopping() or await request.is_disconnected():
            return
        # caught up: a run that is over ends its stream now; a running one is looked at again in POLL
        status = (await run_in_threadpool(run_info, path)).status
        if status != "running":
            before = len(idx)
            await run_in_threadpool(idx.extend)  # the writer may have written its last lines, then gone
            if len(idx) > before:
                continue
            end = {"status": status, "torn": idx.size - idx.end, "end": idx.end}
            yield b"event: end\ndata: %s\n\n" % orjson.dumps(end)
            return
        if time.monotonic() - quiet > HEARTBEAT:
            quiet = time.monotonic()
            yield b": still running\n\n"
        await asyncio.sleep(POLL)
        await run_in_threadpool(idx.extend)


async def _fork(request: Request) -> Response:
    v = _viewer(request)
    run = request.path_params["run"]
    if v.agent is None and v.workflow is None:
        return _json(
            {
                "error": "ForkDisabled",
                "message": "start `harness serve` with --agent module:factory (or --workflow module:attr) to fork",
            },
            403,
        )
    origin = request.headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host"):
        return _json({"error": "Forbidden", "message": "a fork must be asked for from the viewer's own page"}, 403)
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise HTTPException(415, 'send the fork as application/json: {"at": SEQ, "value": JSON}')
    path = v.path(run)
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as e:
        raise HTTPException(400, f"the body is not JSON: {e}") from None
    if not isinstance(body, dict) or type(body.get("at")) is not int or "value" not in body:
        raise HTTPException(400, 'expected {"at": SEQ (an int), "value": the new value}')
    run_id = uuid.uuid4().hex  # the child's run id, and its file's name (as `harness fork` names it)
    child_path = os.path.join(os.path.dirname(path), run_id + ".jsonl")
    job = Job(uuid.uuid4().hex, run, address(v.folder, child_path), body["at"])
    v.add(job)
    threading.Thread(
        target=_run_fork, args=(v, job, path, child_path, run_id, body["value"]), daemon=True, name=f"fork-{job.id}"
    ).start()
    return _json({"job": job.id, "child": job.child, "url": f"/runs/{job.child}?job={job.id}"}, 202)


def _run_fork(v: Viewer, job: Job, parent: str, child: str, run_id: str, value: Any) -> None:
    if v.agent is None and v.workflow is None:  # (_fork starts no job without one)
        job.state, job.error = "failed", "HarnessError: internal error, please report: a fork job with no agent"
        return
    try:
        if v.workflow is not None:
            workflow = load_workflow(v.workflow)
            r = harness_fork(parent, at=job.at, value=value, workflow=workflow, out=child, run_id=run_id)
        else:
            planner, tools, verifier = load_agent(v.agent or "")
            r = harness_fork(
                parent,
                at=job.at,
                value=value,
                planner=planner,
                tools=tools,
                verifier=verifier,
                out=child,
                run_id=run_id,
            )
    except Exception as e:  # a fork that fails is reported on its job, whatever the agent raised
        job.state, job.error = "failed", f"{type(e).__name__}: {e}"
        return
    job.state = "done"
    job.result = {"run_id": r.run_id, "state": r.state, "live_calls": r.live_calls, "branch": r.branch}


async def _job(request: Request) -> Response:
    job = _viewer(request).jobs.get(request.path_params["job"])
    if job is None:
        raise HTTPException(404, f"no such fork job (the server remembers the last {JOBS_KEPT} finished ones)")
    return _json({"job": job.id, "parent": job.parent, "child": job.child, "at": job.at, "state": job.state,
                  "error": job.error, "result": job.result})  # fmt: skip


def _diff_of(v: Viewer, a: str, b: str) -> dict[str, Any]:
    d = harness_diff(v.path(a), v.path(b), ignore=v.rules.ignore, defaults=v.rules.defaults, view=v.rules.view)
    first = d.first
    return {
        "a": a, "b": b, "equal": d.equal, "records_a": d.records_a, "records_b": d.records_b,
        "headline": d.headline(), "counts": d.counts(), "first": first.first_json() if first else None,
        "changed": len(d.changed), "inserted": len(d.inserted), "removed": len(d.removed), "total": len(d.moved),
        "relocated": len(d.relocated), "notes": list(d.notes),
        "moved": [
            {"op": m.op, "describe": m.describe(), **m.first_json(), "marks": marked_changes(m), "record": m.record}
            for m in d.moved[:DIFF_SHOWN]
        ],
    }  # fmt: skip


async def _diff(request: Request) -> Response:
    v = _viewer(request)
    a, b = request.query_params.get("a"), request.query_params.get("b")
    if not a or not b:
        raise HTTPException(400, "give two runs: /api/diff?a=RUN&b=RUN")
    if not (well_formed(a) and well_formed(b)):
        raise RunNotFound(a if not well_formed(a) else b, "not a run address")
    return _json(await run_in_threadpool(_diff_of, v, a, b))
