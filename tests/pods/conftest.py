"""Fixtures: a fake RunPod on 127.0.0.1, a fake clock, a pod host, sub-commands run in-process."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fake_runpod import FakeRunPod
from pod_host import PodHost
from pods_testing import FakeClock, api_env, call

from forges.fake_forges import FakeForges
from gpuci.errors import GpuciError
from gpuci.runtime import Result, Runtime
from moto_s3 import FAKE_S3_CREDENTIALS


@pytest.fixture
def api() -> Iterator[FakeForges]:
    """Fake GitHub and GitLab on 127.0.0.1: where ``pods up --runner`` registers its runner."""
    with FakeForges() as server:
        yield server


@pytest.fixture
def clock(request) -> FakeClock:
    """The pods clock; at the real time in a module that sets ``REAL_TIME_CLOCK = True``
    (pods' own timers and the GPU health record run on it)."""
    return (
        FakeClock(time.time()) if getattr(request.module, "REAL_TIME_CLOCK", False) else FakeClock()
    )


@pytest.fixture
def host(request, fake: FakeRunPod, clock: FakeClock, tmp_path) -> PodHost:
    """Pods whose real start script boots once they are RUNNING (pod_host); a GPU with an ECC
    error in the module's ``BAD_DCS``, healthy elsewhere."""
    return PodHost(fake, tmp_path, getattr(request.module, "BAD_DCS", ())).attach(clock)


@pytest.fixture
def fake(clock: FakeClock) -> Iterator[FakeRunPod]:
    with FakeRunPod(clock=clock.now) as server:
        yield server
    assert server.wire.errors == [], "the fake RunPod failed:\n" + "\n".join(server.wire.errors)


@pytest.fixture
def live(request) -> Iterator[FakeRunPod]:
    """A fake RunPod on the real clock, for runs in a subprocess (the CLI, a pod's container).

    Its pods need one poll to be RUNNING; a module that wants them RUNNING at once sets
    ``LIVE_STEPS_TO_RUNNING = 0``.
    """
    steps = getattr(request.module, "LIVE_STEPS_TO_RUNNING", 1)
    with FakeRunPod(steps_to_running=steps) as server:
        yield server
    assert server.wire.errors == [], "the fake RunPod failed:\n" + "\n".join(server.wire.errors)


@pytest.fixture
def env(fake: FakeRunPod, tmp_path) -> dict[str, str]:
    return api_env(fake, tmp_path, GPUCI_PODS_POLL_S="5")


class Run:
    """The outcome of one in-process run: the Result and what was printed."""

    def __init__(self, result: Result, stdout: str, stderr: str) -> None:
        self.result, self.stdout, self.stderr = result, stdout, stderr
        self.json = json.loads(stdout)

    @property
    def code(self) -> int:
        return int(self.result.exit_code)

    @property
    def outputs(self) -> dict[str, str]:
        return self.json["outputs"]


@pytest.fixture
def run(env: dict[str, str], clock: FakeClock) -> Callable[..., Run]:
    def _run(sub: str, dry_run: bool = False, extra_env: dict | None = None, **flags: Any) -> Run:
        out, err = io.StringIO(), io.StringIO()
        rt = Runtime(
            {**env, **(extra_env or {})}, json_mode=True, dry_run=dry_run, stdout=out, stderr=err
        )
        try:
            result = call(sub, rt, clock, **flags)
        except GpuciError as exc:
            result = Result.from_error(f"pods {sub}", exc)
        rt.render(result)
        return Run(result, out.getvalue(), err.getvalue())

    return _run


@pytest.fixture
def unreadable_health(moto_endpoint, monkeypatch) -> dict[str, str]:
    """Env naming a GPU health store in an S3 bucket that does not exist: every read fails."""
    for key, value in FAKE_S3_CREDENTIALS.items():  # boto3 in in-process runs reads os.environ
        monkeypatch.setenv(key, value)
    return {
        **FAKE_S3_CREDENTIALS,
        "GPUCI_GPU_HEALTH_ENDPOINT_URL": moto_endpoint,
        "GPUCI_GPU_HEALTH_STORE": "s3://no-such-gpuci-bucket/health",
    }


@pytest.fixture(params=["file", "s3"])
def shared_ledger(request, tmp_path, monkeypatch) -> dict[str, str]:
    """The one thing two runners share: the ledger URL (plus S3 credentials for s3://)."""
    if request.param == "file":
        return {"GPUCI_PODS_LEDGER": (tmp_path / "team-ledger").as_uri()}
    from cache.cache_testing import new_bucket

    endpoint = request.getfixturevalue("moto_endpoint")
    for key, value in FAKE_S3_CREDENTIALS.items():  # boto3 in in-process runs reads os.environ
        monkeypatch.setenv(key, value)
    bucket = new_bucket(endpoint)  # with the credentials just set
    return {
        **FAKE_S3_CREDENTIALS,
        "GPUCI_PODS_LEDGER": f"s3://{bucket}/team/ledger",
        "GPUCI_PODS_LEDGER_ENDPOINT_URL": endpoint,
    }
