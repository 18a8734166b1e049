"""Fixtures the security tests share."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hostile_http import HostileServer
from hostile_runpod import Canned
from hostile_s3 import hostile_env, save_tree
from hostile_store_kit import env, file_store, proxy, store  # noqa: F401  (fixtures)


@pytest.fixture
def evil() -> Iterator[HostileServer]:
    """A hostile HTTP server on 127.0.0.1 (hostile_http.py), closed after the test."""
    with HostileServer() as srv:
        yield srv


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


@pytest.fixture(scope="module")
def saved(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory, request
) -> tuple[str, Path]:
    """(bucket, source tree) saved under key ``k-1`` through the CLI, once per module: a small
    file and one of the module's ``SAVED_BYTES`` bytes."""
    tmp = tmp_path_factory.mktemp("saved")
    size = request.module.SAVED_BYTES
    return save_tree(moto_endpoint, tmp, "saved-", size, hostile_env(tmp))
