"""``pods up``: candidate walk, exact bodies, waiting, health, budget, cleanup on failure."""

from __future__ import annotations

import json

import pytest
from fake_runpod import VALIDATORS
from pods_testing import api_env

from gpuci.pods._budgets import ledger
from gpuci_testing import clean_env, run_cli
from loopback_http import JsonAPIHandler, LoopbackHTTPServer

GPUS = "NVIDIA GeForce RTX 4090,NVIDIA L40S,NVIDIA H100 80GB HBM3"
UP = dict(
    gpu_types=GPUS,
    image="vllm/vllm-openai:v0.6.3",
    command="vllm serve m",
    ports="8000/http",
    ttl="45m",
    owner="alice",
)


def test_dry_run_prints_exact_valid_bodies_and_sends_nothing(fake, tmp_path):
    env = clean_env(**api_env(fake, tmp_path, GIT_CONFIG_GLOBAL="/dev/null"))
    proc = run_cli(
        "pods",
        "up",
        "--dry-run",
        "--json",
        "--gpu-types",
        "NVIDIA L40S,NVIDIA GeForce RTX 4090",
        "--image",
        "img",
        "--command",
        "python -m http.server 8000",
        "--ttl",
        "45m",
        "--budget-usd",
        "10",
        "--data-centers",
        "EU-RO-1,US-KS-2",
        "--env",
        "HF_TOKEN=hf_secret_value\nMODE=x",
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)["report"]["plan"]
    assert fake.requests == []  # no API call at all
    assert plan["gpu_order"] == [
        "NVIDIA L40S",
        "NVIDIA L40S",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA GeForce RTX 4090",
    ]
    bodies = [r["body"] for r in plan["requests"]]
    assert [b["dataCenterIds"] for b in bodies] == [["EU-RO-1"], ["US-KS-2"]] * 2
    for body in bodies:
        assert list(VALIDATORS["CreatePodRequest"].iter_errors(body)) == []
        assert body["env"]["GPUCI_EXPIRES_AT"] == plan["expires_at"]
        assert body["env"]["GPUCI_START_COMMAND"] == "python -m http.server 8000"
        assert body["args"] == "sh -c 'eval \"$GPUCI_WRAPPER\"'"
        assert "owner=tester" in body["name"] and f"exp={plan['expires_at']}" in body["name"]
    assert plan["ttl_s"] == 2700 and plan["budget"]["budget_usd"] == 10
    assert "hf_secret_value" not in proc.stdout + proc.stderr  # secret-looking env is masked


def test_up_walks_candidates_in_order_and_waits_for_running(fake, run, clock, env):
    fake.forbidden.add("NVIDIA GeForce RTX 4090")  # 403: skip
    fake.no_capacity.add("NVIDIA L40S")  # 400: next
    res = run("up", **UP)
    assert res.code == 0, res.stdout
    posts = fake.calls("POST", "/v2/pods")
    assert [(p.body["gpu"]["id"], p.status) for p in posts] == [
        ("NVIDIA GeForce RTX 4090", 403),
        ("NVIDIA L40S", 400),
        ("NVIDIA H100 80GB HBM3", 201),
    ]
    # catalog order: data centres with stock, most first
    assert posts[0].body["dataCenterIds"] == ["EU-RO-1", "US-KS-2"]
    pod_id = res.outputs["pod-id"]
    assert res.outputs["status"] == "RUNNING" and res.outputs["cost-per-hr"] == "2.99"
    assert res.outputs["url"] == f"https://{pod_id}-8000.proxy.runpod.net"
    assert res.outputs["gpu-type"] == "NVIDIA H100 80GB HBM3"
    assert len(fake.calls("GET", f"/v2/pods/{pod_id}")) == 2  # STARTING, RUNNING
    # one poll's wait; a retry's (1-2 s) would mean a request failed: the list shows which
    assert clock.sleeps == [5.0], [(r.method, r.path, r.status) for r in fake.requests]
    book = ledger.Ledger.open(env["GPUCI_PODS_LEDGER"], env).book()
    assert book[pod_id].owner == "alice" and book[pod_id].events[0]["event"] == "created"
    assert (
        f"| {pod_id} | NVIDIA H100 80GB HBM3 | US-TX-3 | 2.99 | alice |"
        in res.json["summary_markdown"]
    )


def test_up_keeps_walking_rounds_with_backoff_until_one_places(fake, run, clock):
    fake.fail("POST /v2/pods", *[(400, {})] * 4)  # two rounds of two candidates fail
    res = run("up", **{**UP, "gpu_types": "NVIDIA L40S,NVIDIA GeForce RTX 4090"})
    assert res.code == 0, res.stdout
    assert [p.status for p in fake.calls("POST", "/v2/pods")] == [400] * 4 + [201]
    assert clock.sleeps[:2] == [15.0, 30.0]


def test_402_stops_the_walk_at_once(fake, run):
    fake.balance_low = True
    res = run("up", **UP)
    assert res.code == 1 and len(fake.calls("POST", "/v2/pods")) == 1
    assert "balance" in res.json["headline"]


def test_every_candidate_refused_names_the_last_detail(fake, run):
    fake.no_capacity.update(g for g in GPUS.split(","))
    res = run("up", **UP, placement_timeout="0")
    assert res.code == 3 and "no instances available" in res.json["headline"]
    assert len(fake.calls("POST", "/v2/pods")) == 3


def test_a_pod_that_fails_to_start_is_terminated(fake, run):
    fake.fail_on_start.add("NVIDIA GeForce RTX 4090")
    res = run("up", **UP)
    assert res.code == 3 and "ERROR" in res.json["headline"]
    assert fake.pods == {} and len(fake.calls("DELETE", r"/v2/pods/\w+")) == 1


def _health_server(answers: list[int], hits: list[str]) -> LoopbackHTTPServer:
    """Answers each GET with the next of ``answers`` (then 200), recording its path."""

    class H(JsonAPIHandler):
        def do_GET(self):
            hits.append(self.path)
            self._reply(answers.pop(0) if answers else 200, {})

    return LoopbackHTTPServer(H)


def test_a_poll_interval_that_is_no_number_is_one_line_and_no_pod_is_left(fake, run):
    res = run("up", **UP, extra_env={"GPUCI_PODS_POLL_S": "5s"})
    assert res.code == 2, res.stdout
    assert "GPUCI_PODS_POLL_S='5s' is not a number" in res.json["headline"]
    assert fake.pods == {}


def test_up_waits_for_the_health_url(fake, run, clock):
    hits: list[str] = []
    with _health_server([503, 503], hits) as server:
        url = f"http://127.0.0.1:{server.port}/{{pod_id}}/v1/models"
        res = run("up", **UP, health_url=url)
    assert res.code == 0, res.stdout
    assert hits == [f"/{res.outputs['pod-id']}/v1/models"] * 3


def test_health_timeout_terminates_the_pod(fake, run):
    with _health_server([503] * 1000, []) as server:
        url = f"http://127.0.0.1:{server.port}/v1/models"
        res = run("up", **UP, health_url=url, timeout="1m")
    assert res.code == 3 and "health URL" in res.json["headline"]
    assert fake.pods == {}


def test_budget_skips_what_does_not_fit_and_refuses_when_nothing_does(fake, run, env, clock):
    book = ledger.Ledger.open(env["GPUCI_PODS_LEDGER"], env)
    book.record("created", "old-pod", 0.0, owner="alice", gpu="NVIDIA L40S")
    # alice spent $8 this period (4 h at $2/h ending 2 days ago) on a pod that is gone
    fake.charge("old-pod", clock.now() - 2 * 86400 - 4 * 3600, clock.now() - 2 * 86400, 2.0)
    order = "NVIDIA H100 80GB HBM3,NVIDIA L40S"  # 45m ttl + 15m reap interval = 1 h each
    first = run("up", **{**UP, "gpu_types": order}, budget_usd="9")
    assert first.code == 0, first.stdout
    assert [p.body["gpu"]["id"] for p in fake.calls("POST", "/v2/pods")] == ["NVIDIA L40S"]
    assert first.result.report["budget_refused"][0]["candidate"].startswith("NVIDIA H100")
    fake.requests.clear()
    second = run("up", **{**UP, "gpu_types": order}, budget_usd="9")
    assert second.code == 1 and "would pass budget $9.00" in second.json["headline"]
    assert fake.calls("POST", "/v2/pods") == []  # refused before any create
    bob = run("up", **{**UP, "gpu_types": order, "owner": "bob"}, budget_usd="9")
    assert bob.code == 0 and bob.outputs["gpu-type"] == "NVIDIA H100 80GB HBM3"  # per owner


def test_a_pod_id_no_url_holds_goes_into_no_url():
    """RunPod's answer names the pod id; ``evil.example/#`` in the proxy template sent the
    health check (and the url output) to another host."""
    from gpuci.errors import InfraError
    from gpuci.pods._lifecycle import common, readiness

    pod = {"id": "evil.example/#", "ports": ["8000/http"]}
    assert common.pod_url(pod, {}) == ""
    with pytest.raises(InfraError, match="pod id no URL can hold"):
        readiness.health_url("https://{pod_id}-8000.proxy.runpod.net/health", pod, "")
    good = {"id": "abc123", "ports": ["8000/http"]}
    assert common.pod_url(good, {}) == "https://abc123-8000.proxy.runpod.net"
    assert readiness.health_url("/h", good, "https://x") == "https://x/h"
