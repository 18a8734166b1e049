"""populate-on-miss and the Hugging Face layout (checked with huggingface_hub's own scanner)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from cache_testing import cache_cmd
from cache_testing import store_flags as _flags
from huggingface_hub import scan_cache_dir, try_to_load_from_cache
from treeutil import write_tree

COMMIT_MAIN = "a" * 40
COMMIT_OLD = "b" * 40


# ----- populate ------------------------------------------------------------------------------


def test_a_miss_runs_populate_saves_at_once_and_the_next_run_hits(store, env, tmp_path):
    out = tmp_path / "weights"
    command = (
        f"TOKEN=hf_supersecret123 && mkdir -p {out} && "
        f"printf 'w%.0s' $(seq 1 3000) > {out}/model.bin && echo downloaded"
    )
    got, log = cache_cmd("restore", _flags(store, "pop", out, populate=command), env)
    assert got.ok, got.headline
    assert got.outputs["populated"] is True
    assert got.outputs["cache-hit"] is False
    assert got.outputs["bytes-uploaded"] > 3000
    assert got.outputs["files"] == 1
    assert "populate: downloaded" in log  # the command's output is shown...
    assert "hf_supersecret123" not in log  # ...its text is not
    assert "populated pop" in got.headline
    again, _ = cache_cmd("restore", _flags(store, "pop", tmp_path / "w2", populate="false"), env)
    assert again.ok and again.outputs["cache-hit"] is True
    assert again.outputs["populated"] is False  # a hit never runs populate
    assert (tmp_path / "w2" / "model.bin").read_bytes() == b"w" * 3000


def test_a_failing_populate_is_one_error_and_saves_nothing(store, env, tmp_path):
    out = tmp_path / "w"
    got, _ = cache_cmd("restore", _flags(store, "bad", out, populate="echo nope; exit 4"), env)
    assert got.exit_code == 3
    assert "exit code 4" in got.headline and "\n" not in got.headline
    assert not [k for k in store.object_keys() if k.startswith("refs/")]
    missing, _ = cache_cmd("restore", _flags(store, "bad", out, populate="no-such-tool-xyz"), env)
    assert missing.exit_code == 2 and "not found" in missing.headline


def test_dry_run_plans_populate_without_running_it(store, env, tmp_path):
    marker = tmp_path / "ran"
    got, _ = cache_cmd(
        "restore", _flags(store, "dry", tmp_path / "w", populate=f"touch {marker}"), env, True
    )
    assert got.ok and "would run populate" in got.headline
    assert got.outputs["populated"] is False
    assert not marker.exists()


# ----- Hugging Face layout -------------------------------------------------------------------


def _hub(root: Path, repo_folder: str = "models--org--tiny") -> Path:
    """A hub cache as huggingface_hub writes it: blobs, snapshots of relative links, refs."""
    repo = root / repo_folder
    files = {
        COMMIT_MAIN: {"config.json": b'{"hidden": 8}', "model.safetensors": b"\x01" * 5000},
        COMMIT_OLD: {"config.json": b'{"hidden": 4}', "model.safetensors": b"\x02" * 4000},
    }
    for commit, items in files.items():
        for name, data in items.items():
            digest = hashlib.sha256(data).hexdigest()
            blob = repo / "blobs" / digest
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
            link = repo / "snapshots" / commit / name
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../blobs/{digest}", link)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT_MAIN)
    return root


def _scan(root: Path) -> dict:
    info = scan_cache_dir(root)
    assert not info.warnings, info.warnings
    return {
        repo.repo_id: {
            "type": repo.repo_type,
            "revisions": {r.commit_hash: (r.nb_files, set(r.refs)) for r in repo.revisions},
        }
        for repo in info.repos
    }


def test_hf_layout_round_trip_is_a_valid_hub_cache_usable_offline(store, env, tmp_path):
    src = _hub(tmp_path / "hub-src")
    hf = {"layout": "hf", "hf-repo": "org/tiny"}
    saved, _ = cache_cmd("save", _flags(store, "hf-1", src, **hf), env)
    assert saved.ok, saved.headline
    assert saved.outputs["files"] == 5  # 4 blobs and refs/main; links stay links
    dest = tmp_path / "hub-dst"
    tier = {"local-cache": str(tmp_path / "tier")}
    got, _ = cache_cmd("restore", _flags(store, "hf-1", dest, **hf, **tier), env)
    assert got.ok, got.headline
    assert _scan(dest) == _scan(src)
    again, _ = cache_cmd("restore", _flags(store, "hf-1", tmp_path / "hub-warm", **hf, **tier), env)
    assert again.outputs["bytes-from-local"] == 5000 + 4000 + 13 * 2 + 40
    assert _scan(tmp_path / "hub-warm") == _scan(src)
    ref_main = tmp_path / "hub-warm" / "models--org--tiny" / "refs" / "main"
    assert ref_main.stat().st_mode & 0o200  # small files stay writable: hf rewrites refs/main
    link = dest / "models--org--tiny" / "snapshots" / COMMIT_MAIN / "config.json"
    assert link.is_symlink() and os.readlink(link).startswith("../../blobs/")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        found = try_to_load_from_cache("org/tiny", "config.json", cache_dir=dest)
    finally:
        del os.environ["HF_HUB_OFFLINE"]
    assert isinstance(found, str) and Path(found).read_bytes() == b'{"hidden": 8}'


def test_hf_revision_saves_and_restores_one_revision(store, env, tmp_path):
    src = _hub(tmp_path / "hub-src")
    hf = {"layout": "hf", "hf-repo": "org/tiny"}
    saved, _ = cache_cmd(
        "save", _flags(store, "hf-main", src, **hf, **{"hf-revision": "main"}), env
    )
    assert saved.ok and saved.outputs["files"] == 3  # two blobs and refs/main
    dest = tmp_path / "hub-main"
    assert cache_cmd("restore", _flags(store, "hf-main", dest, **hf), env)[0].ok
    assert _scan(dest) == {"org/tiny": {"type": "model", "revisions": {COMMIT_MAIN: (2, {"main"})}}}
    # A whole-repo key restored for one revision: only that snapshot and its blobs come back.
    assert cache_cmd("save", _flags(store, "hf-all", src, **hf), env)[0].ok
    old = tmp_path / "hub-old"
    got, _ = cache_cmd(
        "restore", _flags(store, "hf-all", old, **hf, **{"hf-revision": COMMIT_OLD}), env
    )
    assert got.ok, got.headline
    assert _scan(old) == {"org/tiny": {"type": "model", "revisions": {COMMIT_OLD: (2, set())}}}
    bad, _ = cache_cmd("save", _flags(store, "x", src, **hf, **{"hf-revision": "nope"}), env)
    assert bad.exit_code == 2 and "nope" in bad.headline


def test_hf_layout_defaults_to_hf_hub_cache_and_checks_the_repo_id(store, env, tmp_path):
    src = _hub(tmp_path / "hub", "datasets--org--data")
    env = {**env, "HF_HUB_CACHE": str(src)}
    hf = {"layout": "hf", "hf-repo": "datasets/org/data"}
    assert cache_cmd("save", {**store.flags(), "key": "ds", **hf}, env)[0].ok
    env["HF_HUB_CACHE"] = str(tmp_path / "fresh")
    assert cache_cmd("restore", {**store.flags(), "key": "ds", **hf}, env)[0].ok
    assert _scan(tmp_path / "fresh")["org/data"]["type"] == "dataset"
    for bad_repo in ("", "a/b/c/d", "../x"):
        got, _ = cache_cmd(
            "restore", {**store.flags(), "key": "ds", "layout": "hf", "hf-repo": bad_repo}, env
        )
        assert got.exit_code == 2, bad_repo


@pytest.mark.parametrize("layout_value", ["zip"])
def test_unknown_layout_is_refused(store, env, tmp_path, layout_value):
    got, _ = cache_cmd("save", _flags(store, "k", tmp_path, layout=layout_value), env)
    assert got.exit_code == 2 and "plain" in got.headline


def test_a_restore_keys_match_is_restored_then_populate_tops_it_up(store, env, tmp_path):
    out = write_tree(tmp_path / "w", {"base.bin": b"b" * 2000})
    assert cache_cmd("save", _flags(store, "w-old", out), env)[0].ok
    fresh = tmp_path / "job"
    command = f"test -f {fresh}/base.bin && printf new > {fresh}/extra.bin"
    flags = _flags(store, "w-new", fresh, populate=command, **{"restore-keys": "w-"})
    got, _ = cache_cmd("restore", flags, env)
    assert got.ok, got.headline
    assert got.outputs["populated"] is True and got.outputs["cache-hit"] is False
    assert got.outputs["matched-key"] == "w-old"
    check, _ = cache_cmd("restore", _flags(store, "w-new", tmp_path / "next"), env)
    assert check.outputs["cache-hit"] is True and check.outputs["files"] == 2
