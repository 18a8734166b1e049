"""Every listing the ledger makes is of one folder (its prefix ends in ``/``) and capped, so
objects planted beside an owner's or a pod's folder are never listed, and objects planted in
it cost at most the cap: an owner's reservation folder flooded past it stops that owner in one
line (exit 3), a pod's event folder past it is cut short in one warning."""

from __future__ import annotations

import json
from pathlib import Path

from pods_testing import L40S

from gpuci.cache._stores.file import LocalStore
from gpuci.pods._budgets import ledger, listing

UP = dict(image="img", command="serve", ttl="1h", gpu_types=L40S, owner="alice")  # $0.86/h


def _plant(path: Path, item: object = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(item if item is not None else {}))


def _counting_lists(monkeypatch) -> list[str]:
    """Every key any listing of the ledger yielded, in order."""
    seen: list[str] = []
    original = LocalStore.list

    def counting(self, prefix):
        for info in original(self, prefix):
            seen.append(info.key)
            yield info

    monkeypatch.setattr(LocalStore, "list", counting)
    return seen


def test_folders_named_like_an_owners_are_never_listed(fake, run, tmp_path, monkeypatch):
    """An owner's reservations were found by listing every folder whose name starts with the
    same letter: 200 objects planted under ``reservations/a.../`` were listed by each of alice's
    budgeted ups (and, unbounded, would make them slow or run out of memory)."""
    for root in (ledger.RESERVATIONS, ledger.RELEASES):
        for i in range(100):
            _plant(tmp_path / "ledger" / root / f"{ledger.owner_key('alice')}x" / f"{i}.json")
            _plant(tmp_path / "ledger" / root / "alice-000000000000" / f"{i:010d}.json")
    seen = _counting_lists(monkeypatch)
    res = run("up", budget_usd="50", **UP)
    assert res.code == 0, res.stdout
    own = ledger.owner_key("alice")
    mine = (f"{ledger.RESERVATIONS}/{own}/", f"{ledger.RELEASES}/{own}/", ledger.EVENTS)
    outside = [k for k in seen if not k.startswith(mine)]
    assert outside == [], outside[:3]


def test_the_budget_lists_only_the_folders_of_billed_and_live_pods(
    fake, run, tmp_path, monkeypatch
):
    """The budget listed every event of every pod the ledger ever held (then read only those
    of billed and live pods): its time grew with the whole history, and with any flood."""
    for i in range(100):
        item = {"event": "reaped", "podId": f"gone{i}", "owner": "x", "time": 1}
        _plant(
            tmp_path / "ledger" / ledger.EVENTS / f"gone{i}" / f"{1:015d}-reaped-{i:08x}.json", item
        )
    seen = _counting_lists(monkeypatch)
    first = run("up", budget_usd="50", **UP)
    assert first.code == 0, first.stdout
    assert not [k for k in seen if "/gone" in k]


def test_a_flooded_reservation_folder_is_listed_up_to_its_cap_then_refused(
    fake, run, tmp_path, monkeypatch
):
    """A folder of an owner holding more than one command lists stops that owner's budgeted
    up in one line (a cut listing could miss a live reservation), after the cap is listed."""
    monkeypatch.setattr(listing, "MAX_OWNER_LISTED", 20)
    folder = tmp_path / "ledger" / ledger.RESERVATIONS / ledger.owner_key("alice")
    for i in range(200):
        _plant(folder / f"x{i:04d}.json")
    seen = _counting_lists(monkeypatch)
    res = run("up", budget_usd="50", **UP)
    assert res.code == 3, res.stdout
    assert "over 20 objects under" in res.json["headline"], res.json["headline"]
    assert len([k for k in seen if k.startswith(ledger.RESERVATIONS)]) <= 21 * 3  # each read
    assert run("up", budget_usd="50", **dict(UP, owner="bob")).code == 0  # bob's is his own


def test_a_flooded_pod_folder_is_listed_up_to_its_cap_and_said_once(
    fake, run, tmp_path, monkeypatch
):
    """A live pod's event folder flooded past the listing cap is cut short, named in one
    warning: never a refusal of every owner, and never listed past the cap."""
    monkeypatch.setattr(listing, "MAX_POD_LISTED", 20)
    pod = run("up", budget_usd="50", **UP).outputs["pod-id"]
    for i in range(200):
        item = {"event": "stopped", "podId": pod, "owner": "x", "time": 2}
        _plant(
            tmp_path / "ledger" / ledger.EVENTS / pod / f"{2000:015d}-stopped-{i:08x}.json", item
        )
    seen = _counting_lists(monkeypatch)
    res = run("up", budget_usd="50", **UP)
    assert res.code == 0, res.stdout
    assert f"{ledger.EVENTS}/{pod}/" in res.stdout and "over 20 objects listed" in res.stdout
    assert len([k for k in seen if k.startswith(f"{ledger.EVENTS}/{pod}/")]) <= 21 * 3  # each read


def test_a_read_of_every_event_is_capped_and_refused_in_one_line(tmp_path, monkeypatch):
    """``down``'s look for its run's runners lists every event: past the cap it is refused in
    one line (``down`` warns and goes on), never listed to the end."""
    monkeypatch.setattr(listing, "MAX_EVENTS_LISTED", 10)
    for i in range(40):
        item = {"event": "created", "podId": f"p{i}", "owner": "x", "time": 5}
        _plant(
            tmp_path / "ledger" / ledger.EVENTS / f"p{i}" / f"{5000:015d}-created-0bad.json", item
        )
    seen = _counting_lists(monkeypatch)
    book = ledger.Ledger.open(str(tmp_path / "ledger"), {})
    try:
        book.events(since=0)
    except ledger.InfraError as exc:
        assert "over 10 event objects" in exc.message, exc.message
    else:
        raise AssertionError("not refused")
    assert len(seen) <= 11


def test_objects_not_named_as_gpuci_names_events_take_no_read_of_a_pod(
    fake, run, tmp_path, monkeypatch
):
    """Objects in a pod's folder under names ``record`` never writes are dropped before the
    per-pod read cap: they never push the pod's own events out of it."""
    monkeypatch.setattr(ledger, "MAX_POD_EVENTS", 3)
    pod = run("up", budget_usd="50", **UP).outputs["pod-id"]
    for i in range(10):
        _plant(tmp_path / "ledger" / ledger.EVENTS / pod / f"0-{i}.json")
    res = run("up", budget_usd="50", **UP)
    assert res.code == 0 and f"{ledger.EVENTS}/{pod}/" not in res.stdout, res.stdout
