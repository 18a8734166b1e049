"""Cache test fixtures (defined in cache_fixtures.py, plain helpers in cache_testing.py)."""

from __future__ import annotations

from cache_fixtures import (  # noqa: F401  (pytest finds fixtures by name in this module)
    aws_env,
    env,
    file_store,
    proxy,
    s3_server,
    s3_store,
    seaweedfs_endpoint,
    store,
)


def pytest_generate_tests(metafunc) -> None:
    """``s3_store`` runs on both servers, except where a fault proxy stands in front of moto."""
    if "s3_store" in metafunc.fixturenames and "proxy" not in metafunc.fixturenames:
        metafunc.parametrize("s3_server", ["moto", "seaweedfs"], indirect=True)
