"""The runner pod's start script, run for real with ``sh`` under the self-stop wrapper.

Stand-in ``run.sh`` and ``gitlab-runner`` executables (tiny scripts) play the runners; the
fake RunPod receives the pod's own terminate call, the fake GitLab its self-delete. Timeouts
are seconds, not minutes.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from pathlib import Path

import pytest
from fake_runpod import FakeRunPod
from pod_container import run_container
from pods_testing import executable, planned_pod, tools_only

from forges.fake_forges import FakeForges as FakeRunnersAPI
from gpuci.pods._runners import boot as runner_boot
from gpuci.pods._runners import registry as runners
from gpuci.pods._runpod import plan

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


def _pod(fake: FakeRunPod, runner_env: dict[str, str]) -> tuple[str, dict[str, str], str]:
    runner_env = {**runner_env, **runner_boot.env()}
    spec = plan.PodSpec(image="img", command=runner_boot.SCRIPT, runner_env=runner_env)
    return planned_pod(fake, spec, time.time() + 3600)


def _github_env(idle_s: int = 30) -> dict[str, str]:
    tgt = runners.Target("github", "http://unused.invalid", "repo:octo/gpu", "")
    return runners.pod_env(tgt, "gpuci-abc123-1795000000", 7, JIT, idle_s)


def _boot(fake, pod_id, env, args, tmp_path, extra=None, wait_s=60.0):
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


def _boot_github(
    fake: FakeRunPod, tmp_path: Path, runner_dir: Path, idle_s: int = 30
) -> tuple[str, str, str, int | None, float]:
    """A GitHub runner pod booted with the runner in ``runner_dir``: (pod id, out, err, exit
    status, seconds)."""
    pod_id, env, args = _pod(fake, _github_env(idle_s))
    return pod_id, *_boot(fake, pod_id, env, args, tmp_path, {"GPUCI_RUNNER_DIR": str(runner_dir)})


def _terminated_itself(fake: FakeRunPod, pod_id: str) -> bool:
    calls = fake.calls("POST", f"/v2/pods/{pod_id}/action")
    return (
        pod_id not in fake.pods
        and [c.body for c in calls] == [{"action": "terminate"}]
        and calls[0].auth == f"Bearer {fake.pod_key(pod_id)}"
    )


def test_github_one_job_then_exit_then_the_pod_terminates_itself(live, tmp_path):
    runner_dir = executable(tmp_path / "actions-runner" / "run.sh", SERVES_ONE_JOB).parent
    pod_id, out, err, rc, _ = _boot_github(live, tmp_path, runner_dir)
    assert rc == 0, out + err
    assert (runner_dir / "args.txt").read_text().splitlines() == ["--jitconfig", JIT]
    assert "Running job: train" in out and "a job started" in out
    assert _terminated_itself(live, pod_id), out + err
    job_env = (runner_dir / "env.txt").read_text()
    assert JIT not in job_env  # the job's steps never see the credential
    assert ("RUNNER_ALLOW_RUNASROOT=1" in job_env) == (os.getuid() == 0)
    assert JIT not in out + err


def test_github_idle_runner_is_stopped_and_the_pod_terminates(live, tmp_path):
    runner_dir = executable(tmp_path / "actions-runner" / "run.sh", NEVER_GETS_A_JOB).parent
    pod_id, out, err, _, took = _boot_github(live, tmp_path, runner_dir, idle_s=2)
    assert "no job within 2s: stopping the runner" in out, out + err
    assert _terminated_itself(live, pod_id)
    assert took >= 2  # not before the idle time; the runner's own 60 s outlast _boot's wait


def test_github_job_seen_by_the_worker_log_is_not_cut_by_the_idle_timeout(live, tmp_path):
    runner_dir = executable(tmp_path / "actions-runner" / "run.sh", QUIET_JOB).parent
    pod_id, out, err, _, _ = _boot_github(live, tmp_path, runner_dir, idle_s=2)
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


def _release_pod(
    live: FakeRunPod, api: FakeRunnersAPI, published: bool = True
) -> tuple[str, dict[str, str], str, dict[str, str], bytes]:
    """A GitHub runner pod that downloads its runner from the fake release: (pod id, its env,
    its args, the boot's extra env, the tarball served). ``published``: the pod's sha256 is
    the tarball's; else the pinned release's, which the tarball is not."""
    data, ver = _tarball(SERVES_ONE_JOB), runner_boot.RUNNER_VERSION
    api.state.files[f"/releases/v{ver}/actions-runner-linux-x64-{ver}.tar.gz"] = data
    pod_id, env, args = _pod(live, _github_env())
    assert env["GPUCI_ACTIONS_RUNNER_SHA256"] == runner_boot.RUNNER_SHA256
    if published:
        env = {**env, "GPUCI_ACTIONS_RUNNER_SHA256": hashlib.sha256(data).hexdigest()}
    return pod_id, env, args, {"GPUCI_RUNNER_RELEASE_URL": api.base + "/releases"}, data


def test_the_runner_release_is_installed_when_its_sha256_matches(live, api, tmp_path):
    pod_id, env, args, extra, _ = _release_pod(live, api)
    home_runner = tmp_path / "home" / "gpuci-actions-runner"
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, extra)
    assert rc == 0, out + err
    assert (home_runner / "args.txt").read_text().splitlines() == ["--jitconfig", JIT]
    assert _terminated_itself(live, pod_id)


@pytest.mark.parametrize("capped", [False, True])
def test_a_tampered_or_oversized_runner_release_is_refused_and_never_unpacked(
    live, api, tmp_path, capped
):
    """A tarball that is not the published release is refused before unpacking. The release
    answer is untrusted too: past GPUCI_RUNNER_MAX_BYTES the download stops (curl's
    --max-filesize, else a cut copy), is removed and never unpacked, before its sha256 is
    even read. Either way the pod still ends itself."""
    pod_id, env, args, extra, data = _release_pod(live, api, published=capped)
    said = "refusing the runner download: sha256"
    if capped:
        extra["GPUCI_RUNNER_MAX_BYTES"] = str(len(data) - 1)
        said = f"refusing the runner download: over {len(data) - 1} bytes"
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, extra)
    assert said in out, out + err
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


def _gitlab_pod(fake: FakeRunPod, api: FakeRunnersAPI) -> tuple[str, dict[str, str], str]:
    """A GitLab runner pod of project 42, its runner registered on ``api`` (token GLRT)."""
    runner = api.state.add("gpuci-abc123-1795000000", "project:42", ["gpu-large"])
    runner.token = GLRT
    tgt = runners.Target("gitlab", api.gitlab_api, "project:42", "", api.base + "/gitlab")
    return _pod(fake, runners.pod_env(tgt, runner.name, runner.id, GLRT, 3))


def test_gitlab_run_single_then_deletes_its_runner_then_terminates(live, api, tmp_path):
    bin_dir = tmp_path / "bin"
    executable(bin_dir / "gitlab-runner", GITLAB_RUNNER)
    pod_id, env, args = _gitlab_pod(live, api)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    extra = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GPUCI_TEST_OUT": str(out_dir)}
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, extra)
    assert rc == 0, out + err
    assert (out_dir / "args.txt").read_text().splitlines() == [
        "run-single",
        "--url",
        api.base + "/gitlab",
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
    assert api.state.runners == {}  # deleted with its own token
    deletes = [r for r in api.state.requests if r[:2] == ("DELETE", "/gitlab/api/v4/runners")]
    assert deletes == [("DELETE", "/gitlab/api/v4/runners", {"token": GLRT})]
    assert _terminated_itself(live, pod_id)
    assert GLRT not in out + err


def test_gitlab_without_gitlab_runner_still_deletes_and_terminates(live, api, tmp_path):
    pod_id, env, args = _gitlab_pod(live, api)
    bare = tools_only(tmp_path / "bare", ("sh", "date", "sleep", "curl", "cat", "cut", "grep"))
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, {"PATH": bare})
    assert "gitlab-runner is not in the image" in out, out + err
    assert rc == 3
    assert api.state.runners == {}
    assert _terminated_itself(live, pod_id)


# Stand-ins shaped like actions/runner's own run.sh and run-helper.sh: run.sh forwards a stop
# to the listener only with RUNNER_MANUALLY_TRAP_SIG (``set -m``, then SIGINT to the helper's
# process group); Runner.Listener ignores TERM and ends on INT (Ctrl-C), writing where it was.
REAL_RUN_SH = """#!/bin/bash
DIR="$( cd -P "$( dirname "${BASH_SOURCE[0]}" )" && pwd )"
if [[ -z "$RUNNER_MANUALLY_TRAP_SIG" ]]; then
    "$DIR"/run-helper.sh "$@"
    returnCode=$?
else
    set -m
    trap 'kill -INT -$PID' INT TERM
    "$DIR"/run-helper.sh "$@" &
    PID=$!
    wait $PID
    returnCode=$?
    trap - INT TERM
    wait $PID
fi
if [[ "$ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE" == "1" && $returnCode -eq 7 ]]; then
    exit 7
fi
exit 0
"""
RUN_HELPER = """#!/bin/bash
DIR="$( cd -P "$( dirname "${BASH_SOURCE[0]}" )" && pwd )"
"$DIR"/bin/Runner.Listener run "$@"
exit $?
"""
LISTENER_IDLE = """#!/bin/bash
if [[ "$1" == "--version" ]]; then echo "${STANDIN_VERSION:-9.9.9}"; exit 0; fi
echo $$ > "$(dirname "$0")/../listener.pid"
grep -E '^Sig(Blk|Ign)' /proc/$$/status > "$(dirname "$0")/../listener.signals" 2>/dev/null
trap '' TERM
trap 'echo stopped-by-int > "$(dirname "$0")/../listener.ended"; exit 0' INT
echo "Listening for Jobs"
while :; do sleep 0.2; done
"""
# a listener that takes longer to start than the idle timeout (a busy or cold machine)
LISTENER_SLOW_START = LISTENER_IDLE.replace("trap '' TERM", "sleep 4\ntrap '' TERM")
LISTENER_DEPRECATED = """#!/bin/bash
if [[ "$1" == "--version" ]]; then echo "2.328.0"; exit 0; fi
echo "Connected to GitHub"
echo "An error occurred: Runner version v2.328.0 is deprecated and cannot receive messages."
if [[ "$ACTIONS_RUNNER_RETURN_VERSION_DEPRECATED_EXIT_CODE" == "1" ]]; then exit 7; fi
exit 1
"""


def _real_layout(root: Path, listener: str) -> Path:
    executable(root / "run.sh", REAL_RUN_SH)
    executable(root / "run-helper.sh", RUN_HELPER)
    executable(root / "bin" / "Runner.Listener", listener)
    return root


def _signals(runner_dir: Path) -> str:
    """The listener's blocked and ignored signal masks, for a failure's message."""
    path = runner_dir / "listener.signals"
    return path.read_text() if path.exists() else "(no listener.signals)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.parametrize(
    "listener",
    # the idle stop reaches a listener that ignores TERM; and the idle clock starts when the
    # listener listens: before, a runner is starting, not idle, and its stop waits for its
    # Ctrl-C path
    [LISTENER_IDLE, LISTENER_SLOW_START],
    ids=["ignores-term", "slow-start"],
)
def test_idle_stop_reaches_the_listener_by_its_ctrl_c_path(live, tmp_path, listener):
    runner_dir = _real_layout(tmp_path / "actions-runner", listener)
    pod_id, out, err, _, _ = _boot_github(live, tmp_path, runner_dir, idle_s=2)
    assert "no job within 2s: stopping the runner" in out, out + err
    assert _terminated_itself(live, pod_id)
    pid = int((runner_dir / "listener.pid").read_text())
    # the listener ended by its own Ctrl-C path before the pod ended, not by the test's cleanup
    assert (runner_dir / "listener.ended").exists(), out + err + _signals(runner_dir)
    assert (runner_dir / "listener.ended").read_text().strip() == "stopped-by-int", out + err
    deadline = time.time() + 60
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_a_deprecated_runner_is_reported_in_the_pods_name_and_ends_the_pod(live, tmp_path):
    runner_dir = _real_layout(tmp_path / "actions-runner", LISTENER_DEPRECATED)
    pod_id, env, args = _pod(live, _github_env())
    extra = {"GPUCI_RUNNER_DIR": str(runner_dir), "GPUCI_RUNNER_REPORT_S": "0"}
    env = {**env, "GPUCI_ACTIONS_RUNNER_MIN_VERSION": "2.300.0"}  # the image's runner is used
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, extra)
    assert rc == 4, out + err
    assert "GitHub refused runner image: " in out and "is deprecated" in out, out + err
    (patch,) = live.calls("PATCH", f"/v2/pods/{pod_id}")
    name = patch.body["name"]
    assert name.startswith("gpuci owner=alice ") and " n=abc123 " in name
    assert name.split(" refused: ", 1)[1].startswith("GitHub refused runner image: An error")
    assert _terminated_itself(live, pod_id)
    assert JIT not in out + err


def test_an_image_runner_older_than_github_accepts_is_replaced_by_the_release(live, api, tmp_path):
    image_dir = _real_layout(tmp_path / "actions-runner", LISTENER_DEPRECATED)  # 2.328.0
    pod_id, env, args, extra, _ = _release_pod(live, api)
    env["GPUCI_ACTIONS_RUNNER_MIN_VERSION"] = "2.330.0"
    extra["GPUCI_RUNNER_DIR"] = str(image_dir)
    out, err, rc, _ = _boot(live, pod_id, env, args, tmp_path, extra)
    assert rc == 0, out + err
    assert "actions runner 2.328.0 is older than 2.330.0" in out
    home_runner = tmp_path / "home" / "gpuci-actions-runner"
    assert (home_runner / "args.txt").read_text().splitlines() == ["--jitconfig", JIT]
    assert _terminated_itself(live, pod_id)
