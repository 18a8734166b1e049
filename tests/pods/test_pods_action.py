"""actions/gpu-pod run as the runner would (tests/actions/harness.py) against the fake API."""

from __future__ import annotations

import sys
from pathlib import Path

from fake_runpod import FakeRunPod
from pods_testing import api_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "actions"))
from action_env import run_gpuci_action


def _job(live: FakeRunPod, tmp_path: Path) -> dict[str, str]:
    return api_env(
        live, tmp_path, GITHUB_RUN_ID="7", GITHUB_REPOSITORY="org/repo", GITHUB_ACTOR="octocat"
    )


def test_up_then_down_in_an_always_job(live, tmp_path):
    job = _job(live, tmp_path)
    up = run_gpuci_action(
        tmp_path,
        "actions/gpu-pod",
        {
            "action": "up",
            "gpu-types": "NVIDIA L40S",
            "image": "img",
            "command": "serve",
            "ports": "8000/http",
            "ttl": "30m",
            "budget-usd": "50",
            "env": "HF_TOKEN=hf_abcdef123456\nMODEL=m",
        },
        **job,
    )
    assert up.ok, up.log
    pod_id = up.outputs["pod-id"]
    assert pod_id in live.pods and up.outputs["status"] == "RUNNING"
    assert up.outputs["cost-per-hr"] == "0.86"
    assert up.outputs["url"] == f"https://{pod_id}-8000.proxy.runpod.net"
    body = live.calls("POST", "/v2/pods")[0].body
    assert (
        "owner=octocat" in body["name"]
        and "run=https://github.com/org/repo/actions/runs/7" in (body["name"])
    )
    assert live.api_key not in up.log and "hf_abcdef123456" not in up.log
    assert "| pod | GPU |" in up.summary
    down = run_gpuci_action(tmp_path, "actions/gpu-pod", {"action": "down"}, **job)
    assert down.ok, down.log
    assert down.outputs["pod-ids"] == pod_id and live.pods == {}
    again = run_gpuci_action(tmp_path, "actions/gpu-pod", {"action": "down"}, **job)
    assert again.ok and again.outputs["pod-ids"] == ""


def test_an_unknown_action_is_bad_input(live, tmp_path):
    run = run_gpuci_action(
        tmp_path, "actions/gpu-pod", {"action": "explode"}, **_job(live, tmp_path)
    )
    assert run.exit_code == 2 and live.requests == []
    assert "not one of up, ls" in run.annotations[0].message


def test_every_runner_input_reaches_the_cli_and_down_deletes_the_runner(live, api, tmp_path):
    """Each runner input, set to a non-default value, shows in what GitHub and the pod got:
    an input the action forgot to pass through env: would leave its default here."""
    api.state.groups["/orgs/org"] = {1, 3}  # GitHub refuses a group the org lacks
    job = {**_job(live, tmp_path), **api.github_env(GITHUB_REPOSITORY="org/repo")}
    up = run_gpuci_action(
        tmp_path,
        "actions/gpu-pod",
        {
            "action": "up",
            "gpu-types": "NVIDIA L40S",
            "runner": "github",
            "runner-labels": "run-7",
            "runner-group-id": "3",
            "runner-scope": "org",
            "runner-idle-timeout": "90s",
        },
        **job,
    )
    assert up.ok, up.log
    ((path, jit),) = [(p, b) for m, p, b in api.state.requests if "jitconfig" in p]
    assert path == "/api/v3/orgs/org/actions/runners/generate-jitconfig"  # runner-scope
    assert jit["labels"] == ["run-7"]  # runner-labels, and nothing else
    assert jit["runner_group_id"] == 3  # runner-group-id
    (created,) = live.calls("POST", "/v2/pods")
    assert created.body["env"]["GPUCI_RUNNER_IDLE_S"] == "90"  # runner-idle-timeout
    assert created.body["env"]["GPUCI_RUNNER_PLATFORM"] == "github"  # runner
    assert up.outputs["runner-name"] == jit["name"]
    (config,) = api.state.issued
    assert config not in up.log and api.state.github_token not in up.log
    # down (no pod id, scope org like up) ends the pod and deletes its runner.
    down = run_gpuci_action(
        tmp_path, "actions/gpu-pod", {"action": "down", "runner-scope": "org"}, **job
    )
    assert down.ok, down.log
    assert live.pods == {} and api.state.runners == {}
