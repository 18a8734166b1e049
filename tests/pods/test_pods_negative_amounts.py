"""Money that RunPod (or the ledger's store) reports below zero never lowers an owner's spending:
the client refuses a negative or non-finite price, pod cost or billed amount in one line (exit 3),
and the ledger reads a negative rate it finds as 0.
"""

from __future__ import annotations

import json
from typing import Any

import fake_runpod
import pytest
from pods_testing import refused_answer

from gpuci.pods._budgets import ledger

L40S = fake_runpod.CATALOG[1]
H100 = dict(image="img", command="serve", ttl="5h", gpu_types="NVIDIA H100 80GB HBM3")


@pytest.mark.parametrize(
    "call, answer, field",
    [
        ("catalog", {"gpus": [{**L40S, "price": {"secure": -100.0}}]}, "'price.secure'"),
        ("catalog", {"gpus": [{**L40S, "price": {"community": -0.01}}]}, "'price.community'"),
        ("pods", {"pods": [{"id": "p1", "cost": -3}]}, "'cost'"),
        ("billing", {"records": [{"podId": "p1", "totalAmount": -50.0}]}, "'totalAmount'"),
    ],
)
def test_a_negative_amount_is_one_line_exit_3(call, answer, field):
    err = refused_answer(call, answer)
    assert f"{field} is the number -" in err.message, err.message
    assert "not a non-negative number" in err.message and err.exit_code == 3


@pytest.mark.parametrize("amount", [float("inf"), float("nan")])
def test_a_non_finite_amount_is_one_line_exit_3(amount):
    err = refused_answer("billing", {"records": [{"podId": "p1", "totalAmount": amount}]})
    assert err.exit_code == 3 and "\n" not in err.one_line()


def test_a_negative_catalog_price_writes_no_reservation_and_creates_nothing(
    fake, run, monkeypatch, tmp_path
):
    """The reviewer's case: one answer with a price of -100 USD/h made a reservation of
    -100 USD/h that let the owner's next, honest ``up`` pass their budget."""
    monkeypatch.setitem(L40S, "price", {"secure": -100.0, "community": 0.0})
    res = run("up", image="img", command="x", ttl="10m", gpu_types="NVIDIA L40S", budget_usd="5")
    assert res.code == 3 and "'price.secure' is the number -100.0" in res.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []
    assert not list((tmp_path / "ledger").rglob("reservations/*/*.json"))


def _put(book: ledger.Ledger, key: str, item: dict[str, Any]) -> None:
    book.store.put_if_absent(key, json.dumps(item).encode())


def test_a_negative_reservation_in_the_ledger_does_not_lower_spending(fake, run, clock, tmp_path):
    """Whoever can write to the ledger's store can write a reservation of -100 USD/h: it counts
    as nothing, so the H100 for 5 h (about $15) is still over a $5 budget."""
    book = ledger.Ledger.open(str(tmp_path / "ledger"), {})
    key = f"{ledger.RESERVATIONS}/{ledger.owner_key('tester')}/0000000000.json"
    until = clock.now() + 86400
    _put(book, key, {"owner": "tester", "costPerHr": -100.0, "untilEpoch": until})
    assert book.reservations("tester")[0][0].remaining(clock.now()) == 0.0
    res = run("up", **H100, budget_usd="5")
    asked = [(r.method, r.path, r.status) for r in fake.requests]
    assert res.code == 1 and "would pass budget $5.00" in res.json["headline"], (res.stdout, asked)
    assert fake.calls("POST", "/v2/pods") == []


def test_a_negative_rate_in_an_event_reads_as_zero(tmp_path):
    book = ledger.Ledger.open(str(tmp_path / "ledger"), {})
    book.record("created", "pod1", 1.0, owner="tester", costPerHr=-7.5)
    record = book.pod("pod1")
    assert record is not None and record.cost_per_hr == 0.0
