"""Restore by manifest digest, and pins: a recorded tree stays restorable whatever its keys do."""

from __future__ import annotations

import hashlib
from pathlib import Path

from cache_testing import cache_cmd, s3_client
from treeutil import snapshot

from gpuci.cache import _layout as layout


def _tree(root: Path, tag: int) -> Path:
    root.mkdir(parents=True)
    (root / "big.bin").write_bytes(bytes([tag]) * 1_200_000)
    (root / "small.txt").write_text(f"tree {tag}\n")
    return root


def _save(store, env, key: str, tree: Path) -> str:
    got, _ = cache_cmd("save", {**store.flags(), "key": key, "path": str(tree)}, env)
    assert got.ok, got.headline
    return got.outputs["manifest"]


def _prune(store, env, dry_run: bool = False):
    flags = {**store.flags(), "older-than": "0s", "grace": "0s"}
    got, _ = cache_cmd("prune", flags, env, dry_run=dry_run)
    assert got.ok, got.headline
    return got


def _restore_manifest(store, env, digest: str, out: Path, dry_run: bool = False, **extra: str):
    flags = {**store.flags(), "manifest": digest, "path": str(out), **extra}
    return cache_cmd("restore", flags, env, dry_run=dry_run)[0]


def test_restore_by_manifest_after_the_key_moved(store, env, tmp_path):
    first = _tree(tmp_path / "v1", 1)
    old = _save(store, env, "data", first)
    _save(store, env, "data", _tree(tmp_path / "v2", 2))  # the key now names another tree

    plan = _restore_manifest(store, env, old, tmp_path / "plan", dry_run=True)
    assert plan.ok, plan.headline
    assert plan.headline.startswith(f"would restore manifest {old[:12]}")
    assert plan.report["manifest"] == old and plan.report["files"] == 2
    assert not (tmp_path / "plan").exists()

    got = _restore_manifest(store, env, f"sha256:{old}", tmp_path / "out")
    assert got.ok, got.headline
    assert got.outputs["manifest"] == old and got.outputs["cache-hit"] is True
    assert got.outputs["matched-key"] == "" and plan.outputs["matched-key"] == ""  # no key used
    assert snapshot(tmp_path / "out") == snapshot(first)


def test_restore_by_manifest_refuses_bad_and_missing_digests(store, env, tmp_path):
    bad = _restore_manifest(store, env, "not-a-digest", tmp_path / "out")
    assert bad.exit_code == 2 and "sha256" in bad.headline
    missing = _restore_manifest(store, env, "a" * 64, tmp_path / "out")
    assert missing.exit_code == 2 and "aaaaaaaaaaaa" in missing.headline
    assert "cache-weights pin" in missing.annotations[0].message
    nothing, _ = cache_cmd("restore", {**store.flags(), "path": str(tmp_path / "o")}, env)
    assert nothing.exit_code == 2 and "key or manifest" in nothing.headline
    assert not (tmp_path / "out").exists()


def test_restore_by_manifest_verifies_the_manifest(store, env, tmp_path):
    digest = _save(store, env, "data", _tree(tmp_path / "t", 1))
    store.put_raw(layout.manifest_key(digest), b'{"format": 1, "entries": []}')  # swapped
    got = _restore_manifest(store, env, digest, tmp_path / "out")
    assert got.exit_code != 0 and "hashes to" in got.headline
    assert not (tmp_path / "out").exists()


def test_pinned_manifest_survives_prune_and_restores_byte_identical(store, env, tmp_path):
    first = _tree(tmp_path / "v1", 1)
    pinned = _save(store, env, "data", first)
    other = _save(store, env, "scratch", _tree(tmp_path / "s", 3))  # never pinned

    plan, _ = cache_cmd(
        "pin", {**store.flags(), "manifest": pinned, "reason": "model m1"}, env, dry_run=True
    )
    assert plan.ok and plan.headline.startswith(f"would pin manifest {pinned[:12]}")
    assert f"pins/{pinned}.json" not in store.object_keys()
    done, _ = cache_cmd("pin", {**store.flags(), "manifest": pinned, "reason": "model m1"}, env)
    assert done.ok, done.headline
    assert f"pins/{pinned}.json" in store.object_keys()

    listed, _ = cache_cmd("ls", {**store.flags(), "pins": "true"}, env)
    assert [(p["manifest"], p["reason"]) for p in listed.report["pins"]] == [(pinned, "model m1")]

    moved = _save(store, env, "data", _tree(tmp_path / "v2", 2))  # the key moves on
    pruned = _prune(store, env)  # every key is stale: only the pin keeps anything
    assert sorted(pruned.report["keys"]) == ["data", "scratch"]
    assert layout.manifest_key(other) in pruned.report["manifests"]  # unpinned: pruned as before
    assert layout.manifest_key(moved) in pruned.report["manifests"]
    assert layout.manifest_key(pinned) not in pruned.report["manifests"]
    assert pruned.report["kept_pinned"] == 1 and "1 pinned manifest(s) kept" in pruned.headline
    own = layout.blob_key(hashlib.sha256(bytes([1]) * 1_200_000).hexdigest())
    assert own in store.object_keys()
    assert layout.blob_key(hashlib.sha256(bytes([3]) * 1_200_000).hexdigest()) not in (
        store.object_keys()
    )
    got = _restore_manifest(store, env, pinned, tmp_path / "out")
    assert got.ok, got.headline
    assert snapshot(tmp_path / "out") == snapshot(first)

    un, _ = cache_cmd("unpin", {**store.flags(), "manifest": pinned}, env)
    assert un.ok and f"pins/{pinned}.json" not in store.object_keys()
    after = _prune(store, env)
    assert layout.manifest_key(pinned) in after.report["manifests"]


def test_pin_refuses_a_manifest_whose_data_is_gone(store, env, tmp_path):
    digest = _save(store, env, "data", _tree(tmp_path / "t", 1))
    blob = layout.blob_key(hashlib.sha256(bytes([1]) * 1_200_000).hexdigest())
    if store.root is not None:
        (store.root / blob).unlink()
    else:
        s3_client(store.endpoint).delete_object(Bucket=store.bucket, Key=f"{store.prefix}/{blob}")
    got, _ = cache_cmd("pin", {**store.flags(), "manifest": digest, "reason": "x"}, env)
    assert got.exit_code != 0 and "missing" in got.headline
    assert f"pins/{digest}.json" not in store.object_keys()


def test_hostile_pin_reason_prints_on_one_line(store, env, tmp_path):
    digest = _save(store, env, "data", _tree(tmp_path / "t", 1))
    store.put_raw(
        f"pins/{digest}.json",
        b'{"format": 1, "manifest": "%s", "reason": "x\\n::error::owned"}' % digest.encode(),
    )
    listed, log = cache_cmd("ls", {**store.flags(), "pins": "true"}, env)
    assert listed.ok and len(listed.report["pins"]) == 1
    assert "\n::error::owned" not in "\n".join(listed.summary) + log
