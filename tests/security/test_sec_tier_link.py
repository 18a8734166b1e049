"""``local-cache-mode: link`` hardlinks every file it may from the tier, small ones included
(issue 28: on ext4 creating a file costs ~20x a link, so 1,024 small copies were most of a warm
link restore), and keeps what link mode promises: the very inode that was checked, read-only,
executables and private files as their own copies."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from tier_runner import BIG, Runner, tier_is_honest, tier_runs

from gpuci.cache._stores import copying
from gpuci.cache._stores import tier as tier_module
from gpuci.cache._stores.tier import LocalTier

LINK = {"local-cache-mode": "link"}
SHARED = ("model.safetensors", "config.json", "tokenizer.json", "sub/vocab.txt")


def _tree(root: Path) -> None:
    """A model folder as a Hub snapshot has it: one shard, small configs, a script, a secret."""
    (root / "sub").mkdir(parents=True)
    (root / "model.safetensors").write_bytes(os.urandom(BIG))
    (root / "config.json").write_bytes(b'{"layers": 2}\n')
    (root / "tokenizer.json").write_bytes(os.urandom(64 << 10))
    (root / "sub" / "vocab.txt").write_bytes(b"a\nb\n")
    (root / "empty.txt").write_bytes(b"")
    (root / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (root / "token.txt").write_bytes(b"hf_not_for_others\n")
    for name in (*SHARED, "empty.txt"):
        os.chmod(root / name, 0o644)
    os.chmod(root / "run.sh", 0o755)
    os.chmod(root / "token.txt", 0o600)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    """A runner whose tier is on the test machine's own filesystem (ext4 here: no reflinks)."""
    return Runner(tmp_path)


def _reflinks(runner: Runner, got) -> bool:
    if "reflink" in got.report["placed"]:
        pytest.skip("this filesystem clones: link mode reflinks (test_sec_tier.py covers XFS)")
    return False


def _assert_linked(runner: Runner, job: Path) -> None:
    for name in SHARED:
        placed = (job / name).stat()
        blob = runner.blob(_digest(job / name)).stat()
        assert (placed.st_ino, placed.st_dev) == (blob.st_ino, blob.st_dev), name
        assert stat.S_IMODE(placed.st_mode) == 0o444, name  # read-only, as the tier's inode
        assert int(placed.st_mtime) == tier_module.FROZEN_MTIME, name


def _assert_own_copies(job: Path) -> None:
    """What a hardlink would change keeps its own inode and its saved mode."""
    for name, mode in (("run.sh", 0o755), ("token.txt", 0o600), ("empty.txt", 0o644)):
        st = (job / name).stat()
        assert st.st_nlink == 1 and stat.S_IMODE(st.st_mode) == mode, name
    assert (job / "empty.txt").read_bytes() == b""


def test_a_warm_link_restore_hardlinks_small_files_too(runner: Runner) -> None:
    _tree(runner.base / "src")
    runner.save("m", runner.base / "src", **LINK)  # a blob per file (its own inodes)
    job = runner.base / "job"
    got = runner.restore("m", job, **LINK)
    _reflinks(runner, got)
    assert got.report["placed"] == {"hardlink": 4, "copy": 2}  # the empty file is no blob
    _assert_linked(runner, job)
    _assert_own_copies(job)
    tier_is_honest(runner.tier, runner.store)


def test_link_mode_after_a_copy_mode_save_cuts_small_files_from_the_run_then_links_them(
    runner: Runner,
) -> None:
    """A save in the default mode keeps the small files as one run of their pack; a ``link``
    restore cuts them from it (hashed), adopts them as blobs, and the next one hardlinks them."""
    _tree(runner.base / "src")
    runner.save("m", runner.base / "src")
    assert len(tier_runs(runner.tier)) == 1
    first = runner.restore("m", runner.base / "job1", **LINK)
    _reflinks(runner, first)
    assert first.outputs["bytes-downloaded"] == 0
    assert first.report["placed"] == {"hardlink": 1, "copy": 5}  # the shard; the rest cut
    second = runner.restore("m", runner.base / "job2", **LINK)
    assert second.report["placed"] == {"hardlink": 4, "copy": 2}
    _assert_linked(runner, runner.base / "job2")
    _assert_own_copies(runner.base / "job2")
    tier_is_honest(runner.tier, runner.store)


def test_a_cold_link_restore_links_small_files_into_the_tier(runner: Runner) -> None:
    _tree(runner.base / "src")
    runner.save("m", runner.base / "src", tier=False)
    first = runner.base / "job1"
    got = runner.restore("m", first, **LINK)
    assert got.outputs["bytes-from-local"] == 0
    _assert_linked(runner, first)  # fetched, verified, then linked in: no second copy
    _assert_own_copies(first)
    for name in ("run.sh", "token.txt"):  # copied in, so the tier has them but not their inode
        assert runner.blob(_digest(first / name)).stat().st_ino != (first / name).stat().st_ino
    second = runner.base / "job2"
    again = runner.restore("m", second, **LINK)
    _reflinks(runner, again)
    assert again.outputs["bytes-downloaded"] == 0
    assert again.report["placed"] == {"hardlink": 4, "copy": 2}
    _assert_linked(runner, second)
    tier_is_honest(runner.tier, runner.store)


def _tier_of(tmp_path: Path, blobs: dict[str, bytes]) -> tuple[LocalTier, dict[str, str]]:
    tier = LocalTier(tmp_path / "tier", mode="link")
    digests = {}
    for name, data in blobs.items():
        src = tmp_path / f"{name}.src"
        src.write_bytes(data)
        digests[name] = hashlib.sha256(data).hexdigest()
        assert tier.copy_in(src, digests[name])
    (tmp_path / "job").mkdir()
    return tier, digests


def test_once_a_link_replaced_a_failed_reflink_later_files_are_linked_straight_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No file is created (and a reflink tried) per file only to be unlinked again."""
    blobs = {f"f{i}": os.urandom(100 + i) for i in range(5)}
    tier, digests = _tier_of(tmp_path, blobs)
    tried = []

    def no_clone(_src: int, dst: int) -> bool:
        tried.append(dst)
        return False

    monkeypatch.setattr(copying, "reflink", no_clone)
    for name, digest in digests.items():
        placed = tier.place(digest, len(blobs[name]), tmp_path / "job" / name, 0o644)
        assert placed is not None and placed.how == "hardlink", name
        assert (tmp_path / "job" / name).read_bytes() == blobs[name]
    assert len(tried) == 1


def _swapping_link(tmp_path: Path):
    """``os.link`` that first puts a new inode (right size, mode and mtime) under the blob's
    name, as anything writing the tier as the runner's user could."""
    real_link = os.link

    def swap_then_link(src, dst, **kw):
        planted = tmp_path / "planted"
        planted.write_bytes(b"E" * 100)
        os.chmod(planted, 0o444)
        os.utime(planted, (tier_module.FROZEN_MTIME, tier_module.FROZEN_MTIME))
        os.replace(planted, src)
        return real_link(src, dst, **kw)

    return swap_then_link


def test_a_blob_swapped_after_its_check_is_never_linked_on_the_straight_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inode check after linking holds when the link comes first: a blob replaced between
    the check and the link (by anything writing the tier as us) is unlinked from the job's tree
    again and not served, so the file comes from the store, whose bytes are hashed."""
    blobs = {"first": b"1" * 100, "second": b"2" * 100}
    tier, digests = _tier_of(tmp_path, blobs)
    monkeypatch.setattr(copying, "reflink", lambda _src, _dst: False)
    assert tier.place(digests["first"], 100, tmp_path / "job" / "first", 0o644).how == "hardlink"
    monkeypatch.setattr(os, "link", _swapping_link(tmp_path))
    dest = tmp_path / "job" / "second"
    assert tier.place(digests["second"], 100, dest, 0o644) is None
    assert not os.path.lexists(dest)


def test_the_slow_path_copies_from_the_checked_inode_when_the_blob_is_swapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before any link worked (the first file), a swap is met after the open: the file is
    copied from the descriptor that was checked, never linked to the new inode."""
    blobs = {"first": b"1" * 100}
    tier, digests = _tier_of(tmp_path, blobs)
    monkeypatch.setattr(copying, "reflink", lambda _src, _dst: False)
    monkeypatch.setattr(os, "link", _swapping_link(tmp_path))
    dest = tmp_path / "job" / "first"
    placed = tier.place(digests["first"], 100, dest, 0o644)
    assert placed is not None and placed.how == "copy"
    assert dest.read_bytes() == blobs["first"] and dest.stat().st_nlink == 1
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
