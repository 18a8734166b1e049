"""``pods cost``: spend per owner and per GPU type, attributed after the pods are gone."""

from __future__ import annotations

import pytest

UP = dict(image="img", command="serve", ttl="3h")


def test_spend_per_owner_and_gpu_type(fake, run, clock):
    a = run("up", **UP, gpu_types="NVIDIA L40S", owner="alice").outputs["pod-id"]
    b = run("up", **UP, gpu_types="NVIDIA GeForce RTX 4090", owner="bob").outputs["pod-id"]
    fake.hand_made("manual", "RUNNING")  # untagged
    clock.advance(3600)
    assert run("down", pod_id=a).code == 0  # alice's pod is gone from listPods now
    clock.advance(1800)
    res = run("cost")
    assert res.code == 0, res.stdout
    owners = res.json["report"]["owners"]
    assert owners["alice"]["spent_usd"] == pytest.approx(0.86, abs=0.01)  # via the ledger
    assert owners["bob"]["spent_usd"] == pytest.approx(0.44 * 1.5, abs=0.01)
    assert owners["bob"]["live_usd_per_hr"] == pytest.approx(0.44)
    assert owners["(unattributed)"]["spent_usd"] == pytest.approx(0.86 * 1.5, abs=0.01)
    gpus = res.json["report"]["gpu_types"]
    assert gpus["NVIDIA L40S"]["spent_usd"] == pytest.approx(0.86 * 2.5, abs=0.02)
    assert float(res.outputs["total-usd"]) == pytest.approx(0.86 * 2.5 + 0.66, abs=0.02)
    md = res.json["summary_markdown"]
    assert "| owner | spent USD | live pods | live USD/h | committed USD |" in md
    assert "| alice | 0.86 |" in md and "| GPU type | spent USD | live pods |" in md
    billing = fake.calls("GET", "/v2/billing/pods")[0]
    assert billing.query["bucketSize"] == ["day"] and billing.query["startTime"][0].endswith("Z")
    assert b in owners["bob"]["pods"]
    only = run("cost", owner="bob")
    assert list(only.json["report"]["owners"]) == ["bob"]
    assert float(only.outputs["total-usd"]) == pytest.approx(0.66, abs=0.01)


def test_cost_dry_run_calls_nothing(fake, run):
    res = run("cost", dry_run=True)
    assert res.code == 0 and fake.requests == [] and "would read" in res.json["headline"]


def test_live_pods_owner_filter_and_cents(fake, run, clock):
    from gpuci.pods._budgets.cost import usd

    a = run("up", **UP, gpu_types="NVIDIA L40S", owner="alice").outputs["pod-id"]
    run("up", **UP, gpu_types="NVIDIA GeForce RTX 4090", owner="bob")
    clock.advance(3600)
    assert run("down", pod_id=a).code == 0
    res = run("cost")
    assert res.json["report"]["owners"]["alice"]["live_pods"] == 0  # terminated is not live
    assert "| alice | 0.86 | 0 |" in res.json["summary_markdown"]
    only = run("cost", owner="bob")
    md = only.json["summary_markdown"]
    assert "alice" not in md and "NVIDIA L40S" not in md and "| bob | 0.44 | 1 |" in md
    assert [usd(x) for x in (0.0012, 0.00004, 0.0, 0.019, 12.345)] == [
        "0.0012",
        "<0.0001",
        "0.00",
        "0.02",
        "12.35",
    ]
