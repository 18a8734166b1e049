"""One way to kill a child with whatever it started (gpuci.procgroup), for the credential
helpers and gpu-smoke's all-reduce child alike."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuci import procgroup
from gpuci.cli import _kill_helpers_on_sigterm
from gpuci_testing import REPO, hears_ctrl_c, wait_until

LEAVE_A_CHILD = ["sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 & echo $!"]


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie is dead, waiting for its parent (init)
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_kill_reaches_a_child_whose_leader_has_exited():
    from gpuci.cli import _kill_helpers_on_sigterm

    _kill_helpers_on_sigterm()  # as the CLI does
    groups = procgroup.Groups()
    leader = groups.popen(LEAVE_A_CHILD, stdout=subprocess.PIPE, text=True)
    child = int(leader.communicate()[0])
    try:
        assert leader.returncode == 0 and not _dead(child)
        groups.kill()
        wait_until(lambda: _dead(child), what="the leader's child killed")
    finally:
        if not _dead(child):
            os.kill(child, signal.SIGKILL)


def test_kill_reaches_a_running_leader_and_reaps_it():
    leader = subprocess.Popen(["sleep", "600"], start_new_session=True)
    procgroup.kill(leader)
    assert leader.returncode == -signal.SIGKILL


def test_a_group_id_reused_by_another_process_is_left_alone(monkeypatch):
    """The leader was reaped and its pid now names a process that is not ours (simulated:
    another session's leader): no signal goes to that process's group."""
    leader = subprocess.Popen(["true"], start_new_session=True)
    leader.wait()
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    killpg, sent = os.killpg, []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: sent.append(sig) or killpg(pgid, sig))
    try:
        leader.pid = other.pid
        procgroup.kill(leader)
        assert signal.SIGKILL not in sent, "another process's group was killed"
    finally:
        other.kill()
        other.wait()


_STEP = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from gpuci import procgroup

    from gpuci.cli import _kill_helpers_on_sigterm

    _kill_helpers_on_sigterm()  # as the CLI does
    groups = procgroup.Groups()
    leader = groups.popen(["sh", "-c", "sleep 600 & echo $!; wait"], stdout=subprocess.PIPE)
    print(leader.stdout.readline().decode().strip(), flush=True)
    if sys.argv[1] == "exit":
        sys.exit(0)
    time.sleep(600)  # the signal ends it
    """
)


@pytest.mark.parametrize(("how", "code"), [("exit", 0), ("SIGINT", -2), ("SIGTERM", -15)])
def test_what_is_left_is_killed_on_the_way_out(how, code):
    """A normal exit, Ctrl-C (KeyboardInterrupt) or SIGTERM (which still ends the process, by
    SIGTERM): the child, in a session of its own, heard none of them, and dies all the same."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    step = subprocess.Popen(
        [sys.executable, "-c", _STEP, how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=hears_ctrl_c,
    )
    child = int(step.stdout.readline()) if step.stdout else 0
    try:
        if how != "exit":
            step.send_signal(getattr(signal, how))
        step.communicate(timeout=60)
        assert step.returncode == code
        wait_until(lambda: _dead(child), what="the child killed on the way out")
    finally:
        step.kill()
        if not _dead(child):
            os.kill(child, signal.SIGKILL)


def test_sigterm_handled_by_someone_else_is_left_to_them():
    """A handler already there (pods' cancel guard) keeps SIGTERM: none is put over it."""
    mine = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _kill_helpers_on_sigterm()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, mine)


def test_the_library_leaves_the_sigterm_handler_alone():
    """Only the CLI sets one: a library user's process keeps its own SIGTERM behaviour."""
    mine = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        procgroup.Groups().popen(["true"]).wait()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, mine)


# ----- a bounded communicate() (review C, finding 4) ---------------------------------------------


def test_a_capped_child_s_answer_within_the_limit_is_read_whole():
    groups = procgroup.Groups()
    proc = groups.popen(
        ["sh", "-c", "echo answer; echo said >&2; exit 3"],
        max_output=1024,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.communicate() == (b"answer\n", b"said\n")
    assert proc.returncode == 3


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_capped_child_printing_past_the_limit_is_killed_with_its_group(tmp_path, stream):
    """Before: ``communicate()`` read it all into memory (an endless one: for ever). Now reading
    stops past the limit and the group dies, the background child with it."""
    pids = tmp_path / "pids"
    flood = "yes flood" + (" >&2" if stream == "stderr" else "")
    script = f"sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {pids}\n{flood}\n"
    groups = procgroup.Groups()
    proc = groups.popen(
        ["sh", "-c", script], max_output=1 << 20, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    with pytest.raises(procgroup.OutputFlood, match="printed more than 1,048,576 bytes"):
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    wait_until(lambda: _dead(int(pids.read_text())), what="the helper's child killed")
