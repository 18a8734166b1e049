"""The owner an ended pod's event records is the pod's own (its tag, as RunPod lists it), the
one its budget counted while it lived: never the first ``created`` event's, which anyone with
write access to the ledger can plant. The event says which it was (``ownerFrom``)."""

from __future__ import annotations

import json

from pods_testing import L40S

from gpuci.pods._budgets import ledger

UP = dict(image="img", command="serve", ttl="30m", gpu_types=L40S, owner="alice")


def _plant_created(tmp_path, pod: str, owner: str) -> None:
    """A ``created`` event older than gpu-ci's: the ledger's first for the pod."""
    item = {"event": "created", "podId": pod, "owner": owner, "time": 1}
    path = tmp_path / "ledger" / ledger.EVENTS / pod / f"{1000:015d}-created-0bad.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(item))


def _ended(env, pod: str, kind: str) -> dict:
    events = ledger.Ledger.open(env["GPUCI_PODS_LEDGER"], env).events(pod)
    (event,) = [e for e in events if e["event"] == kind]
    return event


def test_a_reaped_pod_is_recorded_under_its_tags_owner(fake, run, clock, env, tmp_path):
    """A planted older ``created`` event naming mallory made reap record alice's pod as
    mallory's: alice's reaped pod counted for mallory."""
    pod = run("up", **UP).outputs["pod-id"]
    _plant_created(tmp_path, pod, "mallory")
    clock.advance(2 * 3600)
    assert run("reap").outputs["pod-ids"] == pod
    reaped = _ended(env, pod, "reaped")
    assert (reaped["owner"], reaped["ownerFrom"]) == ("alice", "pod")
    owners = run("cost").json["report"]["owners"]
    assert owners["alice"]["reaped_pods"] == 1
    assert owners.get("mallory", {}).get("reaped_pods", 0) == 0


def test_a_downed_pod_is_recorded_under_its_tags_owner(fake, run, env, tmp_path):
    pod = run("up", **UP).outputs["pod-id"]
    _plant_created(tmp_path, pod, "mallory")
    assert run("down", pod_id=pod).code == 0
    ended = _ended(env, pod, "terminated")
    assert (ended["owner"], ended["ownerFrom"]) == ("alice", "pod")


def test_a_pod_runpod_no_longer_shows_is_recorded_under_the_ledgers_owner(fake, run, env):
    """No pod to read a tag from: the ledger's first ``created`` event's owner, said so."""
    pod = run("up", **UP).outputs["pod-id"]
    fake.api("DELETE", f"/v2/pods/{pod}")
    assert run("down", pod_id=pod).code == 0
    ended = _ended(env, pod, "terminated")
    assert (ended["owner"], ended["ownerFrom"]) == ("alice", "ledger")
