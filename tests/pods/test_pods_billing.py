"""Pod billing as ``listPodBilling`` answers it (one record per pod per day, the window snapped
to midnight) and ``pods cost`` reading it: a pod over several days summed, the window named."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from fake_runpod import iso, validator

DAY = 86400
L40S = 0.86  # the fake catalog's secure price, USD/h


def _at_hour(clock, hour: int) -> float:
    """Move the clock forward to the next ``hour``:00 UTC; return that midnight."""
    midnight = (clock.t // DAY + 1) * DAY
    clock.t = midnight + hour * 3600
    return midnight


def _billing(fake, **query: str) -> tuple[int, dict]:
    target = "/v2/billing/pods" + (f"?{urlencode(query)}" if query else "")
    return fake.api("GET", target)


def test_fake_bills_one_record_per_pod_per_day_over_the_snapped_window(fake, clock):
    midnight = _at_hour(clock, 22)
    fake.charge("pod-a", clock.t, clock.t + 28 * 3600, L40S)  # 22:00 day 1 to 02:00 day 3
    fake.charge("pod-b", clock.t + 3600, clock.t + 2 * 3600, 1.0)
    clock.advance(30 * 3600)
    status, answer = _billing(fake, startTime=iso(midnight + 3600), endTime=iso(clock.t))
    assert status == 200 and list(validator("ListPodBillingResponse").iter_errors(answer)) == []
    query = answer["metadata"]["query"]
    assert query["startTime"] == iso(midnight) and query["endTime"] == iso(midnight + 3 * DAY)
    a = [r for r in answer["records"] if r["podId"] == "pod-a"]
    assert [r["startTime"] for r in a] == [iso(midnight + d * DAY) for d in range(3)]
    assert [r["totalAmount"] for r in a] == pytest.approx([2 * L40S, 24 * L40S, 2 * L40S])
    assert answer["metadata"]["recordCount"] == 4 and answer["metadata"]["uniquePodCount"] == 2
    assert answer["metadata"]["totals"]["totalAmount"] == pytest.approx(28 * L40S + 1.0)
    status, one = _billing(fake, lastN="1", podId="pod-a")
    assert status == 200 and [r["totalAmount"] for r in one["records"]] == [pytest.approx(2 * L40S)]


@pytest.mark.parametrize(
    "query, status",
    [
        ({"grouping": "pod"}, 422),  # not a listPodBilling parameter
        ({"bucketSize": "minute"}, 422),
        ({"startTime": "2026-06-01"}, 422),  # a date, not an RFC 3339 date-time
        ({"lastN": "0"}, 422),
        ({"lastN": "3", "startTime": "2026-06-01T00:00:00Z"}, 400),  # mutually exclusive
    ],
)
def test_fake_refuses_what_list_pod_billing_does_not_allow(fake, query, status):
    code, problem = _billing(fake, **query)
    assert code == status and problem["status"] == status and problem["detail"]


def test_cost_sums_one_pod_over_several_daily_records(fake, run, clock):
    _at_hour(clock, 20)
    pod = run("up", image="img", command="serve", ttl="72h", owner="alice", gpu_types="NVIDIA L40S")
    pod_id = pod.outputs["pod-id"]
    clock.advance(50 * 3600)  # 20:00 day 1 to 22:00 day 3: three daily records
    res = run("cost", period="7d")
    assert res.code == 0, res.stdout
    billing = fake.calls("GET", "/v2/billing/pods")[-1]
    assert billing.status == 200
    _, answer = _billing(fake, **{k: v[0] for k, v in billing.query.items()})
    assert len([r for r in answer["records"] if r["podId"] == pod_id]) == 3
    alice = res.json["report"]["owners"]["alice"]
    assert alice["spent_usd"] == pytest.approx(fake.billed_now(pod_id), abs=1e-3)
    assert alice["spent_usd"] == pytest.approx(50 * L40S, abs=0.01)
    assert alice["pods"] == [pod_id] and alice["live_pods"] == 1
    assert res.json["report"]["gpu_types"]["NVIDIA L40S"]["spent_usd"] == alice["spent_usd"]


def test_cost_names_the_midnight_its_day_buckets_start_at(fake, run, clock):
    midnight = _at_hour(clock, 20)  # now 20:00; a 1-day period asks from 20:00 yesterday
    clock.advance(DAY)
    fake.charge("old", midnight + 4 * 3600, midnight + 8 * 3600, 1.0)  # yesterday 04:00-08:00
    res = run("cost", period="1d")
    assert res.code == 0, res.stdout
    # RunPod bills whole days: yesterday's 4 h are in the answer, so the report starts there
    assert float(res.outputs["total-usd"]) == pytest.approx(4.0)
    assert res.json["report"]["period"] == {"from": iso(midnight), "to": iso(clock.t)}
    assert f"since {iso(midnight)}" in res.json["summary_markdown"]
    asked = fake.calls("GET", "/v2/billing/pods")[-1].query
    assert asked["startTime"] == [iso(midnight)] and asked["bucketSize"] == ["day"]
