"""botocore's credential chain under the S3 operation's deadline (issue 33, items 3-4).

Credentials that are not in the environment are botocore's to resolve and refresh, under its own
limits: none for a ``credential_process``, 60 s a read (and retries) for STS, none at all for a
server that trickles. Each case here runs a real ``python -m gpuci cache-weights restore`` with a
0.5 s timeout (so one operation may take 4 s) and must end with one line, exit 3, naming the
source that did not answer, with no secret printed; a ``credential_process`` that hangs is
killed, with what it started. Before the fix each run was still waiting when the test gave up.
"""

from __future__ import annotations

import os
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))

from hostile_s3 import run_measured, s3_cli_env

from gpuci_testing import REPO, refused_url, wait_until

FAST = {"GPUCI_S3_TIMEOUT": "0.5"}
# Far past the 4 s an operation may take here, far short of botocore's own limits.
GIVE_UP_S = 60


@contextmanager
def hanging_endpoint(mode: str) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` that reads each request, then never answers (``silent``) or
    sends its status line a byte every 0.2 s for ever (``trickle``)."""
    stop = threading.Event()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            conn: socket.socket = self.request
            conn.settimeout(1.0)
            try:
                conn.recv(65536)
                line = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 100_000
                for i in range(len(line)):
                    if mode == "trickle":
                        conn.sendall(line[i : i + 1])
                    if stop.wait(0.2):
                        return
            except OSError:
                return

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    with Server(("127.0.0.1", 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            stop.set()
            server.shutdown()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No key in the environment, no AWS files, no instance metadata unless ``extra`` says."""
    env = s3_cli_env(tmp_path, **FAST)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        env.pop(name, None)
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"),
        AWS_REGION="us-east-1",
    )
    env.update(extra)
    return env


def _restore(env: dict[str, str], tmp_path: Path):
    with refused_url() as endpoint:  # every request refused: the credentials are the story
        args = ["cache-weights", "restore", "--store", "s3://bucket/c"]
        args += ["--endpoint-url", endpoint, "--key", "k-1", "--path", str(tmp_path / "out")]
        return run_measured(args, env, REPO, timeout=GIVE_UP_S)


def _one_line_exit_3(run, *words: str) -> None:
    assert run.code == 3, run.output
    assert "Traceback" not in run.output and "internal error" not in run.output, run.output
    errors = [line for line in run.output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, run.output
    for word in words:
        assert word in errors[0], run.output


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie is dead, waiting for its parent (init, once the step has ended)
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _process_profile(tmp_path: Path, script: str) -> dict[str, str]:
    helper = tmp_path / "creds.sh"
    helper.write_text("#!/bin/bash\n" + script)
    helper.chmod(0o755)
    config = tmp_path / "aws-config"
    config.write_text(f"[profile lab]\nregion = us-east-1\ncredential_process = {helper}\n")
    return _env(tmp_path, AWS_PROFILE="lab", AWS_CONFIG_FILE=str(config))


# ----- credential_process ----------------------------------------------------------------------


def test_a_credential_process_that_hangs_is_killed_with_what_it_started(tmp_path):
    pids = tmp_path / "pids"
    env = _process_profile(tmp_path, f"sleep 600 &\necho $! $$ > {pids}\nwait\n")
    run = _restore(env, tmp_path)
    _one_line_exit_3(run, "resolving the AWS credentials", "credential_process")
    assert "GPUCI_S3_TIMEOUT" in run.output, run.output
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 2
    wait_until(lambda: all(_dead(pid) for pid in started), what="the helper and its sleep killed")


@pytest.mark.parametrize("answer", ["not json", "[]", '{"Version": 1, "AccessKeyId": 7}'])
def test_a_credential_process_answering_no_credentials_is_one_line(tmp_path, answer):
    """Before: "internal error" (JSONDecodeError, AttributeError from botocore's parser)."""
    env = _process_profile(tmp_path, f"echo '{answer}'\n")
    run = _restore(env, tmp_path)
    _one_line_exit_3(run, "AWS credentials", "credential_process")


def test_a_role_s_source_profile_whose_credential_process_hangs_is_killed_too(tmp_path):
    """``role_arn`` + ``source_profile``: botocore builds the source profile's providers itself,
    later; its credential_process is killed all the same, and named."""
    pids = tmp_path / "pids"
    env = _process_profile(tmp_path, f"echo $$ > {pids}\nexec sleep 600\n")
    config = Path(env["AWS_CONFIG_FILE"])
    helper = config.read_text().split("credential_process = ")[1].strip()
    config.write_text(
        "[profile lab]\nrole_arn = arn:aws:iam::123456789012:role/ci\nsource_profile = src\n"
        f"[profile src]\ncredential_process = {helper}\n"
    )
    run = _restore(env, tmp_path)
    _one_line_exit_3(run, "AWS credentials", "credential_process")
    pid = int(pids.read_text())
    wait_until(lambda: _dead(pid), what="the source profile's helper killed")


def test_a_refresh_that_hangs_mid_operation_ends_by_the_operations_deadline(tmp_path):
    """Role credentials 12 minutes from expiry: botocore refreshes them at each signing. The
    helper answers twice (the resolution and its first freeze), then hangs at the first
    request's signing: the refresh, not the resolution, runs out of time."""
    calls = tmp_path / "calls"
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 12 * 60))
    answer = (
        '{"Version": 1, "AccessKeyId": "AKIAROLE", "SecretAccessKey": "role-secret-value",'
        f' "SessionToken": "role-token-value", "Expiration": "{expiry}"}}'
    )
    env = _process_profile(
        tmp_path,
        f"echo x >> {calls}\n"
        f'if [ "$(wc -l < {calls})" -gt 2 ]; then exec sleep 600; fi\n'
        f"echo '{answer}'\n",
    )
    run = _restore(env, tmp_path)
    _one_line_exit_3(run, "refreshing the AWS credentials", "credential_process")
    assert len(calls.read_text().split()) == 3
    assert "role-secret-value" not in run.output and "role-token-value" not in run.output


# ----- web identity (STS) and the instance role (IMDS) -------------------------------------------


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_sts_for_web_identity_that_never_answers_ends_by_the_deadline(tmp_path, mode):
    token = tmp_path / "token"
    token.write_text("web-identity-token-value")
    with hanging_endpoint(mode) as sts:
        env = _env(
            tmp_path,
            AWS_WEB_IDENTITY_TOKEN_FILE=str(token),
            AWS_ROLE_ARN="arn:aws:iam::123456789012:role/ci",
            AWS_ROLE_SESSION_NAME="gpuci-test",
            AWS_ENDPOINT_URL_STS=sts,
        )
        run = _restore(env, tmp_path)
    _one_line_exit_3(run, "AWS credentials", "STS (web identity")
    assert "web-identity-token-value" not in run.output


# A trickle at botocore's defaults (its 1 s a read never fires: a byte comes every 0.2 s); silence
# where the user gave IMDS longer (60 s a read, 3 attempts).
PATIENT_IMDS = {"AWS_METADATA_SERVICE_TIMEOUT": "60", "AWS_METADATA_SERVICE_NUM_ATTEMPTS": "3"}


@pytest.mark.parametrize(("mode", "imds"), [("trickle", {}), ("silent", PATIENT_IMDS)])
def test_an_instance_metadata_service_that_hangs_ends_by_the_deadline(tmp_path, mode, imds):
    with hanging_endpoint(mode) as metadata:
        env = _env(tmp_path, AWS_EC2_METADATA_SERVICE_ENDPOINT=metadata + "/", **imds)
        env.pop("AWS_EC2_METADATA_DISABLED", None)
        run = _restore(env, tmp_path)
    _one_line_exit_3(run, "resolving the AWS credentials", "instance metadata service")


def test_a_dry_run_with_a_hung_credential_process_ends_by_the_deadline(tmp_path):
    """Before: the dry run's "any credentials here?" check resolved the chain again, unbounded."""
    pids = tmp_path / "pids"
    env = _process_profile(tmp_path, f"echo $$ >> {pids}\nsleep 600\n")
    with refused_url() as endpoint:
        args = ["cache-weights", "restore", "--dry-run", "--store", "s3://bucket/c"]
        args += ["--endpoint-url", endpoint, "--key", "k-1", "--path", str(tmp_path / "out")]
        run = run_measured(args, env, REPO, timeout=GIVE_UP_S)
    _one_line_exit_3(run, "AWS credentials", "credential_process")
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 1, "the helper was started again after the deadline"
    wait_until(lambda: all(_dead(pid) for pid in started), what="the helper killed")


def test_a_failing_credential_process_s_stderr_is_never_printed(tmp_path):
    env = _process_profile(tmp_path, "echo 'debug: token=SuperSecretValue123' >&2\nexit 1\n")
    run = _restore(env, tmp_path)
    _one_line_exit_3(run, "AWS credentials", "credential_process")
    assert "SuperSecretValue123" not in run.output, run.output
