"""Smoke before handover: a pod whose GPU fails gpu-smoke stops itself and says so in its name;
``up`` terminates it, records the verdict and places another pod in another data centre,
inside the one budget reservation.

Each pod's real start script runs (``pod_host``) with the real gpu-smoke on a fake GPU: an
ECC error in EU-RO-1, healthy in US-KS-2 (the fake catalog lists the RTX 4090 in both,
EU-RO-1 first).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pod_host import PodHost
from pods_testing import RUN_ENV, up_runner

GPU = "NVIDIA GeForce RTX 4090"
UP = dict(gpu_types=GPU, image="img", command="sleep 600", ttl="30m", owner="alice")


def _posted_dcs(fake) -> list[list[str]]:
    return [c.body.get("dataCenterIds") for c in fake.calls("POST", "/v2/pods")]


def _records(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in store.rglob("*.json")]


REAL_TIME_CLOCK = True  # the conftest's ``clock``: pods' timers and the health record run on it
BAD_DCS = {"EU-RO-1"}  # the conftest's ``host``: an ECC error there


def test_a_pod_that_fails_its_smoke_is_replaced_in_another_data_centre(fake, run, host, tmp_path):
    store = tmp_path / "health"
    res = run("up", smoke="true", budget_usd="20", health_store=store.as_uri(), **UP)
    assert res.code == 0, res.stdout + res.stderr
    first, second = [c.body["name"] for c in fake.calls("POST", "/v2/pods")]
    assert first != second  # a new pod name (tag nonce), the same owner and expiry
    assert _posted_dcs(fake) == [["EU-RO-1", "US-KS-2"], ["US-KS-2"]]
    assert res.outputs["data-center"] == "US-KS-2"
    (bad_id,) = [p for p in host.booted if p != res.outputs["pod-id"]]
    assert list(fake.pods) == [res.outputs["pod-id"]]  # the failed pod is terminated
    # the failed pod stopped itself with its own key, after writing its verdict
    stops = fake.calls("POST", f"/v2/pods/{bad_id}/action")
    assert [c.body for c in stops] == [{"action": "stop"}]
    assert "hardware failure" in host.booted[bad_id]

    smoke = res.json["report"]["smoke"]
    assert [a["data_center"] for a in smoke["attempts"]] == ["EU-RO-1", "US-KS-2"]
    assert smoke["attempts"][0]["verdict"].startswith("hardware: GPU-")
    assert "gpu0:health" in smoke["attempts"][0]["verdict"]
    assert all(a["cost_usd"] > 0 for a in smoke["attempts"])
    assert smoke["total_usd"] <= smoke["reserved_usd"]
    summary = res.json["summary_markdown"]
    assert "gpu-smoke before handover" in summary and bad_id in summary

    (record,) = _records(store)
    assert record["passed"] is False and record["data_center"] == "EU-RO-1"
    assert record["pod"] == bad_id and record["uuid"].startswith("GPU-")
    assert record["failed_checks"] == ["health"]
    out = res.stdout + res.stderr + "".join(host.booted.values())
    assert fake.api_key not in out

    # next time, placement keeps off the data centre in the record
    again = run("up", smoke="false", health_store=store.as_uri(), **UP)
    assert again.code == 0, again.stdout
    assert _posted_dcs(fake)[-1] == ["US-KS-2"]


def test_a_runner_pod_smokes_before_its_runner_and_gets_a_new_registration(fake, run, host, api):
    api.state.online_after_reads = 1
    res = up_runner(run, api.github_env(**RUN_ENV), gpu_types=GPU)
    assert res.code == 0, res.stdout + res.stderr
    assert _posted_dcs(fake) == [["EU-RO-1", "US-KS-2"], ["US-KS-2"]]
    (runner,) = api.state.runners.values()  # the first, one-use, was deleted
    assert res.outputs["runner-name"] == runner.name
    pod = fake.pods[res.outputs["pod-id"]]
    assert pod["env"]["GPUCI_RUNNER_NAME"] == runner.name
    names = {c.body["name"] for c in fake.calls("POST", "/v2/pods")}
    assert len(names) == 2
    assert len(res.json["report"]["smoke"]["attempts"]) == 2
    jit = [c.body["env"]["GPUCI_RUNNER_JITCONFIG"] for c in fake.calls("POST", "/v2/pods")]
    out = res.stdout + res.stderr + "".join(host.booted.values())
    for secret in [fake.api_key, api.state.github_token, *jit]:
        assert secret not in out


def test_no_other_data_centre_left_fails_with_every_attempt_and_its_cost(fake, run, host, tmp_path):
    res = run("up", smoke="true", data_centers="EU-RO-1", budget_usd="20", **UP)
    assert res.code == 1, res.stdout
    assert "no other data centre is left" in res.json["headline"]
    assert fake.pods == {} and len(fake.calls("POST", "/v2/pods")) == 1
    (attempt,) = res.json["report"]["smoke"]["attempts"]
    assert attempt["data_center"] == "EU-RO-1" and attempt["cost_usd"] > 0
    assert "gpu-smoke before handover" in res.json["summary_markdown"]


def test_smoke_attempts_bounds_the_pods_placed(fake, run, host):
    host.bad.add("US-KS-2")
    res = run("up", smoke="true", smoke_attempts="2", **UP)
    assert res.code == 1, res.stdout
    assert "all 2 pod(s)" in res.json["headline"]
    assert fake.pods == {} and len(fake.calls("POST", "/v2/pods")) == 2


def test_no_gpu_ci_on_the_pod_is_no_verdict_and_never_replaced(fake, run, clock, tmp_path):
    PodHost(fake, tmp_path, {"EU-RO-1"}, GPUCI_SMOKE_PYTHON="false").attach(clock)
    res = run("up", smoke="true", **UP)
    assert res.code == 0, res.stdout
    assert len(fake.calls("POST", "/v2/pods")) == 1 and res.outputs["data-center"] == "EU-RO-1"
    warned = [a["message"] for a in res.json["annotations"] if "no verdict" in a["message"]]
    assert len(warned) == 1 and "handed over unchecked" in warned[0]
    assert fake.calls("POST", f"/v2/pods/{res.outputs['pod-id']}/action") == []


def test_the_plan_shows_the_gate_on_by_default_only_for_runner_pods(run):
    plain = run("up", dry_run=True, **UP)
    body = plain.json["report"]["plan"]["requests"][0]["body"]
    assert "GPUCI_SMOKE" not in body["env"]
    assert plain.json["report"]["plan"]["smoke"] == {"before_handover": False, "attempts": 1}
    gated = run("up", dry_run=True, smoke="true", smoke_attempts="3", **UP)
    env = gated.json["report"]["plan"]["requests"][0]["body"]["env"]
    assert env["GPUCI_SMOKE"] == "1" and "gpuci_smoke_gate" in env["GPUCI_WRAPPER"]
    assert gated.json["report"]["plan"]["smoke"] == {"before_handover": True, "attempts": 3}
    runner = up_runner(
        run, {"GITHUB_REPOSITORY": "octo/gpu"}, dry_run=True, gpu_types=GPU, runner_labels="gpu"
    )
    env = runner.json["report"]["plan"]["requests"][0]["body"]["env"]
    assert env["GPUCI_SMOKE"] == "1"
    assert "gpuci_smoke_gate" not in env["GPUCI_WRAPPER"]  # the start script has the gate
    assert "gpuci_smoke_gate ||" in env["GPUCI_START_COMMAND"]


def test_a_pod_given_the_store_records_its_own_verdict_once(fake, run, clock, tmp_path):
    store = tmp_path / "health"
    PodHost(fake, tmp_path, {"EU-RO-1"}, GPUCI_GPU_HEALTH_STORE=store.as_uri()).attach(clock)
    res = run("up", smoke="true", health_store=store.as_uri(), **UP)
    assert res.code == 0, res.stdout
    failed = [r for r in _records(store) if r["passed"] is False]
    assert len(failed) == 1 and failed[0]["data_center"] == "EU-RO-1"
    assert failed[0]["checks"][0]["reason"] != "gpu-smoke on the pod"  # the pod's own record
    assert [r["data_center"] for r in _records(store) if r["passed"]] == ["US-KS-2"]


def _first_verdict(fake):
    """The verdict the first (failed) pod wrote into its name, read as up reads it."""
    from gpuci.pods.health._handover import verdict_of

    first = fake.calls("POST", "/v2/pods")[0]
    pod_id = fake.calls("DELETE")[0].path.rsplit("/", 1)[1]
    assert first.body["name"] in fake.calls("PATCH", f"/v2/pods/{pod_id}")[-1].body["name"]
    return verdict_of(fake.calls("PATCH", f"/v2/pods/{pod_id}")[-1].body)


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_the_verdict_names_every_failed_gpu_whole(fake, run, host, gpus):
    """No cut: 8 GPUs' UUIDs (~330 characters) reach up whole, with their checks."""
    host.gpus = gpus
    res = run("up", smoke="true", gpu_count=str(gpus), **UP)
    assert res.code == 0, res.stdout
    verdict = _first_verdict(fake)
    assert verdict is not None and verdict.kind == "failed" and not verdict.recorded
    assert len(verdict.uuids) == gpus == len(set(verdict.uuids))
    assert all(u.startswith("GPU-") and len(u) >= 40 for u in verdict.uuids)
    assert {c.split(":")[0] for c in verdict.checks} == {f"gpu{i}" for i in range(gpus)}
    attempts = res.json["report"]["smoke"]["attempts"]
    (failed,) = [a for a in attempts if a["verdict"].startswith("hardware")]
    assert all(u in failed["verdict"] for u in verdict.uuids)


def test_a_rename_answered_429_then_503_is_retried(fake, run, host):
    fake.fail(r"PATCH /v2/pods/\w+", (429, {"Retry-After": "0"}), (503, {}))
    res = run("up", smoke="true", **UP)
    assert res.code == 0, res.stdout
    assert _posted_dcs(fake) == [["EU-RO-1", "US-KS-2"], ["US-KS-2"]]  # re-placed, not timed out
    assert [c.status for c in fake.calls("PATCH")][:3] == [429, 503, 200]


def test_a_refused_rename_is_named_and_the_stop_is_the_verdict(fake, run, host, api):
    """RunPod's docs grant the pod's key stop and remove only: with the rename refused, a
    runner pod that fails its smoke says so in one line and stops itself, and up reads that
    stop as the verdict (the healthy pod's runner coming online is its pass)."""
    fake.pod_key_may_rename = False
    api.state.online_after_reads = 1
    res = up_runner(run, api.github_env(**RUN_ENV), gpu_types=GPU)
    assert res.code == 0, res.stdout + res.stderr + str(host.booted)
    assert _posted_dcs(fake) == [["EU-RO-1", "US-KS-2"], ["US-KS-2"]]
    assert {c.status for c in fake.calls("PATCH")} == {403}
    log = next(iter(host.booted.values()))  # the first pod's, the one that failed
    refused = [ln for ln in log.splitlines() if "refused this pod's key" in ln]
    assert len(refused) == 1 and "HTTP 403" in refused[0], log
    attempts = res.json["report"]["smoke"]["attempts"]
    (failed,) = [a for a in attempts if a["verdict"].startswith("hardware")]
    assert "no verdict in its name" in failed["verdict"]


def test_a_refused_rename_on_a_pod_without_a_runner_names_the_cause(fake, run, host):
    host.bad.clear()  # a healthy pod whose pass cannot travel
    fake.pod_key_may_rename = False
    res = run("up", smoke="true", timeout="2m", **UP)
    assert res.code == 3 and fake.pods == {}
    assert "refused its key renaming it" in res.json["headline"], res.json["headline"]
