"""``pods reap`` prunes the ledger: reservations and events no budget period (366 days at
most) can count go, so a heavy owner's folder never reaches the listing caps; anything of a pod
RunPod lists or billed in the horizon, and anything not gpu-ci's shape, stays.

The rules run on a file store and on a real moto S3 server (``shared_ledger``)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import pytest
from pods_testing import L40S, ledger_folder, plant

from gpuci.cache._stores.file import LocalStore
from gpuci.pods._budgets import ledger, prune
from gpuci.units import utc_iso

NOW = 2_000_000_000.0
OLD = NOW - 400 * 86400  # before the horizon (368 days)
RECENT = NOW - 100 * 86400


def _put(book: ledger.Ledger, key: str, item: Any) -> str:
    book.store.put(key, item if isinstance(item, bytes) else json.dumps(item).encode())
    return key


def _reservation(book: ledger.Ledger, seq: int, when: float, name: str, released: bool) -> str:
    key = f"{ledger.RESERVATIONS}/{ledger.owner_key('alice')}/{seq:010d}.json"
    item = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": when + 3600, "createdEpoch": when}
    _put(book, key, {**item, "podName": name})
    if released:
        book.release(key)
    return key


def _event(book: ledger.Ledger, pod: str, when: float, kind: str = "created") -> str:
    key = f"{ledger.EVENTS}/{pod}/{int(when * 1000):015d}-{kind}-ab12cd34.json"
    pod_id = None if pod == "_" else pod
    return _put(book, key, {"event": kind, "podId": pod_id, "time": when, "owner": "alice"})


def _keys(book: ledger.Ledger) -> set[str]:
    return {i.key for i in book.store.list(f"{ledger.ROOT}/")}


@pytest.fixture
def book(shared_ledger) -> ledger.Ledger:
    return ledger.Ledger.open(None, shared_ledger)


def test_what_no_period_can_count_goes_and_the_rest_stays(book):
    gone_res = _reservation(book, 0, OLD, "pod-gone", released=True)
    lapsed = _reservation(book, 1, OLD, "pod-lapsed", released=False)
    held = _reservation(book, 2, OLD, "pod-stopped", released=True)  # its pod is listed
    recent = _reservation(book, 3, RECENT, "pod-recent", released=True)
    folder = f"{ledger.RESERVATIONS}/{ledger.owner_key('alice')}"
    odd_name = _put(book, f"{folder}/evil.json", {"owner": "alice", "untilEpoch": OLD})
    not_json = _put(book, f"{folder}/0000000007.json", b"not json")
    foreign = _put(book, f"{folder}/0000000008.json", {"owner": "bob", "untilEpoch": OLD})
    no_times = _put(book, f"{folder}/0000000009.json", {"owner": "alice", "untilEpoch": "x"})
    ended = [_event(book, "oldpod", OLD), _event(book, "oldpod", OLD + 60, "terminated")]
    planted = _put(book, f"{ledger.EVENTS}/oldpod/notes.txt", b"hello")
    odd_event = _put(book, f"{ledger.EVENTS}/oldpod/{int(OLD * 1000):015d}-reaped-00.json", {})
    refused = _event(book, "_", OLD, "budget-refused")
    kept_events = [
        _event(book, "livepod", OLD),  # listed (stopped): its events stay
        _event(book, "billedpod", OLD),  # billed since the horizon
        _event(book, "mixed", OLD),
        _event(book, "mixed", RECENT, "terminated"),  # ended inside the horizon
        _event(book, "_", RECENT, "budget-refused"),
    ]
    pods = [{"id": "livepod", "name": "pod-stopped", "status": "EXITED"}]
    before = _keys(book)

    plan = prune.prune(book, pods, {"billedpod"}, NOW, dry_run=True)
    assert _keys(book) == before  # a dry run lists, deletes nothing
    done = prune.prune(book, pods, {"billedpod"}, NOW)
    gone = {gone_res, gone_res.replace("reservations/", "releases/", 1), lapsed, *ended, refused}
    assert set(done.deleted) == set(plan.deleted) == gone
    release_first = done.deleted.index(gone_res.replace("reservations/", "releases/", 1))
    assert release_first < done.deleted.index(gone_res)  # never a release left unpaired
    assert _keys(book) == before - gone
    assert done.kept == len(before) - len(gone)
    kept = {held, recent, odd_name, not_json, foreign, no_times, planted, odd_event, *kept_events}
    assert kept <= _keys(book)
    assert "skipped 6 object(s)" in book.skipped_line()  # each named, in one warning
    assert {odd_name, not_json, foreign, no_times, planted, odd_event} == set(book.skipped)


def test_unread_billing_prunes_no_event_and_an_odd_release_keeps_its_reservation(book):
    ended = _event(book, "oldpod", OLD)
    res = _reservation(book, 0, OLD, "pod-gone", released=False)
    odd = _put(book, res.replace("reservations/", "releases/", 1), {"released": "x" * 50})
    done = prune.prune(book, [], None, NOW)
    assert done.deleted == [] and {ended, res, odd} <= _keys(book)
    assert "pod billing unread" in " ".join(done.notes)
    assert "not a release gpu-ci wrote" in book.skipped_line()


def test_each_run_stays_within_its_caps_and_a_cut_listing_deletes_nothing_wrong(book, monkeypatch):
    for n in range(6):
        _event(book, f"old{n}", OLD)
    recent = [_event(book, "mixed", OLD), _event(book, "mixed", RECENT)]
    monkeypatch.setattr(prune, "MAX_PLANNED", 4)  # each listing cut short
    monkeypatch.setattr(prune, "MAX_DELETES", 1)
    done = prune.prune(book, [], set(), NOW)
    assert len(done.deleted) == 1 and any("delete cap" in n for n in done.notes)
    assert any("over 4 objects" in n for n in done.notes)
    monkeypatch.setattr(prune, "MAX_PLANNED", 100)
    monkeypatch.setattr(prune, "MAX_DELETES", 100)
    monkeypatch.setattr(prune, "MAX_READS", 3)
    done = prune.prune(book, [], set(), NOW)
    assert done.reads <= 3 and any("read cap" in n for n in done.notes)
    monkeypatch.setattr(prune, "MAX_READS", 100)
    while prune.prune(book, [], set(), NOW).deleted:  # later runs go on
        pass
    assert _keys(book) == set(recent)  # the pod ended in the horizon kept both events
    _event(book, "_", RECENT, "budget-refused")
    assert prune.prune(book, [], set(), NOW).reads == 0  # nothing recent is read


@pytest.mark.parametrize("released", [False, True])
def test_a_reservation_written_anew_at_a_freed_number_while_pruning_is_kept(
    book, monkeypatch, released
):
    """Two reaps at once: one freed the number and an ``up`` wrote there before the other's
    delete (and its pod ended: released); the other reads it again before deleting the
    release and keeps the new reservation and its release (one left unreleased would count
    again)."""
    key = _reservation(book, 0, OLD, "pod-gone", released=released)
    fresh = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": NOW + 3600, "createdEpoch": NOW}
    original, swapped = book.store.get, []

    def get(k: str, limit: int | None = None) -> Any:
        got = original(k, limit)
        if k == key and not swapped:  # read as planned, then replaced
            swapped.append(_put(book, key, fresh))
        return got

    monkeypatch.setattr(book.store, "get", get)
    done = prune.prune(book, [], set(), NOW)
    assert done.deleted == [] and "changed since it was read" in done.notes[0]
    assert json.loads(original(key)[0]) == fresh
    assert (key.replace("reservations/", "releases/", 1) in _keys(book)) == released


def test_a_reservation_pruned_between_listing_and_read_gets_no_release(tmp_path, monkeypatch):
    """A release left at a free number would release the next reservation written there."""
    book = ledger.Ledger(LocalStore(tmp_path))
    gone = _reservation(book, 0, NOW - 7200, "pod-gone", released=False)
    original = LocalStore.get

    def pruned_meanwhile(self: Any, key: str, limit: int | None = None) -> Any:
        return None if key == gone else original(self, key, limit)

    monkeypatch.setattr(LocalStore, "get", pruned_meanwhile)
    book.reserve("alice", NOW, NOW + 3600, lambda reserved: 1.0)
    assert gone.replace("reservations/", "releases/", 1) not in _keys(book)


def test_a_scheduled_reap_prunes_and_says_how_many(fake, run, tmp_path, clock):
    old = clock.now() - 400 * 86400
    folder = ledger_folder(tmp_path, ledger.RESERVATIONS)
    item = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": old, "createdEpoch": old}
    plant(folder / "0000000000.json", {**item, "podName": "gone"})
    os.utime(folder / "0000000000.json", (old, old))  # written then, as the store says
    pod = run("up", image="img", command="serve", ttl="1h", gpu_types=L40S, owner="alice")
    assert pod.code == 0, pod.stdout
    planned = run("reap", dry_run=True)
    assert planned.json["report"]["ledger_prune"]["deleted"] == [
        f"{ledger.RESERVATIONS}/{folder.name}/0000000000.json"
    ]
    assert (folder / "0000000000.json").is_file()
    res = run("reap")
    assert res.code == 0, res.stdout
    pruned = res.json["report"]["ledger_prune"]
    assert len(pruned["deleted"]) == 1 and pruned["kept"] >= 1  # the new pod's own objects
    assert not (folder / "0000000000.json").exists()
    assert "pods ledger: deleted 1 object(s)" in res.stdout + res.stderr
    plant(folder / "0000000005.json", {**item, "podName": "gone"})
    os.utime(folder / "0000000005.json", (old, old))
    again = run("reap")  # the same day: one prune a day
    assert "ledger_prune" not in again.json["report"] and (folder / "0000000005.json").exists()
    clock.t += 86400
    assert run("reap").json["report"]["ledger_prune"]["deleted"] == [
        f"{ledger.RESERVATIONS}/{folder.name}/0000000005.json"
    ]


def test_a_reservation_the_store_says_was_written_inside_the_horizon_is_kept_unread(book):
    """gpu-ci writes each at its createdEpoch: one with older times, written since, is odd
    (or a copied bucket), and reading every reservation on every prune is what the listing
    time spares."""
    now = time.time()
    key = _reservation(book, 0, now - 400 * 86400, "pod-gone", released=False)
    done = prune.prune(book, [], set(), now)
    assert done.deleted == [] and done.reads == 0 and key in _keys(book)


def _marker(when: float) -> str:
    return f"{prune.PRUNED}/{utc_iso(when)[:10]}.json"


def _markers(book: ledger.Ledger) -> set[str]:
    return {k for k in _keys(book) if k.startswith(f"{prune.PRUNED}/")}


def test_the_days_first_reap_prunes_and_markers_over_a_week_old_go(book):
    """By the store's day: a runner whose clock says tomorrow (ahead, or past midnight
    first) claims no second prune of the store's day, and leaves no marker of its own."""
    now, warned = time.time(), []
    old = _put(book, _marker(now - 17 * 86400), {})
    week = _put(book, _marker(now - 6 * 86400), {})
    odd = _put(book, f"{prune.PRUNED}/notes.txt", b"not a marker")
    at = prune.due(book, now, warned.append)
    assert at is not None and not prune.due(book, now + 60, warned.append)
    assert old not in _keys(book) and {week, odd} <= _keys(book)
    assert prune.due(book, now + 86400, warned.append) is None
    assert _markers(book) == {week, odd, _marker(at)} and warned == []


def test_markers_planted_for_the_days_to_come_stop_no_prune(book):
    """One marker a day for the days to come, planted today, stopped every prune until then
    (each day's create-if-absent failed): the store wrote each before its day began."""
    now, warned = time.time(), []
    planted = [_put(book, _marker(now + d * 86400), {}) for d in range(1, 31)]
    at = prune.due(book, now + 86400, warned.append)  # the runner's day is tomorrow
    assert at is not None and at < now + 86400  # the store's time: its day, pruned
    assert len(warned) == 1 and planted[0] in warned[0] and "planted" in warned[0]
    assert _markers(book) == {_marker(at)}  # those past tomorrow (by the store) deleted
    assert prune.due(book, now + 86400 + 60, warned.append) is None  # once a day still
    assert len(warned) == 1


def test_the_first_prune_deletes_markers_dated_past_tomorrow_and_keeps_tomorrows(book):
    now, warned = time.time(), []
    planted = [_put(book, _marker(now + d * 86400), {}) for d in (1, 2, 400, 4000)]
    at = prune.due(book, now, warned.append)
    assert at is not None and _markers(book) == {_marker(at), planted[0]} and warned == []


def test_a_days_marker_the_store_wrote_before_that_day_is_planted(tmp_path):
    """A folder store says when each file was written (a planted one, as if long ago); a
    marker written in or after its day (a runner whose clock is behind) counts."""
    book, warned = ledger.Ledger(LocalStore(tmp_path)), []
    now = time.time() - 60  # the runner's clock, behind the store's
    today = _put(book, _marker(now), {})
    os.utime(tmp_path / today, (now - 3 * 86400, now - 3 * 86400))
    assert prune.due(book, now, warned.append) == now  # the runner's clock: the earlier
    assert len(warned) == 1 and today in warned[0] and _markers(book) == {today}
    assert prune.due(book, now + 60, warned.append) is None  # written in its day: counts
    late = _put(book, _marker(now - 2 * 86400), {})  # a runner two days behind, just now
    assert prune.due(book, now - 2 * 86400, warned.append) is None
    assert len(warned) == 1 and late in _keys(book)


def test_deletes_stop_at_the_time_budget_and_say_the_next_reap_goes_on(book):
    gone = _reservation(book, 0, OLD, "pod-gone", released=True)
    done = prune.prune(book, [], set(), NOW, seconds=0)
    assert done.deleted == [] and done.cut and gone in _keys(book)
    assert any("time budget (0 s) spent" in n for n in done.notes)
    assert prune.prune(book, [], set(), NOW, dry_run=True, seconds=0).deleted  # lists all


@pytest.mark.parametrize("ahead", [False, True])
def test_a_prune_cut_short_goes_on_at_the_days_next_reap(
    fake, run, tmp_path, clock, monkeypatch, ahead
):
    """A long-kept ledger's first prune takes several reaps, each short, not one long one;
    a runner whose clock is days ahead re-arms the store's day, the one it pruned."""
    if ahead:
        clock.t = time.time() + 3 * 86400
    old = clock.now() - 400 * 86400
    folder = ledger_folder(tmp_path, ledger.RESERVATIONS)
    item = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": old, "createdEpoch": old}
    for seq in (0, 1):
        plant(folder / f"000000000{seq}.json", {**item, "podName": "gone"})
        os.utime(folder / f"000000000{seq}.json", (old, old))
    assert run("up", image="img", command="s", ttl="1h", gpu_types=L40S, owner="alice").code == 0
    monkeypatch.setattr(prune, "MAX_DELETES", 1)
    first, second = run("reap"), run("reap")  # the same day: the cut one re-arms the next
    assert [len(r.json["report"]["ledger_prune"]["deleted"]) for r in (first, second)] == [1, 1]
    assert not list(folder.glob("000000000[01].json"))
    assert "ledger_prune" not in run("reap").json["report"]  # done: once a day again


def test_a_reap_deletes_a_planted_marker_of_its_day_names_it_and_prunes(fake, run, tmp_path, clock):
    old = clock.now() - 400 * 86400
    folder = ledger_folder(tmp_path, ledger.RESERVATIONS)
    item = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": old, "createdEpoch": old}
    plant(folder / "0000000000.json", {**item, "podName": "gone"})
    os.utime(folder / "0000000000.json", (old, old))
    marker = tmp_path / "ledger" / _marker(clock.now())
    plant(marker, {"time": clock.now()})
    os.utime(marker, (clock.now() - 30 * 86400, clock.now() - 30 * 86400))  # as if long ago
    res = run("reap")
    assert res.code == 0, res.stdout
    assert len(res.json["report"]["ledger_prune"]["deleted"]) == 1
    assert f"{_marker(clock.now())} was written before its day began" in res.stdout + res.stderr
    assert "ledger_prune" not in run("reap").json["report"]  # its own marker counts


@pytest.mark.parametrize("digits", ["1" + "0" * 350, "-" + "1" * 350])
def test_an_event_time_past_any_float_is_kept_or_pruned_never_a_traceback(book, digits):
    """A JSON integer of 351 digits parses (400 are allowed) but is no float."""
    for pod in ("oldpod", "_"):
        key = f"{ledger.EVENTS}/{pod}/{int(OLD * 1000):015d}-created-ab12cd34.json"
        pod_id = "null" if pod == "_" else '"oldpod"'
        _put(book, key, f'{{"event":"created","podId":{pod_id},"time":{digits}}}'.encode())
    done = prune.prune(book, [], set(), NOW)
    assert len(done.deleted) == (2 if digits.startswith("-") else 0)  # as their time says


def test_a_runner_clock_years_ahead_prunes_by_the_stores_time(fake, run, tmp_path, clock):
    """The marker's time as the store wrote it bounds the horizon: with the runner's clock
    three years ahead, a reservation written just now (its pod not listed yet: an ``up``
    placing it) and a pod's events from last month stay."""
    real = time.time()
    folder = ledger_folder(tmp_path, ledger.RESERVATIONS)
    item = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": real + 3600, "createdEpoch": real}
    plant(folder / "0000000000.json", {**item, "podName": "placing"})
    events = tmp_path / "ledger" / ledger.EVENTS / "endedpod"
    when = real - 30 * 86400
    plant(
        events / f"{int(when * 1000):015d}-terminated-ab12cd34.json",
        {"event": "terminated", "podId": "endedpod", "time": when, "owner": "alice"},
    )
    clock.t = real + 3 * 365 * 86400
    res = run("reap")
    assert res.code == 0, res.stdout
    assert res.json["report"]["ledger_prune"]["deleted"] == []
    assert (folder / "0000000000.json").is_file() and len(list(events.iterdir())) == 1


def test_slow_reads_of_planted_events_leave_the_deletes_their_time(tmp_path, monkeypatch):
    """Planted events under old names are read (and kept) by every day's prune: the delete
    time budget starts after the reads, or they would spend it and nothing would ever go."""
    book = ledger.Ledger(LocalStore(tmp_path))
    gone = _reservation(book, 0, OLD, "pod-gone", released=True)
    os.utime(tmp_path / gone, (OLD, OLD))
    _put(book, f"{ledger.EVENTS}/junk/{int(OLD * 1000):015d}-created-ab.json", {"event": 1})
    clock = [0.0]
    original = LocalStore.get

    def slow(self: Any, key: str, limit: int | None = None) -> Any:
        clock[0] += 1000 if f"{ledger.EVENTS}/" in key else 0
        return original(self, key, limit)

    monkeypatch.setattr(LocalStore, "get", slow)
    monkeypatch.setattr(prune.time, "monotonic", lambda: clock[0])
    done = prune.prune(book, [], set(), NOW)
    assert gone in done.deleted and not done.cut


def test_a_cut_event_listing_lists_again_only_folders_that_may_go_within_the_read_cap(
    book, monkeypatch
):
    """Past MAX_PLANNED objects under events/, each folder of a pod not listed is listed
    again on its own: planted folders (one object each) must not each cost a request."""
    for n in range(6):
        _event(book, f"new{n}", RECENT)  # recent by name: kept, never listed again
        _event(book, f"old{n}", OLD)
        _put(book, f"{ledger.EVENTS}/old{n}/{int(OLD * 1000):015d}-created-ff.json", {})
    original, folders = book.store.list, []

    def listed(prefix: str) -> Any:
        folders.append(prefix)
        return original(prefix)

    monkeypatch.setattr(book.store, "list", listed)
    monkeypatch.setattr(prune, "MAX_PLANNED", 12)  # the events/ listing is cut
    monkeypatch.setattr(prune, "MAX_READS", 5)
    done = prune.prune(book, [], set(), NOW)
    again = [f for f in folders if f.count("/") == 3]
    assert again and all("/old" in f for f in again) and len(again) <= done.reads <= 5


def test_a_number_past_any_float_in_any_ledger_field_is_no_number_never_a_traceback(book):
    """Anyone who can write to the bucket could plant one in a pod's folder or an owner's:
    every command reading that pod or owner ended in an OverflowError."""
    huge = "1" + "0" * 350
    key = f"{ledger.EVENTS}/pod1/{int(RECENT * 1000):015d}-created-ab12cd34.json"
    raw = '{"event":"created","podId":"pod1","time":%s,"owner":"alice","expiresEpoch":%s}'
    _put(book, key, (raw % (RECENT, huge)).encode())
    rec = book.pod("pod1")
    assert rec is not None and rec.expires_at != rec.expires_at  # unknown: NaN
    folder = f"{ledger.RESERVATIONS}/{ledger.owner_key('alice')}"
    item = '{"owner":"alice","costPerHr":%s,"untilEpoch":%s,"createdEpoch":%s}'
    _put(book, f"{folder}/0000000000.json", (item % (huge, huge, RECENT)).encode())
    live, _, _ = book.reservations("alice")
    assert [r.cost_per_hr for r in live] == [0.0]


def test_a_release_an_up_writes_while_its_reservation_is_pruned_goes_with_it(book, monkeypatch):
    """An ``up`` read the old reservation after the prune deleted its release and before the
    reservation itself, and released it (its sweep): that release, left at the freed number,
    would release the next reservation an ``up`` writes there, uncounted."""
    key = _reservation(book, 0, OLD, "pod-gone", released=True)
    original = book.store.delete

    def delete(k: str) -> None:
        if k == key:
            book.release(key)  # the concurrent up's sweep, just before
        original(k)

    monkeypatch.setattr(book.store, "delete", delete)
    prune.prune(book, [], set(), NOW)
    assert not {k for k in _keys(book) if "/releases/" in k or "/reservations/" in k}


def test_planted_objects_kept_every_day_never_take_every_days_reads(tmp_path, monkeypatch):
    """Objects of gpu-ci's names but not its shape are kept, so read again every day: read
    first each day, as many as the read cap would leave what may go unread for ever."""
    book = ledger.Ledger(LocalStore(tmp_path))
    folder = f"{ledger.RESERVATIONS}/{ledger.owner_key('alice')}"
    for seq in range(4):  # sorted first
        _put(book, f"{folder}/{seq:010d}.json", {"owner": "bob", "untilEpoch": OLD})
        os.utime(tmp_path / folder / f"{seq:010d}.json", (OLD, OLD))
        _put(book, f"{ledger.EVENTS}/a{seq}/{int(OLD * 1000):015d}-created-ff.json", {})
    gone = _reservation(book, 4, OLD, "pod-gone", released=False)
    os.utime(tmp_path / gone, (OLD, OLD))
    ended = _event(book, "zz", OLD)
    monkeypatch.setattr(prune, "MAX_READS", 2)
    for day in range(5):
        prune.prune(ledger.Ledger(book.store), [], set(), NOW + day * 86400)
    assert not {gone, ended} & _keys(book)


def test_a_lone_release_takes_its_number_so_the_next_reservation_is_counted(book):
    """A sweep's release written after a prune deleted its reservation would release the next
    reservation written at that number as it is made: the number stays taken instead."""
    stray = _reservation(book, 0, OLD, "pod-gone", released=True)
    book.store.delete(stray)  # pruned, its release (written late) left
    made = book.reserve("alice", NOW, NOW + 3600, lambda reserved: 1.0)
    assert made.key.endswith("0000000001.json")
    live, _, _ = book.reservations("alice")
    assert [r.key for r in live] == [made.key]  # counted, not released by the stray


def test_a_lone_release_the_store_wrote_before_the_horizon_goes_and_frees_its_number(book):
    """A sweep's release written after a prune deleted its reservation took its number for
    ever; one the store says is recent, one not gpu-ci's shape, and one with its reservation
    stay."""
    stray = _reservation(book, 0, OLD, "pod-gone", released=True)
    book.store.delete(stray)
    lone = stray.replace("reservations/", "releases/", 1)
    odd = _put(book, lone.replace("0000000000", "0000000001"), {"released": "x" * 50})
    paired = _reservation(book, 2, RECENT, "pod-live", released=True)
    assert prune.prune(book, [], set(), time.time()).deleted == []  # recent, as the store says
    done = prune.prune(book, [], set(), NOW)
    assert done.deleted == [lone] and done.reads == 1  # the paired reservation: none for lone
    assert {odd, paired, paired.replace("reservations/", "releases/", 1)} <= _keys(book)
    assert odd in book.skipped
    made = book.reserve("alice", NOW, NOW + 3600, lambda reserved: 1.0)
    assert made.key.endswith("0000000000.json")  # its number free again, and counted
    live, _, _ = book.reservations("alice")
    assert made.key in [r.key for r in live]


def test_a_release_whose_reservation_a_cut_listing_missed_is_kept(book, monkeypatch):
    folder = f"{ledger.RESERVATIONS}/{ledger.owner_key('alice')}"
    for seq in range(3):
        _reservation(book, seq, RECENT, f"pod-{seq}", released=seq == 2)
    book.release(f"{folder}/0000000005.json")  # lone
    monkeypatch.setattr(prune, "MAX_PLANNED", 2)  # reservations 0 and 1 listed, not 2
    done = prune.prune(book, [], set(), NOW)
    assert done.deleted == [f"{folder.replace('reservations/', 'releases/', 1)}/0000000005.json"]
    assert f"{folder.replace('reservations/', 'releases/', 1)}/0000000002.json" in _keys(book)
    assert done.reads == 4  # 0 and 1 read; the reservations of 2 and 5 asked for


@pytest.mark.parametrize("modified", [float("inf"), float("nan")])
def test_a_lone_release_of_no_stated_time_is_kept(book, monkeypatch, modified):
    """A listing with no readable Last-Modified (UNKNOWN_MODIFIED) says nothing of when a lone
    release was written: it may be a sweep's release of a reservation written after the
    reservations were listed, and deleting it would leave that reservation counted for ever."""
    stray = _reservation(book, 0, OLD, "pod-gone", released=True)
    book.store.delete(stray)
    real = prune.listing.listed

    def untimed(store, prefix, most):
        found, more = real(store, prefix, most)
        return [dataclasses.replace(i, modified=modified) for i in found], more

    monkeypatch.setattr(prune.listing, "listed", untimed)
    done = prune.prune(book, [], set(), NOW)
    assert done.deleted == []
    assert stray.replace("reservations/", "releases/", 1) in _keys(book)


def test_a_runner_clock_past_year_9999_prunes_by_the_stores_day(book):
    """A runner's clock thousands of years ahead: naming its day raised (no such ISO date), an
    internal error of ``pods reap``; the store's time decides, as for any clock ahead."""
    warned: list[str] = []
    at = prune.due(book, 1e12, warned.append)
    assert at is not None and at < time.time() + 86400 and warned == []
    assert _markers(book) == {_marker(at)}
