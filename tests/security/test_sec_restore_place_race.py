# ruff: noqa: F811  (the fixtures imported from hostile_store_kit are used as arguments)
"""Two restores of one cache into the same folder (concurrent jobs sharing ``~/models``): a name
the placement found missing is taken by the other restore before this one's rename. The undo
of a failed placement moves back only what it placed itself, so the other restore's finished
folder is never deleted; a folder that appeared where the one rename was going is merged into.

The window is opened deterministically by a hook at ``Placement._put`` (no sleeps).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile_store_kit import (  # noqa: F401  (fixtures are used by name)
    cache_cmd,
    deep_folder,
    env,
    file_store,
    leftovers,
    plant,
    remove_deep,
    replace_fails_on,
    restore_to,
)

from gpuci.cache._restore import merge
from gpuci.cache._restore import staging as stage


def _plant_models(store) -> None:
    plant(
        store,
        "k",
        [
            {"type": "dir", "root": 0, "path": "sub", "mode": 0o755},
            {"type": "file", "root": 0, "path": "sub/w.bin"},
            {"type": "file", "root": 0, "path": "z.bin"},
        ],
        {"sub/w.bin": b"weights", "z.bin": b"z"},
    )


def _other_restore_takes(folder: Path) -> None:
    """What the other job's restore leaves at ``folder`` in the window: its finished folder."""
    folder.mkdir()
    (folder / "theirs.bin").write_bytes(b"the other job's restore\n")


def test_a_folder_restored_meanwhile_by_another_job_is_kept_and_merged_into(
    file_store, env, tmp_path, monkeypatch
):
    """rv5 F2: B found the target missing; A renamed its folder into place; B's rename failed
    (ENOTEMPTY) and B's undo deleted A's folder. Now B merges into it and A's folder stays."""
    _plant_models(file_store)
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
    _plant_models(file_store)
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
    _plant_models(file_store)
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
    replacing one that appeared (a hard link): the other's is kept when it holds the same bytes,
    else moved aside and put back by the undo."""
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
