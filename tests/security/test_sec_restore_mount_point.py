"""A restore into a folder that is a mount point (a runner's model disk at ``/models``, a
docker volume): the staging folder and its trash go on the target's filesystem (inside it), so
no rename of the merge, or of its undo, crosses filesystems (rv5 F5). Needs root to mount a
tmpfs; skipped otherwise.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_store_kit import leftovers, plant, plant_models, replace_fails_on, restore_to, snapshot

from gpuci.cache._restore import staging


def _mounted(folder: Path, *options: str) -> Iterator[Path]:
    folder.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    command = ["mount", "-t", "tmpfs", *options, "none", str(folder)]
    made = subprocess.run(command, capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def disk(tmp_path) -> Iterator[Path]:
    """``tmp_path/models``: a tmpfs, holding the disk's own file."""
    for folder in _mounted(tmp_path / "models"):
        (folder / "README").write_text("the disk's own file\n")
        yield folder


def _plant_models(store) -> None:
    plant_models(store, README=b"cached readme\n")


def test_a_restore_into_a_mount_point_merges_into_it(file_store, env, disk):
    _plant_models(file_store)
    result = restore_to(file_store, env, "k", disk)
    assert result.exit_code == 0, result.headline
    assert (disk / "sub" / "w.bin").read_bytes() == b"weights"
    assert (disk / "README").read_bytes() == b"cached readme\n"
    assert leftovers(disk) == []
    assert leftovers(disk.parent) == []


def test_a_failed_merge_into_a_mount_point_puts_everything_back(file_store, env, disk, monkeypatch):
    _plant_models(file_store)
    before = snapshot(disk)
    replace_fails_on(monkeypatch, "z.bin")
    result = restore_to(file_store, env, "k", disk)
    assert result.exit_code == 3, result.headline
    assert snapshot(disk) == before
    assert leftovers(disk) == []
    assert leftovers(disk.parent) == []


def test_a_dead_restores_staging_inside_a_mount_point_is_swept(disk):
    dead = staging.make(disk)
    assert dead.path.parent == disk  # on the disk's filesystem
    os.close(dead.lock)  # its restore died: the kernel dropped its lock
    staging.sweep_stale(disk)
    assert leftovers(disk) == []
    os.close(dead.fd)


def test_a_mount_point_inside_the_target_fails_naming_it(file_store, env, tmp_path):
    """A merge cannot move a file onto another filesystem inside the target: one line naming
    that, never "check the path is writable"."""
    _plant_models(file_store)
    target = tmp_path / "t"
    for sub in _mounted(target / "sub"):
        result = restore_to(file_store, env, "k", target)
        assert result.exit_code == 3, result.headline
        assert "another filesystem" in result.headline
        assert "writable" not in result.headline
        assert os.listdir(sub) == []
    assert leftovers(tmp_path) == []


def test_the_space_is_checked_on_the_mount_points_filesystem(file_store, env, tmp_path):
    plant(file_store, "k", [{"type": "file", "root": 0, "path": "w.bin"}], {"w.bin": b"w" * 4096})
    for small in _mounted(tmp_path / "models", "-o", "size=1m"):
        result = restore_to(file_store, env, "k", small)
        assert result.exit_code == 3, result.headline
        assert result.headline.startswith(f"not enough disk to restore into {small}:")
