"""Fixtures for retry-fetch: a real misbehaving HTTP server on 127.0.0.1 and a fast policy."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
import tenacity
from fetch_server import DATA, FaultyServer

from gpuci.fetch import FetchPolicy
from gpuci.retry import RetryPolicy


@pytest.fixture
def server() -> Iterator[FaultyServer]:
    with FaultyServer() as srv:
        srv.add("/data.bin", DATA)
        yield srv


@pytest.fixture
def policy() -> FetchPolicy:
    """Tiny waits so retries cost milliseconds, with a read timeout long enough for a loaded
    machine (the attempts a test counts are the server's faults, never a slow thread's); a
    test of a stall sets its own short one."""
    return FetchPolicy(attempts=4, timeout=5, deadline=60, max_wait=0.05, initial_wait=0.01)


@pytest.fixture
def seg_policy(policy: FetchPolicy) -> FetchPolicy:
    """Four connections from the start (no ramp to wait for), 32 KiB segments."""
    return replace(policy, connections=4, connections_start=4, segment_bytes=32 << 10)


@pytest.fixture
def four_segments() -> FetchPolicy:
    """Four connections from the start over 128 KiB segments: a 2 MB file is split at once,
    with a read timeout long enough for a loaded machine and tiny retry waits."""
    return FetchPolicy(
        attempts=4, timeout=5, deadline=60, max_wait=0.05, initial_wait=0.01,
        connections=4, connections_start=4, segment_bytes=128 << 10,
    )  # fmt: skip


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """Every wait the retry policy chose, in order: what a test of Retry-After or backoff
    checks, instead of timing the download on a machine that may be busy."""
    chosen: list[float] = []
    original = RetryPolicy.wait  # FetchPolicy.retry is one of these (gpuci.retry)

    def recording(self: RetryPolicy, retry_state: tenacity.RetryCallState) -> float:
        seconds = original(self, retry_state)
        chosen.append(seconds)
        return seconds

    monkeypatch.setattr(RetryPolicy, "wait", recording)
    return chosen
