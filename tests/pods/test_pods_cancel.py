"""A cancelled job (SIGTERM while ``up`` waits) terminates the pod it made."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from fake_runpod import FakeRunPod

from gpuci_testing import REPO, clean_env


def test_sigterm_during_the_wait_terminates_the_pod(tmp_path):
    fake = FakeRunPod(steps_to_running=10**6).start()  # never gets to RUNNING
    try:
        env = clean_env(
            RUNPOD_API_KEY=fake.api_key,
            RUNPOD_API_URL=fake.url,
            USER="t",
            GPUCI_PODS_POLL_S="0.05",
            GPUCI_PODS_LEDGER=str(tmp_path / "l"),
            GPUCI_JOURNAL=str(tmp_path / "j"),
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuci",
                "pods",
                "up",
                "--gpu-types",
                "NVIDIA L40S",
                "--image",
                "img",
                "--command",
                "serve",
                "--ttl",
                "10m",
            ],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 20
        while not fake.pods and time.time() < deadline:
            time.sleep(0.05)
        assert fake.pods, "up never created the pod"
        pod_id = next(iter(fake.pods))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 128 + signal.SIGTERM, out + err
        assert fake.pods == {}
        assert [r.status for r in fake.calls("DELETE", f"/v2/pods/{pod_id}")] == [204]
    finally:
        fake.stop()


def test_sigterm_while_the_create_call_is_in_flight_terminates_the_pod(tmp_path):
    """The pod exists on RunPod but ``up`` hasn't seen its id yet: found by name, ended."""
    fake = FakeRunPod(create_delay=5.0).start()
    try:
        env = clean_env(
            RUNPOD_API_KEY=fake.api_key,
            RUNPOD_API_URL=fake.url,
            USER="t",
            GPUCI_PODS_POLL_S="0.05",
            GPUCI_PODS_LEDGER=str(tmp_path / "l"),
            GPUCI_JOURNAL=str(tmp_path / "j"),
        )
        args = ["pods", "up", "--gpu-types", "NVIDIA L40S", "--image", "img", "--ttl", "10m"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuci", *args],
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
        proc.send_signal(signal.SIGTERM)  # the create response is still 5 s away
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 128 + signal.SIGTERM, out + err
        assert fake.pods == {}
        assert [r.status for r in fake.calls("DELETE", f"/v2/pods/{pod_id}")] == [204]
    finally:
        fake.stop()
