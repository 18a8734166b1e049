"""The budget holds against the job's own inputs and against objects anyone with write access
planted in the ledger: each can only add to what an owner is counted, never take from it.

Planted objects are written as gpu-ci's own writers write them (``Ledger.record``'s key and
fields, ``Ledger.reserve``'s key), so only their content is hostile.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pods_testing import L40S, counting_gets, plant, stopped_pod

from gpuci.pods._budgets import cost, ledger
from gpuci.pods._runpod import plan
from gpuci.pods._runpod.naming import new_tag

UP = dict(image="img", command="serve", ttl="45m", gpu_types=L40S, owner="alice")  # $0.86/h
CI_BOB = {"GITHUB_ACTIONS": "true", "GITHUB_RUN_ID": "7", "GITHUB_ACTOR": "bob"}


def _plant_event(root: Path, folder: str, at: float, item: dict, nonce: str) -> None:
    plant(
        root / ledger.EVENTS / folder / f"{int(at * 1000):015d}-{item['event']}-{nonce}.json", item
    )


def _alice_spent(run) -> float:
    return run("cost", owner="alice").json["report"]["owners"]["alice"]["spent_usd"]


def _ended_pod_of_alice(run, clock) -> str:
    """An L40S pod of alice's that billed 3 h ($2.58), then ended."""
    pod = run("up", budget_usd="5", **UP).outputs["pod-id"]
    clock.advance(3 * 3600)
    assert run("down", pod_id=pod).code == 0
    return pod


@pytest.mark.parametrize("folder", ["pod", "_"])
def test_a_planted_created_event_adds_an_owner_and_never_moves_the_spend(
    fake, run, clock, tmp_path, folder
):
    """F1: a later ``created`` event naming mallory (in the pod's folder, or in ``_``, the
    folder of events of no pod) left alice's $2.58 with mallory, and her refused up passed."""
    pod = _ended_pod_of_alice(run, clock)
    before = _alice_spent(run)
    assert before > 2 and run("up", budget_usd="3", **UP).code == 1
    planted = {"event": "created", "podId": pod, "owner": "mallory", "time": clock.now()}
    _plant_event(tmp_path / "ledger", pod if folder == "pod" else "_", clock.now(), planted, "0bad")
    assert _alice_spent(run) == before
    assert run("up", budget_usd="3", **UP).code == 1
    owners = run("cost").json["report"]["owners"]
    if folder == "pod":  # what it names is added: mallory is counted too
        assert owners["mallory"]["spent_usd"] == before
    else:  # an event of a pod filed under "_" is ignored, as the docs say
        assert "mallory" not in owners


def test_a_reservation_a_planted_event_names_never_shortens_the_pods_count(fake, tmp_path):
    """Of the live reservations a pod's events name, the earliest ``until`` holds it."""
    name = new_tag("alice", "local", 1000.0).name()
    folder = tmp_path / "ledger" / ledger.RESERVATIONS / ledger.owner_key("alice")
    folder.mkdir(parents=True)
    for seq, rate, until in [(0, 0.86, 2000.0), (1, 0.86, 9e9)]:
        item = {"owner": "alice", "costPerHr": rate, "untilEpoch": until, "podName": name}
        item["createdEpoch"] = 900.0
        (folder / f"{seq:010d}.json").write_text(json.dumps(item))
    real, planted = (f"{ledger.RESERVATIONS}/{folder.name}/{s:010d}.json" for s in (0, 1))
    rec = ledger._merge(
        "p1",
        [
            {"event": "created", "podId": "p1", "owner": "alice", "reservation": real},
            {"event": "created", "podId": "p1", "owner": "x", "reservation": planted},
        ],
    )
    book = ledger.Ledger.open(str(tmp_path / "ledger"), {})
    pods = [{"id": "p1", "name": name, "cost": 0.86, "status": "RUNNING"}]
    assert cost.covered_by(book, "alice", 1000.0)({"p1": rec}, pods) == {"p1": 2000.0}
    assert rec.owners == ["alice", "x"]


def test_the_jobs_ttl_and_reap_interval_never_shrink_what_the_budget_counts(fake, run):
    """F3: ttl 1s and reap-interval 0 reserved 0.86 x 1 s; the reap interval counted is the
    budgets file's (else 15 min), which the job can only lengthen."""
    tiny = dict(UP, ttl="1s", reap_interval="0", command="")
    res = run("up", budget_usd="0.2", **tiny)  # 0.86 x (1 s + 15 min) = $0.215
    assert res.code == 1 and "would pass budget $0.20" in res.json["headline"], res.stdout
    assert run("up", budget_usd="0.22", **tiny).code == 0


def test_a_live_pod_past_its_expiry_counts_until_it_can_be_reaped(fake, clock):
    """F3: a pod that outlived expiry + reap interval (no self-stop, no reaper yet) counted
    nothing until billing caught up; it counts one more reap interval from now."""
    tag = new_tag("alice", "local", clock.now() - 3600)  # expired an hour ago
    body = plan.create_body(plan.PodSpec(image="img"), tag, plan.Candidate(L40S), fake.url)
    status, pod = fake.api("POST", "/v2/pods", body)
    assert status == 201
    live = fake.view(fake.pods[pod["id"]])
    live["status"] = "RUNNING"
    spend = cost.attribute([], [live], {}, clock.now(), grace_s=900)
    assert spend.committed_by_owner["alice"] == pytest.approx(0.86 * 0.25)


def test_start_ttl_follows_the_owner_rule(fake, run, tmp_path, monkeypatch):
    """F7: bob's CI job gave alice's stopped pod a 30-day expiry; now only a delegation does."""
    pod = stopped_pod(run, UP)
    res = run("start", pod_id=pod, ttl="30d", extra_env=CI_BOB)
    assert res.code == 2 and "may not give it a new expiry" in res.json["headline"], res.stdout
    assert fake.calls("PATCH") == [] and fake.pods[pod]["status"] == "EXITED"
    (tmp_path / ".gpuci").mkdir()
    (tmp_path / ".gpuci" / "budgets.yml").write_text("delegations:\n  bob: [alice]\n")
    monkeypatch.chdir(tmp_path)
    assert run("start", pod_id=pod, ttl="1h", extra_env=CI_BOB).code == 0


def test_start_ttl_is_held_to_the_budget_the_pod_was_admitted_under(fake, run, tmp_path):
    """F7: a pod admitted under $1 for 45 min ran for 30 days after ``start --ttl``."""
    pod = stopped_pod(run, UP, budget_usd="1")
    res = run("start", pod_id=pod, ttl="30d")
    assert res.code == 1 and "would pass budget $1.00" in res.json["headline"], res.stdout
    assert fake.calls("PATCH") == [] and fake.pods[pod]["status"] == "EXITED"
    assert run("start", pod_id=pod, ttl="30m").code == 0  # its own reservation is replaced
    book = ledger.Ledger.open(str(tmp_path / "ledger"), {})
    live, released, _ = book.reservations("alice")
    assert [r.name for r in live] == [fake.pods[pod]["name"]] and len(released) == 1
    assert book.pod(pod).reservations[-1] == live[0].key  # the pod counts once, until then


def test_events_of_no_pod_are_never_read_for_the_budget(fake, run, clock, tmp_path, monkeypatch):
    """F8: 300 objects planted under ``events/_/`` were each fetched by every budgeted up."""
    gets = counting_gets(monkeypatch, "events")
    assert run("up", budget_usd="50", **UP).code == 0
    for i in range(300):
        item = {"event": "budget-refused", "podId": None, "owner": "x", "time": clock.now()}
        _plant_event(tmp_path / "ledger", "_", clock.now(), item, f"{i:08x}")
    gets[0] = 0
    assert run("up", budget_usd="50", **UP).code == 0
    assert gets[0] < 10


def test_a_flood_of_planted_events_is_skipped_and_never_refuses_every_owner(
    fake, run, clock, tmp_path, monkeypatch
):
    """G3 (was F8's cap): events planted past the cap refused every owner's budgeted up and
    ``pods cost``; now only the events of billed and live pods are read, at most
    ``MAX_POD_EVENTS`` of a pod, the rest skipped in one warning."""
    monkeypatch.setattr(ledger, "MAX_EVENT_READS", 20)
    monkeypatch.setattr(ledger, "MAX_POD_EVENTS", 5, raising=False)  # absent before
    gets = counting_gets(monkeypatch, "events")
    for i in range(30):  # pods RunPod never billed nor lists: never fetched
        item = {"event": "reaped", "podId": f"pod{i}", "owner": "x", "time": clock.now()}
        _plant_event(tmp_path / "ledger", f"pod{i}", clock.now(), item, f"{i:08x}")
    first = run("up", budget_usd="50", **UP)
    assert first.code == 0 and gets[0] == 0, first.stdout
    pod = first.outputs["pod-id"]
    for i in range(30):  # a live pod's folder, flooded
        item = {"event": "stopped", "podId": pod, "owner": "x", "time": clock.now()}
        _plant_event(tmp_path / "ledger", pod, clock.now() - 1, item, f"{i:08x}")
    gets[0] = 0
    res = run("up", budget_usd="50", **UP)
    assert res.code == 0 and gets[0] <= 5, res.stdout
    assert f"{ledger.EVENTS}/{pod}/" in res.stdout and "over the 5 read of a pod" in res.stdout
    assert run("cost").code == 0


def test_a_planted_last_sequence_number_never_blocks_an_owner(fake, run, tmp_path):
    """F9: after ``9999999999.json`` the next number had 11 digits, which the reader never
    saw: every later up lost the same key 20 times, and blamed concurrency."""
    folder = tmp_path / "ledger" / ledger.RESERVATIONS / ledger.owner_key("alice")
    folder.mkdir(parents=True)
    (folder / "9999999999.json").write_text("not json")
    codes = [run("up", budget_usd="50", **UP).code for _ in range(3)]
    assert codes == [0, 0, 0]
    assert sorted(p.name for p in folder.iterdir())[:3] == [
        "0000000000.json",
        "0000000001.json",
        "0000000002.json",
    ]
