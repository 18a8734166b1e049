"""``pods start --ttl`` holds a new expiry to the budget whatever the ledger says: the rate is
RunPod's catalog price (the ledger may only raise it), the pod's own reservation is found under
the name ``up`` gave it, the period read from the ledger is bounded, and the budgets file is
the one the job names, as ``up`` reads it.

Planted objects are written as gpu-ci's own writers write them, so only their content is
hostile (as in test_pods_budget_untrusted.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from pods_testing import L40S, stopped_pod

from gpuci.pods._budgets import ledger, policy

UP = dict(image="img", command="serve", ttl="45m", gpu_types=L40S, owner="alice")  # $0.86/h
ALICE_10 = "owners:\n  alice: 10\n"


def _budgets_file(folder: Path, text: str, monkeypatch, where: str = ".gpuci/budgets.yml") -> None:
    path = folder / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    monkeypatch.chdir(folder)


def _refused_at_list_price(res, budget: str = "$10.00") -> None:
    headline = res.json["headline"]
    assert res.code == 1 and f"would pass budget {budget}" in headline, res.stdout
    assert "at $0.86/h" in headline, headline


def test_a_ledger_that_does_not_know_the_pod_never_skips_the_budget(
    fake, run, tmp_path, monkeypatch
):
    """G10: a stopped pod lists cost 0, so with a ledger that did not know it (the job's own
    ledger input, an empty folder) the rate was 0 and a 30-day expiry passed a $10 budget."""
    _budgets_file(tmp_path, ALICE_10, monkeypatch)
    pod = stopped_pod(run, UP)
    empty = tmp_path / "empty-ledger"
    empty.mkdir()
    _refused_at_list_price(run("start", pod_id=pod, ttl="30d", ledger=str(empty)))
    assert fake.calls("PATCH") == [] and fake.pods[pod]["status"] == "EXITED"


def test_planted_ledger_objects_never_lower_the_rate(fake, run, clock, tmp_path, monkeypatch):
    """G2: a planted release hid the pod's reservation and a planted ``created`` event (time 0,
    costPerHr 1e-9) set its rate: a 30-day expiry was priced at ~$0/h."""
    _budgets_file(tmp_path, ALICE_10, monkeypatch)
    pod = stopped_pod(run, UP)
    root = tmp_path / "ledger"
    for reservation in (root / ledger.RESERVATIONS / ledger.owner_key("alice")).iterdir():
        released = root / ledger.RELEASES / ledger.owner_key("alice") / reservation.name
        released.parent.mkdir(parents=True, exist_ok=True)
        released.write_text("{}")
    planted = {"event": "created", "podId": pod, "owner": "alice", "costPerHr": 1e-9, "time": 0}
    event = root / ledger.EVENTS / pod / "000000000000000-created-00000000.json"
    event.write_text(json.dumps(planted))
    _refused_at_list_price(run("start", pod_id=pod, ttl="30d"))
    assert fake.calls("PATCH") == []


def test_a_pod_the_catalog_cannot_price_gets_no_new_expiry(fake, run, tmp_path, monkeypatch):
    """G10: no rate at all skipped the check; now it refuses in one line, touching nothing."""
    _budgets_file(tmp_path, ALICE_10, monkeypatch)
    pod = stopped_pod(run, UP)
    fake.pods[pod]["gpu"]["id"] = "NVIDIA Retired\nGPU"  # no longer in the catalog
    res = run("start", pod_id=pod, ttl="1h")
    assert res.code == 1 and "cannot be priced" in res.json["headline"], res.stdout
    assert "NVIDIA Retired GPU" in res.json["headline"] and "\n" not in res.json["headline"]
    assert fake.calls("PATCH") == [] and fake.pods[pod]["status"] == "EXITED"


def test_a_smoke_renamed_pod_is_held_to_the_budget_it_was_admitted_under(fake, run, tmp_path):
    """G11: gpu-smoke appends its verdict to the pod's name; its reservation (made under the
    name up gave it) was not found, so a budget-usd pod's 30-day expiry was never checked."""
    pod = stopped_pod(run, UP, budget_usd="10")
    fake.pods[pod]["name"] += " smoke passed"
    _refused_at_list_price(run("start", pod_id=pod, ttl="30d"))
    assert run("start", pod_id=pod, ttl="30m").code == 0
    live, released, _ = ledger.Ledger.open(str(tmp_path / "ledger"), {}).reservations("alice")
    assert [r.name for r in live] == [fake.pods[pod]["name"]]  # its own one was replaced
    assert len(released) == 1 and live[0].budget == 10


def test_a_planted_reservation_period_is_bounded(fake, run, tmp_path):
    """G4: a planted reservation of the pod with periodS 1e300 crashed start --ttl
    (OverflowError, "internal error"); a period read from the ledger is at most 366 days."""
    pod = stopped_pod(run, UP, budget_usd="10")
    folder = tmp_path / "ledger" / ledger.RESERVATIONS / ledger.owner_key("alice")
    planted = {"owner": "alice", "podName": fake.pods[pod]["name"], "costPerHr": 0}
    planted.update({"untilEpoch": 0, "budgetUsd": 10, "periodS": 1e300})
    (folder / "0000000100.json").write_text(json.dumps(planted))
    assert run("start", pod_id=pod, ttl="2h").code == 0
    decision = policy.decide_extension("alice", {}, 10.0, 1e300, cwd=tmp_path)
    assert decision.period_s == policy.MAX_ADMITTED_PERIOD_S == 366 * 86400


def test_start_ttl_reads_the_budgets_file_the_job_names(fake, run, tmp_path, monkeypatch):
    """G8: start --ttl always read .gpuci/budgets.yml: with up's ``budgets: ci/budgets.yml`` a
    delegated CI identity was refused and a budget lowered since was ignored."""
    where = "ci/budgets.yml"
    _budgets_file(tmp_path, ALICE_10 + "delegations:\n  ci-bot: [alice]\n", monkeypatch, where)
    bot = {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "ci-bot"}
    pod = stopped_pod(run, UP, budgets=where, extra_env=bot)
    assert run("start", pod_id=pod, ttl="2h", budgets=where, extra_env=bot).code == 0
    assert run("stop", pod_id=pod).code == 0
    (tmp_path / where).write_text("owners:\n  alice: 1\n")  # lowered to $1
    alice = {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "alice"}
    res = run("start", pod_id=pod, ttl="8h", budgets=where, extra_env=alice)
    _refused_at_list_price(res, "$1.00")
