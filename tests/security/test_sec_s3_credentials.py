"""botocore's credential chain under the S3 operation's deadline (issue 33, items 3-4).

Credentials that are not in the environment are botocore's to resolve and refresh, under its own
limits: none for a ``credential_process``, 60 s a read (and retries) for STS, none at all for a
server that trickles. Each case here runs a real ``python -m gpuci cache-weights restore`` with a
0.5 s timeout (so one operation may take 4 s) and must end with one line, exit 3, naming the
source that did not answer, with no secret printed; a ``credential_process`` that hangs is
killed, with what it started. Before the fix each run was still waiting when the test gave up.
Then the review's findings (issue 33): what a helper leaves behind, or a helper still running
when the step is cancelled, dies with the step; a helper that cannot start, STS's 403 or an
expired answer is one line (exit 2 for the AWS config's own mistakes), never "internal error";
an advisory refresh that hangs does not end a step whose credentials are still valid.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cache"))

from hostile_s3 import one_error_line, run_measured, s3_cli_env

from gpuci_testing import REPO, hears_ctrl_c, refused_url, wait_until
from loopback_http import LoopbackHTTPServer

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
    one_error_line(run, 3, "resolving the AWS credentials", "credential_process")
    assert "GPUCI_S3_TIMEOUT" in run.output, run.output
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 2
    wait_until(lambda: all(_dead(pid) for pid in started), what="the helper and its sleep killed")


@pytest.mark.parametrize("answer", ["not json", "[]", '{"Version": 1, "AccessKeyId": 7}'])
def test_a_credential_process_answering_no_credentials_is_one_line(tmp_path, answer):
    """Before: "internal error" (JSONDecodeError, AttributeError from botocore's parser)."""
    env = _process_profile(tmp_path, f"echo '{answer}'\n")
    run = _restore(env, tmp_path)
    one_error_line(run, 3, "AWS credentials", "credential_process")


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
    one_error_line(run, 3, "AWS credentials", "credential_process")
    pid = int(pids.read_text())
    wait_until(lambda: _dead(pid), what="the source profile's helper killed")


def _expiring_profile(tmp_path: Path, minutes: int, answers: int) -> dict[str, str]:
    """A credential_process answering role credentials ``minutes`` from expiry ``answers``
    times (its calls counted in ``calls``), then hanging; its pids in ``pids``."""
    expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + minutes * 60))
    answer = (
        '{"Version": 1, "AccessKeyId": "AKIAROLE", "SecretAccessKey": "role-secret-value",'
        f' "SessionToken": "role-token-value", "Expiration": "{expiry}"}}'
    )
    calls, pids = tmp_path / "calls", tmp_path / "pids"
    return _process_profile(
        tmp_path,
        f"echo x >> {calls}\necho $$ >> {pids}\n"
        f'if [ "$(wc -l < {calls})" -gt {answers} ]; then exec sleep 600; fi\n'
        f"echo '{answer}'\n",
    )


def test_a_refresh_that_hangs_mid_operation_ends_by_the_operations_deadline(tmp_path):
    """Role credentials 5 minutes from expiry, inside botocore's mandatory window: they are
    refreshed at each signing, and no signing may go on without. The helper answers twice (the
    resolution and its first freeze), then hangs at the first request's signing: the refresh,
    not the resolution, runs out of time."""
    calls = tmp_path / "calls"
    env = _expiring_profile(tmp_path, minutes=5, answers=2)
    run = _restore(env, tmp_path)
    one_error_line(run, 3, "refreshing the AWS credentials", "credential_process")
    assert len(calls.read_text().split()) == 3
    assert "role-secret-value" not in run.output and "role-token-value" not in run.output


def test_an_advisory_refresh_that_hangs_keeps_the_credentials_still_valid(tmp_path):
    """Role credentials 12 minutes from expiry: inside botocore's advisory window (15 min), not
    its mandatory one (10 min). botocore's rule: try to refresh, and when that fails keep
    signing with the credentials, valid for minutes yet. The helper answers the resolution
    only, then hangs: the restore goes on to the store (refused here: that is its one error),
    and the hung helper is killed when the step ends. Before: "refreshing the AWS credentials
    ... did not answer in time"."""
    env = _expiring_profile(tmp_path, minutes=12, answers=1)
    run = _restore(env, tmp_path)
    assert run.code == 3, run.output
    errors = [line for line in run.output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "AWS credentials" not in errors[0], run.output
    assert "127.0.0.1" in errors[0], run.output
    assert "role-secret-value" not in run.output and "role-token-value" not in run.output
    started = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert len(started) >= 2, "no refresh was tried"
    wait_until(lambda: all(_dead(pid) for pid in started), what="the hung helper killed")


def test_an_advisory_refresh_runs_beside_the_signing_and_is_used_once_it_answers():
    """In-process: while the advisory refresh is held, each signing gets the credentials still
    valid, at once (before: it waited for the refresh, then failed at the deadline); once the
    refresh answers, the new ones are used."""
    import botocore.session
    from botocore.credentials import RefreshableCredentials

    from gpuci.cache._stores.s3.credentials import Chain

    def expiry(minutes: int) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + minutes * 60))

    release = threading.Event()

    def refresh() -> dict[str, str]:
        release.wait(GIVE_UP_S)
        return {"access_key": "AKIANEW", "secret_key": "s", "token": "t", "expiry_time": expiry(60)}

    old = {"access_key": "AKIAOLD", "secret_key": "s", "token": "t", "expiry_time": expiry(12)}
    creds = RefreshableCredentials.create_from_metadata(old, refresh, "custom-process")
    chain = Chain(botocore.session.Session(), "s3://bucket", 0.5)
    try:
        for _ in range(3):
            assert chain.frozen(creds, time.monotonic() + 4).access_key == "AKIAOLD"
    finally:
        release.set()
    wait_until(lambda: chain.frozen(creds, time.monotonic() + 4).access_key == "AKIANEW")


# ----- web identity (STS) and the instance role (IMDS) -------------------------------------------


def _web_identity_env(tmp_path: Path, sts: str) -> dict[str, str]:
    """A job that assumes a role with a web-identity token, its STS at ``sts``."""
    token = tmp_path / "token"
    token.write_text("web-identity-token-value")
    return _env(
        tmp_path,
        AWS_WEB_IDENTITY_TOKEN_FILE=str(token),
        AWS_ROLE_ARN="arn:aws:iam::123456789012:role/ci",
        AWS_ROLE_SESSION_NAME="gpuci-test",
        AWS_ENDPOINT_URL_STS=sts,
    )


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_sts_for_web_identity_that_never_answers_ends_by_the_deadline(tmp_path, mode):
    with hanging_endpoint(mode) as sts:
        run = _restore(_web_identity_env(tmp_path, sts), tmp_path)
    one_error_line(run, 3, "AWS credentials", "STS (web identity")
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
    one_error_line(run, 3, "resolving the AWS credentials", "instance metadata service")


def test_a_dry_run_with_a_hung_credential_process_ends_by_the_deadline(tmp_path):
    """Before: the dry run's "any credentials here?" check resolved the chain again, unbounded."""
    pids = tmp_path / "pids"
    env = _process_profile(tmp_path, f"echo $$ >> {pids}\nsleep 600\n")
    with refused_url() as endpoint:
        args = ["cache-weights", "restore", "--dry-run", "--store", "s3://bucket/c"]
        args += ["--endpoint-url", endpoint, "--key", "k-1", "--path", str(tmp_path / "out")]
        run = run_measured(args, env, REPO, timeout=GIVE_UP_S)
    one_error_line(run, 3, "AWS credentials", "credential_process")
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 1, "the helper was started again after the deadline"
    wait_until(lambda: all(_dead(pid) for pid in started), what="the helper killed")


def test_a_failing_credential_process_s_stderr_is_never_printed(tmp_path):
    env = _process_profile(tmp_path, "echo 'debug: token=SuperSecretValue123' >&2\nexit 1\n")
    run = _restore(env, tmp_path)
    one_error_line(run, 3, "AWS credentials", "credential_process")
    assert "SuperSecretValue123" not in run.output, run.output


# ----- what a helper leaves behind, a cancelled step ---------------------------------------------


def test_a_helper_that_exits_leaving_a_child_on_its_pipes_has_the_child_killed(tmp_path):
    """The helper exits at once; its child keeps its stdout open, so botocore still waits.
    At the deadline the child is killed with the group, though its leader is gone. Before:
    only groups whose leader was still running were killed."""
    pids = tmp_path / "pids"
    env = _process_profile(tmp_path, f"sleep 600 &\necho $! > {pids}\n")
    run = _restore(env, tmp_path)
    one_error_line(run, 3, "resolving the AWS credentials", "credential_process")
    pid = int(pids.read_text())
    wait_until(lambda: _dead(pid), what="the helper's child killed")


def test_what_a_helper_leaves_running_is_killed_when_the_step_ends(tmp_path):
    """The helper answers and leaves a child behind (its pipes closed): the step goes on, and
    the child dies with the step. Before: it outlived it."""
    pids = tmp_path / "pids"
    answer = '{"Version": 1, "AccessKeyId": "AKIASTATIC", "SecretAccessKey": "static-secret"}'
    env = _process_profile(
        tmp_path, f"sleep 600 </dev/null >/dev/null 2>&1 &\necho $! > {pids}\necho '{answer}'\n"
    )
    run = _restore(env, tmp_path)
    assert run.code == 3 and "127.0.0.1" in run.output, run.output  # the store refused
    pid = int(pids.read_text())
    wait_until(lambda: _dead(pid), what="the helper's child killed")


def _to_other_threads(pid: int, sig: int) -> None:
    """``sig`` to each thread of ``pid`` but its main one (``tgkill``): where the kernel may
    hand a process's signal, and the main thread, blocked in a wait, hears nothing."""
    libc = ctypes.CDLL(None, use_errno=True)
    for task in os.listdir(f"/proc/{pid}/task"):
        if int(task) != pid:
            libc.syscall(_TGKILL[os.uname().machine], pid, int(task), sig)


_TGKILL = {"x86_64": 234, "aarch64": 131}


@pytest.mark.parametrize(
    ("sig", "code", "thread"),
    [
        (signal.SIGINT, 130, "main"),
        (signal.SIGTERM, -15, "main"),
        (signal.SIGTERM, -15, "other"),
    ],
    ids=["SIGINT", "SIGTERM", "SIGTERM-to-another-thread"],
)
def test_a_cancelled_step_kills_its_credential_process(tmp_path, sig, code, thread):
    """Ctrl-C or the runner's SIGTERM while a helper runs (in a session of its own, it hears
    neither): the helper and its child die with the step. Before: both were left running.
    The kernel may hand the signal to any thread: one handed to the helper's thread ended the
    step only at the chain's deadline (600 s here) before the main thread's wait woke often."""
    if thread == "other" and os.uname().machine not in _TGKILL:
        pytest.skip(f"no tgkill number known for {os.uname().machine}")
    pids = tmp_path / "pids"
    env = _process_profile(tmp_path, f"sleep 600 &\necho $! $$ > {pids}\nwait\n")
    env["GPUCI_S3_TIMEOUT"] = "600"  # the deadline is far: the signal is what ends the step
    started: list[int] = []
    with refused_url() as endpoint:
        args = [sys.executable, "-m", "gpuci", "cache-weights", "restore", "--store"]
        args += ["s3://bucket/c", "--endpoint-url", endpoint, "--key", "k-1"]
        args += ["--path", str(tmp_path / "out")]
        step = subprocess.Popen(
            args, env=env, cwd=REPO, stdout=subprocess.PIPE, text=True, preexec_fn=hears_ctrl_c
        )
        try:
            wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2)
            started = [int(pid) for pid in pids.read_text().split()]
            if thread == "other":
                _to_other_threads(step.pid, sig)
                step.communicate(timeout=GIVE_UP_S)  # far short of the chain's 600 s deadline
            else:
                step.send_signal(sig)
                step.communicate(timeout=GIVE_UP_S)
            assert step.returncode == code  # SIGTERM still ends the step as SIGTERM does
            wait_until(lambda: all(_dead(pid) for pid in started), what="the helper killed")
        finally:
            step.kill()
            for pid in started:  # this test's own leftovers, should it fail
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


# ----- errors that are not botocore's own ------------------------------------------------------


@pytest.mark.parametrize("broken", ["missing", "not executable"])
def test_a_credential_process_that_cannot_start_is_a_configuration_error(tmp_path, broken):
    """Before: "internal error" (FileNotFoundError, PermissionError from Popen). Exit 2: the
    AWS configuration names a helper that cannot run; the fix is there, not in the world."""
    env = _process_profile(tmp_path, "echo never\n")
    helper = tmp_path / "creds.sh"
    if broken == "missing":
        helper.unlink()
    else:
        helper.chmod(0o644)
    run = _restore(env, tmp_path)
    one_error_line(run, 2, "AWS credentials", "credential_process")
    assert str(tmp_path) not in run.output, run.output  # the command line may hold a secret


def test_a_missing_web_identity_token_file_is_a_configuration_error(tmp_path):
    """Before: "internal error" (FileNotFoundError from botocore's token loader)."""
    env = _env(
        tmp_path,
        AWS_WEB_IDENTITY_TOKEN_FILE=str(tmp_path / "no-token"),
        AWS_ROLE_ARN="arn:aws:iam::123456789012:role/ci",
    )
    run = _restore(env, tmp_path)
    one_error_line(run, 2, "AWS credentials", "STS (web identity")


def test_a_helper_answering_credentials_already_expired_is_one_line(tmp_path):
    """botocore refreshes them at once and, given expired ones again, raises RuntimeError.
    Before: "internal error"."""
    env = _expiring_profile(tmp_path, minutes=-5, answers=100)
    run = _restore(env, tmp_path)
    one_error_line(run, 3, "AWS credentials", "credential_process")


@contextmanager
def refusing_sts() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` answering every request 403 AccessDenied, as STS does for a
    role whose trust policy says no; the message holds what must not be printed."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = (
                b"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
                b"<Message>not authorized: token=LeakedSecret42</Message></Error>"
                b"<RequestId>r-1</RequestId></ErrorResponse>"
            )
            self.send_response(403)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with LoopbackHTTPServer(Handler) as server:
        yield f"http://127.0.0.1:{server.port}"


def test_sts_refusing_the_web_identity_role_is_one_line(tmp_path):
    """Before: "internal error" (botocore's ClientError is no BotoCoreError)."""
    with refusing_sts() as sts:
        run = _restore(_web_identity_env(tmp_path, sts), tmp_path)
    one_error_line(run, 3, "AWS credentials", "STS (web identity", "AccessDenied")
    assert "LeakedSecret42" not in run.output and "web-identity-token-value" not in run.output


# ----- the AWS files themselves (review C, finding 3) --------------------------------------------


def _bad_input_line(run, *words: str) -> None:
    """Exit 2 with exactly one "bad input" line holding ``words``, no traceback."""
    assert run.code == 2, run.output
    assert "Traceback" not in run.output and "internal error" not in run.output, run.output
    lines = [line for line in run.output.splitlines() if "bad input" in line]
    assert len(lines) == 1 and all(word in lines[0] for word in words), run.output


@pytest.mark.parametrize(
    ("variable", "planted", "profile"),
    [
        ("AWS_SHARED_CREDENTIALS_FILE", "fifo", ""),
        ("AWS_CONFIG_FILE", "fifo", ""),
        ("AWS_CONFIG_FILE", "fifo", "lab"),  # botocore is asked too, and must not wait either
        ("AWS_CONFIG_FILE", "/dev/zero", ""),
    ],
)
def test_an_aws_file_that_is_a_fifo_or_a_device_is_skipped_as_botocore_does(
    tmp_path, variable, planted, profile
):
    """botocore skips an AWS file that is no regular file (``os.path.isfile``), so gpu-ci does
    too, never opening it: the chain goes on without it, as the AWS CLI would. Before: the
    restore waited for ever opening the FIFO (reading /dev/zero: for ever, into memory)."""
    path = tmp_path / "fifo"
    if planted == "fifo":
        os.mkfifo(path)
    else:
        path = Path(planted)
    env = _env(tmp_path, **{variable: str(path)}, **({"AWS_PROFILE": profile} if profile else {}))
    run = _restore(env, tmp_path)
    if profile:  # the config file skipped: botocore does not know the profile
        _bad_input_line(run, f"AWS profile '{profile}'")
    else:  # nothing else in the chain
        one_error_line(run, 3, "no AWS credentials found")


@pytest.mark.parametrize("variable", ["AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"])
def test_an_aws_file_over_1_mib_is_one_line_naming_it(tmp_path, variable):
    """botocore would read it whole into memory; gpu-ci reads 1 MiB and one byte, then says
    which file. Before: read whole (the config file twice), then handed to botocore."""
    big = tmp_path / "big"
    big.write_text("[default]\n" + "# padding\n" * 110_000)
    run = _restore(_env(tmp_path, **{variable: str(big)}), tmp_path)
    _bad_input_line(run, "AWS file", str(big), "over 1 MiB")


def test_a_credential_process_printing_200_mb_is_cut_off_and_killed(tmp_path):
    """Review C, finding 4: botocore's ``communicate()`` held all a helper printed (400 MB: peak
    RSS 1.2 GiB). Now it reads 1 MiB of each pipe, then the helper's group is killed."""
    pids = tmp_path / "pids"
    env = _process_profile(
        tmp_path, f"echo $$ > {pids}\nhead -c 200000000 /dev/zero | tr '\\0' x\n"
    )
    run = _restore(env, tmp_path)
    assert 0 < run.peak_kib < 150 << 10, f"peak RSS {run.peak_kib} KiB"  # before: ~600 MiB
    one_error_line(run, 3, "credential_process printed more than 1 MiB")
    pid = int(pids.read_text())
    wait_until(lambda: _dead(pid), what="the flooding helper killed")
