"""ls, stop, start, down and reap: idempotent, tag-aware, asserted on what the fake received."""

from __future__ import annotations

import pytest
from fake_runpod import VALIDATORS

from gpuci.units import utc_iso

UP = dict(gpu_types="NVIDIA L40S", image="img", command="serve", ttl="30m", owner="alice")
GH = {
    "GITHUB_RUN_ID": "42",
    "GITHUB_REPOSITORY": "org/repo",
    "GITHUB_SERVER_URL": "https://github.com",
}


def test_ls_shows_only_our_pods_unless_all(fake, run, clock):
    mine = run("up", **UP).outputs["pod-id"]
    other = fake.hand_made("someone-elses")
    res = run("ls")
    assert res.outputs == {"pod-ids": mine, "count": "1"}
    row = res.json["report"]["pods"][0]
    assert row["owner"] == "alice" and row["expires_at"] == utc_iso(clock.now() - 5 + 1800)
    assert set(run("ls", all="true").outputs["pod-ids"].split(",")) == {mine, other}
    assert run("ls", owner="bob").outputs["count"] == "0"


def test_stop_twice_is_fine(fake, run):
    pod = run("up", **UP).outputs["pod-id"]
    fake.requests.clear()
    first, second = run("stop", pod_id=pod), run("stop", pod_id=pod)
    assert first.code == second.code == 0
    assert first.result.report["done"] == {pod: "stopped"}
    assert second.result.report["done"] == {pod: "already stopped"}
    actions = fake.calls("POST", f"/v2/pods/{pod}/action")
    assert [(a.body, a.status) for a in actions] == [({"action": "stop"}, 200)] * 1 + [
        ({"action": "stop"}, 409)
    ]
    assert fake.pods[pod]["status"] == "EXITED"


def test_start_with_ttl_moves_the_expiry_in_name_and_env(fake, run, clock):
    pod = run("up", **UP).outputs["pod-id"]
    run("stop", pod_id=pod)
    clock.advance(3600)  # long past the first expiry
    refused = run("start", pod_id=pod)
    assert refused.code == 2 and "expired" in refused.json["headline"]
    fake.requests.clear()
    res = run("start", pod_id=pod, ttl="2h")
    assert res.code == 0, res.stdout
    patch = fake.calls("PATCH", f"/v2/pods/{pod}")[0]
    assert list(VALIDATORS["UpdatePodRequest"].iter_errors(patch.body)) == []
    new_exp = utc_iso(clock.now() + 7200)
    assert (
        f"exp={new_exp}" in patch.body["name"] and patch.body["env"]["GPUCI_EXPIRES_AT"] == new_exp
    )
    assert patch.body["env"]["GPUCI_START_COMMAND"] == "serve"  # PATCH replaces env: kept whole
    assert [a.body for a in fake.calls("POST", f"/v2/pods/{pod}/action")] == [{"action": "start"}]
    assert fake.pods[pod]["status"] == "STARTING"


def test_start_with_ttl_never_updates_a_running_pods_env(fake, run):
    """RunPod restarts a pod whose env is updated: ttl on a running pod is refused, saying so,
    and the pod is not touched."""
    pod = run("up", **UP).outputs["pod-id"]
    assert fake.pods[pod]["status"] == "RUNNING"
    fake.requests.clear()
    res = run("start", pod_id=pod, ttl="2h")
    assert res.code == 2, res.stdout
    assert "restarts a pod whose env is updated" in res.json["headline"]
    assert f"pods stop {pod}" in res.json["headline"]
    assert fake.calls("PATCH") == [] and fake.restarts == []
    assert fake.pods[pod]["status"] == "RUNNING"


def test_a_pod_that_starts_with_0_gpus_is_stopped_again_and_named_in_one_line(fake, run):
    """RunPod's docs: a restarted pod "may be reallocated 0 GPUs" (its GPUs went to another
    pod while it was stopped). start says so in one line, with what to do, and stops it."""
    pod = run("up", **UP).outputs["pod-id"]
    run("stop", pod_id=pod)
    fake.zero_gpus_on_start.add(pod)
    res = run("start", pod_id=pod)
    assert res.code == 3, res.stdout
    line = res.json["headline"]
    assert f"pod {pod} came back with 0 GPUs" in line and f"pods down {pod}" in line
    assert "\n" not in line
    actions = [a.body["action"] for a in fake.calls("POST", f"/v2/pods/{pod}/action")]
    assert actions == ["stop", "start", "stop"] and fake.pods[pod]["status"] == "EXITED"


def test_the_catalog_is_read_for_the_gpu_count_asked(fake, run):
    """Availability depends on the count: the fake lists a type with no availability for more
    GPUs than its maxCount, so up asks for its count and places nothing it cannot get."""
    res = run("up", **{**UP, "gpu_count": "2"})
    assert res.code == 0, res.stdout
    (read,) = fake.calls("GET", "/v2/catalog/gpus")
    assert read.query["count"] == ["2"] and read.query["product"] == ["POD"]
    too_many = run("up", **{**UP, "gpu_count": "9"})
    assert too_many.code != 0
    assert list(fake.pods) == [res.outputs["pod-id"]]  # no 9-GPU pod was made


def test_down_is_idempotent_and_missing_is_success(fake, run):
    pod = run("up", **UP).outputs["pod-id"]
    first, second = run("down", pod_id=pod), run("down", pod_id=pod)
    assert first.code == second.code == 0
    assert first.result.report["done"] == {pod: "terminated"}
    assert second.result.report["done"] == {pod: "already gone"}
    assert [r.status for r in fake.calls("DELETE", f"/v2/pods/{pod}")] == [204, 404]


def test_down_without_ids_ends_every_pod_of_this_run_only(fake, run):
    ours = [run("up", **UP, extra_env=GH).outputs["pod-id"] for _ in range(2)]
    theirs = run("up", **UP, extra_env={**GH, "GITHUB_RUN_ID": "43"}).outputs["pod-id"]
    untagged = fake.hand_made("someone-elses")
    res = run("down", extra_env=GH)
    assert res.code == 0 and sorted(res.outputs["pod-ids"].split(",")) == sorted(ours)
    assert set(fake.pods) == {theirs, untagged}
    assert run("down", extra_env=GH).json["headline"] == "nothing to terminate"


def test_down_with_an_empty_id_on_gitlab_ends_this_pipelines_pods(fake, run):
    gitlab = {"CI_PIPELINE_URL": "https://gitlab.example/g/p/-/pipelines/9"}
    mine = run("up", **UP, extra_env=gitlab).outputs["pod-id"]
    other = run("up", **UP).outputs["pod-id"]
    res = run("down", pod_id="", extra_env=gitlab)
    assert res.code == 0 and res.outputs["pod-ids"] == mine and set(fake.pods) == {other}


def test_down_outside_ci_needs_an_id(run):
    res = run("down")
    assert res.code == 2 and "pod-id" in res.json["headline"]


def test_down_reports_a_failed_teardown_and_keeps_going(fake, run):
    a, b = (run("up", **UP).outputs["pod-id"] for _ in range(2))
    fake.fail(f"DELETE /v2/pods/{a}", *[(503, {})] * 6)
    res = run("down", pod_id=f"{a},{b}")
    assert res.code == 3 and "1 of 2 pod(s) failed" in res.json["headline"]
    assert res.result.report["done"] == {b: "terminated"} and a in res.result.report["failed"]
    assert set(fake.pods) == {a}  # b went; a is left for the reaper


def test_reap_ends_expired_tagged_pods_once(fake, run, clock):
    short = run("up", **{**UP, "ttl": "10m"}).outputs["pod-id"]
    long = run("up", **{**UP, "ttl": "2h"}).outputs["pod-id"]
    other = fake.hand_made("someone-elses")
    clock.advance(11 * 60)
    dry = run("reap", dry_run=True)
    assert dry.outputs["pod-ids"] == short and short in fake.pods  # dry run removes nothing
    fake.requests.clear()
    res = run("reap")
    assert res.code == 0 and res.outputs["pod-ids"] == short
    assert [r.path for r in fake.calls("DELETE")] == [f"/v2/pods/{short}"]
    assert set(fake.pods) == {long, other}
    again = run("reap")
    assert again.code == 0 and again.outputs["count"] == "0"


def test_reap_grace_and_owner_filter(fake, run, clock):
    pod = run("up", **{**UP, "ttl": "10m"}).outputs["pod-id"]
    clock.advance(11 * 60)
    assert run("reap", grace="5m").outputs["count"] == "0"
    assert run("reap", owner="bob").outputs["count"] == "0"
    assert run("reap", owner="alice").outputs["pod-ids"] == pod


@pytest.mark.parametrize("expiry", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_an_expiry_utc_cannot_show_is_unreadable_never_an_internal_error(fake, run, expiry):
    """Anyone with the account key writes a pod's env: a valid time that is year 0 or 10000 in
    UTC lists with no expiry, is left alone by reap (as any unreadable expiry is) and does
    not stop ``pods start``, where it was an internal error for everyone's ``pods ls``."""
    pod = fake.hand_made("anything", "EXITED")
    fake.pods[pod]["env"] = {"GPUCI_OWNER": "mallory", "GPUCI_EXPIRES_AT": expiry}
    for listed in (run("ls"), run("ls", all="true")):
        assert listed.code == 0, listed.stdout
        assert [(p["id"], p["expires_at"]) for p in listed.json["report"]["pods"]] == [(pod, None)]
    assert run("reap").code == 0 and pod in fake.pods
    started = run("start", pod_id=pod)
    assert started.code == 0 and started.result.report["done"] == {pod: "started"}
