"""A cold restore fills the runner-local tier by writing each file once, into the tier's temp
file, hashed on its way in, and making the job's file from it (no second read, no second sha256,
no second write from user space; docs/cache-format.md "The runner-local tier"), and the tier's
rule still holds: a blob is only what was hashed on its way in, published under that digest, and
nothing at all when the store's bytes do not match the manifest."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest
from tier_runner import (
    BIG,
    Runner,
    model_tree,
    restored,
    saved_runner,
    sha,
    tier_holds,
    tier_is_honest,
    tier_runs,
    warnings,
)

from gpuci.cache import _layout as layout
from gpuci.cache._save import upload as save_upload
from gpuci.cache._stores import copying
from gpuci.cache._stores import file as file_store
from gpuci.cache._stores import tier as tier_module


def _no_second_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args, **_kwargs):
        raise AssertionError("the tier was filled by a second read and hash of the file")

    monkeypatch.setattr(copying, "copy_hashing", refuse)
    monkeypatch.setattr(copying, "hash_fd", refuse)


def _tmp_left(tier: Path) -> list[Path]:
    folder = tier / "tmp"
    return list(folder.iterdir()) if folder.is_dir() else []


def _model_and_shards(root: Path) -> dict[str, bytes]:
    """The model tree and 20 small JSON shards: small files travel in packs, their own path
    through a restore or a save."""
    files = model_tree(root)
    for i in range(20):
        files[f"shard-{i:02d}.json"] = os.urandom(3_000 + i)
        (root / f"shard-{i:02d}.json").write_bytes(files[f"shard-{i:02d}.json"])
    return files


def _tier_disk_free(monkeypatch: pytest.MonkeyPatch, tier: Path, blocks: int, size: int) -> None:
    """``os.statvfs`` says the tier's disk has ``blocks`` free blocks of ``size`` bytes; every
    other disk is as it is."""
    real = os.statvfs

    class Free:
        f_bavail, f_frsize = blocks, size

    def statvfs(path):
        return Free() if str(path).startswith(str(tier)) else real(path)

    monkeypatch.setattr(os, "statvfs", statvfs)


def test_a_cold_restore_fills_the_tier_as_it_hashes(tmp_path, monkeypatch):
    runner, files = saved_runner(tmp_path, _model_and_shards, tier=False)
    _no_second_pass(monkeypatch)
    got = runner.restore("m", tmp_path / "job")
    assert got.outputs["bytes-downloaded"] == sum(len(d) for d in files.values())
    for name, data in files.items():
        assert (tmp_path / "job" / name).read_bytes() == data
        assert tier_holds(runner.tier, data), name
    assert runner.blob(sha(files["model.safetensors"])).stat().st_mode & 0o777 == 0o444
    assert len(tier_runs(runner.tier)) == 1  # the 21 small files: one run of their pack
    tier_is_honest(runner.tier, runner.store)
    assert _tmp_left(runner.tier) == []
    # and the next job is served from it
    warm = runner.restore("m", tmp_path / "job2")
    assert warm.outputs["bytes-from-local"] == sum(len(d) for d in files.values())


def test_bytes_that_do_not_hash_to_the_manifest_never_reach_the_tier(tmp_path):
    runner, files = saved_runner(tmp_path, tier=False)
    digest = sha(files["model.safetensors"])
    blob = runner.store / layout.blob_key(digest)
    os.chmod(blob, 0o644)
    blob.write_bytes(os.urandom(len(files["model.safetensors"])))  # the store lies, same size
    got = runner.run("restore", "m", tmp_path / "job", **{"local-cache": str(runner.tier)})
    assert int(got.exit_code) == 3, got.headline
    assert "hash" in got.headline
    assert not runner.blob(digest).exists()
    tier_is_honest(runner.tier, runner.store)
    assert _tmp_left(runner.tier) == []


def _direct_io_works(folder: Path) -> bool:
    probe = folder / "direct-probe"
    try:
        os.close(os.open(probe, os.O_RDWR | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o600))
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)
    return hasattr(os, "O_DIRECT")


def test_a_cold_restore_puts_each_byte_in_the_page_cache_once(tmp_path, monkeypatch):
    """The tier's copy of a large file is written as its bytes are hashed, with O_DIRECT: not a
    second page-cache copy of every byte (it was one, made by copy_file_range after the digest;
    on this VM each new page-cache page costs more than the copy itself: docs/benchmarks.md)."""
    if not _direct_io_works(tmp_path):
        pytest.skip(f"{tmp_path}'s filesystem refuses O_DIRECT")
    monkeypatch.setattr(file_store.LocalStore, "local_disk", False)  # as a store over a network
    monkeypatch.delenv("GPUCI_CACHE_DIRECT_IO", raising=False)  # the job's files: the default
    runner, files = saved_runner(tmp_path, _model_and_shards, tier=False)
    cached, direct = [0], [0]
    real_write, real_pwrite = os.write, os.pwrite

    def count(fd, n):
        (direct if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT else cached)[0] += n
        return n

    monkeypatch.setattr(os, "write", lambda fd, data: count(fd, real_write(fd, data)))
    monkeypatch.setattr(os, "pwrite", lambda fd, data, at: count(fd, real_pwrite(fd, data, at)))
    real_copy = copying.copy_fd

    def copy_fd(src, dst, size):
        assert size < BIG, "a large file was copied from the tier's temp file"
        return real_copy(src, dst, size)

    monkeypatch.setattr(copying, "copy_fd", copy_fd)
    runner.restore("m", tmp_path / "job")
    monkeypatch.undo()
    total = sum(len(d) for d in files.values())
    large = sum(len(d) for d in files.values() if len(d) >= BIG)
    assert total <= cached[0] < total + (1 << 20), (cached[0], total)
    assert large - 3 * 4096 <= direct[0] <= large, (direct[0], large)  # tails go through the cache
    for name, data in files.items():
        assert (tmp_path / "job" / name).read_bytes() == data
        assert tier_holds(runner.tier, data), name
    job_big = os.stat(tmp_path / "job" / "model.safetensors").st_ino
    assert job_big != runner.blob(sha(files["model.safetensors"])).stat().st_ino
    tier_is_honest(runner.tier, runner.store)
    assert _tmp_left(runner.tier) == []


def test_a_job_file_that_cannot_be_made_fails_the_restore_and_leaves_no_blob(tmp_path, monkeypatch):
    """The tier took the bytes, but the job's own file could not be written (a full disk):
    the restore fails as a failed write would, and the tier's temp file goes too."""
    runner, files = saved_runner(tmp_path, tier=False)

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    real_pwrite, real_write = os.pwrite, os.write

    def job_disk(fd: int) -> bool:  # the job's folder, its staging included
        return not os.readlink(f"/proc/self/fd/{fd}").startswith(str(runner.tier))

    monkeypatch.setattr(copying, "copy_fd", full)
    monkeypatch.setattr(copying, "reflink", lambda _src, _dst: False)
    # the job's disk is full: the same restore straight into the job's folder fails as well
    monkeypatch.setattr(
        os, "pwrite", lambda fd, *a: full() if job_disk(fd) else real_pwrite(fd, *a)
    )
    monkeypatch.setattr(os, "write", lambda fd, *a: full() if job_disk(fd) else real_write(fd, *a))
    got = runner.run("restore", "m", tmp_path / "job", **{"local-cache": str(runner.tier)})
    assert int(got.exit_code) == 3 and "disk full" in got.headline, got.headline
    assert not (tmp_path / "job").exists()
    assert not runner.blob(sha(files["model.safetensors"])).exists()
    assert _tmp_left(runner.tier) == []


def test_a_save_fills_the_tier_from_the_bytes_it_hashed(tmp_path, monkeypatch):
    """A save holds each file's bytes to hash and send them: the tier's copy is written from
    those very bytes, with no second read and no second sha256 of the file."""
    runner = Runner(tmp_path)
    files = _model_and_shards(tmp_path / "src")
    _no_second_pass(monkeypatch)
    runner.save("m", tmp_path / "src")
    for name, data in files.items():
        assert tier_holds(runner.tier, data), name
    assert len(tier_runs(runner.tier)) == 1  # the small files: the pack the save sent, whole
    tier_is_honest(runner.tier, runner.store)
    assert _tmp_left(runner.tier) == []


def test_a_tier_disk_without_room_is_not_filled_and_the_restore_succeeds(tmp_path, monkeypatch):
    """A cold restore lands the files it fills in the tier first: where the tier's disk has no
    room for them, they go straight to the job's folder (a cache never fails a job)."""
    runner, files = saved_runner(tmp_path, tier=False)

    def start_fill(*_args):
        raise AssertionError("a file landed in a tier without room for it")

    _tier_disk_free(monkeypatch, runner.tier, blocks=1, size=4096)
    monkeypatch.setattr(tier_module.LocalTier, "start_fill", start_fill)
    monkeypatch.setattr(tier_module.LocalTier, "copy_in", start_fill)  # nor after the fetch
    runner.restore("m", tmp_path / "job")
    restored(tmp_path / "job", files)


def test_a_save_never_fills_a_tier_disk_without_room(tmp_path, monkeypatch):
    """A save keeps what it holds in the tier only where the tier's disk has room to spare:
    it may be the disk the job writes next. So does its copy of the files too large to hold,
    read again after the upload."""
    runner = Runner(tmp_path)
    files = model_tree(tmp_path / "src")
    _tier_disk_free(monkeypatch, runner.tier, blocks=1, size=4096)
    monkeypatch.setattr(save_upload, "HELD_BYTES", 1 << 20)  # the shard: read again after
    runner.save("m", tmp_path / "src")
    for data in files.values():
        if data:
            assert not runner.blob(sha(data)).exists()


def test_a_tree_spanning_two_disks_counts_the_job_copies_on_the_tier_disk(tmp_path, monkeypatch):
    """A restore's first folder on another disk than the tier, its second on the tier's: the
    job's copies there need room too, so a tier with room for the blobs alone is not filled."""
    from gpuci_testing import reflink_fs

    (tmp_path / "x").mkdir()
    with reflink_fs(tmp_path / "x") as other_disk:
        runner = Runner(tmp_path)
        first, second = other_disk / "a", tmp_path / "b"
        model_tree(first)
        (second).mkdir()
        (second / "shard.bin").write_bytes(os.urandom(BIG))
        runner.save("m", f"{first}\n{second}", tier=False)
        blobs = 2 * BIG + len(b'{"layers": 2}\n')
        # room for the blobs once, not with the job's copies beside them
        room = blobs * 3 // 2 + tier_module.ROOM_MARGIN

        def start_fill(*_args):
            raise AssertionError("a fill the tier's disk has no room for beside the job's copies")

        _tier_disk_free(monkeypatch, runner.tier, blocks=room, size=1)
        monkeypatch.setattr(tier_module.LocalTier, "start_fill", start_fill)
        runner.restore("m", f"{other_disk / 'ra'}\n{tmp_path / 'rb'}")
        assert (tmp_path / "rb" / "shard.bin").read_bytes() == (second / "shard.bin").read_bytes()


def _big_tree(root: Path) -> dict[str, bytes]:
    """One file of several parts: its copy can follow its hash."""
    root.mkdir(parents=True)
    files = {"model.safetensors": os.urandom(6 * layout.MIN_PART + 12345)}
    (root / "model.safetensors").write_bytes(files["model.safetensors"])
    return files


def test_a_refetched_file_is_copied_again_from_its_start(tmp_path, monkeypatch):
    """The store's first bytes do not hash to the manifest: the file is fetched once more, and
    the job's file and the blob hold the good bytes only."""
    runner, files = saved_runner(tmp_path, _big_tree, tier=False)
    data = files["model.safetensors"]
    real_open = file_store.LocalStore.open_range
    lied = []

    def open_range(self, key, offset, length):
        reader = real_open(self, key, offset, length)
        if offset == 0 and key.startswith("blobs/") and not lied:
            lied.append(key)
            real_readinto = reader.readinto

            def readinto(view):
                n = real_readinto(view)
                view[0] ^= 0xFF  # one wrong byte at the file's start, once
                reader.readinto = real_readinto
                return n

            reader.readinto = readinto
        return reader

    monkeypatch.setattr(copying, "reflink", lambda _src, _dst: False)
    monkeypatch.setattr(file_store.LocalStore, "open_range", open_range)
    runner.restore("m", tmp_path / "job")
    assert lied
    assert (tmp_path / "job" / "model.safetensors").read_bytes() == data
    assert runner.blob(sha(data)).read_bytes() == data
    tier_is_honest(runner.tier, runner.store)
    assert _tmp_left(runner.tier) == []


def test_a_tier_disk_that_fills_during_the_restore_does_not_fail_it(tmp_path, monkeypatch):
    """The tier's disk had room when the restore began, then another process filled it: the
    writes into the tier's temp files fail with ENOSPC. The files not placed yet are fetched
    again straight into the job's folder, the restore succeeds, says so, and leaves no temp."""
    runner = Runner(tmp_path)
    files = model_tree(tmp_path / "src")
    for i in range(5):
        files[f"shard-{i}.json"] = os.urandom(2_000 + i)
        (tmp_path / "src" / f"shard-{i}.json").write_bytes(files[f"shard-{i}.json"])
    runner.save("m", tmp_path / "src", tier=False)
    real_write, real_pwrite = os.write, os.pwrite

    def full_in_tier(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name.startswith(str(runner.tier)) and name.endswith(layout.INCOMPLETE):
            raise OSError(errno.ENOSPC, "No space left on device")

    def write(fd, data):
        full_in_tier(fd)
        return real_write(fd, data)

    def pwrite(fd, data, offset):
        full_in_tier(fd)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "pwrite", pwrite)
    got = runner.restore("m", tmp_path / "job")
    monkeypatch.undo()
    restored(tmp_path / "job", files)
    assert any("filled up during the restore" in w for w in warnings(got)), warnings(got)
    assert _tmp_left(runner.tier) == []
    tier_is_honest(runner.tier, runner.store)


def test_a_tier_disk_that_fills_under_a_large_file_costs_no_second_download(tmp_path, monkeypatch):
    """A large file lands in the job's folder and only its tier copy is written beside it: when
    that copy meets a full disk, the tier drops it and the file is not fetched again."""
    monkeypatch.setattr(file_store.LocalStore, "local_disk", False)  # as a store over a network
    runner = Runner(tmp_path)
    (tmp_path / "src").mkdir()
    data = os.urandom(BIG)
    (tmp_path / "src" / "model.safetensors").write_bytes(data)
    runner.save("m", tmp_path / "src", tier=False)
    real_pwrite = os.pwrite

    def pwrite(fd, chunk, offset):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(runner.tier)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, chunk, offset)

    asked: list[int] = []
    real_open_range = file_store.LocalStore.open_range

    def open_range(self, key, offset, length):
        asked.append(length)
        return real_open_range(self, key, offset, length)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(file_store.LocalStore, "open_range", open_range)
    got = runner.restore("m", tmp_path / "job")
    monkeypatch.undo()
    assert (tmp_path / "job" / "model.safetensors").read_bytes() == data
    assert sum(asked) == BIG, asked  # fetched once
    assert any("filled up during the restore" in w for w in warnings(got)), warnings(got)
    assert not runner.blob(sha(data)).exists()
    assert _tmp_left(runner.tier) == []
    tier_is_honest(runner.tier, runner.store)
