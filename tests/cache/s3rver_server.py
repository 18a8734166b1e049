"""npm s3rver on 127.0.0.1: a real S3-compatible server that accepts ``If-None-Match`` and
``If-Match`` and ignores them (as fauxqs and some gateways do), for the conditional-write tests.

Installed by ``npm install --prefix .bench/node s3rver`` (scripts/dev.sh and .ci/run do); tests
skip with that line when it is absent.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest

from moto_s3 import FAKE_S3_CREDENTIALS

# s3rver checks signatures against its one built-in key pair.
CREDENTIALS = {
    **FAKE_S3_CREDENTIALS,
    "AWS_ACCESS_KEY_ID": "S3RVER",
    "AWS_SECRET_ACCESS_KEY": "S3RVER",
}

REPO = Path(__file__).resolve().parents[2]
S3RVER = REPO / ".bench" / "node" / "node_modules" / ".bin" / "s3rver"
BUCKET = "gpuci-s3rver"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def s3rver() -> Iterator[str]:
    """s3rver with bucket :data:`BUCKET`, on a free port; yields its endpoint URL."""
    if not S3RVER.exists():
        pytest.skip("s3rver is not installed (npm install --prefix .bench/node s3rver)")
    data = Path(tempfile.mkdtemp(prefix="gpuci-s3rver-"))
    port = _free_port()
    env = {**os.environ, "NODE_OPTIONS": "--openssl-legacy-provider"}
    cmd = [str(S3RVER), "-d", str(data), "-a", "127.0.0.1", "-p", str(port), "--silent"]
    server = subprocess.Popen(
        [*cmd, "--configure-bucket", BUCKET],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_boto_creds())
        deadline = time.monotonic() + 60
        while True:  # answering S3, not only accepting connections
            try:
                client.head_bucket(Bucket=BUCKET)
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("s3rver did not start within 60 s") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(data, ignore_errors=True)


def _boto_creds() -> dict[str, str]:
    return {"aws_access_key_id": "S3RVER", "aws_secret_access_key": "S3RVER"}
