"""Objects planted in the ledger never hide spend: a release counts only for a reservation whose
pod is gone, gpu-ci releases only the reservation made for the pod it ended, a reservation
covers only its own pod, and floods of planted objects are bounded (review I's G1, G1b, G6,
G5, G7), and the reads before placement end within the job's timeout (G9)."""

from __future__ import annotations

from pods_testing import L40S, counting_gets, ledger_folder, plant, plant_release, stopped_pod

from gpuci.cache._stores.file import LocalStore
from gpuci.pods._budgets import ledger

UP = dict(image="img", command="serve", ttl="8h", gpu_types=L40S, owner="alice")  # $0.86/h


def test_a_planted_release_never_frees_the_reservation_of_a_stopped_pod(fake, run, tmp_path):
    """G1: a release planted for a stopped pod's reservation let a second pod in, and the
    stopped one started: two pods for a budget of one."""
    stopped_pod(run, UP, budget_usd="10")
    assert run("up", budget_usd="10", **UP).code == 1  # its reservation holds it
    for reservation in ledger_folder(tmp_path, ledger.RESERVATIONS).iterdir():
        plant_release(tmp_path, reservation)
    res = run("up", budget_usd="10", **UP)
    assert res.code == 1 and "would pass budget $10.00" in res.json["headline"], res.stdout


def test_a_release_counts_only_in_gpucis_shape_and_once_the_pod_is_gone(fake, run, tmp_path, clock):
    """G1: any object at a release's key hid a reservation; now only gpu-ci's own does, and
    only for a reservation whose pod RunPod no longer lists."""
    held = ledger_folder(tmp_path, ledger.RESERVATIONS) / "0000000000.json"
    now = clock.now()
    item = {"owner": "alice", "costPerHr": 1.0, "untilEpoch": now + 20 * 86400}
    plant(held, {**item, "podName": "gone", "createdEpoch": now})
    plant(ledger_folder(tmp_path, ledger.RELEASES) / held.name, "{}")
    assert run("up", budget_usd="10", **UP).code == 1  # not gpu-ci's release: it holds
    plant_release(tmp_path, held)
    first = run("up", budget_usd="10", **UP)  # gpu-ci's, and no pod "gone" is listed
    assert first.code == 0, first.stdout
    assert run("down", pod_id=first.outputs["pod-id"]).code == 0
    assert run("up", budget_usd="10", **UP).code == 0  # a pod ended by down: released


def test_a_planted_release_never_frees_start_ttl_from_the_budget_it_was_admitted_under(
    fake, run, tmp_path
):
    """G1: a release planted for a stopped pod's reservation hid the budget it was admitted
    under from ``start --ttl``, which then gave it 30 days with no budget check."""
    pod = stopped_pod(run, UP, budget_usd="1", ttl="45m")
    for reservation in ledger_folder(tmp_path, ledger.RESERVATIONS).iterdir():
        plant_release(tmp_path, reservation)
    res = run("start", pod_id=pod, ttl="30d")
    assert res.code == 1 and "would pass budget $1.00" in res.json["headline"], res.stdout
    assert fake.pods[pod]["status"] == "EXITED"


def test_gpuci_releases_only_the_reservation_made_for_the_pod_it_ends(fake, run, tmp_path, clock):
    """G1b: a planted ``started`` event in mallory's pod naming alice's reservation made
    ``pods down`` of mallory's pod release alice's."""
    alices = stopped_pod(run, UP, budget_usd="10")
    mallorys = run("up", **dict(UP, owner="mallory", ttl="1h")).outputs["pod-id"]
    (reservation,) = ledger_folder(tmp_path, ledger.RESERVATIONS).iterdir()
    key = f"{ledger.RESERVATIONS}/{reservation.parent.name}/{reservation.name}"
    ms = int(clock.now() * 1000) + 1
    item = {"event": "started", "podId": mallorys, "time": ms / 1000, "reservation": key}
    plant(tmp_path / "ledger" / ledger.EVENTS / mallorys / f"{ms:015d}-started-0bad.json", item)
    assert run("down", pod_id=mallorys).code == 0
    assert not (ledger_folder(tmp_path, ledger.RELEASES) / reservation.name).exists()
    assert run("down", pod_id=alices).code == 0  # its own down still releases it
    assert (ledger_folder(tmp_path, ledger.RELEASES) / reservation.name).exists()


def test_a_planted_reservation_covers_no_pod_it_was_not_made_for(fake, run, tmp_path, clock):
    """G6: a $0 reservation and a planted event naming it made a live pod without a
    reservation of its own count $0, and a second pod passed the budget."""
    pod = run("up", **UP).outputs["pod-id"]  # no budget yet: no reservation
    assert run("up", budget_usd="10", **UP).code == 1
    key = f"{ledger.RESERVATIONS}/{ledger.owner_key('alice')}/0000000500.json"
    free = {"owner": "alice", "costPerHr": 0, "untilEpoch": 4e9}
    plant(tmp_path / "ledger" / key, {**free, "podName": fake.pods[pod]["name"]})
    ms = int(clock.now() * 1000)
    item = {"event": "started", "podId": pod, "time": ms / 1000, "reservation": key}
    plant(tmp_path / "ledger" / ledger.EVENTS / pod / f"{ms:015d}-started-0bad.json", item)
    res = run("up", budget_usd="10", **UP)  # its name, but not its rate: covers nothing
    assert res.code == 1 and "would pass budget $10.00" in res.json["headline"], res.stdout


def test_a_planted_folder_named_like_a_sequence_number_takes_it(fake, run, tmp_path):
    """G5: ``0000000000.json/x`` was not taken, yet every write of that key conflicted."""
    plant(ledger_folder(tmp_path, ledger.RESERVATIONS) / "0000000000.json" / "x", "{}")
    res = run("up", budget_usd="50", **dict(UP, ttl="1h"))
    assert res.code == 0, res.stdout
    assert (ledger_folder(tmp_path, ledger.RESERVATIONS) / "0000000001.json").is_file()


def test_reservation_reads_are_only_gpucis_keys_and_capped(fake, run, tmp_path, monkeypatch):
    """G7: every object in an owner's reservation folder was fetched, without a cap."""
    gets = counting_gets(monkeypatch)
    monkeypatch.setattr(ledger, "MAX_RESERVATION_READS", 5, raising=False)  # absent before
    free = {"owner": "alice", "costPerHr": 0, "untilEpoch": 0}
    for i in range(30):
        plant(ledger_folder(tmp_path, ledger.RESERVATIONS) / f"x{i:06d}.json", free)
    assert run("up", budget_usd="50", **dict(UP, ttl="1h")).code == 0
    assert gets[0] < 5
    for i in range(10):
        plant(ledger_folder(tmp_path, ledger.RESERVATIONS) / f"{i + 100:010d}.json", free)
    gets[0] = 0
    res = run("up", budget_usd="50", **dict(UP, ttl="1h"))
    assert res.code == 3 and "over the 5 one command reads" in res.json["headline"], res.stdout
    assert gets[0] == 0


def test_the_budget_reads_end_within_the_jobs_timeout(fake, run, clock):
    """G9: 429s with ``Retry-After: 300`` on the budget's billing and pod-list reads ran an up
    with a 5 min timeout for 40 min of the job's clock, then created a pod that failed at
    once; the timeout now bounds their waits, and nothing is created."""
    busy = [(429, {"Retry-After": "300"})] * 4
    for route in ("GET /v2/billing/pods", "GET /v2/pods"):
        fake.fail(route, *busy)
    start = clock.now()
    res = run("up", budget_usd="50", **dict(UP, ttl="30m", timeout="5m", placement_timeout="1m"))
    assert res.code == 3 and clock.now() - start <= 5 * 60, res.stdout
    assert "retry would end past the timeout" in res.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []


def test_up_creates_nothing_once_the_ledger_reads_spent_its_timeout(fake, run, clock, monkeypatch):
    """G9: a ledger that answers slowly (each listing 2 min of the job's clock here) spent a
    5 min timeout before placement, then a pod was created that failed at once."""
    original = LocalStore.list

    def slow(self, prefix):
        clock.t += 120
        return original(self, prefix)

    monkeypatch.setattr(LocalStore, "list", slow)
    res = run("up", budget_usd="50", **dict(UP, ttl="30m", timeout="5m", placement_timeout="1m"))
    assert res.code == 3 and "no pod was created" in res.json["headline"], res.stdout
    assert fake.calls("POST", "/v2/pods") == []
