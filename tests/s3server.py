"""A real S3-compatible server on 127.0.0.1 for the object-storage tests (moto in server mode).

`s3_server()` starts it (port chosen by the OS), points the usual AWS
environment variables at it (AWS_ENDPOINT_URL, dummy keys), and returns its
address; a process started afterwards (a child, a Ray worker) finds it the
same way. moto honours S3's `If-None-Match: *` on PUT (412 when the object
exists), which the writer's fence relies on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from children import Zygote

import harness

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

# The object-storage tests' writers and readers in child processes: forked from a zygote that imported the s3
# extra (fsspec, s3fs: a second of CPU in each fresh interpreter) and the fleet agent once (tests/children.py).
CHILDREN = Zygote("harness", "harness.store", "fsspec", "s3fs", "fleet_agent", "orjson", "sqlite3")


def need_s3() -> None:
    """Skip, saying why, unless the s3 extra and the test server are installed."""
    for module in ("fsspec", "s3fs", "moto"):
        pytest.importorskip(module, reason=f"{module} is not installed: pip install 'harness-trace[s3,test]'")


@contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 app served on 127.0.0.1 (a free port) by werkzeug on a thread, as moto's ThreadedMotoServer
    serves it, but without moto's dispatcher: that works out which of moto's ~180 services each request is for,
    listing its package folder twice a request, a third of the server's CPU. Every request here is S3's."""
    from moto.moto_server import werkzeug_app
    from werkzeug.serving import make_server

    # moto 5.2.5+ serves with its own handler (it keeps underscores in header names, for S3 object metadata, which
    # the store does not use); earlier releases, which the test extra admits, serve with werkzeug's own
    handler = getattr(werkzeug_app, "MotoRequestHandler", None)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request in the test output
    app = werkzeug_app.create_backend_app("s3")
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True, name="s3-server")
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    saved = {k: os.environ.get(k) for k in [*ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(ENV, AWS_ENDPOINT_URL=endpoint)
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()  # a cached client would still point at an earlier server
    try:
        yield endpoint
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        S3FileSystem.clear_instance_cache()  # nor may one point at this server once it is gone
        server.shutdown()
        thread.join()
        server.server_close()


def new_bucket() -> str:
    """A fresh bucket on the server; its name."""
    import fsspec

    name = f"b{uuid.uuid4().hex[:12]}"
    fs: Any = fsspec.filesystem("s3")
    fs.mkdir(name)
    return name


def until_stale(runs: str, trace: str) -> None:
    """Wait until the killed writer of trace is listed as gone (its lease stale): a hang guard, not a timing check."""
    from harness.storage.lease import every

    deadline = time.monotonic() + 60
    while {r.path: r.status for r in harness.list_runs(runs)}[trace] == "running":
        assert time.monotonic() < deadline, f"{trace} still listed as running a minute after its writer was killed"
        time.sleep(every() / 2)  # it goes stale 3 periods after its last renewal: a listing (4 requests) a half-period


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """One server per test process (each xdist worker's own): every test has a fresh bucket (`runs`)."""
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def runs(server: str) -> str:
    """A runs URL in a fresh bucket (the tests import this fixture and server)."""
    return f"s3://{new_bucket()}/runs"
