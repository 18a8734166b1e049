"""Who forgets: ``reap`` names owner, GPU, hours past TTL and cost; hand-made pods are stopped."""

from __future__ import annotations

import pytest

from gpuci.pods._budgets import ledger

UP = dict(image="img", command="serve", ttl="30m")


def test_reap_names_who_forgot_what_and_stops_old_hand_made_pods(fake, run, clock, env):
    old = fake.hand_made("jupyter\nof carol", "RUNNING")  # a control character in a hostile name
    clock.advance(11 * 3600)
    young = fake.hand_made("quick test", "RUNNING")
    clock.advance(1.5 * 3600)  # old: 12.5 h, young: 1.5 h
    alice = run("up", **UP, gpu_types="NVIDIA L40S", owner="alice").outputs["pod-id"]
    bob = run("up", **UP, gpu_types="NVIDIA GeForce RTX 4090", owner="bob").outputs["pod-id"]
    clock.advance(1800)
    fake._set_status(fake.pods[bob], "EXITED")  # bob's pod stopped itself at its TTL (billed)
    clock.advance(1800)  # both 30 min past their TTL
    res = run("reap", untagged_older_than="12h")
    assert res.code == 0, res.stdout
    rows = {r["pod"]: r for r in res.json["report"]["reaped"]}
    assert set(rows) == {alice, bob}
    assert rows[alice]["owner"] == "alice" and rows[alice]["gpu"] == "NVIDIA L40S"
    assert rows[alice]["hours_past_ttl"] == pytest.approx(0.5, abs=0.01)
    assert rows[alice]["past_ttl_usd"] == pytest.approx(0.43, abs=0.01)
    assert rows[alice]["spent_usd"] == pytest.approx(0.86, abs=0.02)
    assert rows[bob]["owner"] == "bob" and rows[bob]["past_ttl_usd"] == 0.0  # stopped: no GPU
    md = res.json["summary_markdown"]
    assert "| hours past TTL |" in md and f"| {alice} | alice | NVIDIA L40S | 0.50 |" in md
    # hand-made: the old one is stopped (disk kept) and named, the young one left alone
    assert fake.pods[old]["status"] == "EXITED" and fake.pods[young]["status"] == "RUNNING"
    assert [s["pod"] for s in res.json["report"]["hand_made_stopped"]] == [old]
    warning = next(a for a in res.json["annotations"] if a["level"] == "warning")
    assert old in warning["message"] and r"jupyter\nof carol" in warning["message"]
    # in the ledger, for every runner to see; and in cost, per owner
    book = ledger.Ledger.open(env["GPUCI_PODS_LEDGER"], env).book()
    reaped = [e for e in book[alice].events if e["event"] == "reaped"]
    assert (
        reaped
        and reaped[0]["owner"] == "alice"
        and reaped[0]["hoursPastTtl"] == pytest.approx(0.5, abs=0.01)
    )
    owners = run("cost").json["report"]["owners"]
    assert owners["alice"]["reaped_pods"] == 1 and owners["bob"]["reaped_pods"] == 1


def test_hand_made_pods_are_left_alone_by_default(fake, run, clock):
    old = fake.hand_made("mine", "RUNNING")
    clock.advance(48 * 3600)
    res = run("reap")
    assert res.code == 0 and fake.pods[old]["status"] == "RUNNING"
    assert fake.calls("POST", f"/v2/pods/{old}/action") == []


def test_a_renamed_pod_is_reaped_as_its_tag_says_and_its_spend_stays_with_its_creator(
    fake, run, clock, env
):
    """A pod re-tagged on RunPod is reaped under the owner its tag names, the one its budget
    counted it for while it lived (the ledger's first ``created`` event is anyone's to plant,
    so it no longer decides), and the event names both; its billed spend still counts for
    every owner its ``created`` events name."""
    pod = run("up", **UP, gpu_types="NVIDIA L40S", owner="alice").outputs["pod-id"]
    live = fake.pods[pod]  # someone with the API key re-tags it to blame bob
    live["env"]["GPUCI_OWNER"] = "bob"
    live["name"] = live["name"].replace("owner=alice", "owner=bob")
    clock.advance(2 * 3600)
    assert run("reap").code == 0
    book = ledger.Ledger.open(env["GPUCI_PODS_LEDGER"], env).book()
    (reaped,) = [e for e in book[pod].events if e["event"] == "reaped"]
    assert (reaped["owner"], reaped["ownerFrom"], reaped["ledgerOwner"]) == ("bob", "pod", "alice")
    owners = run("cost").json["report"]["owners"]
    assert owners["alice"]["spent_usd"] > 0 and owners["bob"]["spent_usd"] == 0
