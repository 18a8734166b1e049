"""Prune against a store that changes under it: what was saved, restored or pinned after the
plan stays; what it cannot read keeps its data; the report says what really went."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cache_testing import cache_cmd

from gpuci.cache._stores.base import ObjectInfo
from gpuci.cache._upkeep import prune


def _local(tmp_path: Path) -> dict[str, str]:
    return {"store": (tmp_path / "store").as_uri()}


def test_a_far_future_time_is_reported_not_an_internal_error(env, tmp_path, monkeypatch):
    future = ObjectInfo("blobs/sha256/ab/" + "a" * 62 + "ab", 2, 253402300799.0)  # 9999-12-31

    def planned(*_args: object) -> prune.Plan:
        return prune.Plan(kept_young=1, held_data=[future])

    monkeypatch.setattr(prune, "plan", planned)
    (tmp_path / "store").mkdir()
    got, log = cache_cmd("prune", {**_local(tmp_path), "older-than": "1d"}, env, dry_run=True)
    assert got.ok, log
    assert "far future" in got.headline
    assert got.report["held_by_grace"]["deletable_after"] == "far future"
