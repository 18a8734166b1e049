"""layout hf edges: another repo's tree is never restored under the requested name, and one
revision keeps huggingface_hub's own records of it (``trees/<commit>.json``, ``.no_exist/``)."""

from __future__ import annotations

from pathlib import Path

from cache_testing import cache_cmd
from cache_testing import store_flags as _flags
from test_cache_populate_hf import COMMIT_MAIN, COMMIT_OLD, _hub, _scan

HF_A = {"layout": "hf", "hf-repo": "org/tiny"}
HF_B = {"layout": "hf", "hf-repo": "org/requested"}


def test_a_restore_keys_match_saved_for_another_repo_is_a_miss(store, env, tmp_path):
    assert cache_cmd("save", _flags(store, "hf-tiny-1", _hub(tmp_path / "src"), **HF_A), env)[0].ok
    dest = tmp_path / "hub"
    flags = _flags(store, "hf-requested-1", dest, **HF_B, **{"restore-keys": "hf-"})
    for dry_run in (True, False):
        got, _ = cache_cmd("restore", flags, env, dry_run=dry_run)
        assert got.ok, got.headline
        assert got.outputs["cache-hit"] is False and got.outputs["matched-key"] == ""
        assert "miss" in got.headline
        warned = [a.message for a in got.annotations if a.level == "warning"]
        assert any("models--org--tiny" in w and "models--org--requested" in w for w in warned)
        assert not (dest / "models--org--requested").exists()
    # The repo's own older key is still found by the same prefix.
    assert cache_cmd("save", _flags(store, "hf-tiny-2", tmp_path / "src", **HF_A), env)[0].ok
    own = _flags(store, "hf-tiny-3", dest, **HF_A, **{"restore-keys": "hf-"})
    got, _ = cache_cmd("restore", own, env)
    assert got.ok and got.outputs["matched-key"] == "hf-tiny-2"


def test_the_exact_key_saved_for_another_repo_is_bad_input(store, env, tmp_path):
    assert cache_cmd("save", _flags(store, "shared", _hub(tmp_path / "src"), **HF_A), env)[0].ok
    dest = tmp_path / "hub"
    got, _ = cache_cmd("restore", _flags(store, "shared", dest, **HF_B), env)
    assert got.exit_code == 2
    assert "models--org--tiny" in got.headline and "\n" not in got.headline
    assert not dest.exists() or not any(dest.iterdir())


def _hub_with_records(root: Path) -> Path:
    """A hub cache plus the files huggingface_hub writes beside the snapshots."""
    repo = _hub(root) / "models--org--tiny"
    (repo / "trees").mkdir()
    for commit in (COMMIT_MAIN, COMMIT_OLD):
        (repo / "trees" / f"{commit}.json").write_text(f'{{"commit": "{commit}"}}')
        (repo / ".no_exist" / commit).mkdir(parents=True)
        (repo / ".no_exist" / commit / "generation_config.json").write_bytes(b"")
    return root


def test_hf_revision_keeps_the_hubs_tree_listing_and_no_exist_records(store, env, tmp_path):
    src = _hub_with_records(tmp_path / "src")
    revision = {"hf-revision": "main"}
    assert cache_cmd("save", _flags(store, "rev", src, **HF_A, **revision), env)[0].ok
    dest = tmp_path / "hub"
    assert cache_cmd("restore", _flags(store, "rev", dest, **HF_A), env)[0].ok
    repo = dest / "models--org--tiny"
    assert (repo / "trees" / f"{COMMIT_MAIN}.json").read_text() == f'{{"commit": "{COMMIT_MAIN}"}}'
    assert (repo / ".no_exist" / COMMIT_MAIN / "generation_config.json").is_file()
    assert not (repo / "trees" / f"{COMMIT_OLD}.json").exists()  # only that revision
    assert not (repo / ".no_exist" / COMMIT_OLD).exists()
    assert _scan(dest)["org/tiny"]["revisions"] == {COMMIT_MAIN: (2, {"main"})}
    # The same on restore from a whole-repo key.
    assert cache_cmd("save", _flags(store, "all", src, **HF_A), env)[0].ok
    old = tmp_path / "old"
    flags = _flags(store, "all", old, **HF_A, **{"hf-revision": COMMIT_OLD})
    got, _ = cache_cmd("restore", flags, env)
    assert got.ok, got.headline
    repo = old / "models--org--tiny"
    assert (repo / "trees" / f"{COMMIT_OLD}.json").is_file()
    assert (repo / ".no_exist" / COMMIT_OLD / "generation_config.json").exists()
    assert not (repo / "trees" / f"{COMMIT_MAIN}.json").exists()


def test_a_tilde_user_no_one_is_stays_a_name_not_an_internal_error():
    """``Path.expanduser`` raises RuntimeError for ``~nosuchuser``: the path input or
    HF_HUB_CACHE set so ended an hf save or restore as an internal error."""
    from gpuci.cache._format import hf

    odd = "~gpuci-no-such-user-x9/hub"
    assert hf.paths("org/name", [odd], {}) == [f"{odd}/models--org--name"]
    assert str(hf.hub_cache({"HF_HUB_CACHE": odd})) == odd
    assert str(hf.hub_cache({"HF_HOME": odd})) == f"{odd}/hub"


def test_a_ref_holding_a_glob_picks_no_other_snapshot():
    """A ref file is anyone's text: one holding ``*`` made ``snapshots/*/*`` the revision's,
    so a save or restore of hf-revision main took every snapshot in the folder."""
    import pytest

    from gpuci.cache._format import hf
    from gpuci.cache._format import manifest as mf
    from gpuci.errors import InputError

    entries = [
        mf.Entry("file", 0, f"snapshots/{c}/config.json", size=1, sha256="0" * 64)
        for c in ("a" * 40, "b" * 40, "*")
    ]
    entries.append(mf.Entry("file", 0, "refs/main", size=1, sha256="0" * 64))
    manifest = mf.Manifest(key="", roots=[{"path": "/h/models--o--m"}], entries=entries)
    with pytest.raises(InputError, match="has no snapshot"):
        hf.pick_revision(manifest, "main", "?" * 40)
    picked = hf.pick_revision(manifest, "main", "*")  # a snapshot named so is its own
    assert sorted(e.path for e in picked.entries if e.type == "file") == [
        "refs/main",
        "snapshots/*/config.json",
    ]


def test_a_repo_id_holding_a_nul_is_no_repo_id():
    """The Python API's ``hf_repo`` may hold a NUL, which no file name does: it went on to a
    ValueError ('embedded null byte') deep in the save, an internal error."""
    import pytest

    from gpuci.cache._format import hf
    from gpuci.errors import InputError

    with pytest.raises(InputError, match="not a Hugging Face repo id"):
        hf.repo_folder("org/na\0me")
