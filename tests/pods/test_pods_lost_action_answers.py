"""An action that took effect but whose answer was lost: its retry's refusal is not the error.

RunPod's podAction answers 409 to an action the pod's status no longer allows, and deletePod 404
to a pod already gone (the fake answers as the spec says). So a stop whose answer was cut, whose
connection closed after the server acted, or whose front end answered 502 after the backend
acted, is retried, refused, and the pod is then read: EXITED is "already stopped", as a start's
STARTING or RUNNING is "already started" and a terminate's 404 "already gone". Without the lost
answer (a 409 on the first attempt, or after a 429, which RunPod refuses unread) the refusal
stays the error.
"""

from __future__ import annotations

import pytest

from gpuci.pods._runpod.client import RunPodClient
from gpuci.pods._runpod.errors import InvalidTransition

UP = dict(gpu_types="NVIDIA L40S", image="img", command="serve", ttl="30m", owner="alice")
#: action -> (the status the pod is in before, those it may be in after (None: gone), its route)
ACTIONS = {
    "stop": ("RUNNING", ("EXITED",), "POST /v2/pods/{}/action"),
    "start": ("EXITED", ("STARTING", "RUNNING"), "POST /v2/pods/{}/action"),  # a read steps it
    "terminate": ("RUNNING", (None,), "DELETE /v2/pods/{}"),
}
# terminate answers 204 with no body: there is nothing of it to cut
LOST = [
    (a, how) for a in ACTIONS for how in ("cut", "drop", "502") if (a, how) != ("terminate", "cut")
]


def client(fake, clock) -> RunPodClient:
    return RunPodClient(fake.api_key, fake.url, clock=clock)


def _act(c: RunPodClient, pod: str, action: str):
    return c.delete_pod(pod) if action == "terminate" else c.action(pod, action)


@pytest.mark.parametrize(("action", "how"), LOST)
def test_an_action_whose_answer_was_lost_is_done_when_its_retry_is_refused(
    fake, clock, action, how
):
    before, after, route = ACTIONS[action]
    pod = fake.hand_made("by-hand", before)
    method, path = route.format(pod).split()
    fake.wire.garble(f"{method} {path}", how)
    with client(fake, clock) as c:
        c.list_pods()  # the action reuses this connection: a drop there looks unread
        acted = _act(c, pod, action)
    assert acted.already and acted.lost and acted.ours
    assert len(clock.sleeps) == (how != "drop")  # a reused connection's drop looked unread
    assert [r.status for r in fake.calls(method, path)] == [
        204 if action == "terminate" else 200,
        404 if action == "terminate" else 409,
    ]
    assert (fake.pods[pod]["status"] if pod in fake.pods else None) in after
    if pod in fake.pods:  # read after the refusal: the pod as the action left it
        assert acted.pod is not None and acted.pod["status"] in after


@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_refusal_of_a_first_attempt_stays_the_error(fake, clock, action):
    """No answer was lost: the pod was in another status before the call (a 409 for each
    action, as the spec says; a terminate's is a cluster pod's, scripted). Only a terminate,
    where gone is done at any attempt (``down`` of a gone pod), reads the pod: it is there."""
    before, _, route = ACTIONS[action]
    pod = fake.hand_made("by-hand", {"stop": "EXITED", "start": "RUNNING"}.get(action, before))
    method, path = route.format(pod).split()
    if action == "terminate":
        fake.fail(f"{method} {path}", (409, {}))
    with client(fake, clock) as c, pytest.raises(InvalidTransition) as err:
        _act(c, pod, action)
    assert "HTTP 409" in err.value.one_line() and pod in fake.pods
    assert len(fake.calls("GET", f"/v2/pods/{pod}")) == (action == "terminate")


def test_a_refusal_after_a_429_stays_the_error(fake, clock):
    """RunPod refuses a 429 unread: the 409 after it is the pod's own status (EXITED before
    the stop was sent), not a lost stop's."""
    pod = fake.hand_made("by-hand", "EXITED")
    fake.fail(f"POST /v2/pods/{pod}/action", (429, {"Retry-After": "1"}))
    with client(fake, clock) as c, pytest.raises(InvalidTransition):
        c.action(pod, "stop")
    assert fake.calls("GET", f"/v2/pods/{pod}") == []


def test_a_lost_answer_then_a_refusal_the_pod_does_not_bear_out_is_the_error(fake, clock):
    """The 502 came from a backend that did not act (the pod is RUNNING), and someone stopped
    the pod's start in between: the retry's 409 is read, and RUNNING is not EXITED."""
    pod = fake.hand_made("by-hand", "RUNNING")
    route = f"POST /v2/pods/{pod}/action"
    fake.fail(route, (502, {}), (409, {}))
    with client(fake, clock) as c, pytest.raises(InvalidTransition):
        c.action(pod, "stop")
    assert len(fake.calls("GET", f"/v2/pods/{pod}")) == 1 and fake.pods[pod]["status"] == "RUNNING"


@pytest.mark.parametrize("how", ["cut", "drop"])
def test_pods_stop_and_start_whose_answer_was_lost_succeed_and_say_so(fake, run, how):
    pod = run("up", **UP).outputs["pod-id"]
    fake.wire.garble(f"POST /v2/pods/{pod}/action", how)
    stopped = run("stop", pod_id=pod)
    assert stopped.code == 0, stopped.stdout
    assert stopped.result.report["done"] == {pod: "already stopped"}
    fake.wire.garble(f"POST /v2/pods/{pod}/action", how)
    started = run("start", pod_id=pod)
    assert started.code == 0, started.stdout
    assert started.result.report["done"] == {pod: "already started"}
    assert fake.pods[pod]["status"] in ("STARTING", "RUNNING")


def test_pods_down_whose_connection_dropped_after_the_terminate_succeeds(fake, run):
    pod = run("up", **UP).outputs["pod-id"]
    fake.wire.garble(f"DELETE /v2/pods/{pod}", "drop")
    res = run("down", pod_id=pod)
    assert res.code == 0 and res.result.report["done"] == {pod: "already gone"}
    assert [r.status for r in fake.calls("DELETE", f"/v2/pods/{pod}")] == [204, 404]
    assert fake.pods == {}


def test_reap_whose_terminate_answer_was_lost_ends_the_pod_once(fake, run, clock):
    """reap (and its runner half) ends pods through the same call as down."""
    pod = run("up", **{**UP, "ttl": "10m"}).outputs["pod-id"]
    clock.advance(11 * 60)
    fake.wire.garble(f"DELETE /v2/pods/{pod}", "502")
    res = run("reap")
    assert res.code == 0 and res.outputs["pod-ids"] == pod, res.stdout
    assert [r.status for r in fake.calls("DELETE", f"/v2/pods/{pod}")] == [204, 404]
    assert fake.pods == {}
