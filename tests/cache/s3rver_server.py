"""npm s3rver on 127.0.0.1: a real S3-compatible server that accepts ``If-None-Match`` and
``If-Match`` and ignores them (as fauxqs and some gateways do), for the conditional-write tests.

Installed by ``npm install --prefix .bench/node s3rver`` (scripts/dev.sh and .ci/run do); tests
skip with that line when it is absent.
"""

from __future__ import annotations

import os
import re
import shutil
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


# What s3rver's CLI prints once it listens (--silent quiets its request log, not this line).
_LISTENING = re.compile(rb"S3rver listening on [^:\s]+:(\d+)")


def _listening_port(server: subprocess.Popen[bytes], log: Path, deadline: float) -> int:
    """The port the server bound: it is started on port 0 and binds a free one itself, so no
    other process can take the port between choosing it and binding it (the old race)."""
    while True:
        match = _LISTENING.search(log.read_bytes()) if log.exists() else None
        if match:
            return int(match.group(1))
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError(f"s3rver did not start within 60 s: {log.read_bytes()[-300:]!r}")
        time.sleep(0.05)


@contextmanager
def s3rver() -> Iterator[str]:
    """s3rver with bucket :data:`BUCKET`, on a port it binds itself; yields its endpoint URL."""
    if not S3RVER.exists():
        pytest.skip("s3rver is not installed (npm install --prefix .bench/node s3rver)")
    data = Path(tempfile.mkdtemp(prefix="gpuci-s3rver-"))
    log = data.parent / f"{data.name}.log"  # outside the data folder s3rver serves
    env = {**os.environ, "NODE_OPTIONS": "--openssl-legacy-provider"}
    cmd = [str(S3RVER), "-d", str(data), "-a", "127.0.0.1", "-p", "0", "--silent"]
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [*cmd, "--configure-bucket", BUCKET], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        endpoint = f"http://127.0.0.1:{_listening_port(server, log, deadline)}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_boto_creds())
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
        log.unlink(missing_ok=True)


def _boto_creds() -> dict[str, str]:
    return {"aws_access_key_id": "S3RVER", "aws_secret_access_key": "S3RVER"}
