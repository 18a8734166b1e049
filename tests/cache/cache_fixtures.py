"""The cache tests' fixtures: the stores side by side, faults in front of moto, a command's
environment.

A named module so tests/security's kit can reuse them without importing a conftest; this
folder's conftest.py imports them, which is what makes pytest see them here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cache_testing import CREDS, StoreCase, s3_case, seaweedfs_server
from faultproxy import FaultProxy


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
def seaweedfs_endpoint(request) -> str:
    return seaweedfs_server(request)


@pytest.fixture
def s3_server(request) -> str:
    """Which S3 server an ``s3_store`` test runs on: moto unless parametrized."""
    return getattr(request, "param", "moto")


@pytest.fixture(params=["local", "s3", "seaweedfs"])
def store(request, tmp_path: Path) -> StoreCase:
    if request.param == "local":
        root = tmp_path / "store"
        return StoreCase("local", root.as_uri(), None, root=root)
    if request.param == "seaweedfs":
        return s3_case("seaweedfs", seaweedfs_server(request))
    return s3_case("moto", request.getfixturevalue("moto_endpoint"))


@pytest.fixture
def file_store(tmp_path: Path) -> StoreCase:
    """The file store alone: for what only a folder has (names on disk, mtimes to set back)."""
    root = tmp_path / "store"
    return StoreCase("local", root.as_uri(), None, root=root)


@pytest.fixture
def s3_store(request, s3_server: str) -> StoreCase:
    if s3_server == "seaweedfs":
        return s3_case("seaweedfs", seaweedfs_server(request))
    return s3_case("moto", request.getfixturevalue("moto_endpoint"))


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    """Faults in front of moto (tests with a proxy run on moto only, see conftest.py)."""
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
