"""Two restores of one cache into the same folder (concurrent jobs sharing ``~/models``): a name
the placement found missing is taken by the other restore before this one's rename. The undo
of a failed placement moves back only what it placed itself, so the other restore's finished
folder is never deleted; a folder that appeared where the one rename was going is merged into.

The window is opened deterministically by a hook at ``Placement._put`` (no sleeps).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from hostile_store_kit import leftovers, plant_models, restore_to

from gpuci.cache._restore import merge
from gpuci.cache._restore import staging as stage


def _other_restore_takes(folder: Path) -> None:
    """What the other job's restore leaves at ``folder`` in the window: its finished folder."""
    folder.mkdir()
    (folder / "theirs.bin").write_bytes(b"the other job's restore\n")


def test_a_folder_restored_meanwhile_by_another_job_is_kept_and_merged_into(
    file_store, env, tmp_path, monkeypatch
):
    """rv5 F2: B found the target missing; A renamed its folder into place; B's rename failed
    (ENOTEMPTY) and B's undo deleted A's folder. Now B merges into it and A's folder stays."""
    plant_models(file_store)
    (tmp_path / "w").mkdir()
    target = tmp_path / "w" / "t"
    real_put = merge.Placement._put

    def other_restore_first(self, src, dest, parts, name, aside):
        if parts == () and not os.path.lexists(self.target):
            _other_restore_takes(self.target)
        return real_put(self, src, dest, parts, name, aside)

    monkeypatch.setattr(merge.Placement, "_put", other_restore_first)
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 0, result.headline
    assert (target / "theirs.bin").read_bytes() == b"the other job's restore\n"
    assert (target / "sub" / "w.bin").read_bytes() == b"weights"
    assert leftovers(target.parent) == []


def test_a_failed_merge_leaves_a_name_another_restore_took_meanwhile(
    file_store, env, tmp_path, monkeypatch
):
    """Inside a merge: ``sub`` was missing, the other restore made it before this one's rename
    (which failed: it is merged into instead), and a later step failed. The undo leaves ``sub``
    as the other made it."""
    plant_models(file_store)
    target = tmp_path / "t"
    target.mkdir()
    real_put = merge.Placement._put

    def other_takes_sub_then_fail_on_z(self, src, dest, parts, name, aside):
        if name == "sub" and not (target / "sub").exists():
            _other_restore_takes(target / "sub")
        if name == "z.bin":
            raise OSError(5, "Input/output error", name)
        return real_put(self, src, dest, parts, name, aside)

    monkeypatch.setattr(merge.Placement, "_put", other_takes_sub_then_fail_on_z)
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 3, result.headline
    assert (target / "sub" / "theirs.bin").read_bytes() == b"the other job's restore\n"
    assert sorted(os.listdir(target)) == ["sub"]
    assert sorted(os.listdir(target / "sub")) == ["theirs.bin"]
    assert leftovers(tmp_path) == []


def test_the_undo_leaves_what_replaced_a_placed_file_meanwhile(
    file_store, env, tmp_path, monkeypatch
):
    """A name this restore placed, then another restore replaced: the undo moves back only the
    inode it placed (by device and inode), never the other's."""
    plant_models(file_store)
    target = tmp_path / "t"
    target.mkdir()
    real_put = merge.Placement._put

    def other_replaces_sub_then_fail_on_z(self, src, dest, parts, name, aside):
        if name == "z.bin":
            os.rename(target / "sub", tmp_path / "ours")
            _other_restore_takes(target / "sub")
            raise OSError(5, "Input/output error", name)
        return real_put(self, src, dest, parts, name, aside)

    monkeypatch.setattr(merge.Placement, "_put", other_replaces_sub_then_fail_on_z)
    result = restore_to(file_store, env, "k", target)
    assert result.exit_code == 3, result.headline
    assert (target / "sub" / "theirs.bin").read_bytes() == b"the other job's restore\n"


@pytest.mark.parametrize("theirs", [b"weights", b"another revision"])
def test_a_file_placed_meanwhile_by_another_restore_is_there_after_this_one_fails(
    tmp_path, monkeypatch, theirs
):
    """A root that is one file: this restore found the target missing, the other restore
    placed the file before this one did, and this one then failed (a later root). Its rename
    replaced the other's file, and its undo left nothing there. Now the file is placed without
    replacing one that appeared unseen (a hard link): the other's is moved aside, whatever it
    holds, and put back by the undo."""
    target = tmp_path / "model.bin"
    staging = stage.make(target)
    staging.tree.write_bytes(b"weights")
    placement = merge.Placement(target, staging)
    real_put = merge.Placement._put

    def other_restore_first(self, src, dest, parts, name, aside):
        if not os.path.lexists(target):
            target.write_bytes(theirs)
        return real_put(self, src, dest, parts, name, aside)

    monkeypatch.setattr(merge.Placement, "_put", other_restore_first)
    placement.place("file")
    assert target.read_bytes() == b"weights"
    placement.undo()
    staging.remove()
    assert target.read_bytes() == theirs
    assert leftovers(tmp_path) == []


def test_a_file_is_renamed_into_place_where_hard_links_are_refused(tmp_path, monkeypatch):
    target = tmp_path / "model.bin"
    staging = stage.make(target)
    staging.tree.write_bytes(b"weights")

    def refused(*_args, **_kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", refused)
    merge.Placement(target, staging).place("file")
    staging.remove()
    assert target.read_bytes() == b"weights"
    assert leftovers(tmp_path) == []


def _appears_in_the_window(target: Path, monkeypatch, other) -> None:
    """Run ``other()`` once, in the window of a restore's ``_put``: the name was found missing."""
    real_put = merge.Placement._put
    ran: list[bool] = []

    def first(self, src, dest, parts, name, aside):
        if not ran and self.target == target and not os.path.lexists(target):
            ran.append(True)
            other()
        return real_put(self, src, dest, parts, name, aside)

    monkeypatch.setattr(merge.Placement, "_put", first)


def _staged(target: Path, data: bytes = b"weights", mode: int = 0o644) -> stage.Staging:
    staging = stage.make(target)
    staging.tree.write_bytes(data)
    os.chmod(staging.tree, mode)
    return staging


def test_the_undo_of_one_restore_leaves_the_file_another_restore_placed_after_it(
    tmp_path, monkeypatch
):
    """rvA F1: A placed the file in B's window; B kept A's file (the same bytes) as its own and
    succeeded; A then failed, and its undo moved "its" file away from B's finished restore. Now
    B places its own file (A's moved aside), and A's undo leaves a name it no longer holds."""
    target = tmp_path / "model.bin"
    a = merge.Placement(target, _staged(target))
    b = merge.Placement(target, _staged(target))
    _appears_in_the_window(target, monkeypatch, lambda: a.place("file"))
    b.place("file")
    b.staging.remove()
    a.undo()
    a.staging.remove()
    assert target.read_bytes() == b"weights"
    assert leftovers(tmp_path) == []


def test_a_file_planted_in_the_window_with_the_same_bytes_is_not_kept_as_the_restored_one(
    tmp_path, monkeypatch
):
    """rvA F2: a file another user put at the name in the window, with the cached bytes, was kept
    as the restored file: its mode (0o666) and owner stayed, and its owner could rewrite it
    after the restore succeeded. Now the restore's own file, of the manifest's mode, is there."""
    target = tmp_path / "run.sh"
    staging = _staged(target, b"#!/bin/sh\necho trusted\n", 0o755)
    planted: list[os.stat_result] = []

    def plant_it() -> None:
        target.write_bytes(b"#!/bin/sh\necho trusted\n")
        os.chmod(target, 0o666)
        planted.append(os.lstat(target))

    _appears_in_the_window(target, monkeypatch, plant_it)
    merge.Placement(target, staging).place("file")
    staging.remove()
    held = os.lstat(target)
    assert not os.path.samestat(held, planted[0])
    assert stat.S_IMODE(held.st_mode) == 0o755
    assert held.st_uid == os.getuid()
    assert target.read_bytes() == b"#!/bin/sh\necho trusted\n"


def test_a_file_planted_in_the_window_and_grown_is_never_read_past_its_size(tmp_path, monkeypatch):
    """rvA F5: the file found at the name was hashed until its end, and its owner grew it (to
    1 TiB, sparse) after its size was looked at: the restore read on and on. Now nothing past
    the size it had when it appeared is read from it (the reads are cut at 1 MiB here, as an
    I/O error, so the unfixed code ends too)."""
    target = tmp_path / "model.bin"
    staging = _staged(target)
    theirs: list[int] = []
    read = [0]
    real_preadv = os.preadv

    def plant_it() -> None:
        theirs.append(os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
        os.write(theirs[0], b"weights")

    def preadv(fd, buffers, offset, *args):
        if theirs and os.path.samestat(os.fstat(fd), os.fstat(theirs[0])):
            os.ftruncate(theirs[0], 1 << 40)  # its owner grows it after any look at its size
            if read[0] > 1 << 20:
                raise OSError(errno.EIO, "cut by the test", str(target))
            n = real_preadv(fd, buffers, offset, *args)
            read[0] += n
            return n
        return real_preadv(fd, buffers, offset, *args)

    _appears_in_the_window(target, monkeypatch, plant_it)
    monkeypatch.setattr(os, "preadv", preadv)
    try:
        merge.Placement(target, staging).place("file")
    finally:
        staging.remove()
        os.close(theirs[0])
    assert read[0] <= len(b"weights")
    assert target.read_bytes() == b"weights"


def test_the_undo_leaves_a_folder_it_placed_that_another_restore_merged_into(tmp_path, monkeypatch):
    """F1's folder form: A renamed its folder into B's window, B merged into it (its rename
    failed) and succeeded, then A failed: A's undo moved the whole folder, B's files in it,
    away. Now a folder that holds what A did not stage under it is left."""
    target = tmp_path / "models"

    def staged_folder() -> stage.Staging:
        staging = stage.make(target)
        staging.tree.mkdir()
        (staging.tree / "w.bin").write_bytes(b"weights")
        return staging

    a = merge.Placement(target, staged_folder())
    b = merge.Placement(target, staged_folder())
    _appears_in_the_window(target, monkeypatch, lambda: a.place("dir"))
    b.place("dir")
    b.staging.remove()
    a.undo()
    a.staging.remove()
    assert (target / "w.bin").read_bytes() == b"weights"
    assert leftovers(tmp_path) == []


def test_the_undo_still_takes_back_a_folder_holding_only_what_it_placed(tmp_path):
    target = tmp_path / "models"
    staging = stage.make(target)
    (staging.tree / "sub").mkdir(parents=True)
    (staging.tree / "sub" / "w.bin").write_bytes(b"weights")
    placement = merge.Placement(target, staging)
    placement.place("dir")
    placement.undo()
    staging.remove()
    assert not os.path.lexists(target)
    assert leftovers(tmp_path) == []
