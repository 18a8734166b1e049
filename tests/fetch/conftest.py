"""Fixtures for retry-fetch: a real misbehaving HTTP server on 127.0.0.1 and a fast policy."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fetch_server import FaultyServer

from gpuci.fetch import FetchPolicy

DATA = os.urandom(300_000)  # a few hundred KB: several network chunks, fast everywhere


@pytest.fixture
def server() -> Iterator[FaultyServer]:
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA)
        yield srv


@pytest.fixture
def policy() -> FetchPolicy:
    """Tiny waits so retries cost milliseconds; a short read timeout so stalls end fast."""
    return FetchPolicy(attempts=4, timeout=0.5, deadline=20, max_wait=0.05, initial_wait=0.01)
