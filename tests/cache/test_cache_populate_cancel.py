"""populate's children end with the step: Ctrl-C, the runner's SIGTERM, or the command's end.

The populate command runs through bash, which forks what it runs (``a; b``, ``a &``): killing
bash alone left the download running, writing into the job's folder after the step ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gpuci
from gpuci.cache._restore import populate
from gpuci.runtime import Runtime
from gpuci_testing import clean_env, hears_ctrl_c, wait_until


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie waiting for its reaper has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _forking_command(pid_file: Path) -> str:
    """A command whose download is a grandchild: it records its pid, then says it started."""
    return f"sleep 1000 & echo $! > {pid_file}; echo started; wait"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_cancelled_populate_kills_what_its_command_started(tmp_path, signum):
    pid_file = tmp_path / "download.pid"
    env = clean_env(
        HOME=str(tmp_path / "home"),
        GPUCI_JOURNAL=str(tmp_path / "journal.jsonl"),
        GPUCI_LOCAL_CACHE="off",
        PYTHONPATH=str(Path(gpuci.__file__).parents[1]),  # the gpuci under test
    )
    args = ["--store", (tmp_path / "store").as_uri(), "--key", "k", "--path", str(tmp_path / "w")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuci", "cache-weights", "restore", *args,
         "--populate", _forking_command(pid_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        preexec_fn=hears_ctrl_c,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the command has started its download: cancel the step now
            if b"populate: started" in line:
                break
        download = int(pid_file.read_text())
        proc.send_signal(signum)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode in (130, -signal.SIGTERM), proc.returncode
    wait_until(lambda: _gone(download), what="the populate command's download to end")


def test_what_a_populate_command_left_running_ends_with_it(tmp_path):
    pid_file = tmp_path / "download.pid"
    command = f"sleep 1000 >/dev/null 2>&1 & echo $! > {pid_file}"
    populate.run_command(command, Runtime(dict(os.environ)))
    download = int(pid_file.read_text())
    wait_until(lambda: _gone(download), what="the straggler to end before the save reads")


def test_a_ctrl_c_while_populate_runs_kills_its_group(tmp_path, monkeypatch):
    pid_file = tmp_path / "download.pid"
    rt = Runtime(dict(os.environ))

    def log(message: str) -> None:
        if message == "populate: started":
            raise KeyboardInterrupt

    monkeypatch.setattr(rt, "log", log)
    with pytest.raises(KeyboardInterrupt):
        populate.run_command(_forking_command(pid_file), rt)
    download = int(pid_file.read_text())
    wait_until(lambda: _gone(download), what="the download to end with its step")


def test_a_straggler_holding_the_commands_output_does_not_hold_the_step(tmp_path):
    """``sleep 1000 &`` keeps the command's output open: the log's read waited for it (1000 s)
    although bash had ended; the group is killed as bash ends, which closes the output."""
    import threading

    pid_file = tmp_path / "download.pid"
    command = f"sleep 1000 & echo $! > {pid_file}; echo started"
    done: list[object] = []
    worker = threading.Thread(
        target=lambda: done.append(populate.run_command(command, Runtime(dict(os.environ)))),
        daemon=True,
    )
    worker.start()
    worker.join(60)
    hung = worker.is_alive()
    download = int(pid_file.read_text())
    if hung:  # let the blocked read end
        os.kill(download, signal.SIGKILL)
        worker.join(60)
    assert not hung, "the step waited for a straggler that held the command's output"
    assert done == [None]
    wait_until(lambda: _gone(download), what="the straggler to end with the command")


def test_output_without_line_breaks_is_logged_in_pieces_not_held_whole(monkeypatch):
    """A command dumping a binary (or a file of zeros) to stdout prints no line break for
    gigabytes: the log read it as one line, all in memory."""
    monkeypatch.setattr(populate, "MAX_LINE", 1000, raising=False)
    rt = Runtime(dict(os.environ))
    logged: list[str] = []
    monkeypatch.setattr(rt, "log", logged.append)
    populate.run_command("head -c 100000 /dev/zero | tr '\\0' x", rt)
    pieces = [m for m in logged if m.startswith("populate: x")]
    assert sum(len(m) - len("populate: ") for m in pieces) == 100_000
    assert max(len(m) for m in pieces) <= len("populate: ") + 1000, max(map(len, pieces))
