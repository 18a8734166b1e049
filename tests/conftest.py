"""Fixtures shared by every test folder; plain helpers live in gpuci_testing.py."""

from collections.abc import Iterator

import pytest

from gpuci_testing import run_cli
from moto_s3 import moto_server

# Modules whose module-scoped fixture is expensive to build (a venv, a mounted filesystem, a
# model): under pytest-xdist (addopts in pyproject.toml) their tests stay on one worker, which
# builds it once, instead of each worker building its own.
# (tests/actions/test_gitlab_ci_local.py builds a venv per module too, but its pipelines take
# minutes each: spread over the workers they finish sooner than the venv costs.)
ONE_WORKER = {
    "tests/security/test_sec_tier.py": "reflink-fs",  # a loop-mounted XFS
    "tests/cache/test_cache_hf_real.py": "tiny-model",  # a model made by a torch child
}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = ONE_WORKER.get(item.nodeid.split("::", 1)[0])
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real moto S3 server on 127.0.0.1, started on first use (per xdist worker): tests/cache's
    stores, tests/pods' shared ledger, tests/security's hostile stores."""
    with moto_server() as endpoint:
        yield endpoint
