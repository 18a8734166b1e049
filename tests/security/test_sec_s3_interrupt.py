"""Ctrl-C during an S3 restore or save whose store never answers (review H, findings 3 and 4):
the step ends with exit 130 and one "interrupted" line, and sends no request after the
interrupt. The store's timeout is set far past the test's guard, so a step that waits its
requests out (or retries them) fails the guard; no duration is asserted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from hostile_s3 import HostileS3, Rule, new_s3_bucket, s3_cli_env, save_tree

from gpuci_testing import REPO, wait_until

# Far past GUARD: a step that waits out one request cannot end within the guard.
S3_TIMEOUT = "600"
GUARD = 60.0


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuci", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _interrupted(proc: subprocess.Popen[str]) -> tuple[int | None, str]:
    """SIGINT, then the exit code and output (None: still running at the guard, killed)."""
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=GUARD)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out
    return proc.returncode, out


def _ctrl_c_sends_nothing_more(
    hostile: HostileS3, args: list[str], env: dict[str, str], fired: int, what: str
) -> None:
    """Run ``gpuci args`` through ``hostile``; once its rule has fired ``fired`` times, Ctrl-C:
    the step ends with exit 130 and one "interrupted" line, and no request the rule matches
    is sent after."""
    rule = hostile.rule
    assert rule is not None
    proc = _start([*args, "--endpoint-url", hostile.url], env, REPO)
    wait_until(lambda: rule.fired >= fired, what=what)
    before = sum(1 for m, target in list(hostile.seen) if rule.matches(m, target))
    code, out = _interrupted(proc)
    after = sum(1 for m, target in list(hostile.seen) if rule.matches(m, target)) - before
    assert code == 130, out
    assert "interrupted" in out and "Traceback" not in out, out
    assert after == 0, f"{after} {what}s sent after the Ctrl-C"


def test_ctrl_c_during_an_s3_restore_ends_it_and_sends_no_get_after(moto_endpoint, tmp_path):
    env = s3_cli_env(tmp_path, AWS_MAX_ATTEMPTS="3", GPUCI_S3_TIMEOUT=S3_TIMEOUT)
    bucket, _src = save_tree(moto_endpoint, tmp_path, "stop-restore-", 3 << 20, env)
    args = ["cache-weights", "restore", "--store", f"s3://{bucket}/c", "--key", "k-1"]
    with HostileS3(moto_endpoint) as hostile:
        hostile.rule = Rule("silent", method="GET", contains="/blobs/")
        _ctrl_c_sends_nothing_more(
            hostile, [*args, "--path", str(tmp_path / "m")], env, 1, "blob GET"
        )


def test_ctrl_c_during_an_s3_save_ends_it_and_sends_no_put_after(moto_endpoint, tmp_path):
    env = s3_cli_env(tmp_path, AWS_MAX_ATTEMPTS="3", GPUCI_S3_TIMEOUT=S3_TIMEOUT)
    bucket = new_s3_bucket(moto_endpoint, "stop-save-")
    src = tmp_path / "src"
    (src / "small").mkdir(parents=True)
    (src / "big.bin").write_bytes(os.urandom(8 << 20))
    for i in range(40):  # several packs: the save's main thread waits on their PUTs
        (src / "small" / f"s{i}.bin").write_bytes(os.urandom(200_000))
    with HostileS3(moto_endpoint) as hostile:
        # Every blob and pack PUT is held: the large file's upload and the packs both hang.
        # (Not the conditional-writes question's 1-byte PUT, asked on a thread of its own beside
        # the uploads: counted as an upload, it let the Ctrl-C come with one upload held.)
        hostile.rule = Rule("silent", method="PUT", contains=("/c/blobs/", "/c/packs/"))
        args = ["cache-weights", "save", "--store", f"s3://{bucket}/c", "--key", "k-1"]
        _ctrl_c_sends_nothing_more(hostile, [*args, "--path", str(src)], env, 2, "blob or pack PUT")
