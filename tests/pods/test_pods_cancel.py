"""A cancelled job (SIGTERM during ``up``) terminates the pod it made, wherever ``up`` was."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from fake_runpod import FakeRunPod

from gpuci_testing import REPO, clean_env


@pytest.mark.parametrize(
    ("fake_options", "args"),
    [
        # waiting for RUNNING, which never comes
        ({"steps_to_running": 10**6}, ["--command", "serve"]),
        # the create call is in flight: the pod exists on RunPod, its id isn't known yet, so it
        # must be found by name (the response is still 5 s away when the signal lands)
        ({"create_delay": 5.0}, []),
    ],
    ids=["while-waiting", "while-creating"],
)
def test_sigterm_during_up_terminates_the_pod(tmp_path, fake_options, args):
    fake = FakeRunPod(**fake_options).start()
    try:
        env = clean_env(
            RUNPOD_API_KEY=fake.api_key,
            RUNPOD_API_URL=fake.url,
            USER="t",
            GPUCI_PODS_POLL_S="0.05",
            GPUCI_PODS_LEDGER=str(tmp_path / "l"),
            GPUCI_JOURNAL=str(tmp_path / "j"),
        )
        up = ["pods", "up", "--gpu-types", "NVIDIA L40S", "--image", "img", "--ttl", "10m"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuci", *up, *args],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 20
        while not fake.pods and time.time() < deadline:
            time.sleep(0.02)
        assert fake.pods, "up never created the pod"
        pod_id = next(iter(fake.pods))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 128 + signal.SIGTERM, out + err
        assert fake.pods == {}
        assert [r.status for r in fake.calls("DELETE", f"/v2/pods/{pod_id}")] == [204]
    finally:
        fake.stop()


@pytest.mark.parametrize(
    "fake_options",
    [{"steps_to_running": 10**6}, {"create_delay": 5.0}],
    ids=["while-waiting", "while-creating"],
)
@pytest.mark.parametrize("platform", ["github", "gitlab"])
def test_sigterm_during_up_with_a_runner_leaves_neither_pod_nor_runner(
    tmp_path, fake_options, platform
):
    from fake_ci_runners import FakeRunnersAPI

    fake = FakeRunPod(**fake_options).start()
    try:
        with FakeRunnersAPI() as api:
            ci = api.github_env() if platform == "github" else api.gitlab_env()
            env = clean_env(
                RUNPOD_API_KEY=fake.api_key,
                RUNPOD_API_URL=fake.url,
                USER="t",
                GPUCI_PODS_POLL_S="0.05",
                GPUCI_PODS_LEDGER=str(tmp_path / "l"),
                GPUCI_JOURNAL=str(tmp_path / "j"),
                **ci,
            )
            up = ["pods", "up", "--gpu-types", "NVIDIA L40S", "--ttl", "10m"]
            runner = ["--runner", platform, "--runner-labels", "gpu-large,run-9"]
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpuci", *up, *runner],
                env=env,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            deadline = time.time() + 20
            while not fake.pods and time.time() < deadline:
                time.sleep(0.02)
            assert fake.pods, "up never created the pod"
            assert len(api.state.runners) == 1  # registered before the pod was created
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=20)
            assert proc.returncode == 128 + signal.SIGTERM, out + err
            assert fake.pods == {}
            assert api.state.runners == {}, out + err
            for secret in api.state.issued:
                assert secret not in out + err
    finally:
        fake.stop()
