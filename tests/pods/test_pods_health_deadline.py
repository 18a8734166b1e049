"""``pods up --health-url``: the whole wait for the health URL ends by ``--timeout``, whatever
the server does (a trickled answer passes every per-read timeout), the body is never read,
and a redirect is followed only on the health URL's own origin."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fake_runpod import FakeRunPod
from pods_testing import api_env

from gpuci_testing import clean_env, run_cli
from security.hostile_http import (
    HostileServer,
    serve_bytes,
    serve_redirect,
    trickled_body,
    trickled_headers,
)

LIVE_STEPS_TO_RUNNING = 0  # RUNNING at once: the health wait is all the timeout is spent on
UP = dict(gpu_types="NVIDIA L40S", image="img", command="serve", ttl="30m", owner="alice")


def _up_cli(live: FakeRunPod, tmp_path: Path, url: str, timeout: str) -> subprocess.Popen[str]:
    """``pods up --health-url URL --timeout T`` as a job runs it."""
    env = clean_env(**api_env(live, tmp_path))
    args = ["--gpu-types", "NVIDIA L40S", "--image", "img", "--command", "serve", "--ttl", "10m"]
    return run_cli(
        "pods", "up", *args, "--timeout", timeout, "--health-url", url, env=env, timeout=60
    )


def test_a_health_server_trickling_its_headers_ends_at_the_timeout_with_one_line(live, tmp_path):
    with HostileServer() as evil:
        evil.route("/health", trickled_headers())
        proc = _up_cli(live, tmp_path, evil.url("/health"), "3s")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    url = evil.url("/health")
    [line] = proc.stdout.splitlines()  # one line: the cause and the fix
    assert line.startswith(
        f"pods up: infrastructure error: health URL {url} did not answer 2xx before the timeout"
    ), line
    assert live.pods == {}  # the pod it made is terminated
    assert [r.status for r in live.calls("DELETE", "/v2/pods/.*")] == [204]


def test_a_health_answer_is_its_status_its_trickled_body_is_never_read(live, tmp_path):
    with HostileServer() as evil:
        evil.route("/health", trickled_body())
        proc = _up_cli(live, tmp_path, evil.url("/health"), "1m")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"healthy: {evil.url('/health')} answered HTTP 200" in proc.stderr
    assert len(live.pods) == 1 and live.calls("DELETE", "/v2/pods/.*") == []


def test_a_redirect_is_followed_on_the_health_urls_origin_only(fake, run):
    with HostileServer() as pod, HostileServer() as elsewhere:
        elsewhere.route("/ok", serve_bytes(b"ok"))
        pod.route("/ready", serve_bytes(b"ok")).route("/v1/models", serve_redirect("/ready"))
        home = run("up", **UP, health_url=pod.url("/v1/models"))
        assert home.code == 0, home.stdout
        pod.route("/v1/models", serve_redirect(elsewhere.url("/ok"), 307))
        away = run("up", **UP, health_url=pod.url("/v1/models"), timeout="1m")
        assert elsewhere.requests() == []  # never asked
    assert away.code == 3, away.stdout
    assert "HTTP 307 to another origin (not followed)" in away.json["headline"]
    assert list(fake.pods) == [home.outputs["pod-id"]]  # the second up ended its pod


def test_a_redirect_to_a_host_that_is_no_idna_name_is_another_origin(fake, run):
    """``Location: http://xn--/ok``: httpx accepts it but its host decodes to no name (idna
    raised from ``origin()``, past ``wait_healthy``'s handling: a traceback, review B, 4)."""
    with HostileServer() as pod:
        pod.route("/v1/models", serve_redirect("http://xn--/ok", 307))
        away = run("up", **UP, health_url=pod.url("/v1/models"), timeout="1m")
    assert away.code == 3, away.stdout
    assert "HTTP 307 to another origin (not followed)" in away.json["headline"]
