"""Prune and ls: unused keys go, shared and young objects stay, a racing save stays whole."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from cache_testing import cache_cmd, next_store_second, s3_client
from cache_testing import store_flags as _flags
from treeutil import snapshot

from gpuci.cache import _layout as layout
from gpuci.cache._format import refs
from gpuci.cache._save import operation as save_mod
from gpuci.cache._stores import open_store
from gpuci.cache._upkeep import prune
from gpuci.errors import ConflictError


def _tree(root: Path, tag: int, shared: bytes) -> Path:
    root.mkdir(parents=True)
    (root / "own.bin").write_bytes(bytes([tag]) * 1_200_000)
    (root / "shared.bin").write_bytes(shared)
    (root / "config.json").write_text(f'{{"tag": {tag}}}')
    return root


def _prune(store, env, dry_run: bool = False, **extra: str):
    return cache_cmd("prune", {**store.flags(), **extra}, env, dry_run=dry_run)


def test_prune_drops_stale_keys_then_what_only_they_reached(store, env, tmp_path):
    shared = os.urandom(1_500_000)
    trees = {}
    for n, key in enumerate(["model-a-1", "model-a-2", "model-b-1"]):
        trees[key] = _tree(tmp_path / key, n, shared)
        assert cache_cmd("save", _flags(store, key, trees[key]), env)[0].ok
        next_store_second(store)  # S3 times have 1 s resolution
    before = store.object_keys()
    plan, _ = _prune(store, env, dry_run=True, **{"older-than": "0s", "keep": "1", "grace": "0s"})
    assert plan.ok, plan.headline
    assert plan.report["keys"] == ["model-a-1"]
    assert len(plan.report["manifests"]) == 1
    own = layout.blob_key(__import__("hashlib").sha256(bytes([0]) * 1_200_000).hexdigest())
    assert own in plan.report["data"]
    assert plan.report["bytes_freed"] > 1_200_000
    assert "would delete 1 key(s)" in plan.headline
    assert store.object_keys() == before  # a dry run deletes nothing

    done, _ = _prune(store, env, **{"older-than": "0s", "keep": "1", "grace": "0s"})
    assert done.ok and done.report["data"] == plan.report["data"]
    keys = store.object_keys()
    assert "refs/default/model-a-1" not in keys and own not in keys
    for key in ("model-a-2", "model-b-1"):  # the survivors restore whole; shared.bin survived
        out = tmp_path / f"out-{key}"
        got, _ = cache_cmd("restore", _flags(store, key, out), env)
        assert got.ok, got.headline
        assert snapshot(out) == snapshot(trees[key])

    only_b, _ = _prune(store, env, True, **{"older-than": "0s", "prefix": "model-b"})
    assert only_b.report["keys"] == ["model-b-1"]
    young, _ = _prune(store, env, **{"older-than": "0s", "grace": "1h"})
    assert young.report["keys"] == ["model-b-1", "model-a-2"]
    assert young.report["data"] == [] and young.report["manifests"] == []
    assert young.report["kept_young"] == 2  # both manifests, which keep their blobs
    assert young.annotations and "grace" in young.annotations[0].message


def test_recently_restored_keys_are_kept_and_ls_shows_last_use(store, env, tmp_path):
    tree = _tree(tmp_path / "t", 1, b"x" * 10)
    assert cache_cmd("save", _flags(store, "used", tree), env)[0].ok
    assert cache_cmd("save", _flags(store, "idle", tree), env)[0].ok
    listed, _ = cache_cmd("ls", store.flags(), env)
    assert {k["key"]: k["last_used"] for k in listed.report["keys"]} == {
        "used": None,
        "idle": None,
    }
    assert cache_cmd("restore", _flags(store, "used", tmp_path / "o"), env)[0].ok
    listed, _ = cache_cmd("ls", store.flags(), env)
    uses = {k["key"]: k["last_used"] for k in listed.report["keys"]}
    assert uses["idle"] is None and uses["used"] > time.time() - 60
    assert "| last use |" in listed.summary[0] and "never" in listed.summary[0]
    if store.kind == "local":  # saved two days ago; "used" was restored just now
        for name in ("used", "idle"):
            os.utime(store.root / "refs" / "default" / name, (time.time() - 2 * 86400,) * 2)
        pruned, _ = _prune(store, env, **{"older-than": "1d", "grace": "1h"})
        assert pruned.report["keys"] == ["idle"]


@pytest.mark.parametrize("reuse_old_orphan", [False, True])
def test_a_prune_racing_a_save_never_deletes_a_blob_the_new_ref_needs(
    store, env, tmp_path, monkeypatch, reuse_old_orphan
):
    if reuse_old_orphan and store.kind != "local":
        pytest.skip("backdating an object needs the file store (S3 sets LastModified itself)")
    tree = _tree(tmp_path / "t", 7, os.urandom(1_300_000))
    if reuse_old_orphan:  # an earlier save's blobs, orphaned and ten days old
        assert cache_cmd("save", _flags(store, "gone", tree), env)[0].ok
        for key in store.object_keys():
            if key.startswith(("refs/", "manifests/")):
                (store.root / key).unlink()
            else:
                os.utime(store.root / key, (time.time() - 10 * 86400,) * 2)
    original = refs.write
    pruned = []

    def prune_then_write(*args, **kwargs):  # the worst moment: blobs and manifest in, no ref
        got, _ = _prune(store, env, **{"older-than": "0s"})
        pruned.append(got)
        return original(*args, **kwargs)

    monkeypatch.setattr(save_mod.refs, "write", prune_then_write)
    saved, _ = cache_cmd("save", _flags(store, "new", tree), env)
    assert saved.ok, saved.headline
    assert pruned and pruned[0].ok and pruned[0].report["data"] == []
    out = tmp_path / "out"
    got, _ = cache_cmd("restore", _flags(store, "new", out), env)
    assert got.ok, got.headline
    assert snapshot(out) == snapshot(tree)


def _backdate_all(root: Path, days: float) -> None:
    old = time.time() - days * 86400
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (old, old))


def test_a_save_that_builds_an_old_pack_again_keeps_it_from_a_prune_planned_before(env, tmp_path):
    """Prune plans to drop a month-old key and its pack; a save of the same small files under a
    new key builds the very same pack, finds it stored, and must make it young: prune's re-check
    before the delete then keeps it, and the new key restores."""
    root = tmp_path / "store"
    store = open_store(root.as_uri())
    tree = tmp_path / "t"
    tree.mkdir()
    for i in range(3):
        (tree / f"cfg{i}.json").write_text(f'{{"i": {i}}}' * 50)
    assert cache_cmd("save", _flags(root.as_uri(), "old-1", tree), env)[0].ok
    _backdate_all(root, 30)
    work = prune.plan(store, "default", "", older_than=14 * 86400, keep=0, grace=6 * 3600)
    assert any(item.key.startswith("packs/") for item in work.data)
    saved, _ = cache_cmd("save", _flags(root.as_uri(), "new-1", tree), env)
    assert saved.ok, saved.headline
    prune.execute(store, work, 6 * 3600, "default")
    out = tmp_path / "out"
    got, _ = cache_cmd("restore", _flags(root.as_uri(), "new-1", out), env)
    assert got.ok and got.report["hit"], got.headline
    assert snapshot(out) == snapshot(tree)


def _prune_right_after_the_lookup(monkeypatch, root: Path) -> None:
    """Plan a prune of what is over 14 days old now; run its deletes right after the restore's
    first ref lookup (the worst moment: the ref read, its manifest not yet)."""
    store = open_store(root.as_uri())
    work = prune.plan(store, "default", "", older_than=14 * 86400, keep=0, grace=6 * 3600)
    assert work.refs and work.manifests
    original = refs.lookup
    calls = []

    def lookup_then_prune(*args, **kwargs):
        got = original(*args, **kwargs)
        if not calls:
            prune.execute(store, work, 6 * 3600, "default")
        calls.append(got)
        return got

    monkeypatch.setattr(refs, "lookup", lookup_then_prune)


def _small_tree(root: Path, tag: str) -> Path:
    root.mkdir(parents=True)
    (root / "f.txt").write_text(tag * 20)
    return root


def test_a_restore_whose_ref_prune_deletes_mid_lookup_is_a_miss(env, tmp_path, monkeypatch):
    root = tmp_path / "store"
    url = root.as_uri()
    assert cache_cmd("save", _flags(url, "weights-v1", _small_tree(tmp_path / "t", "a")), env)[0].ok
    _backdate_all(root, 30)
    _prune_right_after_the_lookup(monkeypatch, root)
    got, _ = cache_cmd("restore", _flags(url, "weights-v1", tmp_path / "out"), env)
    assert got.exit_code == 0, got.headline
    assert got.report["hit"] is False and "miss" in got.headline
    assert not (tmp_path / "out" / "f.txt").exists()


def test_a_restore_keys_match_prune_deletes_mid_lookup_gives_way_to_the_next(
    env, tmp_path, monkeypatch
):
    """w-2, the newest match, is stale and pruned just after it was looked up; w-1, older but
    restored lately, stays: the lookup is made again and restores w-1."""
    root = tmp_path / "store"
    url = root.as_uri()
    trees = {key: _small_tree(tmp_path / key, key[-1]) for key in ("w-1", "w-2")}
    for key, tree in trees.items():
        assert cache_cmd("save", _flags(url, key, tree), env)[0].ok
    _backdate_all(root, 30)
    os.utime(root / "refs" / "default" / "w-1", (time.time() - 31 * 86400,) * 2)
    assert refs.touch_use(open_store(url), "default", "w-1") is None  # used today
    _prune_right_after_the_lookup(monkeypatch, root)
    out = tmp_path / "out"
    got, _ = cache_cmd("restore", _flags(url, "w-9", out, **{"restore-keys": "w-"}), env)
    assert got.exit_code == 0, got.headline
    assert got.outputs["matched-key"] == "w-1", got.headline
    assert snapshot(out) == snapshot(trees["w-1"])


def test_a_ref_naming_a_missing_manifest_is_a_miss_with_a_warning(env, tmp_path):
    root = tmp_path / "store"
    url = root.as_uri()
    assert cache_cmd("save", _flags(url, "k", _small_tree(tmp_path / "t", "a")), env)[0].ok
    for manifest in (root / "manifests").rglob("*"):
        if manifest.is_file():
            manifest.unlink()
    got, _ = cache_cmd("restore", _flags(url, "k", tmp_path / "out"), env)
    assert got.exit_code == 0, got.headline
    assert got.report["hit"] is False
    warned = [a.message for a in got.annotations if "is missing" in a.message]
    assert len(warned) == 1 and "treated as a miss" in warned[0], got.annotations


def test_a_key_saved_again_unchanged_counts_as_used_and_prune_keeps_it(env, tmp_path):
    """A key first saved a month ago and saved again today with the same tree (no new ref):
    today's save is recorded as a use, so a 14-day prune keeps the key."""
    root = tmp_path / "store"
    url = root.as_uri()
    tree = _small_tree(tmp_path / "t", "a")
    assert cache_cmd("save", _flags(url, "nightly", tree), env)[0].ok
    _backdate_all(root, 30)
    again, _ = cache_cmd("save", _flags(url, "nightly", tree), env)
    assert again.ok and again.outputs["outcome"] == "unchanged", again.headline
    assert not again.annotations
    listed, _ = cache_cmd("ls", {"store": url}, env)
    assert listed.report["keys"][0]["last_used"] > time.time() - 3600
    pruned, _ = cache_cmd("prune", {"store": url, "older-than": "14d"}, env)
    assert pruned.ok and pruned.report["keys"] == [], pruned.headline
    got, _ = cache_cmd("restore", _flags(url, "nightly", tmp_path / "out"), env)
    assert got.ok and got.report["hit"], got.headline


def test_a_save_that_loses_to_the_same_tree_records_a_use(env, tmp_path, monkeypatch):
    """Another job saves the same tree under the key first: this save's outcome is
    same-content, writes no ref of its own, and records the key's use."""
    url = (tmp_path / "store").as_uri()
    tree = _small_tree(tmp_path / "t", "a")
    original = refs.write

    def other_job_first(*args, **kwargs):
        monkeypatch.setattr(save_mod.refs, "write", original)
        assert cache_cmd("save", _flags(url, "k", tree), env)[0].ok  # the other job
        assert refs.last_uses(open_store(url), "default") == {}  # its save records no use
        raise ConflictError("refs/default/k was changed by someone else since it was read")

    monkeypatch.setattr(save_mod.refs, "write", other_job_first)
    saved, _ = cache_cmd("save", _flags(url, "k", tree), env)
    assert saved.ok and saved.outputs["outcome"] == "same-content", saved.headline
    assert "k" in refs.last_uses(open_store(url), "default")


def test_touch_makes_an_s3_object_young(s3_store, env):
    s3 = open_store(s3_store.url, endpoint_url=s3_store.endpoint, environ=env)
    s3.put("blobs/sha256/ab/x", b"payload")
    first = s3.head("blobs/sha256/ab/x")
    next_store_second()
    s3.touch("blobs/sha256/ab/x")
    after = s3.head("blobs/sha256/ab/x")
    assert first and after and after.modified > first.modified
    assert s3.get("blobs/sha256/ab/x")[0] == b"payload"


def test_prune_inputs_are_checked(store, env):
    bad, _ = _prune(store, env, **{"older-than": "soon"})
    assert bad.exit_code == 2 and "older-than" in bad.headline


def test_prune_aborts_the_multipart_uploads_killed_saves_left_open(s3_store, env):
    """A save killed mid-upload (SIGTERM, a runner gone) leaves its multipart upload open, its
    parts billed: prune aborts those under blobs/ older than its grace, and reports them; one
    outside blobs/ (not gpu-ci's) stays (review H, 7). moto dates every upload 2010: the
    grace's own test is test_cache_s3_stop's, on a canned listing."""
    client = s3_client(s3_store.endpoint)
    blob = f"{s3_store.prefix}/blobs/sha256/ab/" + "ab" * 32
    other = f"{s3_store.prefix}/elsewhere/upload.bin"
    for key in (blob, other):
        client.create_multipart_upload(Bucket=s3_store.bucket, Key=key)

    def open_keys() -> list[str]:
        listed = client.list_multipart_uploads(Bucket=s3_store.bucket)
        return sorted(u["Key"] for u in listed.get("Uploads", []))

    next_store_second()
    planned, _ = _prune(s3_store, env, dry_run=True, **{"older-than": "0s", "grace": "0s"})
    assert planned.ok and open_keys() == sorted([blob, other]), planned.headline
    assert "1 temp file(s)" in planned.headline, planned.headline
    done, _ = _prune(s3_store, env, **{"older-than": "0s", "grace": "0s"})
    assert done.ok and "1 temp file(s)" in done.headline, done.headline
    assert open_keys() == [other]
    (left,) = done.report["leftovers"]
    assert left.startswith("blobs/sha256/ab/" + "ab" * 32 + "?uploadId="), left
    again, _ = _prune(s3_store, env, **{"older-than": "0s", "grace": "0s"})
    assert again.ok and "temp file" not in again.headline, again.headline
