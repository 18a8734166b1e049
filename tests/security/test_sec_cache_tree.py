"""A hostile cache writer against restored trees: links that escape through each other, links a
job planted in the target, paths that climb out, and modes that open files to everyone.

Each manifest is planted in the store behind gpu-ci's back (a writer with store access needs
no gpu-ci to do that) and restored through the command, on a file store and on S3 (moto).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hostile_store_kit import (
    aws_env,  # noqa: F401  (autouse: fake credentials)
    cache_cmd,
    leftovers,
    plant,
    restore_to,
    sha,
    snapshot,
)

from gpuci.cache._format import manifest as mf

CHAIN = [  # each target stays inside on its own; composed, c climbs two levels out
    {"type": "symlink", "root": 0, "path": "a", "target": "."},
    {"type": "symlink", "root": 0, "path": "b", "target": "a/.."},
    {"type": "symlink", "root": 0, "path": "c", "target": "b/../outside"},
]


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """A job's folder ``w/x/t`` and the ``w/outside`` the chain aims at (it exists)."""
    outside = tmp_path / "w" / "outside"
    outside.mkdir(parents=True)
    (tmp_path / "w" / "x").mkdir()
    return {"target": tmp_path / "w" / "x" / "t", "outside": outside}


def test_links_chained_out_of_the_tree_are_refused_before_a_byte_is_written(store, env, place):
    plant(
        store,
        "chain",
        [*CHAIN, {"type": "file", "root": 0, "path": "data.bin", "mode": 0o644}],
        {"data.bin": b"payload"},
    )
    result = restore_to(store, env, "chain", place["target"])
    assert result.exit_code == 2
    assert "leaves the target folder once the links it passes through are followed" in (
        result.headline
    )
    assert not place["target"].exists()
    assert leftovers(place["target"].parent) == []
    assert list(place["outside"].iterdir()) == []


def test_a_folder_after_chained_links_in_the_target_stays_inside(store, env, place):
    """The issue's attack, second half: the links are already in the target (a first restore
    made them, or the job did); a manifest with a folder ``c`` must not write through them."""
    target = place["target"]
    target.mkdir()
    for entry in CHAIN:
        os.symlink(entry["target"], target / entry["path"])
    plant(
        store,
        "folder-c",
        [
            {"type": "dir", "root": 0, "path": "c", "mode": 0o755},
            {"type": "file", "root": 0, "path": "c/pwned", "mode": 0o644},
        ],
        {"c/pwned": b"evil"},
    )
    result = restore_to(store, env, "folder-c", target)
    assert result.exit_code == 0, result.headline
    assert list(place["outside"].iterdir()) == []
    assert not (target / "c").is_symlink()
    assert (target / "c" / "pwned").read_bytes() == b"evil"


def test_a_link_planted_in_the_target_is_replaced_not_followed(store, env, place, tmp_path):
    """A job sharing the folder plants ``models -> /elsewhere`` and ``config -> elsewhere``."""
    target, outside = place["target"], place["outside"]
    (target / "deep").mkdir(parents=True)
    os.symlink(outside, target / "models")  # absolute, where the manifest has a folder
    os.symlink(outside, target / "deep" / "inner")  # one level down
    (outside / "config.json").write_bytes(b"victim")
    os.symlink(outside / "config.json", target / "config.json")  # where a file goes
    plant(
        store,
        "planted",
        [
            {"type": "dir", "root": 0, "path": "deep", "mode": 0o755},
            {"type": "dir", "root": 0, "path": "deep/inner", "mode": 0o755},
            {"type": "file", "root": 0, "path": "deep/inner/w.bin"},
            {"type": "dir", "root": 0, "path": "models", "mode": 0o755},
            {"type": "file", "root": 0, "path": "models/w.bin"},
            {"type": "file", "root": 0, "path": "config.json"},
        ],
        {"models/w.bin": b"weights", "deep/inner/w.bin": b"inner", "config.json": b"{}"},
    )
    before = snapshot(outside)
    result = restore_to(store, env, "planted", target)
    assert result.exit_code == 0, result.headline
    assert snapshot(outside) == before
    tree = snapshot(target)
    assert tree["models"][0] == "dir" and tree["deep/inner"][0] == "dir"
    assert tree["models/w.bin"][2] == sha(b"weights")
    assert tree["deep/inner/w.bin"][2] == sha(b"inner")
    assert tree["config.json"][2] == sha(b"{}")
    assert leftovers(target.parent) == []


def test_a_restored_link_that_leaves_through_the_jobs_own_links_is_removed(store, env, place):
    """``a`` is the job's link to ``/outside``; the manifest's ``c -> a/x`` is fine on paper."""
    target = place["target"]
    target.mkdir()
    os.symlink(place["outside"], target / "a")
    plant(store, "through", [{"type": "symlink", "root": 0, "path": "c", "target": "a/x"}])
    result = restore_to(store, env, "through", target)
    assert result.exit_code == 2
    assert "resolves to" in result.headline and "outside" in result.headline
    assert not os.path.lexists(target / "c")


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"type": "symlink", "root": 0, "path": "l", "target": "/etc/passwd"}, "absolute"),
        ({"type": "symlink", "root": 0, "path": "d/l", "target": "../../x"}, "escapes"),
        ({"type": "file", "root": 0, "path": "../x"}, "climbs out"),
        ({"type": "file", "root": 0, "path": "d/../../x"}, "climbs out"),
        ({"type": "file", "root": 0, "path": "/tmp/x"}, "absolute"),
        ({"type": "symlink", "root": 0, "path": "l", "target": "m/../l/x"}, "loops"),
    ],
)
def test_absolute_and_climbing_entries_are_refused(store, env, place, entry, why):
    """Absolute targets and ``..`` were refused before this issue; kept here as regressions."""
    files = {entry["path"]: b"x"} if entry["type"] == "file" else {}
    plant(store, "climb", [entry], files)
    result = restore_to(store, env, "climb", place["target"])
    assert result.exit_code == 2
    assert why in result.headline
    assert not place["target"].exists()


def test_hostile_modes_restore_neither_writable_nor_setuid(store, env, place):
    big = os.urandom(2 << 20)  # its own blob: the ranged-download path sets its mode
    plant(
        store,
        "modes",
        [
            {"type": "dir", "root": 0, "path": "d", "mode": 0o7777},
            {"type": "file", "root": 0, "path": "d/tool", "mode": 0o6777},
            {"type": "file", "root": 0, "path": "big.bin", "mode": 0o6666},
            {"type": "file", "root": 0, "path": "empty", "mode": 0o4777},
        ],
        {"d/tool": b"#!/bin/sh\n", "big.bin": big},
    )
    result = restore_to(store, env, "modes", place["target"])
    assert result.exit_code == 0, result.headline
    modes = {
        p: stat.S_IMODE(os.lstat(place["target"] / p).st_mode)
        for p in ("d", "d/tool", "big.bin", "empty")
    }
    assert modes == {"d": 0o755, "d/tool": 0o755, "big.bin": 0o644, "empty": 0o755}


def test_save_follows_links_that_escape_through_each_other(store, env, tmp_path):
    """A tree a job made with a chain, saved with follow-symlinks: all: save keeps the bytes,
    never a link restore refuses (by default the chained link is skipped: test_sec_save_tree)."""
    root = tmp_path / "src" / "t"
    root.mkdir(parents=True)
    (tmp_path / "src" / "secret.txt").write_bytes(b"outside bytes")
    os.symlink(".", root / "a")
    os.symlink("a/..", root / "b")
    os.symlink("b/secret.txt", root / "c")  # resolves to src/secret.txt, a file
    os.symlink("real.txt", root / "ok")
    (root / "real.txt").write_bytes(b"inside")
    flags = {**store.flags(), "key": "k", "path": str(root), "follow-symlinks": "all"}
    result, _ = cache_cmd("save", flags, env)
    assert result.exit_code == 0, result.headline
    manifest = mf.parse(store.get_raw(f"manifests/{result.outputs['manifest']}.json"), "m")
    kinds = {e.path: e.type for e in manifest.entries}
    # b names a folder outside the tree: skipped, as a lone link out of the tree would be
    assert kinds == {"a": "symlink", "c": "file", "ok": "symlink", "real.txt": "file"}
    target = tmp_path / "back"
    back = restore_to(store, env, "k", target)
    assert back.exit_code == 0, back.headline
    assert (target / "c").read_bytes() == b"outside bytes"


@pytest.mark.parametrize(
    ("tree", "escapes"),
    [
        ({"a": ".", "b": "a/..", "c": "b/../outside"}, ["b", "c"]),
        ({"snap/x": "../../blobs/1", "blobs/1": "../blobs/2"}, ["snap/x"]),
        ({"snap/r/x": "../../blobs/1"}, []),  # a Hugging Face snapshot's link
        ({"l": "m", "m": "l"}, ["l", "m"]),  # a loop never ends inside
        ({"d/up": "..", "d/l": "up/.."}, ["d/l"]),
        ({"d/up": "..", "d/l": "up/up"}, []),  # root's "up" is no link: a plain name
        ({"d/up": "..", "d/l": "up/d/up"}, []),
    ],
)
def test_links_resolve_through_each_other(tree, escapes):

    assert mf.escaping_links(tree) == escapes
