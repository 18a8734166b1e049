"""A reservation holds at most ``MAX_HOLD_S`` (31 days: ttl plus the reap interval, all that
``up`` and ``start --ttl`` write) from when it says it was written: one planted in gpu-ci's
shape with a distant ``until`` and no ``placeByEpoch`` held its owner's budget forever."""

from __future__ import annotations

import json
from pathlib import Path

from pods_testing import L40S, stopped_pod

from gpuci.pods._budgets import holds, ledger

UP = dict(image="img", command="serve", ttl="1h", gpu_types=L40S, owner="alice")  # $0.86/h


def _folder(tmp_path: Path, root: str) -> Path:
    return tmp_path / "ledger" / root / ledger.owner_key("alice")


def _plant(tmp_path: Path, created: float, until: float) -> Path:
    path = _folder(tmp_path, ledger.RESERVATIONS) / "0000000000.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    item = {"owner": "alice", "costPerHr": 1.0, "podName": "gpuci owner=alice", "runUrl": ""}
    path.write_text(json.dumps({**item, "createdEpoch": created, "untilEpoch": until}))
    return path


def test_a_planted_reservation_with_a_distant_until_lapses(fake, run, tmp_path, clock):
    """Until ten years on: it holds for at most 31 days (and the clocks' margin), then is
    read as lapsed, and the owner's next up releases it."""
    planted = _plant(tmp_path, clock.now(), clock.now() + 10 * 365 * 86400)
    assert run("up", budget_usd="10", **UP).code == 1  # $1/h for a while: it holds
    clock.advance(holds.MAX_HOLD_S + holds.CLOCK_MARGIN_S + 60)
    res = run("up", budget_usd="10", **UP)
    assert res.code == 0, res.stdout
    assert (_folder(tmp_path, ledger.RELEASES) / planted.name).is_file()


def test_a_reservation_written_in_the_future_holds_nothing(fake, run, tmp_path, clock):
    """One that says it was written a year from now would start its 31 days then."""
    year = 365 * 86400
    _plant(tmp_path, clock.now() + year, clock.now() + year + 3600)
    res = run("up", budget_usd="10", **UP)
    assert res.code == 0, res.stdout


def test_a_reservation_within_its_hold_still_counts(fake, run, tmp_path, clock):
    _plant(tmp_path, clock.now(), clock.now() + 20 * 86400)
    clock.advance(19 * 86400)
    assert run("up", budget_usd="10", **UP).code == 1  # a day left at $1/h: $24


def test_ups_and_starts_past_the_longest_hold_are_refused_with_a_budget(fake, run):
    """gpu-ci never writes a reservation its readers would cut short: ttl plus the reap
    interval over 31 days is refused (exit 2) where a budget is reserved, before any pod."""
    res = run("up", budget_usd="10000", **dict(UP, ttl="31d"))
    assert res.code == 2 and "over the 31 a budget reservation holds" in res.json["headline"]
    assert not fake.pods
    pod = stopped_pod(run, UP, budget_usd="10000", ttl="30d")
    res = run("start", pod_id=pod, ttl="40d")
    assert res.code == 2 and "over the 31" in res.json["headline"], res.stdout
    assert run("up", **dict(UP, ttl="40d")).code == 0  # no budget: no reservation to bound


def test_the_dry_run_says_a_reservation_past_the_longest_hold_would_stop_the_up(run):
    done = run("up", dry_run=True, budget_usd="10000", **dict(UP, ttl="31d"))
    assert "a budget reservation holds; a real run would stop here" in done.stdout, done.stdout
    assert "a real run would stop here" not in run("up", dry_run=True, **dict(UP, ttl="31d")).stdout
