"""The in-pod self-stop wrapper, run for real with ``sh`` against the fake API."""

from __future__ import annotations

import time

import pytest
from fake_runpod import FakeRunPod
from pod_container import run_container
from pods_testing import planned_pod, tools_only

from gpuci.pods._runpod import plan

LIVE_STEPS_TO_RUNNING = 0  # the conftest's ``live``: pods RUNNING at once


def _pod(fake: FakeRunPod, expires_in: float) -> tuple[str, dict[str, str], str]:
    spec = plan.PodSpec(image="img", command="echo started; sleep 30")
    pod_id, env, args = planned_pod(fake, spec, time.time() + expires_in)
    assert fake.pods[pod_id]["status"] == "RUNNING"
    return pod_id, env, args


def _run_pod(fake, pod_id, env, args, path, wait_s=60.0):
    """Start the container command as RunPod would; wait while the pod is RUNNING."""
    out, err, _ = run_container(
        fake,
        pod_id,
        {**env, "PATH": path},
        args,
        lambda: fake.pods[pod_id]["status"] != "RUNNING",
        wait_s,
    )
    return out, err


@pytest.mark.parametrize("tools", [["curl"], ["wget"], ["python3"]], ids=lambda t: t[0])
def test_the_pod_stops_itself_at_its_expiry(live, tmp_path, tools):
    pod_id, env, args = _pod(live, expires_in=1.5)
    started = time.time()
    path = tools_only(tmp_path / "bin", ["sh", "date", "sleep", *tools])
    out, err = _run_pod(live, pod_id, env, args, path)
    assert "started" in out  # the user's command ran (exec'd by the wrapper)
    assert live.pods[pod_id]["status"] == "EXITED", err
    stops = live.calls("POST", f"/v2/pods/{pod_id}/action")
    assert [s.body for s in stops] == [{"action": "stop"}]
    assert stops[0].auth == f"Bearer {live.pod_key(pod_id)}"  # the pod's own key, its own id
    assert time.time() - started >= 1.0  # not before the expiry


def test_the_timer_retries_until_the_api_answers(live, tmp_path):
    pod_id, env, args = _pod(live, expires_in=0.5)
    live.fail(f"POST /v2/pods/{pod_id}/action", (503, {}), (429, {"Retry-After": "1"}))
    path = tools_only(tmp_path / "bin", ["sh", "date", "sleep", "curl"])
    _run_pod(live, pod_id, env, args, path)
    assert [r.status for r in live.calls("POST", f"/v2/pods/{pod_id}/action")] == [503, 429, 200]
    assert live.pods[pod_id]["status"] == "EXITED"
