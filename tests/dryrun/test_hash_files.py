"""``hashFiles()`` at plan time never leaves the checkout: a committed link (``sys -> /``) is
not followed, as the runner does not follow one; the walk stops once the matches pass the
cap; a file that vanishes mid-walk leaves the value to the run instead of ending the plan."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from dryrun.dryrun_testing import runner_hash_files
from gpuci.dryrun import _contexts
from gpuci.dryrun._contexts import hash_files
from gpuci.dryrun._expressions import Unknown
from gpuci_testing import deep_folder, remove_deep


def checkout(tmp_path: Path) -> tuple[Path, dict]:
    """A checkout with a/x.lock, and the contexts naming it the workspace."""
    root = tmp_path / "checkout"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.lock").write_bytes(b"one")
    return root, {"github": {"workspace": str(root)}}


def real_path(path) -> str:
    """The real path of a folder ``os.scandir`` lists, given by path or by descriptor."""
    return os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else os.path.realpath(path)


def listed_folders(monkeypatch) -> list[str]:
    """Every folder listed from now on (os.scandir, which every walk uses), as its real path."""
    seen: list[str] = []
    real_scandir = os.scandir

    def spy(path=".", *rest):
        seen.append(real_path(path))
        return real_scandir(path, *rest)

    monkeypatch.setattr(os, "scandir", spy)
    return seen


def test_a_link_out_of_the_checkout_is_not_walked(tmp_path, monkeypatch):
    """hashFiles('sys/**') with sys -> / walked the whole machine (41 s) before any filter."""
    root, ctx = checkout(tmp_path)
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.lock").write_bytes(b"secret")
    (root / "sys").symlink_to(outside)
    (root / "b").symlink_to(root / "a")  # a link inside the checkout is not followed either
    seen = listed_folders(monkeypatch)
    for pattern in ("sys/**", "sys/**/*.lock", "sys/deep/*.lock"):
        assert isinstance(hash_files(ctx, [pattern]), Unknown), pattern
    assert all(Path(p) == root or root in Path(p).parents for p in seen), seen
    assert hash_files(ctx, ["**/*.lock"]) == runner_hash_files(b"one")  # a/x.lock only
    assert isinstance(hash_files(ctx, ["b/*"]), Unknown)


def test_a_folder_glob_matches_its_files_as_the_runner_does(tmp_path):
    """``a/**`` matches every file under a/ (minimatch, the runner's glob)."""
    root, ctx = checkout(tmp_path)
    (root / "a" / "sub").mkdir()
    (root / "a" / "sub" / "y.lock").write_bytes(b"two")
    assert hash_files(ctx, ["a/**"]) == runner_hash_files(b"two", b"one")  # a/sub/ first
    assert hash_files(ctx, ["a/**", "!a/sub/**"]) == runner_hash_files(b"one")
    assert hash_files(ctx, ["a/[xy].lock"]) == runner_hash_files(b"one")


def test_the_walk_stops_once_the_matches_pass_the_cap(tmp_path, monkeypatch):
    root, ctx = checkout(tmp_path)
    for n in range(30):
        (root / f"d{n:02}").mkdir()
        (root / f"d{n:02}" / "f.lock").write_bytes(b"x")
    for module in (_contexts, sys.modules.get("gpuci.dryrun._hash_files")):  # where it lives
        if module is not None:
            monkeypatch.setattr(module, "MAX_HASHED_FILES", 3, raising=False)
    seen = listed_folders(monkeypatch)
    assert isinstance(hash_files(ctx, ["**/*.lock"]), Unknown)
    assert len(seen) < 10, len(seen)  # not all 31 folders


def test_a_file_gone_mid_walk_leaves_the_value_to_the_run(tmp_path, monkeypatch):
    """A /proc entry vanishing during the walk ended the dry run as an internal error."""
    _, ctx = checkout(tmp_path)
    real_scandir = os.scandir

    def vanishing(path=".", *rest):
        if Path(real_path(path)).name == "a":
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_scandir(path, *rest)

    monkeypatch.setattr(os, "scandir", vanishing)
    assert isinstance(hash_files(ctx, ["**/*.lock"]), Unknown)
    assert _contexts.PLAN_FUNCTIONS["hashfiles"] is hash_files


def test_a_tree_deeper_than_the_interpreter_recurses_leaves_the_value_to_the_run(tmp_path):
    """``os.walk`` recursed once per folder (before Python 3.12): a committed tree deeper than
    the recursion limit ended the dry run with a RecursionError."""
    root, ctx = checkout(tmp_path)
    deep_folder(root, "deep", sys.getrecursionlimit() + 100)
    try:
        assert isinstance(hash_files(ctx, ["deep/**"]), Unknown)  # deeper than a walk holds
        assert hash_files(ctx, ["a/**"]) == runner_hash_files(b"one")
    finally:
        remove_deep(root, "deep")
