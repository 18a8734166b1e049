"""What a pull request's job can plant in a folder a later trusted save reads (a Hugging Face
cache kept on a self-hosted runner), and what a hostile writer can plant in a store's manifest.

Save: a link out of the saved paths is skipped unless ``follow-symlinks: all`` (and said either
way); an hf repo folder that is a link is refused; names restore would refuse, names that are
not UTF-8, folders too deep, unreadable files and folders are skipped with a warning, never an
internal error. Restore: a manifest whose links take unbounded work to resolve, whose paths are
too deep, or that names a file and a path under it is refused as malformed (exit 2).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile_store_kit import cache_cmd, save_from
from tier_runner import warnings

from gpuci.cache._format import manifest as mf
from gpuci.cache._format import tree as tree_mod
from gpuci.errors import ExitCode


def _saved_paths(store, result) -> dict[str, str]:
    body = store.get_raw(f"manifests/{result.outputs['manifest']}.json")
    return {e.path: e.type for e in mf.parse(body, "m").entries}


@pytest.fixture
def planted(tmp_path: Path) -> dict[str, Path]:
    """A saved folder with a model file, an in-tree link and two links a PR planted to files
    outside it (a docker config and an ssh key)."""
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text('{"auth": "SECRET-TOKEN"}')
    (home / "id_rsa").write_text("SECRET-KEY")
    root = tmp_path / "t"
    (root / "snap").mkdir(parents=True)
    (root / "model.bin").write_bytes(b"weights" * 10)
    os.symlink("../model.bin", root / "snap" / "model.bin")
    os.symlink(home / ".docker" / "config.json", root / "snap" / "config.json")
    os.symlink(home / "id_rsa", root / "snap" / "key")
    return {"root": root, "home": home}


# ----- finding 2: links out of the tree ---------------------------------------------------------


def test_a_link_out_of_the_tree_is_not_followed_by_default(file_store, env, planted):
    result = save_from(file_store, env, "k", planted["root"])
    assert result.ok, result.headline
    assert _saved_paths(file_store, result) == {
        "model.bin": "file",
        "snap": "dir",
        "snap/model.bin": "symlink",
    }
    (line,) = [w for w in warnings(result) if "leaving the saved paths" in w]
    assert str(planted["root"] / "snap" / "config.json") in line
    assert "and 1 other link " in line and "set follow-symlinks: all" in line
    for blob in (file_store.root / "blobs").rglob("*"):
        assert not blob.is_file() or b"SECRET" not in blob.read_bytes()


def test_follow_symlinks_all_saves_the_files_and_names_each_link(file_store, env, planted):
    result = save_from(file_store, env, "k", planted["root"], **{"follow-symlinks": "all"})
    assert result.ok, result.headline
    kinds = _saved_paths(file_store, result)
    assert kinds["snap/config.json"] == "file" and kinds["snap/key"] == "file"
    (line,) = [w for w in warnings(result) if "follow-symlinks: all" in w]
    assert "snap/config.json" in line and "snap/key" in line


def test_an_unknown_follow_symlinks_value_is_refused(file_store, env, planted):
    result = save_from(file_store, env, "k", planted["root"], **{"follow-symlinks": "some"})
    assert result.exit_code == ExitCode.BAD_INPUT, result.headline


def _hub(tmp_path: Path) -> Path:
    hub = tmp_path / "hub"
    hub.mkdir()
    return hub


def test_an_hf_repo_folder_planted_as_a_link_is_refused(file_store, env, tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET")
    hub = _hub(tmp_path)
    os.symlink(home, hub / "models--org--m")
    flags = {"layout": "hf", "hf-repo": "org/m", "follow-symlinks": "all"}
    result = save_from(file_store, env, "k", hub, **flags)
    assert result.exit_code == ExitCode.BAD_INPUT, result.headline
    assert "models--org--m is a symlink" in result.headline
    assert not (file_store.root / "manifests").exists() or not any(
        (file_store.root / "manifests").iterdir()
    )


def test_a_path_the_user_names_may_be_a_link_to_a_folder(file_store, env, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "f.bin").write_bytes(b"x")
    os.symlink(real, tmp_path / "named")
    result = save_from(file_store, env, "k", tmp_path / "named")
    assert result.ok, result.headline
    assert _saved_paths(file_store, result) == {"f.bin": "file"}


def _hf_repo(hub: Path) -> Path:
    repo = hub / "models--org--m"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "aaa").write_bytes(b"weights")
    (repo / "snapshots" / "c1").mkdir(parents=True)
    os.symlink("../../blobs/aaa", repo / "snapshots" / "c1" / "model.bin")
    (repo / "refs").mkdir()
    return repo


def test_an_hf_ref_planted_as_a_link_is_not_read(file_store, env, tmp_path):
    repo = _hf_repo(_hub(tmp_path))
    os.symlink("/proc/self/pagemap", repo / "refs" / "main")
    flags = {"layout": "hf", "hf-repo": "org/m", "hf-revision": "c1"}
    result = save_from(file_store, env, "k", tmp_path / "hub", **flags)
    assert result.ok, result.headline  # c1 names its snapshot itself
    flags["hf-revision"] = "main"
    with_main = save_from(file_store, env, "m", tmp_path / "hub", **flags)
    assert with_main.exit_code == ExitCode.BAD_INPUT, with_main.headline
    assert "has no snapshot" in with_main.headline  # one line, never an internal error


def test_a_ref_is_read_from_a_small_regular_file_only(tmp_path):
    from gpuci.cache._format import hf

    repo = _hf_repo(_hub(tmp_path))
    ref = repo / "refs" / "main"
    ref.write_text("c1\n")
    notes: list[str] = []
    assert hf.commit_of(repo, "main", notes) == "c1" and notes == []
    ref.unlink()
    os.symlink("../snapshots/c1/model.bin", ref)
    assert hf.commit_of(repo, "main", notes) == "main"
    assert len(notes) == 1 and "symlink" in notes[0]
    ref.unlink()
    with open(ref, "wb") as handle:  # sparse: a MiB that takes no disk, read 4 KiB at most
        handle.truncate(1 << 20)
    assert hf.commit_of(repo, "main", notes) == "main"
    assert len(notes) == 2 and "over 4 KiB" in notes[1]


# ----- finding 4: link resolution bounded -------------------------------------------------------


def test_a_saved_tree_whose_links_exhaust_the_budget_skips_them(
    file_store, env, tmp_path, monkeypatch
):
    root = tmp_path / "t"
    root.mkdir()
    (root / "x").write_bytes(b"x")
    os.symlink("/".join(["."] * 200 + ["x"]), root / "F")
    for i in range(20):
        os.symlink("F", root / f"l{i}")
    monkeypatch.setattr(mf, "MAX_WALKED", 100)
    result = save_from(file_store, env, "k", root)
    assert result.ok, result.headline
    assert _saved_paths(file_store, result) == {"x": "file"}


# ----- finding 6: names save writes and restore refuses -----------------------------------------


def test_names_restore_would_refuse_are_skipped_at_save(file_store, env, tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    for name in ("a\\b.bin", "c:x", "1:2.bin", "::warning::x", "ok.bin"):
        (root / name).write_bytes(b"x")
    result = save_from(file_store, env, "k", root)
    assert result.ok, result.headline
    assert set(_saved_paths(file_store, result)) == {"1:2.bin", "::warning::x", "ok.bin"}
    assert any("which restore refuses" in w for w in warnings(result)), warnings(result)
    back, _ = cache_cmd(
        "restore", {**file_store.flags(), "key": "k", "path": str(tmp_path / "back")}, env
    )
    assert back.ok, back.headline
    assert (tmp_path / "back" / "1:2.bin").read_bytes() == b"x"


# ----- finding 9: what a job planted ends no save in an internal error ---------------------------


def test_a_followed_link_to_an_unreadable_proc_file_is_one_line(file_store, env, tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    os.symlink("/proc/self/pagemap", root / "model.safetensors")
    skipped = save_from(file_store, env, "k", root)
    assert skipped.ok, skipped.headline
    result = save_from(file_store, env, "all", root, **{"follow-symlinks": "all"})
    assert result.exit_code == ExitCode.BAD_INPUT, result.headline
    assert "cannot read" in result.headline and "model.safetensors" in result.headline


def test_a_name_that_is_not_utf8_is_skipped(file_store, env, tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "ok.bin").write_bytes(b"x")
    (Path(os.fsdecode(bytes(root) + b"/bad\xff.bin"))).write_bytes(b"x")
    result = save_from(file_store, env, "k", root)
    assert result.ok, result.headline
    assert _saved_paths(file_store, result) == {"ok.bin": "file"}
    assert any("not UTF-8" in w and "bad\\xff.bin" in w for w in warnings(result))


def test_unreadable_files_and_folders_are_skipped_with_a_warning(
    file_store, env, tmp_path, monkeypatch
):
    root = tmp_path / "t"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f").write_bytes(b"x")
    (root / "secret.bin").write_bytes(b"x")
    (root / "ok.bin").write_bytes(b"x")
    real_access, real_listdir = os.access, os.listdir

    def access(path, mode, **kw):  # as a job's user without the permission sees it (root does not)
        return False if str(path).endswith("secret.bin") else real_access(path, mode, **kw)

    def listdir(path):
        if str(path).endswith("/sub"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(tree_mod.os, "access", access)
    monkeypatch.setattr(tree_mod.os, "listdir", listdir)
    result = save_from(file_store, env, "k", root)
    assert result.ok, result.headline
    assert _saved_paths(file_store, result) == {"ok.bin": "file", "sub": "dir"}
    said = " ".join(warnings(result))
    assert "secret.bin: this job cannot read it" in said
    assert "sub: this job cannot list the folder" in said


# ----- finding 10 (part): deep trees --------------------------------------------------------------


def test_folders_deeper_than_the_cap_are_skipped(file_store, env, tmp_path):
    root = tmp_path / "t"
    deep = root.joinpath(*["d"] * (mf.MAX_DEPTH + 5))
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"x")
    (root / "top.bin").write_bytes(b"x")
    result = save_from(file_store, env, "k", root)
    assert result.ok, result.headline
    kinds = _saved_paths(file_store, result)
    assert "top.bin" in kinds and max(p.count("/") + 1 for p in kinds) == mf.MAX_DEPTH
    assert any("folders deep" in w for w in warnings(result)), warnings(result)


def test_a_link_leaving_through_other_links_is_skipped_by_default(file_store, env, tmp_path):
    root = tmp_path / "src" / "t"
    root.mkdir(parents=True)
    (tmp_path / "src" / "secret.txt").write_bytes(b"outside bytes")
    os.symlink(".", root / "a")
    os.symlink("a/..", root / "b")
    os.symlink("b/secret.txt", root / "c")  # resolves to src/secret.txt through a and b
    result = save_from(file_store, env, "k", root)
    assert result.ok, result.headline
    assert _saved_paths(file_store, result) == {"a": "symlink"}
    (line,) = [w for w in warnings(result) if "leaving the saved paths" in w]
    assert "and 1 other link " in line


def test_populate_on_miss_never_saves_through_a_linked_hf_repo_folder(file_store, env, tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET")
    hub = _hub(tmp_path)
    os.symlink(home, hub / "models--org--m")  # planted by an earlier job
    flags = {"layout": "hf", "hf-repo": "org/m", "populate": "true"}
    result, _ = cache_cmd(
        "restore", {**file_store.flags(), "key": "k", "path": str(hub), **flags}, env
    )
    assert result.exit_code == ExitCode.BAD_INPUT, result.headline
    assert "models--org--m is a symlink" in result.headline


def test_a_restores_staging_folder_at_the_top_of_a_saved_folder_is_never_saved(
    file_store, env, tmp_path
):
    """A restore into a mount point stages inside it; killed, it leaves that folder until the
    next restore's sweep: a save meanwhile must not put gpu-ci's own working files in the key."""
    root = tmp_path / "t"
    (root / ".gpuci-staging-t.0123456789abcdef.42" / "tree").mkdir(parents=True)
    (root / ".gpuci-staging-t.0123456789abcdef.42" / "tree" / "half.bin").write_bytes(b"x")
    (root / "model.bin").write_bytes(b"m")
    result = save_from(file_store, env, "k", root)
    assert result.ok, result.headline
    assert _saved_paths(file_store, result) == {"model.bin": "file"}
