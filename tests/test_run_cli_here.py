"""run_cli_here (tests/gpuci_testing.py) runs the CLI in the pytest worker, which then runs
every later test: what a process's end would undo must be undone, or found, there."""

from __future__ import annotations

import faulthandler
import signal
import threading

import pytest

from gpuci_testing import REPO, clean_env, run_cli_here, run_python


def test_an_in_process_gpu_smoke_disarms_its_backstop_and_ends_its_threads(tmp_path, monkeypatch):
    """gpu-smoke arms faulthandler to end its process if a check hangs holding the GIL; in
    process, an armed timer left behind would end this xdist worker later, in another test."""
    calls: list[str] = []
    arm, disarm = faulthandler.dump_traceback_later, faulthandler.cancel_dump_traceback_later

    def arming(*args, **kwargs):
        calls.append("arm")
        arm(*args, **kwargs)

    def disarming():
        calls.append("disarm")
        disarm()

    monkeypatch.setattr(faulthandler, "dump_traceback_later", arming)
    monkeypatch.setattr(faulthandler, "cancel_dump_traceback_later", disarming)
    threads = set(threading.enumerate())
    env = clean_env(GPUCI_FAKE_NVML="h200,h200", GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    proc = run_cli_here("gpu-smoke", "--framework", "none", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "arm" in calls and calls[-1] == "disarm", calls  # armed while it ran, not after
    left = [t.name for t in set(threading.enumerate()) - threads if t.name.startswith("gpuci")]
    assert left == [], left


def _leaves(monkeypatch, what) -> str:
    """run_cli_here's failure for a ``main`` that does ``what`` and returns 0."""

    def main(argv):
        what()
        return 0

    monkeypatch.setattr("gpuci.cli.main", main)
    with pytest.raises(AssertionError) as failed:
        run_cli_here("--version")
    return str(failed.value)


def test_a_run_that_leaves_faulthandler_armed_fails_and_is_disarmed(monkeypatch):
    disarmed: list[bool] = []
    disarm = faulthandler.cancel_dump_traceback_later
    monkeypatch.setattr(faulthandler, "cancel_dump_traceback_later", lambda: disarmed.append(1))
    message = _leaves(monkeypatch, lambda: faulthandler.dump_traceback_later(3600, exit=True))
    disarm()  # the real one, whatever the check did
    assert "faulthandler.dump_traceback_later still armed" in message
    assert disarmed, "the timer was left armed: it would end this worker in an hour"


def test_a_run_that_changes_a_signal_handler_fails_and_it_is_put_back(monkeypatch):
    before = signal.getsignal(signal.SIGALRM)  # pytest-timeout's, where it uses signals
    message = _leaves(monkeypatch, lambda: signal.signal(signal.SIGALRM, signal.SIG_IGN))
    assert "SIGALRM handler" in message
    assert signal.getsignal(signal.SIGALRM) == before


def test_a_run_that_leaves_a_thread_running_fails(monkeypatch):
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="gpuci-left", daemon=True)
    monkeypatch.setattr("gpuci_testing.THREADS_END_S", 0.0)  # not waited for: it never ends
    try:
        message = _leaves(monkeypatch, thread.start)
    finally:
        stop.set()
    assert "thread gpuci-left still running" in message


def test_the_sigterm_handler_main_sets_is_put_back_without_a_failure(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    env = clean_env(GPUCI_JOURNAL=str(tmp_path / "j.jsonl"))
    assert run_cli_here("report", env=env, cwd=tmp_path).returncode == 0
    assert signal.getsignal(signal.SIGTERM) == before


def test_httpx_own_command_line_is_back_after_an_in_process_run():
    """The CLI swaps in a stand-in for httpx's CLI module, for a process it owns; a later
    test's ``import httpx`` in this worker gets httpx's own."""
    code = (
        "import sys\n"
        "from gpuci_testing import run_cli_here\n"
        "assert run_cli_here('--version').returncode == 0\n"
        "assert 'httpx._main' not in sys.modules, sys.modules['httpx._main']\n"
    )
    env = clean_env(PYTHONPATH=f"{REPO / 'src'}:{REPO / 'tests'}")
    proc = run_python("-c", code, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_children_a_run_leaves_in_its_groups_end_with_it_as_at_a_process_exit(monkeypatch):
    from gpuci import procgroup

    started = []

    def main(argv):
        started.append(procgroup.Groups().popen(["sleep", "600"]))
        return 0

    monkeypatch.setattr("gpuci.cli.main", main)
    assert run_cli_here("--version").returncode == 0
    try:
        assert started[0].poll() is not None, "the child outlived the run"
    finally:
        procgroup.kill(started[0])
