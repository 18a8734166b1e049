"""A cancelled job (SIGTERM during ``up``) terminates the pod it made, wherever ``up`` was."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_runpod import FakeRunPod
from pods_testing import api_env, call

from gpuci.pods._budgets import ledger
from gpuci.pods._lifecycle import up_cleanup
from gpuci.pods._lifecycle.cancel import Cancelled
from gpuci.pods._runpod.client import RunPodClient
from gpuci.runtime import Runtime
from gpuci_testing import REPO, clean_env

WAITING_OR_CREATING = pytest.mark.parametrize(
    "stalled",
    # waiting for RUNNING, which never comes; or the create call is in flight: the pod exists on
    # RunPod, its id isn't known yet, so it must be found by name (the response is 5 s away)
    [{"steps_to_running": 10**6}, {"create_delay": 5.0}],
    ids=["while-waiting", "while-creating"],
    indirect=True,
)


@pytest.fixture
def stalled(request) -> Iterator[FakeRunPod]:
    """A fake RunPod made with the test's options: one where ``up`` is still busy once its pod
    exists."""
    with FakeRunPod(**request.param) as fake:
        yield fake


def _sigterm_once_the_pod_exists(
    fake: FakeRunPod,
    tmp_path: Path,
    args: list[str],
    before_signal: Callable[[], None] = lambda: None,
    sig: int = signal.SIGTERM,
    after_signal: Callable[[subprocess.Popen[str]], None] = lambda proc: None,
    **ci: str,
) -> tuple[str, str, str]:
    """Run ``pods up ARGS``, send ``sig`` once the fake holds its pod (``before_signal`` checks
    that moment, ``after_signal`` may send another); (pod id, stdout, stderr)."""
    env = clean_env(**api_env(fake, tmp_path, GPUCI_PODS_POLL_S="0.05", **ci))
    env["PYTHONFAULTHANDLER"] = "1"  # a stalled up dumps every thread's stack on SIGABRT
    up = ["pods", "up", "--gpu-types", "NVIDIA L40S", "--ttl", "10m", *args]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuci", *up],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60  # a hang guard: a busy machine starts Python slowly
    while not fake.pods and time.time() < deadline:
        time.sleep(0.02)
    assert fake.pods, "up never created the pod"
    pod_id = next(iter(fake.pods))
    before_signal()
    proc.send_signal(sig)
    after_signal(proc)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out + err
    cancelled = [line for line in err.splitlines() if "pods up cancelled by" in line]
    assert cancelled == [
        f"gpu-ci: pods up cancelled by {signal.Signals(sig).name}: "
        f"terminated pod {pod_id}" + cancelled[0].partition(pod_id)[2]
    ], err
    return pod_id, out, err


def _stacks_of(proc: subprocess.Popen[str]) -> str:
    """What a stalled ``up`` was doing: its stderr, ending in every thread's stack."""
    proc.send_signal(signal.SIGABRT)
    try:
        return proc.communicate(timeout=20)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[1]


@WAITING_OR_CREATING
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_sigterm_during_up_terminates_the_pod(tmp_path, stalled, sig):
    command = ["--command", "serve"] if not stalled.create_delay else []
    pod_id, _, _ = _sigterm_once_the_pod_exists(
        stalled, tmp_path, ["--image", "img", *command], sig=sig
    )
    assert stalled.pods == {}
    assert [r.status for r in stalled.calls("DELETE", f"/v2/pods/{pod_id}")] == [204]


@WAITING_OR_CREATING
@pytest.mark.parametrize("platform", ["github", "gitlab"])
def test_sigterm_during_up_with_a_runner_leaves_neither_pod_nor_runner(
    tmp_path, stalled, api, platform
):
    ci = api.github_env() if platform == "github" else api.gitlab_env()
    runner = ["--runner", platform, "--runner-labels", "gpu-large,run-9"]

    def registered_first() -> None:  # the runner exists before its pod is created
        assert len(api.state.runners) == 1

    _, out, err = _sigterm_once_the_pod_exists(stalled, tmp_path, runner, registered_first, **ci)
    assert stalled.pods == {}
    assert api.state.runners == {}, out + err
    for secret in api.state.issued:
        assert secret not in out + err


def test_sigterm_during_the_cleanup_after_sigint_does_not_cut_it_short(tmp_path, api):
    """GitHub's cancel: SIGINT, then SIGTERM while up is still terminating its pod. The
    terminate in flight finishes, the runner is still deleted after it, and the exit status
    is SIGINT's."""
    with FakeRunPod(steps_to_running=10**6, delete_delay=1.0) as fake:

        def sigterm_mid_delete(proc: subprocess.Popen[str]) -> None:
            if not fake.delete_started.wait(30):
                pytest.fail("up never began to terminate its pod:\n" + _stacks_of(proc))
            proc.send_signal(signal.SIGTERM)

        pod_id, _, err = _sigterm_once_the_pod_exists(
            fake,
            tmp_path,
            ["--runner", "github", "--runner-labels", "run-9"],
            sig=signal.SIGINT,
            after_signal=sigterm_mid_delete,
            **api.github_env(),
        )
        assert fake.pods == {}, err
        assert [r.status for r in fake.calls("DELETE", f"/v2/pods/{pod_id}")] == [204]
        assert api.state.runners == {}, err


def test_a_cancel_while_the_ledger_hangs_ends_the_pod_without_waiting_for_the_store(
    fake, env, clock, monkeypatch
):
    """The cancel lands while ``up`` writes its new pod into a ledger store that no longer
    answers (an S3 store's own limits are minutes; GitHub's SIGKILL comes 10 s after its
    SIGINT). The cleanup terminates the pod without waiting on that store, and waits for
    the ledger only until its own limit; the writes finish once the store answers."""
    monkeypatch.setattr(up_cleanup, "CLEANUP_DEADLINE_S", 0.5)  # its limit, made short
    answers = threading.Event()  # the store answers again: set once up is over
    cancelled: list[str] = []
    returned: list[str] = []  # writes the hung store answered
    put = ledger.Ledger._put_new

    def hanging_put(self: ledger.Ledger, key: str, item: dict) -> None:
        if not cancelled:
            cancelled.append(key)
            signal.raise_signal(signal.SIGINT)  # the cancel, during this first write
        answers.wait(60)  # a hang guard: the test sets it once up is over
        returned.append(key)
        put(self, key, item)

    monkeypatch.setattr(ledger.Ledger, "_put_new", hanging_put)
    err = io.StringIO()
    rt = Runtime(env, json_mode=True, stdout=io.StringIO(), stderr=err)
    with pytest.raises(Cancelled) as stop:
        call("up", rt, clock, gpu_types="NVIDIA L40S", image="img", command="serve", ttl="10m")
    pod_id = next(iter(fake.created_at))
    ended_while_hung = (fake.pods, returned[:])
    answers.set()
    for thread in threading.enumerate():
        if thread.name == "gpuci-pods-ledger":
            thread.join(60)
    assert stop.value.code == 130
    assert ended_while_hung == ({}, [])  # the pod ended while the store still said nothing
    assert [r.status for r in fake.calls("DELETE", f"/v2/pods/{pod_id}")] == [204]
    lines = [line for line in err.getvalue().splitlines() if "pods up cancelled by" in line]
    assert lines == [
        f"gpu-ci: pods up cancelled by SIGINT: terminated pod {pod_id}; the pods ledger did "
        "not answer in time: this pod's records may be missing from it"
    ]
    record = ledger.Ledger.open(env["GPUCI_PODS_LEDGER"], env).book()[pod_id]
    assert record.owner == "tester" and record.ended()


def test_a_cancel_whose_cleanup_cannot_look_the_pod_up_never_says_none_was_made(
    fake, env, clock, monkeypatch
):
    """The cancel lands as the create's answer comes back, and every listing then fails: the
    pod exists, unseen. The one line says it may still be there (its TTL and reap end it),
    never that no pod was made."""
    create = RunPodClient.create_pod

    def create_then_cancel(self: RunPodClient, *args: object, **kwargs: object) -> object:
        create(self, *args, **kwargs)
        fake.fail("GET /v2/pods", *[(500, {})] * 100)
        signal.raise_signal(signal.SIGINT)  # the cancel, before the answer is read
        raise AssertionError("the cancel did not land")

    monkeypatch.setattr(RunPodClient, "create_pod", create_then_cancel)
    err = io.StringIO()
    rt = Runtime(env, json_mode=True, stdout=io.StringIO(), stderr=err)
    with pytest.raises(Cancelled):
        call("up", rt, clock, gpu_types="NVIDIA L40S", image="img", command="serve", ttl="10m")
    [pod] = fake.pods.values()  # made, unseen: left to its TTL and reap
    lines = [line for line in err.getvalue().splitlines() if "pods up cancelled by" in line]
    assert lines == [
        f"gpu-ci: pods up cancelled by SIGINT: pod {pod['name']} may still exist, unseen (its "
        "TTL and reap will end it)"
    ], err.getvalue()
