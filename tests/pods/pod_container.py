"""Running a pod's container command on this machine as RunPod would (start scripts' tests)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any


def _as_a_container_starts() -> None:
    """A container's first process starts with every signal at its default and none blocked;
    a pytest worker may have inherited or set otherwise (a library's thread, a test's handler),
    and an ignored or blocked SIGINT would keep the runner's Ctrl-C path from ever running."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def run_container(
    fake: Any,
    pod_id: str,
    env: Mapping[str, str],
    args: str,
    done: Callable[[], bool],
    wait_s: float,
    *,
    exits: bool = False,
) -> tuple[str, str, int | None]:
    """Start ``args`` split like a shell, with the pod's env and RunPod's own variables (the
    pod id, the pod-scoped key), in its own session; wait until ``done()`` or ``wait_s``;
    with ``exits`` also wait for the command to end by itself. Then kill the session (the
    self-stop timer's sleep) and return (stdout, stderr, exit status)."""
    pod_env = {
        **env,
        "RUNPOD_POD_ID": pod_id,
        "RUNPOD_API_KEY": fake.pod_key(pod_id),  # pod-scoped: reaches only this pod
        "GPUCI_SELF_STOP_RETRY_S": "0.2",
    }
    proc = subprocess.Popen(
        shlex.split(args),
        env=pod_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_as_a_container_starts,
    )
    deadline = time.time() + wait_s
    try:
        while time.time() < deadline and not done():
            time.sleep(0.05)
        if exits:
            proc.wait(timeout=60)
    finally:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate(timeout=30)
    return out, err, proc.returncode
