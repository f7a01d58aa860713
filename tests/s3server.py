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
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import harness

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def need_s3() -> None:
    """Skip, saying why, unless the s3 extra and the test server are installed."""
    for module in ("fsspec", "s3fs", "moto"):
        pytest.importorskip(module, reason=f"{module} is not installed: pip install 'harness-trace[s3,test]'")


@contextmanager
def s3_server() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request in the test output
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
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
        server.stop()


def new_bucket() -> str:
    """A fresh bucket on the server; its name."""
    import fsspec

    name = f"b{uuid.uuid4().hex[:12]}"
    fs: Any = fsspec.filesystem("s3")
    fs.mkdir(name)
    return name


def until_stale(runs: str, trace: str) -> None:
    """Wait until the killed writer of trace is listed as gone (its lease stale): a hang guard, not a timing check."""
    deadline = time.monotonic() + 60
    while {r.path: r.status for r in harness.list_runs(runs)}[trace] == "running":
        assert time.monotonic() < deadline, f"{trace} still listed as running a minute after its writer was killed"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def runs(server: str) -> str:
    """A runs URL in a fresh bucket (the tests import this fixture and server)."""
    return f"s3://{new_bucket()}/runs"
