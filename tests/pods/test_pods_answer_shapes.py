"""Every field the pods code reads from a RunPod answer is checked in the client, once: a wrong
type anywhere (a catalog price that is text, a data centre without an id, a pod whose GPU id is
an array) is one line naming the field, exit 3, never an internal error further on.
"""

from __future__ import annotations

from typing import Any

import fake_runpod
import pytest
from pods_testing import refused_answer

from gpuci.pods._runpod.client import RunPodClient

L40S = fake_runpod.CATALOG[1]
UP = dict(image="img", command="serve", ttl="10m", gpu_types="NVIDIA L40S")


def _catalog(**fields: Any) -> dict[str, Any]:
    """A catalog answer of one GPU type: the L40S with ``fields`` replaced."""
    return {"gpus": [{**L40S, **fields}]}


def _centres(*centres: Any) -> dict[str, Any]:
    return _catalog(dataCenters=list(centres))


def _pod(**fields: Any) -> dict[str, Any]:
    return {"id": "p1", "name": "x", "status": "RUNNING", "gpu": {"id": "NVIDIA L40S"}, **fields}


@pytest.mark.parametrize(
    "call, answer, field",
    [
        ("catalog", _catalog(price={"secure": "0.86x"}), "'price.secure' is a JSON string"),
        ("catalog", _catalog(price={"community": ["1"]}), "'price.community' is a JSON array"),
        ("catalog", _catalog(price=[0.86]), "'price' is a JSON array"),
        ("catalog", _centres({"name": "US Texas 3"}), "'dataCenters.id' is missing"),
        ("catalog", _centres({"id": "X", "availability": [1]}), ".availability' is a JSON array"),
        ("catalog", _centres({"id": 3}), "'dataCenters.id' is the number 3"),
        ("catalog", _catalog(dataCenters={"id": "X"}), "'dataCenters' is a JSON object"),
        ("catalog", _catalog(id=None), "'id' is missing"),
        ("pods", {"pods": [_pod(gpu={"id": ["NVIDIA L40S"]})]}, "'gpu.id' is a JSON array"),
        ("pod", _pod(gpu={"id": 4090}), "'gpu.id' is the number 4090"),
        ("pods", {"pods": [_pod(dataCenterId=True)]}, "'dataCenterId' is a JSON boolean"),
        ("pods", {}, "'pods' is missing, not an array of objects"),
        ("pods", {"title": "Error", "status": 200}, "'pods' is missing"),
        ("pods", {"pods": None}, "'pods' is missing"),
        ("billing", {"records": [{"totalAmount": 1.0}]}, "'podId' is missing"),
        ("billing", {"records": [{"podId": "p", "totalAmount": "1"}]}, "Amount' is a JSON string"),
    ],
)  # fmt: skip
def test_a_field_of_the_wrong_type_is_one_line_naming_it(call, answer, field):
    err = refused_answer(call, answer)
    assert "RunPod API answered" in err.message and field in err.message, err.message
    assert err.exit_code == 3 and "\n" not in err.one_line()


def test_what_the_spec_allows_passes(fake):
    """The fake answers as RunPod's OpenAPI spec says: nothing in it is refused."""
    with RunPodClient(fake.api_key, fake.url) as client:
        assert [g["id"] for g in client.list_gpu_types()][1] == "NVIDIA L40S"
        client.create_pod({"name": "t", "image": "img", "gpu": {"id": "NVIDIA L40S"}})
        assert len(client.list_pods()) == 1


def test_a_price_that_is_text_stops_a_budgeted_up_before_any_create(fake, run, monkeypatch):
    monkeypatch.setitem(L40S, "price", {"secure": "0.86x", "community": 0.0})
    res = run("up", **UP, budget_usd="5")
    assert res.code == 3, res.stdout
    assert "'price.secure' is a JSON string" in res.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []


def test_a_data_centre_without_an_id_stops_up_with_one_line(fake, run, monkeypatch):
    monkeypatch.setitem(L40S, "dataCenters", [{"name": "US Texas 3", "availability": "HIGH"}])
    res = run("up", **UP)
    assert res.code == 3 and "'dataCenters.id' is missing" in res.json["headline"], res.stdout
    assert fake.calls("POST", "/v2/pods") == []


def test_a_pod_whose_gpu_id_is_an_array_is_one_line_in_cost(fake, run):
    pod_id = fake.hand_made("gpuci owner=mallory exp=2030-01-01T00:00:00Z run=x n=abcdef")
    fake.pods[pod_id]["gpu"] = {"id": ["NVIDIA L40S"], "count": 1}
    res = run("cost")
    assert res.code == 3 and "'gpu.id' is a JSON array" in res.json["headline"], res.stdout


def test_a_listing_without_pods_fails_reap_and_down_instead_of_ending_nothing(fake, run, clock):
    """ListPodsResponse requires ``pods``: an answer without it (a proxy's JSON error page
    with 200) was read as "no pods", so reap and down exited 0 and the expired pod billed on."""
    ci = {"GITHUB_RUN_ID": "77", "GITHUB_REPOSITORY": "org/repo"}
    pod = run("up", **{**UP, "ttl": "30m"}, extra_env=ci).outputs["pod-id"]
    clock.advance(2 * 3600)
    fake.fail("GET /v2/pods", (200, {}), (200, {}))
    for res in (run("reap"), run("down", extra_env=ci)):
        assert res.code == 3, res.stdout
        assert (
            "list pods: RunPod API answered an object whose 'pods' is missing"
            in (res.json["headline"])
        )
    assert fake.pods[pod]["status"] == "RUNNING"
    assert fake.calls("DELETE") == []
    assert run("reap").outputs["pod-ids"] == pod  # a listing with pods: reaped as before
