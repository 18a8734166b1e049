"""Reservations that hold nothing are released by their owner's next reserve, so they are
never read again and never count toward the per-owner read cap: one whose ``until`` passed, and
one whose pod is gone (none on RunPod was made for it, in a list read well after the time its
``up`` stopped creating pods under it). Only the reservation's own fields, RunPod's list and the
clock decide: no planted object releases someone's live reservation."""

from __future__ import annotations

from pods_testing import L40S, counting_gets, ledger_folder, plant, plant_release, stopped_pod

from gpuci.cache._stores.file import LocalStore
from gpuci.pods._budgets import ledger

UP = dict(image="img", command="serve", ttl="8h", gpu_types=L40S, owner="alice")  # $0.86/h


def test_a_pod_gone_on_its_own_frees_its_budget_at_the_next_up(fake, run, tmp_path, clock):
    """A pod that ended itself (a runner pod after its job) left its reservation holding the
    owner's budget until its expiry: ``down`` found it gone, knew no name, released nothing."""
    pod = run("up", budget_usd="10", **UP).outputs["pod-id"]
    assert run("up", budget_usd="10", **UP).code == 1  # its reservation holds $7
    fake.api("DELETE", f"/v2/pods/{pod}")  # it ended itself
    assert run("down", pod_id=pod).json["report"]["done"] == {pod: "already gone"}
    assert not ledger_folder(tmp_path, ledger.RELEASES).exists()
    clock.t += 3600  # past the time its up could still create a pod under it, and the margin
    res = run("up", budget_usd="10", **UP)
    assert res.code == 0, res.stdout
    assert (ledger_folder(tmp_path, ledger.RELEASES) / "0000000000.json").is_file()


def test_a_reservation_whose_pod_is_on_runpod_or_may_still_be_created_is_kept(
    fake, run, tmp_path, clock
):
    """A stopped pod is held by its reservation alone, and a reservation just written may have
    no pod yet: neither is released, whatever the ledger says besides."""
    pod = stopped_pod(run, UP, budget_usd="10")
    clock.t += 3600
    assert run("up", budget_usd="10", **UP).code == 1
    assert run("down", pod_id=pod).code == 0  # released by its own down
    fresh = ledger_folder(tmp_path, ledger.RESERVATIONS) / "0000000001.json"
    now = clock.now()
    item = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": now + 8 * 3600, "createdEpoch": now}
    plant(fresh, {**item, "podName": "pod-of-an-up-under-way", "placeByEpoch": now + 600})
    res = run("up", budget_usd="10", **UP)
    assert res.code == 1 and "would pass budget $10.00" in res.json["headline"], res.stdout
    assert not (ledger_folder(tmp_path, ledger.RELEASES) / fresh.name).exists()


def test_expired_and_foreign_reservations_are_read_once_then_released(
    fake, run, tmp_path, clock, monkeypatch
):
    """Unreleased reservations piled up: each was read on every budgeted ``up``, and 2,000 of
    them refused the owner for good (the read cap)."""
    monkeypatch.setattr(ledger, "MAX_RESERVATION_READS", 5)
    for seq in range(3):
        old = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": clock.now() - 60}
        plant(ledger_folder(tmp_path, ledger.RESERVATIONS) / f"{seq:010d}.json", old)
    bobs = {"owner": "bob", "costPerHr": 1.0, "untilEpoch": clock.now() + 3600}
    plant(ledger_folder(tmp_path, ledger.RESERVATIONS) / "0000000003.json", bobs)
    gets = counting_gets(monkeypatch)
    short = dict(UP, ttl="30m")
    for _ in range(4):  # each one's reservation has expired by the next
        res = run("up", budget_usd="50", **short)
        assert res.code == 0, res.stdout
        assert run("down", pod_id=res.outputs["pod-id"]).code == 0
        clock.t += 3600
    released = {p.name for p in ledger_folder(tmp_path, ledger.RELEASES).iterdir()}
    assert {f"{seq:010d}.json" for seq in range(4)} <= released
    gets[0] = 0
    assert run("up", budget_usd="50", **short).code == 0
    assert gets[0] <= 1  # at most its own, read back: none of the released ones


def test_a_pod_without_a_reservation_costs_no_reads_of_released_ones(
    fake, run, tmp_path, monkeypatch
):
    """A live pod no reservation covers (started without a budget) made every budgeted ``up``
    re-read up to 2,000 released reservations, looking for one made for it; now only those its
    own events name are read (its ``created`` event names none)."""
    short = dict(UP, ttl="30m")
    for _ in range(3):
        assert run("down", pod_id=run("up", budget_usd="50", **short).outputs["pod-id"]).code == 0
    assert run("up", **short).code == 0  # no budget: no reservation
    gets = counting_gets(monkeypatch)
    res = run("up", budget_usd="50", **short)
    assert res.code == 0, res.stdout
    assert gets[0] == 0


def test_a_flooded_pod_folder_never_hides_its_released_reservation(
    fake, run, tmp_path, monkeypatch
):
    """Only the reservations a pod's events name are looked at: planted ``created`` events that
    push gpu-ci's out of the read (the folder's cap) make every released one looked at again,
    so a planted release still never frees a stopped pod's reservation."""
    monkeypatch.setattr(ledger, "MAX_POD_EVENTS", 3)
    pod = stopped_pod(run, UP, budget_usd="10")
    for i in range(4):  # older than gpu-ci's: read first
        item = {"event": "created", "podId": pod, "time": i, "owner": "alice"}
        plant(tmp_path / "ledger" / ledger.EVENTS / pod / f"{i:015d}-created-0bad.json", item)
    (reservation,) = ledger_folder(tmp_path, ledger.RESERVATIONS).iterdir()
    plant_release(tmp_path, reservation)
    res = run("up", budget_usd="10", **UP)
    assert res.code == 1 and "would pass budget $10.00" in res.json["headline"], res.stdout


def test_a_held_ledger_lock_ends_the_reservation_at_once(fake, run, monkeypatch):
    """A lock held past the file store's wait (LockBusy, a ConflictError) was retried as a race
    20 times (200 s of waits) and blamed on concurrent reservations; now one line, exit 3."""
    from gpuci.cache._stores.file import LockBusy

    tries = [0]
    original = LocalStore.put_if_absent

    def busy(self, key, data):
        if "/reservations/" in key:
            tries[0] += 1
            raise LockBusy(f"{key} was not written: another process held its lock /x.lock")
        return original(self, key, data)

    monkeypatch.setattr(LocalStore, "put_if_absent", busy)
    res = run("up", budget_usd="50", **dict(UP, ttl="1h"))
    assert res.code == 3 and "held its lock /x.lock" in res.json["headline"], res.stdout
    assert "concurrent" not in res.json["headline"] and tries[0] == 1
    assert fake.calls("POST", "/v2/pods") == []


def test_a_release_a_held_lock_kept_out_is_never_taken_for_done(tmp_path, monkeypatch):
    """A LockBusy on a release's write read as "released already": the caller went on as if
    the reservation were released."""
    import pytest

    from gpuci.cache._stores.file import LockBusy
    from gpuci.errors import InfraError

    def busy(self, key, data):
        raise LockBusy(f"{key} was not written: another process held its lock /x.lock")

    book = ledger.Ledger.open((tmp_path / "l").as_uri(), {})
    monkeypatch.setattr(LocalStore, "put_if_absent", busy)
    with pytest.raises(InfraError, match="held its lock"):
        book.release(f"{ledger.RESERVATIONS}/alice-x/0000000000.json")


def test_a_failed_up_whose_pod_would_not_end_keeps_its_reservation(fake, run, tmp_path):
    """A failed ``up`` released its reservation even when its pod could not be terminated
    (left to its TTL and reap): a pod still billing, its reservation released."""
    fake.fail(r"GET /v2/pods/\w+", *[(500, {})] * 50)  # waiting for RUNNING fails
    fake.fail(r"DELETE /v2/pods/\w+", *[(500, {})] * 50)  # and so does the cleanup's terminate
    res = run("up", budget_usd="10", **dict(UP, timeout="2m"))
    assert res.code == 3, res.stdout
    assert len(fake.pods) == 1
    assert not ledger_folder(tmp_path, ledger.RELEASES).exists()
    assert run("up", budget_usd="10", **UP).code == 1  # it still holds the budget


def test_an_extended_pod_missing_its_started_event_has_every_release_looked_at(fake, run, tmp_path):
    """Only the reservations a pod's events name are looked at, so a pod ``start --ttl``
    extended, whose ``started`` event (written last) is missing, had its new reservation,
    released by a planted object, hidden: its expiry is no ``created`` event's, so every
    released one is looked at."""
    pod = stopped_pod(run, UP, budget_usd="10", ttl="45m")
    assert run("start", pod_id=pod, ttl="8h").code == 0
    assert run("stop", pod_id=pod).code == 0  # held by its reservation alone
    for event in (tmp_path / "ledger" / ledger.EVENTS / pod).glob("*-started-*"):
        event.unlink()  # its write was lost
    plant_release(tmp_path, max(ledger_folder(tmp_path, ledger.RESERVATIONS).iterdir()))
    res = run("up", budget_usd="10", **UP)
    assert res.code == 1 and "would pass budget $10.00" in res.json["headline"], res.stdout


def test_the_sweep_never_releases_a_reservation_of_an_owner_whose_folder_reads_alike(
    fake, run, tmp_path
):
    """Owners ``alice.x`` and ``alice@x`` have folders of one readable name (``alice_x-``),
    which each one's reads list: ``alice@x``'s reserve released ``alice.x``'s live
    reservation as an object that was not its own."""
    assert run("up", budget_usd="10", **dict(UP, owner="alice.x")).code == 0
    assert run("up", budget_usd="10", **dict(UP, owner="alice@x")).code == 0
    assert not (tmp_path / "ledger" / ledger.RELEASES).exists()
    assert run("up", budget_usd="10", **dict(UP, owner="alice.x")).code == 1


def _placing_by(monkeypatch, clock, after_s: float) -> None:
    """``up``'s reservation says it creates no pod under it ``after_s`` from when it is made."""
    original = ledger.Ledger.reserve

    def reserve(self, owner, now, until, decide, hold=None):
        res = original(self, owner, now, until, decide, hold)
        res.place_by = clock.now() + after_s
        return res

    monkeypatch.setattr(ledger.Ledger, "reserve", reserve)


def test_up_creates_no_pod_under_a_reservation_past_its_place_by(fake, run, clock, monkeypatch):
    """The sweep counts on it: past ``placeByEpoch`` no pod is created under the reservation."""
    _placing_by(monkeypatch, clock, -1)
    res = run("up", budget_usd="10", **UP)
    assert res.code == 3 and "no pod was created" in res.json["headline"], res.stdout
    assert fake.calls("POST", "/v2/pods") == []


def test_placement_ends_by_its_reservations_place_by(fake, run, clock, monkeypatch):
    """Rounds over the candidates stop at ``placeByEpoch``, however long placement-timeout."""
    _placing_by(monkeypatch, clock, 60)
    fake.fail("POST /v2/pods", *[(400, {})] * 100)  # no candidate takes it
    start = clock.now()
    res = run("up", budget_usd="10", **dict(UP, placement_timeout="30m"))
    assert res.code == 3 and "no candidate placed" in res.json["headline"], res.stdout
    assert clock.now() - start <= 60
