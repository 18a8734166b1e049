"""A real moto S3 server on 127.0.0.1 and the fake credentials that go with it, shared by the
test folders that need an S3 endpoint (tests/cache's stores, tests/pods' shared ledger).

A uniquely named module (not ``conftest``), for the reason gpuci_testing.py gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

# Fake credentials, and no config/credential file or instance metadata lookup that could
# change what boto3 (or gpuci's own signer) resolves on a developer's machine.
FAKE_S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def atomic_conditional_puts() -> None:
    """Make moto's conditional PUTs (``If-None-Match``/``If-Match``) atomic, as S3's are.

    moto checks the condition and then writes, with no lock between, in a threaded server:
    two racing creates of one key could both succeed, which S3 never allows and the pods
    ledger's reservations and the cache's refs rely on (a loaded machine made it happen).
    Conditional PUTs run one at a time; others keep running in parallel. Idempotent.
    """
    import threading

    from moto.s3.responses import S3Response

    original = S3Response.put_object
    if getattr(original, "gpuci_atomic", False):
        return
    lock = threading.Lock()

    def put_object(self: S3Response) -> object:
        if self.headers.get("If-None-Match") is None and self.headers.get("If-Match") is None:
            return original(self)
        with lock:
            return original(self)

    put_object.gpuci_atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


def put_in_process(bucket: str, keys: list[str], body: bytes) -> None:
    """``body`` at each of ``keys`` in ``bucket`` of the moto server that :func:`moto_server`
    runs in this process, written to its backend directly: a thousand objects a test only
    needs to be there, without a thousand signed HTTP PUTs (3 ms of CPU each)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    for key in keys:
        backend.put_object(bucket, key, body)


@contextmanager
def moto_server() -> Iterator[str]:
    """Run moto's standalone S3 server on an ephemeral loopback port; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer  # imported lazily: moto is slow to import

    atomic_conditional_puts()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


# A moto server in a child process: binds port 0 itself, says the port, serves until stdin closes.
_CHILD = (
    "import sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from moto.server import ThreadedMotoServer\n"
    "from moto_s3 import atomic_conditional_puts\n"
    "atomic_conditional_puts()\n"
    "server = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False)\n"
    "server.start()\n"
    "print(server.get_host_and_port()[1], flush=True)\n"
    "sys.stdin.read()\n"
    "server.stop()\n"
)


@contextmanager
def moto_process(**environ: str) -> Iterator[str]:
    """:func:`moto_server` in its own process, with ``environ`` added to its environment (moto
    reads its settings once, at import); yields its endpoint URL. The child binds port 0 and
    reports the port it got, so no other process can take it in between."""
    import os
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, os.path.dirname(os.path.abspath(__file__))],
        env={**os.environ, **environ},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        port = child.stdout.readline().strip()
        assert port.isdigit(), f"moto did not start (exit {child.poll()})"
        yield f"http://127.0.0.1:{port}"
    finally:
        child.stdin.close()  # the child stops its server and exits
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)
