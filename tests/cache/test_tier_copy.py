"""How the local tier copies a blob into a job's tree: the kernel's copy first, each method
handing over to the next when the filesystem refuses it, never a short file at a final name."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
from cache_testing import StoreCase

from gpuci.cache._stores import copying
from gpuci.cache._stores.tier import LocalTier
from gpuci.cache._stores.tier_runs import Runs
from gpuci_testing import reflink_fs


def _blob(tmp_path: Path, data: bytes, mode: str = "copy") -> tuple[LocalTier, str]:
    """A tier holding ``data``, filled the way save fills it (hashing what was copied in)."""
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    tier = LocalTier(tmp_path / "tier", mode=mode)
    assert tier.copy_in(src, digest)
    return tier, digest


def _refuse(code: int):
    def step(_src: int, _dst: int, _offset: int, _count: int) -> int:
        raise OSError(code, os.strerror(code))

    return step


def _half_then(code: int, real):
    """A method that copies the first half of the first call, then refuses."""
    calls = {"n": 0}

    def step(src: int, dst: int, offset: int, count: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real(src, dst, offset, max(1, count // 2))
        raise OSError(code, os.strerror(code))

    return step


@pytest.fixture
def no_reflink(monkeypatch):
    """The copy path itself, on whatever filesystem the tests run on."""
    monkeypatch.setattr(copying, "reflink", lambda _src, _dst: False)


def _copy(tier: LocalTier, digest: str, size: int, dest: Path) -> str:
    """Run the byte mover on the tier's blob; returns the method it reports."""
    src = os.open(tier.path(digest), os.O_RDONLY)
    dst = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        return copying.copy_fd(src, dst, size)
    finally:
        os.close(src)
        os.close(dst)


DATA = os.urandom(3 << 20) + b"tail"


def test_the_kernel_copies_when_it_can(tmp_path):
    tier, digest = _blob(tmp_path, DATA)
    assert _copy(tier, digest, len(DATA), tmp_path / "out") == "copy_file_range"
    assert (tmp_path / "out").read_bytes() == DATA


@pytest.mark.parametrize("code", [errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP])
def test_a_refused_copy_file_range_falls_back_to_sendfile(tmp_path, monkeypatch, code):
    tier, digest = _blob(tmp_path, DATA)
    monkeypatch.setattr(copying, "copy_file_range", _refuse(code))
    assert _copy(tier, digest, len(DATA), tmp_path / "out") == "sendfile"
    assert (tmp_path / "out").read_bytes() == DATA


@pytest.mark.parametrize("code", [errno.EXDEV, errno.EINVAL, errno.ENOSYS])
def test_when_both_kernel_copies_are_refused_python_copies(tmp_path, monkeypatch, code):
    tier, digest = _blob(tmp_path, DATA)
    monkeypatch.setattr(copying, "copy_file_range", _refuse(errno.EXDEV))
    monkeypatch.setattr(copying, "sendfile", _refuse(code))
    assert _copy(tier, digest, len(DATA), tmp_path / "out") == "read-write"
    assert (tmp_path / "out").read_bytes() == DATA


def test_each_method_takes_over_where_the_last_one_stopped(tmp_path, monkeypatch):
    tier, digest = _blob(tmp_path, DATA)
    cfr = _half_then(errno.EXDEV, copying.copy_file_range)
    monkeypatch.setattr(copying, "copy_file_range", cfr)
    monkeypatch.setattr(copying, "sendfile", _half_then(errno.EINVAL, copying.sendfile))
    assert _copy(tier, digest, len(DATA), tmp_path / "out") == "read-write"
    assert (tmp_path / "out").read_bytes() == DATA


def test_a_kernel_copy_that_stops_early_hands_over_too(tmp_path, monkeypatch):
    """Some filesystems' copy_file_range reported 0 bytes (the end) before the end."""
    tier, digest = _blob(tmp_path, DATA)
    monkeypatch.setattr(copying, "copy_file_range", lambda *_args: 0)
    assert _copy(tier, digest, len(DATA), tmp_path / "out") == "sendfile"
    assert (tmp_path / "out").read_bytes() == DATA


def test_a_real_failure_is_not_papered_over(tmp_path, monkeypatch):
    tier, digest = _blob(tmp_path, DATA)
    monkeypatch.setattr(copying, "copy_file_range", _refuse(errno.EIO))
    with pytest.raises(OSError) as caught:
        _copy(tier, digest, len(DATA), tmp_path / "out")
    assert caught.value.errno == errno.EIO


@pytest.mark.parametrize("refused", [False, True])
def test_a_blob_cut_short_after_its_check_is_not_placed(tmp_path, monkeypatch, no_reflink, refused):
    """The blob shrinks between the tier's size check and the copy: no short file is left at
    the destination, the blob is dropped, and the caller fetches the file from the store."""
    tier, digest = _blob(tmp_path, DATA)
    if refused:
        monkeypatch.setattr(copying, "copy_file_range", _refuse(errno.EXDEV))
        monkeypatch.setattr(copying, "sendfile", _refuse(errno.EINVAL))
    real_open = tier._open

    def open_then_truncate(d: str, size: int):
        opened = real_open(d, size)
        path = tier.path(d)
        os.chmod(path, 0o644)
        os.truncate(path, size // 2)
        return opened

    monkeypatch.setattr(tier, "_open", open_then_truncate)
    dest = tmp_path / "out"
    assert tier.place(digest, len(DATA), dest, 0o644) is None
    assert not dest.exists()
    assert not tier.path(digest).exists()
    assert "ends after" in next(iter(tier.ignored.values()))


@pytest.mark.parametrize("mode", ["copy", "verify"])
def test_place_gives_the_job_an_independent_file_by_every_method(
    tmp_path, monkeypatch, no_reflink, mode
):
    tier, digest = _blob(tmp_path, DATA, mode)
    monkeypatch.setattr(copying, "copy_file_range", _refuse(errno.EXDEV))
    dest = tmp_path / "out"
    placed = tier.place(digest, len(DATA), dest, 0o755)
    assert placed is not None and placed.how == "copy" and placed.size == len(DATA)
    assert dest.read_bytes() == DATA
    assert os.stat(dest).st_ino != os.stat(tier.path(digest)).st_ino
    assert os.stat(dest).st_mode & 0o777 == 0o755


# ----- a filesystem with reflinks (XFS), where this machine lets a test mount one ---------------
@pytest.mark.parametrize("mode", ["copy", "link"])
def test_on_xfs_placing_is_a_reflink_that_the_job_may_write(tmp_path, mode):
    with reflink_fs(tmp_path) as fs:
        tier, digest = _blob(fs, DATA, mode)
        dest = fs / "out"
        placed = tier.place(digest, len(DATA), dest, 0o644)
        assert placed is not None and placed.how == "reflink"
        with open(dest, "r+b") as handle:  # the job's own copy: writing it leaves the tier alone
            handle.write(b"changed")
        assert hashlib.sha256(tier.path(digest).read_bytes()).hexdigest() == digest
        assert dest.read_bytes()[:7] == b"changed"


# ----- the restore places big files from the tier several at once --------------------------------
def _save_with_tier(tmp_path: Path, env: dict[str, str]):
    from cache_testing import cache_cmd
    from cache_testing import store_flags as flags
    from treeutil import make_tree

    tier = tmp_path / "tier"
    src = make_tree(tmp_path / "src", small=6)
    for i in range(3):
        (src / f"shard-{i}.bin").write_bytes(os.urandom((1 << 20) + i))
    store = StoreCase("local", (tmp_path / "store").as_uri(), None, root=tmp_path / "store")
    saved, _ = cache_cmd("save", flags(store, "t", src, **{"local-cache": str(tier)}), env)
    assert saved.ok, saved.headline
    return store, tier, src, cache_cmd, flags


def test_big_files_are_placed_in_parallel_and_whole(tmp_path, env, monkeypatch):
    from treeutil import snapshot

    from gpuci.cache._restore import place as restore

    monkeypatch.setattr(restore, "PARALLEL_MIN", 1 << 20)  # the shards go to the pool
    monkeypatch.setattr(restore, "PLACE_THREADS", 3)
    store, tier, src, cache_cmd, flags = _save_with_tier(tmp_path, env)
    import threading

    big: set[str] = set()
    small: set[str] = set()
    real_place, real_cut = LocalTier.place, Runs.place

    def place(self, digest, size, dest, mode):
        big.add(threading.current_thread().name)
        return real_place(self, digest, size, dest, mode)

    def cut(self, pack, wanted):
        small.add(threading.current_thread().name)
        return real_cut(self, pack, wanted)

    monkeypatch.setattr(LocalTier, "place", place)
    monkeypatch.setattr(Runs, "place", cut)
    out = tmp_path / "out"
    got, _ = cache_cmd("restore", flags(store, "t", out, **{"local-cache": str(tier)}), env)
    assert got.ok, got.headline
    assert got.outputs["bytes-downloaded"] == 0
    assert snapshot(out) == snapshot(src)
    main = threading.current_thread().name
    assert big and main not in big  # the shards in the placing threads,
    assert small == {main}  # the small files cut from their runs meanwhile in this one


def test_a_failed_parallel_placement_leaves_no_tree_and_no_staging(tmp_path, env, monkeypatch):
    from gpuci.cache._restore import place as restore

    monkeypatch.setattr(restore, "PARALLEL_MIN", 1 << 20)
    monkeypatch.setattr(restore, "PLACE_THREADS", 3)
    store, tier, _src, cache_cmd, flags = _save_with_tier(tmp_path, env)
    real_place = LocalTier.place

    def place(self, digest, size, dest, mode):
        placed = real_place(self, digest, size, dest, mode)
        if os.path.basename(dest) == "shard-1.bin":  # a copy that fails after writing (disk full)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))
        return placed

    monkeypatch.setattr(LocalTier, "place", place)
    out = tmp_path / "out"
    got, _ = cache_cmd("restore", flags(store, "t", out, **{"local-cache": str(tier)}), env)
    assert not got.ok and got.exit_code == 3, got.headline
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".gpuci")] == []
