"""What a job (or a co-tenant) can plant beside or inside a restore's target: staging names,
a trash link, a folder where a cached file goes, links that lead a cached link out; and a
restore that fails once merging. Nothing outside the target changes, and a failed restore
leaves the job's folder as it was.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hostile_store_kit import (
    cache_cmd,
    deep_folder,
    leftovers,
    plant,
    remove_deep,
    replace_fails_on,
    restore_to,
    snapshot,
)

from gpuci.cache._restore import place

PREFIX = ".gpuci-staging-"


def _models_over_a_file(store, tmp_path: Path) -> Path:
    """A cache with a folder ``models`` and a job folder holding a file by that name."""
    plant(
        store,
        "k",
        [
            {"type": "dir", "root": 0, "path": "models", "mode": 0o755},
            {"type": "file", "root": 0, "path": "models/w.bin"},
        ],
        {"models/w.bin": b"weights"},
    )
    target = tmp_path / "w" / "t"
    target.mkdir(parents=True)
    (target / "models").write_bytes(b"ATTACKER PAYLOAD\n")
    return target


def test_a_planted_trash_link_moves_nothing_out_of_the_target(file_store, env, tmp_path):
    """s03: ``<parent>/.gpuci-staging-t.<pid>-replaced -> victim`` made the merge move the
    job's ``models`` through it, over ``victim/1``."""
    target = _models_over_a_file(file_store, tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "1").write_bytes(b"victim's own file\n")
    planted = target.parent / f"{PREFIX}t.{os.getpid()}-replaced"
    os.symlink(victim, planted)
    before = snapshot(victim)
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 0, result.headline
    assert snapshot(victim) == before
    assert (target / "models" / "w.bin").read_bytes() == b"weights"
    assert not os.path.lexists(planted)  # swept: unlinked, never followed
    assert leftovers(target.parent) == []


def test_planted_staging_names_do_not_fail_therestore_to(file_store, env, tmp_path):
    """s08: links planted under the names the next pids would stage in."""
    plant(file_store, "k", [{"type": "file", "root": 0, "path": "w.bin"}], {"w.bin": b"w"})
    (tmp_path / "w").mkdir()
    target = tmp_path / "w" / "t"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for pid in range(os.getpid() - 2, os.getpid() + 3):
        os.symlink("/nonexistent", target.parent / f"{PREFIX}t.{pid}")
        os.symlink(elsewhere, target.parent / f"{PREFIX}t.{pid}-replaced")
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 0, result.headline
    assert (target / "w.bin").read_bytes() == b"w"
    assert list(elsewhere.iterdir()) == []
    assert leftovers(target.parent) == []


def test_a_live_restore_in_another_pid_namespace_keeps_its_staging(
    file_store, env, tmp_path, monkeypatch
):
    """s18: restore A's pid is not alive in restore B's pid namespace (containers sharing the
    folder). B starts while A is filling its staging folder: B's sweep must leave it."""
    files = {f"f{i}.bin": f"{i}".encode() for i in range(3)}
    plant(file_store, "k", [{"type": "file", "root": 0, "path": p} for p in files], files)
    target = tmp_path / "w" / "t"
    child = subprocess.Popen(["true"])
    child.wait()
    monkeypatch.setattr(os, "getpid", lambda: child.pid)  # A's pid, seen from B: nobody's
    real_fill = place._fill_files
    second: list = []

    def fill_then_b_runs(*args, **kwargs):
        real_fill(*args, **kwargs)
        if not second:
            second.append(None)
            second[0] = restore_to(file_store, env, "k", target)

    monkeypatch.setattr(place, "_fill_files", fill_then_b_runs)
    first = restore_to(file_store, env, "k", target)
    assert second[0].exit_code == 0, second[0].headline
    assert first.exit_code == 0, first.headline
    assert {p: (target / p).read_bytes() for p in files} == files
    assert leftovers(target.parent) == []


def test_a_dead_restores_staging_is_swept_and_an_unlocked_one_only_once_old(tmp_path):
    from gpuci.cache._restore import staging

    target = tmp_path / "t"
    dead = staging.make(target)  # its restore died: the kernel dropped its lock
    os.close(dead.lock)
    live = staging.make(target)
    old, young = tmp_path / f"{PREFIX}t.12345", tmp_path / f"{PREFIX}t.12346-replaced"
    old.mkdir()  # an older gpu-ci's: no lock to look at
    young.mkdir()
    unlocked = tmp_path / f"{PREFIX}t.{'0' * 16}.1"  # killed before it locked: mode 0
    unlocked.mkdir()
    os.close(os.open(unlocked / staging.LOCK, os.O_CREAT | os.O_WRONLY, 0))
    past = time.time() - staging.UNLOCKED_GRACE - 60
    os.utime(old, (past, past))
    other = tmp_path / f"{PREFIX}t.x.y"  # not a staging name: not ours to touch
    other.mkdir()
    staging.sweep_stale(target)
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {live.path.name, young.name, unlocked.name, other.name}
    live.remove()
    os.close(dead.fd)


def _job_folder(target: Path, outside: Path) -> None:
    (target / "notes").mkdir(parents=True)
    (target / "notes" / "mine.txt").write_text("the job's own work\n")
    (target / "model.bin").write_text("job's model\n")
    (target / "z.bin").write_text("job's z\n")


CACHED = {"notes": b"cached notes", "model.bin": b"cached model", "z.bin": b"cached z"}


def _plant_cached(store, link: bool) -> None:
    entries = [{"type": "file", "root": 0, "path": p} for p in CACHED]
    if link:
        entries.append({"type": "symlink", "root": 0, "path": "c", "target": "a/x"})
    plant(store, "k", entries, dict(CACHED))


def test_a_link_leaving_through_the_jobs_links_is_refused_before_any_merge(
    file_store, env, tmp_path
):
    """s04 A: the job's ``a -> outside``; the cache's ``c -> a/x`` would land outside."""
    target, outside = tmp_path / "t", tmp_path / "outside"
    outside.mkdir()
    _job_folder(target, outside)
    os.symlink(outside, target / "a")
    _plant_cached(file_store, link=True)
    before = snapshot(target)
    result = restore_to(file_store, env, "k", target)
    assert snapshot(target) == before
    assert result.exit_code == 2
    assert "resolves to" in result.headline and "nothing was restored" in result.headline
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("over", ["file-over-jobs-folder", "folder-over-jobs-link"])
def test_job_links_the_merge_replaces_do_not_count(file_store, env, tmp_path, over):
    """Only links the merge keeps can lead a cached link out: one under a folder the cache
    replaces with a file, or a job's link the cache replaces with a folder, cannot."""
    target, outside = tmp_path / "t", tmp_path / "outside"
    outside.mkdir()
    target.mkdir()
    if over == "file-over-jobs-folder":
        (target / "x").mkdir()
        os.symlink(outside, target / "x" / "y")
        entries = [
            {"type": "file", "root": 0, "path": "x"},
            {"type": "symlink", "root": 0, "path": "l", "target": "x/y"},
        ]
    else:
        os.symlink(outside, target / "x")
        entries = [
            {"type": "dir", "root": 0, "path": "x", "mode": 0o755},
            {"type": "file", "root": 0, "path": "x/w"},
            {"type": "symlink", "root": 0, "path": "l", "target": "x/y"},
        ]
    plant(file_store, "k", entries, {"x": b"cached x", "x/w": b"w"})
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 0, result.headline
    assert list(outside.iterdir()) == []
    assert not (target / "x").is_symlink()
    assert leftovers(tmp_path) == []


def test_a_link_made_leaving_during_the_download_puts_everything_back(
    file_store, env, tmp_path, monkeypatch
):
    """The job makes ``a -> outside`` while the restore downloads: the check after the merge
    refuses ``c``, and the merge is undone, the job's folder and files back."""
    target, outside = tmp_path / "t", tmp_path / "outside"
    outside.mkdir()
    _job_folder(target, outside)
    _plant_cached(file_store, link=True)
    before = snapshot(target)
    real_fill = place._fill_files

    def fill_and_job_links(*args, **kwargs):
        real_fill(*args, **kwargs)
        os.symlink(outside, target / "a")

    monkeypatch.setattr(place, "_fill_files", fill_and_job_links)
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 2
    assert "resolves to" in result.headline
    os.unlink(target / "a")
    assert snapshot(target) == before
    assert leftovers(tmp_path) == []


def test_a_merge_that_fails_midway_puts_back_what_it_replaced(
    file_store, env, tmp_path, monkeypatch
):
    target, outside = tmp_path / "t", tmp_path / "outside"
    _job_folder(target, outside)
    _plant_cached(file_store, link=False)
    before = snapshot(target)
    replace_fails_on(monkeypatch, "z.bin")
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 3, result.headline
    assert snapshot(target) == before
    assert leftovers(tmp_path) == []


def test_a_second_root_of_the_wrong_type_is_refused_before_the_first_merges(
    file_store, env, tmp_path
):
    """s04 B: the second path is a file where the cache has a folder."""
    t0, t1 = tmp_path / "t0", tmp_path / "t1"
    (t0 / "sub").mkdir(parents=True)
    (t0 / "sub" / "work.txt").write_text("job\n")
    t1.write_text("a file where the second cached folder goes\n")
    plant(
        file_store,
        "k",
        [{"type": "file", "root": 0, "path": "sub"}, {"type": "file", "root": 1, "path": "w"}],
        {"sub": b"cached", "w": b"w"},
        roots=[{"path": "t0", "kind": "dir"}, {"path": "t1", "kind": "dir"}],
    )
    before = snapshot(t0)
    result = restore_to(file_store, env, "k", t0, t1)
    assert result.exit_code == 2
    assert f"path '{t1}' exists and is not a folder" in result.headline
    assert snapshot(t0) == before


def test_a_folder_where_the_cached_file_goes_is_bad_input(file_store, env, tmp_path):
    """s11: the folder case said so (exit 2); the file case blamed the runner's disk."""
    src = tmp_path / "src" / "model.bin"
    src.parent.mkdir()
    src.write_bytes(b"m" * 100)
    saved = cache_cmd("save", {**file_store.flags(), "key": "f", "path": str(src)}, env)[0]
    assert saved.exit_code == 0, saved.headline
    target = tmp_path / "r" / "model.bin"
    target.parent.mkdir()
    target.mkdir()
    (target / "x").write_text("job")
    result = restore_to(file_store, env, "f", target)
    assert result.exit_code == 2
    assert f"path '{target}' is a folder, so the cached file cannot go there" in result.headline
    assert (target / "x").read_text() == "job"
    assert leftovers(target.parent) == []


@pytest.mark.parametrize("spelling", ["same", "trailing-slash"])
def test_the_same_path_twice_is_bad_input_naming_it(file_store, env, tmp_path, spelling):
    """s06: it failed as 'File exists' (exit 3), blamed on the disk."""
    plant(
        file_store,
        "two",
        [{"type": "file", "root": 0, "path": "f"}, {"type": "file", "root": 1, "path": "h"}],
        {"f": b"1", "h": b"3"},
        roots=[{"path": "a", "kind": "dir"}, {"path": "b", "kind": "dir"}],
    )
    target = tmp_path / "r"
    again = f"{target}/" if spelling == "trailing-slash" else str(target)
    result = cache_cmd(
        "restore", {**file_store.flags(), "key": "two", "path": f"{target}\n{again}"}, env
    )[0]
    assert result.exit_code == 2
    assert f"path '{target}' is given twice" in result.headline
    assert not target.exists()


@pytest.mark.parametrize("name", ["t.4000000", f"t.{'0' * 16}.4000000"])
def test_a_planted_staging_folder_too_deep_to_remove_does_not_fail_therestore_to(
    file_store, env, tmp_path, monkeypatch, name
):
    """s14: a folder 1,500 deep under a staging name the sweep removes (an old one of a pid
    that is gone, or one whose lock is free): shutil.rmtree (one recursion per level before
    Python 3.13) raised RecursionError, an internal error before anything was fetched. The
    depth is played by rmtree itself here: a real one left behind would break every later
    clean-up of pytest's temp folders."""
    plant(file_store, "k", [{"type": "file", "root": 0, "path": "w.bin"}], {"w.bin": b"w"})
    (tmp_path / "w").mkdir()
    target = tmp_path / "w" / "t"
    deep = target.parent / f"{PREFIX}{name}"
    (deep / "a" / "a").mkdir(parents=True)
    os.close(os.open(deep / "lock", os.O_CREAT | os.O_WRONLY, 0o600))  # free: its restore died
    past = time.time() - 2 * 24 * 3600
    os.utime(deep, (past, past))
    real_rmtree = shutil.rmtree

    def too_deep(path, *args, **kwargs):
        if Path(path) == deep:
            raise RecursionError("maximum recursion depth exceeded")
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", too_deep)
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 0, result.headline
    assert (target / "w.bin").read_bytes() == b"w"


def test_a_planted_staging_folder_deeper_than_the_recursion_limit_is_removed(tmp_path):
    """s14, for real: the sweep removed a deep planted folder with shutil.rmtree, which recursed
    per level, so one deeper than the recursion limit was left there for ever, its removal
    tried again on every restore. It is removed now, never through the link at its bottom."""
    import sys

    from gpuci.cache._restore import staging

    target = tmp_path / "t"
    name = f"{PREFIX}t.4000000"
    deep_folder(tmp_path, name, sys.getrecursionlimit() + 200)
    past = time.time() - staging.UNLOCKED_GRACE - 60
    os.utime(tmp_path / name, (past, past))
    (tmp_path / "keep.txt").write_text("the link at the bottom leads here\n")
    try:
        staging.sweep_stale(target)
        assert not os.path.lexists(tmp_path / name)
        assert (tmp_path / "keep.txt").read_text() == "the link at the bottom leads here\n"
    finally:
        if os.path.lexists(tmp_path / name):
            remove_deep(tmp_path, name)


def _many_links_into_one_chain(store, tmp_path: Path) -> tuple[Path, int]:
    """2,000 cached links ``m/<i> -> ../l0`` into a chain ``l0 -> l1 -> ... -> l29``, whose end
    passes through the job's own link ``ok -> <target>/jobdir`` (absolute, inside), in a target
    that already exists; returns it and the number of cached links."""
    target = tmp_path / "t"
    (target / "jobdir").mkdir(parents=True)
    os.symlink(os.path.join(os.path.realpath(target), "jobdir"), target / "ok")
    chain = [
        {"type": "symlink", "root": 0, "path": f"l{i}", "target": f"l{i + 1}"} for i in range(29)
    ]
    chain.append({"type": "symlink", "root": 0, "path": "l29", "target": "ok/x"})
    many = [
        {"type": "symlink", "root": 0, "path": f"m/{i}", "target": "../l0"} for i in range(2000)
    ]
    folder = {"type": "dir", "root": 0, "path": "m", "mode": 0o755}
    plant(store, "many", [folder, *chain, *many])
    return target, len(chain) + len(many)


def test_each_link_is_walked_once_through_the_jobs_links(file_store, env, tmp_path, monkeypatch):
    """The check before the merge walked each cached link afresh, the whole chain each time,
    and reopened the target from the top for every name the manifest does not list: each link
    is walked once now, and each such name read on disk once."""
    from collections import Counter

    from gpuci.cache._format import manifest as mf
    from gpuci.cache._restore import merge

    target, links = _many_links_into_one_chain(file_store, tmp_path)
    walks, asked = Counter(), Counter()
    real_walk, real_target = mf.LinkResolver._walk, merge._JobsLinks.target

    def counting_walk(self, start, to, depth):
        walks[self.unlisted is not None] += 1
        return real_walk(self, start, to, depth)

    def counting_target(self, name):
        asked[name] += 1
        return real_target(self, name)

    monkeypatch.setattr(mf.LinkResolver, "_walk", counting_walk)
    monkeypatch.setattr(merge._JobsLinks, "target", counting_target)
    result = restore_to(file_store, env, "many", target)
    assert result.exit_code == 0, result.headline
    assert walks[True] == links + 1  # each cached link once, and the job's ``ok``
    assert set(asked.values()) == {1} and {"ok", "jobdir", "jobdir/x"} <= set(asked)
    assert os.readlink(target / "m" / "7") == "../l0" and (target / "jobdir").is_dir()


def test_links_past_the_step_budget_are_refused_before_any_merge(
    file_store, env, tmp_path, monkeypatch
):
    """The check before the merge had no budget: a manifest within the cap could hold a million
    such links, minutes of CPU. Past the budget (lowered here, once the manifest is parsed) the
    restore is refused in one line, nothing written."""
    from gpuci.cache._format import manifest as mf

    target, _ = _many_links_into_one_chain(file_store, tmp_path)
    before = snapshot(target)
    real_check = place.refuse_links_leaving

    def with_a_small_budget(*args, **kwargs):
        monkeypatch.setattr(mf, "MAX_WALKED", 500)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(place, "refuse_links_leaving", with_a_small_budget)
    result = restore_to(file_store, env, "many", target)
    assert result.exit_code == 2
    assert "take over 500 steps to resolve" in result.headline
    assert "nothing was restored" in result.headline
    assert snapshot(target) == before
    assert leftovers(tmp_path) == []


def test_a_link_looping_through_the_jobs_links_is_refused(file_store, env, tmp_path):
    """The cache's ``c -> a/x`` and the job's ``a -> c``: it leads nowhere inside; it was let
    through as if it stayed inside, and is refused now, as parse refuses a loop of the cache's."""
    target = tmp_path / "t"
    target.mkdir()
    os.symlink("c", target / "a")
    plant(file_store, "loop", [{"type": "symlink", "root": 0, "path": "c", "target": "a/x"}])
    result = restore_to(file_store, env, "loop", target)
    assert result.exit_code == 2
    assert "resolves to a loop" in result.headline and "nothing was restored" in result.headline
    assert not os.path.lexists(target / "c")


@pytest.mark.parametrize("kind", ["dir", "file"])
def test_the_filesystem_root_as_the_target_is_refused_up_front_in_its_own_words(
    file_store, env, kind
):
    """rvA F7: ``--path /`` of a folder key was downloaded into a staging folder in ``/``, then
    refused as "exists and is not a folder" (Path('/').name is ''). Now one line names the cause,
    before anything is written there."""
    plant(
        file_store,
        "k",
        [{"type": "file", "root": 0, "path": "" if kind == "file" else "f"}],
        {"" if kind == "file" else "f": b"1"},
        roots=[{"path": "a", "kind": kind}],
    )
    before = sorted(os.listdir("/"))
    result = restore_to(file_store, env, "k", Path("/"))
    assert result.exit_code == 2, result.headline
    assert "path '/' is the filesystem root" in result.headline
    assert sorted(os.listdir("/")) == before


def test_a_staging_lock_held_by_another_process_is_not_waited_for_for_ever(tmp_path, monkeypatch):
    """A new staging folder's lock is taken without blocking; a sweep holding it that instant
    lets go at once, so the restore waited for it. Anyone else who can open it (root opens a
    mode-0 file) and holds it held the restore for ever: the wait is bounded, and the folder
    is left unlocked, mode 0 (swept only once old)."""
    import fcntl
    import threading

    from gpuci.cache._restore import staging

    if os.geteuid() != 0:
        pytest.skip("only root opens another's mode-0 lock file, as the attacker does here")
    held: list[int] = []
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if not held and operation == fcntl.LOCK_EX | fcntl.LOCK_NB:
            # another process opens the new lock (its own open file) and holds it first
            held.append(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY))
            real_flock(held[0], fcntl.LOCK_EX)
        real_flock(fd, operation)

    monkeypatch.setattr(staging.fcntl, "flock", flock)
    monkeypatch.setattr(staging, "_LOCK_WAIT_S", 0.2, raising=False)
    made: list[object] = []
    worker = threading.Thread(target=lambda: made.append(staging.make(tmp_path / "t")))
    worker.daemon = True
    worker.start()
    worker.join(60)
    hung = worker.is_alive()
    os.close(held[0])  # lets a blocked flock go, whatever the outcome
    worker.join(60)
    assert not hung, "the restore waited for ever on a staging lock another process held"
    (made_staging,) = made
    assert isinstance(made_staging, staging.Staging)
    assert os.stat(made_staging.path / staging.LOCK).st_mode & 0o777 == 0  # never locked
    made_staging.remove()


@pytest.mark.parametrize("where", ["in-a-file", "below-a-file", "name-too-long"])
def test_a_target_below_a_file_or_with_a_name_too_long_is_bad_input(
    file_store, env, tmp_path, where
):
    """Making the target's folder met a file ("File exists") or a name over 255 bytes: that
    was said as the runner's disk failing (exit 3); it is the path input's fault (exit 2)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.txt").write_text("cached")
    saved = cache_cmd("save", {**file_store.flags(), "key": "k", "path": str(src)}, env)[0]
    assert saved.exit_code == 0, saved.headline
    (tmp_path / "a-file").write_text("the job's")
    target = {
        "in-a-file": tmp_path / "a-file" / "t",  # its folder is a file: EEXIST
        "below-a-file": tmp_path / "a-file" / "sub" / "t",  # ENOTDIR
        "name-too-long": tmp_path / ("n" * 300) / "t",
    }[where]
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 2, result.headline
    assert f"path '{target}' cannot be restored to" in result.headline, result.headline
    assert (tmp_path / "a-file").read_text() == "the job's"
