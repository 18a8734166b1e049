"""Cache test fixtures: a real moto S3 server on 127.0.0.1, and both stores side by side.

Every store-level test runs twice, against ``file:///`` and against ``s3://`` through boto3 over
HTTP to moto's standalone server; nothing in boto3 is patched.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from faultproxy import FaultProxy
from moto.server import ThreadedMotoServer

from gpuci.cli import run_command
from gpuci.commands import cache_weights
from gpuci.runtime import Result, Runtime

REPO_ROOT = Path(__file__).resolve().parents[2]

CREDS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-key",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@pytest.fixture(scope="session", autouse=True)
def aws_env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in CREDS}
    os.environ.update(CREDS)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def s3_client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def new_bucket(endpoint: str) -> str:
    name = f"gpuci-{uuid.uuid4().hex[:12]}"
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


@dataclass
class StoreCase:
    kind: str
    url: str
    endpoint: str | None
    root: Path | None = None  # local stores only
    bucket: str = ""
    prefix: str = ""

    def flags(self) -> dict[str, str]:
        out = {"store": self.url}
        if self.endpoint:
            out["endpoint-url"] = self.endpoint
        return out

    def put_raw(self, key: str, data: bytes) -> None:
        """Write an object behind the cache's back (to plant corrupt or hostile content)."""
        if self.root is not None:
            path = self.root / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        else:
            s3_client(self.endpoint).put_object(
                Bucket=self.bucket, Key=f"{self.prefix}/{key}", Body=data
            )

    def get_raw(self, key: str) -> bytes:
        if self.root is not None:
            return (self.root / key).read_bytes()
        body = s3_client(self.endpoint).get_object(Bucket=self.bucket, Key=f"{self.prefix}/{key}")
        return body["Body"].read()

    def object_keys(self) -> list[str]:
        if self.root is not None:
            if not self.root.exists():
                return []
            return sorted(
                p.relative_to(self.root).as_posix()
                for p in self.root.rglob("*")
                if p.is_file() and not p.relative_to(self.root).as_posix().startswith("locks/")
            )
        client = s3_client(self.endpoint)
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            keys += [o["Key"][len(self.prefix) + 1 :] for o in page.get("Contents", [])]
        return sorted(keys)


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path: Path) -> StoreCase:
    if request.param == "local":
        root = tmp_path / "store"
        return StoreCase("local", root.as_uri(), None, root=root)
    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = new_bucket(endpoint)
    return StoreCase("s3", f"s3://{bucket}/cache", endpoint, bucket=bucket, prefix="cache")


@pytest.fixture
def s3_store(moto_endpoint: str) -> StoreCase:
    bucket = new_bucket(moto_endpoint)
    return StoreCase("s3", f"s3://{bucket}/cache", moto_endpoint, bucket=bucket, prefix="cache")


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    host, port = moto_endpoint.removeprefix("http://").split(":")
    fault = FaultProxy(host, int(port)).start()
    yield fault
    fault.stop()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment a command sees: its own journal, quick retries, no CI variables."""
    return {
        "GPUCI_JOURNAL": str(tmp_path / "journal.jsonl"),
        "GPUCI_PROGRESS_INTERVAL": "0.5",
        "AWS_MAX_ATTEMPTS": "4",
        "GPUCI_CACHE_WORKERS": "8",
        "HOME": str(tmp_path / "home"),
        "GPUCI_LOCAL_CACHE": "off",  # the core tests exercise the store; tier tests opt in
        **CREDS,
    }


SUBCOMMANDS = {sub.name: sub for sub in cache_weights.COMMAND.subcommands}


def cache_cmd(
    sub: str, flags: dict[str, str], env: dict[str, str], dry_run: bool = False
) -> tuple[Result, str]:
    """Run ``cache-weights <sub>`` in-process exactly as the CLI does; returns (result, log)."""
    out = io.StringIO()
    rt = Runtime(environ=env, dry_run=dry_run, stdout=out, stderr=out)
    result = run_command(SUBCOMMANDS[sub], f"cache-weights {sub}", dict(flags), rt)
    return result, out.getvalue()
