"""Steps the simulated day and month of CI (test_pods_day.py, test_pods_month.py) share."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

# Six 503s in a row: enough that ``pods down`` gives up (the simulations expect exit 3).
_TEARDOWN_FAILURES = [(503, {})] * 6


def up_or_refused(res: Any, stats: MutableMapping[str, int]) -> str | None:
    """Count one ``pods up`` run: refused over budget (exit 1, None) or up (its pod id)."""
    if res.code == 1:
        stats["refused"] += 1
        assert "budget" in res.json["headline"]
        return None
    assert res.code == 0, res.stdout
    stats["up"] += 1
    return res.outputs["pod-id"]


def fail_teardown(fake: Any, pod_id: str, stats: MutableMapping[str, int]) -> None:
    """Make the next ``pods down`` of ``pod_id`` fail: the API answers every DELETE with 503."""
    fake.fail(f"DELETE /v2/pods/{pod_id}", *_TEARDOWN_FAILURES)
    stats["failed_down"] += 1
