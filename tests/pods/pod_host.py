"""A RunPod host for ``up`` tests: boots each pod's real start script once it is RUNNING.

``up`` runs in-process on the fake clock; whenever it sleeps between polls, every RUNNING pod
not booted yet has its container command run here (``pod_container.run_container``) with the
env RunPod gives a pod (``RUNPOD_DC_ID``, the pod id and key) and a fake GPU: one with an ECC
error in the data centres named bad, a healthy one elsewhere. gpu-smoke is the real one
(``python -m gpuci``, health checks only), so the verdict, the name PATCH and the pod's stop
call are exactly what a pod does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pod_container import run_container
from pods_testing import executable

from gpuci.pods.health._handover import verdict_of

RUNNER_STANDS_BY = "#!/bin/sh\necho 'Listening for Jobs'\nexec sleep 60\n"


class PodHost:
    def __init__(
        self, fake: Any, tmp_path: Path, bad_dcs: Collection[str], **extra_env: str
    ) -> None:
        self.fake, self.tmp, self.bad, self.extra = fake, tmp_path, set(bad_dcs), extra_env
        self.gpus = 1  # GPUs per pod (each bad one with an ECC error)
        self.booted: dict[str, str] = {}  # pod id -> its container's output
        self.runner_dir = executable(
            tmp_path / "actions-runner" / "run.sh", RUNNER_STANDS_BY
        ).parent

    def attach(self, clock: Any) -> PodHost:
        """Boot pods whenever ``up`` sleeps on ``clock`` between its polls; this host."""
        sleep = clock.sleep

        def sleep_and_boot(seconds: float) -> None:
            sleep(seconds)
            self.boot_running()

        clock.sleep = sleep_and_boot
        return self

    def boot_running(self) -> None:
        for pod_id, pod in list(self.fake.pods.items()):
            if pod["status"] == "RUNNING" and pod_id not in self.booted:
                self.boot(pod_id, pod)

    def _reported(self, pod_id: str) -> bool:
        pod = self.fake.pods.get(pod_id)
        verdict = verdict_of(pod)
        gate_over = pod is not None and self.fake.calls("PATCH", f"/v2/pods/{pod_id}")
        # a refused rename leaves no verdict: the gate is over once it tried (a bad pod stops)
        if gate_over and (pod["dataCenterId"] not in self.bad or pod["status"] == "EXITED"):
            return verdict is not None or pod["status"] in ("RUNNING", "EXITED")
        if pod is None or verdict is None:
            return pod is None
        return verdict.kind != "failed" or pod["status"] == "EXITED"

    def boot(self, pod_id: str, pod: dict[str, Any]) -> None:
        dc = pod["dataCenterId"]
        home = self.tmp / f"home-{pod_id}"
        home.mkdir(exist_ok=True)
        env = {
            **pod["env"],
            "PATH": os.environ["PATH"],
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # this checkout's gpu-ci, not another
            "HOME": str(home),
            "TMPDIR": str(home),
            "RUNPOD_DC_ID": dc,
            "GPUCI_FAKE_NVML": ",".join(["h200:ecc+=1" if dc in self.bad else "h200"] * self.gpus),
            "GPUCI_HANDOVER_RETRY_S": "0.05",
            "GPUCI_SMOKE_PYTHON": sys.executable,
            "INPUT_FRAMEWORK": "none",
            "GPUCI_RUNNER_DIR": str(self.runner_dir),
            **self.extra,
        }
        out, err, _ = run_container(
            self.fake, pod_id, env, pod["args"], lambda: self._reported(pod_id), 120.0
        )
        self.booted[pod_id] = out + err
