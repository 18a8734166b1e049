"""The runner-local tier when its disk, its folders or its neighbours misbehave: a cache never
fails a job, never waits on another process, and never takes more of the disk than it promises
(docs/security.md, "The runner-local tier"). Each case was found by a review that reproduced it
against the CLI; each test here fails before its fix."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from pathlib import Path

import pytest
from tier_runner import (
    Runner,
    restored,
    saved_runner,
    sha,
    small_files,
    tier_is_honest,
    tier_runs,
    warnings,
)

from gpuci.cache import _layout as layout
from gpuci.cache._format import manifest as mf
from gpuci.cache._stores import copying, tier_evict
from gpuci.cache._stores.tier import LocalTier
from gpuci.errors import InputError
from gpuci_testing import outcome_in_thread

MODES = ("copy", "verify", "link")


def _refusing(monkeypatch: pytest.MonkeyPatch, name: str, below: Path, err: int) -> None:
    """``os.<name>`` fails with ``err`` for paths under ``below``, as it does for a runner's
    ordinary user when a folder of the tier was made unsearchable (the tests run as root, for
    whom permission bits do not hold)."""
    real = getattr(os, name)

    def refuse(path, *args, **kwargs):
        if str(path).startswith(str(below)):
            raise OSError(err, os.strerror(err), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, name, refuse)


@pytest.mark.parametrize("mode", MODES)
def test_a_tier_folder_that_cannot_be_searched_costs_the_store_copy_never_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    runner, files = saved_runner(tmp_path, **{"local-cache-mode": mode})
    shard = runner.blob(sha(files["model.safetensors"]))
    _refusing(monkeypatch, "lstat", shard.parent, errno.EACCES)
    _refusing(monkeypatch, "open", shard.parent, errno.EACCES)
    got = runner.restore("m", tmp_path / "job", **{"local-cache-mode": mode})
    restored(tmp_path / "job", files)
    assert got.outputs["bytes-downloaded"] == len(files["model.safetensors"])
    assert any("cannot be looked at" in w for w in warnings(got)), warnings(got)
    runner.save("m2", tmp_path / "src", **{"local-cache-mode": mode})  # the save goes on too


def test_a_fan_out_folder_that_cannot_be_listed_does_not_stop_eviction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, _ = saved_runner(tmp_path)
    stuck = runner.tier / layout.BLOBS / "zz"  # someone else's folder, unlistable
    stuck.mkdir()
    _refusing(monkeypatch, "scandir", stuck, errno.EACCES)
    runner.restore("m", tmp_path / "job", **{"local-cache-size": "1"})
    kept = [p for kind in (layout.BLOBS, layout.TIER_RUNS) for p in (runner.tier / kind).rglob("*")]
    assert [p for p in kept if p.is_file()] == []  # all evicted, past the folder it cannot list


def _tier_on_another_disk(monkeypatch: pytest.MonkeyPatch, tier: Path) -> None:
    """A hardlink from the job's folder into the tier fails as across filesystems."""
    real = os.link

    def link(src, dst, *args, **kwargs):
        if str(dst).startswith(str(tier)) and not str(src).startswith(str(tier)):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)


def test_link_mode_on_another_filesystem_copies_into_the_tier_only_with_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, files = saved_runner(tmp_path, tier=False)
    _tier_on_another_disk(monkeypatch, runner.tier)
    monkeypatch.setattr(LocalTier, "room_for", lambda *_args, **_kwargs: False)
    runner.restore("m", tmp_path / "job", **{"local-cache-mode": "link"})
    restored(tmp_path / "job", files)
    tier = runner.tier / layout.BLOBS
    assert not tier.exists() or [p for p in tier.rglob("*") if p.is_file()] == []
    monkeypatch.undo()  # with room, the same restore does fill it, by copying
    _tier_on_another_disk(monkeypatch, runner.tier)
    runner.restore("m", tmp_path / "job2", **{"local-cache-mode": "link"})
    assert runner.blob(sha(files["model.safetensors"])).is_file()


def test_a_partial_restore_asks_room_for_the_whole_runs_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = Runner(tmp_path)
    src = tmp_path / "src"
    wanted = small_files(src, 12, size=1_000)
    for i in range(12):  # between each two configs, a file the restore skips
        (src / f"sub/f{i:03d}.pad").write_bytes(os.urandom(60_000))
    runner.save("m", src, tier=False)
    asked: list[int] = []
    real = LocalTier.room_for

    def spy(self: LocalTier, size: int, *args, **kwargs) -> bool:
        asked.append(size)
        return real(self, size, *args, **kwargs)

    monkeypatch.setattr(LocalTier, "room_for", spy)
    runner.restore("m", tmp_path / "job", include="*.json")
    restored(tmp_path / "job", wanted)
    kept = sum(p.stat().st_size for p in tier_runs(runner.tier).values())
    assert kept > sum(map(len, wanted.values()))  # the runs hold the skipped bytes too
    assert asked and max(asked) >= kept, (asked, kept)


@pytest.mark.parametrize("mode", MODES)
def test_a_run_that_cannot_be_read_is_dropped_and_the_store_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    runner = Runner(tmp_path)
    files = small_files(tmp_path / "src", 20)
    runner.save("m", tmp_path / "src", tier=False)
    runner.restore("m", tmp_path / "cold")
    (run,) = tier_runs(runner.tier).values()
    real = os.pread

    def stale(fd: int, *args):
        if os.readlink(f"/proc/self/fd/{fd}") == str(run):
            raise OSError(errno.ESTALE, os.strerror(errno.ESTALE))
        return real(fd, *args)

    monkeypatch.setattr(os, "pread", stale)
    got = runner.restore("m", tmp_path / "job", **{"local-cache-mode": mode})
    restored(tmp_path / "job", files)
    assert got.outputs["bytes-downloaded"] == sum(map(len, files.values()))
    assert any("cannot be read" in w for w in warnings(got)), warnings(got)


def test_eviction_never_waits_for_a_lock_another_process_holds(tmp_path: Path) -> None:
    tier = LocalTier(tmp_path / "tier", limit=1)
    (tmp_path / "tier").mkdir(mode=0o700)
    held = os.open(tmp_path / "tier" / "evict.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # e.g. a child that inherited an evicting job's lock
    try:
        done = outcome_in_thread(lambda: tier_evict.evict(tier))
        assert done == [(0, 0)], "eviction waited for the lock"
    finally:
        os.close(held)


@pytest.mark.parametrize("size", ["0", "none", "100GiB"])
def test_temp_files_of_dead_fills_are_swept_whatever_the_size_limit(
    tmp_path: Path, size: str
) -> None:
    runner, _ = saved_runner(tmp_path)
    dead = runner.tier / "tmp" / f"{'ab' * 16}{layout.INCOMPLETE}"
    dead.parent.mkdir(exist_ok=True)
    dead.write_bytes(b"x" * 1000)
    two_hours_ago = time.time() - 7200
    os.utime(dead, (two_hours_ago, two_hours_ago))
    runner.restore("m", tmp_path / "job", **{"local-cache-size": size})
    assert not dead.exists()


def test_a_save_reusing_stored_packs_keeps_their_files_as_runs_not_blobs(tmp_path: Path) -> None:
    runner = Runner(tmp_path)
    src = tmp_path / "src"
    files = small_files(src, 30)
    runner.save("m", src, tier=False)
    files["sub/f005.json"] = os.urandom(2_005)  # one file changed: the others are reused
    (src / "sub/f005.json").write_bytes(files["sub/f005.json"])
    runner.save("m", src)
    assert not (runner.tier / layout.BLOBS).exists()  # no blob per small file
    tier_is_honest(runner.tier, runner.store)
    warm = runner.restore("m", tmp_path / "job")
    restored(tmp_path / "job", files)
    assert warm.outputs["bytes-downloaded"] == 0
    assert warm.outputs["bytes-from-local"] == sum(map(len, files.values()))


@pytest.mark.parametrize("field", ["size", "offset"])
def test_a_manifest_number_past_what_a_file_can_hold_is_refused_as_malformed(field: str) -> None:
    entry = {
        "type": "file",
        "root": 0,
        "path": "a.json",
        "size": 5,
        "mode": 0o644,
        "sha256": sha(b"hello"),
        "pack": sha(b"pack"),
        "offset": 0,
    }
    entry[field] = 2**70  # an OverflowError in os.pread, once: an "internal error"
    body = json.dumps({"format": 1, "key": "k", "roots": [{"path": "m", "kind": "dir"}],
                       "entries": [entry]}).encode()  # fmt: skip
    with pytest.raises(InputError, match=f"{field} .* is out of range"):
        mf.parse(body, "test")


@pytest.mark.parametrize("mode", ["copy", "verify"])
def test_a_blob_that_cannot_be_read_is_fetched_from_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    runner, files = saved_runner(tmp_path)

    def failing_disk(*_args, **_kwargs):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(copying, "copy_fd", failing_disk)
    monkeypatch.setattr(copying, "copy_hashing", failing_disk)
    got = runner.restore("m", tmp_path / "job", **{"local-cache-mode": mode})
    restored(tmp_path / "job", files)
    assert got.outputs["bytes-downloaded"] == len(files["model.safetensors"])
    assert any("cannot be read" in w for w in warnings(got)), warnings(got)
