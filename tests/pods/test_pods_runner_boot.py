"""The runner pod's start script, run for real with ``sh`` under the self-stop wrapper.

Stand-in ``run.sh`` and ``gitlab-runner`` executables (tiny scripts) play the runners; the
fake RunPod receives the pod's own terminate call, the fake GitLab its self-delete. Timeouts
are seconds, not minutes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from fake_ci_runners import FakeRunnersAPI
from fake_runpod import FakeRunPod
from pod_container import run_container

from gpuci.pods import plan, runner_boot, runners
from gpuci.pods.naming import new_tag

JIT = "JITconfig-" + "s3cr3t" * 6
GLRT = "glrt-" + "t0ken" * 5

SERVES_ONE_JOB = """#!/bin/sh
printf '%s\\n' "$@" > ./args.txt
env > ./env.txt
echo "Connected to GitHub"
echo "2026-11-30 12:00:00Z: Running job: train"
sleep 3
echo "2026-11-30 12:00:01Z: Job train completed with result: Succeeded"
exit 0
"""
NEVER_GETS_A_JOB = """#!/bin/sh
echo "Listening for Jobs"
exec sleep 60
"""
# a job that starts without the console line: only the worker's diag log tells
QUIET_JOB = """#!/bin/sh
mkdir -p _diag
sleep 1
echo worker > _diag/Worker_20261130-120000-utc.log
sleep 4
echo quiet-job-done > ./done.txt
exit 0
"""


LIVE_STEPS_TO_RUNNING = 0  # the conftest's ``live``: pods RUNNING at once


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _pod(fake: FakeRunPod, runner_env: dict[str, str]) -> tuple[str, dict[str, str], str]:
    tag = new_tag("alice", "local", time.time() + 3600)
    spec = plan.PodSpec(
        image="img",
        command=runner_boot.SCRIPT,
        runner_env={**runner_env, **runner_boot.env()},
    )
    body = plan.create_body(spec, tag, plan.Candidate("NVIDIA L40S"), fake.url)
    status, _, pod = fake.handle(
        "POST", "/v2/pods", json.dumps(body).encode(), f"Bearer {fake.api_key}"
    )
    assert status == 201
    return pod["id"], body["env"], body["args"]


def _github_env(idle_s: int = 30) -> dict[str, str]:
    tgt = runners.Target("github", "http://unused.invalid", "repo:octo/gpu", "")
    return runners.pod_env(tgt, "gpuci-abc123-1795000000", 7, JIT, idle_s)


def _boot(fake, pod_id, env, args, tmp_path, extra=None, wait_s=30.0):
    """Start the container command as RunPod would; wait until the pod is gone and the script
    has exited (it exits once its pod is terminated)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    pod_env = {
        **env,
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TMPDIR": str(tmp_path),
        **(extra or {}),
    }
    started = time.time()
    out, err, rc = run_container(
        fake, pod_id, pod_env, args, lambda: pod_id not in fake.pods, wait_s, exits=True
    )
    return out, err, rc, time.time() - started


def _terminated_itself(fake: FakeRunPod, pod_id: str) -> bool:
    calls = fake.calls("POST", f"/v2/pods/{pod_id}/action")
    return (
        pod_id not in fake.pods
        and [c.body for c in calls] == [{"action": "terminate"}]
        and calls[0].auth == f"Bearer {fake.api_key}"
    )


def test_github_one_job_then_exit_then_the_pod_terminates_itself(live, tmp_path):
    runner_dir = tmp_path / "actions-runner"
    _executable(runner_dir / "run.sh", SERVES_ONE_JOB)
    pod_id, env, args = _pod(live, _github_env())
    out, err, rc, _ = _boot(
        live, pod_id, env, args, tmp_path, {"GPUCI_RUNNER_DIR": str(runner_dir)}
    )
    assert rc == 0, out + err
    assert (runner_dir / "args.txt").read_text().splitlines() == ["--jitconfig", JIT]
    assert "Running job: train" in out and "a job started" in out
    assert _terminated_itself(live, pod_id), out + err
    job_env = (runner_dir / "env.txt").read_text()
    assert JIT not in job_env  # the job's steps never see the credential
    assert ("RUNNER_ALLOW_RUNASROOT=1" in job_env) == (os.getuid() == 0)
    assert JIT not in out + err


def test_github_idle_runner_is_stopped_and_the_pod_terminates(live, tmp_path):
    runner_dir = tmp_path / "actions-runner"
    _executable(runner_dir / "run.sh", NEVER_GETS_A_JOB)
    pod_id, env, args = _pod(live, _github_env(idle_s=2))
    out, err, _, took = _boot(
        live, pod_id, env, args, tmp_path, {"GPUCI_RUNNER_DIR": str(runner_dir)}
    )
    assert "no job within 2s: stopping the runner" in out, out + err
    assert _terminated_itself(live, pod_id)
    assert took >= 2  # not before the idle time; the runner's own 60 s outlast _boot's wait


def test_github_job_seen_by_the_worker_log_is_not_cut_by_the_idle_timeout(live, tmp_path):
    runner_dir = tmp_path / "actions-runner"
    _executable(runner_dir / "run.sh", QUIET_JOB)
    pod_id, env, args = _pod(live, _github_env(idle_s=2))
    out, err, _, _ = _boot(live, pod_id, env, args, tmp_path, {"GPUCI_RUNNER_DIR": str(runner_dir)})
    assert "a job started" in out and "no job within" not in out, out + err
    assert (runner_dir / "done.txt").read_text().strip() == "quiet-job-done"
    assert _terminated_itself(live, pod_id)


def _tarball(run_sh: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = run_sh.encode()
        info = tarfile.TarInfo("run.sh")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def mirror():
    with FakeRunnersAPI() as api:
        yield api


def _serve_release(mirror: FakeRunnersAPI, data: bytes) -> str:
    ver = runner_boot.RUNNER_VERSION
    mirror.state.files[f"/releases/v{ver}/actions-runner-linux-x64-{ver}.tar.gz"] = data
    return mirror.base + "/releases"


def test_the_runner_release_is_installed_when_its_sha256_matches(live, mirror, tmp_path):
    data = _tarball(SERVES_ONE_JOB)
    url = _serve_release(mirror, data)
    pod_id, env, args = _pod(live, _github_env())
    env = {**env, "GPUCI_ACTIONS_RUNNER_SHA256": hashlib.sha256(data).hexdigest()}
    home_runner = tmp_path / "home" / "gpuci-actions-runner"
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, {"GPUCI_RUNNER_RELEASE_URL": url})
    assert rc == 0, out + err
    assert (home_runner / "args.txt").read_text().splitlines() == ["--jitconfig", JIT]
    assert _terminated_itself(live, pod_id)


def test_a_tampered_runner_tarball_is_refused_before_unpacking(live, mirror, tmp_path):
    url = _serve_release(mirror, _tarball(SERVES_ONE_JOB))  # not the published release
    pod_id, env, args = _pod(live, _github_env())
    assert env["GPUCI_ACTIONS_RUNNER_SHA256"] == runner_boot.RUNNER_SHA256
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, {"GPUCI_RUNNER_RELEASE_URL": url})
    assert "refusing the runner download: sha256" in out, out + err
    assert rc == 3
    home = tmp_path / "home"
    assert not (home / "gpuci-actions-runner" / "run.sh").exists()  # never unpacked
    assert not (home / "gpuci-actions-runner.tar.gz").exists()
    assert _terminated_itself(live, pod_id)


GITLAB_RUNNER = """#!/bin/sh
printf '%s\\n' "$@" > "$GPUCI_TEST_OUT/args.txt"
env > "$GPUCI_TEST_OUT/env.txt"
echo "Checking for jobs... received"
echo "Job succeeded"
exit 0
"""


def test_gitlab_run_single_then_deletes_its_runner_then_terminates(live, mirror, tmp_path):
    bin_dir = tmp_path / "bin"
    _executable(bin_dir / "gitlab-runner", GITLAB_RUNNER)
    runner = mirror.state.add("gpuci-abc123-1795000000", "project:42", ["gpu-large"])
    runner.token = GLRT
    tgt = runners.Target("gitlab", mirror.gitlab_api, "project:42", "", mirror.base + "/gitlab")
    pod_id, env, args = _pod(live, runners.pod_env(tgt, runner.name, runner.id, GLRT, 3))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    extra = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GPUCI_TEST_OUT": str(out_dir)}
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, extra)
    assert rc == 0, out + err
    assert (out_dir / "args.txt").read_text().splitlines() == [
        "run-single",
        "--url",
        mirror.base + "/gitlab",
        "--token",
        GLRT,
        "--executor",
        "shell",
        "--max-builds",
        "1",
        "--wait-timeout",
        "3",
    ]
    assert GLRT not in (out_dir / "env.txt").read_text()  # not in the job's environment
    assert mirror.state.runners == {}  # deleted with its own token
    deletes = [r for r in mirror.state.requests if r[:2] == ("DELETE", "/gitlab/api/v4/runners")]
    assert deletes == [("DELETE", "/gitlab/api/v4/runners", {"token": GLRT})]
    assert _terminated_itself(live, pod_id)
    assert GLRT not in out + err


def test_gitlab_without_gitlab_runner_still_deletes_and_terminates(live, mirror, tmp_path):
    runner = mirror.state.add("gpuci-abc123-1795000000", "project:42", ["gpu-large"])
    runner.token = GLRT
    tgt = runners.Target("gitlab", mirror.gitlab_api, "project:42", "", mirror.base + "/gitlab")
    pod_id, env, args = _pod(live, runners.pod_env(tgt, runner.name, runner.id, GLRT, 3))
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("sh", "date", "sleep", "curl", "cat", "cut", "grep"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True)
        if found.stdout.strip():
            os.symlink(found.stdout.strip(), bare / tool)
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, {"PATH": str(bare)})
    assert "gitlab-runner is not in the image" in out, out + err
    assert rc == 3
    assert mirror.state.runners == {}
    assert _terminated_itself(live, pod_id)
