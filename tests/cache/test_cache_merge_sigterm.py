"""The runner's SIGTERM mid-merge waits for the merge, or for its undo: never a mixed folder.

A restore merging into a folder the job already has replaces one name at a time. The CLI's
SIGTERM handler ended the process at once, so a cancel landing mid-merge left the folder part
old files, part new, with no undo (the replaced files sat in the staging folder's trash, which
the next restore's sweep deletes). The merge and its undo now hold SIGTERM
(:mod:`gpuci.sigterm_hold`); it is delivered after, and the process still ends by it.

Staged in a child running the real CLI: the merge's first replaced file sends the SIGTERM
(to the process: the kernel gives it to a thread not blocking it, the idle one when there is
one; the CLI's handler then runs on the main thread mid-merge, and the SIGTERM it raises
again to end the process is held there too).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cache_testing import cache_cmd
from cache_testing import store_flags as _flags

import gpuci
from gpuci_testing import clean_env

FILES = 8

CHILD = textwrap.dedent(
    """
    import errno, os, signal, sys, threading
    from gpuci import cli
    from gpuci.cache._restore import merge

    fail_at, other_thread = int(sys.argv[1]), sys.argv[2] == "thread"
    if other_thread:  # idle, not blocking SIGTERM: the kernel may hand it the signal
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    put, done = merge.Placement._put, []

    def putting(self, *args, **kwargs):
        put(self, *args, **kwargs)
        done.append(1)
        if len(done) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the runner's cancel, mid-merge
        if len(done) == fail_at:
            raise OSError(errno.EIO, "the disk went away")  # the merge fails: undone

    merge.Placement._put = putting
    sys.exit(cli.main(sys.argv[3:]))
    """
)


def _tree(root: Path, word: str) -> Path:
    root.mkdir(parents=True)
    for i in range(FILES):
        (root / f"f{i}.txt").write_text(f"{word} {i}")
    return root


def _words(root: Path) -> set[str]:
    return {path.read_text().split()[0] for path in root.glob("f*.txt")}


@pytest.mark.parametrize("other_thread", [False, True], ids=["main-only", "another-thread"])
@pytest.mark.parametrize("fails", [False, True], ids=["merge-completes", "merge-undone"])
def test_a_sigterm_mid_merge_leaves_the_folder_all_new_or_all_old(
    tmp_path, env, fails, other_thread
):
    store = (tmp_path / "store").as_uri()
    saved, _ = cache_cmd("save", _flags(store, "k", _tree(tmp_path / "new", "NEW")), env)
    assert saved.ok, saved.headline
    target = _tree(tmp_path / "job" / "models", "OLD")
    child_env = clean_env(**env, PYTHONPATH=str(Path(gpuci.__file__).parents[1]))
    args = ["cache-weights", "restore", "--store", store, "--key", "k", "--path", str(target)]
    fail_at = "3" if fails else "0"
    thread = "thread" if other_thread else "alone"
    got = subprocess.run(
        [sys.executable, "-c", CHILD, fail_at, thread, *args],
        capture_output=True,
        text=True,
        env=child_env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert got.returncode == -signal.SIGTERM, got.stdout + got.stderr  # it still ends by it
    assert _words(target) == ({"OLD"} if fails else {"NEW"})
    assert len(list(target.glob("f*.txt"))) == FILES


def test_a_held_sigterm_is_delivered_once_the_hold_ends():
    from gpuci.sigterm_hold import sigterm_held

    heard: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, _frame: heard.append(signum))
    try:
        with sigterm_held():
            assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, ())
            signal.raise_signal(signal.SIGTERM)
            assert heard == []  # held
        assert heard == [signal.SIGTERM]  # delivered as the mask is restored
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, ())
    finally:
        signal.signal(signal.SIGTERM, before)
