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


@contextmanager
def moto_server() -> Iterator[str]:
    """Run moto's standalone S3 server on an ephemeral loopback port; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer  # imported lazily: moto is slow to import

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
