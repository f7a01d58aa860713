"""Live OpenTelemetry spans: `harness.otel.enable()` sends each run's spans while its trace is written.

Once enabled, every trace opened for writing in this process (a workflow's,
an Executor's, a Recorder's, a resume, a rerun or fork) tells a watcher the
bytes of each write (`trace.journal.watch()`); nothing else is done in the
run's thread. A background thread reads the lines back, builds the spans as
`harness export --otlp` does (the same visitor, `ops.otlp._Run`, so the same
names, attributes and ids: a backend that later gets the export
de-duplicates), and sends each span once it is whole: a model call's or a
crossing's when its record is written, a tool call's when its result, error
or pause is, an agent's when it exits, and the run's root span when its
writer closes the trace (the run ended, paused or crashed; a process
SIGKILLed sends no root: its resume does). Served records (a rerun's, a
fork's before its branch) carry `harness.served=true`. A resumed run's
watcher first reads the records an earlier process wrote, sending none of
them again.

It never slows or breaks a run: the writes wait in a queue of at most
`QUEUED` bytes (past it a write is left in the file, and read back from
there when the thread catches up); a span that cannot be delivered (the
endpoint down, refusing, too slow) is dropped and counted, and said once
(logging, `harness.otel`; on stderr unless logging is configured). Spans
go out in requests of at most `BATCH`, a span waiting at most `LINGER`
seconds for others; they are flushed when a run's writer closes and at exit
(for at most `EXIT_WAIT` seconds). `flush()` waits for what is queued and
says what was sent and dropped.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ._errors import HarnessError
from .ops.otlp import _Run, _Span, as_request, trace_id
from .ops.otlp_http import PROTOCOLS, encode, env_headers, post
from .ops.otlp_http import endpoint as traces_url
from .review.calls import read
from .storage import blobs as _blobs
from .trace import journal as _journal

__all__ = ["Delivery", "disable", "enable", "enabled", "flush"]

QUEUED = 64 << 20  # bytes of writes waiting for the sending thread, at most
BATCH = 512  # spans a request, at most
LINGER = 0.5  # seconds a span may wait for others to share its request (a run's end sends at once)
EXIT_WAIT = 5.0  # seconds the process waits at exit for its last spans to go out
ATTEMPTS, BACKOFF, TIMEOUT = 3, 0.5, 5.0  # a request's tries (one while the endpoint fails), their waits

log = logging.getLogger("harness.otel")


@dataclass(frozen=True, slots=True)
class Delivery:
    """The live spans so far: the endpoint, the spans it accepted, the spans dropped, and whether all that was
    queued when `flush()` was called went out (or was dropped) in time."""

    url: str
    sent: int
    dropped: int
    flushed: bool = True


class _Sender:
    """The queue of writes, the thread that turns them into spans and sends them, and what it sent."""

    def __init__(self, url: str, headers: dict[str, str], protocol: str, content: bool, service: str):
        self.url, self.headers, self.protocol = url, headers, protocol
        self.content, self.service = content, service
        self.on = True
        self.sent = self.dropped = 0
        self.failing = self.said = False
        self._start()

    def _start(self) -> None:
        self.queue: deque[tuple[_Watch | None, bytes | int | threading.Event]] = deque()
        self.pushed = self.taken = 0  # bytes queued, bytes taken (each counter has one writer: no lock)
        self.pending: list[dict[str, Any]] = []  # whole spans, not sent yet
        self.wake = threading.Event()
        self.thread = threading.Thread(target=self._work, name="harness.otel", daemon=True)
        self.thread.start()

    def watcher(self, path: str) -> _Watch:
        return _Watch(self, path)

    def put(self, watch: _Watch | None, item: bytes | int | threading.Event) -> None:
        self.queue.append((watch, item))
        if not self.wake.is_set():
            self.wake.set()

    def _work(self) -> None:
        since = 0.0  # when the oldest span not sent yet was made (0: none waits)
        while True:
            self.wake.wait(max(0.0, since + LINGER - time.monotonic()) if since else None)
            self.wake.clear()
            now = not self.on  # whether what waits goes out now: at a run's end, a flush, a stop
            while self.queue:
                watch, item = self.queue.popleft()
                if isinstance(item, threading.Event):  # flush(): everything before it goes out first
                    self._send()
                    item.set()
                elif watch is not None:
                    if isinstance(item, bytes):
                        self.taken += len(item)
                    else:
                        now = True  # a writer closed: its run's spans go out now
                    watch.handle(item)
            if self.pending and not since:
                since = time.monotonic()
            if self.pending and (now or len(self.pending) >= BATCH or time.monotonic() - since >= LINGER):
                self._send()
            if not self.pending:
                since = 0.0
            if not self.on:
                return

    def _send(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[:BATCH], self.pending[BATCH:]
            try:
                body, kind = encode(as_request(self.service, batch), self.protocol)
                why = post(
                    self.url, body, {**self.headers, "content-type": kind},
                    attempts=1 if self.failing else ATTEMPTS, backoff=BACKOFF, timeout=TIMEOUT,
                )  # fmt: skip
            except Exception as e:  # the sending thread never dies: the run goes on regardless
                why = f"{type(e).__name__}: {e}"
            if why is None:
                self.sent += len(batch)
                self.failing = False
            else:
                self.dropped += len(batch)
                self.failing = True
                self.say(
                    f"harness.otel: spans not delivered to {self.url} ({why}); they are dropped, and the runs go "
                    f"on: their traces are whole, and `harness export TRACE --otlp-endpoint URL` sends them later"
                )

    def say(self, message: str) -> None:
        """Say message, if nothing was said before (one clear message, not one a span)."""
        if not self.said:
            self.said = True
            log.warning(message)

    def flush(self, timeout: float) -> Delivery:
        done = threading.Event()
        if self.thread.is_alive():
            self.put(None, done)
            done.wait(timeout)
        return Delivery(self.url, self.sent, self.dropped, done.is_set())

    def stop(self, timeout: float) -> Delivery:
        delivery = self.flush(timeout)
        self.on = False
        self.wake.set()
        return delivery

    def forked(self) -> None:
        """In a child process forked from this one: a thread of its own, with nothing of the parent's queued."""
        if self.on:
            self._start()


class _Watch:
    """One journal's writes as spans: the run's visitor, fed each line once it is written."""

    def __init__(self, sender: _Sender, path: str):
        self.sender, self.path = sender, path
        self.run: _Run | None = None
        self.trace = ""
        self.next = 1  # the seq of the next record the visitor needs
        self.first = 0  # the seq of the first record this process wrote (0: none yet); the writer's to set
        self.rest = b""  # a line's start, from a short write
        self.live = False  # whether the spans made now are sent (not those of records an earlier process wrote)
        self.broken = False

    # -- in the run's thread: queue and go back to the run -------------------------------------------------------

    def wrote(self, data: bytes) -> None:
        if not self.first:  # (every write starts a line: `{"seq":N,`)
            try:
                self.first = int(data[7 : data.index(b",", 7)])
            except ValueError:  # (no line: nothing was written)
                return
        sender = self.sender
        if not sender.on or sender.pushed - sender.taken > QUEUED:
            return  # left in the file: the thread reads it back from there (catch_up)
        sender.pushed += len(data)
        sender.put(self, data)

    def closed(self, seq: int) -> None:
        if self.sender.on:
            self.sender.put(self, seq)

    # -- in the sending thread ----------------------------------------------------------------------------------

    def handle(self, item: bytes | int) -> None:
        if self.broken:
            return
        try:
            if isinstance(item, bytes):
                self.take(item)
            else:
                self.end(item)
        except Exception as e:  # a watcher that cannot follow its trace stops; the run goes on
            self.broken = True
            self.sender.say(
                f"harness.otel: cannot follow {self.path} ({type(e).__name__}: {e}); its spans are not sent live "
                f"(`harness export TRACE --otlp-endpoint URL` sends them)"
            )

    def take(self, data: bytes) -> None:
        if self.rest:
            data, self.rest = self.rest + data, b""
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            self.rest = data[cut:]
        for line in data[:cut].splitlines():  # (a JSON line holds no raw newline)
            rec = orjson.loads(line)
            seq = rec["seq"]
            if seq != self.next or self.run is None:
                self.catch_up(seq)
            self.visit(rec)
        if self.run is not None:  # the spans sent are not needed again (the root and the open ones are kept apart)
            self.run.spans.clear()

    def catch_up(self, seq: int) -> None:
        """Visit the trace's records before seq that the visitor missed, read from the file: their spans sent
        when this process wrote them (a full queue left them there), not when an earlier one did (a resume)."""
        if self.run is None or seq < self.next:  # a new writer (or one that wrote over its tail): from the start
            self.run, self.next = _Run(self.path, self.sender.content, None), 1
            self.run.done = self.done
        if seq > self.next:
            upto = seq

            def missed(rec: dict[str, Any]) -> None:
                if self.next <= rec["seq"] < upto:
                    self.live = rec["seq"] >= self.first
                    self.visit(rec)

            read(self.path, missed)
            if self.next != upto:
                raise HarnessError(f"the trace holds no record {self.next} (it was moved or cut)")
        self.live = True

    def visit(self, rec: dict[str, Any]) -> None:
        if "blobs" in rec:
            rec = _blobs.inline(self.path, rec)
        if self.run is None:
            raise HarnessError("a record before the run")
        self.run.visit(rec)
        if not self.trace:
            self.trace = trace_id(self.run.run_id)
        self.next = rec["seq"] + 1

    def done(self, span: _Span) -> None:
        if self.live:
            self.sender.pending.append(span.json(self.trace))

    def end(self, seq: int) -> None:
        """The writer closed after record seq: the records a full queue left in the file, then the root."""
        if not self.first:  # nothing written by this process (a lock taken, a resume refused): nothing to say
            return
        if self.run is None or seq >= self.next:
            self.catch_up(seq + 1)
        run, self.run = self.run, None  # (a journal closes once)
        if run is not None:
            self.sender.pending.append(run.root_span())


_sender: _Sender | None = None
_lock = threading.Lock()


def enable(
    endpoint: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    content: bool = False,
    protocol: str | None = None,
    service: str = "harness",
) -> None:
    """Send the spans of every run this process writes from now on to an OTLP/HTTP endpoint, live.

    `endpoint` is a base URL (`http://localhost:4318`: `/v1/traces` is
    added) or a full traces URL; without it, $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    (used as it is), else $OTEL_EXPORTER_OTLP_ENDPOINT. `headers` go with each
    request, over $OTEL_EXPORTER_OTLP_HEADERS. `protocol` is `http/protobuf`
    (the `otel` extra) or `http/json`; by default
    $OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or $OTEL_EXPORTER_OTLP_PROTOCOL, else
    http/protobuf. `content=True` adds the messages, arguments and results,
    redacted as the trace is. Calling it again replaces the settings: the runs
    already writing send what they wrote so far, and nothing more.
    """
    global _sender
    url = _url(endpoint)
    protocol = protocol or (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    )
    protocol = protocol or "http/protobuf"
    if protocol not in PROTOCOLS:
        raise HarnessError(f"harness.otel.enable(protocol={protocol!r}): choose {' or '.join(PROTOCOLS)}")
    encode(as_request(service, []), protocol)  # MissingExtra now, not in the thread, when protobuf cannot be had
    with _lock:
        if _sender is not None:
            _sender.stop(0)
        _sender = _Sender(url, {**env_headers(), **(headers or {})}, protocol, content, service)
        _journal.watch(_sender.watcher)


def _url(given: str | None) -> str:
    env = ""
    if given is None:
        given = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
        env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        if given is not None:  # a signal's own endpoint is the URL itself
            traces_url(given)  # (checked)
            return given
        given, env = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None, "OTEL_EXPORTER_OTLP_ENDPOINT"
    if given is None:
        raise HarnessError(
            "harness.otel.enable(): no endpoint; give one (harness.otel.enable('http://localhost:4318')) "
            "or set OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    try:
        return traces_url(given)
    except HarnessError:
        said = f"${env}" if env else "harness.otel.enable()"
        raise HarnessError(f"{said}: {given!r} is not an http(s) URL; give one like http://localhost:4318") from None


def disable(timeout: float = EXIT_WAIT) -> Delivery | None:
    """Stop: the runs opened from now on send nothing. What is queued goes out first (for at most `timeout`
    seconds); returns what was delivered, or None when it was not enabled."""
    global _sender
    with _lock:
        sender, _sender = _sender, None
        _journal.watch(None)
    return None if sender is None else sender.stop(timeout)


def enabled() -> bool:
    """Whether live spans are on."""
    return _sender is not None


def flush(timeout: float = EXIT_WAIT) -> Delivery | None:
    """Wait (for at most `timeout` seconds) until what the runs wrote so far was sent or dropped; what was
    delivered so far, or None when live spans are off."""
    sender = _sender
    return None if sender is None else sender.flush(timeout)


def _at_exit() -> None:
    sender = _sender
    if sender is not None and not sender.flush(EXIT_WAIT).flushed:
        sender.say(
            f"harness.otel: {sender.url} did not take the last spans within {EXIT_WAIT:g} s of exit; they are "
            f"dropped (the traces are whole: `harness export TRACE --otlp-endpoint URL` sends them)"
        )


def _forked() -> None:
    if _sender is not None:
        _sender.forked()


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_forked)
