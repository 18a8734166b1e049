"""A child's output is an input: bounded in time and size, and git is optional everywhere."""

import os
import signal
import subprocess
import sys

import pytest

from gpuci import untrusted_child
from gpuci.training import _ci as ci
from gpuci.untrusted_json import Unusable


def _fake_git(tmp_path, monkeypatch, body: str) -> None:
    """A ``git`` first on PATH that runs ``body`` (Python) whatever it is asked."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "git"
    script.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")


def test_git_answers_one_line_in_a_checkout(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert untrusted_child.git("rev-parse", "--show-toplevel", cwd=tmp_path) == str(tmp_path)
    assert untrusted_child.git("rev-parse", "HEAD", cwd=tmp_path) == ""  # no commit yet


def test_a_missing_git_is_no_answer_not_an_error(tmp_path):
    assert untrusted_child.git("rev-parse", "HEAD", env={"PATH": str(tmp_path)}) == ""


def test_a_git_printing_megabytes_is_no_answer(tmp_path, monkeypatch):
    """A checkout's config (any earlier step may write it) makes git print a huge 'remote'."""
    _fake_git(tmp_path, monkeypatch, "sys.stdout.write('x' * (2 << 20))")
    assert ci.detect({}).repository == ""


def test_a_child_printing_without_end_is_cut_at_the_cap():
    with pytest.raises(Unusable, match="over 1000 bytes"):
        untrusted_child.run(["yes"], timeout=60, limit=1000)


def test_a_hung_child_is_killed_at_its_deadline(tmp_path, monkeypatch):
    _fake_git(tmp_path, monkeypatch, "print('half', flush=True); time.sleep(600)")
    with pytest.raises(TimeoutError):
        untrusted_child.run(["git"], timeout=0.5)
    monkeypatch.setattr(untrusted_child, "GIT_TIMEOUT_S", 0.5)
    assert untrusted_child.git("rev-parse", "HEAD") == ""


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie awaiting its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_what_the_child_left_behind_is_killed_with_it():
    """A hook's background process (its own stdout elsewhere) outlived git before: only the
    child was killed, never its process group."""
    from gpuci_testing import wait_until

    code, out = untrusted_child.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], timeout=30)
    pid = int(out)
    try:
        wait_until(lambda: _gone(pid), what="the background sleep to be killed")
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
    assert code == 0


def test_a_hung_child_keeps_what_it_printed_and_a_tail_is_only_the_last_bytes():
    with pytest.raises(untrusted_child.Hung) as hung:
        untrusted_child.run(["sh", "-c", "echo started; sleep 600"], timeout=1)
    assert hung.value.output == "started\n"
    code, out = untrusted_child.run(
        ["sh", "-c", "head -c 100000 /dev/zero; echo done >&2"], timeout=60, limit=10,
        stderr=True, tail=True,
    )  # fmt: skip
    assert (code, out) == (0, "\0\0\0\0\0done\n")
