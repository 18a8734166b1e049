"""The retry table of the createPod docs, as the fake server sees it: counts, order, waits."""

from __future__ import annotations

import pytest

from gpuci.pods._runpod.client import RunPodClient
from gpuci.pods._runpod.errors import (
    CandidateRejected,
    ContractViolation,
    InsufficientBalance,
    Transient,
)


def client(fake, clock) -> RunPodClient:
    return RunPodClient(fake.api_key, fake.url, clock=clock)


BODY = {"name": "t", "image": "img", "gpu": {"id": "NVIDIA L40S", "count": 1}}


def test_429_waits_retry_after_then_resumes(fake, clock):
    fake.fail("GET /v2/pods", (429, {"Retry-After": "7"}), (429, {"Retry-After": "3"}))
    with client(fake, clock) as c:
        assert c.list_pods() == []
    assert [r.status for r in fake.calls("GET", "/v2/pods")] == [429, 429, 200]
    assert clock.sleeps == [7.0, 3.0]


def test_5xx_backs_off_exponentially_on_the_same_request(fake, clock):
    fake.fail("POST /v2/pods", (503, {}), (500, {}))
    with client(fake, clock) as c:
        pod = c.create_pod(BODY)
    posts = fake.calls("POST", "/v2/pods")
    assert [r.status for r in posts] == [503, 500, 201]
    assert all(r.body == BODY for r in posts)
    assert len(clock.sleeps) == 2 and 1 <= clock.sleeps[0] <= 2 and 2 <= clock.sleeps[1] <= 3
    assert pod["id"] in fake.pods


def test_5xx_that_never_ends_is_an_infrastructure_error_after_six_attempts(fake, clock):
    fake.fail("GET /v2/pods", *[(502, {})] * 10)
    with client(fake, clock) as c, pytest.raises(Transient) as info:
        c.list_pods()
    assert len(fake.calls("GET", "/v2/pods")) == 6
    assert info.value.exit_code == 3 and "HTTP 502" in info.value.one_line()


def test_the_jobs_max_attempts_bounds_the_retries_and_a_bad_one_is_one_line(fake, run):
    fake.fail("GET /v2/pods", *[(502, {})] * 10)
    res = run("ls", extra_env={"GPUCI_PODS_MAX_ATTEMPTS": "2"})
    assert res.code == 3 and len(fake.calls("GET", "/v2/pods")) == 2, res.stdout
    bad = run("ls", extra_env={"GPUCI_PODS_MAX_ATTEMPTS": "0"})
    assert bad.code == 2 and "GPUCI_PODS_MAX_ATTEMPTS='0'" in bad.json["headline"]
    assert len(fake.calls("GET", "/v2/pods")) == 2  # refused before any request


def test_422_is_never_retried_and_names_the_violation(fake, clock):
    bad = {**BODY, "disk": 0, "bogus": True}
    with client(fake, clock) as c, pytest.raises(ContractViolation) as info:
        c.create_pod(bad)
    assert len(fake.calls("POST", "/v2/pods")) == 1
    assert clock.sleeps == []
    assert info.value.exit_code == 2
    assert "disk" in info.value.message and "bogus" in info.value.message


@pytest.mark.parametrize("status", [400, 403])
def test_400_and_403_reject_the_candidate_without_retry(fake, clock, status):
    fake.fail("POST /v2/pods", (status, {}))
    with client(fake, clock) as c, pytest.raises(CandidateRejected) as info:
        c.create_pod(BODY)
    assert info.value.status == status
    assert len(fake.calls("POST", "/v2/pods")) == 1 and clock.sleeps == []


def test_402_stops(fake, clock):
    fake.balance_low = True
    with client(fake, clock) as c, pytest.raises(InsufficientBalance) as info:
        c.create_pod(BODY)
    assert info.value.exit_code == 1 and "credit" in (info.value.hint or "")


def test_a_lost_create_response_does_not_create_a_second_pod(fake, clock):
    fake.lose_create_responses = 1
    with client(fake, clock) as c:
        pod = c.create_pod(BODY)
    assert len(fake.pods) == 1 and pod["id"] in fake.pods
    assert len(fake.calls("POST", "/v2/pods")) == 1
    assert len(fake.calls("GET", "/v2/pods")) == 1  # looked for it by name before re-posting


def test_the_fake_refuses_what_the_contract_refuses(fake, clock):
    """Guard for the guard: the schema check in the fake is live."""
    with client(fake, clock) as c:
        with pytest.raises(ContractViolation):
            c.create_pod({"image": "img", "gpu": {"id": "NVIDIA L40S"}})  # no name
        with pytest.raises(ContractViolation):
            c.create_pod({"name": "x", "gpu": {"id": "NVIDIA L40S"}})  # no image, no template
        with pytest.raises(ContractViolation):
            c.request("POST", "/v2/pods/nope/action", "act", json={"action": "explode"})


def test_the_fake_catalog_refuses_what_the_spec_refuses(fake):
    """listGpuTypes: product is required with include=AVAILABILITY and valid only with it; the
    client asks as the spec wants, and COMMUNITY lists only types offered there."""
    for query in ("include=AVAILABILITY", "product=POD", "cloud=SECURE"):
        assert fake.api("GET", f"/v2/catalog/gpus?{query}")[0] == 400, query
    status, body = fake.api(
        "GET", "/v2/catalog/gpus?include=AVAILABILITY&product=POD&cloud=COMMUNITY"
    )
    assert status == 200 and [g["id"] for g in body["gpus"]] == ["NVIDIA GeForce RTX 4090"]
    with RunPodClient(fake.api_key, fake.url) as client:
        assert len(client.list_gpu_types("SECURE")) == 3
