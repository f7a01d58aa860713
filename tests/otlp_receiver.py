"""A real OTLP/HTTP trace receiver on 127.0.0.1 for the tests, and OTLP/JSON decoded by opentelemetry-proto.

`parsed()` decodes an OTLP/JSON request with opentelemetry-proto's own classes (`json_format.Parse` into
`ExportTraceServiceRequest`, unknown fields refused), after OTLP/JSON's one deviation from the protobuf JSON
mapping (ids in hex) is undone here, independently of harness's code. `Receiver` decodes each request it is
sent (protobuf or JSON) the same way.
"""

from __future__ import annotations

import base64
import gzip
import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from billed_agent import Served
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def parsed(data: dict[str, Any]) -> ExportTraceServiceRequest:
    """An OTLP/JSON request decoded by opentelemetry-proto: hex ids (16 and 8 bytes) turned into the mapping's
    base64 first, then every other field as the protobuf JSON mapping reads it, unknown fields refused."""
    data = json.loads(json.dumps(data))

    def b64(hex_id: str, size: int) -> str:
        raw = bytes.fromhex(hex_id)
        assert len(raw) == size and hex_id == hex_id.lower()
        return base64.b64encode(raw).decode()

    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                s["traceId"], s["spanId"] = b64(s["traceId"], 16), b64(s["spanId"], 8)
                if "parentSpanId" in s:
                    s["parentSpanId"] = b64(s["parentSpanId"], 8)
                for link in s.get("links", ()):
                    link["traceId"], link["spanId"] = b64(link["traceId"], 16), b64(link["spanId"], 8)
                assert isinstance(s["kind"], int) and isinstance(s["status"].get("code", 0), int)  # enums as ints
                assert isinstance(s["startTimeUnixNano"], str) and int(s["startTimeUnixNano"]) <= int(
                    s["endTimeUnixNano"]
                )
    return json_format.Parse(json.dumps(data), ExportTraceServiceRequest())


class Receiver(Served):
    """An OTLP/HTTP trace receiver: decodes each POST to /v1/traces with opentelemetry-proto (protobuf or JSON),
    answers `fail` (a list of statuses) first, then 200 with an ExportTraceServiceResponse."""

    def __init__(self, fail: list[int] | None = None) -> None:
        self.got: list[ExportTraceServiceRequest] = []
        self.kinds: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.fail = list(fail or [])
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if receiver.fail:
                    self.send_response(receiver.fail.pop(0))
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                kind = self.headers.get("content-type", "")
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if kind == "application/x-protobuf":
                    message = ExportTraceServiceRequest.FromString(body)
                else:
                    message = parsed(json.loads(body))
                receiver.got.append(message)
                receiver.kinds.append(kind)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", "0")
                self.end_headers()

        self.serve(Handler)

    def spans(self) -> list[Any]:
        return [s for m in self.got for rs in m.resource_spans for ss in rs.scope_spans for s in ss.spans]
