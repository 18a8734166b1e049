"""Fixtures the security tests share."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hostile_runpod import Canned


@pytest.fixture
def runpod() -> Iterator[Callable[[int, Any], str]]:
    """Makes hostile RunPod APIs: ``runpod(status, body)`` serves ``body`` (JSON, or raw when
    bytes) to every request and returns its URL; each is closed after the test."""
    made: list[Canned] = []

    def make(status: int, body: Any) -> str:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        made.append(Canned(status, raw))
        return made[-1].url

    yield make
    for server in made:
        server.close()
