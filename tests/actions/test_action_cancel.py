"""A cancelled job reaches gpu-ci inside a generated action's step, as the runner cancels it.

actions/runner (``ProcessInvoker.CancelAndKillProcessTree``) signals the step's process only,
``kill(pid, SIGINT)``, then ``SIGTERM`` 7.5 s later, then ``Process.Kill()`` 2.5 s after that;
never its process group. The step's process is ``bash --noprofile --norc -e -o pipefail SCRIPT``:
a bash waiting for a child does not pass SIGINT on, and SIGTERM ends bash alone, so a gpu-ci run
as bash's child never heard the cancel, and a cancelled ``gpu-pod up`` left its pod running
(found by running the step so). The step now ``exec``s gpu-ci: the runner's signal is gpu-ci's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from action_env import REPO, step_script

from gpuci_testing import clean_env, wait_until

sys.path.insert(0, str(REPO / "tests" / "pods"))
from fake_runpod import FakeRunPod
from pods_testing import api_env

sys.path.insert(0, str(REPO / "scripts"))
from gen_actions import RUN_GPUCI

SIGINT_WAIT_S, SIGTERM_WAIT_S = 7.5, 2.5  # actions/runner's _sigintTimeout, _sigtermTimeout


def _cancel_as_the_runner(proc: subprocess.Popen[str]) -> None:
    """SIGINT to the step's process, then SIGTERM, then a kill, each only if it still runs."""
    for sig, wait in ((signal.SIGINT, SIGINT_WAIT_S), (signal.SIGTERM, SIGTERM_WAIT_S)):
        os.kill(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait()


def test_a_cancelled_gpu_pod_up_step_terminates_its_pod(tmp_path: Path) -> None:
    script = step_script("actions/gpu-pod", tmp_path)
    with FakeRunPod(steps_to_running=10**6) as fake:  # up waits for RUNNING until cancelled
        env = clean_env(
            **api_env(fake, tmp_path, GPUCI_PODS_POLL_S="0.05"),
            GPUCI_PYTHON=sys.executable,
            PYTHONPATH=str(REPO / "src"),
            INPUT_ACTION="up",
            INPUT_GPU_TYPES="NVIDIA L40S",
            INPUT_IMAGE="img",
            INPUT_TTL="10m",
        )
        proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", str(script)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own group: whatever it leaves is found and ended
        )
        try:
            wait_until(lambda: fake.pods, what="up created its pod")
            pod_id = next(iter(fake.pods))
            _cancel_as_the_runner(proc)
            left = dict(fake.pods)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # a gpu-ci the cancel never reached
            except ProcessLookupError:
                pass
            proc.wait()
        log = proc.stdout.read() if proc.stdout else ""  # once no gpu-ci holds the pipe
        assert proc.returncode == 128 + signal.SIGINT, log  # gpu-ci heard the first signal
        assert not left and list(fake.terminated_at) == [pod_id], log
        assert f"pods up cancelled by SIGINT: terminated pod {pod_id}" in log


def test_every_generated_step_execs_gpu_ci() -> None:
    """Each action's gpu-ci line is its step's last and an ``exec``: the runner's cancel
    reaches every command (a cache save's cleanup, a fetch's partial file), not only pods."""
    actions = [REPO / "action.yml", *sorted(REPO.glob("actions/**/action.yml"))]
    for path in actions:
        steps = yaml.safe_load(path.read_text())["runs"]["steps"]
        runs = [s["run"] for s in steps if "from gpuci.cli import main" in s.get("run", "")]
        assert runs, path
        for run in runs:
            last = run.strip().splitlines()[-1]
            assert last.startswith(RUN_GPUCI + " "), f"{path}: {last}"
